"""Hand-assembled functions run through ctypes (checked against numpy), executable memory
that is never writable and executable at once, and the CPU feature probe."""
from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest
from tg_x86 import Cond, ExecutableCode, Inst, Label, Op, assemble, cpu, dword, reg, unavailable_reason
from tg_x86.operands import Bcst, Masked, kreg, xmm, xmmword, ymm, ymmword, zmm, zmmword

r = reg
pytestmark = pytest.mark.skipif(not cpu.is_x86_64(), reason="not an x86-64 machine")
needs_avx2 = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


def _fn(program, restype, *argtypes):
    return ExecutableCode(assemble(program).code).function(restype, *argtypes)


def _floats(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def test_int_add():
    add = _fn([Inst(Op.MOV, r("eax"), r("edi")), Inst(Op.ADD, r("eax"), r("esi")), Inst(Op.RET)],
              ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
    assert add(2, 3) == 5
    assert add(-7, 3) == -4
    assert add(2**31 - 1, 1) == -(2**31)  # wraps like int32


def test_int64_multiply_and_divide():
    """(a * b) / c with imul, cqo, idiv (rdx:rax / rcx): signed, truncating like C."""
    prog = [Inst(Op.MOV, r("rax"), r("rdi")), Inst(Op.IMUL, r("rax"), r("rsi")), Inst(Op.MOV, r("rcx"), r("rdx")),
            Inst(Op.CQO), Inst(Op.IDIV, r("rcx")), Inst(Op.RET)]
    f = _fn(prog, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
    for a, b, c in [(6, 7, 4), (-6, 7, 4), (1 << 40, 3, -7), (123456789, 1000, 13)]:
        q = abs(a * b) // abs(c)
        assert f(a, b, c) == (q if (a * b < 0) == (c < 0) else -q)


def test_float_loop_sum():
    """float sum(const float *p, int n): scalar vaddss in a loop; the same float32 rounding as numpy in order."""
    loop, done = Label("loop"), Label("done")
    prog = [Inst(Op.VXORPS, xmm(0), xmm(0), xmm(0)),
            Inst(Op.TEST, r("esi"), r("esi")),
            Inst(Op.JCC, done, cond=Cond.LE),
            Inst(Op.MOVSXD, r("rsi"), r("esi")),
            Inst(Op.XOR, r("eax"), r("eax")),
            loop,
            Inst(Op.VADDSS, xmm(0), xmm(0), dword(r("rdi"), r("rax"), 4)),
            Inst(Op.INC, r("rax")),
            Inst(Op.CMP, r("rax"), r("rsi")),
            Inst(Op.JCC, loop, cond=Cond.L),
            done,
            Inst(Op.RET)]
    total = _fn(prog, ctypes.c_float, ctypes.POINTER(ctypes.c_float), ctypes.c_int32)
    data = np.random.default_rng(0).standard_normal(1001).astype(np.float32)
    expected = np.float32(0)
    for x in data:
        expected = np.float32(expected + x)
    assert np.float32(total(_floats(data), len(data))) == expected
    assert total(_floats(data), 0) == 0.0


@needs_avx2
def test_avx2_vaddps_8_floats():
    """void add8(const float *a, const float *b, float *out): one ymm add."""
    prog = [Inst(Op.VMOVUPS, ymm(0), ymmword(r("rdi"))),
            Inst(Op.VADDPS, ymm(0), ymm(0), ymmword(r("rsi"))),
            Inst(Op.VMOVUPS, ymmword(r("rdx")), ymm(0)),
            Inst(Op.VZEROUPPER),
            Inst(Op.RET)]
    add8 = _fn(prog, None, *[ctypes.POINTER(ctypes.c_float)] * 3)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    out = np.zeros(8, np.float32)
    add8(_floats(a), _floats(b), _floats(out))
    np.testing.assert_array_equal(out, a + b)


@needs_avx2
def test_f16c_and_fma():
    """vcvtph2ps of 8 halfs, then out = x * x + x with vfmadd213ps (one rounding: compare in float64)."""
    prog = [Inst(Op.VCVTPH2PS, ymm(1), xmmword(r("rdi"))),
            Inst(Op.VMOVAPS, ymm(0), ymm(1)),
            Inst(Op.VFMADD213PS, ymm(0), ymm(1), ymm(1)),   # ymm0 = ymm1 * ymm0 + ymm1
            Inst(Op.VMOVUPS, ymmword(r("rsi")), ymm(0)),
            Inst(Op.VZEROUPPER),
            Inst(Op.RET)]
    f = _fn(prog, None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float))
    halfs = np.array([0.5, -1.25, 3.0, 65504.0, 1e-3, -0.0, 7.75, 100.0], np.float16)
    out = np.zeros(8, np.float32)
    f(halfs.ctypes.data, _floats(out))
    x = halfs.astype(np.float64)
    np.testing.assert_array_equal(out, (x * x + x).astype(np.float32))


def _mapping_perms(address: int) -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return perms
    return ""


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/maps")
def test_code_is_read_execute_only():
    code = ExecutableCode(bytes([0xC3]))
    assert _mapping_perms(code.address).startswith("r-x")
    fn = code.function(None)
    del code
    fn()  # the function pointer keeps the mapping alive
    with pytest.raises(ValueError, match="outside"):
        ExecutableCode(bytes([0xC3])).function(None, offset=1)


def test_the_plugin_sees_the_features_proc_cpuinfo_lists():
    """What the plugin requires, as it sees it, against the kernel's flags line (the core's own CPUID stub is
    checked against /proc/cpuinfo in the core's tests)."""
    from tgcore.runtime.cpufeatures import probe_cpuinfo
    from_cpuinfo = probe_cpuinfo().features
    if not from_cpuinfo:
        pytest.skip("no /proc/cpuinfo flags")
    assert set(cpu.REQUIRED) & cpu.features() == set(cpu.REQUIRED) & from_cpuinfo


def test_unavailable_reason():
    from tgcore.runtime.cpufeatures import CPUFeatures
    assert (unavailable_reason() is None) == (set(cpu.REQUIRED) <= cpu.features())
    assert cpu.reason(CPUFeatures("aarch64")) == "not an x86-64 machine (aarch64)"
    assert cpu.reason(CPUFeatures("x86_64", frozenset({"avx", "fma"}))) == "the CPU lacks AVX2, F16C"
    assert cpu.reason(CPUFeatures("x86_64", frozenset(cpu.REQUIRED) | {"avx512f"})) is None


needs_avx512 = pytest.mark.skipif("avx512f" not in cpu.features(), reason="no AVX-512F (CPU or OS)")


@needs_avx512
def test_avx512_masked_fma_with_broadcast():
    """void f(float *y, const float *x, const float *a, int n): y[i] += a[0] * x[i] for i < n <= 16, one zmm: the
    remainder mask from kmovw, a zeroing masked load, an FMA with an embedded broadcast of a[0], a merging masked
    store (the lanes past n untouched). Checked against numpy (one rounding: numpy's float64 product rounded)."""
    prog = [Inst(Op.MOV, r("eax"), 1), Inst(Op.SHL, r("eax"), r("cl")), Inst(Op.DEC, r("eax")),   # (1 << n) - 1
            Inst(Op.KMOVW, kreg(1), r("eax")),
            Inst(Op.VMOVUPS, Masked(zmm(17), kreg(1), zero=True), zmmword(r("rsi"))),
            Inst(Op.VMOVUPS, Masked(zmm(30), kreg(1), zero=True), zmmword(r("rdi"))),
            Inst(Op.VFMADD231PS, zmm(30), zmm(17), Bcst(dword(r("rdx")), 16)),
            Inst(Op.VMOVUPS, Masked(zmmword(r("rdi")), kreg(1)), zmm(30)),
            Inst(Op.VZEROUPPER), Inst(Op.RET)]
    f = _fn(prog, None, *[ctypes.POINTER(ctypes.c_float)] * 3, ctypes.c_int32)
    rng = np.random.default_rng(3)
    for n in (16, 13, 1, 0):
        x, a = rng.standard_normal(16).astype(np.float32), rng.standard_normal(1).astype(np.float32)
        y = rng.standard_normal(16).astype(np.float32)
        want = y.copy()
        want[:n] = (y[:n].astype(np.float64) + a[0].astype(np.float64) * x[:n].astype(np.float64)).astype(np.float32)
        f(_floats(y), _floats(x), _floats(a), n)
        np.testing.assert_array_equal(y, want)


@needs_avx512
def test_avx512_sum_of_products_compressed_displacements():
    """float dot(const float *x, const float *y): 64 floats as four zmm products at displacements 0, 64, 128 and 192
    (disp8*N: one byte each), added and reduced: against numpy within float32 rounding."""
    prog = [Inst(Op.VPXORD, zmm(0), zmm(0), zmm(0))]
    for k in range(4):
        prog += [Inst(Op.VMOVUPS, zmm(16 + k), zmmword(r("rdi"), disp=64 * k)),
                 Inst(Op.VFMADD231PS, zmm(0), zmm(16 + k), zmmword(r("rsi"), disp=64 * k))]
    prog += [Inst(Op.VMOVUPS, zmmword(r("rdx")), zmm(0)), Inst(Op.VZEROUPPER), Inst(Op.RET)]
    f = _fn(prog, None, *[ctypes.POINTER(ctypes.c_float)] * 3)
    rng = np.random.default_rng(4)
    x, y, out = (rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32),
                 np.zeros(16, np.float32))
    f(_floats(x), _floats(y), _floats(out))
    np.testing.assert_allclose(out, (x.astype(np.float64) * y).reshape(4, 16).sum(0), rtol=1e-5, atol=1e-5)


@needs_avx2
def test_a_jit_replay_runs_x86_kernels_in_one_native_call():
    """X86Program has the native entry (``fxn``) a NativeGraph calls: a jitted step on CPU:X86 replays its kernels
    in one call into the native pool (split over cores as planned), with the results of the kernel-by-kernel run."""
    import tgcore
    import tgcore.runtime.cpu as cpu_runtime
    from tgcore.tensor import Tensor
    if cpu_runtime.native_pool() is None:
        pytest.skip("no native thread pool here")
    built = []
    build = cpu_runtime.NativeGraph.build

    def spy(calls):
        graph = build(calls)
        built.append(([type(p).__name__ for p, _, _ in calls], graph))
        return graph
    cpu_runtime.NativeGraph.build = staticmethod(spy)
    try:
        x = np.arange(4096, dtype=np.float32)
        step = tgcore.jit(lambda t: ((t * 2 + 1).relu() @ t.reshape(4096, 1)).sum())
        for _ in range(4):
            got = step(Tensor(x, device="CPU:X86").realize()).numpy()
    finally:
        cpu_runtime.NativeGraph.build = build
    assert built and all(names and set(names) == {"X86Program"} and g is not None for names, g in built)
    np.testing.assert_allclose(got, np.maximum(x * 2 + 1, 0) @ x, rtol=1e-5)
