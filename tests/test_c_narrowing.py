"""C renderer: float32 lanes stored as float16 (``Renderer.narrowing_stores``, ``renderer.cnarrow``): the store
vectorized at the source's width through one conversion helper, the values numpy's (rounded to nearest even,
subnormals, overflow to inf, NaN, signed zero)."""
import numpy as np

from tgcore.engine import realize as engine
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor


def run(t: Tensor) -> tuple[np.ndarray, list[str]]:
    """``t``'s values and the C source of every kernel that computed them (compiled afresh, not from a cache)."""
    recorded: list = []
    with engine.capturing(recorded), REALIZATION.no_cache():
        out = t.numpy()
    return out, [r.spec.src for r, *_ in recorded if r is not None and isinstance(r.spec.src, str)]


def test_float32_stored_as_float16_is_vectorized_and_rounds_as_numpy():
    rng = np.random.default_rng(3)
    special = np.array([0.0, -0.0, 1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.0, 65520.0, -65520.0, 2**-24, 2**-25,
                        3 * 2**-26, 6e-8, np.inf, -np.inf, np.nan, 1e-30, -1e30], np.float32)
    x = np.concatenate([special, rng.standard_normal(512 - special.size).astype(np.float32) * 1000])
    x[100:200] *= np.float32(1e-6)  # (float16 subnormals)
    out, srcs = run((Tensor(x.reshape(16, 32), device="CPU") * 1.0).cast("float16"))
    want = x.reshape(16, 32).astype(np.float16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
    assert any("tg_narrow_f32x8_f16(" in s.split("void ")[-1] for s in srcs)  # (called in the kernel's body)

