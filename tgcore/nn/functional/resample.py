"""`interpolate`: nearest, linear, bilinear and trilinear resampling."""
from __future__ import annotations

import math
from collections.abc import Sequence

from tgcore.dtype import least_upper_float
from tgcore.errors import TensorValueError
from tgcore.nn.functional.common import IntOrTuple, _tuple
from tgcore.tensor import Tensor

# ------------------------------------------------------------------------------------------ resampling

INTERPOLATE_MODES = {"nearest": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(x: Tensor, size: IntOrTuple | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
    """Resize the spatial axes of (N, C, *spatial) to ``size`` (or by ``scale_factor``), like torch: "nearest" picks
    floor(i * scale), the linear modes blend the two neighbours of each output position's source coordinate
    (pixel centres aligned, or the corners with ``align_corners``). One axis at a time: gathers and a blend,
    with the positions and weights computed here (they depend on the sizes only)."""
    if mode not in INTERPOLATE_MODES:
        raise TensorValueError(f"interpolate: mode must be one of {sorted(INTERPOLATE_MODES)}, got {mode!r}")
    nd = x.ndim - 2
    want = INTERPOLATE_MODES[mode]
    if nd < 1 or (want is not None and want != nd):
        raise TensorValueError(f"interpolate: mode {mode!r} needs a {(want or 1) + 2}-d input, got shape {x.shape}")
    if align_corners is not None and mode == "nearest":
        raise TensorValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                               "trilinear")
    if (size is None) == (scale_factor is None):
        raise TensorValueError("interpolate: give exactly one of size and scale_factor")
    spatial = x.shape[2:]
    if size is not None:
        out = _tuple(size, nd, "size")
        scales = [n / m if m else 0.0 for n, m in zip(spatial, out, strict=True)]
    else:
        assert scale_factor is not None
        sf = [float(scale_factor)] * nd if isinstance(scale_factor, (int, float)) else [float(f) for f in scale_factor]
        out = tuple(math.floor(n * f) for n, f in zip(spatial, sf, strict=True))
        scales = [1 / f for f in sf]
    for i, (n, m, scale) in enumerate(zip(spatial, out, scales, strict=True)):
        x = _resample_axis(x, 2 + i, n, m, scale, mode == "nearest", bool(align_corners))
    return x


def _resample_axis(x: Tensor, ax: int, n: int, m: int, scale: float, nearest: bool, corners: bool) -> Tensor:
    import numpy as np
    pick: list[object] = [slice(None)] * x.ndim
    dst = np.arange(m, dtype=np.float64)
    if nearest:
        pick[ax] = np.minimum(np.floor(dst * scale).astype(np.int64), n - 1)
        return x[tuple(pick)]
    if corners:
        src = dst * ((n - 1) / (m - 1)) if m > 1 else np.zeros(m)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    frac = (src - lo).astype(np.float32)
    shape = [1] * x.ndim
    shape[ax] = m
    w = Tensor(frac.reshape(shape), device=x.device).cast(least_upper_float(x.dtype))
    pick[ax] = lo
    below = x[tuple(pick)]
    pick[ax] = hi
    above = x[tuple(pick)]
    return below * (1 - w) + above * w
