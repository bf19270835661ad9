"""Compilers: source text -> loadable bytes, with an on-disk cache.

In: a program's source (C text, assembly, ...). Out: bytes a device's program loader
accepts (for the CPU: a shared object).

`Compiler.compile_cached(src)` looks in `<cache_dir()>/compile/` first. The key is the
sha256 of the compiler's identity (`cache_key`), its flags and the source. An entry is
`MAGIC | payload length (8 bytes, little endian) | sha256(payload) | payload`, written to
a temp file and renamed into place, so a reader never sees half an entry; an entry whose
header does not match its payload (truncated, corrupt, foreign) is recompiled and
replaced. A cache that cannot be read or written is skipped, never fatal.

`ClangCompiler`'s ISA flags come from `archflags.c_target` (on x86-64: the explicit flags of the
vector ISA level the CPU, its OS and TG_ISA allow, checked by running a program once per machine).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

from tgcore.helpers import cache_dir, write_atomically
from tgcore.runtime.archflags import CTarget, binary_identity, c_target

CACHE_MAGIC = b"TGCC\x01"
_HEADER_LEN = len(CACHE_MAGIC) + 8 + 32


class CompileError(RuntimeError):
    """Compilation failed. `.message` is the compiler's output, `.source` the input text."""

    def __init__(self, message: str, source: str):
        self.message = message
        self.source = source
        numbered = "\n".join(f"{i + 1:4d} | {line}" for i, line in enumerate(source.splitlines()))
        super().__init__(f"{message.rstrip()}\n--- source ---\n{numbered}")


class CompilerNotFoundError(RuntimeError):
    """No usable compiler executable was found."""


class Compiler:
    """Base compiler. Subclasses implement `compile` and set `cache_key` (a string naming the
    compiler and its version/flags) to enable the disk cache; `cache_key = None` disables it.
    """

    cache_key: str | None = None

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def cache_identity(self) -> str | None:
        """The identity hashed into cache keys (defaults to `cache_key`)."""
        return self.cache_key

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, served from the on-disk cache when a valid entry exists."""
        identity = self.cache_identity()
        if identity is None:
            return self.compile(src)
        digest = hashlib.sha256(f"{identity}\0{src}".encode()).hexdigest()
        path = cache_dir() / "compile" / digest[:2] / digest
        cached = _read_entry(path)
        if cached is not None:
            return cached
        lib = self.compile(src)
        _write_entry(path, lib)
        return lib


def _read_entry(path: pathlib.Path) -> bytes | None:
    """The payload of a valid cache entry, or None (missing, unreadable or corrupt)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEADER_LEN or not data.startswith(CACHE_MAGIC):
        return None
    start = len(CACHE_MAGIC)
    length = int.from_bytes(data[start:start + 8], "little")
    checksum = data[start + 8:_HEADER_LEN]
    payload = data[_HEADER_LEN:]
    if len(payload) != length or hashlib.sha256(payload).digest() != checksum:
        return None
    return payload


def _write_entry(path: pathlib.Path, payload: bytes) -> None:
    """Write a cache entry atomically (temp file + rename); give up quietly on OS errors."""
    header = CACHE_MAGIC + len(payload).to_bytes(8, "little") + hashlib.sha256(payload).digest()
    try:
        write_atomically(path, header + payload)
    except OSError:
        pass


def find_c_compiler() -> str:
    """Path of the C compiler: env CC if set (must exist), else cc, clang or gcc on PATH."""
    forced = os.environ.get("CC")
    if forced:
        found = shutil.which(forced)
        if found is None:
            raise CompilerNotFoundError(
                f"C compiler CC={forced!r} was not found; set CC to an existing compiler (e.g. cc, clang, gcc) "
                "or unset it to search PATH"
            )
        return found
    for candidate in ("cc", "clang", "gcc"):
        found = shutil.which(candidate)
        if found is not None:
            return found
    raise CompilerNotFoundError(
        "no C compiler found (looked for cc, clang, gcc on PATH); install one (e.g. `apt install gcc`) "
        "or set CC to its path"
    )


class ClangCompiler(Compiler):
    """C source -> shared object bytes via the system C compiler (cc/clang/gcc; env CC overrides).

    Kernels include no headers; math goes through compiler builtins. The compiler is looked up
    at compile time, so constructing this never fails; a missing compiler raises
    CompilerNotFoundError, a compile failure CompileError with the compiler's message.
    Without explicit ``flags``, the ISA flags come from ``target()`` (``archflags.c_target``: on x86-64
    the level TG_ISA or the CPU allows, checked by running a program once per machine), resolved on first use.
    """

    def __init__(self, cc: str | None = None, flags: list[str] | None = None):
        self.cc = cc
        self._flags = list(flags) if flags is not None else None
        self._target: CTarget | None = None

    def executable(self) -> str:
        if self.cc is not None:
            found = shutil.which(self.cc)
            if found is None:
                raise CompilerNotFoundError(f"C compiler {self.cc!r} was not found")
            return found
        return find_c_compiler()

    def target(self) -> CTarget:
        """The ISA level and flags for kernels built by this compiler here (x86-64: verified, see ``archflags``);
        what ``flags`` uses unless explicit flags were given."""
        if self._target is None:
            self._target = c_target(self.executable())
        return self._target

    @property
    def flags(self) -> list[str]:
        """The command-line flags of every compile (part of the cache identity)."""
        if self._flags is None:
            self._flags = ["-O2", *self.target().flags, "-shared", "-fPIC", "-fno-math-errno"]
        return self._flags

    def cache_identity(self) -> str:
        return f"{type(self).__name__}|{binary_identity(self.executable())}|{' '.join(self.flags)}"

    def compile(self, src: str) -> bytes:
        exe = self.executable()
        with tempfile.TemporaryDirectory(prefix="tgcore-cc-") as tmp:
            out = os.path.join(tmp, "kernel.so")
            result = subprocess.run(
                [exe, *self.flags, "-x", "c", "-", "-o", out], input=src.encode(), capture_output=True,
            )
            if result.returncode != 0:
                message = result.stderr.decode(errors="replace") or result.stdout.decode(errors="replace")
                raise CompileError(f"{exe} failed (exit code {result.returncode}):\n{message}", src)
            with open(out, "rb") as f:
                return f.read()
