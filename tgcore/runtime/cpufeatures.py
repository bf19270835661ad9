"""What this CPU (and its OS) can run: one probe for the core and every plugin.

In:  the host. Out: ``cpu_features()``, a frozen ``CPUFeatures`` record (vendor, brand string, a frozenset of
lower-case feature names as Linux spells them in /proc/cpuinfo, cache sizes, the widest ``IsaLevel``), cached
per process; ``chosen_isa_level()``, that level after ``TG_ISA`` (``avx2`` or ``avx512``) narrowed it.

How: on x86-64, CPUID and XGETBV run from Python through two tiny functions held below as machine-code bytes
(one copy per calling convention: System V for Linux/macOS, Windows x64), mapped read+write, copied, made
read+execute (never both at once), called through ctypes and unmapped. A feature counts only when the OS
saves its register state too (XCR0 bits 1-2 for AVX, 5-7 as well for AVX-512, 17-18 for AMX). When the stub
cannot run, the ``flags`` line of /proc/cpuinfo decides (the kernel applies the same OS checks); other
architectures report no features. AMX is reported, never used (its use needs a per-process OS permission).
Cache sizes: CPUID leaf 4 (AMD: 0x8000001D), else /sys/devices/system/cpu/cpu0/cache, else 32 KiB / 1 MiB.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from tgcore.helpers import getenv

# ---- facts: the ISA levels kernels are compiled for, narrowest first ----


@dataclass(frozen=True)
class IsaLevel:
    """A vector ISA level: the features it needs, its vector registers, and the C compiler flags that select it."""
    name: str
    required: frozenset[str]      # feature names the CPU and OS must support
    vector_bits: int              # width of one vector register
    vector_registers: int         # architectural vector registers
    c_flags: tuple[str, ...]      # gcc/clang flags (each implies the narrower ISAs it builds on)
    extensions: tuple[tuple[str, str], ...] = ()  # (feature, flag): added when the CPU has the feature

    def c_flags_for(self, features: frozenset[str]) -> tuple[str, ...]:
        """The level's flags plus those of its extensions ``features`` has (SmolLM2's quantized decode kernels
        were ~8% slower at AVX-512 F/BW/DQ/VL alone than with the extensions -march=native used to add)."""
        return self.c_flags + tuple(flag for feature, flag in self.extensions if feature in features)

    def __repr__(self) -> str:
        return f"IsaLevel({self.name})"


X86_64 = IsaLevel("x86-64", frozenset(), 128, 16, ())    # SSE2: every x86-64 CPU
AVX2 = IsaLevel("avx2", frozenset({"avx", "avx2", "fma", "f16c"}), 256, 16, ("-mavx2", "-mfma", "-mf16c"))
AVX512 = IsaLevel("avx512", AVX2.required | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}, 512, 32,
                  AVX2.c_flags + ("-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                                  "-mprefer-vector-width=512"),
                  (("avx512cd", "-mavx512cd"), ("avx512ifma", "-mavx512ifma"), ("avx512vbmi", "-mavx512vbmi"),
                   ("avx512_vbmi2", "-mavx512vbmi2"), ("avx512_vnni", "-mavx512vnni"),
                   ("avx512_bitalg", "-mavx512bitalg"), ("avx512_vpopcntdq", "-mavx512vpopcntdq"),
                   ("avx512_bf16", "-mavx512bf16")))
# (not -mavx512fp16: with it gcc 12 drops the rounding of (float)(_Float16)x, and emits masked vmovsh that binutils
# 2.40 rejects, for float16 compare-and-select kernels; C kernels compute float16 math in float anyway)
ISA_LEVELS = (X86_64, AVX2, AVX512)
FORCEABLE_LEVELS = {level.name: level for level in (AVX2, AVX512)}  # what TG_ISA accepts


CACHE_LINE = 64  # bytes: the x86-64 (and most ARM) cache line, what packing, tiling and prefetch align to


@dataclass(frozen=True)
class CacheSizes:
    """Per-core data cache sizes in bytes (``l3``: the shared last level, 0 when unknown) and where they came from."""
    l1d: int = 32 * 1024
    l2: int = 1024 * 1024
    l3: int = 0
    source: str = "default"


@dataclass(frozen=True)
class CPUFeatures:
    """What the probe found. ``features``: lower-case names as in /proc/cpuinfo's flags (``avx2``, ``avx512f``...)."""
    arch: str                                  # platform.machine(), lower case
    features: frozenset[str] = frozenset()
    vendor: str = ""                           # "GenuineIntel", "AuthenticAMD", ... ("" when unknown)
    brand: str = ""                            # the processor's brand string ("" when unknown)
    caches: CacheSizes = field(default_factory=CacheSizes)
    source: str = "none"                       # "cpuid", "/proc/cpuinfo" or "none"

    @property
    def is_x86_64(self) -> bool:
        return self.arch in _X86_64_NAMES

    @property
    def isa_level(self) -> IsaLevel | None:
        """The widest level this CPU and OS support (None off x86-64)."""
        return choose_isa_level(self.features) if self.is_x86_64 else None

    @property
    def identity(self) -> str:
        """Names this CPU for caches of per-machine verdicts: brand and feature set."""
        return f"{self.arch}|{self.vendor}|{self.brand}|{' '.join(sorted(self.features))}"


class IsaLevelError(ValueError):
    """TG_ISA names an unknown level, or one this CPU (or its OS) cannot run."""


def choose_isa_level(features: frozenset[str], requested: str | None = None) -> IsaLevel:
    """The level to compile for: ``requested`` (a TG_ISA value) if the features allow it, else the widest they do."""
    supported = [level for level in ISA_LEVELS if level.required <= features]
    if not requested:
        return supported[-1]
    level = FORCEABLE_LEVELS.get(requested.strip().lower())
    if level is None:
        raise IsaLevelError(f"TG_ISA={requested!r} is not an ISA level; use one of {', '.join(FORCEABLE_LEVELS)} "
                            "(or unset it for the widest this CPU supports)")
    if level not in supported:
        lacking = ", ".join(sorted(level.required - features))
        raise IsaLevelError(f"TG_ISA={requested} needs {lacking}, which this CPU (or its OS) lacks; the widest it "
                            f"supports is {supported[-1].name} (unset TG_ISA or choose a lower level)")
    return level


def chosen_isa_level(cpu: CPUFeatures | None = None) -> IsaLevel | None:
    """The level kernels target: env TG_ISA if set (read on every call), else the widest ``cpu`` supports.
    None off x86-64 (where TG_ISA must be unset). Raises IsaLevelError for an unknown or unsupported TG_ISA."""
    cpu = cpu or cpu_features()
    requested = getenv("TG_ISA", "") or None
    if not cpu.is_x86_64:
        if requested:
            raise IsaLevelError(f"TG_ISA={requested} applies to x86-64 only; this machine is {cpu.arch}")
        return None
    return choose_isa_level(cpu.features, requested)


# ---- CPUID and XGETBV as machine code ----

# void cpuid(uint32 leaf, uint32 subleaf, uint32 out[4]): out = eax, ebx, ecx, edx of CPUID(leaf, subleaf)
_CPUID_STORE = bytes([
    0x0F, 0xA2,                # cpuid
    0x41, 0x89, 0x02,          # mov [r10], eax
    0x41, 0x89, 0x5A, 0x04,    # mov [r10 + 4], ebx
    0x41, 0x89, 0x4A, 0x08,    # mov [r10 + 8], ecx
    0x41, 0x89, 0x52, 0x0C,    # mov [r10 + 12], edx
    0x5B,                      # pop rbx
    0xC3,                      # ret
])
CPUID_CODE = {
    "sysv": bytes([
        0x53,                  # push rbx           (callee-saved; cpuid writes it)
        0x49, 0x89, 0xD2,      # mov r10, rdx       (out, kept where cpuid writes nothing)
        0x89, 0xF8,            # mov eax, edi       (leaf)
        0x89, 0xF1,            # mov ecx, esi       (subleaf)
    ]) + _CPUID_STORE,
    "win64": bytes([
        0x53,                  # push rbx
        0x4D, 0x89, 0xC2,      # mov r10, r8        (out)
        0x89, 0xC8,            # mov eax, ecx       (leaf; before ecx is overwritten)
        0x89, 0xD1,            # mov ecx, edx       (subleaf)
    ]) + _CPUID_STORE,
}
# uint64 xgetbv(uint32 index): XCR[index] (edx:eax)
_XGETBV_BODY = bytes([
    0x0F, 0x01, 0xD0,          # xgetbv             (edx:eax = XCR[ecx], upper halves of rdx/rax zeroed)
    0x48, 0xC1, 0xE2, 0x20,    # shl rdx, 32
    0x48, 0x09, 0xD0,          # or rax, rdx
    0xC3,                      # ret
])
XGETBV_CODE = {
    "sysv": bytes([0x89, 0xF9]) + _XGETBV_BODY,   # mov ecx, edi (index)
    "win64": _XGETBV_BODY,                        # the index arrives in ecx
}
HOST_CONVENTION = "win64" if sys.platform == "win32" else "sysv"

# feature name -> (leaf, subleaf, register 0..3 = eax ebx ecx edx, bit, XCR0 bits the OS must enable)
_SSE, _YMM, _ZMM, _AMX = 0, 0b110, 0b1110_0110, 0b11 << 17
_EAX, _EBX, _ECX, _EDX = range(4)
FEATURE_BITS: dict[str, tuple[int, int, int, int, int]] = {
    "ssse3": (1, 0, _ECX, 9, _SSE),
    "sse4_1": (1, 0, _ECX, 19, _SSE),
    "sse4_2": (1, 0, _ECX, 20, _SSE),
    "fma": (1, 0, _ECX, 12, _YMM),
    "avx": (1, 0, _ECX, 28, _YMM),
    "f16c": (1, 0, _ECX, 29, _YMM),
    "avx2": (7, 0, _EBX, 5, _YMM),
    "avx512f": (7, 0, _EBX, 16, _ZMM),
    "avx512dq": (7, 0, _EBX, 17, _ZMM),
    "avx512ifma": (7, 0, _EBX, 21, _ZMM),
    "avx512cd": (7, 0, _EBX, 28, _ZMM),
    "avx512bw": (7, 0, _EBX, 30, _ZMM),
    "avx512vl": (7, 0, _EBX, 31, _ZMM),
    "avx512vbmi": (7, 0, _ECX, 1, _ZMM),
    "avx512_vbmi2": (7, 0, _ECX, 6, _ZMM),
    "avx512_vnni": (7, 0, _ECX, 11, _ZMM),
    "avx512_bitalg": (7, 0, _ECX, 12, _ZMM),
    "avx512_vpopcntdq": (7, 0, _ECX, 14, _ZMM),
    "amx_bf16": (7, 0, _EDX, 22, _AMX),
    "avx512_fp16": (7, 0, _EDX, 23, _ZMM),
    "amx_tile": (7, 0, _EDX, 24, _AMX),
    "amx_int8": (7, 0, _EDX, 25, _AMX),
    "avx_vnni": (7, 1, _EAX, 4, _YMM),
    "avx512_bf16": (7, 1, _EAX, 5, _ZMM),
}
_OSXSAVE = 27   # CPUID.1:ECX: the OS enabled XSAVE, so XGETBV can read XCR0

Cpuid = Callable[[int, int], tuple[int, int, int, int]]


def decode_features(cpuid: Cpuid, xcr0: int) -> frozenset[str]:
    """Feature names from CPUID leaves (``cpuid(leaf, subleaf)`` -> eax, ebx, ecx, edx) and XCR0."""
    max_leaf = cpuid(0, 0)[0]
    max_sub7 = cpuid(7, 0)[0] if max_leaf >= 7 else -1
    found = set()
    for name, (leaf, sub, register, bit, os_state) in FEATURE_BITS.items():
        if leaf > max_leaf or (leaf == 7 and sub > max_sub7):
            continue
        if cpuid(leaf, sub)[register] >> bit & 1 and xcr0 & os_state == os_state:
            found.add(name)
    return frozenset(found)


def _vendor(cpuid: Cpuid) -> str:
    _, ebx, ecx, edx = cpuid(0, 0)
    return b"".join(r.to_bytes(4, "little") for r in (ebx, edx, ecx)).decode("ascii", "replace").strip("\0 ")


def _brand(cpuid: Cpuid) -> str:
    if cpuid(0x8000_0000, 0)[0] < 0x8000_0004:
        return ""
    raw = b"".join(r.to_bytes(4, "little") for leaf in range(0x8000_0002, 0x8000_0005) for r in cpuid(leaf, 0))
    return " ".join(raw.split(b"\0")[0].decode("ascii", "replace").split())


def _cpuid_caches(cpuid: Cpuid, vendor: str) -> CacheSizes | None:
    """Data cache sizes from the deterministic cache parameters (leaf 4; AMD: 0x8000001D, same layout)."""
    if vendor == "AuthenticAMD":
        leaf, available = 0x8000_001D, cpuid(0x8000_0000, 0)[0] >= 0x8000_001D
    else:
        leaf, available = 4, cpuid(0, 0)[0] >= 4
    if not available:
        return None
    sizes: dict[int, int] = {}
    for sub in range(16):
        eax, ebx, ecx, _ = cpuid(leaf, sub)
        kind, level = eax & 0x1F, eax >> 5 & 0x7
        if kind == 0:          # no more caches
            break
        if kind == 2:          # instruction cache
            continue
        ways, partitions, line = (ebx >> 22) + 1, (ebx >> 12 & 0x3FF) + 1, (ebx & 0xFFF) + 1
        sizes[level] = ways * partitions * line * (ecx + 1)
    if 1 not in sizes or 2 not in sizes:
        return None
    return CacheSizes(sizes[1], sizes[2], sizes.get(3, 0), "cpuid")


# ---- the probes ----

_X86_64_NAMES = frozenset({"x86_64", "amd64", "x64"})


def _arch() -> str:
    machine = platform.machine().lower()
    if machine in _X86_64_NAMES and ctypes.sizeof(ctypes.c_void_p) != 8:
        return "x86"   # a 32-bit Python on a 64-bit OS runs 32-bit code: the stubs do not apply
    return machine


def probe_cpuid() -> CPUFeatures:
    """The record from CPUID and XGETBV, run through the stubs (x86-64 only; raises OSError when they cannot run)."""
    code = CPUID_CODE[HOST_CONVENTION] + XGETBV_CODE[HOST_CONVENTION]
    from tgcore.runtime.executable import ExecutableCode
    stubs = ExecutableCode(code)
    try:
        cpuid_fn = stubs.function(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))
        xgetbv_fn = stubs.function(ctypes.c_uint64, ctypes.c_uint32, offset=len(CPUID_CODE[HOST_CONVENTION]))
        out = (ctypes.c_uint32 * 4)()
        leaves: dict[tuple[int, int], tuple[int, int, int, int]] = {}

        def cpuid(leaf: int, sub: int) -> tuple[int, int, int, int]:
            if (leaf, sub) not in leaves:
                cpuid_fn(leaf, sub, out)
                leaves[leaf, sub] = (out[0], out[1], out[2], out[3])
            return leaves[leaf, sub]

        xcr0 = xgetbv_fn(0) if cpuid(0, 0)[0] >= 1 and cpuid(1, 0)[_ECX] >> _OSXSAVE & 1 else 0
        vendor = _vendor(cpuid)
        return CPUFeatures(_arch(), decode_features(cpuid, xcr0), vendor, _brand(cpuid),
                           _cpuid_caches(cpuid, vendor) or sysfs_caches(), "cpuid")
    finally:
        stubs.close()


def probe_cpuinfo(path: str = "/proc/cpuinfo") -> CPUFeatures:
    """The record from the first processor's lines in /proc/cpuinfo (Linux); no features when it is unreadable."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break      # the end of the first processor
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return CPUFeatures(_arch(), caches=sysfs_caches())
    known = set(FEATURE_BITS) if _arch() in _X86_64_NAMES else set()
    return CPUFeatures(_arch(), frozenset(fields.get("flags", "").split()) & known, fields.get("vendor_id", ""),
                       fields.get("model name", ""), sysfs_caches(), path if "flags" in fields else "none")


def sysfs_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> CacheSizes:
    """Data cache sizes the Linux kernel reports for cpu0; the defaults when it does not."""
    sizes: dict[int, int] = {}
    try:
        for index in sorted(os.listdir(root)):
            if not index.startswith("index"):
                continue
            folder = os.path.join(root, index)

            def read(name: str, folder: str = folder) -> str:
                with open(os.path.join(folder, name)) as f:
                    return f.read().strip()

            if read("type") == "Instruction":
                continue
            text = read("size").upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes[int(read("level"))] = int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return CacheSizes()
    if 1 not in sizes or 2 not in sizes:
        return CacheSizes()
    return CacheSizes(sizes[1], sizes[2], sizes.get(3, 0), "sysfs")


@functools.cache
def cpu_features() -> CPUFeatures:
    """This machine's record (probed once per process): CPUID, else /proc/cpuinfo; off x86-64, no features."""
    if _arch() not in _X86_64_NAMES:
        return CPUFeatures(_arch(), caches=sysfs_caches())
    try:
        return probe_cpuid()
    except Exception:  # the stub could not be mapped or run here: the kernel's view instead
        return probe_cpuinfo()
