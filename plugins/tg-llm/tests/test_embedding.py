"""The token embedding's rows (``tg_llm.embedding``) against gguf-py's reader and dequantizer, for the calls a decode
step makes (rows kept from earlier steps, new ones, a token twice) and for longer calls."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from llm_testutil import require_gguf, smollm2_path


@pytest.fixture(scope="module")
def table_and_embedding() -> Iterator[tuple[np.ndarray, object]]:
    gguf = require_gguf()
    import tg_gguf
    from tg_llm.embedding import Embedding
    path = smollm2_path()
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "token_embd.weight")
    reference = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
    gf = tg_gguf.load(path)
    yield reference, Embedding(gf, "token_embd.weight", "CPU")
    gf.close()


@pytest.mark.parametrize("calls", [
    [[5], [5], [6, 5]],                      # a kept row, then kept and new together
    [[7, 8, 9, 10], [10, 11, 7, 12]],        # decode steps of 4 rows: some rows kept, some new
    [[13, 13, 14], [14, 13]],                # a token twice in one call
    [list(range(100, 120))],                 # a prefill's call: not kept
])
def test_rows_match_gguf_py(table_and_embedding, calls):
    reference, embedding = table_and_embedding
    for ids in calls:
        rows = embedding(ids)
        assert rows.dtype == np.float32 and rows.shape == (len(ids), reference.shape[1])
        np.testing.assert_array_equal(rows, reference[ids])


def test_kept_rows_are_forgotten_when_full(table_and_embedding, monkeypatch):
    import tg_llm.embedding as embedding_module
    reference, embedding = table_and_embedding
    monkeypatch.setattr(embedding_module, "EMBEDDING_KEPT_BYTES", 3 * reference.shape[1] * 4)
    embedding._kept.clear()
    embedding([1, 2])
    embedding([3, 4])  # (over the bytes kept: the old rows are dropped)
    assert set(embedding._kept) == {3, 4}
    np.testing.assert_array_equal(embedding([4, 1, 3]), reference[[4, 1, 3]])


def test_a_steps_new_rows_are_dequantized_together(table_and_embedding, monkeypatch):
    """One dequantization per decode step for its new tokens, none for the kept ones."""
    reference, embedding = table_and_embedding
    embedding._kept.clear()
    calls = []
    rows_of = embedding.rows_of
    monkeypatch.setattr(embedding, "rows_of", lambda ids: calls.append(list(ids)) or rows_of(ids))
    np.testing.assert_array_equal(embedding([20, 21, 22, 21]), reference[[20, 21, 22, 21]])
    np.testing.assert_array_equal(embedding([22, 23, 20, 24]), reference[[22, 23, 20, 24]])
    assert calls == [[20, 21, 22], [23, 24]]


def test_bad_ids_are_rejected(table_and_embedding):
    _, embedding = table_and_embedding
    with pytest.raises(ValueError, match="token ids"):
        embedding([3, -1])
    with pytest.raises(ValueError, match="token ids"):
        embedding([embedding.vocab])
    kept = dict(embedding._kept)
    with pytest.raises(ValueError, match="token ids"):
        embedding([5, np.int64(-1)])
    with pytest.raises(ValueError, match="token ids"):
        embedding(list(range(20)) + [embedding.vocab])  # (a call longer than a decode step's)
    assert embedding._kept.keys() == kept.keys()  # (a rejected call keeps nothing)
