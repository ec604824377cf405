"""Communities at scale: ``detect_communities`` vs sentence-transformers' ``community_detection``.

Plants N unit vectors (default 50,000, 384-d) in groups of many sizes, some groups close to
each other (so the greedy order matters), plus unrelated background vectors; runs both on the
same vectors with the same threshold and minimum size, and checks that they return the same
communities (same members, same order; members within a community compared as sets, since
equal scores may be listed in either order).

    python -m benchmarks.communities [--n 50000] [--dim 384] [--threshold 0.75] [--min-size 10]

The last line is ``ours/sentence-transformers speed ratio: X``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from benchmarks.common import write_result
from benchmarks.parser import benchmark_parser


def planted_groups(n: int, dim: int, seed: int) -> np.ndarray:
    """~90% of rows in groups of 5-300 members around unit centres, the rest background."""
    rng = np.random.default_rng(seed)
    rows, grouped = [], 0
    previous = None
    while grouped < 0.9 * n:
        size = int(rng.integers(5, 300))
        centre = rng.standard_normal(dim).astype(np.float32)
        if previous is not None and rng.random() < 0.3:  # a neighbouring group
            centre = previous + 0.5 * centre / np.sqrt(dim)
        centre /= np.linalg.norm(centre)
        previous = centre
        members = centre + 0.35 * rng.standard_normal((size, dim)).astype(np.float32) / np.sqrt(dim)
        rows.append(members)
        grouped += size
    rows.append(
        rng.standard_normal((n - grouped, dim)).astype(np.float32)
        if n > grouped
        else np.zeros((0, dim), np.float32)
    )
    vectors = np.concatenate(rows)[:n]
    vectors = vectors[rng.permutation(len(vectors))]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = benchmark_parser(__doc__, 50_000)
    parser.add_argument("--threshold", type=float, default=0.75)
    parser.add_argument("--min-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()

    from sbert_pipeline.vectors.communities import detect_communities
    from sentence_transformers.util import community_detection

    torch.set_num_threads(args.threads)
    vectors = planted_groups(args.n, args.dim, args.seed)
    start = time.perf_counter()
    theirs = community_detection(
        torch.from_numpy(vectors), threshold=args.threshold, min_community_size=args.min_size
    )
    their_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ours = detect_communities(vectors, threshold=args.threshold, min_community_size=args.min_size)
    our_seconds = time.perf_counter() - start

    same_members = [set(a.tolist()) == set(b) for a, b in zip(ours, theirs, strict=False)]
    identical = len(ours) == len(theirs) and all(same_members)
    exact_order = identical and all(
        a.tolist() == list(b) for a, b in zip(ours, theirs, strict=True)
    )
    ratio = their_seconds / our_seconds
    path = write_result(
        "communities",
        {
            "n": args.n,
            "dim": args.dim,
            "threshold": args.threshold,
            "min_size": args.min_size,
            "threads": args.threads,
            "communities": {"ours": len(ours), "sentence_transformers": len(theirs)},
            "clustered_items": {
                "ours": int(sum(map(len, ours))),
                "sentence_transformers": int(sum(map(len, theirs))),
            },
            "identical_communities": identical,
            "identical_member_order": exact_order,
            "seconds": {"ours": our_seconds, "sentence_transformers": their_seconds},
            "ratio": ratio,
        },
    )
    print(
        f"communities: ours {len(ours)}, sentence-transformers {len(theirs)}; "
        f"same members: {identical}; same order: {exact_order}"
    )
    print(f"seconds: ours {our_seconds:.1f}, sentence-transformers {their_seconds:.1f}")
    print(f"results: {path}")
    print(f"ours/sentence-transformers speed ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
