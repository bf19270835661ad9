"""Test support for tgcore and its plugins: the project's rule for optional references.

A test that needs a reference tool (gguf-py, capstone, llvm-mc, tokenizers...) skips when it is missing on
a developer's machine, and fails under CI (``CI=true``), which must never skip a reference silently.
pytest is imported only when a test calls these.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, NoReturn


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> NoReturn:
    """Skip the calling test locally; fail it under CI. ``what`` names the reference and how to install it."""
    import pytest
    if in_ci():
        pytest.fail(f"{what} is required when CI=true")
    pytest.skip(f"{what} is not installed")
    raise AssertionError("unreachable: pytest.skip raises")  # for type checkers without pytest's stubs


def require(module: str, install: str) -> Any:
    """``import module``, or ``missing`` (``install``: the command that provides it)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"{module} ({install})")
