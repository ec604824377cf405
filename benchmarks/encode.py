"""Encoding throughput: sbert_core (fp32, bf16, int8 on torch; bf16 and int8 on its OpenVINO CPU
backend) vs sentence-transformers (torch fp32, and OpenVINO fp32 and static int8), same model,
data and threads, interleaved in one run.

Runs the contenders in turn (ST, ST+OpenVINO, ST+OpenVINO int8, ours fp32, ours bf16, ours
int8, ours OpenVINO bf16, ours OpenVINO int8, ST, ...) on the first ``--limit`` distinct STSb
sentences and reports medians, then scores
STSb test (cosine Spearman) with every contender, so each speed is shown next to its quality.
The CPU's matrix features and the load average (other processes on the machine) are recorded.

sentence-transformers' OpenVINO backend needs optimum-intel, which pins an older transformers
than this project's; it runs in a child process (benchmarks/encode_openvino.py) with such a
transformers first on its path, given as ``--openvino-site DIR``, e.g.

    pip install --target DIR --no-deps transformers==5.5.4 optimum-intel==2.2.0 \\
        tokenizers==0.22.2 "huggingface-hub>=1.5,<2" httpx httpcore h11
    pip install -e ".[bench]"          # openvino, nncf, datasets for the child
    python -m benchmarks.encode [--repeats 3] [--limit 8000] [--threads N] --openvino-site DIR

sentence-transformers' "fp32" OpenVINO export runs in the plugin's default precision, which is
bf16 on CPUs with native bf16 (AVX512-BF16 or AMX): the precision each of its models ran in is
printed and kept in the JSON (``sentence_transformers_openvino_precision``), so a ratio of our
bf16 to it compares bf16 with bf16 there.

Without ``--openvino-site`` sentence-transformers' OpenVINO contenders are left out (ours need
only the openvino and nncf packages). The last line gives the ratios (sentences/s of each of
ours over sentence-transformers fp32, and our bf16 / int8 over sentence-transformers+OpenVINO
fp32 / int8) and each of ours' STSb test score minus our float32's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.common import DATA_DIR, ROOT, stsb_sentences, write_result
from benchmarks.parser import benchmark_parser


class OpenVINOContenders:
    """sentence-transformers+OpenVINO (fp32 and int8) in a child process, driven line by line."""

    def __init__(self, site: str, model_dir: str, corpus: list[str], batch_size: int) -> None:
        self._work = tempfile.TemporaryDirectory(prefix="encode-bench-")
        corpus_path = Path(self._work.name) / "corpus.json"
        corpus_path.write_text(json.dumps(corpus))
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
        self._child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.encode_openvino",
                model_dir,
                str(corpus_path),
                str(batch_size),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        ready = self._ask(None)
        self.names = ready["ready"]
        # What the plugin runs each of them in: bf16 on CPUs with native bf16, even for the
        # "fp32" export (the plugin's default, which optimum-intel keeps).
        self.precision = ready["precision"]

    def _ask(self, request: dict | None) -> dict:
        if request is not None:
            self._child.stdin.write(json.dumps(request) + "\n")
            self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise SystemExit("the sentence-transformers+OpenVINO process ended; see its stderr")
        return json.loads(line)

    def time(self, name: str) -> float:
        """Seconds the child took to encode the corpus once with ``name``."""
        return self._ask({"time": name})["seconds"]

    def encoder(self, name: str):
        """An object with ``encode(texts)`` for the evaluator, embedding in the child."""
        work = Path(self._work.name)

        ask = self._ask

        class Remote:
            def encode(self, texts, **_):
                (work / "texts.json").write_text(json.dumps(list(texts)))
                ask({"embed": name, "texts": str(work / "texts.json"), "out": str(work / "v.npy")})
                return np.load(work / "v.npy")

        return Remote()

    def close(self) -> None:
        """End the child and remove its files."""
        self._child.stdin.write(json.dumps({"quit": True}) + "\n")
        self._child.stdin.close()
        self._child.wait(timeout=60)
        self._work.cleanup()


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--st-batch-size", type=int, default=64)
    parser.add_argument("--limit", type=int, default=8000, help="the first N distinct sentences")
    parser.add_argument("--openvino-site", default=None, help="path with optimum-intel's deps")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from sbert_core import SentenceEncoder
    from sbert_core.evaluation.evaluators import STSEvaluator
    from sbert_core.inference.compute_paths import resolve_compute_path
    from sbert_core.inference.cpu_features import detect_cpu_features
    from sbert_core.model.source import packaged_default_model_dir

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    sentences = stsb_sentences()[: args.limit]
    model_dir = str(packaged_default_model_dir())
    theirs = SentenceTransformer(model_dir, device="cpu")
    ours = {
        dtype: SentenceEncoder.load("all-MiniLM-L6-v2", device="cpu", dtype=dtype)
        for dtype in ("float32", "bfloat16", "int8")
    }
    # The OpenVINO backend's one-off cost (conversion and compilation) is paid once per worker.
    setup_s = {}
    for dtype in ("bfloat16", "int8"):
        start = time.perf_counter()
        path = resolve_compute_path(dtype, torch.device("cpu"), "openvino")
        ours[f"openvino_{dtype}"] = SentenceEncoder.load(
            "all-MiniLM-L6-v2", device="cpu", dtype=path
        )
        setup_s[f"ours_openvino_{dtype}"] = time.perf_counter() - start
    contenders = {"sentence_transformers_fp32": theirs}
    openvino = None
    if args.openvino_site:
        openvino = OpenVINOContenders(args.openvino_site, model_dir, sentences, args.st_batch_size)
    # Warm-up: first calls pay for allocator growth and kernel selection.
    theirs.encode(sentences[:256], batch_size=args.st_batch_size)
    for model in ours.values():
        model.encode(sentences[:256])

    # Each entry returns its seconds: the OpenVINO child times itself, so its process and pipe
    # are not counted as the contender's cost.
    runs = {
        "sentence_transformers_fp32": lambda: _timed(
            lambda: theirs.encode(sentences, batch_size=args.st_batch_size)
        )
    }
    for name in openvino.names if openvino else ():
        runs[f"sentence_transformers_{name}"] = (lambda n: lambda: openvino.time(n))(name)
    for dtype, model in ours.items():
        runs[f"ours_{dtype}"] = (lambda m: lambda: _timed(lambda: m.encode(sentences)))(model)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            times[name].append(run())
    timings = {
        name: {
            "median_s": statistics.median(t),
            "runs_s": t,
            "sentences_per_s": len(sentences) / statistics.median(t),
        }
        for name, t in times.items()
    }
    load_after = os.getloadavg()

    evaluator = STSEvaluator.from_file(DATA_DIR / "stsb" / "test.tsv.gz")
    for name in openvino.names if openvino else ():
        contenders[f"sentence_transformers_{name}"] = openvino.encoder(name)
    contenders.update({f"ours_{dtype}": model for dtype, model in ours.items()})
    spearman = {name: evaluator(model)["cosine_spearman"] for name, model in contenders.items()}
    if openvino:
        openvino.close()

    speed = {name: entry["sentences_per_s"] for name, entry in timings.items()}
    # Useful work per second (no padding counted): 2 FLOPs per Linear weight per token, plus
    # QK^T and attention x V (4 n^2 h per layer per sentence of n tokens).
    config = ours["float32"].transformer.config
    lengths = np.asarray(ours["float32"].tokenize(sentences).n_tokens, dtype=np.float64)
    linear = sum(
        m.weight.numel() for m in ours["float32"].transformer.modules() if isinstance(m, nn.Linear)
    )
    flops = (
        2 * linear * lengths.sum()
        + 4 * config.num_hidden_layers * config.hidden_size * (lengths**2).sum()
    )
    for entry in timings.values():
        entry["useful_gflop_per_s"] = flops / entry["median_s"] / 1e9
    ratios = {
        f"{name}_vs_st_fp32": speed[name] / speed["sentence_transformers_fp32"]
        for name in speed
        if name.startswith("ours_")
    }
    if "sentence_transformers_openvino" in speed:
        for name in ("ours_bfloat16", "ours_openvino_bfloat16"):
            ratios[f"{name}_vs_st_openvino"] = speed[name] / speed["sentence_transformers_openvino"]
        for name in ("ours_int8", "ours_openvino_int8"):
            ratios[f"{name}_vs_st_openvino_int8"] = (
                speed[name] / speed["sentence_transformers_openvino_int8"]
            )
    stsb_vs_fp32 = {
        name: spearman[name] - spearman["ours_float32"]
        for name in spearman
        if name.startswith("ours_") and name != "ours_float32"
    }
    path = write_result(
        "encode_cpu",
        {
            "sentences": len(sentences),
            "threads": args.threads,
            "device": "cpu",
            "cpu_features": detect_cpu_features().as_dict(),
            "load_average_before_after": [load_before, load_after],
            "st_batch_size": args.st_batch_size,
            "repeats": args.repeats,
            "compute": {dtype: model.describe()["compute"] for dtype, model in ours.items()},
            "sentence_transformers_openvino_precision": openvino.precision if openvino else {},
            "setup_s": setup_s,
            "timings": timings,
            "stsb_test_cosine_spearman": spearman,
            "stsb_minus_ours_float32": stsb_vs_fp32,
            "ratios": ratios,
        },
    )
    for name, entry in timings.items():
        print(
            f"{name:<38} {entry['median_s']:8.2f} s  {entry['sentences_per_s']:8.0f} sentences/s"
            f"  {entry['useful_gflop_per_s']:6.0f} GFLOP/s  STSb {spearman[name]:.2f}"
        )
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; results: {path}")
    if openvino:
        print(
            "sentence-transformers+OpenVINO ran its floating-point layers in: "
            + ", ".join(f"{n} {p}" for n, p in openvino.precision.items())
        )
    print("setup (once per worker): " + ", ".join(f"{n} {s:.1f} s" for n, s in setup_s.items()))
    print("STSb minus ours fp32: " + ", ".join(f"{n} {d:+.2f}" for n, d in stsb_vs_fp32.items()))
    print("ratios: " + ", ".join(f"{name} {value:.2f}" for name, value in ratios.items()))


if __name__ == "__main__":
    main()
