"""C compiler flags for the host's vector ISA, checked once per machine by running a program built with them.

In:  a C compiler's path, the CPU probe (``cpufeatures``), env TG_ISA.
Out: ``c_target(cc)``: a ``CTarget``, the ISA level kernels built by ``cc`` target and the flags that select it.

On x86-64 the flags name the ISA explicitly (``IsaLevel.c_flags``: never -march=native, so never AMX), plus
``-mtune=native`` when the compiler accepts it (it tunes, it selects no instructions). Before they are used, a tiny
program computing on vectors of the level's width is built with them and run in a subprocess (an illegal
instruction kills only that); when it does not build, dies or prints a wrong answer, the next narrower level is
tried, with a warning. The verdict is kept in ``<cache_dir()>/isa/<key>.json``, key = the CPU's identity (brand
and features), the compiler's (path, size, mtime) and the level asked for, so later processes only read a file;
one that cannot be read or does not parse is ignored and rewritten. When the program cannot be run at all (e.g. a
noexec temp dir) the probe's level is used unchecked and nothing is stored. Other hosts keep ``-march=native``
(``-mcpu=native`` on Apple arm64), unchecked.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass

from tgcore.helpers import cache_dir, write_atomically
from tgcore.runtime.cpufeatures import ISA_LEVELS, X86_64, CPUFeatures, IsaLevel, chosen_isa_level, cpu_features

TUNE = ("-mtune=native",)
VERDICT_VERSION = 3    # bump when the check program or the flags of a level change


@dataclass(frozen=True)
class CTarget:
    """What kernels built by one C compiler target: the ISA level (None off x86-64) and the flags selecting it."""
    level: IsaLevel | None
    flags: tuple[str, ...]


def native_flags() -> tuple[str, ...]:
    """Flags for hosts without ISA levels: the compiler picks everything the build machine has."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return ("-mcpu=native",)  # Apple clang on arm64 has no -march=native
    return ("-march=native",)


def binary_identity(exe: str) -> str:
    """The resolved binary and its size/mtime: they stand for the compiler's version without running it."""
    real = os.path.realpath(exe)
    st = os.stat(real)
    return f"{real}|{st.st_size}|{st.st_mtime_ns}"


def c_target(cc: str) -> CTarget:
    """The target for kernels built by compiler ``cc`` on this host (TG_ISA read now; verdicts cached per process
    and on disk). Raises IsaLevelError when TG_ISA is unknown or asks for more than the CPU has."""
    cpu = cpu_features()
    level = chosen_isa_level(cpu)
    if level is None:
        return CTarget(None, native_flags())
    return _verified_in_process(cc, binary_identity(cc), cpu, level)


@functools.cache
def _verified_in_process(cc: str, compiler_identity: str, cpu: CPUFeatures, level: IsaLevel) -> CTarget:
    return verified_target(cc, cpu, level, compiler_identity)


def verified_target(cc: str, cpu: CPUFeatures, level: IsaLevel, compiler_identity: str | None = None) -> CTarget:
    """``level`` or the widest narrower one whose check program runs, from the disk verdict when there is one."""
    identity = compiler_identity or binary_identity(cc)
    key = hashlib.sha256(f"{VERDICT_VERSION}\0{cpu.identity}\0{identity}\0{level.name}".encode()).hexdigest()
    path = cache_dir() / "isa" / f"{key[:40]}.json"
    cached = _read_verdict(path, key, level, cpu.features)
    if cached is not None:
        return cached
    target, checked = verify(cc, level, cpu.features)
    if checked:
        _write_verdict(path, key, target)
    return target


def verify(cc: str, level: IsaLevel, features: frozenset[str] = frozenset()) -> tuple[CTarget, bool]:
    """Build and run the check program at ``level``, then each narrower level until one works (warning on each
    failure). Also says whether the answer was checked (False: no program could run here; ``level`` unchecked)."""
    candidates = list(reversed(ISA_LEVELS[:ISA_LEVELS.index(level) + 1]))
    for i, candidate in enumerate(candidates):
        try:
            flags, problem = _check(cc, candidate, features)
        except OSError:                 # the built program could not be started at all: nothing to learn
            return CTarget(level, level.c_flags_for(features)), False
        if problem is None:
            return CTarget(candidate, flags), True
        if i + 1 < len(candidates):
            warnings.warn(f"C kernels for {candidate.name} do not work here ({problem}); using "
                          f"{candidates[i + 1].name} instead", RuntimeWarning, stacklevel=2)
    return CTarget(X86_64, ()), False   # not even baseline code builds: the compiler's own errors will say why


def _check(cc: str, level: IsaLevel, features: frozenset[str] = frozenset()) -> tuple[tuple[str, ...], str | None]:
    """(flags used, None if the check program built with them ran and printed the right answer, else what failed).
    -mtune=native is dropped when the compiler refuses it. OSError when the program cannot be started."""
    vector_bytes = level.vector_bits // 8
    with tempfile.TemporaryDirectory(prefix="tgcore-isa-") as tmp:
        exe = str(pathlib.Path(tmp) / ("check.exe" if sys.platform == "win32" else "check"))
        problem = None
        level_flags = level.c_flags_for(features)
        for flags in (level_flags + TUNE, level_flags):
            problem = _build(cc, [*flags, "-O2"], check_source(vector_bytes), exe)
            if problem is None:
                break
        if problem is not None:
            return level_flags, problem
        try:
            run = subprocess.run([exe], capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            return flags, "the check program did not finish within 60 s"
        if run.returncode != 0:
            return flags, f"the check program exited with code {run.returncode}"
        printed = run.stdout.decode(errors="replace").strip()
        if printed != expected_output(vector_bytes):
            return flags, f"the check program printed {printed!r}, not {expected_output(vector_bytes)!r}"
        return flags, None


def _build(cc: str, flags: list[str], src: str, exe: str) -> str | None:
    result = subprocess.run([cc, *flags, "-x", "c", "-", "-o", exe], input=src.encode(), capture_output=True)
    if result.returncode == 0:
        return None
    message = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
    return f"{cc} {' '.join(flags)} failed: {message[0] if message else f'exit code {result.returncode}'}"


def check_source(vector_bytes: int) -> str:
    """A program computing on ``vector_bytes``-wide vectors of float (mul+add: FMA), bytes and 64-bit ints (AVX-512:
    BW and DQ instructions). Its inputs depend on argc so nothing folds at compile time; it prints three sums."""
    return f"""\
#include <stdio.h>
#define W {vector_bytes}
typedef float vf __attribute__((vector_size(W)));
typedef unsigned char vb __attribute__((vector_size(W)));
typedef long long vq __attribute__((vector_size(W)));
int main(int argc, char **argv) {{
  (void)argv;
  vf x; vb b; vq q;
  for (int i = 0; i < W / 4; i++) x[i] = (float)(i + argc);
  for (int i = 0; i < W; i++) b[i] = (unsigned char)(i * 5 + argc);
  for (int i = 0; i < W / 8; i++) q[i] = (long long)(i + argc) << 20;
  vf y = x * x + x;
  vb c = b + b;
  vq r = q * q;
  double fsum = 0; long long bsum = 0, qsum = 0;
  for (int i = 0; i < W / 4; i++) fsum += y[i];
  for (int i = 0; i < W; i++) bsum += c[i];
  for (int i = 0; i < W / 8; i++) qsum += r[i];
  printf("%.1f %lld %lld\\n", fsum, bsum, qsum);
  return 0;
}}
"""


def expected_output(vector_bytes: int) -> str:
    """What ``check_source(vector_bytes)`` prints when run without arguments (argc = 1)."""
    fsum = sum(float((i + 1) * (i + 1) + (i + 1)) for i in range(vector_bytes // 4))
    bsum = sum(2 * ((i * 5 + 1) % 256) % 256 for i in range(vector_bytes))
    qsum = sum(((i + 1) << 20) ** 2 for i in range(vector_bytes // 8))
    return f"{fsum:.1f} {bsum} {qsum}"


def _read_verdict(path: pathlib.Path, key: str, level: IsaLevel,
                  features: frozenset[str] = frozenset()) -> CTarget | None:
    """The stored verdict, or None when missing, unreadable, or not a verdict for ``key`` at or below ``level``."""
    try:
        data = json.loads(path.read_text())
        allowed = {candidate.name: candidate for candidate in ISA_LEVELS[:ISA_LEVELS.index(level) + 1]}
        stored = allowed[data["level"]]
        flags = tuple(data["flags"])
        stored_flags = stored.c_flags_for(features)
        if data["key"] != key or flags not in (stored_flags, stored_flags + TUNE):
            return None
        return CTarget(stored, flags)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_verdict(path: pathlib.Path, key: str, target: CTarget) -> None:
    """Store a verdict atomically (temp file + rename); give up quietly on OS errors."""
    assert target.level is not None
    text = json.dumps({"key": key, "level": target.level.name, "flags": list(target.flags)})
    try:
        write_atomically(path, text.encode())
    except OSError:
        pass
