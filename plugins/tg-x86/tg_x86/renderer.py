"""The ``X86`` renderer of the CPU device: linear UOps -> x86-64 machine code, and its loader.

In:  a kernel's linear UOp list (``render``), then the code bytes (``X86Program``).
Out: ``render`` returns the machine code of ``void name(<buffer pointers...>, <int32 vals...>,
     int32 core_id)`` (the CPU device's calling convention); ``X86Compiler`` passes the bytes
     through; ``X86Program`` maps them executable and calls them, on the shared thread pool
     when a kernel runs on several cores.

``X86Renderer`` is an ``ISARenderer`` (``tgcore.renderer.isa``): its stages are
    isel           ``isel.ISEL`` rules run by ``line_rewrite`` with an ``isel.Selector`` as context
    pre_regalloc   ``machine.cleanup`` (dead values, accumulator updates write the accumulator), run by
                   ``plan`` (it hands the cleanup's registers to the allocator)
    choose_plan    pointers and variables held in registers, or read from their argument slots where
                   used when that spills fewer gprs (both programs come from one selection; the second
                   plan reuses the registers the first found in the instructions they share)
    regalloc       the core's linear scan on one of ``machine.TARGETS``, handed the registers of each instruction
                   the cleanup found (``instruction_registers``)
    late_regalloc  with TG_SPEC=1: each flag reader still reads the flags it read before (``check_flags_kept``)
    post_regalloc  ``machine.finish`` (prologue/epilogue for the renderer's ABI, ``abi.py``; ``Inst``s)
    asm / encode   ``listing.asm`` / ``assembler.assemble``
``DEBUG=4`` prints the Intel-syntax listing of each kernel.
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from tg_x86 import (  # modules: each stage is looked up when it runs (benches wrap them)
    assembler,
    listing,
    machine,
    plan_code,
)
from tg_x86.abi import HOST, Abi
from tg_x86.bytedot import byte_dot_rule, lane_by_lane_gathers, row_lanes_rule
from tg_x86.isa import Flag, Op
from tg_x86.isel import ISEL, Selector
from tg_x86.lanes import FLAG_BARRIERS, HELD_GPRS, canon_value, set_wide_level
from tg_x86.machine import GPR, TARGET
from tg_x86.wide import select_wide, zmm_program
from tgcore.codegen import regalloc
from tgcore.codegen.regalloc import MInst, RegisterPlan
from tgcore.dtype import dtypes
from tgcore.renderer.cbytedot import DOT_ACC_HELPER, DOT_HELPER
from tgcore.renderer.cstyle import combine_byte_loads
from tgcore.renderer.isa import ISARenderer, isa_spec, line_rewrite
from tgcore.runtime.compiler import Compiler
from tgcore.uop import Ops, PatternMatcher, UOp, UPat
from tgcore.uop.spec import spec_enabled


class X86Compiler(Compiler):
    """The renderer already produced machine code: compiling is the identity (nothing to cache)."""
    cache_key = None

    def compile(self, src: str | bytes) -> bytes:  # type: ignore[override]
        if isinstance(src, str):
            raise TypeError("the X86 compiler takes the machine code bytes render() produced")
        return bytes(src)


_LAYOUT_LOCK = threading.Lock()   # held while a kernel is selected (``lanes.set_wide_level`` switches a global)
FLAG_READERS = frozenset(o for o in Op if o.flags & Flag.READS_FLAGS)
FLAG_WRITERS = FLAG_BARRIERS - {"label"}


# what reaches isel: codegen decomposes transcendentals for this renderer (native_transcendentals is False); the one
# inline call is a byte dot product of two 32-byte vectors (``bytedot``)
X86_SPEC = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)), lambda: False),
                           (UPat(Ops.CUSTOMI, dtypes.int32.vec(8), src=(UPat(dtype=dtypes.uint8.vec(32)),
                                                                        UPat(dtype=dtypes.int8.vec(32))),
                                 arg=DOT_HELPER), lambda: True),
                           (UPat(Ops.CUSTOMI, dtypes.int32.vec(8), src=(UPat(dtype=dtypes.int32.vec(8)),
                                                                        UPat(dtype=dtypes.uint8.vec(32)),
                                                                        UPat(dtype=dtypes.int8.vec(32))),
                                 arg=DOT_ACC_HELPER), lambda: True)]) + isa_spec


def clear_memo_tables() -> None:
    """Forget the process-wide memo tables of selection (canonical constants) and encoding (``plan_code.
    clear_encoding_caches``): the state of a fresh process, for benchmarks of first compiles. Nothing else needs it
    (every table is bounded)."""
    canon_value.cache_clear()
    plan_code.clear_encoding_caches()


def lower(name: str, uops: list[UOp]) -> list[Any]:
    """The kernel as ``Inst``s and ``Label``s (after register allocation)."""
    return X86Renderer().lower(name, uops)


# the byte dots' instruction by name (``X86Renderer.dot_instruction``; ``bytedot.sel_dot``)
DOT_OPS = {"vpdpbusd": Op.VPDPBUSD, "{vex} vpdpbusd": Op.VPDPBUSD_VEX, "vpmaddubsw": Op.VPMADDUBSW}


class X86Renderer(ISARenderer[Selector]):
    device = "CPU"
    name = "X86"
    has_threads = True
    emulated_floats = frozenset({dtypes.float16, dtypes.bfloat16})
    # elementwise vectors: 8 lanes of 32-bit types, 4 of 64-bit ones (wider vectors are split into ymm pieces)
    # an unsigned int assembled from consecutive bytes (a quantized file's 16-bit scales) is one load (x86 is
    # little-endian): the core's legalizer makes it a BITCAST of a byte-vector load, selected as one mov/movzx
    # (scalars only: a vector of such ints, a row of float16 weights, is read lane by lane until the selector has a
    # byte-vector BITCAST)
    pre_isel = PatternMatcher([(UPat(Ops.OR, name="x"),
                                lambda x: combine_byte_loads(x) if x.dtype.count == 1 else None)])
    # with AVX512-VNNI: a quantization block's byte products per int32 lane as one vpdpbusd (``bytedot``), which
    # tells codegen (``compiles_byte_dots``) to sum such blocks in lanes
    # (byte_table_lookups: codegen gathers from 16-byte tables; a gather no byte dot takes is made lane by lane)
    # (row_lanes_rule: the output rows in the lanes, tg-gguf's row-interleaved weights: a chain of vpdpbusd per block
    # of 8 rows against 4 activation bytes broadcast; ``row_lane_byte_dots``)
    pre_isel_dots = PatternMatcher([(UPat(Ops.REDUCE, name="red"), byte_dot_rule),
                                    (UPat(Ops.REDUCE, name="red"), row_lanes_rule),
                                    (UPat(Ops.SINK, name="k"), lane_by_lane_gathers)]) + pre_isel
    # float16/bfloat16 vectors are loaded into and stored from float32 pieces (vmemory.widening_cast,
    # narrowing_store); their math is float32's
    simd_widths = {dtypes.float32: 8, dtypes.int32: 8, dtypes.uint32: 8, dtypes.float64: 4, dtypes.int64: 4,
                   dtypes.uint64: 4, dtypes.float16: 8, dtypes.bfloat16: 8}
    # int32 lanes stored as bytes (vmemory.truncated_bytes): the activations' 8-bit rounding is vectorized (was a
    # scalar loop: vdivss per element)
    narrowing_stores = frozenset((src, dst) for src in (dtypes.int32, dtypes.uint32) for dst in (dtypes.int8,
                                                                                            dtypes.uint8))
    vector_bits = 256        # AVX2: ymm; at the AVX-512 level 512 (float32 vectors of 16k lanes in zmm pieces)
    # ymm0-15 while no vector spills (else 13: ymm13-15 become scratch for the fills); AVX-512: zmm0-31
    vector_registers = len(machine.ALL_VEC)
    wide = False             # selected at the AVX-512 level (``wide.py``)
    dot_instruction = ""     # the byte dots' instruction (a key of DOT_OPS), "" for none
    # a quantization block's few vector steps unrolled (as gcc does for the C renderer): each copy's index math and
    # shift amounts fold to constants, and the copies share the loads of the same bytes
    unrolled_trips = 8
    spec = X86_SPEC

    def __init__(self, abi: Abi = HOST, isa: str | None = None, dots: str | None = None) -> None:
        """``abi``: the calling convention of the kernels (the host's, the one ctypes calls them with). ``isa``:
        "avx2" or "avx512" (default: TG_ISA, else the widest level the CPU and OS support). ``dots``: the byte dots'
        instruction (a key of ``DOT_OPS``, "" for none; default: the best the CPU and the level allow)."""
        self.compiler = X86Compiler()
        self.program = X86Program
        self.abi = abi
        self.callee_saved = tuple(GPR[n] for n in abi.callee_saved)
        from tgcore.runtime.cpufeatures import AVX512, FORCEABLE_LEVELS, chosen_isa_level, cpu_features
        self.cache_sizes = cpu_features().caches
        level = FORCEABLE_LEVELS[isa] if isa is not None else chosen_isa_level()
        features = cpu_features().features
        if level is AVX512:
            self.wide = True
            self.vector_bits, self.vector_registers = level.vector_bits, level.vector_registers
            self.masked_vectors = True   # padded tails: opmasks on zmm pieces, vmaskmovps on 32-bit ymm ones
        # the byte dots: vpdpbusd, EVEX with AVX512-VNNI (at the AVX-512 level), else VEX with AVX-VNNI, else
        # vpmaddubsw + vpmaddwd (AVX2)
        if dots is not None:
            self.dot_instruction = dots
        elif level is AVX512 and "avx512_vnni" in features:
            self.dot_instruction = "vpdpbusd"
        else:
            self.dot_instruction = "{vex} vpdpbusd" if "avx_vnni" in features else "vpmaddubsw"
        if self.dot_instruction:
            self.compiles_byte_dots = True
            self.byte_table_lookups = True   # a 16-byte table's 32 bytes in a byte dot: one vpshufb (bytedot)
            self.row_lane_byte_dots = True   # bytedot.row_lanes_rule
            self.pre_isel = self.pre_isel_dots

    isel = ISEL
    target = TARGET

    def listing(self, output: str | bytes) -> tuple[str, str]:
        """The machine code disassembled by capstone (the hex bytes without it)."""
        if isinstance(output, str):
            return output, "text"
        try:
            from tg_x86.listing import disassemble
            return "\n".join(f"{off:6x}  {text}" for off, _, text in disassemble(output)), "asm"
        except ImportError:
            return super().listing(output)

    def context(self, uops: list[UOp], hold_constants: bool = True) -> Selector:
        # always selected reading pointers and variables where used; choose_plan derives the holding program
        ctx = Selector(uops, remat_args=True)
        ctx.hold_constants = hold_constants
        ctx.frame.abi = self.abi
        ctx.dot_op = DOT_OPS.get(self.dot_instruction, Op.VPDPBUSD)
        return ctx

    def select(self, uops: list[UOp]) -> Selector:
        """``select_at_level``, with byte-dot constants held in registers (``bytedot.sel_held_constant``) unless
        the chosen plan then spills vector registers: then again without (that plan is kept for ``choose_plan``)."""
        ctx = self.select_at_level(uops, hold_constants=True)
        if ctx.holds_constants:
            plan = self.choose_plan(ctx)
            if any(iv.vreg.cls != "gpr" for iv in plan.spilled):
                return self.select_at_level(uops, hold_constants=False)
            ctx.chosen_plan = plan
        return ctx

    def select_at_level(self, uops: list[UOp], hold_constants: bool) -> Selector:
        """Selection at the renderer's level: at AVX-512, float32 vectors of 16k lanes in zmm pieces, then (when
        there were any) every vector register in the zmm class (``wide.zmm_program``)."""
        with _LAYOUT_LOCK:  # the layout level is process-wide state: one kernel is selected at a time
            if not self.wide:
                ctx = self.context(uops, hold_constants)
                line_rewrite(ctx.selected_lines(), ctx.isel, ctx, ctx.prog, strict=True)
                return ctx
            set_wide_level(True)
            try:
                ctx = self.context(uops, hold_constants)
                select_wide(ctx)
            finally:
                set_wide_level(False)
        if ctx.zmm_used:  # else the kernel is AVX2 code (ymm pieces only) and keeps the vec class
            zmm_program(ctx.prog)
        return ctx

    def plan(self, program: list[Any], ctx: Selector, regs: list[tuple[list, list]] | None = None) -> RegisterPlan:
        """``machine.cleanup`` (the pre_regalloc stage), then the linear scan's plan, handed the registers the
        cleanup found. ``regs``: ``instruction_registers(program)`` when the caller has them."""
        program, regs = machine.cleanup(program, regs)
        if self.target is not TARGET:
            return regalloc.plan_registers(program, self.target, regs)
        wide, narrow = machine.vector_targets(regs, ctx.zmm_used)
        plan = regalloc.plan_registers(program, wide, regs)
        if any(iv.vreg.cls != "gpr" for iv in plan.spilled):  # their fills need the scratch registers
            plan = regalloc.plan_registers(program, narrow, regs)
        return plan

    def choose_plan(self, ctx: Selector) -> RegisterPlan:
        """Few allocatable gprs (9): with many buffers and loops, read pointers and variables from their argument
        slots where they are used instead of holding them (else do that only if holding them made the
        allocator spill gprs and reading them where used spills less)."""
        if ctx.chosen_plan is not None:   # (chosen in select)
            return ctx.chosen_plan
        plan = self.plan(ctx.prog, ctx) if ctx.pressure > HELD_GPRS else self._held_unless_spilling(ctx)
        if spec_enabled():  # checked again after allocation (late_regalloc); copies added to the plan read no flags
            ctx.flag_reads = flag_sources(plan.program)
        return plan

    def _held_unless_spilling(self, ctx: Selector) -> RegisterPlan:
        """The plan holding pointers and variables in registers, unless reading them where used spills fewer gprs."""
        held = ctx.args_held()
        held_regs = regalloc.instruction_registers(held)
        plan = self.plan(held, ctx, held_regs)
        fills = plan.spill_code("gpr")  # gpr fills and spill stores
        params = ctx.facts.nparams
        if fills > params:  # else reading pointers where used cannot cost fewer gpr loads and stores
            # the two programs share most instructions: their registers are looked at once
            known = dict(zip(map(id, held), held_regs, strict=True))  # ``held`` lives on: its ids stay valid
            plan2 = self.plan(ctx.prog, ctx, regalloc.instruction_registers(ctx.prog, known))
            if plan2.spill_code("gpr") + params < fills:
                plan = plan2
        return plan

    def late_regalloc(self, program: list[Any], ctx: Selector) -> list[Any]:
        if spec_enabled():
            check_flags_kept(program, ctx.flag_reads)
        return program

    def post_regalloc(self, program: list[Any], stack_bytes: int, ctx: Selector) -> list[Any]:
        return machine.finish(program, ctx.frame, (program, stack_bytes))

    def emit(self, plan: RegisterPlan, ctx: Selector) -> bytes:
        """Straight from the plan to bytes (``plan_code.encode_plan``). With TG_SPEC=1 the staged way runs too (its
        late_regalloc checks the flags after allocation) and both must give the same bytes."""
        code = plan_code.encode_plan(plan, ctx.frame)
        if spec_enabled():
            staged = super().emit(plan, ctx)
            if code != staged:
                raise AssertionError("x86: encode_plan and the staged way (rewrite, finish, assemble) disagree")
        return code

    def asm(self, program: Any) -> str:
        return listing.asm(program)

    def encode(self, program: Any) -> bytes:
        return assembler.assemble(program).code


def flag_sources(program: list[Any]) -> dict[int, int]:
    """Which instruction's flags each flag reader (cmov, setcc, jcc) reads: the id of its ``Spec`` -> the id of the
    last flag writer's before it in straight-line code (-1: a label or loop boundary comes first). Selection shares
    one compare among several readers (``flags.compare``); nothing after it may write the flags in between."""
    out: dict[int, int] = {}
    last = -1
    for ins in program:
        if type(ins) is not MInst or ins.op == "label":
            last = -1
        elif ins.op in FLAG_READERS:
            out[id(ins.arg)] = last
        if type(ins) is MInst and ins.op in FLAG_WRITERS:
            last = id(ins.arg)
    return out


def check_flags_kept(allocated: list[Any], before: dict[int, int]) -> None:
    """(TG_SPEC=1) Every flag reader of the allocated program still reads the flags it read before allocation:
    register allocation added only moves (copies, spills, fills, reloads), which leave the flags alone."""
    for reader, writer in flag_sources(allocated).items():
        if before.get(reader, writer) != writer:
            bad = next(ins for ins in allocated if type(ins) is MInst and id(ins.arg) == reader)
            raise AssertionError(f"x86: after register allocation {bad.op.name} no longer reads the flags of the "
                                 "instruction selection meant (something in between writes the flags)")


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
        # the native entry (CPU kernel convention): a jit replay runs every kernel in one native call (NativeGraph)
        self.fxn = self.code.function(None)

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
