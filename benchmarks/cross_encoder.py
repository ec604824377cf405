"""Cross-encoder scoring throughput: our ``CrossEncoder.predict`` on each compute path vs
sentence-transformers' ``CrossEncoder.predict``, same model, pairs and torch threads, one process.

Contenders, run in turn (interleaved) on the first ``--pairs`` QQP dev pairs
(../shared/data/qqp/dev_pairs.tsv.gz, question1 / question2): sentence-transformers fp32, ours
fp32 (torch), bf16 and int8 (torch), and OpenVINO fp32, bf16 and int8. A path this CPU cannot
run fast is not timed and gets a line saying why (kept in the JSON under ``skipped``): the
refusals of ``CrossEncoder.load`` (int8 without VNNI, OpenVINO bf16 without native bf16, ...),
and torch bf16 without native bf16, which torch then emulates, slower than float32.

Each row gives pairs/s and the ratio to sentence-transformers; ours fp32 also its largest
score difference to sentence-transformers, and every fast path its largest difference and
Spearman correlation to ours fp32 and the average precision of its scores on the QQP labels
(meaningful for a trained model). The one-off setup of a path (OpenVINO conversion, int8
calibration) is reported apart: a worker pays it once.

    python -m benchmarks.cross_encoder [--model DIR] [--pairs 4000] [--repeats 3] [--threads N]
    python -m benchmarks.cross_encoder --device cuda --model DIR --pairs 20000 --batch-size 256

On a CUDA device (``--device cuda``) the contenders are sentence-transformers fp32 and ours in
float32, bfloat16 and float16 on torch, and the results go to ``cross_encoder_cuda.json``.

Without ``--model`` the cross-encoder is the bundled all-MiniLM-L6-v2 under a new random
one-label head (as ``sbert finetune`` starts one), saved to a temporary folder: the speed is
the architecture's, the scores are untrained. Results go to
``benchmarks/results/cross_encoder.json``; the last line printed is the best fast path's ratio
to sentence-transformers (the goal of issue 27 is 1.5x or more).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import DATA_DIR, interleaved_medians, read_tsv, write_result
from benchmarks.parser import benchmark_parser

# (dtype, backend) of each of our contenders, in the order they run.
PATHS = [
    ("float32", "torch"),
    ("bfloat16", "torch"),
    ("int8", "torch"),
    ("float32", "openvino"),
    ("bfloat16", "openvino"),
    ("int8", "openvino"),
]
# On a CUDA device: torch only (OpenVINO and int8 are CPU paths), float16 as well.
CUDA_PATHS = [("float32", "torch"), ("bfloat16", "torch"), ("float16", "torch")]
ST_NAME = "sentence_transformers_fp32"
EXACT_NAME = "ours_float32_torch"


def qqp_pairs(limit: int) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The first ``limit`` QQP dev pairs with both questions present, and their 0/1 labels."""
    pairs, labels = [], []
    for row in read_tsv(DATA_DIR / "qqp" / "dev_pairs.tsv.gz"):
        if row["question1"] and row["question2"]:
            pairs.append((row["question1"], row["question2"]))
            labels.append(int(row["is_duplicate"]))
        if len(pairs) == limit:
            break
    return pairs, np.asarray(labels, dtype=np.int64)


def default_cross_encoder(directory: Path) -> Path:
    """The bundled all-MiniLM-L6-v2 under a new one-label head (seeded), saved in
    ``directory``: what ``sbert finetune`` trains from."""
    from sbert_core.training.checkpoint import seed_everything
    from sbert_core.training.cross_encoder_start import start_cross_encoder

    seed_everything(0)
    return start_cross_encoder("all-MiniLM-L6-v2", device="cpu").save(directory / "model")


def _skip_reason(dtype: str, backend: str, device: str) -> str | None:
    """Why a path is not timed on this CPU though ``CrossEncoder.load`` would run it."""
    from sbert_core.inference.cpu_features import detect_cpu_features

    native_bf16 = detect_cpu_features().fast_bf16
    if device == "cpu" and (dtype, backend) == ("bfloat16", "torch") and not native_bf16:
        return (
            "this CPU has no native bf16 (AVX512-BF16 or AMX): torch emulates bf16 products, "
            "slower than float32"
        )
    return None


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default=None, help="a cross-encoder folder (default: above)")
    parser.add_argument("--pairs", type=int, default=4000, help="the first N QQP dev pairs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=32, help="both predicts' batch size")
    parser.add_argument(
        "--device", default="cpu", help="cpu, or cuda: float32, bfloat16 and float16 on torch"
    )
    parser.add_argument(
        "--name", default=None, help="results file name (default cross_encoder[_cuda])"
    )
    args = parser.parse_args()

    from scipy.stats import spearmanr
    from sentence_transformers import CrossEncoder as STCrossEncoder

    from sbert_core import CrossEncoder
    from sbert_core.evaluation.pair_metrics import average_precision
    from sbert_core.inference.cpu_features import detect_cpu_features

    torch.set_num_threads(args.threads)
    pairs, labels = qqp_pairs(args.pairs)
    on_cuda = args.device.startswith("cuda")
    with tempfile.TemporaryDirectory(prefix="cross-encoder-bench-") as work:
        model_dir = Path(args.model) if args.model else default_cross_encoder(Path(work))
        theirs = STCrossEncoder(str(model_dir), device=args.device)
        ours: dict[str, CrossEncoder] = {}
        setup_s: dict[str, float] = {}
        skipped: dict[str, str] = {}
        for dtype, backend in CUDA_PATHS if on_cuda else PATHS:
            name = f"ours_{dtype}_{backend}"
            reason = _skip_reason(dtype, backend, args.device)
            start = time.perf_counter()
            try:
                if reason is None:
                    ours[name] = CrossEncoder.load(
                        model_dir, device=args.device, dtype=dtype, backend=backend
                    )
            except ValueError as err:  # a path this machine cannot run: load says why
                reason = str(err)
            if reason is not None:
                skipped[name] = reason
                print(f"{name:<28} skipped: {reason}")
                continue
            setup_s[name] = time.perf_counter() - start

    def predict_theirs() -> np.ndarray:
        scores = theirs.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)
        return np.asarray(scores, dtype=np.float32)

    predictors = {ST_NAME: predict_theirs}
    for name, model in ours.items():
        predictors[name] = (
            lambda m: lambda: m.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)
        )(model)
    scores = {name: predict() for name, predict in predictors.items()}  # also the warm-up
    load_before = os.getloadavg()
    timings = interleaved_medians(predictors, args.repeats)
    load_after = os.getloadavg()

    exact = scores[EXACT_NAME]
    speed = {name: len(pairs) / entry["median_s"] for name, entry in timings.items()}
    rows = {}
    for name, entry in timings.items():
        row = {**entry, "pairs_per_s": speed[name], "vs_st": speed[name] / speed[ST_NAME]}
        row["average_precision"] = average_precision(scores[name], labels)
        if name == EXACT_NAME:
            row["max_abs_diff_to_st"] = float(np.abs(exact - scores[ST_NAME]).max())
        elif name != ST_NAME:
            row["max_abs_diff_to_ours_fp32"] = float(np.abs(scores[name] - exact).max())
            row["spearman_to_ours_fp32"] = float(spearmanr(scores[name], exact).statistic)
        if name in ours:
            row["compute"] = ours[name].describe()["compute"]
        rows[name] = row
    fast = [name for name in ours if name != EXACT_NAME]
    best = max(fast, key=speed.get) if fast else EXACT_NAME
    tokens = ours[EXACT_NAME].tokenize(pairs)[1]
    path = write_result(
        args.name or ("cross_encoder_cuda" if on_cuda else "cross_encoder"),
        {
            "model": str(args.model) if args.model else "all-MiniLM-L6-v2 + new random head",
            "pairs": len(pairs),
            "mean_tokens_per_pair": float(tokens.mean()),
            "threads": args.threads,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "device": torch.cuda.get_device_name(0) if on_cuda else "cpu",
            "torch": torch.__version__,
            "cpu_features": detect_cpu_features().as_dict(),
            "load_average_before_after": [load_before, load_after],
            "setup_s": setup_s,
            "timings": rows,
            "skipped": skipped,
            "best_fast_path": best,
            "best_fast_path_vs_st": speed[best] / speed[ST_NAME],
        },
    )
    for name, row in rows.items():
        extra = ""
        if "max_abs_diff_to_st" in row:
            extra = f"  max |diff| to ST {row['max_abs_diff_to_st']:.1e}"
        elif "spearman_to_ours_fp32" in row:
            extra = (
                f"  max |diff| to fp32 {row['max_abs_diff_to_ours_fp32']:.1e}"
                f"  Spearman {row['spearman_to_ours_fp32']:.4f}"
            )
        print(
            f"{name:<28} {row['median_s']:7.2f} s {row['pairs_per_s']:8.0f} pairs/s "
            f"{row['vs_st']:5.2f}x ST  AP {row['average_precision']:.3f}{extra}"
        )
    print(f"{len(pairs)} pairs, {tokens.mean():.1f} tokens a pair, {args.threads} threads")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; results: {path}")
    print("setup (once per worker): " + ", ".join(f"{n} {s:.1f} s" for n, s in setup_s.items()))
    print(
        f"best fast path: {best} {speed[best]:.0f} pairs/s = {speed[best] / speed[ST_NAME]:.2f}x "
        f"sentence-transformers' {speed[ST_NAME]:.0f} pairs/s (goal 1.5x)"
    )


if __name__ == "__main__":
    main()
