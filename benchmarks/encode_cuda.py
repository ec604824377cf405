"""Encoding throughput on a CUDA GPU: sbert_core vs sentence-transformers, same model, texts
and device, interleaved in one run.

Contenders: sentence-transformers in float32 and in float16 (the model loaded in half
precision, as ``model_kwargs={"torch_dtype": torch.float16}`` does), and ours in float32,
bfloat16 and float16. Both sides get the same ``--batch-size`` (texts per forward pass);
sentence-transformers sorts each call's texts by length, ours forms batches of similar token
length (smart batching) and caps each by the batch size. Every contender encodes the whole
corpus once per repeat; medians are reported, and each side's vectors are compared with
sentence-transformers' float32 vectors (largest absolute difference, smallest cosine).

The corpus is the first ``--limit`` distinct questions of QQP dev (``qqp/dev_questions.tsv.gz``
under the data folder; ``SBERT_DATA_DIR`` moves it), real short texts of mixed length.

    python -m benchmarks.encode_cuda [--model DIR] [--limit 100000] [--batch-size 256]

The last line gives ours over sentence-transformers in sentences/s, float32 against float32
and float16 against float16 (and our bfloat16 against their float16).
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.common import DATA_DIR, interleaved_medians, read_tsv, write_result
from benchmarks.parser import benchmark_parser


def qqp_questions(limit: int) -> list[str]:
    """The first ``limit`` distinct non-empty questions of QQP dev, in file order."""
    seen: dict[str, None] = {}
    for row in read_tsv(DATA_DIR / "qqp" / "dev_questions.tsv.gz"):
        text = (row.get("question") or "").strip()
        if text:
            seen.setdefault(text)
        if len(seen) >= limit:
            break
    return list(seen)


def _compare(reference: np.ndarray, vectors: np.ndarray) -> dict[str, float]:
    """Largest absolute difference and smallest cosine against the reference vectors."""
    vectors = vectors.astype(np.float32)
    unit_ref = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return {
        "max_abs_diff": float(np.abs(reference - vectors).max()),
        "min_cosine": float((unit_ref * unit).sum(axis=1).min()),
    }


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default=None, help="a model folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--limit", type=int, default=100_000, help="the first N distinct questions")
    parser.add_argument("--batch-size", type=int, default=256, help="texts per forward pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="encode_cuda")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("encode_cuda needs a CUDA device; benchmarks.encode times the CPU paths")

    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    from sbert_core import SentenceEncoder
    from sbert_core.model.source import packaged_default_model_dir

    model_dir = args.model or str(packaged_default_model_dir())
    texts = qqp_questions(args.limit)
    batch = args.batch_size
    theirs = {
        "st_float32": SentenceTransformer(model_dir, device="cuda"),
        "st_float16": SentenceTransformer(
            model_dir, device="cuda", model_kwargs={"torch_dtype": torch.float16}
        ),
    }
    ours = {
        f"ours_{dtype}": SentenceEncoder.load(model_dir, device="cuda", dtype=dtype)
        for dtype in ("float32", "bfloat16", "float16")
    }

    def synchronized(encode):
        # Both sides return numpy arrays (copied off the GPU); the synchronize makes sure no
        # queued kernel of one contender is timed as the next one's.
        def run():
            vectors = encode()
            torch.cuda.synchronize()
            return vectors

        return run

    contenders = {
        name: synchronized(lambda m=model: m.encode(texts, batch_size=batch, convert_to_numpy=True))
        for name, model in theirs.items()
    }
    contenders.update(
        {
            name: synchronized(lambda m=model: m.encode(texts, batch_size=batch))
            for name, model in ours.items()
        }
    )
    vectors = {name: np.asarray(run()) for name, run in contenders.items()}  # warm-up, kernels
    reference = vectors["st_float32"].astype(np.float32)
    results = {
        name: {
            **timing,
            "sentences_per_s": len(texts) / timing["median_s"],
            **_compare(reference, vectors[name]),
        }
        for name, timing in interleaved_medians(contenders, args.repeats).items()
    }
    rate = {name: entry["sentences_per_s"] for name, entry in results.items()}
    ratios = {
        "float32": rate["ours_float32"] / rate["st_float32"],
        "float16": rate["ours_float16"] / rate["st_float16"],
        "bfloat16_vs_st_float16": rate["ours_bfloat16"] / rate["st_float16"],
    }
    for name, entry in results.items():
        print(
            f"{name:12s} {entry['sentences_per_s']:10,.0f} sentences/s  "
            f"max |diff| {entry['max_abs_diff']:.2e}  min cosine {entry['min_cosine']:.6f}"
        )
    write_result(
        args.name,
        {
            "model": model_dir,
            "texts": len(texts),
            "batch_size": batch,
            "repeats": args.repeats,
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "results": results,
            "ratios": ratios,
        },
    )
    print(
        "ours / sentence-transformers, sentences/s: "
        f"float32 {ratios['float32']:.2f}x, float16 {ratios['float16']:.2f}x, "
        f"our bfloat16 / their float16 {ratios['bfloat16_vs_st_float16']:.2f}x"
    )


if __name__ == "__main__":
    main()
