"""Fine-tuning: sbert_core's trainer vs sentence-transformers' ``SentenceTransformerTrainer``.

Both train all-MiniLM-L6-v2 on STSb train with the paper's regression objective (cosine
similarity vs score / 5, MSE), batch 16, AdamW lr 2e-5 with weight decay 0.01 (none on biases
and LayerNorm), linear warm-up over 10% of the steps then linear decay, gradient clipping at 1,
seed 42, float32, the same number of threads, for one epoch. The timed part is the training call
itself (data and model loading excluded on both sides); afterwards both models are scored on
STSb test (cosine Spearman x 100) by the same evaluator.

    python -m benchmarks.finetune [--limit N] [--epochs 1] [--threads N] [--order theirs-first]

sentence-transformers' trainer needs ``datasets`` and ``accelerate``, which this project does not
depend on; without touching the project's environment:
``pip install --target /tmp/st-trainer-deps --no-deps accelerate datasets dill multiprocess
pandas xxhash`` and run with ``PYTHONPATH=/tmp/st-trainer-deps``.

The line before last gives both Spearman figures and their difference (ours - theirs); the last
line is ``ours/sentence-transformers speed ratio: X`` (> 1: ours is faster).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time

import torch

from benchmarks.common import DATA_DIR, write_result
from benchmarks.parser import benchmark_parser

SEED = 42
BATCH_SIZE = 16
LEARNING_RATE = 2e-5
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01


def train_ours(examples, epochs: int, threads: int, device: str):
    """Fine-tune with sbert_core; returns (encoder, seconds of the training call, steps)."""
    from sbert_core.training.config import TrainingConfig
    from sbert_core.training.loop import load_base_encoder, train
    from sbert_core.training.losses import CosineSimilarityLoss

    config = TrainingConfig(
        batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY,
        warmup_ratio=WARMUP_RATIO,
        epochs=epochs,
        seed=SEED,
        device=device,
        num_threads=threads,
        checkpoint_every=0,
    )
    encoder = load_base_encoder("all-MiniLM-L6-v2", config)
    start = time.perf_counter()
    result = train(CosineSimilarityLoss(encoder), examples, config)
    return encoder, time.perf_counter() - start, result.steps


def train_theirs(examples, epochs: int, threads: int, device: str):
    """Fine-tune with ``SentenceTransformerTrainer``; returns (model, seconds, steps)."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    from sbert_core.model.source import packaged_default_model_dir

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(packaged_default_model_dir()), device=device)
    first, second = examples.texts
    dataset = Dataset.from_dict(
        {"sentence1": list(first), "sentence2": list(second), "score": examples.targets.tolist()}
    )
    with tempfile.TemporaryDirectory() as scratch:
        arguments = SentenceTransformerTrainingArguments(
            output_dir=scratch,
            num_train_epochs=epochs,
            per_device_train_batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE,
            weight_decay=WEIGHT_DECAY,
            warmup_steps=WARMUP_RATIO,  # a float below 1 is a ratio of all steps
            lr_scheduler_type="linear",
            max_grad_norm=1.0,
            seed=SEED,
            use_cpu=device == "cpu",
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=arguments,
            train_dataset=dataset,
            loss=CosineSimilarityLoss(model),
        )
        start = time.perf_counter()
        output = trainer.train()
        seconds = time.perf_counter() - start
    model.eval()
    return model, seconds, output.global_step


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N pairs only")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--order",
        default="theirs-first",
        choices=["theirs-first", "ours-first"],
        help="which trainer runs first (to check that the order does not decide the result)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from sbert_core.evaluation.evaluators import STSEvaluator
    from sbert_core.training.data import DataSpec, load_examples

    examples = load_examples(
        DataSpec(path=str(DATA_DIR / "stsb" / "train.tsv.gz"), limit=args.limit)
    )
    evaluator = STSEvaluator.from_file(DATA_DIR / "stsb" / "test.tsv.gz")
    contenders = {
        "sentence_transformers": train_theirs,
        "ours": train_ours,
    }
    order = list(contenders) if args.order == "theirs-first" else list(reversed(contenders))
    runs = {}
    for name in order:
        model, seconds, steps = contenders[name](examples, args.epochs, args.threads, args.device)
        spearman = evaluator(model)["cosine_spearman"]
        runs[name] = {"train_seconds": seconds, "steps": steps, "stsb_test_spearman": spearman}
        runs[name]["examples_per_s"] = len(examples) * args.epochs / seconds
        print(f"{name:<22} {seconds:8.1f} s  {steps} steps  STSb test Spearman {spearman:.2f}")
        del model

    ours, theirs = runs["ours"], runs["sentence_transformers"]
    ratio = theirs["train_seconds"] / ours["train_seconds"]
    difference = ours["stsb_test_spearman"] - theirs["stsb_test_spearman"]
    suffix = f"_limit{args.limit}" if args.limit else ""
    path = write_result(
        f"finetune_{args.device.split(':')[0]}{suffix}",
        {
            "model": "all-MiniLM-L6-v2",
            "train_pairs": len(examples),
            "epochs": args.epochs,
            "batch_size": BATCH_SIZE,
            "learning_rate": LEARNING_RATE,
            "warmup_ratio": WARMUP_RATIO,
            "weight_decay": WEIGHT_DECAY,
            "seed": SEED,
            "threads": args.threads,
            "device": args.device,
            "order": order,
            "runs": runs,
            "spearman_difference_ours_minus_theirs": difference,
            "speed_ratio": ratio,
        },
    )
    print(f"results: {path}")
    print(
        f"STSb test Spearman: ours {ours['stsb_test_spearman']:.2f}, sentence-transformers "
        f"{theirs['stsb_test_spearman']:.2f}, difference {difference:+.2f}"
    )
    print(f"ours/sentence-transformers speed ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
