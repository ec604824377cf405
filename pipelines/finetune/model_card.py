"""The model card (``README.md``) of a fine-tuned model, written from its manifest: how to use
the model, what it was trained on and how, and its scores before and after training."""

from __future__ import annotations

from pathlib import Path

from sbert_pipeline.finetune.holdout_grouping import card_lines


def model_card(manifest: dict) -> str:
    """A README.md for the model directory, from its manifest."""
    base = manifest["base_model"]
    objective = manifest["objective"]
    config = manifest["config"]
    training = config["training"]
    data = manifest["training_data"]
    lines = [
        *card_heading(manifest, "sentence-similarity", "sentence-similarity"),
        f"A Sentence-BERT model fine-tuned from `{base['model_id']}` with the "
        f"`{objective['name']}` objective by sbert-pipeline "
        f"{manifest['software']['sbert_pipeline']}. "
        f"It maps text to {base['dim']}-dimensional vectors ({base['pooling']} pooling"
        f"{', L2-normalised' if base['normalized'] else ''}); compare them with cosine similarity.",
        "",
        "## Use",
        "",
        "```bash",
        f"sbert embed --model {manifest['model_id']} --input 'corpus/*.jsonl' --output embeddings/",
        "```",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{manifest["model_id"]}")',
        'vectors = model.encode(["A man is playing a guitar.", "Someone plays music."])',
        "```",
        "",
        "## Training",
        "",
        *data_table(data),
    ]
    run = manifest["training"]
    lines += [
        "",
        f"Objective: `{objective['name']}`"
        + (
            f" over ({', '.join(objective['concatenation'])})"
            if objective["name"] == "softmax"
            else ""
        )
        + f". Batch {training['batch_size']}, AdamW lr {training['learning_rate']:g} "
        f"(weight decay {training['weight_decay']:g}), linear warm-up over "
        f"{training['warmup_ratio']:.0%} of {run['total_steps']} steps then linear decay, "
        f"{training['epochs']} epoch(s), seed {training['seed']}, precision "
        f"{training['precision']}, {run['world_size']} process(es); "
        f"{run['steps']} steps in {run['seconds']:.0f} s.",
        "",
    ]
    lines += dev_lines(manifest, digits=2)
    tests = manifest["metrics"]["test"]
    if tests["after"]:
        lines += ["## Evaluation", "", "| test set | metric | base model | fine-tuned |"]
        lines.append("|---|---|---|---|")
        for name, metrics in tests["after"].items():
            for metric, value in metrics.items():
                if metric.startswith("n_"):
                    continue
                base_value = tests["before"].get(name, {}).get(metric)
                shown = "–" if base_value is None else f"{base_value:.2f}"
                lines.append(f"| {name} | {metric} | {shown} | {value:.2f} |")
        lines.append("")
    if manifest["metrics"].get("dedup"):
        lines += card_lines(manifest["metrics"]["dedup"])
    lines += software_lines(manifest)
    return "\n".join(lines)


def data_table(data: dict) -> list[str]:
    """The card's table of the training, dev and test data (the manifest's training_data)."""
    lines = ["| data | path | kind | examples | sha256 |", "|---|---|---|---|---|"]
    entries = [("train", data["train"]), ("dev", data["dev"])]
    entries += [("test", entry) for entry in data["test"]]
    for role, entry in entries:
        if entry is not None:
            part = f" ({entry['part']})" if entry.get("part", "all") != "all" else ""
            lines.append(
                f"| {role} | `{entry['path']}` | {entry['kind']}{part} | {entry['examples']} "
                f"| `{entry['sha256'][:16]}…` |"
            )
    if data["train"].get("single_target"):
        lines += [
            "",
            f"**Warning:** every training example has {data['train']['single_target']}: the "
            "objective had one class to learn from, so expect the model to score every pair "
            "alike.",
        ]
    return lines


def card_heading(manifest: dict, pipeline_tag: str, tag: str) -> list[str]:
    """The card's front matter (library, pipeline tag, tags, base model) and its title.

    Args:
        manifest: the model's manifest.
        pipeline_tag: the Hugging Face pipeline tag (``sentence-similarity``, ``text-ranking``).
        tag: the model kind's tag, listed between sentence-transformers' and ours.
    """
    return [
        "---",
        "library_name: sentence-transformers",
        f"pipeline_tag: {pipeline_tag}",
        f"tags: [sentence-transformers, {tag}, sbert-pipeline]",
        f"base_model: {manifest['base_model']['model_id']}",
        "---",
        "",
        f"# {Path(manifest['model_id']).name}",
        "",
    ]


def dev_lines(manifest: dict, digits: int) -> list[str]:
    """The card's line on the best dev score, whose weights were kept (none without dev)."""
    dev = manifest["metrics"]["dev"]
    if dev["best_step"] is None:
        return []
    return [
        f"Dev {dev['primary_metric']}: best {dev['best_score']:.{digits}f} at step "
        f"{dev['best_step']} (these weights).",
        "",
    ]


def software_lines(manifest: dict) -> list[str]:
    """The card's closing line: the software versions the model was trained with."""
    software = ", ".join(f"{k} {v}" for k, v in manifest["software"].items())
    return [f"Software: {software}.", ""]
