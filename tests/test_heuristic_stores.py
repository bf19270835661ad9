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
