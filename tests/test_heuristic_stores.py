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


# ---- wider lanes for kernels with no reduction (``Renderer.elementwise_widths``: C with AVX-512) ----

WIDE = {dtypes.float32: 16, dtypes.int32: 16, dtypes.uint32: 16}


def _lanes(opts) -> list[int]:
    return [o.amount for o in opts if o.op is OptOps.UPCAST]


def test_an_elementwise_kernel_takes_the_wider_lanes():
    ast = _ast((Tensor.empty(4, 1536) * 2).exp2())
    assert _lanes(vector_opts(ast, WIDTHS, elementwise_widths=WIDE)) == [16]
    assert _lanes(vector_opts(ast, WIDTHS)) == [8]


def test_a_reduction_keeps_the_native_lanes():
    """A sum's lanes set the order of its additions (batch invariance, bits as before): no wider lanes."""
    ast = _ast((Tensor.empty(4, 576) * 2).sum(-1))
    assert vector_opts(ast, WIDTHS, elementwise_widths=WIDE) == vector_opts(ast, WIDTHS)


def test_a_narrowed_store_or_an_axis_they_do_not_divide_keeps_the_native_width():
    """float32 lanes stored as float16 (a KV cache's writes: the renderer narrows 8 lanes in one instruction); a
    contiguous axis of 24 (16 does not divide it)."""
    narrowing = frozenset({(dtypes.float32, dtypes.float16)})
    cache_write = _ast((Tensor.empty(4, 64) + 1).cast(dtypes.float16))
    assert _lanes(vector_opts(cache_write, WIDTHS, narrowing=narrowing, elementwise_widths=WIDE)) == [8]
    assert _lanes(vector_opts(_ast(Tensor.empty(4, 24) + 1), WIDTHS, elementwise_widths=WIDE)) == [8]


def test_silu_in_the_c_renderers_wider_lanes_matches_numpy(monkeypatch):
    """The C renderer at AVX-512 computes an elementwise kernel in 16 float lanes (zmm); values as numpy's, and the
    same bits as in its native 8 lanes (each lane's value is computed alone)."""
    import numpy as np
    import pytest

    from tgcore.engine import realize as engine
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.state import REALIZATION
    renderer = open_device("CPU").renderer
    if not renderer.elementwise_widths:
        pytest.skip("the C renderer has no wider lanes here (no AVX-512)")
    x = (np.random.default_rng(3).standard_normal((4, 1536)) * 6).astype(np.float32)

    def silu() -> tuple[np.ndarray, str]:
        recorded: list = []
        with engine.capturing(recorded), REALIZATION.no_cache():
            out = Tensor(x, device="CPU").silu().numpy()
        return out, [r.spec.src for r, *_ in recorded if r is not None and isinstance(r.spec.src, str)][-1]
    wide, src = silu()
    assert "tg_float32x16" in src.split("void ")[-1]
    np.testing.assert_allclose(wide, x / (1 + np.exp(-x.astype(np.float64))), rtol=3e-6, atol=1e-7)
    monkeypatch.setattr(renderer, "elementwise_widths", {})
    monkeypatch.setattr(engine, "_runners", {})  # (compiled again, not the wide kernel from the runner cache)
    native, src = silu()
    assert "tg_float32x16" not in src.split("void ")[-1]
    np.testing.assert_array_equal(wide.view(np.uint32), native.view(np.uint32))
