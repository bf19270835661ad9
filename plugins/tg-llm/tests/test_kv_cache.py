"""The batched decode step's cache bookkeeping (``CacheKind.decode_rows``) and row writes (``write_rows``) against
references written out position by position in numpy."""
from __future__ import annotations

import numpy as np
import pytest


def _expected_masks(slot_pos: np.ndarray, seqs: list[int], positions: list[int], idle: list[bool], window: int,
                    sliding: int, cache_len: int) -> np.ndarray:
    """The masks by their definition, one key at a time (``slot_pos`` already holds the step's positions)."""
    out = np.full((len(seqs), window), -np.inf, np.float32)
    for r, (seq, pos) in enumerate(zip(seqs, positions, strict=True)):
        for slot in range(window):
            key = slot_pos[seq, slot]
            if idle[r]:
                attend = slot == pos % cache_len
            else:
                attend = 0 <= key <= pos and (not sliding or pos - key < sliding)
            if attend:
                out[r, slot] = 0.0
    return out


@pytest.mark.parametrize("idle", [[False, True, False, False, True], [False] * 5])  # (no idle row: a path of its own)
@pytest.mark.parametrize("sliding", [0, 24])
def test_decode_rows_match_the_definition(sliding, idle):
    from tg_llm.kv_cache import CacheKind
    cache_len, rows = 64, 5
    rng = np.random.default_rng(sliding)
    kind = CacheKind(cache_len, sliding, np.ones(4), 1.0, "start", np.full((rows + 2, cache_len), -1, np.int64))
    seqs = [1, 2, 3, 5, 6]
    reached = rng.integers(10, 120, rows) if sliding else rng.integers(10, 60, rows)
    for seq, n in zip(seqs, reached, strict=True):  # each sequence's earlier positions in their slots
        for p in range(n):
            kind.slot_pos[seq, p % cache_len] = p
    positions = [int(n) for n in reached]
    window = 64
    slots, masks = kind.decode_rows(np.asarray(seqs), np.asarray(positions, np.int64), np.asarray(idle), window)
    assert slots.tolist() == [p % cache_len for p in positions]
    for seq, pos, is_idle in zip(seqs, positions, idle, strict=True):
        assert kind.slot_pos[seq, pos % cache_len] == (-1 if is_idle else pos)
    expected = _expected_masks(kind.slot_pos, seqs, positions, idle, window, sliding, cache_len)
    assert masks.dtype == np.float32
    np.testing.assert_array_equal(masks, expected)


@pytest.mark.parametrize("dtype", [np.uint32, np.int32])
def test_write_rows_put_each_row_at_its_first_element(dtype):
    from tg_llm.kv_cache import write_rows, zeroed

    from tgcore.tensor import Tensor
    seqs, nkv, cache_len, hd = 3, 2, 16, 8
    cache = zeroed((seqs, nkv, cache_len, hd), "CPU", "float16")
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((3, nkv, hd)).astype(np.float32)
    # (sequence, slot) per row: the last slot of the last sequence is the highest first element there is
    places = [(0, 3), (2, cache_len - 1), (1, 0)]
    firsts = np.asarray([(s * nkv * cache_len + slot) * hd for s, slot in places], dtype)
    write_rows(cache, Tensor(rows), Tensor(firsts))
    expected = np.zeros((seqs, nkv, cache_len, hd), np.float16)
    for r, (s, slot) in enumerate(places):
        expected[s, :, slot] = rows[r].astype(np.float16)
    np.testing.assert_array_equal(cache.numpy(), expected)
