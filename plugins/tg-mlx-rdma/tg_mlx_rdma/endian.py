"""Big-endian helpers for registers, doorbells and command fields.

The ConnectX device reads every multi-byte field big-endian. ``to_be32(x)`` returns the integer
whose in-memory (host order) representation is the big-endian bytes of ``x``: written through a
host-order ``c_uint32`` (a BAR register, a doorbell record) the device sees ``x``. On a
little-endian host that is a byte swap, on a big-endian host the identity; ``from_be32`` is the
inverse (the same swap). Unlike a C cast these do not wrap silently: a value outside
``-2**(n-1) <= x < 2**n`` raises ``ValueError``; negative values are taken as two's complement.
"""
from __future__ import annotations

import sys

__all__ = ["be_bytes", "from_be16", "from_be32", "from_be64", "to_be16", "to_be32", "to_be64"]


def _fit(x: int, nbytes: int) -> int:
    bits = 8 * nbytes
    if not isinstance(x, int) or isinstance(x, bool):
        raise TypeError(f"expected an int, got {type(x).__name__}")
    if not -(1 << (bits - 1)) <= x < (1 << bits):
        raise ValueError(f"{x:#x} does not fit in {bits} bits")
    return x & ((1 << bits) - 1)


def _swap(x: int, nbytes: int) -> int:
    return int.from_bytes(_fit(x, nbytes).to_bytes(nbytes, "big"), sys.byteorder)


def to_be16(x: int) -> int:
    """``x`` as a host-order u16 whose bytes in memory are big-endian (``htobe16``)."""
    return _swap(x, 2)


def to_be32(x: int) -> int:
    """``x`` as a host-order u32 whose bytes in memory are big-endian (``htobe32``)."""
    return _swap(x, 4)


def to_be64(x: int) -> int:
    """``x`` as a host-order u64 whose bytes in memory are big-endian (``htobe64``)."""
    return _swap(x, 8)


def from_be16(x: int) -> int:
    """Inverse of ``to_be16``: the value of a u16 read in host order from big-endian memory."""
    return _swap(x, 2)


def from_be32(x: int) -> int:
    """Inverse of ``to_be32``."""
    return _swap(x, 4)


def from_be64(x: int) -> int:
    """Inverse of ``to_be64``."""
    return _swap(x, 8)


def be_bytes(x: int, nbytes: int) -> bytes:
    """The ``nbytes`` big-endian bytes of ``x`` (negative values as two's complement)."""
    return _fit(x, nbytes).to_bytes(nbytes, "big")
