"""Pipeline overhead: the whole local ``sbert embed`` job vs ``sbert_core`` encode, same texts.

Reads N texts of ``../shared/data/corpus`` (default 50,000), writes them as a JSONL corpus,
then alternates: (a) the embed job on the local FnApiRunner (read -> validate -> RunInference ->
Parquet -> manifest) and (b) ``SentenceEncoder.encode`` of the same texts in this process,
same model, dtype and threads. Reports texts/s of each and their ratio.

    python -m benchmarks.embed_pipeline [--n 50000] [--repeats 1] [--compute-dtype float32]

The last line is ``pipeline/encode throughput ratio: X``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from benchmarks.common import DATA_DIR, interleaved_medians, read_tsv, write_result
from benchmarks.parser import benchmark_parser


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--compute-dtype", default="float32")
    args = parser.parse_args()

    from sbert_pipeline import embed

    from sbert_core import SentenceEncoder

    torch.set_num_threads(args.threads)
    texts = [
        row["text"] for row in read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")[: args.n]
    ]
    work = Path(tempfile.mkdtemp(prefix="sbert-bench-"))
    corpus = work / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"r{i}", "text": text}) + "\n")

    encoder = SentenceEncoder.load(
        "all-MiniLM-L6-v2", dtype=args.compute_dtype, num_threads=args.threads
    )
    encoder.encode(texts[:256])  # warm-up, as the pipeline's first batch also pays it
    summaries = []

    def pipeline() -> None:
        options = embed.Options(
            input=str(corpus),
            output=str(work / "out"),
            overwrite=True,
            id_field="id",
            compute_dtype=args.compute_dtype,
            threads=args.threads,
        )
        summaries.append(embed.run(options).summary)

    timings = interleaved_medians(
        {"pipeline": pipeline, "encode": lambda: encoder.encode(texts)}, args.repeats
    )
    assert all(s.embedded == len(texts) and s.rejected == 0 for s in summaries)
    for entry in timings.values():
        entry["texts_per_s"] = len(texts) / entry["median_s"]
    ratio = timings["pipeline"]["texts_per_s"] / timings["encode"]["texts_per_s"]
    path = write_result(
        "embed_pipeline",
        {
            "texts": len(texts),
            "threads": args.threads,
            "compute_dtype": args.compute_dtype,
            "runner": "FnApiRunner",
            "repeats": args.repeats,
            "timings": timings,
            "ratio": ratio,
        },
    )
    for name, entry in timings.items():
        print(f"{name:<10} {entry['median_s']:8.1f} s  {entry['texts_per_s']:8.0f} texts/s")
    print(f"results: {path}")
    print(f"pipeline/encode throughput ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
