"""Normalised text and its hash, to find copies of one text before embedding (Beam-free).

Two texts are *the same normalised text* when :func:`normalize_text` maps them to one string:

1. Unicode NFKC: compatibility forms become their plain letters (the ligature "ﬁ" -> "fi",
   full-width "Ｑ" -> "Q", "①" -> "1", no-break space -> space);
2. case folding (``str.casefold``: "Straße" and "STRASSE" -> "strasse");
3. every run of whitespace and sentence punctuation becomes one space, and the ends are
   trimmed: "What is X ?!" and "what is x" are one text. Sentence punctuation is every Unicode
   punctuation character (categories ``P*``: dots, commas, question marks, quotes, dashes,
   brackets, ...) except the few that carry meaning inside a word or formula, ``# @ % & * / \\``,
   which stay (so "C#" is not "C", "1/2" is not "1 2"). Symbols (``+ $ = ^`` and emoji, categories
   ``S*``) also stay ("C++" is not "C").

What this does not merge: texts that differ in a letter, a digit, a kept character or a
symbol; what it does merge that may matter: texts that differ only in sentence punctuation,
such as a leading minus sign ("-1" and "1") or an apostrophe ("it's" and "it s").

This lives in ``pipelines`` (not ``sbert_core``) because it is a corpus rule for deduplication,
not part of any model: the encoder still embeds the text as written.

Example:
    >>> normalize_text("  Ｗhat ＩＳ   ﬁne-tuning?? ")
    'what is fine tuning'
    >>> text_key("What is fine-tuning?") == text_key("WHAT IS FINE TUNING")
    True
"""

from __future__ import annotations

import functools
import hashlib
import sys
import unicodedata
from collections.abc import Sequence

import numpy as np

# Punctuation kept as content: inside words and formulas these tell texts apart.
KEPT_PUNCTUATION = frozenset("#@%&*/\\")


@functools.cache
def _separators() -> dict[int, str]:
    """``str.translate`` table sending every sentence punctuation character to a space."""
    return {
        code: " "
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)).startswith("P") and chr(code) not in KEPT_PUNCTUATION
    }


def normalize_text(text: str) -> str:
    """NFKC, casefold, whitespace and sentence punctuation runs to one space (module docstring).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    folded = unicodedata.normalize("NFKC", text).casefold()
    # casefold can produce characters that NFKC would change again (rare); one more pass makes
    # the result a fixed point, so normalising twice changes nothing.
    folded = unicodedata.normalize("NFKC", folded)
    return " ".join(folded.translate(_separators()).split())


def text_key(text: str) -> str:
    """A 128-bit BLAKE2b hex digest of :func:`normalize_text` (UTF-8), for grouping copies."""
    return hashlib.blake2b(normalize_text(text).encode("utf-8"), digest_size=16).hexdigest()


def first_copies(texts: Sequence[str]) -> np.ndarray:
    """``(n,)`` int64: for every text, the first row holding the same normalised text.

    A row with ``first_copies(texts)[i] == i`` is the first of its text and is embedded; every
    other row is a copy of that row.
    """
    first: dict[str, int] = {}
    out = np.empty(len(texts), np.int64)
    for row, text in enumerate(texts):
        out[row] = first.setdefault(text_key(text), row)
    return out
