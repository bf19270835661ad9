"""RANGE args (``tgcore.uop.axis``): the record's rules, the nesting order of loops, checks, spellings that do not
depend on the process."""
from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys

import pytest

from tgcore.codegen import get_program, simplify_kernel
from tgcore.codegen.optimize import Opt, OptOps, apply_opts
from tgcore.codegen.search import kernel_fingerprint
from tgcore.dtype import dtypes
from tgcore.runtime.python import KernelError, PythonProgram
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import AxisArg, Ops, RangeKind, SpecError, SplitPart, UOp, type_verify

GLOBAL, REDUCE, THREAD, TILE, UPCAST = (RangeKind.GLOBAL, RangeKind.REDUCE, RangeKind.THREAD, RangeKind.TILE,
                                        RangeKind.UPCAST)
# a GEMM's loops split every way an optimization list can: K tiled and unrolled, rows unrolled, columns vectorized,
# rows over threads
GEMM_OPTS = [Opt(OptOps.TILE, 2, 8), Opt(OptOps.UNROLL, 2, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.UPCAST, 1, 8),
             Opt(OptOps.THREAD, 0, 2)]
SHAPES = (16, 24, 32)  # m, k, n

FINGERPRINT = """
import hashlib
from tgcore.codegen import simplify_kernel
from tgcore.codegen.optimize import Opt, OptOps, apply_opts
from tgcore.codegen.search import kernel_fingerprint
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
a, b = Tensor.empty(16, 24, device="CPU"), Tensor.empty(24, 32, device="CPU")
ast = simplify_kernel(create_schedule([(a @ b).uop], "CPU")[0][-1].ast)
opts = [Opt(OptOps[op], axis, amount) for op, axis, amount in OPTS]
optimized, _ = apply_opts(ast, opts, open_device("CPU").renderer)
print(hashlib.sha256(kernel_fingerprint(optimized).encode()).hexdigest())
"""


def gemm_kernel(device: str = "CPU") -> UOp:
    m, k, n = SHAPES
    a, b = Tensor.empty(m, k, device=device), Tensor.empty(k, n, device=device)
    return simplify_kernel(create_schedule([(a @ b).uop], device)[0][-1].ast)


def test_fields_that_do_not_fit_the_kind_are_refused():
    with pytest.raises(TypeError, match="RangeKind"):
        AxisArg(0, "global")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int axis"):
        AxisArg("0", GLOBAL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads"):
        AxisArg(0, THREAD)
    with pytest.raises(ValueError, match="threads"):
        AxisArg(0, GLOBAL, threads=2)
    with pytest.raises(ValueError, match="lanes_of"):
        AxisArg(0, UPCAST)
    with pytest.raises(ValueError, match="lanes_of"):
        AxisArg(0, REDUCE, lanes_of=REDUCE)
    with pytest.raises(ValueError, match="split into parts"):
        AxisArg(0, GLOBAL, parts=(SplitPart.IN_TILE,))


def test_loops_nest_threads_then_tiles_then_outputs_then_reductions():
    """A GEMM split every way opens its loops outermost first: the thread's chunk of rows, the K tile (its partial
    sums go to the output), the output loops by axis (what is left of the rows in a thread's chunk, the columns), the
    loop inside the K tile."""
    renderer = open_device("CPU").renderer
    spec = get_program(gemm_kernel(), renderer, 2, GEMM_OPTS)
    loops = [u.arg for u in spec.uops if u.op is Ops.RANGE]
    assert [a.kind for a in loops] == [THREAD, TILE, GLOBAL, GLOBAL, REDUCE], loops
    assert loops[0] == AxisArg(0, THREAD, threads=2) and [a.axis for a in loops[2:4]] == [0, 1]
    assert loops[1].axis == loops[4].axis == 0 and loops[4].parts == (SplitPart.IN_TILE,)  # reduced axis 0
    assert sorted(loops[::-1], key=AxisArg.nesting_key) == loops


def test_a_block_loop_encloses_its_inside():
    outer, inner = AxisArg(1, REDUCE, parts=(SplitPart.BLOCK,)), AxisArg(1, REDUCE, parts=(SplitPart.IN_BLOCK,))
    assert sorted([inner, outer], key=AxisArg.nesting_key) == [outer, inner]
    assert sorted([AxisArg(1, GLOBAL), AxisArg(0, REDUCE), AxisArg(0, GLOBAL)], key=AxisArg.nesting_key) == \
        [AxisArg(0, GLOBAL), AxisArg(1, GLOBAL), AxisArg(0, REDUCE)]


def test_the_spec_wants_an_axis_arg_on_a_loop():
    end = UOp.const(dtypes.int32, 4)
    type_verify(UOp.range(4, AxisArg(0, GLOBAL)))
    with pytest.raises(SpecError):
        type_verify(UOp(Ops.RANGE, dtypes.int32, (end,), (0, "global")))


def test_the_python_device_refuses_a_loop_without_an_axis_arg():
    out = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0)
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
    sink = UOp.sink(out.index(r).store(UOp.const(dtypes.float32, 1.0)))
    with pytest.raises(KernelError, match="AxisArg"):
        PythonProgram("k", pickle.dumps(sink))


def test_spellings_are_readable():
    arg = AxisArg(2, REDUCE, parts=(SplitPart.IN_TILE,), split=1)
    assert str(arg) == "2_reduce_in tile_1" and repr(arg) == "AxisArg(2, REDUCE, parts=IN_TILE, split=1)"
    assert repr(AxisArg(0, THREAD, threads=4)) == "AxisArg(0, THREAD, threads=4)"
    assert UOp.range(8, AxisArg(0, GLOBAL)).render() == "r0_global"


def test_a_pickled_kernel_is_the_same_graph():
    optimized, _ = apply_opts(gemm_kernel(), GEMM_OPTS, open_device("CPU").renderer)
    assert pickle.loads(pickle.dumps(optimized)) is optimized


def test_the_fingerprint_of_a_split_kernel_is_the_same_in_another_process():
    """BEAM keys hash a kernel's fingerprint, which spells each loop's arg: another process (other string hashes)
    spells an optimized GEMM, with a loop of every kind, the same way."""
    optimized, _ = apply_opts(gemm_kernel(), GEMM_OPTS, open_device("CPU").renderer)
    text = kernel_fingerprint(optimized)
    assert text is not None and "AxisArg(0, THREAD, threads=2)" in text
    opts = [(o.op.name, o.axis, o.amount) for o in GEMM_OPTS]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", FINGERPRINT.replace("OPTS", repr(opts))], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    assert out[-1] == hashlib.sha256(text.encode()).hexdigest()
