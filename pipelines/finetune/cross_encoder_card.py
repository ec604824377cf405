"""The model card (``README.md``) of a cross-encoder trained by ``sbert finetune`` (``kind:
cross_encoder``), written from its manifest: how to score pairs with it, what it was trained on
and how, and AP / best F1 on each test set before (the new head) and after training."""

from __future__ import annotations

from sbert_pipeline.finetune.model_card import card_heading, data_table, dev_lines, software_lines

# The metrics of a test set the card shows, in order, with their labels.
CARD_METRICS = (
    ("ap", "average precision"),
    ("f1", "best F1"),
    ("precision", "precision at best F1"),
    ("recall", "recall at best F1"),
    ("threshold", "threshold at best F1"),
)


def cross_encoder_card(manifest: dict) -> str:
    """A README.md for the cross-encoder folder, from its manifest."""
    base = manifest["base_model"]
    training = manifest["config"]["training"]
    run = manifest["training"]
    model_id = manifest["model_id"]
    lines = [
        *card_heading(manifest, "text-ranking", "cross-encoder"),
        f"A cross-encoder trained from `{base['model_id']}` with binary cross-entropy by "
        f"sbert-pipeline {manifest['software']['sbert_pipeline']}. It reads both texts of a pair "
        f"together (truncated at {manifest['max_length']} tokens) and gives one score in "
        "[0, 1] (Sigmoid of its logit): the probability that the pair is a positive (a "
        "duplicate).",
        "",
        "## Use",
        "",
        "```python",
        "from sentence_transformers import CrossEncoder",
        "",
        f'model = CrossEncoder("{model_id}")',
        'scores = model.predict([("How old are you?", "What is your age?")])',
        "```",
        "",
        "```python",
        "from sbert_core import CrossEncoder",
        "",
        f'model = CrossEncoder.load("{model_id}")',
        'scores = model.predict([("How old are you?", "What is your age?")])',
        "```",
        "",
        "## Training",
        "",
        *data_table(manifest["training_data"]),
        "",
        f"Objective: binary cross-entropy on the logit. Batch {training['batch_size']}, AdamW lr "
        f"{training['learning_rate']:g} (weight decay {training['weight_decay']:g}), linear "
        f"warm-up over {training['warmup_ratio']:.0%} of {run['total_steps']} steps then linear "
        f"decay, seed {training['seed']}, precision {training['precision']}; {run['steps']} "
        f"steps in {run['seconds']:.0f} s.",
        "",
    ]
    lines += dev_lines(manifest, digits=4)
    tests = manifest["metrics"]["test"]
    if tests["after"]:
        lines += [
            "## Evaluation",
            "",
            "Pairs ranked by score; a pair with label 1 (target >= 0.5) is a positive. Average "
            "precision as scikit-learn computes it; best F1 over all thresholds, the threshold "
            "half-way between the last score called positive and the next.",
            "",
            "| test set | pairs | positives | metric | new head | trained |",
            "|---|---|---|---|---|---|",
        ]
        for name, after in tests["after"].items():
            before = tests["before"].get(name, {})
            for key, label in CARD_METRICS:
                shown = "–" if before.get(key) is None else f"{before[key]:.4f}"
                lines.append(
                    f"| {name} | {after['n_pairs']} | {after['n_positive']} | {label} | {shown} "
                    f"| {after[key]:.4f} |"
                )
        lines.append("")
    lines += software_lines(manifest)
    return "\n".join(lines)
