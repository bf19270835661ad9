"""Constant tables the dequantizations read with ``Tensor.take``, each built once per device and kept.

In:  a table name and a device. Out: a realized 1-D ``Tensor`` on that device, the same one for every weight (so
     the kernels of a model's many grid-quantized weights read one buffer, built once).

The tables (facts of the ggml format, computed from ``tg_gguf.iq_grids`` / ``tg_gguf.quants``):

- ``grid:<NAME>``: an i-quant grid as float32 values, entry ``e``'s value ``j`` at ``e * width + j`` (``width`` 8,
  or 4 for IQ3): a group's values are one vector load (4 to 64 KiB a grid; as int8 bytes, widened and converted
  per group, the GEMVs were ~10% slower).
- ``iq4nl``, ``mxfp4``: the 16 values a 4-bit index selects (float32), looked up per value (in registers, on a
  renderer that gathers from a 16-float table).
- ``iq4nl_u8``, ``mxfp4_u8``: the same 16 values plus 128, as bytes (0..255): the unsigned operand of an integer
  dot product (``tg_gguf.intdot``), looked up 32 at a time with one byte shuffle on a renderer that has it.
- ``grid_u8:<NAME>``: an i-quant grid with non-negative integer values (IQ2, IQ3) as bytes, laid out as ``grid:``:
  the unsigned operand of an integer dot product, a group's values one load of 8 (4) bytes.
- ``grid_signed_u8:IQ2XXS``, ``grid_signed_u8:IQ2XS``: those grids' rows with each of the 128 sign patterns
  applied, plus 64, as bytes (256 KiB, 512 KiB), at the grid index with the 7-bit sign index above its bits: the
  unsigned operand of IQ2_XXS / IQ2_XS's integer dot product, a group's values with their signs one load of 8 bytes.
- ``grid_signed4_u8:IQ3XXS``, ``grid_signed4_u8:IQ3S``, ``grid_signed4_u8:IQ2S``: those grids' rows of 4 values
  (IQ2_S's: the halves of its rows of 8, half ``h`` of entry ``e`` at ``2e + h``) under each of the 16 sign patterns
  of 4 bits, plus 64, as bytes (16, 32, 128 KiB), at the grid index with the 4 sign bits above its bits: the row
  lanes' (``grid_lanes``) half of a group of 8 values, one load of 4 bytes.
- ``ksign_masks``: for each 7-bit sign index, the 8 signs of ``ksigns`` as byte masks (0 for +, -1 for -, int8):
  an integer dot product flips its activations' signs with them (``(x ^ m) - m``).
- ``grid:IQ1S+delta``: IQ1_S / IQ1_M's grid plus its delta (+0.125 for entries 0..2047, -0.125 for 2048..4095),
  so a group's values with their delta are one load (the delta had been two more products per group in a GEMV).
- ``grid_u8:IQ1S+delta``: that table times 8, plus 9, as bytes (0..18): IQ1_S / IQ1_M's unsigned operand of an
  integer dot product, a group's values with their delta one load of 8 bytes; ``grid_u8:IQ1S+delta+16`` the same
  plus 16 (7..25), the row lanes' (``grid_lanes``: an offset of -16 is -1 per value of a lane's 16).
- ``odd_steps:0.25``, ``odd_steps:0.5``, ``odd_steps:2``: ``(0.5 + s) * step`` for the 16 values of a 4-bit scale
  ``s`` (float32, exact): the block scales of IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M on the integer path, one
  load per block (computing ``2s + 1`` and converting it took four more instructions per block).
- ``tq1_powers``: TQ1_0's power of 3 for each of a block's 256 values (int32); ``tq1_powers_u8`` the same as bytes
  (the integer path's).
- ``f16_f32``: every float16 bit pattern's float32 value (256 KiB): a quantized block's half scale converted by one
  load, which a C compiler folds into the vector op that broadcasts it (``tg_gguf.intdot``: the scales of Q4_0,
  Q4_1, Q5_0 and Q5_1).
- ``ksigns``: for each 7-bit sign index, the 8 signs (+-1.0 float32) of its bits and their parity bit.
- ``byte_signs``: for each byte, the 8 signs (+-1.0 float32) of its bits, bit ``j`` for value ``j``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tgcore.tensor import Tensor


def _grid_floats(name: str) -> np.ndarray:
    from tg_gguf.quants import grid
    return grid(name).reshape(-1)


def _sign_patterns(bytes_: np.ndarray) -> np.ndarray:
    """``(k,)`` sign bytes -> ``(k * 8,)`` float32 +-1.0, bit ``j`` of byte ``i`` at ``8 * i + j``."""
    bits = (bytes_.reshape(-1, 1) >> np.arange(8, dtype=np.uint8)) & 1
    return np.where(bits == 0, np.float32(1), np.float32(-1)).reshape(-1)


def _iq1_shifted() -> np.ndarray:
    """IQ1_S / IQ1_M's grid with its delta added: entry ``e`` (< 2048) ``grid[e] + 0.125``, entry ``2048 + e``
    ``grid[e] - 0.125`` (exact in float32, as gguf-py's ``grid + delta``), so a group's values, delta included,
    are one load at the index with the delta's sign bit as bit 11."""
    from tg_gguf.quants import grid
    values = grid("IQ1S")
    return np.concatenate([values + np.float32(0.125), values - np.float32(0.125)]).astype(np.float32).reshape(-1)


def _iq1_shifted_bytes(offset: int = 9) -> np.ndarray:
    """``grid:IQ1S+delta`` times 8, plus 9 (``offset``), as bytes: ``8 * (grid + delta) + 9`` is one of 0, 2, 8, 10,
    16, 18 (the unsigned operand of an integer dot product; the product is 8 times the float one's, less 9 times the
    sum of the activations)."""
    return (_iq1_shifted() * 8 + offset).astype(np.uint8)


def _tq1_powers() -> np.ndarray:
    """TQ1_0: the power of 3 each of a block's 256 values multiplies its byte by (int32, in element order): 3**t for
    elements 32t + l and 160 + 16t + l, 3**(l // 4) for element 240 + l."""
    first = np.repeat(3 ** np.arange(5), 32)
    second = np.repeat(3 ** np.arange(5), 16)
    last = np.repeat(3 ** np.arange(4), 4)
    return np.concatenate([first, second, last]).astype(np.int32)


def _grid_bytes(name: str) -> np.ndarray:
    from tg_gguf.quants import grid
    values = grid(name).reshape(-1)
    if values.min() < 0 or values.max() > 255:
        raise ValueError(f"grid {name} has values outside 0..255: no byte table")
    return values.astype(np.uint8)


def _signed_grid_bytes(name: str) -> np.ndarray:
    """``grid_signed_u8:<NAME>`` (IQ2_XXS, IQ2_XS): the grid's rows under each of the 128 sign patterns of ``ksigns``,
    plus 64, as bytes (21..107): row ``(s << b) | e`` (``b`` bits of grid index) is entry ``e``'s 8 values, value
    ``j`` negated where bit ``j`` of ``ksigns[s]`` is set."""
    from tg_gguf.quants import grid, ksigns
    values = grid(name).astype(np.int32)  # (entries, 8)
    bits = (ksigns(np.arange(128, dtype=np.uint8)).reshape(-1, 1) >> np.arange(8, dtype=np.uint8)) & 1
    signed = (1 - 2 * bits.astype(np.int32))[:, None, :] * values[None, :, :] + 64  # (sign index, entry, value)
    return signed.astype(np.uint8).reshape(-1)


def _signed_four_bytes(name: str) -> np.ndarray:
    """``grid_signed4_u8:<NAME>`` (IQ3_XXS, IQ3_S): row ``(s << b) | e`` (``b`` bits of grid index) is entry ``e``'s 4
    values, value ``j`` negated where bit ``j`` of ``s`` (< 16) is set, plus 64."""
    from tg_gguf.quants import grid
    values = grid(name).astype(np.int32).reshape(-1, 4)  # (entries, 4): IQ2_S's 8 values as two rows
    bits = (np.arange(16, dtype=np.int32).reshape(-1, 1) >> np.arange(4, dtype=np.int32)) & 1
    signed = (1 - 2 * bits)[:, None, :] * values[None, :, :] + 64  # (sign bits, entry, value)
    return signed.astype(np.uint8).reshape(-1)


def _ksign_masks() -> np.ndarray:
    from tg_gguf.quants import ksigns
    bits = (ksigns(np.arange(128, dtype=np.uint8)).reshape(-1, 1) >> np.arange(8, dtype=np.uint8)) & 1
    return (-bits.astype(np.int8)).reshape(-1)


def _ksigns() -> np.ndarray:
    from tg_gguf.quants import ksigns
    return _sign_patterns(ksigns(np.arange(128, dtype=np.uint8)))


def _byte_signs() -> np.ndarray:
    return _sign_patterns(np.arange(256, dtype=np.uint8))


def _values(name: str) -> np.ndarray:
    from tg_gguf import dequant
    return np.array(getattr(dequant, name), dtype=np.float32)


def _shifted_bytes(name: str) -> np.ndarray:
    """A table of 16 small integers plus 128, as uint8 (every value fits: -127 .. 113)."""
    from tg_gguf import dequant
    return (np.array(getattr(dequant, name), dtype=np.int32) + 128).astype(np.uint8)


BUILDERS: dict[str, Callable[[], np.ndarray]] = {
    "iq4nl": functools.partial(_values, "IQ4_NL_VALUES"),
    "mxfp4": functools.partial(_values, "MXFP4_VALUES"),
    "iq4nl_u8": functools.partial(_shifted_bytes, "IQ4_NL_VALUES"),
    "mxfp4_u8": functools.partial(_shifted_bytes, "MXFP4_VALUES"),
    **{f"grid:{g}": functools.partial(_grid_floats, g) for g in ("IQ2XXS", "IQ2XS", "IQ2S", "IQ3XXS", "IQ3S")},
    **{f"grid_u8:{g}": functools.partial(_grid_bytes, g) for g in ("IQ2XXS", "IQ2XS", "IQ2S", "IQ3XXS", "IQ3S")},
    **{f"grid_signed_u8:{g}": functools.partial(_signed_grid_bytes, g) for g in ("IQ2XXS", "IQ2XS")},
    **{f"grid_signed4_u8:{g}": functools.partial(_signed_four_bytes, g) for g in ("IQ3XXS", "IQ3S", "IQ2S")},
    "ksign_masks": _ksign_masks,
    "grid:IQ1S+delta": _iq1_shifted,
    "grid_u8:IQ1S+delta": _iq1_shifted_bytes,
    "grid_u8:IQ1S+delta+16": functools.partial(_iq1_shifted_bytes, 16),
    "odd_steps:0.25": lambda: (np.arange(16, dtype=np.float32) * 2 + 1) * np.float32(0.125),
    "odd_steps:0.5": lambda: (np.arange(16, dtype=np.float32) * 2 + 1) * np.float32(0.25),
    "odd_steps:2": lambda: np.arange(16, dtype=np.float32) * 2 + 1,
    "tq1_powers": _tq1_powers,
    "tq1_powers_u8": lambda: _tq1_powers().astype(np.uint8),
    "f16_f32": lambda: np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32),
    "ksigns": _ksigns,
    "byte_signs": _byte_signs,
}


class ConstantTables:
    """The owner of the constant tables on each device: ``get(name, device)`` builds a table on first use and returns
    the same realized Tensor after; ``clear()`` drops them all (their buffers are freed with the last kernel that
    holds them)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], Tensor] = {}

    def get(self, name: str, device: str) -> Tensor:
        from tgcore.tensor import Tensor
        key = (name, device)
        table = self._tables.get(key)
        if table is None:
            if name not in BUILDERS:
                raise KeyError(f"no constant table {name!r} (known: {', '.join(sorted(BUILDERS))})")
            table = self._tables[key] = Tensor(BUILDERS[name](), device=device).realize()
        return table

    def clear(self) -> None:
        self._tables.clear()


TABLES = ConstantTables()
