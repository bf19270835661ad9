"""Can this machine run our code? CPU feature detection for the x86 backend.

In: the host. Out: ``features()`` (set of lower-case feature names the CPU and OS support,
among ``avx``, ``avx2``, ``fma``, ``f16c``) and ``unavailable_reason()`` (``None`` when the
backend can run here, else why not), the renderer's availability probe.

Features come from CPUID, run through a tiny function this plugin encodes itself (AVX
also needs the OS to save ymm state: CPUID.1:ECX.OSXSAVE and XCR0 bits 1-2 via XGETBV).
If that cannot run, the ``flags`` line of /proc/cpuinfo is the fallback.
"""
from __future__ import annotations

import ctypes
import functools
import platform

from tg_x86.abi import HOST, Abi

REQUIRED = ("avx", "avx2", "fma", "f16c")
_X86_64 = {"x86_64", "amd64", "x64"}


def is_x86_64() -> bool:
    return platform.machine().lower() in _X86_64 and ctypes.sizeof(ctypes.c_void_p) == 8


def _stubs(abi: Abi = HOST) -> tuple[bytes, bytes]:
    """``cpuid(leaf, subleaf, uint32 out[4])`` and ``uint64 xgetbv(index)`` as machine code for ``abi``."""
    from tg_x86.assembler import assemble
    from tg_x86.isa import Inst, Op
    from tg_x86.operands import GPR_NAMES, dword, reg
    r = reg
    # the first three argument registers, by name as 64-bit and as 32-bit registers
    a64 = abi.arg_regs[:3]
    a32 = [GPR_NAMES[32][reg(name).num] for name in a64]
    cpuid = [Inst(Op.PUSH, r("rbx")),                     # rbx is callee-saved; cpuid writes it
             Inst(Op.MOV, r("r10"), r(a64[2])),           # out pointer, in a register cpuid leaves alone
             Inst(Op.MOV, r("eax"), r(a32[0])),
             Inst(Op.MOV, r("ecx"), r(a32[1])),           # after eax: on Windows the leaf arrives in ecx
             Inst(Op.CPUID),
             Inst(Op.MOV, dword(r("r10")), r("eax")),
             Inst(Op.MOV, dword(r("r10"), disp=4), r("ebx")),
             Inst(Op.MOV, dword(r("r10"), disp=8), r("ecx")),
             Inst(Op.MOV, dword(r("r10"), disp=12), r("edx")),
             Inst(Op.POP, r("rbx")),
             Inst(Op.RET)]
    xgetbv = [Inst(Op.MOV, r("ecx"), r(a32[0])),
              Inst(Op.XGETBV),                            # edx:eax = XCR[ecx], upper halves zeroed
              Inst(Op.SHL, r("rdx"), 32),
              Inst(Op.OR, r("rax"), r("rdx")),
              Inst(Op.RET)]
    return assemble(cpuid).code, assemble(xgetbv).code


def cpuid_features() -> set[str]:
    """Features from CPUID and XGETBV (raises when the stub cannot be run)."""
    from tg_x86.runtime import ExecutableCode
    cpuid_code, xgetbv_code = _stubs()
    cpuid = ExecutableCode(cpuid_code).function(None, ctypes.c_uint32, ctypes.c_uint32,
                                                ctypes.POINTER(ctypes.c_uint32))
    regs = (ctypes.c_uint32 * 4)()

    def leaf(n: int, sub: int = 0) -> tuple[int, int, int, int]:
        cpuid(n, sub, regs)
        return regs[0], regs[1], regs[2], regs[3]

    max_leaf = leaf(0)[0]
    _, _, ecx1, _ = leaf(1)
    ebx7 = leaf(7)[1] if max_leaf >= 7 else 0
    out = set()
    os_saves_ymm = False
    if ecx1 >> 27 & 1:  # OSXSAVE: xgetbv is usable
        xgetbv = ExecutableCode(xgetbv_code).function(ctypes.c_uint64, ctypes.c_uint32)
        os_saves_ymm = xgetbv(0) & 0b110 == 0b110
    if os_saves_ymm:
        if ecx1 >> 28 & 1:
            out.add("avx")
        if ebx7 >> 5 & 1:
            out.add("avx2")
        if ecx1 >> 12 & 1:
            out.add("fma")
        if ecx1 >> 29 & 1:
            out.add("f16c")
    return out


def cpuinfo_features(path: str = "/proc/cpuinfo") -> set[str]:
    """Features from the first ``flags`` line of /proc/cpuinfo (empty when unreadable)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split()) & set(REQUIRED)
    except OSError:
        pass
    return set()


@functools.cache
def features() -> frozenset[str]:
    if not is_x86_64():
        return frozenset()
    try:
        return frozenset(cpuid_features())
    except Exception:
        return frozenset(cpuinfo_features())


@functools.cache
def unavailable_reason() -> str | None:
    """``None`` if the x86 backend can run here, else the reason (for ``tg devices``). Never raises."""
    try:
        if not is_x86_64():
            return f"not an x86-64 machine ({platform.machine() or 'unknown'})"
        missing = [f.upper() for f in REQUIRED if f not in features()]
        if missing:
            return f"the CPU lacks {', '.join(missing)}"
        return None
    except Exception as e:  # a probe must not take the host down
        return f"CPU feature detection failed: {e}"
