"""Exceptions the Tensor API raises where torch's exception type differs from tgcore's earlier one.

torch reports many bad arguments (shapes that do not match, integers to negative powers, ...) as
RuntimeError where tgcore raised ValueError. These classes derive from both, so ``except ValueError``
code written against tgcore and ``except RuntimeError`` code written against torch both keep working.
"""
from __future__ import annotations


class TensorValueError(ValueError, RuntimeError):
    """A bad argument: torch raises RuntimeError for it, earlier tgcore versions ValueError."""
