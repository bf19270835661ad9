"""Neural-network helpers on top of `tgcore.tensor.Tensor`.

`tgcore.nn.functional`: linear, convolutions, pooling, softmax, normalizations, dropout, losses, attention.
`tgcore.nn.layers`: Linear, Conv1d/Conv2d, ConvTranspose2d, Embedding, LayerNorm, RMSNorm, BatchNorm, Dropout.
`tgcore.nn.optim`: SGD, Adam, AdamW (in-place updates with ``Tensor.assign``).
`tgcore.nn.state`: safetensors files (`safe_save`, `safe_load`, `safe_load_metadata`) and state dicts
(`get_state_dict`, `load_state_dict`, `get_parameters`).

Names are exported lazily, so importing `tgcore.nn` imports nothing heavy until one of them is used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tgcore.nn import functional, layers, optim, state
    from tgcore.nn.layers import (
        BatchNorm,
        BatchNorm1d,
        BatchNorm2d,
        Conv1d,
        Conv2d,
        ConvTranspose2d,
        Dropout,
        Embedding,
        LayerNorm,
        Linear,
        RMSNorm,
    )
    from tgcore.nn.optim import SGD, Adam, AdamW, Optimizer
    from tgcore.nn.state import (
        SafetensorsError,
        StateDictError,
        get_parameters,
        get_state_dict,
        load_state_dict,
        safe_load,
        safe_load_metadata,
        safe_save,
    )

_SUBMODULES = ("functional", "layers", "optim", "state")
_HOMES = {
    "state": ("SafetensorsError", "StateDictError", "get_parameters", "get_state_dict", "load_state_dict",
              "safe_load", "safe_load_metadata", "safe_save"),
    "layers": ("BatchNorm", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "ConvTranspose2d", "Dropout",
               "Embedding", "LayerNorm", "Linear", "RMSNorm"),
    "optim": ("SGD", "Adam", "AdamW", "Optimizer"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["SGD", "Adam", "AdamW", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "ConvTranspose2d",
           "Dropout", "Embedding", "LayerNorm", "Linear", "Optimizer", "RMSNorm", "SafetensorsError", "StateDictError",
           "functional", "get_parameters", "get_state_dict", "layers", "load_state_dict", "optim", "safe_load",
           "safe_load_metadata", "safe_save", "state"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tgcore.nn.{name}")
    module = _HOME_OF.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"tgcore.nn.{module}"), name)
    raise AttributeError(f"module 'tgcore.nn' has no attribute {name!r}")
