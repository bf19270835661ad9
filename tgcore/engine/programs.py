"""Generated programs on disk: what code generation made for a kernel, kept so a later process skips it.

In:  a kernel AST as the scheduler made it, the device, its renderer and the threads it offers.
Out: the ``ProgramSpec`` ``codegen.get_program`` made for it earlier (its rendered source or machine code, variables,
     threads, estimates; not the linear program ``uops``), or None.

``realize.compile_runner`` asks ``programs.lookup`` before running code generation and hands what it made to
``programs.store``; the compiler's own disk cache then turns C source into a library without running cc. Code
generation is most of a new kernel's cost once the compiler's cache is warm (a server's warm-up: ~40%).

Key: the sha256 of the kernel's fingerprint (``codegen.search.kernel_fingerprint``: the graph's structure, the same
in every process), the device, the renderer (class, name and every plain setting it holds: vector widths, unrolled
trips, ...), its compiler's identity, the CPU's identity and ISA level, the threads, the tgcore version and a digest
of the code that generates programs (the sources of tgcore and of the renderer's package, so a changed pass misses
instead of serving old code). A kernel without a stable fingerprint, a hand-written one, and an output that is
neither text nor bytes are not kept.

The optimizations come from ``engine.beam``'s policy, which reads stored BEAM winners: an entry records the winner it
was made with (the winner file's digest, or that no winner was stored anywhere), and is stale once that changed.

Entry: ``<cache_dir()>/programs/<key[:2]>/<key>.json``, JSON ``{format, key, spec, winner, meta, checksum}``
(``checksum``: sha256 of the rest), written to a temp file and renamed into place. An entry that does not parse,
fails its checksum, belongs to another key or format, or was made with another BEAM winner is ignored with a warning
naming the file, and replaced. ``TG_PROGRAM_CACHE=0`` turns the cache off; ``realize`` does not read it while BEAM
searches or a run watches the passes (``realize.passes_watched``: TG_SPEC, VIZ, ...).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import pathlib
import sys
import threading
import warnings
from enum import Enum
from typing import Any

from tgcore.codegen import ProgramSpec
from tgcore.codegen.search import kernel_fingerprint
from tgcore.custom import is_custom_program
from tgcore.dtype import DType
from tgcore.helpers import ContextVar, cache_dir, write_atomically
from tgcore.renderer import Renderer
from tgcore.uop import UOp

PROGRAM_CACHE = ContextVar("TG_PROGRAM_CACHE", 1)  # 0: code generation runs for every kernel a process meets
ENTRY_FORMAT = 1  # bump when the entry layout or the key's parts change


class ProgramStats:
    """What the cache did in this process (tests and benches read it)."""
    hits = 0
    misses = 0    # lookups without a usable entry (code generation ran)
    stored = 0


@dataclasses.dataclass(frozen=True)
class ProgramKey:
    digest: str
    parts: dict[str, Any]  # what went into the digest (less the fingerprint): stored with the entry, for people


def program_key(device: str, ast: UOp, renderer: Renderer, threads: int) -> ProgramKey | None:
    """The key of ``ast`` on ``device`` here, or None when the cache is off or the kernel is not kept."""
    if not PROGRAM_CACHE.value or is_custom_program(ast):
        return None
    fingerprint = kernel_fingerprint(ast)
    if fingerprint is None:
        return None
    from tgcore.engine.beam import machine_parts
    parts = {**machine_parts(device, renderer, threads), "settings": renderer_settings(renderer),
             "code": code_digest(renderer)}
    text = json.dumps({"format": ENTRY_FORMAT, **parts, "fingerprint": fingerprint}, sort_keys=True)
    return ProgramKey(hashlib.sha256(text.encode()).hexdigest(), parts)


def renderer_settings(renderer: Renderer) -> str:
    """Every plain setting of the renderer (class attributes along its classes, then its own): what code generation
    reads from it besides code (vector widths, unrolled trips, emulated floats, ...). Callables and objects without
    a stable spelling (pattern matchers: code, in ``code_digest``) are left out."""
    settings: dict[str, str] = {}
    for scope in [*reversed(type(renderer).__mro__), renderer]:
        for name, value in vars(scope).items():
            spelled = None if name.startswith("__") else _spelling(value)
            if spelled is not None:
                settings[name] = spelled
    return " ".join(f"{k}={v}" for k, v in sorted(settings.items()))


def _spelling(value: Any) -> str | None:
    """A spelling of a plain value that is the same in every process, or None."""
    if value is None or isinstance(value, bool | int | float | str | Enum):
        return repr(value)
    if isinstance(value, tuple | list | set | frozenset):
        parts = [p for p in map(_spelling, value) if p is not None]
        if len(parts) != len(value):
            return None
        # (a set's iteration order depends on string hashing: sorted)
        return f"({','.join(parts)})" if isinstance(value, tuple | list) else "{" + ",".join(sorted(parts)) + "}"
    if isinstance(value, dict):
        items = [(_spelling(k), _spelling(v)) for k, v in value.items()]
        return None if any(None in kv for kv in items) else "{" + ",".join(sorted(f"{k}:{v}" for k, v in items)) + "}"
    if isinstance(value, DType) or dataclasses.is_dataclass(value) and not isinstance(value, type):
        text = repr(value)
        return None if " at 0x" in text else text
    return None


_code_digests: dict[tuple[pathlib.Path, ...], str] = {}
_code_lock = threading.Lock()


def code_digest(renderer: Renderer) -> str:
    """sha256 over the Python sources of tgcore and of the package the renderer's class comes from (once per
    process): programs made by other code are other keys."""
    import tgcore
    roots = [pathlib.Path(tgcore.__file__).parent]
    package = sys.modules.get(type(renderer).__module__.split(".")[0])
    file = getattr(package, "__file__", None)
    if file is not None and pathlib.Path(file).parent not in roots:
        roots.append(pathlib.Path(file).parent)
    key = tuple(roots)
    with _code_lock:
        if key not in _code_digests:
            h = hashlib.sha256()
            for root in roots:
                for path in sorted(root.rglob("*.py")):
                    h.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
                    h.update(path.read_bytes())
            _code_digests[key] = h.hexdigest()
        return _code_digests[key]


class _Unusable(Exception):
    """Why an entry cannot be used."""


class ProgramCache:
    """The owner of stored programs: files under ``cache_dir()/programs`` (no memo: ``realize`` keeps what it
    loaded in memory)."""

    @staticmethod
    def path(digest: str) -> pathlib.Path:
        return cache_dir() / "programs" / digest[:2] / f"{digest}.json"

    def lookup(self, key: ProgramKey) -> ProgramSpec | None:
        """The stored program for ``key``; None when there is none or it is unusable (warned about, naming the
        file)."""
        path = self.path(key.digest)
        try:
            spec = _parse(path.read_bytes(), key.digest)
        except FileNotFoundError:
            ProgramStats.misses += 1
            return None
        except (OSError, _Unusable) as e:
            why = f"cannot be read ({e})" if isinstance(e, OSError) else str(e)
            warnings.warn(f"program cache entry {path} {why}: ignored, the program is generated again",
                          stacklevel=3)
            ProgramStats.misses += 1
            return None
        ProgramStats.hits += 1
        return spec

    def store(self, key: ProgramKey, spec: ProgramSpec, winner: str) -> None:
        """Write ``spec`` for ``key``, made with the BEAM ``winner`` stamp (``beam.winner_stamp``); an output that is
        neither text nor bytes is not kept, an unwritable cache is skipped."""
        if isinstance(spec.src, str):
            src: dict[str, str] = {"text": spec.src}
        elif isinstance(spec.src, bytes):
            src = {"base64": base64.b64encode(spec.src).decode()}
        else:
            return
        body = {"format": ENTRY_FORMAT, "key": key.digest, "winner": winner, "meta": key.parts,
                "spec": {"name": spec.name, **src, "vars": list(spec.vars), "threads": spec.threads, "ops": spec.ops,
                         "mem": spec.mem, "buf_slots": list(spec.buf_slots)}}
        try:
            write_atomically(self.path(key.digest), json.dumps({**body, "checksum": _checksum(body)}).encode())
        except OSError:
            return
        ProgramStats.stored += 1


programs = ProgramCache()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _parse(raw: bytes, digest: str) -> ProgramSpec:
    from tgcore.engine.beam import winner_still
    try:
        entry = json.loads(raw)
    except ValueError as e:
        raise _Unusable(f"is not valid JSON ({e})") from None
    if not isinstance(entry, dict) or not {"format", "key", "winner", "spec", "checksum"} <= entry.keys():
        raise _Unusable("is not a program entry (fields missing)")
    body = {k: v for k, v in entry.items() if k != "checksum"}
    if entry["checksum"] != _checksum(body):
        raise _Unusable("fails its checksum (corrupt or edited)")
    if entry["format"] != ENTRY_FORMAT or entry["key"] != digest:
        raise _Unusable(f"was written for another key or entry format ({entry['format']!r})")
    if not winner_still(entry["winner"]):
        raise _Unusable("was made with a BEAM winner that changed since")
    s = entry["spec"]
    try:
        src: str | bytes = s["text"] if "text" in s else base64.b64decode(s["base64"])
        return ProgramSpec(str(s["name"]), src, tuple(str(v) for v in s["vars"]), int(s["threads"]), int(s["ops"]),
                           int(s["mem"]), tuple(int(b) for b in s["buf_slots"]))
    except (KeyError, TypeError, ValueError) as e:
        raise _Unusable(f"holds a malformed program ({e!r})") from None
