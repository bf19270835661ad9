"""Kernels compiled for the Windows x64 calling convention (``X86Renderer(abi=WIN64)``), run on this Linux host.

The caller is independent of our encoder: a few lines of assembly the system assembler builds (``win64_call``),
called from ctypes. It passes the arguments where Windows does (rcx rdx r8 r9, then the stack above a 32-byte home
area), loads a pattern into every register Windows says a callee preserves (rbx rbp rdi rsi r12-r15 and the low 128
bits of xmm6-xmm15), calls, and reports which changed. A deliberately wrong function shows it notices.
"""
from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable

import numpy as np
import pytest
from tg_x86.abi import SYSV, WIN64
from tg_x86.renderer import X86Renderer
from tg_x86.runtime import ExecutableCode, WindowsPages
from tg_x86_testutil import disassemble

from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.runtime.compiler import CompilerNotFoundError, find_c_compiler
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.testing import missing

# ``uint64 win64_call(void *fn, const int64 *args, int64 nargs)`` (System V): args[0..3] in rcx rdx r8 r9, the rest
# at [rsp + 8k] above the home area, rsp 16-byte aligned at the call; returns a mask, bit k: PRESERVED[k] changed
MAX_ARGS = 16
PRESERVED = ("rbx", "rbp", "rdi", "rsi", "r12", "r13", "r14", "r15", *(f"xmm{n}" for n in range(6, 16)))
OUTGOING = 8 * MAX_ARGS   # home area (4 slots) + up to 12 stack arguments: a multiple of 16


def _pattern(k: int, half: int = 0) -> int:
    return (0x0123456789ABCDEF * (k + 1) + half * 0x1111) % (1 << 64)


def _caller_source() -> str:
    sv_saved = ("rbp", "rbx", "r12", "r13", "r14", "r15")   # callee-saved under System V: ours to keep
    out = [".intel_syntax noprefix", ".text", ".globl win64_call", ".type win64_call, @function", "win64_call:"]
    out += [f"push {r}" for r in sv_saved]                     # rsp = 8 mod 16 now
    out += [f"sub rsp, {OUTGOING + 8}", f"mov [rsp+{OUTGOING}], rdi"]  # 0 mod 16; fn kept above the outgoing area
    out += ["mov rcx, 4", "1:", "cmp rcx, rdx", "jae 2f", "mov rax, [rsi+rcx*8]", "mov [rsp+rcx*8], rax",
            "inc rcx", "jmp 1b", "2:"]                         # stack arguments: args[k] at [rsp + 8k], k >= 4
    out += ["mov rcx, [rsi]", "mov rdx, [rsi+8]", "mov r8, [rsi+16]", "mov r9, [rsi+24]"]  # args padded to 4
    for k, r in enumerate(PRESERVED):
        if r.startswith("xmm"):
            out += [f"movabs rax, {_pattern(k):#x}", f"vmovq {r}, rax",
                    f"movabs rax, {_pattern(k, 1):#x}", f"vpinsrq {r}, {r}, rax, 1"]
        else:
            out += [f"movabs {r}, {_pattern(k):#x}"]
    out += [f"call qword ptr [rsp+{OUTGOING}]", "xor r11d, r11d"]
    for k, r in enumerate(PRESERVED):
        if r.startswith("xmm"):
            out += [f"vmovq rax, {r}", f"movabs r10, {_pattern(k):#x}", "cmp rax, r10", "setne cl",
                    f"vpextrq rax, {r}, 1", f"movabs r10, {_pattern(k, 1):#x}", "cmp rax, r10", "setne dl",
                    "or cl, dl"]
        else:
            out += [f"movabs r10, {_pattern(k):#x}", f"cmp {r}, r10", "setne cl"]
        out += ["movzx eax, cl", f"shl rax, {k}", "or r11, rax"]
    out += ["mov rax, r11", f"add rsp, {OUTGOING + 8}", *(f"pop {r}" for r in reversed(sv_saved)), "ret",
            '.section .note.GNU-stack,"",@progbits', ""]
    return "\n".join(out)


@pytest.fixture(scope="module")
def win64_call(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, list[int]], int]:
    """``win64_call(address, args)``: the mask of preserved registers the function at ``address`` changed."""
    try:
        cc = find_c_compiler()
    except CompilerNotFoundError:
        missing("a C compiler (cc, clang or gcc) to assemble the Windows x64 caller")
    d = tmp_path_factory.mktemp("win64")
    (d / "caller.s").write_text(_caller_source())
    subprocess.run([cc, "-shared", "-o", str(d / "caller.so"), str(d / "caller.s")], check=True, capture_output=True)
    fn = ctypes.CDLL(str(d / "caller.so")).win64_call
    fn.restype, fn.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]

    def call(address: int, args: list[int]) -> int:
        if len(args) > MAX_ARGS:
            raise ValueError(f"the caller passes at most {MAX_ARGS} arguments")
        padded = (ctypes.c_int64 * max(4, len(args)))(*args)
        return int(fn(address, padded, len(args)))
    return call


def clobbered(mask: int) -> list[str]:
    return [r for k, r in enumerate(PRESERVED) if mask >> k & 1]


def call_checked(win64_call: Callable[[int, list[int]], int], code: ExecutableCode, args: list[int]) -> None:
    """Call ``code`` as Windows would; it must preserve what Windows says a callee preserves."""
    assert clobbered(win64_call(code.address, args)) == []


def test_the_caller_notices_clobbered_registers(win64_call):
    """A function changing rdi, rsi, r12 and xmm6-xmm15 (for xmm15 only the high half): each one is reported."""
    from tg_x86.assembler import assemble
    from tg_x86.isa import Inst, Op
    from tg_x86.operands import reg
    bad = [Inst(Op.XOR, reg("edi"), reg("edi")), Inst(Op.XOR, reg("esi"), reg("esi")), Inst(Op.INC, reg("r12"))]
    bad += [Inst(Op.VXORPS, reg(f"xmm{n}"), reg(f"xmm{n}"), reg(f"xmm{n}")) for n in range(6, 15)]
    bad += [Inst(Op.VPSRLDQ, reg("xmm15"), reg("xmm15"), 8)]
    code = ExecutableCode(assemble([*bad, Inst(Op.RET)]).code)
    assert clobbered(win64_call(code.address, [0])) == ["rdi", "rsi", "r12", *(f"xmm{n}" for n in range(6, 16))]
    good = ExecutableCode(assemble([Inst(Op.RET)]).code)
    assert clobbered(win64_call(good.address, [1, 2, 3, 4, 5, 6])) == []


def run_win64(win64_call, t: Tensor, *, threads: int = 1) -> np.ndarray:
    """Compile the kernels of ``t`` for Windows and run them in order through the Windows caller (every core_id of
    each); returns the last one's output (``t``)."""
    items, _ = create_schedule([t.uop], t.device)
    kernels = [si for si in items if si.kind != "copy"]
    assert kernels and len(kernels) == len(items), "inputs must be realized: no copies"
    for si in kernels:
        spec = get_program(si.ast, X86Renderer(WIN64), threads)
        code = ExecutableCode(spec.src)
        handles = [b.ensure_allocated().handle for b in si.bufs]
        ptrs = [h if isinstance(h, int) else ctypes.addressof(h) for h in handles]
        vals = [si.var_vals[v] for v in spec.vars]
        for core_id in range(spec.threads):
            call_checked(win64_call, code, [*ptrs, *vals, core_id])
    return kernels[-1].bufs[0].numpy()


def inputs(n: int, k: int) -> list[Tensor]:
    rng = np.random.default_rng(k)
    return [Tensor(rng.standard_normal(n).astype(np.float32), device="CPU").realize() for _ in range(k)]


@pytest.mark.parametrize("nbufs", [3, 4, 5, 9, 12])
def test_arguments_in_registers_and_on_the_stack(win64_call, nbufs):
    """1 output + nbufs-1 inputs + core_id: 4 arguments in registers, the rest above the home area."""
    xs = inputs(64, nbufs - 1)
    t, ref = xs[0], xs[0].numpy()
    for k, x in enumerate(xs[1:]):
        t, ref = (t * x, ref * x.numpy()) if k % 2 else (t + x, ref + x.numpy())
    np.testing.assert_allclose(run_win64(win64_call, t), ref, rtol=1e-6)


def test_int32_variable_and_core_id_on_the_stack(win64_call):
    """A bound variable (an int32 argument after the pointers) and a kernel split over 3 cores: both arrive on the
    stack, and every core_id computes its part."""
    from tgcore.uop import UOp
    xs = inputs(3000, 5)
    t = xs[0]
    for x in xs[1:]:
        t = t + x
    t = t * Tensor(UOp.variable("k", 0, 100).bind(7)).float()
    got = run_win64(win64_call, t, threads=3)
    np.testing.assert_allclose(got, sum(x.numpy() for x in xs) * 7, rtol=1e-5)


def test_vector_registers_xmm6_to_xmm15_are_preserved(win64_call):
    """A matmul keeps many ymm accumulators: the code uses xmm6-xmm15 and must restore them."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 32)).astype(np.float32)
    b = rng.standard_normal((32, 32)).astype(np.float32)
    t = Tensor(a, device="CPU") @ Tensor(b, device="CPU")
    items, _ = create_schedule([t.uop], "CPU")
    (si,) = [si for si in items if si.kind != "copy"]
    code = get_program(si.ast, X86Renderer(WIN64), 1).src
    used = {int(r[3:]) for i in disassemble(code) for r in i.regs() if r[:3] in ("xmm", "ymm")}
    assert used & set(range(6, 16)), "the kernel should use some of xmm6-xmm15"
    np.testing.assert_allclose(run_win64(win64_call, t), (a @ b).ravel(), rtol=1e-4, atol=1e-4)


def test_spilled_vectors_use_the_scratch_registers_and_restore_them(win64_call):
    """exp of a row minus its max, summed: the exp kernel holds more vectors than registers, and its fills go through
    xmm13-xmm15, which Windows wants preserved."""
    x = np.random.default_rng(2).standard_normal((16, 1024)).astype(np.float32)
    xt = Tensor(x, device="CPU").realize()
    t = (xt - xt.max(1, keepdim=True)).exp().sum(1)
    items, _ = create_schedule([t.uop], "CPU")
    code = get_program(items[-1].ast, X86Renderer(WIN64), 1).src
    assert {r for i in disassemble(code) for r in i.regs()} & {"xmm13", "xmm14", "xmm15", "ymm13", "ymm14", "ymm15"}
    ref = np.exp(x - x.max(1, keepdims=True)).sum(1)
    np.testing.assert_allclose(run_win64(win64_call, t), ref, rtol=1e-5)


def test_same_code_as_system_v_but_the_frame():
    """The body does not depend on the ABI: only the prologue, the epilogue and the argument slots differ."""
    t = inputs(64, 3)
    e = t[0] * t[1] + t[2]
    items, _ = create_schedule([e.uop], "CPU")
    (si,) = [si for si in items if si.kind != "copy"]
    win = [i.mnemonic for i in disassemble(get_program(si.ast, X86Renderer(WIN64), 1).src)]
    sysv = [i.mnemonic for i in disassemble(get_program(si.ast, X86Renderer(SYSV), 1).src)]
    assert win != sysv
    assert [m for m in win if m.startswith("vf") or m.startswith("vmul") or m.startswith("vadd")] == \
        [m for m in sysv if m.startswith("vf") or m.startswith("vmul") or m.startswith("vadd")]


def test_cpuid_stub_for_windows_reads_its_arguments_from_rcx_rdx_r8(win64_call):
    """The core's CPUID probe for Windows, called as Windows would, agrees with the System V one; so do their
    XGETBV stubs. The bytes are also what this plugin's assembler encodes for the same instructions."""
    from tg_x86.assembler import assemble
    from tg_x86.isa import Inst, Op
    from tg_x86.operands import dword
    from tg_x86.operands import reg as r

    from tgcore.runtime.cpufeatures import CPUID_CODE, XGETBV_CODE
    out_win, out_sysv = (ctypes.c_uint32 * 4)(), (ctypes.c_uint32 * 4)()
    call_checked(win64_call, ExecutableCode(CPUID_CODE["win64"]), [1, 0, ctypes.addressof(out_win)])
    ExecutableCode(CPUID_CODE["sysv"]).function(None, ctypes.c_uint32, ctypes.c_uint32,
                                                ctypes.POINTER(ctypes.c_uint32))(1, 0, out_sysv)
    # leaf 1: eax (family/model/stepping) and ecx/edx feature bits are the same on every call and core
    assert (out_win[0], out_win[2] & ~(1 << 27), out_win[3]) == (out_sysv[0], out_sysv[2] & ~(1 << 27), out_sysv[3])
    if out_sysv[2] >> 27 & 1:   # OSXSAVE: XGETBV may run; the caller reports registers, so this checks only those
        call_checked(win64_call, ExecutableCode(XGETBV_CODE["win64"]), [0])
    for abi, (a0, a1, a2) in ((SYSV, ("edi", "esi", "rdx")), (WIN64, ("ecx", "edx", "r8"))):
        assert abi.arg_regs[2] == a2
        stores = [Inst(Op.MOV, dword(r("r10"), disp=4 * k), r(name)) for k, name in enumerate(("eax", "ebx", "ecx",
                                                                                             "edx"))]
        cpuid = [Inst(Op.PUSH, r("rbx")), Inst(Op.MOV, r("r10"), r(a2)), Inst(Op.MOV, r("eax"), r(a0)),
                 Inst(Op.MOV, r("ecx"), r(a1)), Inst(Op.CPUID), *stores, Inst(Op.POP, r("rbx")), Inst(Op.RET)]
        xgetbv = [Inst(Op.MOV, r("ecx"), r(a0))] if a0 != "ecx" else []
        xgetbv += [Inst(Op.XGETBV), Inst(Op.SHL, r("rdx"), 32), Inst(Op.OR, r("rax"), r("rdx")), Inst(Op.RET)]
        assert assemble(cpuid).code == CPUID_CODE[abi.name]
        assert assemble(xgetbv).code == XGETBV_CODE[abi.name]


class FakeKernel32:
    """Records the calls ``WindowsPages`` makes; memory comes from a ctypes buffer."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.protection: dict[int, int] = {}
        self.buf = ctypes.create_string_buffer(1 << 16)

    def VirtualAlloc(self, addr, size, kind, protect):
        a = ctypes.addressof(self.buf)
        self.calls.append(("alloc", size, kind, protect))
        self.protection[a] = protect
        return a

    def VirtualProtect(self, addr, size, protect, old):
        self.calls.append(("protect", size, protect))
        self.protection[addr] = protect
        return 1

    def FlushInstructionCache(self, process, addr, size):
        self.calls.append(("flush", size))
        return 1

    def GetCurrentProcess(self):
        return -1

    def VirtualFree(self, addr, size, kind):
        self.calls.append(("free", size, kind))
        return 1


def test_windows_pages_are_never_writable_and_executable_at_once():
    k32 = FakeKernel32()
    code = ExecutableCode(bytes([0xC3]), pages=WindowsPages(k32))
    assert [c[0] for c in k32.calls] == ["alloc", "protect", "flush"]
    assert k32.calls[0][2:] == (0x3000, 0x04)   # MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE
    assert k32.calls[1][2] == 0x20              # PAGE_EXECUTE_READ
    assert all(p in (0x04, 0x20) for p in k32.protection.values())
    code.close()
    assert k32.calls[-1] == ("free", 0, 0x8000)  # MEM_RELEASE


def test_windows_pages_report_a_failed_allocation():
    k32 = FakeKernel32()
    k32.VirtualAlloc = lambda *a: 0  # type: ignore[method-assign]
    with pytest.raises(OSError, match="VirtualAlloc"):
        ExecutableCode(bytes([0xC3]), pages=WindowsPages(k32))


def test_dtypes_are_unchanged_by_the_abi(win64_call):
    """An int32 kernel: int arguments and results through the Windows frame."""
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, 64).astype(np.int32)
    t = Tensor(a, device="CPU") * 3 + Tensor(a[::-1].copy(), device="CPU")
    assert t.dtype is dtypes.int32
    np.testing.assert_array_equal(run_win64(win64_call, t), a * 3 + a[::-1])



def test_gated_accesses_through_frame_slots(win64_call):
    """A padded conv2d holds many gprs, so its gated loads cmov their address to the zero slot's address read from
    a pointer slot the prologue fills (through rax, no argument register on either ABI): under the Windows frame
    (home area, arguments above it) it computes what numpy does."""
    from test_x86_gated import dummy_picks

    from tgcore.nn import functional as F
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    t = F.conv2d(Tensor(x, device="CPU").realize(), Tensor(w, device="CPU").realize(), padding=1)
    items, _ = create_schedule([t.uop], "CPU")
    (si,) = [si for si in items if si.kind != "copy"]
    picks = dummy_picks(disassemble(get_program(si.ast, X86Renderer(WIN64, isa="avx2"), 1).src))
    assert picks and all(p.operands[1].kind == "mem" for p in picks)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 16, j:j + 16], w[:, :, i, j].astype(np.float64))
              for i in range(3) for j in range(3))
    np.testing.assert_allclose(run_win64(win64_call, t), ref.ravel(), rtol=1e-4, atol=1e-4)
