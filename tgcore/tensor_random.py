"""Random tensors from a counter-based generator (same numbers on every device for the same seed), and initialisers.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.
"""
from __future__ import annotations


class RandomMixin:
    __slots__ = ()
