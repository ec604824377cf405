"""The distinctive terms of each cluster: whole words, scored by class-based TF-IDF (Beam-free).

Words: runs of letters, lowercased, at least :data:`MIN_LETTERS` long; digits and underscores
split words and are never part of a term. What a plain word pattern would cut into fragments is
left out:

* contractions (``don't``, ``we're``, ``they'll``): the piece before the apostrophe is no word
  of its own (``don``); the whole is a function word. A possessive ``'s`` is taken off
  (``Obama's`` counts as ``obama``).
* abbreviations (``(Zool.)``, ``(Bot.)``, ``etc.,``): a word is one when at least half of its
  uses are written with a period that ends no sentence: one followed by ``)``, ``,``, ``;``,
  ``:``, a lowercase letter or a digit (``fig. 3``), or inside parentheses. A period before a
  capital, a quote or the end of a text ends a sentence, so a word that often closes a sentence
  stays.

Scores (c-TF-IDF, Grootendorst 2022, "BERTopic"): the texts of each cluster are one document,
and term ``t`` scores in cluster ``c`` as ``tf(t, c) * log(1 + A / f(t))``, where ``tf`` is the
term's share of the cluster's words, ``A`` the mean number of words per cluster and ``f(t)`` the
term's count over all clusters. Frequent-everywhere words score low; words a cluster uses much
more than the rest score high.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

# Shorter words are mostly pieces (initials, units, "st", "th"), rarely what sets a topic apart.
MIN_LETTERS = 3

# Letters, with apostrophes inside (a contraction or a possessive is one match).
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_SPACES = re.compile(r"[ \t]*")
# Besides capitals, what may open the next sentence after a period.
_OPENERS = "\"'\u2018\u201c(["
_CONTRACTION_ENDS = ("n't", "'re", "'ve", "'ll", "'d", "'m")


def distinctive_terms(
    documents: Sequence[str], top_n: int = 8, *, stop_words: str | None = "english"
) -> list[list[tuple[str, float]]]:
    """Class-based TF-IDF: the ``top_n`` terms that set each document (cluster) apart.

    Args:
        documents: one document per cluster, its texts joined (by line breaks, so that a
            period at the end of one text ends a sentence).
        top_n: terms per cluster.
        stop_words: ``"english"`` (scikit-learn's list) or None.

    Returns:
        For each document, ``(term, score)`` pairs by score descending (ties: alphabetical);
        fewer than ``top_n`` when the cluster has fewer distinct terms; empty when there are no
        terms at all (e.g. no texts).
    """
    words = term_words(documents, stop_words=stop_words)
    vectorizer = CountVectorizer(analyzer=_given_words)
    try:
        counts = vectorizer.fit_transform(words).astype(np.float64)  # (clusters, terms)
    except ValueError:  # empty vocabulary: no texts, or only stop words
        return [[] for _ in documents]
    vocabulary = vectorizer.get_feature_names_out()
    words_per_cluster = np.asarray(counts.sum(axis=1)).ravel()
    term_totals = np.asarray(counts.sum(axis=0)).ravel()
    mean_words = words_per_cluster.mean()
    idf = np.log1p(mean_words / term_totals)
    shares = counts.multiply(1.0 / np.maximum(words_per_cluster, 1.0)[:, None]).tocsr()
    weights = shares.multiply(idf[None, :]).tocsr()
    result = []
    for row in range(weights.shape[0]):
        start, end = weights.indptr[row], weights.indptr[row + 1]
        columns, values = weights.indices[start:end], weights.data[start:end]
        order = np.lexsort((vocabulary[columns], -values))[:top_n]
        result.append([(str(vocabulary[columns[i]]), float(values[i])) for i in order])
    return result


def term_words(documents: Sequence[str], *, stop_words: str | None = "english") -> list[list[str]]:
    """Each document's words that may be terms, in order (see the module docstring): no stop
    words, no contractions, no abbreviations of the documents, none under MIN_LETTERS."""
    if stop_words not in ("english", None):
        raise ValueError(f"stop_words must be 'english' or None, got {stop_words!r}")
    stop = ENGLISH_STOP_WORDS if stop_words == "english" else frozenset()
    found = [list(_words(document)) for document in documents]
    uses: Counter[str] = Counter()
    abbreviated: Counter[str] = Counter()
    for words in found:
        for word, abbreviation in words:
            uses[word] += 1
            abbreviated[word] += abbreviation
    dropped = {word for word, count in abbreviated.items() if 2 * count >= uses[word]}
    return [
        [word for word, _ in words if word not in dropped and word not in stop] for words in found
    ]


def _words(text: str) -> Iterator[tuple[str, bool]]:
    """``(word, written as an abbreviation here)`` for the words of ``text`` long enough to be
    terms, lowercased, possessives taken off and contractions left out."""
    depth, last = 0, 0  # open parentheses before the current word
    for match in _WORD.finditer(text):
        between = text[last : match.start()]
        depth = max(depth + between.count("(") - between.count(")"), 0)
        last = match.end()
        word = match.group().lower().replace("\u2019", "'")
        if "'" in word:
            if word.endswith(_CONTRACTION_ENDS):
                continue
            if word.endswith("'s"):
                word = word[:-2]
        if len(word) < MIN_LETTERS:
            continue
        period = text.startswith(".", match.end())
        yield word, period and (depth > 0 or not _opens_sentence(text, match.end() + 1))


def _opens_sentence(text: str, position: int) -> bool:
    """Whether what follows ``position`` (after spaces) starts a sentence: the end of the text
    or of a line, a capital, a quote or an opening bracket."""
    at = _SPACES.match(text, position).end()
    if at == len(text) or text[at] in "\r\n":
        return True
    return text[at].isupper() or text[at] in _OPENERS


def _given_words(words: list[str]) -> list[str]:
    """The vectorizer's analyzer: the documents are already split into words."""
    return words
