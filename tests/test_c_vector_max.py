"""C renderer: an elementwise maximum of vectors is one vector compare and a bitwise blend (``cstyle._vector_max``),
not a list of per-lane ternaries (scalar code after gcc 12); values as numpy's maximum (a NaN wins, ints exact)."""
import numpy as np
import pytest

from tgcore.engine import realize as engine
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor


def run(t: Tensor) -> tuple[np.ndarray, list[str]]:
    recorded: list = []
    with engine.capturing(recorded), REALIZATION.no_cache():
        out = t.numpy()
    return out, [r.spec.src for r, *_ in recorded if r is not None and isinstance(r.spec.src, str)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.float64])
def test_vector_maximum_is_blended_and_matches_numpy(dtype):
    rng = np.random.default_rng(6)
    if np.issubdtype(dtype, np.floating):
        a, b = (rng.standard_normal((16, 64)).astype(dtype) for _ in range(2))
        a[0, :6], b[0, :6] = [np.nan, 1.0, -0.0, 0.0, np.inf, 2.0], [1.0, np.nan, 0.0, -0.0, np.nan, -np.inf]
    else:
        info = np.iinfo(dtype)
        a, b = (rng.integers(info.min, info.max, (16, 64), dtype=dtype, endpoint=True) for _ in range(2))
    out, srcs = run(Tensor(a, device="CPU").maximum(Tensor(b, device="CPU")))
    want = np.where(np.isnan(a) | (a > b), a, b)  # (the scalar rule: a NaN in a wins, else a > b ? a : b)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    body = srcs[-1].split("void ")[-1]
    assert "tg_mask tg_s = (tg_mask)(" in body and "[1]>" not in body


def test_block_maxima_of_bits_are_vector_code():
    """The activations' block maxima (``tg_gguf.intdot.quantize_activations``: |x|'s bits, an int32 maximum per block
    of 32): the accumulators' maxima are vector ops."""
    x = np.random.default_rng(7).standard_normal((4, 576)).astype(np.float32)
    bits = (Tensor(x, device="CPU").reshape(4, 18, 32).bitcast("int32") & 0x7FFFFFFF).max(-1)
    out, srcs = run(bits)
    np.testing.assert_array_equal(out, (x.reshape(4, 18, 32).view(np.int32) & 0x7FFFFFFF).max(-1))
    assert "[1]>" not in srcs[-1].split("void ")[-1]
