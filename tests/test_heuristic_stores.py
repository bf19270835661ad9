"""The heuristic's vector width for an elementwise store (``codegen.heuristic.store_width``): the stored dtype's
lanes, or for a CAST the renderer narrows in the store (``Renderer.narrowing_stores``: int32 lanes stored as bytes
on X86) its source's lanes; a renderer that does not narrow it keeps the scalar loop."""
from __future__ import annotations

from tgcore.codegen.heuristic import vector_opts
from tgcore.codegen.optimize import OptOps
from tgcore.dtype import dtypes
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

WIDTHS = {dtypes.float32: 8, dtypes.int32: 8}


def _ast(t: Tensor):
    (si,) = [si for si in create_schedule([t.uop], "CPU")[0] if si.kind != "copy"]
    return si.ast


def test_a_narrowed_cast_is_vectorized_at_its_source_width():
    ast = _ast((Tensor.empty(64, 32, dtype=dtypes.int32) + 1).cast(dtypes.int8))
    narrowed = vector_opts(ast, WIDTHS, narrowing=frozenset({(dtypes.int32, dtypes.int8)}))
    assert [o.amount for o in narrowed if o.op is OptOps.UPCAST] == [8]
    assert vector_opts(ast, WIDTHS) == []   # (int8 has no lanes of its own)


def test_only_the_declared_pairs_are_narrowed():
    """A float32 -> int8 CAST is not in the pair set: no vectors for it."""
    ast = _ast((Tensor.empty(64, 32) + 1).cast(dtypes.int8))
    assert vector_opts(ast, WIDTHS, narrowing=frozenset({(dtypes.int32, dtypes.int8)})) == []


def test_a_row_shorter_than_a_vector_is_a_narrow_vector_with_its_steps_unrolled():
    """Two-bit fields of 4 bytes per row taken out step by step (a row-lane weight dequantized: ``(b >> 2g) & 3``
    stored at ``4g + k``): the contiguous output axis (4 values) is shorter than a vector and the step axis cannot
    join it (the steps read the same bytes): the 4 values are one vector, the steps unrolled (each shift a constant);
    the values as numpy's."""
    import numpy as np
    raw = np.random.default_rng(1).integers(0, 256, (64, 4)).astype(np.uint8)
    b = Tensor(raw).cast(dtypes.int32).reshape(64, 1, 4).expand(64, 4, 4)
    steps = Tensor.arange(4, dtype=dtypes.int32).reshape(1, 4, 1) * 2
    t = ((b >> steps) & 3).cast(dtypes.float32).reshape(64, 16)
    opts = vector_opts(_ast(t), WIDTHS)
    assert {(o.op, o.axis, o.amount) for o in opts} == {(OptOps.UPCAST, 2, 4), (OptOps.UNROLL, 1, 4)}
    want = (raw[:, None, :].astype(np.int64) >> (2 * np.arange(4))[None, :, None]) & 3
    np.testing.assert_array_equal(t.numpy(), want.reshape(64, 16).astype(np.float32))
