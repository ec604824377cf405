"""Dedup methods on real question duplicates: Quora Question Pairs dev, human labels.

Embeds the 158,678 dev questions with all-MiniLM-L6-v2 (or reads them from ``--cache``), finds
every pair at or above ``--floor`` exactly
(:func:`sbert_pipeline.vectors.pairs_above.self_pairs_above`), then sweeps the threshold for each
dedup method (:mod:`sbert_pipeline.grouping.methods`) and scores "both questions end in one group"
on the 116,306 labelled pairs (:mod:`sbert_pipeline.grouping.labels`). Each method runs in a forked
child process, so its time and peak memory (the child's peak RSS, which includes the pairs it
shares with the parent) are its own.

    python -m benchmarks.dedup_qqp [--cache /work/cache/qqp] [--dtype float32] [--floor 0.70]
        [--sweep 0.70:0.95:0.01] [--threads 1] [--max-largest 1000]

Cache files (written when missing): ``dev_emb_{dtype}.npy`` with ``dev_qids.txt`` (row order),
and ``dev_pairs{floor*100}_{dtype}.npz`` (``a``, ``b``, ``score``). With both cached, a run
reads no model and takes a few minutes (the sweeps).

F1 over labelled pairs barely sees one giant group, so every figure comes with the largest group
and the share of questions removed. The table lists, per method, the best pair-F1 under the
largest-group cap ``--max-largest`` (default 1,000: a sweep point whose largest group is over it
does not count) and, beside it, the uncapped best. "T rule" says whether every removed question
is at or above T to its kept question (the default's rule; the others need an explicit choice).
The last lines name the best capped setting that holds the rule (what ``sbert dedup`` defaults
to) and the best capped setting of any method.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

import numpy as np
from sbert_pipeline.dedup.sources import LabelColumns, read_labelled_pairs
from sbert_pipeline.grouping.choices import TIGHT_METHODS
from sbert_pipeline.grouping.compare import MethodSettings
from sbert_pipeline.grouping.labels import (
    LabelPoint,
    PairCounts,
    best_f1_point,
    label_sweep,
    match_labels,
    pr_curve,
)
from sbert_pipeline.grouping.methods import sweep_groupings
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import rank_items
from sbert_pipeline.grouping.sizes import size_distribution
from sbert_pipeline.grouping.sweep import sweep_thresholds

from benchmarks.common import DATA_DIR, read_tsv, write_result
from benchmarks.parser import benchmark_parser
from sbert_core.evaluation.pair_metrics import best_f1 as pair_best_f1


@dataclass(frozen=True)
class Contender:
    """One method with its parameters, as swept."""

    name: str
    method: str
    ranking: str = "first"
    params: dict = field(default_factory=dict)  # k, missing_score
    radius_below: float | None = None  # star, split: rep_threshold = threshold - radius_below
    # False where groups can chain (components, mutual kNN): their largest group grows with
    # the corpus, so they do not count as the chain-free answer.
    chain_free: bool = True
    # The group-size limit of sbert dedup (--max-group-size): groups over it are split.
    max_group_size: int | None = None

    @property
    def holds_threshold(self) -> bool:
        """Whether every removed question is at or above T to its kept question."""
        return self.method in TIGHT_METHODS and not self.radius_below


CONTENDERS = (
    Contender("components", "components", chain_free=False),
    Contender("components (central)", "components", "central", chain_free=False),
    Contender(
        "components, max group 1000",
        "components",
        "central",
        chain_free=False,
        max_group_size=1000,
    ),
    Contender("ranked (corpus order)", "ranked", "first"),
    Contender("ranked (central)", "ranked", "central"),
    Contender(
        "star r=T (central), the default", "star", "central", radius_below=0.0, max_group_size=1000
    ),
    Contender("split r=T (central)", "split", "central", radius_below=0.0),
    Contender("star r=T-0.05 (central)", "star", "central", radius_below=0.05),
    Contender("star r=T-0.10 (central)", "star", "central", radius_below=0.10),
    Contender("star r=T-0.15 (central)", "star", "central", radius_below=0.15),
    Contender("split r=T-0.05 (central)", "split", "central", radius_below=0.05),
    Contender("split r=T-0.10 (central)", "split", "central", radius_below=0.10),
    Contender("split r=T-0.15 (central)", "split", "central", radius_below=0.15),
    Contender("mutual k=1", "mutual", params={"k": 1}, chain_free=False),
    Contender("mutual k=3", "mutual", params={"k": 3}, chain_free=False),
    Contender("mutual k=5", "mutual", params={"k": 5}, chain_free=False),
    Contender("mutual k=10", "mutual", params={"k": 10}, chain_free=False),
    Contender("average missing=0", "average", params={"missing_score": 0.0}),
    Contender("average missing=0.5", "average", params={"missing_score": 0.5}),
    Contender("average missing=0.7", "average", params={"missing_score": 0.7}),
)


def load_questions() -> tuple[list[str], list[str]]:
    """QQP dev ``(qids, questions)`` in file order."""
    rows = read_tsv(DATA_DIR / "qqp" / "dev_questions.tsv.gz")
    return [row["qid"] for row in rows], [row["question"] for row in rows]


def embeddings(cache: Path | None, dtype: str, qids: list[str], texts: list[str]) -> np.ndarray:
    """The questions' embeddings from the cache (checked against the qids) or computed."""
    if cache is not None and (cache / f"dev_emb_{dtype}.npy").exists():
        cached_ids = (cache / "dev_qids.txt").read_text(encoding="utf-8").split("\n")[:-1]
        if cached_ids != qids:
            raise SystemExit(f"{cache}/dev_qids.txt does not list the dev questions in order")
        return np.load(cache / f"dev_emb_{dtype}.npy")
    from sbert_core.inference.encoder import SentenceEncoder

    start = time.perf_counter()
    encoder = SentenceEncoder.load("all-MiniLM-L6-v2", device="cpu", dtype=dtype)
    vectors = encoder.encode(texts)
    print(f"embedded {len(texts)} questions in {time.perf_counter() - start:.0f} s ({dtype})")
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        np.save(cache / f"dev_emb_{dtype}.npy", vectors)
        (cache / "dev_qids.txt").write_text("\n".join(qids) + "\n", encoding="utf-8")
    return vectors


def all_pairs(cache: Path | None, dtype: str, vectors: np.ndarray, floor: float) -> IndexedPairs:
    """Every pair at or above ``floor``, from the cache or computed exactly."""
    name = f"dev_pairs{round(floor * 100):03d}_{dtype}.npz"
    if cache is not None and (cache / name).exists():
        data = np.load(cache / name)
        return IndexedPairs(data["a"], data["b"], data["score"])
    from sbert_pipeline.vectors.pairs_above import self_pairs_above

    start = time.perf_counter()
    a, b, s = self_pairs_above(vectors, floor)
    print(f"{len(a):,} pairs >= {floor} in {time.perf_counter() - start:.0f} s")
    if cache is not None:
        np.savez(cache / name, a=a, b=b, score=s)
    return IndexedPairs(a, b, s)


def sweep_contender(
    contender: Contender,
    n: int,
    pairs: IndexedPairs,
    thresholds: list[float],
    labelled,
    floor: float,
) -> tuple[list[LabelPoint], list[dict[str, int]]]:
    """The contender's label sweep over ``thresholds`` (radii never below the pair floor), and
    the group-size distribution at each threshold."""

    def rank_at(threshold: float) -> np.ndarray:
        return rank_items(contender.ranking, n, pairs=pairs, threshold=threshold)

    below = contender.radius_below
    # The radius rule of sbert dedup (MethodSettings.radius_at): T - gap, floored at the pairs.
    radius = None if below is None else MethodSettings(radius_gap=below, floor=floor).radius_at
    groupings = sweep_groupings(
        contender.method,
        n,
        pairs,
        thresholds,
        rank_at,
        rep_threshold=radius,
        max_group_size=contender.max_group_size,
        **contender.params,
    )
    distributions: list[dict[str, int]] = []

    def recorded():
        for grouping in groupings:
            distributions.append(size_distribution(grouping.sizes))
            yield grouping

    return label_sweep(recorded(), labelled), distributions


def _child(contender, n, pairs, thresholds, labelled, floor, queue) -> None:
    try:
        start = time.perf_counter()
        points, sizes = sweep_contender(contender, n, pairs, thresholds, labelled, floor)
        queue.put(
            (
                time.perf_counter() - start,
                [{**p.to_json(), "group_sizes": d} for p, d in zip(points, sizes, strict=True)],
            )
        )
    except Exception as err:  # reported by the parent, which must not wait forever
        queue.put((None, f"{type(err).__name__}: {err}"))


def measured(contender, n, pairs, thresholds, labelled, floor) -> tuple[float, float, list[dict]]:
    """Run one contender's sweep in a forked child: ``(seconds, peak RSS MiB, points)``.

    Raises:
        RuntimeError: the child failed (its error) or died.
    """
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(
        target=_child, args=(contender, n, pairs, thresholds, labelled, floor, queue)
    )
    child.start()
    while True:
        try:
            seconds, points = queue.get(timeout=5)
            break
        except Empty:
            if not child.is_alive():
                raise RuntimeError(f"{contender.name}: the child died ({child.exitcode})") from None
    _, _, usage = os.wait4(child.pid, 0)
    if seconds is None:
        raise RuntimeError(f"{contender.name}: {points}")
    return seconds, usage.ru_maxrss / 1024, points


def parse_sweep(text: str) -> list[float]:
    """``start:stop:step`` -> thresholds, rounded to 6 decimals."""
    start, stop, step = (float(part) for part in text.split(":"))
    return sweep_thresholds(start, stop, step)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=None, help="embeddings/pairs cache folder")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--floor", type=float, default=0.70, help="lowest pair score kept")
    parser.add_argument("--sweep", default="0.70:0.95:0.01", help="thresholds start:stop:step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--max-largest", type=int, default=1000, help="largest group allowed")
    parser.add_argument("--only", nargs="*", default=None, help="contender names to run")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    thresholds = parse_sweep(args.sweep)
    if min(thresholds) < args.floor:
        raise SystemExit(f"the sweep starts below the pair floor {args.floor}")

    qids, texts = load_questions()
    vectors = embeddings(args.cache, args.dtype, qids, texts)
    pairs = all_pairs(args.cache, args.dtype, vectors, args.floor)
    raw = read_labelled_pairs(DATA_DIR / "qqp" / "dev_pairs.tsv.gz", LabelColumns())
    labelled = match_labels(raw, qids)
    n = len(qids)
    print(
        f"{n:,} questions, {len(pairs):,} pairs >= {args.floor}, {len(labelled.a):,} labelled "
        f"pairs ({labelled.positives:,} duplicates), parent RSS "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )

    # Reference: the labelled pairs classified by their own score alone (no groups, so no
    # transitivity): what a threshold on the model's similarity gives before any grouping.
    pair_scores = np.einsum("ij,ij->i", vectors[labelled.a], vectors[labelled.b])
    alone = pair_best_f1(pair_scores, labelled.label)
    print(
        f"pair score alone (no grouping): best F1 {alone.f1:.3f} at T={alone.threshold:.3f} "
        f"(P {alone.precision:.3f}, R {alone.recall:.3f})"
    )
    print(
        f"{'method':32} {'T rule':>6} | capped (largest <= {args.max_largest}): {'T':>5} {'F1':>6} "
        f"{'largest':>7} {'removed':>7} | uncapped: {'T':>5} {'F1':>6} {'largest':>7} "
        f"{'removed':>7} | {'sweep s':>7} {'peak MiB':>8}"
    )
    results = []
    for contender in CONTENDERS:
        if args.only and contender.name not in args.only:
            continue
        seconds, peak, points = measured(contender, n, pairs, thresholds, labelled, args.floor)
        objects = [_point(p) for p in points]
        best = best_f1_point(objects)
        bounded = [p for p in objects if p.largest <= args.max_largest]
        best_bounded = best_f1_point(bounded) if bounded else None
        results.append(
            {
                "name": contender.name,
                "method": contender.method,
                "ranking": contender.ranking,
                "params": contender.params,
                "radius_below": contender.radius_below,
                "max_group_size": contender.max_group_size,
                "chain_free": contender.chain_free,
                "holds_threshold": contender.holds_threshold,
                "sweep_s": round(seconds, 2),
                "peak_rss_mib": round(peak, 1),
                "best": _with_share(best.to_json(), n, points),
                "best_within_limit": (
                    _with_share(best_bounded.to_json(), n, points) if best_bounded else None
                ),
                "points": [_with_share(point, n) for point in points],
                "pr_curve": pr_curve(objects),
            }
        )
        print(
            f"{contender.name:32} {'yes' if contender.holds_threshold else 'no':>6} | "
            f"{' ' * 28}{_cells(best_bounded, n)} | {' ' * 10}{_cells(best, n)} | "
            f"{seconds:7.1f} {peak:8.0f}",
            flush=True,
        )

    write_result(
        "dedup_qqp",
        {
            "data": "QQP dev (../shared/data/qqp), labelled pairs only",
            "model": "all-MiniLM-L6-v2",
            "dtype": args.dtype,
            "floor": args.floor,
            "thresholds": thresholds,
            "max_largest": args.max_largest,
            "n_questions": n,
            "n_pairs": len(pairs),
            "labels": labelled.to_json(),
            "pair_score_alone": {
                "f1": alone.f1,
                "precision": alone.precision,
                "recall": alone.recall,
                "threshold": alone.threshold,
            },
            "methods": results,
        },
    )
    capped = [r for r in results if r["best_within_limit"]]
    for what, chosen in (
        ("holding the T rule (the default's choice)", [r for r in capped if r["holds_threshold"]]),
        ("of any method", capped),
    ):
        if not chosen:
            print(f"best capped {what}: none has a largest group <= {args.max_largest}")
            continue
        top = max(chosen, key=lambda r: r["best_within_limit"]["f1"])
        point, free = top["best_within_limit"], top["best"]
        print(
            f"best capped {what}: {top['name']} F1 {point['f1']:.3f} at T={point['threshold']} "
            f"(largest group {point['largest']}, sizes {point['group_sizes']}, "
            f"{point['removed_share']:.1%} removed); "
            f"uncapped {free['f1']:.3f} at T={free['threshold']} (largest {free['largest']})"
        )


def _with_share(point: dict, n: int, points: list[dict] | None = None) -> dict:
    """A sweep point with the share of the questions it removes (and, from ``points``, its
    group-size distribution)."""
    out = {**point, "removed_share": round(point["removed"] / n, 6)}
    if points is not None:
        same = next(p for p in points if p["threshold"] == point["threshold"])
        out["group_sizes"] = same["group_sizes"]
    return out


def _cells(point: LabelPoint | None, n: int) -> str:
    """``T F1 largest removed%`` of a point, dashes for none."""
    if point is None:
        return f"{'-':>5} {'-':>6} {'-':>7} {'-':>7}"
    share = f"{point.removed / n:.1%}"
    return f"{point.threshold:5.2f} {point.f1:6.3f} {point.largest:7d} {share:>7}"


def _point(data: dict) -> LabelPoint:
    """A sweep point back from the child's JSON."""
    counts = PairCounts(data["tp"], data["fp"], data["fn"], 0)
    return LabelPoint(
        data["method"], data["threshold"], counts, data["groups"], data["largest"], data["removed"]
    )


if __name__ == "__main__":
    main()
