"""Elementwise math on tensors: transcendentals, activations, rounding, pow, bitwise helpers.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.
"""
from __future__ import annotations


class MathMixin:
    __slots__ = ()
