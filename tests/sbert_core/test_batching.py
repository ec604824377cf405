import numpy as np
import pytest

from sbert_core.inference.batching import length_sorted_batches


def test_every_index_once_longest_first():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=1000)
    batches = length_sorted_batches(lengths, batch_size=32)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    firsts = [lengths[b[0]] for b in batches]
    assert firsts == sorted(firsts, reverse=True)
    # Sorted order means padding inside a batch is the spread of its lengths, which is small.
    waste = sum(len(b) * lengths[b].max() - lengths[b].sum() for b in batches)
    assert waste < 0.05 * lengths.sum()


def test_token_budget_caps_padded_tokens():
    lengths = [100, 90, 10, 10, 10, 10, 9, 3, 250]
    batches = length_sorted_batches(lengths, token_budget=200)
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 200 or len(batch) == 1
    assert [len(b) for b in batches] == [1, 2, 6]


def test_budget_and_batch_size_together():
    batches = length_sorted_batches([5] * 100, batch_size=8, token_budget=1000)
    assert [len(b) for b in batches] == [8] * 12 + [4]


def test_bad_arguments():
    with pytest.raises(ValueError):
        length_sorted_batches([1, 2])
    with pytest.raises(ValueError):
        length_sorted_batches([1, 2], batch_size=0)
    assert length_sorted_batches([], batch_size=4) == []
