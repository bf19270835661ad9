"""``asm_gemm(a, b)``: the hand-written WMMA GEMM (``tg_amd.kernels.gemm``) from Tensor code, with backward.

In: 2-D tensors a (M, K) and b (K, N) on an ``AMD:EMU`` device (any float dtype; they are cast to
float16, the kernel's input type). Out: a float32 (M, N) tensor: f16 products accumulated in f32.

When the shape fits the kernel (M, N multiples of 128, K a multiple of 32) the product is one custom
kernel (``Tensor.custom_kernel``) running the machine code for the device's arch (``AMD_ARCH``, default
gfx1200; or ``arch=``). Otherwise, or on another device, it is the normal matmul of the float16-rounded
inputs in float32 (same numerics up to summation order); ``asm_gemm_plan`` says which and why.
Backward: grad_a = g @ b.T and grad_b = a.T @ g, each through ``asm_gemm`` again (so through the asm
kernel when that shape allows; the incoming gradient is rounded to float16 on that path). The kernel's
inputs are ``a.half()`` and ``b.half()``, so their gradients are float16 (as in torch) before the cast
back to a's and b's dtypes.
Nothing changes for code that does not call ``asm_gemm``: there is no global switch.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from tg_amd.assembler import decode_all
from tg_amd.device import AmdEmuDevice, AmdIns, AmdKernel
from tg_amd.kernels.gemm import GemmKernel, ShapeError, check_shape, gemm_kernel
from tg_amd.syntax import format_inst
from tgcore.custom import custom_program
from tgcore.dtype import dtypes
from tgcore.runtime.registry import open_device
from tgcore.tensor import Tensor
from tgcore.uop import UOp


@lru_cache(maxsize=32)
def kernel_instructions(code: bytes, arch: str) -> tuple[AmdIns, ...]:
    """Machine code cut into one ``AmdIns`` per instruction (the args of a custom kernel's INS uops)."""
    decoded = decode_all(code, arch)
    ends = [pos for pos, _ in decoded[1:]] + [len(code)]
    return tuple(AmdIns(arch, code[pos:end], format_inst(inst))
                 for (pos, inst), end in zip(decoded, ends, strict=True))


def asm_gemm_plan(m: int, n: int, k: int, device: str, arch: str | None = None) -> tuple[str | None, str]:
    """(arch, "") when the asm kernel runs this product on ``device``; (None, why not) otherwise."""
    try:
        dev = open_device(device)
    except Exception as e:  # a device that cannot open cannot run the kernel either
        return None, f"device {device}: {e}"
    if not isinstance(dev, AmdEmuDevice):
        return None, f"device {device} is not AMD:EMU"
    try:
        check_shape(m, n, k)
    except ShapeError as e:
        return None, str(e)
    return arch or dev.arch, ""


def _launch(kern: GemmKernel) -> Any:
    def build(c: UOp, a: UOp, b: UOp) -> UOp:
        m, n, k = kern.shape
        ins = [AmdKernel(kern.lds_bytes, (True, True, False)), *kernel_instructions(kern.code, kern.arch)]
        return custom_program(kern.name, ins, kern.global_size, kern.local_size, ops=kern.flops,
                              mem=2 * (m * k + k * n) + 4 * m * n)
    return build


def _gradients(g: Tensor, index: int, c: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor | None, ...]:
    if index == 1:   # the kernel leaves its inputs as they were
        return None, g, None
    if index == 2:
        return None, None, g
    grad_a = asm_gemm(g, b.T).cast(a.dtype)
    grad_b = asm_gemm(a.T, g).cast(b.dtype)
    return None, grad_a, grad_b


def asm_gemm(a: Tensor, b: Tensor, arch: str | None = None) -> Tensor:
    """float32 ``a @ b`` of float16-rounded inputs through the asm WMMA kernel (see module docstring)."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"asm_gemm takes 2-D tensors, got shapes {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"asm_gemm: inner dimensions differ: a is {a.shape}, b is {b.shape}")
    if a.device != b.device:
        raise ValueError(f"asm_gemm: a is on {a.device}, b on {b.device}")
    a16, b16 = a.cast(dtypes.float16), b.cast(dtypes.float16)
    use_arch, _why = asm_gemm_plan(m, n, k, a.device, arch)
    if use_arch is None:
        return a16.float() @ b16.float()
    kern = gemm_kernel(m, n, k, use_arch)
    c = Tensor.empty(m, n, dtype=dtypes.float32, device=a.device)
    return Tensor.custom_kernel(c, a16.contiguous(), b16.contiguous(), fxn=_launch(kern), grad_fxn=_gradients)[0]
