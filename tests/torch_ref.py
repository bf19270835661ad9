"""Differential checks against torch: forward values, dtypes and gradients of a function of tensors.

``compare(tg_fn, torch_fn, *arrays, device=...)`` runs ``tg_fn`` on tgcore Tensors and ``torch_fn`` on torch
tensors made from the same numpy arrays, checks the outputs (values and dtype), then back-propagates the same
random weighting of every float output through both and checks each float input's gradient.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from tgcore.tensor import Tensor

DEVICE_LIST_DEFAULT = "CPU,PYTHON"


def _outs(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _np_of_torch(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return t.float().numpy() if t.dtype is torch.bfloat16 else t.numpy()


def assert_close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float, what: str) -> None:
    assert got.shape == ref.shape, f"{what}: shape {got.shape} vs torch {ref.shape}"
    if ref.dtype.kind in "biu":
        np.testing.assert_array_equal(got, ref, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)


def compare(tg_fn: Callable[..., Any], torch_fn: Callable[..., Any] | None, *arrays: np.ndarray, device: str,
            grad: bool = True, rtol: float = 1e-5, atol: float = 1e-6, grad_rtol: float | None = None,
            grad_atol: float | None = None, check_dtype: bool = True, seed: int = 0) -> None:
    """Forward (and with ``grad``, gradient) of ``tg_fn`` against ``torch_fn`` (default: the same function)."""
    torch_fn = torch_fn or tg_fn
    wants = [grad and a.dtype.kind == "f" for a in arrays]
    tg_in = [Tensor(a, device=device).requires_grad_() if w else Tensor(a, device=device)
             for a, w in zip(arrays, wants, strict=True)]
    th_in = [torch.tensor(a, requires_grad=w) for a, w in zip(arrays, wants, strict=True)]
    tg_outs, th_outs = _outs(tg_fn(*tg_in)), _outs(torch_fn(*th_in))
    assert len(tg_outs) == len(th_outs)
    rng = np.random.default_rng(seed)
    loss_tg, loss_th = None, None
    if any(wants):
        for o_tg, o_th in zip(tg_outs, th_outs, strict=True):
            if not o_th.dtype.is_floating_point or not o_th.requires_grad:
                continue
            w = rng.standard_normal(tuple(o_th.shape)).astype(np.float32)
            part_tg = (o_tg * Tensor(w, device=device).cast(o_tg.dtype)).sum()
            part_th = (o_th * torch.tensor(w).to(o_th.dtype)).sum()
            loss_tg = part_tg if loss_tg is None else loss_tg + part_tg
            loss_th = part_th if loss_th is None else loss_th + part_th
    for i, (o_tg, o_th) in enumerate(zip(tg_outs, th_outs, strict=True)):
        ref = _np_of_torch(o_th)
        got = o_tg.numpy()
        if check_dtype:
            assert got.dtype == ref.dtype, f"output {i}: dtype {o_tg.dtype!r} vs torch {o_th.dtype}"
        assert_close(got, ref, rtol, atol, f"output {i}")
    if loss_tg is None:
        return
    loss_tg.backward()
    loss_th.backward()
    for i, (t_tg, t_th) in enumerate(zip(tg_in, th_in, strict=True)):
        if not wants[i]:
            continue
        if t_th.grad is None:
            assert t_tg.grad is None or not np.any(t_tg.grad.numpy()), f"input {i}: torch has no gradient"
            continue
        if t_tg.grad is None:
            assert not np.any(_np_of_torch(t_th.grad)), f"input {i}: no gradient (torch has a nonzero one)"
            continue
        assert_close(t_tg.grad.numpy(), _np_of_torch(t_th.grad), grad_rtol if grad_rtol is not None else rtol * 10,
                     grad_atol if grad_atol is not None else atol * 10, f"gradient of input {i}")


def raises_like_torch(tg_call: Callable[[], Any], torch_call: Callable[[], Any]) -> None:
    """Both calls raise, and tgcore's exception is an instance of torch's exception type."""
    try:
        torch_call()
    except Exception as e:  # noqa: BLE001
        expected: type[BaseException] = type(e)
    else:
        raise AssertionError("torch did not raise")
    try:
        tg_call()
    except expected:
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"tgcore raised {type(e).__name__}: {e}, torch raises {expected.__name__}") from e
    raise AssertionError(f"tgcore did not raise (torch raises {expected.__name__})")


def arrays(*shapes: Sequence[int], seed: int = 0, dtype: Any = np.float32, lo: float = -2.0,
           hi: float = 2.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(lo, hi, s).astype(dtype) for s in shapes]


DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


def is_tg(x: Any) -> bool:
    return isinstance(x, Tensor)


def library(x: Any) -> Any:
    """``Tensor`` for a tgcore tensor, else ``torch``: one test body written for both (``library(x).stack(...)``)."""
    return Tensor if isinstance(x, Tensor) else torch
