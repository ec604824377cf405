"""Distinctive terms are whole words: no pieces of contractions ("don" of "don't"), no
abbreviations ("zool" of "(Zool.)"), nothing under three letters, while words that often end a
sentence stay."""

from __future__ import annotations

import re

import numpy as np
from sbert_pipeline.cluster.cluster_summaries import summarize
from sbert_pipeline.cluster.terms import MIN_LETTERS, distinctive_terms, term_words

# Two clusters as the bundled sample has them: forum answers full of contractions, and
# dictionary glosses with their subject labels; both end many sentences on a topic word.
ANSWERS = [
    "I don't know, you can't be sure about the guitar.",
    "Don't worry; we're fine and they'll tune the guitar.",
    "It's the band's guitar. I'm sure it doesn't matter.",
    "You shouldn't ask me about the guitar.",
    "We've played the guitar's strings. Isn't it loud?",
]
GLOSSES = [
    "(Zool.) A marine worm of the genus Nereis.",
    "(Bot.) A plant of the genus Rosa; a rose.",
    "(Zool.) Any fish of the family of the cod, etc., found in the north.",
    "(Bot.) A genus of herbaceous plants.",
    "(Zool. & Bot.) Having the form of a worm.",
    "(Eccl. Law) The rights of the church.",
]
FRAGMENTS = {"don", "can", "doesn", "shouldn", "isn", "zool", "bot", "eccl", "etc"}


def terms_of(documents: list[str], top_n: int = 20) -> list[list[str]]:
    return [[term for term, _ in found] for found in distinctive_terms(documents, top_n)]


def test_no_contraction_or_abbreviation_pieces_in_the_terms() -> None:
    answers, glosses = terms_of(["\n".join(ANSWERS), "\n".join(GLOSSES)])
    found = set(answers) | set(glosses)
    assert not found & FRAGMENTS, found & FRAGMENTS
    for term in found:
        assert re.fullmatch(r"[^\W\d_]+", term) and len(term) >= MIN_LETTERS, term
    # Real words stay, possessives counted as their word, words that end sentences too.
    assert answers[0] == "guitar" and {"band", "sure", "worry"} <= set(answers)
    assert {"genus", "worm", "plant", "plants", "fish", "church"} <= set(glosses)


def test_a_word_written_with_a_period_only_sometimes_is_no_abbreviation() -> None:
    # "rose." closes a sentence (a capital follows, or the text ends); "fig." never does.
    texts = ["A red rose. It grows.", "The rose garden. See fig. 3 for a rose, fig. 4 too."]
    (words,) = term_words(["\n".join(texts)])
    assert words.count("rose") == 3 and "fig" not in words
    # Inside brackets a label stays an abbreviation even before a capital.
    (words,) = term_words(["(Old Eng. Law) An old law.\nThe English law."])
    assert "eng" not in words and words.count("law") == 3
    assert "english" in words


def test_curly_apostrophes_and_possessives() -> None:
    (words,) = term_words(["Obama\u2019s plan; we don\u2019t know Obama's aides' views."])
    assert words == ["obama", "plan", "know", "obama", "aides", "views"]


def test_summaries_join_texts_one_a_line() -> None:
    # Joined with spaces, "guitar." followed by a lowercase gloss would look like "etc.,".
    ids = ["a", "b", "c", "d"]
    texts = {"a": "He plays guitar.", "b": "guitar solo tonight", "c": "in a quiet way"}
    labels = np.array([0, 0, 0, 1])
    profiles = summarize(ids, labels, np.ones(4, np.float32), 2, texts, top_terms=5)
    assert "guitar" in profiles[0].terms
