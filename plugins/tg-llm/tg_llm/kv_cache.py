"""The KV cache's bookkeeping on the host: which position each slot holds, the attention windows, the masks, and
the batched decode step's row writes.

In:  a layer kind's cache length and sliding window (``CacheKind``), positions of the tokens a call writes.
Out: the first slot a call writes, the window of slots attention reads, the additive masks over that window, and
     (for a batched decode step) one scatter kernel per cache that puts each row at its own sequence and slot.

A full-attention kind caches every position (slot = position). A sliding kind keeps a ring buffer of
``cache_len = window + prefill chunk`` slots (slot = position mod cache_len): enough that a call's own writes never
evict a key one of its queries still needs. ``slot_pos`` records the position each slot holds (-1: none); every
mask is computed from it, so masks stay right however the ring has wrapped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np


def prefill_window(cache_len: int, last: int) -> int:
    """Slots a prefill's attention reads: the smallest power of two (at least 32) covering slots 0..last, at most
    all."""
    return min(cache_len, max(32, 1 << last.bit_length()))


def decode_window(cache_len: int, last: int) -> int:
    """Slots a decode step's attention reads: the smallest power of two or three quarters of one (at least 32,
    multiples of 32) covering slots 0..last, at most all: under 1.5x the slots in use where a power of two alone
    reads up to 2x (positions 128..191 read 192 slots, not 256), for two captures per doubling."""
    covering = max(32, 1 << last.bit_length())  # the smallest power of two above last
    quarters = covering // 4 * 3
    window = quarters if covering >= 128 and quarters > last else covering
    return min(cache_len, window)


@dataclass
class CacheKind:
    """What the layers of one kind share: the cache length, the sliding window, the rotation, and (per sequence)
    the position each slot holds."""
    cache_len: int
    window: int  # 0: attend to every earlier position
    freqs: np.ndarray
    cos_scale: float
    variable: str  # the bound variable naming the first slot a call writes
    slot_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rotary: tuple[np.ndarray, np.ndarray] | None = None  # cos and sin of the positions reached (``Model._rotary_rows``)

    @property
    def ring(self) -> bool:
        return self.window > 0

    def record(self, seq: int, start: int, n: int, padded: int) -> int:
        """Record that positions start .. start+padded-1 of sequence ``seq`` go into their slots (the padding rows
        past ``n`` hold nothing a query may read); the first slot written."""
        positions = np.arange(start, start + padded)
        self.slot_pos[seq, positions % self.cache_len] = np.where(positions < start + n, positions, -1)
        return start % self.cache_len

    def forget(self, seq: int, from_pos: int = 0) -> None:
        """Sequence ``seq``'s slots holding positions ``from_pos`` and later hold nothing now."""
        row = self.slot_pos[seq]
        row[row >= from_pos] = -1

    def holds_window(self, seq: int, start: int) -> bool:
        """Whether the cache still holds sequence ``seq``'s keys of the window before ``start`` (always, unless a
        ring has overwritten them)."""
        if not self.ring:
            return True
        needed = np.arange(max(0, start - self.window + 1), start)
        return bool(np.array_equal(self.slot_pos[seq][needed % self.cache_len], needed))

    def mask_rows(self, seq: int, start: int, n: int, rows: int, window: int) -> np.ndarray:
        """Additive (rows, window) mask over the first ``window`` slots of sequence ``seq``: 0 where the slot holds
        a key the query at ``start + i`` attends to (an earlier or equal position, inside the sliding window),
        -inf elsewhere. Padding rows (``i >= n``) attend like the last real query: a row with no key at all would
        give NaNs, which the next layer would write into the cache (a masked slot still multiplies a weight of 0)."""
        key = self.slot_pos[seq, :window][None, :]
        query = np.minimum(np.arange(start, start + rows), start + n - 1)[:, None]
        return np.where(self._allowed(key, query), 0.0, -np.inf).astype(np.float32)

    def _allowed(self, key: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Where a query at position ``query`` attends to a slot holding position ``key`` (-1: none): an earlier or
        equal position, inside the sliding window (broadcast)."""
        allowed = (key >= 0) & (key <= query)
        if self.window:
            allowed &= query - key < self.window
        return allowed

    def decode_rows(self, seqs: np.ndarray, positions: np.ndarray, idle: np.ndarray,
                    window: int) -> tuple[np.ndarray, np.ndarray]:
        """A batched decode step's bookkeeping for all its rows at once (row r: one token of sequence ``seqs[r]`` at
        ``positions[r]``): records each row's position in its slot (an ``idle`` row's slot holds nothing a query may
        read), and returns the slots and the additive (rows, window) masks, row by row those of ``record`` and
        ``mask_rows`` with one token each; an idle row attends only to its own slot (a finite key: no NaN in it)."""
        slots = positions % self.cache_len
        some_idle = bool(idle.any())  # (none: the idle rows' numpy calls skipped, each ~7 us on cold caches)
        self.slot_pos[seqs, slots] = np.where(idle, -1, positions) if some_idle else positions
        key = self.slot_pos[seqs, :window]
        allowed = self._allowed(key, positions[:, None])
        if some_idle:
            allowed[idle] = False
            allowed[np.flatnonzero(idle), slots[idle]] = True
        return slots, np.where(allowed, np.float32(0.0), np.float32(-np.inf))


def zeroed(shape: tuple[int, ...], device: str, dtype: str = "float32") -> Any:
    """A tensor of zeros (``dtype``) in fresh memory that nothing writes now (``BufferOptions.zeroed``): on the CPU the
    OS maps its pages when a cache write first touches them, so loading does not write every context's caches
    (8 slots x 4096 positions of SmolLM2: 1.5 GB in float32, 0.75 GB in float16; ~2.3 s for the 1.5 GB after the host
    took idle memory back)."""
    from tgcore.dtype import to_dtype
    from tgcore.runtime.allocator import BufferOptions
    from tgcore.runtime.buffer import Buffer
    from tgcore.tensor import Tensor
    return Tensor.from_buffer(Buffer(device, math.prod(shape), to_dtype(dtype), options=BufferOptions(zeroed=True)),
                              shape)


class RowWrites(NamedTuple):
    """A batched decode step's cache writes: row r's key and value go to its own sequence and slot, all rows in one
    kernel per cache (``Tensor.take(...).assign``: a scatter). ``first`` (rows,) holds each row's first element in
    the flattened cache, ``(sequence * kv heads * cache length + slot) * head_dim`` (``first_dtype``); a head's elements
    follow at ``+ head * cache length * head_dim``. (A tuple: the jit finds the tensor in it, an input of each call.)"""
    first: Any


def first_dtype(cache_size: int) -> type:
    """The element type of ``RowWrites.first`` for a cache of ``cache_size`` elements: unsigned 32-bit where an int32
    index reaches every element (``write_rows`` then stores without a bounds check), else int64."""
    return np.uint32 if cache_size < 2**31 else np.int64


def write_rows(cache: Any, rows: Any, first: Any) -> None:
    """Row r of ``rows`` (T, kv heads, head_dim) into ``cache`` (sequences, kv heads, cache length, head_dim) at the
    element ``first[r]`` (``RowWrites``) and its heads after it, every row in one kernel.

    An unsigned ``first`` is taken modulo one past the last first element a row can have (a no-op for the firsts
    ``Model`` gives): the range analysis then proves every store inside the cache, so the kernel stores without a
    bounds check per element, which kept it scalar (one float16 at a time, ~12 us per cache at 8 rows)."""
    from tgcore.dtype import dtypes
    from tgcore.tensor import Tensor
    t, nkv, hd = rows.shape
    head_stride = cache.shape[2] * hd
    index = first.dtype
    if dtypes.is_unsigned(first.dtype):  # (one modulo per row, hoisted out of the row's loops)
        index = dtypes.int32
        first = (first % (cache.numel() - (nkv - 1) * head_stride - hd + 1)).cast(index)
    within = (Tensor.arange(nkv, device=cache.device, dtype=index) * head_stride).reshape(1, nkv, 1) + \
        Tensor.arange(hd, device=cache.device, dtype=index).reshape(1, 1, hd)
    cache.reshape(-1).take(first.reshape(t, 1, 1) + within).assign(rows.cast(cache.dtype))


def swap_sequences(cache: Any, a: int, b: int, slots: int) -> None:
    """Exchange the first ``slots`` slots of sequences ``a`` and ``b`` of ``cache`` (sequences, kv heads, cache length,
    head_dim), every head, through the host: a copy per head's run of slots (views of the cache's buffer), no kernel,
    so nothing compiles. The reads and values cached from the old contents are dropped (``invalidate``)."""
    from tgcore.schedule.state import REALIZATION
    if slots == 0:
        return
    buf = REALIZATION.buffer_of(cache)
    assert buf is not None, "a KV cache is a buffer of its own"
    _, nkv, cache_len, hd = cache.shape
    size, itemsize = slots * hd, cache.dtype.itemsize

    def run_of(seq: int, head: int) -> Any:  # (the slots of one head of one sequence: contiguous)
        return buf.view(size, cache.dtype, ((seq * nkv + head) * cache_len * hd) * itemsize)
    for head in range(nkv):
        first, second = run_of(a, head), run_of(b, head)
        held = first.numpy()
        first.copy_from(second)
        second.copyin(held)
    REALIZATION.invalidate(buf)
