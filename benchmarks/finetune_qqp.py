"""Domain adaptation on Quora Question Pairs: dedup pair-F1 on a held-out part, before and after.

Runs ``sbert finetune --config examples/finetune_qqp.yaml`` (MNRL with batches that never hold
two members of one duplicate group, on the train part of a component-wise split of QQP dev) and
reads the dedup evaluation of the holdout part from the saved model's manifest: per method
(star, components) the best-F1 threshold, P/R/F1 and largest group of the base and the
fine-tuned model, and the F1 change. The load average is sampled before and after, since other
jobs share the machine.

    python -m benchmarks.finetune_qqp [--output runs/minilm-qqp-mnrl] [--vectors-cache DIR]
        [KEY=VALUE ...]

``--vectors-cache DIR``: a folder with the base model's float32 vectors of every QQP dev
question (``dev_emb_float32.npy``, ids in ``dev_qids.txt``), used for the base model's dedup
evaluation (checked on a sample) and, where the hard-negative mode mines, for mining.
``KEY=VALUE`` overrides go to the finetune config (``training.max_steps=80``,
``train.hard_negatives.mode=labelled+mined`` ...). Writes
``benchmarks/results/finetune_qqp.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from benchmarks.common import ROOT, write_result
from benchmarks.parser import benchmark_parser


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--config", default=str(ROOT / "examples" / "finetune_qqp.yaml"))
    parser.add_argument("--output", default="runs/minilm-qqp-mnrl", help="fine-tuned model dir")
    parser.add_argument("--vectors-cache", help="folder with dev_emb_float32.npy, dev_qids.txt")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = list(args.overrides)
    if args.vectors_cache:
        vectors = Path(args.vectors_cache) / "dev_emb_float32.npy"
        ids = Path(args.vectors_cache) / "dev_qids.txt"
        for section in ("dedup_test.base_", "train.hard_negatives."):
            overrides += [f"{section}vectors={vectors}", f"{section}vector_ids={ids}"]
    import logging

    from sbert_pipeline import finetune

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    load_before = os.getloadavg()
    start = time.perf_counter()
    options = finetune.Options(
        config=args.config, output=args.output, overwrite=True, overrides=tuple(overrides)
    )
    summary = finetune.run(options).summary
    seconds = time.perf_counter() - start
    load_after = os.getloadavg()
    manifest = json.loads((Path(args.output) / "sbert_manifest.json").read_text(encoding="utf-8"))
    dedup = manifest["metrics"]["dedup"]
    print(summary.line())
    for method, after in dedup["after"]["methods"].items():
        before = dedup["before"]["methods"][method] if dedup["before"] else None
        shown = f"{before['f1']:.4f} (largest {before['largest']})" if before else "-"
        print(
            f"{method:10} base F1 {shown} -> fine-tuned F1 {after['f1']:.4f} (largest "
            f"{after['largest']}): {dedup['f1_change'].get(method, float('nan')):+.4f} "
            "(goal +0.02)"
        )
    print(
        f"job {seconds:.0f} s, training {manifest['training']['seconds']:.0f} s; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (2 shared cores)"
    )
    write_result(
        "finetune_qqp",
        {
            "data": "QQP dev (../shared/data/qqp), component-wise split, labelled pairs only",
            "config": manifest["config"],
            "overrides": overrides,
            "training": {
                **{
                    key: manifest["training"][key]
                    for key in ("steps", "total_steps", "seconds", "examples_per_second")
                },
                "seconds_per_step": round(
                    manifest["training"]["seconds"] / max(manifest["training"]["steps"], 1), 2
                ),
            },
            "train_kind": manifest["training_data"]["train"]["kind"],
            "train_examples": manifest["training_data"]["train"]["examples"],
            "dedup": dedup,
            "job_seconds": round(seconds, 1),
            "load_average": {"before": load_before, "after": load_after},
        },
    )


if __name__ == "__main__":
    main()
