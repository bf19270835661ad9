"""C renderer: an int32 vector's lanes reduced to one scalar by ``chorizontal``'s helpers (halves, quarters, pairs)."""
from __future__ import annotations

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.renderer.chorizontal import HORIZONTAL_HELPERS, horizontal_reduction
from tgcore.tensor import Tensor
from tgcore.uop import Ops, UOp


def _helpers_called(out: Tensor) -> set[str]:
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    renderer = open_device("CPU").renderer
    items = [si for si in create_schedule([out.uop], "CPU")[0] if si.kind != "copy"]
    return {u.arg for si in items for u in get_program(si.ast, renderer).uops if u.op is Ops.CUSTOMI}


@pytest.mark.parametrize("op", ["max", "sum"])
def test_block_reductions_of_int32_match_numpy(op):
    """Blocks of 32 int32 (a block's largest |x| as bits, tg-gguf's activation scales; a block's sum) at the extremes
    of the range, wrapping sums included: the same values as numpy, through the helper."""
    rng = np.random.default_rng(1)
    a = rng.integers(-2**31, 2**31, (6, 64, 32), dtype=np.int64).astype(np.int32)
    a[0, 0] = -2**31
    a[0, 1] = 2**31 - 1
    a[1, 2, 7] = 2**31 - 1  # the largest in lane 7 only
    out = Tensor(a).max(-1) if op == "max" else Tensor(a).sum(-1, dtype="int32")
    assert HORIZONTAL_HELPERS[Ops.MAX if op == "max" else Ops.ADD] in _helpers_called(out)
    expected = a.max(-1) if op == "max" else a.astype(np.int64).sum(-1).astype(np.int32)  # (int32 sums wrap)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_only_a_tree_over_every_lane_once_is_taken():
    v = UOp(Ops.DEFINE_VAR, dtypes.int32.vec(8), (), ("v", 0, 1))
    lanes = [v.gep(i) for i in range(8)]

    def tree(xs: list[UOp], op: Ops = Ops.MAX) -> UOp:
        half = len(xs) // 2
        return xs[0] if len(xs) == 1 else UOp(op, dtypes.int32, (tree(xs[:half], op), tree(xs[half:], op)))
    assert horizontal_reduction(tree(lanes)).arg == "tg_hmax_i32x8"
    assert horizontal_reduction(tree(lanes, Ops.ADD)).arg == "tg_hadd_i32x8"
    assert horizontal_reduction(tree(lanes[:4] + lanes[:4])) is None  # lanes 0-3 twice
    assert horizontal_reduction(tree(lanes[:4])) is None  # half the lanes
    mixed = UOp(Ops.MAX, dtypes.int32, (tree(lanes[:4], Ops.ADD), tree(lanes[4:])))
    assert horizontal_reduction(mixed) is None
