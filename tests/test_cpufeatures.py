"""The CPU probe (runtime/cpufeatures), TG_ISA, and the C compiler's ISA flags (runtime/archflags).

References: capstone decodes the CPUID/XGETBV stub bytes; the kernel's /proc/cpuinfo flags and sysfs cache sizes
check what CPUID reports; numpy checks what kernels built with the chosen flags compute; the C compiler's own
assembly shows the flags select the level's vector width.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tgcore.runtime import archflags, cpufeatures
from tgcore.runtime.archflags import CTarget, c_target, expected_output, verified_target, verify
from tgcore.runtime.compiler import ClangCompiler, CompilerNotFoundError, find_c_compiler
from tgcore.runtime.cpufeatures import (
    AVX2,
    AVX512,
    ISA_LEVELS,
    X86_64,
    CacheSizes,
    CPUFeatures,
    IsaLevelError,
    choose_isa_level,
    chosen_isa_level,
    cpu_features,
    decode_features,
    probe_cpuid,
    probe_cpuinfo,
    sysfs_caches,
)
from tgcore.testing import require

HOST = cpu_features()
on_x86_64 = pytest.mark.skipif(not HOST.is_x86_64, reason="not an x86-64 machine")
on_linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and /sys")
AVX512_FEATURES = AVX512.required | {"sse4_2"}
AVX2_FEATURES = AVX2.required | {"sse4_2", "avx_vnni"}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TG_ISA", raising=False)
    monkeypatch.delenv("CC", raising=False)


def compiler() -> str:
    try:
        return find_c_compiler()
    except CompilerNotFoundError:
        pytest.skip("no C compiler")


# ---- the stubs ----

# what each stub must decode to, in capstone's Intel syntax
STUB_LISTINGS = {
    ("cpuid", "sysv"): ["push rbx", "mov r10, rdx", "mov eax, edi", "mov ecx, esi"],
    ("cpuid", "win64"): ["push rbx", "mov r10, r8", "mov eax, ecx", "mov ecx, edx"],
    ("xgetbv", "sysv"): ["mov ecx, edi"],
    ("xgetbv", "win64"): [],
}
CPUID_TAIL = ["cpuid", "mov dword ptr [r10], eax", "mov dword ptr [r10 + 4], ebx", "mov dword ptr [r10 + 8], ecx",
              "mov dword ptr [r10 + 0xc], edx", "pop rbx", "ret"]
XGETBV_TAIL = ["xgetbv", "shl rdx, 0x20", "or rax, rdx", "ret"]


@pytest.mark.parametrize("stub, convention", list(STUB_LISTINGS))
def test_stub_bytes_decode_to_the_intended_instructions(stub, convention):
    capstone = require("capstone", "pip install 'tgcore[test]'")
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_INTEL
    code = (cpufeatures.CPUID_CODE if stub == "cpuid" else cpufeatures.XGETBV_CODE)[convention]
    decoded = list(md.disasm(code, 0))
    assert sum(inst.size for inst in decoded) == len(code), "capstone decodes every byte, and only whole instructions"
    listing = [f"{inst.mnemonic} {inst.op_str}".strip() for inst in decoded]
    assert listing == STUB_LISTINGS[stub, convention] + (CPUID_TAIL if stub == "cpuid" else XGETBV_TAIL)


@on_linux
def test_stub_pages_are_read_execute_only_and_released():
    from tgcore.runtime.executable import ExecutableCode

    def mapped_at(addr: int) -> list[str]:
        with open("/proc/self/maps") as f:
            spans = [line.split()[:2] for line in f]
        return [p for span, p in spans if int(span.split("-")[0], 16) <= addr < int(span.split("-")[1], 16)]
    code = ExecutableCode(bytes([0xC3]))
    code.function(None)()   # ret
    (perms,) = mapped_at(code.address)
    assert perms.startswith("r-x")
    code.close()
    assert not any(p.startswith("r-x") for p in mapped_at(code.address))


# ---- what CPUID reports ----

@on_x86_64
@on_linux
def test_cpuid_agrees_with_proc_cpuinfo():
    """Two independent sources: our stub and the kernel's flags line (which applies the same OS checks)."""
    from_kernel = probe_cpuinfo()
    if from_kernel.source == "none":
        pytest.skip("no flags line in /proc/cpuinfo")
    ours = probe_cpuid()
    assert ours.source == "cpuid"
    assert ours.features == from_kernel.features
    assert ours.vendor == from_kernel.vendor
    assert ours.brand == " ".join(from_kernel.brand.split())
    assert {"sse4_2"} <= ours.features   # every x86-64 CPU of the last 15 years


@on_x86_64
@on_linux
def test_cpuid_cache_sizes_agree_with_sysfs():
    ours, kernel = probe_cpuid().caches, sysfs_caches()
    if ours.source != "cpuid" or kernel.source != "sysfs":
        pytest.skip(f"cache sizes from {ours.source} and {kernel.source}")
    assert (ours.l1d, ours.l2) == (kernel.l1d, kernel.l2)


def test_probe_is_cached_and_reports_the_contract():
    cpu = cpu_features()
    assert cpu is cpu_features()
    assert cpu.caches.l1d > 0 and cpu.caches.l2 > cpu.caches.l1d
    if cpu.is_x86_64:
        level = cpu.isa_level
        assert level is not None and level.required <= cpu.features
        assert (level.vector_bits, level.vector_registers) in {(128, 16), (256, 16), (512, 32)}
    else:
        assert cpu.features == frozenset() and cpu.isa_level is None


class FakeCpu:
    """CPUID leaves as a table: bits set per (leaf, subleaf, register)."""

    def __init__(self, max_leaf: int = 7, bits: dict[tuple[int, int, int], list[int]] | None = None):
        self.max_leaf = max_leaf
        self.bits = bits or {}

    def __call__(self, leaf: int, sub: int) -> tuple[int, int, int, int]:
        regs = [0, 0, 0, 0]
        if leaf == 0:
            regs[0] = self.max_leaf
        if leaf == 7 and sub == 0:
            regs[0] = 1   # subleaves 0..1
        for (lf, sb, reg), positions in self.bits.items():
            if (lf, sb) == (leaf, sub):
                for bit in positions:
                    regs[reg] |= 1 << bit
        return regs[0], regs[1], regs[2], regs[3]


# leaf 1 ECX: sse4_2 20, fma 12, osxsave 27, avx 28, f16c 29; leaf 7.0 EBX: avx2 5, avx512f 16, dq 17, bw 30, vl 31;
# 7.0 EDX: amx_bf16 22, amx_tile 24, amx_int8 25; 7.1 EAX: avx_vnni 4, avx512_bf16 5 (Intel SDM vol. 2, CPUID)
EVERYTHING = FakeCpu(bits={(1, 0, 2): [20, 12, 27, 28, 29], (7, 0, 1): [5, 16, 17, 30, 31], (7, 0, 3): [22, 24, 25],
                           (7, 1, 0): [4, 5]})


def test_features_need_the_os_to_save_their_registers():
    full = decode_features(EVERYTHING, xcr0=0b1110_0111 | 0b11 << 17)
    assert {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx_vnni",
            "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"} == full
    no_amx = decode_features(EVERYTHING, xcr0=0b1110_0111)
    assert no_amx == full - {"amx_tile", "amx_bf16", "amx_int8"}
    ymm_only = decode_features(EVERYTHING, xcr0=0b111)   # no opmask / ZMM state: AVX-512 is off
    assert ymm_only == {"sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni"}
    assert decode_features(EVERYTHING, xcr0=0b1100_0111) == ymm_only   # ZMM_Hi256 missing is enough
    assert decode_features(EVERYTHING, xcr0=0) == {"sse4_2"}           # no YMM state: no AVX at all
    assert decode_features(FakeCpu(max_leaf=1, bits=EVERYTHING.bits), xcr0=0b111) == {"sse4_2", "avx", "fma", "f16c"}


def test_cache_sizes_from_leaf_4():
    # leaf 4 subleaves: (type | level << 5, ways-1 << 22 | partitions-1 << 12 | line-1, sets-1)
    caches = {0: (1 | 1 << 5, 11 << 22 | 63, 63),        # L1 data: 12 ways * 64 B * 64 sets = 48 KiB
              1: (2 | 1 << 5, 7 << 22 | 63, 63),         # L1 instruction: skipped
              2: (3 | 2 << 5, 15 << 22 | 63, 2047),      # L2 unified: 16 * 64 * 2048 = 2 MiB
              3: (0, 0, 0)}

    def cpuid(leaf, sub):
        if leaf == 0:
            return 4, 0, 0, 0
        eax, ebx, ecx = caches.get(sub, (0, 0, 0)) if leaf == 4 else (0, 0, 0)
        return eax, ebx, ecx, 0

    assert cpufeatures._cpuid_caches(cpuid, "GenuineIntel") == CacheSizes(48 << 10, 2 << 20, 0, "cpuid")


def test_sysfs_cache_sizes(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "105M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert sysfs_caches(str(tmp_path)) == CacheSizes(48 << 10, 2 << 20, 105 << 20, "sysfs")
    assert sysfs_caches(str(tmp_path / "missing")) == CacheSizes(32 << 10, 1 << 20, 0, "default")


def test_proc_cpuinfo_fallback_and_other_architectures(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("vendor_id\t: GenuineIntel\nmodel name\t: Some  CPU\nflags\t\t: fpu sse4_2 avx avx2 fma f16c "
                    "avx512f made_up\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    got = probe_cpuinfo(str(info))
    assert got.features == {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f"} and got.vendor == "GenuineIntel"
    assert got.isa_level is AVX2   # avx512f alone is not the AVX-512 level
    assert probe_cpuinfo(str(tmp_path / "missing")).features == frozenset()
    cpu_features.cache_clear()
    try:
        monkeypatch.setattr(cpufeatures, "probe_cpuid", lambda: 1 / 0)   # the stub cannot run: the kernel decides
        monkeypatch.setattr(cpufeatures, "probe_cpuinfo", lambda: got)
        assert cpu_features() is got
        cpu_features.cache_clear()
        monkeypatch.setattr(platform, "machine", lambda: "aarch64")
        arm = cpu_features()
        assert (arm.arch, arm.features, arm.isa_level, arm.source) == ("aarch64", frozenset(), None, "none")
    finally:
        cpu_features.cache_clear()


def test_import_tgcore_does_not_probe():
    code = "import sys, tgcore; assert not [m for m in sys.modules if 'cpufeatures' in m or 'archflags' in m]"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- TG_ISA and the level ----

def test_default_is_the_widest_supported_level():
    assert choose_isa_level(AVX512_FEATURES) is AVX512
    assert choose_isa_level(AVX2_FEATURES) is AVX2
    assert choose_isa_level(AVX2_FEATURES | {"avx512f", "avx512bw", "avx512dq"}) is AVX2   # needs VL as well
    assert choose_isa_level(frozenset({"sse4_2", "avx"})) is X86_64
    assert (AVX2.vector_bits, AVX2.vector_registers, AVX512.vector_bits, AVX512.vector_registers) == (256, 16, 512, 32)


def test_tg_isa_forces_a_level():
    assert choose_isa_level(AVX512_FEATURES, "avx2") is AVX2         # lower than the CPU's: always fine
    assert choose_isa_level(AVX512_FEATURES, " AVX512 ") is AVX512
    with pytest.raises(IsaLevelError, match=r"TG_ISA=avx512 needs avx512bw, avx512dq, avx512f, avx512vl, which this "
                                            r"CPU \(or its OS\) lacks; the widest it supports is avx2"):
        choose_isa_level(AVX2_FEATURES, "avx512")
    with pytest.raises(IsaLevelError, match="lacks"):
        choose_isa_level(frozenset({"sse4_2"}), "avx2")
    with pytest.raises(IsaLevelError, match=r"TG_ISA='sse9' is not an ISA level; use one of avx2, avx512"):
        choose_isa_level(AVX512_FEATURES, "sse9")


def test_tg_isa_is_read_from_the_environment(monkeypatch):
    avx2_cpu = CPUFeatures("x86_64", AVX2_FEATURES)
    assert chosen_isa_level(avx2_cpu) is AVX2
    monkeypatch.setenv("TG_ISA", "avx512")
    with pytest.raises(IsaLevelError, match="avx512f"):
        chosen_isa_level(avx2_cpu)
    assert chosen_isa_level(CPUFeatures("x86_64", AVX512_FEATURES)) is AVX512
    with pytest.raises(IsaLevelError, match="x86-64 only"):
        chosen_isa_level(CPUFeatures("aarch64"))
    monkeypatch.setenv("TG_ISA", "bogus")
    with pytest.raises(IsaLevelError, match="use one of avx2, avx512"):
        chosen_isa_level(avx2_cpu)
    monkeypatch.delenv("TG_ISA")
    assert chosen_isa_level(CPUFeatures("aarch64")) is None


# ---- the C compiler's flags ----

def test_flags_per_level():
    assert AVX2.c_flags == ("-mavx2", "-mfma", "-mf16c")
    assert AVX512.c_flags == ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                              "-mprefer-vector-width=512")
    assert X86_64.c_flags == ()
    for level in ISA_LEVELS:
        assert not [f for f in level.c_flags + tuple(f for _, f in level.extensions) if "amx" in f or "march" in f]
    everything = frozenset(name for level in ISA_LEVELS for name, _ in level.extensions)
    assert AVX512.c_flags_for(frozenset()) == AVX512.c_flags  # an extension only with its feature
    assert AVX512.c_flags_for(frozenset({"avx512_vnni"})) == AVX512.c_flags + ("-mavx512vnni",)
    assert len(AVX512.c_flags_for(everything)) == len(AVX512.c_flags) + len(AVX512.extensions)


@on_x86_64
def test_compiler_flags_follow_tg_isa(monkeypatch):
    cc = compiler()
    level = chosen_isa_level()
    level_flags = level.c_flags_for(cpu_features().features)
    target = ClangCompiler().target()
    assert target.level is level and target.flags[:len(level_flags)] == level_flags
    assert set(target.flags) - set(level_flags) <= set(archflags.TUNE)
    flags = ClangCompiler().flags
    assert "-march=native" not in flags and [f for f in flags if f.startswith("-mavx")] == [
        f for f in level_flags if f.startswith("-mavx")]
    if level is AVX512:
        identity = ClangCompiler(cc).cache_identity()
        monkeypatch.setenv("TG_ISA", "avx2")
        narrower = ClangCompiler(cc)
        assert narrower.target().level is AVX2 and "-mavx512f" not in narrower.flags
        assert narrower.cache_identity() != identity   # the flags are part of the compile cache's key


def test_other_architectures_keep_native_flags(monkeypatch):
    monkeypatch.setattr(archflags, "cpu_features", lambda: CPUFeatures("aarch64"))
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert c_target("/usr/bin/cc") == CTarget(None, ("-mcpu=native",) if sys.platform == "darwin" else
                                              ("-march=native",))


@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
def test_check_program_answer_against_numpy(vector_bytes):
    x = np.arange(1, vector_bytes // 4 + 1, dtype=np.float32)
    b = (np.arange(vector_bytes) * 5 + 1).astype(np.uint8)
    q = np.arange(1, vector_bytes // 8 + 1, dtype=np.int64) << 20
    fsum = float((x * x + x).astype(np.float64).sum())
    assert expected_output(vector_bytes) == f"{fsum:.1f} {int((b + b).astype(np.int64).sum())} {int((q * q).sum())}"


@on_x86_64
def test_check_program_uses_the_levels_vector_width():
    """The level's flags make the compiler emit registers of the level's width (its own assembly listing)."""
    cc = compiler()
    level = chosen_isa_level()
    register = {128: "%xmm", 256: "%ymm", 512: "%zmm"}[level.vector_bits]
    out = subprocess.run([cc, *level.c_flags, "-O2", "-S", "-x", "c", "-", "-o", "-"], capture_output=True, check=True,
                         input=archflags.check_source(level.vector_bits // 8).encode()).stdout.decode()
    assert register in out


# ---- verification by execution ----

@on_x86_64
def test_verdict_is_cached_on_disk(monkeypatch, tmp_path):
    cc = compiler()
    cpu = CPUFeatures("x86_64", HOST.features, "Vendor", "A CPU for this test")
    level = chosen_isa_level()
    runs = []
    real_verify = archflags.verify
    monkeypatch.setattr(archflags, "verify", lambda *a: runs.append(a) or real_verify(*a))
    first = verified_target(cc, cpu, level)
    assert first.level is level and len(runs) == 1
    (entry,) = (tmp_path / "cache" / "isa").iterdir()
    assert verified_target(cc, cpu, level) == first and len(runs) == 1    # a hit: nothing built or run
    assert verified_target(cc, CPUFeatures("x86_64", HOST.features, "Vendor", "Another CPU"), level) == first
    assert len(runs) == 2                                                 # another CPU identity: checked again
    good = entry.read_text()
    broken = [b"", b"{not json", json.dumps({"key": "x", "level": level.name, "flags": []}).encode(),
              good.replace(level.name, "avx1024").encode(), good.replace('"-m', '"-fbogus-m').encode(), b"\xff\xfe"]
    for k, damage in enumerate(broken):
        entry.write_bytes(damage)
        assert verified_target(cc, cpu, level) == first and len(runs) == 3 + k, damage
        assert entry.read_text() == good   # rewritten whole


@on_x86_64
def test_a_level_whose_program_traps_falls_back_with_a_warning(monkeypatch):
    """The check program of the widest level dies of SIGILL (ud2): this process lives, the next level is used."""
    cc = compiler()
    real_source = archflags.check_source
    monkeypatch.setattr(archflags, "check_source",
                        lambda n: real_source(n).replace("printf(", "__builtin_trap(); printf(") if n == 64 else
                        real_source(n))
    with pytest.warns(RuntimeWarning, match=r"C kernels for avx512 do not work here \(the check program exited with "
                                            r"code -\d+\); using avx2 instead"):
        target, checked = verify(cc, AVX512)
    assert checked and target.level is AVX2 and target.flags[:3] == AVX2.c_flags
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verify(cc, AVX2)[0].level is AVX2


def test_a_program_that_cannot_start_leaves_the_level_unchecked(monkeypatch):
    def no_exec(cc, level, features=frozenset()):
        raise PermissionError("noexec")
    monkeypatch.setattr(archflags, "_check", no_exec)
    assert verify("cc", AVX512) == (CTarget(AVX512, AVX512.c_flags), False)


# ---- kernels built with the chosen flags, and the renderer's facts ----

@on_x86_64
def test_kernel_built_with_the_chosen_flags_matches_numpy():
    from tgcore.runtime.cpu import CPUProgram
    compiler()
    level = chosen_isa_level()
    lanes = level.vector_bits // 32
    src = f"""
typedef float vf __attribute__((vector_size({lanes * 4})));
void fma_kernel(float* restrict out, const float* restrict a, const float* restrict b, int n, int core_id) {{
  (void)core_id;
  for (int i = 0; i + {lanes} <= n; i += {lanes}) {{
    vf x, y;
    __builtin_memcpy(&x, a + i, sizeof x); __builtin_memcpy(&y, b + i, sizeof y);
    vf z = x * y + x;
    __builtin_memcpy(out + i, &z, sizeof z);
  }}
}}
"""
    n = lanes * 37
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, n).astype(np.float32)   # integer-valued: exact, fused or not
    b = rng.integers(-1000, 1000, n).astype(np.float32)
    out = np.zeros(n, np.float32)
    CPUProgram("fma_kernel", ClangCompiler().compile(src))(out.ctypes.data, a.ctypes.data, b.ctypes.data, vals=(n,))
    np.testing.assert_array_equal(out, a * b + a)


def test_c_renderer_facts(monkeypatch):
    from tgcore.dtype import dtypes
    from tgcore.renderer.cstyle import CRenderer
    from tgcore.runtime.null import NullCompiler
    renderer = CRenderer(NullCompiler())
    level = chosen_isa_level()
    assert renderer.cache_sizes == HOST.caches
    assert renderer.simd_widths[dtypes.float32] == 8   # codegen's widths stay AVX2-sized
    if level is not None:
        assert (renderer.vector_bits, renderer.vector_registers) == (level.vector_bits, level.vector_registers)
    if level is AVX512:
        monkeypatch.setenv("TG_ISA", "avx2")
        assert (CRenderer(NullCompiler()).vector_bits, CRenderer(NullCompiler()).vector_registers) == (256, 16)
