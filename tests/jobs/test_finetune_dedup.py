"""``sbert finetune`` with labelled duplicates: dedup pair-F1 on the holdout before and after,
in the manifest and the model card; the split and the cached base vectors are checked."""

import json
import random

import numpy as np
import pytest
import torch
import yaml
from sbert_pipeline.finetune.config import FinetuneConfig
from sbert_pipeline.finetune.holdout_grouping import (
    DedupTestConfig,
    card_lines,
    evaluate_dedup,
    load_holdout,
)
from training_examples import TOPICS, build_trainable_model, sentence, write_tsv

from sbert_core.errors import DataFileError
from sbert_core.training.data import DataSpec
from tests.stage_commands import finetune

HEADER = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
COLUMNS = {
    "id1": "qid1",
    "id2": "qid2",
    "sentence1": "question1",
    "sentence2": "question2",
    "label": "is_duplicate",
}


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


def duplicate_file(path, n_clusters=24, seed=0):
    """Clusters of 3 questions on one topic: duplicate pairs inside a cluster, non-duplicate
    pairs to the next cluster. Each cluster and its neighbour form one component."""
    rng = random.Random(seed)
    rows, questions = [], {}
    for c in range(n_clusters):
        for k in range(3):
            questions[f"c{c}q{k}"] = f"{sentence(rng, c % len(TOPICS))} {c} {k}"
    for c in range(n_clusters):
        ids = [f"c{c}q{k}" for k in range(3)]
        for a, b in ((0, 1), (1, 2)):
            rows.append((ids[a], ids[b], 1))
        if c % 2 == 0:
            rows.append((ids[0], f"c{c + 1}q0", 0))
    lines = [(i, a, b, questions[a], questions[b], label) for i, (a, b, label) in enumerate(rows)]
    write_tsv(path, HEADER, lines)
    return path, questions


class PlantedEncoder:
    """Questions of one cluster get nearly the same vector; clusters are orthogonal."""

    device = torch.device("cpu")

    def encode(self, texts):
        vectors = np.zeros((len(texts), 64), np.float32)
        for row, text in enumerate(texts):
            cluster, k = (int(part) for part in text.split()[-2:])
            vectors[row, cluster] = 1.0
            vectors[row, 63] = 0.05 * k
        return vectors


def dedup_config(path, **fields):
    spec = DataSpec(
        path=str(path), kind="duplicate_pairs", columns=COLUMNS, part="holdout", **fields
    )
    return DedupTestConfig(pairs=spec)


def test_planted_duplicates_score_f1_one_with_both_methods(tmp_path):
    path, _ = duplicate_file(tmp_path / "pairs.tsv")
    config = dedup_config(path, holdout_fraction=1.0)
    holdout = load_holdout(config, None)
    assert len(holdout.ids) == 72 and holdout.labelled.positives == 48
    result = evaluate_dedup(PlantedEncoder(), holdout, config)
    for method in ("star", "components"):
        best = result["methods"][method]
        assert best["f1"] == 1.0 and best["largest"] == 3, method
    metrics = {"after": result, "before": result, "floor": 0.5, "holdout": str(path)}
    metrics |= {"split": {"holdout_fraction": 1.0, "split_seed": 0}, "settings": "defaults"}
    metrics["f1_change"] = {"star": 0.0, "components": 0.0}
    card = "\n".join(card_lines(metrics))
    assert "| star | base | " in card and "| components | fine-tuned |" in card


def test_cached_base_vectors_must_match_the_base_model(tmp_path):
    path, questions = duplicate_file(tmp_path / "pairs.tsv")
    ids = sorted(questions)
    encoder = PlantedEncoder()
    vectors = encoder.encode([questions[i] for i in ids])
    np.save(tmp_path / "right.npy", vectors)
    np.save(tmp_path / "wrong.npy", np.roll(vectors, 1, axis=1))
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    config = dedup_config(path, holdout_fraction=1.0)
    config.base_vector_ids = str(tmp_path / "ids.txt")
    holdout = load_holdout(config, None)
    config.base_vectors = str(tmp_path / "right.npy")
    cached = evaluate_dedup(encoder, holdout, config, base=True)
    assert cached["vectors"] == config.base_vectors and cached["methods"]["star"]["f1"] == 1.0
    config.base_vectors = str(tmp_path / "wrong.npy")
    with pytest.raises(DataFileError, match="differ from the cached ones"):
        evaluate_dedup(encoder, holdout, config, base=True)


def test_a_holdout_question_missing_from_the_question_file_is_an_error(tmp_path):
    path, questions = duplicate_file(tmp_path / "pairs.tsv")
    rows = [(qid, text) for qid, text in questions.items()][1:]
    config = dedup_config(path, holdout_fraction=1.0)
    config.questions = str(write_tsv(tmp_path / "questions.tsv", ("qid", "question"), rows))
    config.question_columns = {"id": "qid", "text": "question"}
    with pytest.raises(DataFileError, match="of the holdout is missing"):
        load_holdout(config, None)


def finetune_config(tmp_path, path, **dedup_split):
    split = {"holdout_fraction": 0.5, "split_seed": 3}
    config = {
        "model": str(build_trainable_model(tmp_path / "base")),
        "output": str(tmp_path / "tuned"),
        "objective": {"name": "mnrl"},
        "train": {
            "path": str(path),
            "kind": "duplicate_pairs",
            "columns": dict(COLUMNS),
            "part": "train",
            **split,
        },
        "dedup_test": {
            "pairs": {
                "path": str(path),
                "kind": "duplicate_pairs",
                "columns": dict(COLUMNS),
                "part": "holdout",
                **(dedup_split or split),
            },
            "floor": 0.3,
        },
        "training": {
            "device": "cpu",
            "num_threads": 1,
            "batch_size": 8,
            "learning_rate": 1e-3,
            "checkpoint_every": 0,
        },
    }
    config_path = tmp_path / "qqp.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return config_path


def test_finetune_reports_dedup_before_and_after_in_manifest_and_card(tmp_path):
    path, _ = duplicate_file(tmp_path / "pairs.tsv", n_clusters=40)
    summary = finetune(["--config", str(finetune_config(tmp_path, path))])
    assert {"dedup star", "dedup components"} <= set(summary.test_metrics)
    assert "test dedup star pair_f1 " in summary.line()
    manifest = json.loads((tmp_path / "tuned" / "sbert_manifest.json").read_text())
    dedup = manifest["metrics"]["dedup"]
    assert (
        set(dedup["before"]["methods"])
        == set(dedup["after"]["methods"])
        == {
            "star",
            "components",
        }
    )
    after, before = dedup["after"]["methods"]["star"], dedup["before"]["methods"]["star"]
    assert dedup["f1_change"]["star"] == pytest.approx(after["f1"] - before["f1"], abs=1e-6)
    assert manifest["config"]["training"]["batch_sampler"] == "auto"
    card = (tmp_path / "tuned" / "README.md").read_text()
    assert "## Dedup on held-out duplicates" in card and "| star | fine-tuned |" in card


def test_a_dedup_split_other_than_the_training_split_is_refused(tmp_path):
    path, _ = duplicate_file(tmp_path / "pairs.tsv")
    config = finetune_config(tmp_path, path, holdout_fraction=0.5, split_seed=4)
    with pytest.raises(ValueError, match="the holdout would overlap the training part"):
        finetune(["--config", str(config)])
    assert not (tmp_path / "tuned").exists()


def test_example_qqp_config_trains_mnrl_and_tests_on_the_same_split():
    from pathlib import Path

    from sbert_core.config import load_config

    root = Path(__file__).resolve().parents[2]
    config = load_config(FinetuneConfig, root / "examples" / "finetune_qqp.yaml")
    assert config.objective.name == "mnrl" and config.training.batch_sampler == "auto"
    assert config.train.kind == "duplicate_pairs" and config.train.part == "train"
    assert config.dedup_test.pairs.part == "holdout"
    assert set(config.dedup_test.methods) == {"star", "components"}
    config.dedup_test.check(config.train)  # the same split: no overlap
    # Runs for a newcomer: no cache of this machine, labelled hard negatives need no vectors.
    assert config.dedup_test.base_vectors is None and config.train.hard_negatives.vectors is None
    assert config.train.hard_negatives.mode == "labelled"
    assert config.training.learning_rate == 5e-5 and config.training.warmup_ratio == 0.1


def test_finetune_with_labelled_hard_negatives_trains_on_triplets(tmp_path):
    path, _ = duplicate_file(tmp_path / "pairs.tsv", n_clusters=40)
    config_path = finetune_config(tmp_path, path)
    config = yaml.safe_load(config_path.read_text())
    config["train"]["hard_negatives"] = {"mode": "labelled", "cap": 5}  # <= 5 batches of 8
    config["training"]["max_steps"] = 2
    config_path.write_text(yaml.safe_dump(config))
    finetune(["--config", str(config_path)])
    manifest = json.loads((tmp_path / "tuned" / "sbert_manifest.json").read_text())
    assert manifest["training_data"]["train"]["kind"] == "triplets"
    assert manifest["config"]["train"]["hard_negatives"]["mode"] == "labelled"
    assert "after" in manifest["metrics"]["dedup"]
