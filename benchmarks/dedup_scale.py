"""Dedup's components and threshold sweep at scale: the pure-Python union-find against scipy's
csgraph and the numba-compiled sweep, in one run, on the same planted pairs (issue 26, item 6).

The data: ``--rows`` items, a planted group structure (groups of 2 to 64 rows covering about
60% of the items, the rest singletons; rows shuffled), and ``--pairs`` pairs drawn inside the
groups (a group drawn in proportion to its size squared, two distinct members), kept unique
with ``a < b``, scores uniform in [0.8, 1) in float32. Generated with numpy in seconds.

Timed, in this process, each path ``--repeats`` times (alternating, medians reported):

- before: ``tests/dedup_reference.py``, the pure-Python union-find production used until this
  change: the components of the pairs at ``--threshold`` (``connected_components``) and the
  threshold sweep over 0.80, 0.81, ..., 1.00 (``threshold_sweep``);
- after: ``sbert_pipeline.dedup.groups.connected_components`` (scipy's
  ``connected_components``) and ``sbert_pipeline.dedup.groups.threshold_sweep`` (numba), the same
  two calls. The numba function is compiled (or loaded from its cache) before the timing; that
  first call is reported on its own.

The two paths must agree: the same partition at the threshold (every row labelled by its
component's smallest row) and the same sweep points; and every component must lie inside one
planted group. What ``deduplicate`` does besides the components (numbering the groups, the
representatives) is the same numpy code in both, so it is not timed.

    python -m benchmarks.dedup_scale [--rows 4000000] [--pairs 10000000] [--repeats 1]

JSON in ``benchmarks/results/dedup_scale.json``; the last line is ``before/after time ratio: X``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.pairs import pair_components as connected_components
from sbert_pipeline.grouping.sweep import threshold_sweep

from benchmarks.common import ROOT, write_result

GOAL = 3.0  # issue 26, item 6: 3x faster at 10M pairs
THRESHOLDS = [round(0.8 + 0.01 * i, 6) for i in range(21)]


def planted_pairs(rows: int, pairs: int, seed: int) -> tuple[np.ndarray, IndexedPairs]:
    """``(planted group per row (-1: none), unique pairs inside the planted groups)``."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 65, size=rows // 20)
    sizes = sizes[np.cumsum(sizes) <= int(rows * 0.6)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    weights = sizes.astype(np.float64) ** 2
    drawn = rng.choice(len(sizes), size=int(pairs * 1.2), p=weights / weights.sum())
    first = rng.integers(0, sizes[drawn])
    second = (first + rng.integers(1, sizes[drawn])) % sizes[drawn]  # another member
    shuffle = rng.permutation(rows)  # slot -> row
    a, b = shuffle[starts[drawn] + first], shuffle[starts[drawn] + second]
    a, b = np.minimum(a, b), np.maximum(a, b)
    _, unique = np.unique(a * rows + b, return_index=True)
    unique = rng.permutation(unique)[:pairs]
    group = np.full(rows, -1, np.int64)
    group[shuffle[: int(sizes.sum())]] = np.repeat(np.arange(len(sizes)), sizes)
    scores = rng.uniform(0.8, 1.0, len(unique)).astype(np.float32)
    return group, IndexedPairs(a[unique], b[unique], scores)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--pairs", type=int, default=10_000_000)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import dedup_reference as reference

    start = time.perf_counter()
    planted, pairs = planted_pairs(args.rows, args.pairs, args.seed)
    made = time.perf_counter() - start
    print(f"{len(pairs):,} pairs over {args.rows:,} rows made in {made:.1f} s", flush=True)
    used = pairs.above(args.threshold)

    start = time.perf_counter()
    tiny = IndexedPairs(np.array([0]), np.array([1]), np.array([0.9], np.float32))
    threshold_sweep(3, tiny, [0.9])
    first_call = time.perf_counter() - start

    def before() -> tuple[np.ndarray, list]:
        labels = reference.smallest_member(reference.connected_components(args.rows, used))
        return labels, reference.threshold_sweep(args.rows, pairs, THRESHOLDS)

    def after() -> tuple[np.ndarray, list]:
        return connected_components(args.rows, used), threshold_sweep(args.rows, pairs, THRESHOLDS)

    times: dict[str, list[float]] = {"before": [], "after": []}
    answers = {}
    for _ in range(args.repeats):
        for name, run in (("before", before), ("after", after)):
            start = time.perf_counter()
            answers[name] = run()
            times[name].append(time.perf_counter() - start)
            print(f"{name}: {times[name][-1]:.2f} s", flush=True)

    (old_labels, old_points), (new_labels, new_points) = answers["before"], answers["after"]
    assert np.array_equal(old_labels, new_labels), "the components differ"
    assert old_points == new_points, "the sweep points differ"
    assert np.all(planted[new_labels] == planted), "a component crosses two planted groups"
    assert np.all((planted >= 0) | (new_labels == np.arange(args.rows))), "a planted singleton"
    at = next(p for p in new_points if p.threshold == round(args.threshold, 6))

    old, new = statistics.median(times["before"]), statistics.median(times["after"])
    ratio = old / new
    path = write_result(
        "dedup_scale",
        {
            "rows": args.rows,
            "pairs": len(pairs),
            "pairs_at_threshold": len(used),
            "threshold": args.threshold,
            "thresholds": len(THRESHOLDS),
            "groups_at_threshold": at.groups,
            "removed_at_threshold": at.removed,
            "repeats": args.repeats,
            "seconds": {
                "before": times["before"],
                "after": times["after"],
                "numba_first_call": first_call,
            },
            "median_seconds": {"before": old, "after": new},
            "ratio": ratio,
            "goal": GOAL,
            "identical": True,
        },
    )
    print(f"groups at {args.threshold}: {at.groups:,}, removed {at.removed:,}; JSON: {path}")
    print(f"numba first call (compile or cache load): {first_call:.2f} s")
    print(f"before/after time ratio: {ratio:.1f}")


if __name__ == "__main__":
    main()
