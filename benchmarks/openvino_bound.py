"""Where the OpenVINO CPU path's time goes, and how fast its matrix products alone would allow.

On the first ``--limit`` distinct STSb sentences, tokenised and batched as the encoder batches
them for OpenVINO (length-sorted, at most ``OPENVINO_TOKEN_BUDGET`` padded tokens), this runs,
interleaved and ``--repeats`` times:

- sentence-transformers fp32 (``encode``, batch 64): the reference of the speed goals;
- our OpenVINO bf16 and int8 transformer (then once more with the plugin's per-layer counters
  on, ``PERF_COUNT``, untimed, summing each layer type's time over the corpus);
- the same models compiled once per sequence length (batch dynamic, length fixed), the idea
  of static shapes, with the memory each extra compiled copy takes.

The *bound* of a precision is the corpus over the time of its ``FullyConnected`` layers alone
(their share of the layer times in the counted run, times the median timed run):
the speed the encoder would reach if everything else (attention, LayerNorm, GELU, residual
adds, layout changes, tokenising, pooling) took no time. A goal above it cannot be met by
batching or fusing with this plugin on this CPU; one below it says how small the rest must get.
Only the transformer runs for our contenders (no tokenising or pooling), so their speeds are
upper bounds of what ``SentenceEncoder.encode`` gets; ``benchmarks/encode.py`` times that.

    python -m benchmarks.openvino_bound [--limit 8000] [--repeats 3] [--threads 2]

JSON in ``benchmarks/results/openvino_bound.json``; the last line gives each bound and each
measured speed over sentence-transformers fp32.
"""

from __future__ import annotations

import collections
import os
import statistics
import time

import numpy as np
import torch

from benchmarks.common import stsb_sentences, write_result
from benchmarks.parser import benchmark_parser

PRECISIONS = ("bfloat16", "int8")
# The layer types of the matrix products of the Linear layers (int8 ones may run as either).
MATRIX_LAYERS = ("FullyConnected", "FullyConnectedQuantizedLegacy")


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PerLength:
    """``model`` compiled once per sequence length it is asked for (batch stays dynamic)."""

    def __init__(self, model, path_name: str, threads: int) -> None:
        self._model, self._path, self._threads = model, path_name, threads
        self.requests: dict[int, object] = {}

    def prepare(self, batches: list[dict[str, np.ndarray]]) -> dict:
        """Compile every length of ``batches``; seconds and resident MB per compiled copy."""
        from sbert_core.inference.openvino_path import compile_for_cpu

        before, start = _rss_mb(), time.perf_counter()
        for batch in batches:
            length = batch["input_ids"].shape[1]
            if length not in self.requests:
                copy = self._model.clone()
                copy.reshape({"input_ids": [-1, length], "attention_mask": [-1, length]})
                request = compile_for_cpu(copy, self._path, self._threads).create_infer_request()
                request.infer(batch)  # allocate its buffers now, so the RSS counts them
                self.requests[length] = request
        return {
            "lengths": len(self.requests),
            "compile_s": time.perf_counter() - start,
            "mb_per_copy": (_rss_mb() - before) / max(1, len(self.requests)),
        }

    def infer(self, batch: dict[str, np.ndarray]) -> None:
        self.requests[batch["input_ids"].shape[1]].infer(batch)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--limit", type=int, default=8000, help="the first N distinct sentences")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from sbert_core import SentenceEncoder
    from sbert_core.inference.compute_paths import resolve_compute_path
    from sbert_core.inference.cpu_features import detect_cpu_features
    from sbert_core.inference.openvino_path import (
        OPENVINO_TOKEN_BUDGET,
        calibration_batches,
        compile_for_cpu,
        openvino_model,
        openvino_version,
        padded_inputs,
    )
    from sbert_core.model.info import inspect_model
    from sbert_core.model.source import packaged_default_model_dir

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    sentences = stsb_sentences()[: args.limit]
    model_dir = str(packaged_default_model_dir())
    theirs = SentenceTransformer(model_dir, device="cpu")
    ours = SentenceEncoder.load(model_dir, device="cpu")
    for name in PRECISIONS:  # refuses a CPU without the path, as the encoder would
        resolve_compute_path(name, torch.device("cpu"), "openvino")
    info = inspect_model(model_dir)
    # Batched as the encoder batches for OpenVINO: length-sorted, at most its token budget.
    batches = padded_inputs(info, sentences, token_budget=OPENVINO_TOKEN_BUDGET)
    calibration = calibration_batches(info)
    plain, counted, per_length, static_setup = {}, {}, {}, {}
    for name in PRECISIONS:
        model = openvino_model(ours.transformer, name, calibration)
        plain[name] = compile_for_cpu(model, name, args.threads).create_infer_request()
        compiled = compile_for_cpu(model, name, args.threads, {"PERF_COUNT": True})
        counted[name] = compiled.create_infer_request()
        per_length[name] = PerLength(model, name, args.threads)
        static_setup[name] = per_length[name].prepare(batches)
    theirs.encode(sentences[:256], batch_size=64)
    for batch in batches[:20]:
        for name in PRECISIONS:
            plain[name].infer(batch)
            per_length[name].infer(batch)

    times: dict[str, list[float]] = collections.defaultdict(list)
    layer_s = {name: collections.Counter() for name in PRECISIONS}
    for _ in range(args.repeats):
        start = time.perf_counter()
        theirs.encode(sentences, batch_size=64)
        times["sentence_transformers_fp32"].append(time.perf_counter() - start)
        spent = collections.Counter()
        for batch in batches:  # per batch in turn, so a burst of load falls on every contender
            for name in PRECISIONS:
                start = time.perf_counter()
                plain[name].infer(batch)
                spent[f"ours_openvino_{name}"] += time.perf_counter() - start
                start = time.perf_counter()
                per_length[name].infer(batch)
                spent[f"ours_openvino_{name}_per_length"] += time.perf_counter() - start
        for contender, seconds in spent.items():
            times[contender].append(seconds)
    # Layer times from a run of its own: the counters cost time outside the layers, so the
    # timed runs above have them off.
    for batch in batches:
        for name in PRECISIONS:
            counted[name].infer(batch)
            for layer in counted[name].profiling_info:
                layer_s[name][layer.node_type] += layer.real_time.total_seconds()
    load_after = os.getloadavg()

    speed = {name: len(sentences) / statistics.median(t) for name, t in times.items()}
    st = speed["sentence_transformers_fp32"]
    bounds = {}
    for name in PRECISIONS:
        total = sum(layer_s[name].values())
        matrix = sum(layer_s[name][layer] for layer in MATRIX_LAYERS)
        # The share comes from the counted run, the time from the timed ones (load drifts
        # between runs; a share within one run does not). Counting costs most in the short
        # layers, so the share is if anything low, and the bound high.
        seconds = statistics.median(times[f"ours_openvino_{name}"]) * matrix / total
        bounds[name] = {
            "matrix_share": matrix / total,
            "bound_sentences_per_s": len(sentences) / seconds,
            "bound_vs_st_fp32": len(sentences) / seconds / st,
            "layer_share": {
                layer: seconds / total for layer, seconds in layer_s[name].most_common()
            },
        }
    ratios = {
        f"{name}_vs_st_fp32": value / st
        for name, value in speed.items()
        if name != "sentence_transformers_fp32"
    }
    path = write_result(
        "openvino_bound",
        {
            "sentences": len(sentences),
            "threads": args.threads,
            "repeats": args.repeats,
            "openvino": openvino_version(),
            "token_budget": OPENVINO_TOKEN_BUDGET,
            "cpu_features": detect_cpu_features().as_dict(),
            "load_average_before_after": [load_before, load_after],
            "runs_s": dict(times),
            "sentences_per_s": speed,
            "per_length_setup": static_setup,
            "bounds": bounds,
            "ratios": ratios,
        },
    )
    for name, value in speed.items():
        print(f"{name:<40} {value:8.0f} sentences/s  {value / st:5.2f}x ST fp32")
    for name, bound in bounds.items():
        top = ", ".join(f"{k} {v:.0%}" for k, v in list(bound["layer_share"].items())[:5])
        setup = static_setup[name]
        print(
            f"{name}: matrix products {bound['matrix_share']:.0%} of the transformer's time "
            f"({top}); per-length copies: {setup['lengths']} lengths, "
            f"{setup['compile_s']:.1f} s to compile, {setup['mb_per_copy']:.0f} MB each"
        )
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; results: {path}")
    print(
        "vs ST fp32: "
        + ", ".join(
            f"{name} bound {bound['bound_vs_st_fp32']:.2f}" for name, bound in bounds.items()
        )
        + ", "
        + ", ".join(f"{name} {value:.2f}" for name, value in ratios.items())
    )


if __name__ == "__main__":
    main()
