"""A cross-encoder's ``cosine_band`` from the band model's vectors made beforehand
(``vectors``/``vector_ids``, as ``hard_negatives`` takes them): the same pairs are kept as when
the texts are embedded, nothing is embedded, and bad files or settings are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from sbert_pipeline.finetune import Options, run
from sbert_pipeline.finetune.config import resolve_config
from training_examples import build_trainable_model, write_tsv

from sbert_core import SentenceEncoder
from sbert_core.errors import DataFileError
from sbert_core.training.cosine_band import CosineBand, StoredVectors
from sbert_core.training.cross_encoder_data import keep_in_band, load_cross_encoder_pairs
from sbert_core.training.data import DataSpec, load_duplicate_split
from tests.sbert_core.test_cross_encoder_training import toy_rows

HEADER = ("qid1", "qid2", "question1", "question2", "is_duplicate")
COLUMNS = {
    "id1": "qid1",
    "id2": "qid2",
    "sentence1": "question1",
    "sentence2": "question2",
    "label": "is_duplicate",
}
TRAINING = {"device": "cpu", "num_threads": 1, "batch_size": 16, "epochs": 1, "checkpoint_every": 0}

pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> Path:
    """Labelled duplicates with question ids (one id per distinct text)."""
    rows, ids = [], {}
    for one, two, score in toy_rows(64, 1):
        qid1, qid2 = (ids.setdefault(text, f"q{len(ids)}") for text in (one, two))
        rows.append((qid1, qid2, one, two, int(score > 0)))
    return write_tsv(tmp_path_factory.mktemp("qqp") / "qqp.tsv", HEADER, rows)


def spec(path: Path, **band) -> dict:
    return {
        "path": str(path),
        "kind": "duplicate_pairs",
        "columns": COLUMNS,
        "part": "train",
        "holdout_fraction": 0.25,
        "cosine_band": band,
    }


def write_vectors(folder: Path, encoder, split, order: np.ndarray) -> dict[str, str]:
    """The encoder's vectors of every question, in ``order``, unnormalised (the reader
    normalises); returns the band keys naming the files."""
    vectors = encoder.encode(list(split.texts), normalize_embeddings=False)
    np.save(folder / "base.npy", np.asarray(vectors, np.float32)[order] * 3.0)
    (folder / "base_ids.txt").write_text("\n".join(split.ids[i] for i in order) + "\n")
    return {"vectors": str(folder / "base.npy"), "vector_ids": str(folder / "base_ids.txt")}


def test_stored_vectors_keep_the_pairs_embedding_keeps_and_nothing_is_embedded(
    questions, tiny_st_dir, tmp_path, monkeypatch
):
    encoder = SentenceEncoder.load(tiny_st_dir, device="cpu")
    data = DataSpec(**{k: v for k, v in spec(questions).items() if k != "cosine_band"})
    split = load_duplicate_split(data)
    pairs = load_cross_encoder_pairs(data)
    shuffled = np.random.default_rng(0).permutation(len(split.ids))
    files = write_vectors(tmp_path, encoder, split, shuffled)
    a = encoder.encode(list(pairs.texts[0]), normalize_embeddings=True)
    b = encoder.encode(list(pairs.texts[1]), normalize_embeddings=True)
    cosines = np.sort(np.einsum("ij,ij->i", a, b))
    middle = len(cosines) // 2
    band = CosineBand(model=str(tiny_st_dir), low=float(cosines[middle - 1 : middle + 1].mean()))
    expected = keep_in_band(pairs, band, encoder)
    stored = StoredVectors(CosineBand(**{**band.__dict__, **files}), split.ids, split.texts)
    assert keep_in_band(pairs, band, stored).texts == expected.texts
    # Through finetune: the band's model is never loaded.
    monkeypatch.setattr(SentenceEncoder, "load", lambda *a, **k: pytest.fail("embedded"))
    output = tmp_path / "ce"
    config = {
        "kind": "cross_encoder",
        "model": str(build_trainable_model(tmp_path / "base")),
        "output": str(output),
        "objective": {"name": "binary_cross_entropy"},
        "train": spec(questions, model=str(tiny_st_dir), low=band.low, **files),
        "evaluate_base_model": False,
        "training": TRAINING,
    }
    path = tmp_path / "ce.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run(Options(config=str(path)))
    manifest = json.loads((output / "sbert_manifest.json").read_text())
    assert manifest["training_data"]["train"]["examples"] == len(expected)
    assert manifest["config"]["train"]["cosine_band"]["vectors"] == files["vectors"]


def test_stored_vectors_refuse_a_question_without_a_vector_and_a_short_file(
    questions, tiny_st_dir, tmp_path
):
    encoder = SentenceEncoder.load(tiny_st_dir, device="cpu")
    data = DataSpec(**{k: v for k, v in spec(questions).items() if k != "cosine_band"})
    split = load_duplicate_split(data)
    files = write_vectors(tmp_path, encoder, split, np.arange(1, len(split.ids)))  # q0 left out
    stored = StoredVectors(CosineBand(**files), split.ids, split.texts)
    with pytest.raises(DataFileError, match=r"base_ids.txt: 1 questions of the pairs have no"):
        stored.encode([split.texts[0], split.texts[1]])
    (tmp_path / "base_ids.txt").write_text("q1\n")
    with pytest.raises(DataFileError, match=r"base.npy: \(\d+, \d+\) vectors for 1 ids"):
        StoredVectors(CosineBand(**files), split.ids, split.texts)


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"vectors": "base.npy"}, r"train.cosine_band.vectors and vector_ids go together"),
        (
            {"kind": "scored_pairs", "vectors": "base.npy", "vector_ids": "ids.txt"},
            r"train.cosine_band.vectors: are found by question id, which only kind duplicate_",
        ),
    ],
)
def test_band_vectors_are_refused_alone_and_for_pairs_without_ids(tmp_path, train, message):
    data = write_tsv(tmp_path / "t.tsv", ("sentence1", "sentence2", "score"), [("a", "b", 1)])
    band = {"low": 0.8, **{k: v for k, v in train.items() if k != "kind"}}
    config = {
        "kind": "cross_encoder",
        "output": str(tmp_path / "o"),
        "objective": {"name": "binary_cross_entropy"},
        "train": {"path": str(data), "kind": train.get("kind", "scored_pairs")},
    }
    config["train"]["cosine_band"] = band
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        resolve_config(Options(config=str(path)))
