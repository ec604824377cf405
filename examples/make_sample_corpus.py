"""Rebuild ``examples/sample_corpus.jsonl`` from ``../shared/data`` (deterministic).

The sample mixes STSb sentences (news headlines, captions, forum posts), dictionary glosses from
the short-text corpus, and planted near-duplicates (a function word dropped, two words swapped,
case or punctuation changed) whose ``duplicate_of`` field names the original, so later stages
have a known answer. Run: ``python examples/make_sample_corpus.py``.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "examples" / "sample_corpus.jsonl"


def _rows(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


# Words whose loss keeps the meaning: a planted duplicate must still say the same thing (dropping
# "symphony" from "the symphony was hailed ..." made a variant no model should call a duplicate).
_DROPPABLE = frozenset(
    "a an the of to in on at for with by from and or but is are was were be been that this "
    "very just really also so some".split()
)


def _perturb(text: str, rng: random.Random) -> str:
    words = text.split()
    kind = rng.choice(["drop", "swap", "case", "punct"]) if len(words) > 4 else "case"
    droppable = [i for i, word in enumerate(words) if i > 0 and word.lower() in _DROPPABLE]
    if kind == "drop" and not droppable:
        kind = "swap"
    if kind == "drop":
        del words[rng.choice(droppable)]
    elif kind == "swap":
        i = rng.randrange(1, len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    elif kind == "case":
        return text.lower() if text != text.lower() else text.upper()
    else:
        return text.rstrip(".!?") + ("?" if text.endswith(".") else ".")
    return " ".join(words)


def main() -> None:
    rng = random.Random(13)
    stsb = list(
        dict.fromkeys(
            s
            for r in _rows(DATA / "stsb" / "test.tsv.gz")
            for s in (r["sentence1"], r["sentence2"])
        )
    )
    corpus = [r["text"] for r in _rows(DATA / "corpus" / "short_texts_en.tsv.gz")]
    texts = [("stsb", t) for t in rng.sample(stsb, 1200)] + [
        ("corpus", t) for t in rng.sample(corpus, 1200)
    ]
    records = [
        {"id": f"s{i:05d}", "text": t, "source": s, "duplicate_of": None}
        for i, (s, t) in enumerate(texts)
    ]
    seen = {r["text"] for r in records}
    for original in rng.sample(records, 150):
        variant = _perturb(original["text"], rng)
        if variant not in seen:
            seen.add(variant)
            records.append(
                {
                    "id": f"d{len(records):05d}",
                    "text": variant,
                    "source": "planted",
                    "duplicate_of": original["id"],
                }
            )
    rng.shuffle(records)
    with OUT.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    print(f"wrote {len(records)} records to {OUT}")


if __name__ == "__main__":
    main()
