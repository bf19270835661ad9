"""Neural-network helpers on top of `tgcore.tensor.Tensor`.

`tgcore.nn.state`: safetensors files (`safe_save`, `safe_load`, `safe_load_metadata`) and state dicts
(`get_state_dict`, `load_state_dict`, `get_parameters`). Names are exported lazily, so importing
`tgcore.nn` imports nothing heavy until one of them is used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

__all__ = ["SafetensorsError", "StateDictError", "get_parameters", "get_state_dict", "load_state_dict",
           "safe_load", "safe_load_metadata", "safe_save"]
_STATE_NAMES = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name in _STATE_NAMES:
        from tgcore.nn import state

        return getattr(state, name)
    raise AttributeError(f"module 'tgcore.nn' has no attribute {name!r}")
