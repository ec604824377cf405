"""Smart batching: group texts of similar tokenised length so batches carry little padding.

The paper reports smart batching sped encoding up by 89% on CPU and 48% on GPU. We sort by
*token* length (what the model sees) rather than character length, and can cap a batch by a
token budget (rows x longest row) so short texts travel in large batches and long ones in small.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Padded tokens per forward pass when neither batch_size nor token_budget is given. On CPU,
# all-MiniLM-L6-v2 on 2 cores was fastest at 1-2k tokens (activations stay in cache; 16k was
# ~2x slower); GPUs want large batches to fill their cores.
DEFAULT_TOKEN_BUDGET = {"cpu": 2048, "cuda": 32768}


def length_sorted_batches(
    lengths: Sequence[int] | np.ndarray,
    *,
    batch_size: int | None = None,
    token_budget: int | None = None,
) -> list[np.ndarray]:
    """Split indices ``0..N-1`` into batches of similar length, longest first.

    Longest first means a batch that does not fit in memory fails at once, not at the end.

    Args:
        lengths: token count of each text (special tokens included).
        batch_size: at most this many texts per batch.
        token_budget: at most this many padded tokens (rows x longest row) per batch.
            At least one of ``batch_size`` and ``token_budget`` must be given.

    Returns:
        A list of index arrays; every index appears in exactly one batch.

    Example:
        >>> [b.tolist() for b in length_sorted_batches([3, 9, 4, 8], batch_size=2)]
        [[1, 3], [2, 0]]
    """
    if batch_size is None and token_budget is None:
        raise ValueError("give batch_size, token_budget or both")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if token_budget is not None and token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    lengths = np.asarray(lengths, dtype=np.int64)
    # A stable sort keeps equal-length texts in input order, so batches are reproducible.
    order = np.argsort(-lengths, kind="stable")
    max_rows = batch_size or len(order)
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        rows = max_rows if token_budget is None else max(1, min(max_rows, token_budget // longest))
        batches.append(order[start : start + rows])
        start += rows
    return batches


def progress_bar(n_batches: int, enabled: bool):
    """sentence-transformers' bar: one step per batch, on stderr (None when not enabled)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=n_batches, desc="Batches", unit="batch")
