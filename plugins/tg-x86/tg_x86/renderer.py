"""The ``X86`` renderer of the CPU device: linear UOps -> x86-64 machine code, and its loader.

In:  a kernel's linear UOp list (``render``), then the code bytes (``X86Program``).
Out: ``render`` returns the machine code of ``void name(<buffer pointers...>, <int32 vals...>,
     int32 core_id)`` (the CPU device's calling convention); ``X86Compiler`` passes the bytes
     through; ``X86Program`` maps them executable and calls them, on the shared thread pool
     when a kernel runs on several cores.

Pipeline: ``isel.select`` (UOps -> machine instructions on virtual registers; vector UOps through
``vsel``) -> ``machine.cleanup`` (dead values, accumulator updates write the accumulator) -> the core's
linear-scan allocator -> ``machine.finish`` (prologue/epilogue) -> ``assemble``. ``DEBUG=4`` prints the
Intel-syntax listing of each kernel.
"""
from __future__ import annotations

import ctypes
import time
from typing import Any

from tgcore.dtype import dtypes
from tgcore.renderer import Renderer
from tgcore.runtime.compiler import Compiler
from tgcore.uop import Ops, UOp


class X86Compiler(Compiler):
    """The renderer already produced machine code: compiling is the identity (nothing to cache)."""
    cache_key = None

    def compile(self, src: str | bytes) -> bytes:  # type: ignore[override]
        if isinstance(src, str):
            raise TypeError("the X86 compiler takes the machine code bytes render() produced")
        return bytes(src)


# gprs an op's value holds for long: pointers and variables, a loop's counter and limit
PRESSURE = {Ops.PARAM: 1, Ops.DEFINE_VAR: 1, Ops.RANGE: 2}


def lower(name: str, uops: list[UOp]) -> list[Any]:
    """The kernel as ``Inst``s and ``Label``s (after register allocation)."""
    from tg_x86.isel import select, select_both
    from tg_x86.machine import TARGET, cleanup, finish
    from tgcore.codegen.regalloc import plan_registers
    # 9 allocatable gprs: with many buffers and loops, read pointers and variables from their argument slots
    # where they are used instead of holding them (else do that only if holding them made the allocator spill
    # gprs and reading them where used spills less)
    pressure = sum(PRESSURE.get(u.op, 0) for u in uops)
    if pressure > 9:
        program, frame = select(uops, remat_args=True)
        plan = plan_registers(cleanup(program), TARGET)
        return finish(plan.program, frame, plan.rewrite())
    held, remat, frame = select_both(uops)
    plan = plan_registers(cleanup(held), TARGET)
    fills = plan.spill_code("gpr")  # gpr fills and spill stores
    param = Ops.PARAM  # a local: enum members are slow to look up (3.11)
    params = sum(1 for u in uops if u.op is param)
    if fills > params:  # else reading pointers where used cannot cost fewer gpr loads and stores
        plan2 = plan_registers(cleanup(remat), TARGET)
        if plan2.spill_code("gpr") + params < fills:
            plan = plan2
    return finish(plan.program, frame, plan.rewrite())


class X86Renderer(Renderer):
    device = "CPU"
    name = "X86"
    linear = True
    has_threads = True
    emulated_floats = frozenset({dtypes.float16, dtypes.bfloat16})
    # AVX2: 8 lanes of 32-bit types, 4 of 64-bit ones (wider vectors are split into ymm pieces)
    simd_widths = {dtypes.float32: 8, dtypes.int32: 8, dtypes.uint32: 8, dtypes.float64: 4, dtypes.int64: 4,
                   dtypes.uint64: 4}

    def __init__(self) -> None:
        self.compiler = X86Compiler()
        self.program = X86Program

    def render(self, name: str, kernel: list[UOp] | UOp) -> bytes:
        assert isinstance(kernel, list), "X86 renders linear programs"
        from tg_x86.assembler import assemble
        from tgcore.helpers import DEBUG
        insts = lower(name, kernel)
        if DEBUG >= 4:
            from tg_x86.listing import asm
            print(f"; {name}\n{asm(insts)}")
        return assemble(insts).code


class X86Program:
    """``X86Program(name, lib)``: machine code for one kernel, callable like ``CPUProgram``.

    ``prg(*bufs, vals=(), threads=1, wait=False)``: bufs are allocator handles (ctypes arrays)
    or int addresses, vals int32 scalars. Returns the elapsed seconds if ``wait``, else None.
    """

    def __init__(self, name: str, lib: bytes) -> None:
        from tg_x86.runtime import ExecutableCode
        self.name = name
        self.code = ExecutableCode(lib)
        self._fns: dict[tuple[int, int], Any] = {}

    def _fn(self, nbufs: int, nvals: int) -> Any:
        fn = self._fns.get((nbufs, nvals))
        if fn is None:
            argtypes = [ctypes.c_void_p] * nbufs + [ctypes.c_int32] * (nvals + 1)
            fn = self._fns[(nbufs, nvals)] = self.code.function(None, *argtypes)
        return fn

    def __call__(self, *bufs: Any, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = False) -> float | None:
        fn = self._fn(len(bufs), len(vals))
        args = tuple(b if isinstance(b, int) else ctypes.addressof(b) for b in bufs) + tuple(vals)
        from tgcore.runtime.cpu import run_on_cores
        start = time.perf_counter() if wait else 0.0
        run_on_cores(fn, args, threads)
        return time.perf_counter() - start if wait else None

    def __repr__(self) -> str:
        return f"<X86Program {self.name}>"
