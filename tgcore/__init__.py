"""tgcore: a small tensor compiler with pip-installable backends.

Importing tgcore is cheap: it loads no plugin and no backend. ``Tensor``, ``dtypes``,
``load`` and friends are imported on first access.
"""
from __future__ import annotations

import importlib
from typing import Any

from tgcore.plugins.hookspecs import HOOKSPEC_VERSION, hookimpl, hookspec

__version__ = "0.1.0"

_LAZY = {
    "Tensor": "tgcore.tensor:Tensor",
    "dtypes": "tgcore.dtype:dtypes",
    "DType": "tgcore.dtype:DType",
    "load": "tgcore.loading:load",
    "Device": "tgcore.runtime.registry:open_device",
    "jit": "tgcore.engine.jit:jit",
    "UOp": "tgcore.uop:UOp",
    "transport": "tgcore.transports:transport",
    "realization": "tgcore.schedule.state:REALIZATION",
}

__all__ = ["HOOKSPEC_VERSION", "hookimpl", "hookspec", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'tgcore' has no attribute {name!r}")
    module_name, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value
