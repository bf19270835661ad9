"""Byte-dot products with the output rows in the vector lanes (``heuristic.row_lane_byte_dot_opts``,
``cbytedot.row_lanes_dot``): a weight's rows interleaved by 4 bytes, the activations' bytes the same in every lane.
Against numpy (integer scales: exact in float32), at odd batch sizes, and on the C renderer one chained byte
multiply-add per 4 elements of 8 rows."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


def _kernel_sources(t: Tensor, device: str) -> list[str]:
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    items = [si for si in create_schedule([t.uop], device)[0] if si.kind != "copy"]
    return [get_program(si.ast, open_device(device).renderer).src for si in items]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,groups,blocks", [(1, 2, 3), (3, 3, 2), (8, 2, 2)])
def test_rows_in_lanes_are_exact(batch, groups, blocks, device):
    """``out[m, 8r + l] = sum_b s[r, b, l] * t[m, b] * sum_{g,k} (u[r, b, g, l, k] - 8) * x[m, 32b + 4g + k]``: exact
    against numpy; the C renderer sums each block in int32 with 8 calls of the byte-dot helper, each added to the
    last (its accumulator input)."""
    rng = np.random.default_rng(batch * 100 + groups * 10 + blocks)
    u = rng.integers(0, 256, (groups, blocks, 8, 8, 4)).astype(np.uint8)  # (group, block, g, lane, k)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 32)).astype(np.int8)
    t = rng.integers(1, 4, (batch, blocks)).astype(np.float32)
    ut, st, xt, tt = (Tensor(a, device=device).realize() for a in (u, s, x, t))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 8, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")  # (1, group, lane, b, g, k)
        xi = xt.reshape(batch, 1, 1, blocks, 8, 4).cast("int32")
        scale = st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1) * tt.reshape(batch, 1, 1, blocks, 1, 1)
        value = (w * xi + xi * -8).cast("float32") * scale
        return value.reshape(batch, groups * 8, blocks * 32).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64) - 8, x.reshape(batch, blocks, 8, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None] * t[:, None, None, :]).sum(-1).reshape(batch, groups * 8)
    assert np.abs(ref).max() < 2 ** 24
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert source.count("tg_dot4_u8i8_acc(") >= 7 + 1  # 7 chained calls per block and batch row (+ the helper)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [1, 3])
def test_rows_in_lanes_with_a_scale_per_16_are_exact(batch, device):
    """A scale per 16 elements of each row (Q2_K's): the reduction is blocked by 16 (``heuristic._factor_block``), each
    block's sum in int32 from 4 chained byte multiply-adds, then scaled; exact against numpy. Blocked by 32 as before,
    the scales stayed inside the block's sum and no byte dot was made."""
    groups, blocks = 2, 6  # blocks of 16
    rng = np.random.default_rng(batch)
    u = rng.integers(0, 256, (groups, blocks, 4, 8, 4)).astype(np.uint8)  # (group, block, g, lane, k)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 16)).astype(np.int8)
    t = rng.integers(1, 4, (batch, blocks // 2)).astype(np.float32)  # an activation scale per 32
    ut, st, xt, tt = (Tensor(a, device=device).realize() for a in (u, s, x, t))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 4, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
        xi = xt.reshape(batch, 1, 1, blocks, 4, 4).cast("int32")
        per_32 = tt.reshape(batch, blocks // 2, 1).expand(batch, blocks // 2, 2).reshape(batch, 1, 1, blocks, 1, 1)
        scale = st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1) * per_32
        return ((w * xi).cast("float32") * scale).reshape(batch, groups * 8, blocks * 16).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64), x.reshape(batch, blocks, 4, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None] * np.repeat(t, 2, 1)[:, None, None, :]).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.reshape(batch, groups * 8).astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert source.count("tg_dot4_u8i8_acc(") >= 3 * batch + 1  # 3 chained calls per block and batch row


@pytest.mark.parametrize("device", DEVICES)
def test_rows_in_lanes_with_an_integer_offset_per_block_are_exact(device):
    """An integer per block and batch row added to the byte products before their one conversion (tg-gguf's Q6_K:
    ``-32 sum x`` spread as ``-2 sum x`` per element, int16): still a byte dot (``heuristic._byte_dot`` looks at the
    products, not every integer in the sum), the row-lane plan's chained multiply-adds; exact against numpy."""
    batch, groups, blocks = 3, 2, 4  # blocks of 16
    rng = np.random.default_rng(11)
    u = rng.integers(0, 64, (groups, blocks, 4, 8, 4)).astype(np.uint8)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 16)).astype(np.int8)
    c = (x.reshape(batch, blocks, 16).astype(np.int64).sum(-1) * -2).astype(np.int16)
    ut, st, xt, ct = (Tensor(a, device=device).realize() for a in (u, s, x, c))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 4, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
        xi = xt.reshape(batch, 1, 1, blocks, 4, 4).cast("int32")
        value = (w * xi + ct.reshape(batch, 1, 1, blocks, 1, 1).cast("int32")).cast("float32")
        return (value * st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1)).reshape(batch, groups * 8, -1).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64) - 32, x.reshape(batch, blocks, 4, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None]).sum(-1).reshape(batch, groups * 8)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert source.count("tg_dot4_u8i8_acc(") >= 3 * batch + 1  # 3 chained calls per block and batch row


def test_unshuffled_only_drops_a_shuffle_of_one_repeated_word():
    """``cbytedot._unshuffled``: lanes ``i % 4`` of 8 bytes are the bytes themselves when the 8 bytes are one word
    twice (``_repeated``'s broadcast), and stay a shuffle when the two words differ."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytedot import _unshuffled
    from tgcore.uop import Ops, UOp
    a, b = (UOp(Ops.DEFINE_VAR, dtypes.uint32, (), (name, 0, 9)) for name in ("a", "b"))

    def first_word_repeated(words: tuple[UOp, UOp]) -> tuple[UOp, UOp]:
        whole = UOp(Ops.BITCAST, dtypes.uint8.vec(8), (UOp(Ops.VECTORIZE, dtypes.uint32.vec(2), words),))
        return whole, UOp(Ops.VECTORIZE, whole.dtype, tuple(UOp(Ops.GEP, dtypes.uint8, (whole,), (i % 4,))
                                                            for i in range(8)))
    whole, shuffled = first_word_repeated((a, a))
    assert _unshuffled(shuffled) is whole
    whole, shuffled = first_word_repeated((a, b))
    assert _unshuffled(shuffled) is shuffled
