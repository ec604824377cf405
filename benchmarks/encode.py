"""Encoding throughput: sbert_core vs ``SentenceTransformer.encode``, same model, data and threads.

Runs interleaved (ST, ours fp32, ours bf16, ST, ...) on the ~15k distinct STSb sentences and
reports medians. Also scores STSb test with ours in fp32 and bf16, so the speed of bf16 is shown
next to what it costs in quality.

    python benchmarks/encode.py [--repeats 3] [--threads N] [--device cpu|cuda] [--limit N]

The last line is ``ours/sentence-transformers speed ratio: X`` (fp32 vs fp32).
"""

from __future__ import annotations

import os

import torch

from benchmarks.common import DATA_DIR, interleaved_medians, stsb_sentences, write_result
from benchmarks.parser import benchmark_parser


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--st-batch-size", type=int, default=64)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N sentences")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from sbert_core import SentenceEncoder
    from sbert_core.evaluation import STSEvaluator
    from sbert_core.model_source import packaged_default_model_dir

    torch.set_num_threads(args.threads)
    sentences = stsb_sentences()[: args.limit]
    fast_dtype = "float16" if args.device.startswith("cuda") else "bfloat16"
    theirs = SentenceTransformer(str(packaged_default_model_dir()), device=args.device)
    ours = SentenceEncoder.load("all-MiniLM-L6-v2", device=args.device)
    ours_fast = SentenceEncoder.load("all-MiniLM-L6-v2", device=args.device, dtype=fast_dtype)

    # Warm-up: first calls pay for allocator growth and kernel selection.
    for model in (theirs, ours, ours_fast):
        model.encode(sentences[:256])
    timings = interleaved_medians(
        {
            "sentence_transformers_fp32": lambda: theirs.encode(
                sentences, batch_size=args.st_batch_size
            ),
            "ours_fp32": lambda: ours.encode(sentences),
            f"ours_{fast_dtype}": lambda: ours_fast.encode(sentences),
        },
        args.repeats,
    )
    for entry in timings.values():
        entry["sentences_per_s"] = len(sentences) / entry["median_s"]

    evaluator = STSEvaluator.from_file(DATA_DIR / "stsb" / "test.tsv.gz")
    spearman_fp32 = evaluator(ours)["cosine_spearman"]
    spearman_fast = evaluator(ours_fast)["cosine_spearman"]

    base = timings["sentence_transformers_fp32"]["median_s"]
    ratio = base / timings["ours_fp32"]["median_s"]
    ratio_fast = base / timings[f"ours_{fast_dtype}"]["median_s"]
    path = write_result(
        f"encode_{args.device.split(':')[0]}",
        {
            "sentences": len(sentences),
            "threads": args.threads,
            "device": args.device,
            "st_batch_size": args.st_batch_size,
            "repeats": args.repeats,
            "timings": timings,
            "stsb_test_cosine_spearman": {"float32": spearman_fp32, fast_dtype: spearman_fast},
            "ratio_fp32": ratio,
            f"ratio_{fast_dtype}_vs_st_fp32": ratio_fast,
        },
    )
    for name, entry in timings.items():
        print(f"{name:<30} {entry['median_s']:8.2f} s  {entry['sentences_per_s']:8.0f} sentences/s")
    print(
        f"STSb test cosine Spearman: float32 {spearman_fp32:.3f}, {fast_dtype} {spearman_fast:.3f}"
    )
    print(f"results: {path}")
    print(f"ours {fast_dtype}/sentence-transformers fp32 speed ratio: {ratio_fast:.2f}")
    print(f"ours/sentence-transformers speed ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
