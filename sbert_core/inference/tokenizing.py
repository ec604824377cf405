"""Tokenising texts for the encoder: ``prompt + text`` to token ids, unpadded, truncated at
``max_seq_length`` as sentence-transformers truncates, recording which texts were cut; and
padding id lists into a batch.

Very long texts are cut to a prefix before tokenising (tokenising a whole 15 MiB text to keep
its first tokens is slow and large); the prefix is long enough to give the same first tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

# Texts longer than max_seq_length * CUT_CHARS_PER_TOKEN characters are cut before tokenising.
# English averages about 4 characters per WordPiece token, and no word-splitting tokenizer spends
# more than a handful on one, so 32 leaves every kept token untouched in practice (the cut is
# widened when the prefix holds too few tokens, see _long_text_ids).
CUT_CHARS_PER_TOKEN = 32


@dataclass(frozen=True)
class Tokenized:
    """Token ids of each text, unpadded, already truncated to ``max_seq_length``."""

    input_ids: list[list[int]]
    n_tokens: np.ndarray  # (N,) int32, special tokens included
    truncated: np.ndarray  # (N,) bool: the text had more than max_seq_length tokens


def tokenize_texts(
    tokenizer,
    texts: Sequence[str],
    *,
    prompt: str = "",
    max_seq_length: int,
    lower: bool = False,
) -> Tokenized:
    """Tokenise ``prompt + text`` with ``tokenizer`` without padding, truncating at
    ``max_seq_length`` and recording who was cut; ``lower`` lower-cases first (the model's
    ``do_lower_case``).

    Raises:
        TypeError: an element is not a ``str``, naming its position.
    """
    texts = _checked_texts(texts)
    if prompt:
        texts = [prompt + text for text in texts]
    if not texts:
        return Tokenized([], np.zeros(0, np.int32), np.zeros(0, bool))
    # Tokenising a whole 15 MiB text to keep its first max_seq_length tokens took 80 s and
    # 4 GB; a prefix of a generous number of characters per token gives the same first tokens.
    limit = max_seq_length * CUT_CHARS_PER_TOKEN
    whole = texts
    long_rows = [row for row, text in enumerate(texts) if len(text) > limit]
    if long_rows:
        texts = list(texts)
        for row in long_rows:
            texts[row] = _prefix_at_space(texts[row], limit)
    if lower:
        texts = [text.lower() for text in texts]
    ids = _token_ids(tokenizer, texts, max_seq_length=max_seq_length, truncate=False)
    full_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    for row in long_rows:
        texts[row], ids[row] = _long_text_ids(
            tokenizer,
            whole[row],
            texts[row],
            ids[row],
            limit,
            max_seq_length=max_seq_length,
            lower=lower,
        )
        full_lengths[row] = len(ids[row])
    too_long = np.flatnonzero(full_lengths > max_seq_length)
    if too_long.size:
        # Re-tokenise only the long ones with truncation: the tokenizer knows which special
        # tokens to keep, and counting first tells us exactly who was cut.
        cut = _token_ids(
            tokenizer, [texts[i] for i in too_long], max_seq_length=max_seq_length, truncate=True
        )
        for position, index in enumerate(too_long):
            ids[index] = cut[position]
    n_tokens = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    return Tokenized(ids, n_tokens, full_lengths > max_seq_length)


def pad_token_ids(
    input_ids: Sequence[Sequence[int]], pad_id: int, *, left: bool, device: torch.device
) -> dict[str, torch.Tensor]:
    """Pad token id lists into ``input_ids`` and ``attention_mask`` tensors ``(B, T)`` on
    ``device``, on the left when ``left`` (decoders such as Qwen3-Embedding), else the right."""
    width = max(len(ids) for ids in input_ids)
    padded = np.full((len(input_ids), width), pad_id, dtype=np.int64)  # (B, T)
    mask = np.zeros((len(input_ids), width), dtype=np.int64)  # (B, T)
    for row, ids in enumerate(input_ids):
        start = width - len(ids) if left else 0
        padded[row, start : start + len(ids)] = ids
        mask[row, start : start + len(ids)] = 1
    return {
        "input_ids": torch.from_numpy(padded).to(device),
        "attention_mask": torch.from_numpy(mask).to(device),
    }


def _long_text_ids(
    tokenizer,
    whole: str,
    prefix: str,
    ids: list[int],
    limit: int,
    *,
    max_seq_length: int,
    lower: bool,
) -> tuple[str, list[int]]:
    """(text, token ids) of a text cut to ``prefix``: the prefix while it holds at least twice
    ``max_seq_length`` tokens (so the tokens it cuts lie far past the ones kept), else a
    prefix four times longer, up to the whole text (long runs of spaces, giant words).

    A text that stays cut has more than ``max_seq_length`` tokens, so it is flagged truncated.
    """
    while len(ids) <= 2 * max_seq_length and len(prefix) < len(whole):
        limit *= 4
        prefix = _prefix_at_space(whole, limit)
        if lower:
            prefix = prefix.lower()
        ids = _token_ids(tokenizer, [prefix], max_seq_length=max_seq_length, truncate=False)[0]
    return prefix, ids


def _token_ids(
    tokenizer, texts: list[str], *, max_seq_length: int, truncate: bool
) -> list[list[int]]:
    return tokenizer(
        texts,
        add_special_tokens=True,
        truncation=truncate,
        max_length=max_seq_length if truncate else None,
        padding=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )["input_ids"]


def _prefix_at_space(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at the last space or line break if one lies
    in the second half (tokenizers split words there, so the prefix's tokens are the text's)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(space, limit // 2, limit + 1) for space in " \n\t")
    return text[:cut] if cut > 0 else text[:limit]


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(
            "texts must be a sequence of strings, not a single string "
            "(encode() takes one string and returns one vector)"
        )
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(
            f"texts must be a string or a sequence of strings, got {type(texts).__name__}"
        ) from None
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{position}] is {type(text).__name__}, expected str")
    return texts
