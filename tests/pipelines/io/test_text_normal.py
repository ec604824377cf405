"""The normaliser behind exact-text dedup: tricky Unicode, kept characters, idempotence."""

from __future__ import annotations

import pytest
from sbert_pipeline.io.text_normal import first_copies, normalize_text, text_key


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("ﬁnd the ﬂow", "find the flow"),  # NFKC ligatures
        ("ＷＨＡＴ ＩＳ　ＡＩ？", "what is ai"),  # full-width letters, ideographic space, ？
        ("Straße", "STRASSE"),  # casefold ß -> ss
        ("What   is\tX?!...", "what is x"),  # whitespace and punctuation runs, trimmed
        ("«non-biodegradable» — waste", "non biodegradable waste"),  # quotes and dashes
        ("café", "cafe\u0301"),  # composed vs combining accent
        ("①", "1"),
    ],
)
def test_normaliser_merges(left, right):
    assert normalize_text(left) == normalize_text(right)
    assert text_key(left) == text_key(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [("C#", "C"), ("C++", "C"), ("1/2", "1 2"), ("email@x", "email x"), ("cafe", "café")],
)
def test_normaliser_keeps_meaningful_characters(left, right):
    assert text_key(left) != text_key(right)


def test_normaliser_is_idempotent_and_rejects_non_text():
    for text in ("ﬁ Straße  ＡＢＣ?!", "İstanbul", "ǅ", "ΣΑΣ"):
        once = normalize_text(text)
        assert normalize_text(once) == once
    assert normalize_text(" ?! ") == ""
    with pytest.raises(TypeError, match="expected a str"):
        normalize_text(None)


def test_first_copies():
    texts = ["What is AI?", "what is ai", "Who?", "WHAT IS AI !"]
    assert first_copies(texts).tolist() == [0, 0, 2, 0]
