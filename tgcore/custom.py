"""Hand-written kernels: machine instructions scheduled like any other kernel.

In:  tensors, and a builder ``fxn(*params) -> UOp`` that turns one PARAM per tensor (a pointer
     typed with the tensor's dtype and element count, slot = the tensor's position) into a
     program: ``custom_program(name, ins, ...)``, a SINK of INS uops whose ``arg`` is any hashable
     instruction object the device's renderer understands, carrying the launch dimensions and
     cost estimates in a ``KernelLaunch``.
Out: the tensors after the kernel ran (``Tensor.custom_kernel``): lazy like everything else; the
     scheduler realizes every input into a whole buffer, calls ``fxn`` and emits one schedule item.

The kernel writes its outputs in place, so each returned tensor is "tensor i once the kernel is
done", a tensor-level ``AFTER(CUSTOM_KERNEL, *inputs)`` with ``arg = i``. A renderer that can run
such programs says so with ``custom_kernels = True``; its program is called with ``global_size`` and
``local_size`` bound. Gradients come from ``grad_fxn(grad, index, *inputs)``, returning one
gradient (or None) per input.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

Dims = tuple[int, int, int]


@dataclass(frozen=True)
class KernelLaunch:
    """How to launch a hand-written program, and what it costs (for the DEBUG=2 line)."""
    name: str
    global_size: Dims = (1, 1, 1)   # workgroups per dimension
    local_size: Dims = (1, 1, 1)    # threads per workgroup per dimension
    ops: int = 0                    # arithmetic operations, estimated by the author
    mem: int = 0                    # bytes moved, estimated by the author
    n_args: int = 0                 # buffers the kernel takes (filled in by the scheduler)


@dataclass(frozen=True)
class CustomKernel:
    """The ``arg`` of a tensor-level CUSTOM_KERNEL node."""
    fxn: Callable[..., UOp]
    grad_fxn: Callable[..., Sequence[Any]] | None = None


def _dims(name: str, what: str, dims: Sequence[int]) -> Dims:
    dims = tuple(int(d) for d in dims)
    if len(dims) > 3 or any(d < 1 for d in dims):
        raise ValueError(f"custom kernel {name!r}: {what} must be 1 to 3 positive sizes, got {dims}")
    return (dims + (1, 1, 1))[:3]  # type: ignore[return-value]


def custom_program(name: str, ins: Sequence[UOp | Any], global_size: Sequence[int] = (1, 1, 1),
                   local_size: Sequence[int] = (1, 1, 1), ops: int = 0, mem: int = 0) -> UOp:
    """The program a custom kernel's builder returns. ``ins`` are INS uops, or instruction objects that
    are wrapped into INS uops (``UOp(Ops.INS, void, (), arg=instruction)``)."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"custom kernel name must be a non-empty identifier, got {name!r}")
    if not ins:
        raise ValueError(f"custom kernel {name!r} has no instructions")
    uops = tuple(i if isinstance(i, UOp) else UOp(Ops.INS, dtypes.void, (), i) for i in ins)
    if any(u.op is not Ops.INS for u in uops):
        raise ValueError(f"custom kernel {name!r}: instructions must be INS uops")
    launch = KernelLaunch(name, _dims(name, "global_size", global_size), _dims(name, "local_size", local_size),
                          int(ops), int(mem))
    return UOp(Ops.SINK, dtypes.void, uops, launch)


def is_custom_program(ast: UOp) -> bool:
    return ast.op is Ops.SINK and isinstance(ast.arg, KernelLaunch)


def build_program(kernel: CustomKernel, params: list[UOp]) -> UOp:
    """Call the author's builder and check that it returned a program."""
    program = kernel.fxn(*params)
    if not isinstance(program, UOp) or not is_custom_program(program):
        name = getattr(kernel.fxn, "__name__", repr(kernel.fxn))
        raise TypeError(f"custom kernel builder {name} must return custom_program(...), got {type(program).__name__}")
    return program.replace(arg=replace(program.arg, n_args=len(params)))
