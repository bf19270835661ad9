"""Indexing and joining: __getitem__/__setitem__, gather/scatter, cat/stack/split/chunk, repeat, one_hot, pad modes.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.
"""
from __future__ import annotations


class IndexMixin:
    __slots__ = ()
