"""The cross-encoder against sentence-transformers' CrossEncoder, on tiny random BERT classifiers.

Nothing is downloaded: the models are built from a ``BertConfig`` (tests/testdata.py's tiny BERT
with a sequence-classification head) and saved as CrossEncoder folders by sentence-transformers
itself. The classifier head is initialised wide enough that scores spread (a head at the default
0.02 gives every pair about 0.5, and a wrong truncation would hide under 1e-5).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from testdata import build_tiny_bert
from tiny_models import BUILDERS

from sbert_core import CrossEncoder
from sbert_core.errors import ModelLoadError

TOL = 1e-5
MAX_LENGTH = 24  # below the tiny BERT's 64 positions, so long pairs are cut

PAIRS = [
    ("a man plays the guitar", "someone is playing music"),
    ("the dog runs on the road", "a cat eats food"),
    ("how do i play music?", "why is the sky blue?"),
    ("sky", "sun"),
    ("A woman is eating food.", "the woman eats"),
    ("red car", "blue car on the road in the rain"),
]
LONG_PAIRS = [
    ("the cat and the dog and the man " * 8, "a woman plays music"),
    ("sky", "the man runs on the road in the rain with the dog " * 6),
    ("the red car and the blue car " * 5, "the green tree and the house " * 5),
]


def _classifier_dir(directory: Path, num_labels: int, seed: int = 1) -> Path:
    """A plain Hugging Face BERT sequence classifier with random weights."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    base = build_tiny_bert(directory.parent / f"{directory.name}_base")
    config = AutoConfig.from_pretrained(base, num_labels=num_labels, initializer_range=0.2)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(base).save_pretrained(directory)
    return directory


def architecture_folder(architecture: str, root: Path) -> Path:
    """A one-label CrossEncoder folder (saved by sentence-transformers) of a tiny random model
    of ``architecture`` (a key of tests/sbert_core/tiny_models.py's ``BUILDERS``), in ``root``."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    base = BUILDERS[architecture](root / "base")
    config = AutoConfig.from_pretrained(base, num_labels=1, initializer_range=0.2)
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(root / "hf")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "hf")
    return _st_folder(root / "hf", root / "st")


def _st_folder(hf_dir: Path, out: Path, **kwargs) -> Path:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    STCrossEncoder(str(hf_dir), device="cpu", max_length=MAX_LENGTH, **kwargs).save(str(out))
    return out


def _st_predict(folder: Path, pairs, **kwargs) -> np.ndarray:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    model = STCrossEncoder(str(folder), device="cpu")
    return np.asarray(model.predict(pairs, **kwargs), dtype=np.float32)


@pytest.fixture(scope="module")
def one_label_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ce1")
    return _st_folder(_classifier_dir(root / "hf", 1), root / "st")


@pytest.fixture(scope="module")
def three_label_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ce3")
    return _st_folder(_classifier_dir(root / "hf", 3), root / "st")


@pytest.fixture(scope="module")
def one_label(one_label_dir) -> CrossEncoder:
    return CrossEncoder.load(one_label_dir, device="cpu")


def _copy(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def test_one_label_matches_sentence_transformers_with_sigmoid(one_label_dir, one_label):
    ours = one_label.predict(PAIRS)
    theirs = _st_predict(one_label_dir, PAIRS)
    assert ours.dtype == np.float32 and ours.shape == (len(PAIRS),)
    assert isinstance(one_label.activation, torch.nn.Sigmoid)
    assert np.ptp(theirs) > 1e-2, "scores should spread, or the comparison proves little"
    assert np.abs(ours - theirs).max() <= TOL


def test_three_labels_match_sentence_transformers_with_identity(three_label_dir):
    model = CrossEncoder.load(three_label_dir, device="cpu")
    ours = model.predict(PAIRS)
    theirs = _st_predict(three_label_dir, PAIRS)
    assert isinstance(model.activation, torch.nn.Identity)
    assert ours.shape == (len(PAIRS), 3) == theirs.shape
    assert (ours < 0).any(), "identity keeps negative logits (a sigmoid would not)"
    assert np.abs(ours - theirs).max() <= TOL
    softmax = model.predict(PAIRS, apply_softmax=True)
    np.testing.assert_allclose(
        softmax, _st_predict(three_label_dir, PAIRS, apply_softmax=True), atol=TOL
    )


def test_long_pairs_are_truncated_like_sentence_transformers(one_label_dir, one_label):
    assert one_label.max_length == MAX_LENGTH
    _, lengths = one_label.tokenize(LONG_PAIRS)
    assert (lengths == MAX_LENGTH).all()
    ours = one_label.predict(LONG_PAIRS)
    assert np.abs(ours - _st_predict(one_label_dir, LONG_PAIRS)).max() <= TOL
    # The cut matters: a longer max length sees more tokens and scores otherwise.
    longer = CrossEncoder.load(one_label_dir, device="cpu", max_length=64)
    assert np.abs(longer.predict(LONG_PAIRS) - ours).max() > 1e-4


def test_very_long_texts_score_as_in_sentence_transformers(one_label_dir, one_label):
    # Texts far past max_length * 32 characters are cut to a prefix before tokenising; which
    # text of a pair is the longer must not change (longest_first gives it the odd token).
    pairs = [
        ("the dog runs " * 400, "a man plays the guitar"),
        ("sky", "blue" + "x" * 5000 + " the red car " * 100),
        ("the cat " * 300, "the man and the woman " * 300),  # both long: neither is cut
        ("the cat " * 300, "the man and the woman " * 30),  # the other is long too, in tokens
        ("the cat " * 600, "a " * 380),  # the first prefix must be widened past the other
    ]
    assert np.abs(one_label.predict(pairs) - _st_predict(one_label_dir, pairs)).max() <= TOL


def test_mixed_lengths_in_small_batches_come_back_in_input_order(one_label_dir, one_label):
    pairs = [PAIRS[i % len(PAIRS)] if i % 3 else LONG_PAIRS[i % 3] for i in range(17)]
    pairs = [(a, b + " dog" * (i % 5)) for i, (a, b) in enumerate(pairs)]
    batched = one_label.predict(pairs, batch_size=3)
    alone = np.array([one_label.predict(pair) for pair in pairs], dtype=np.float32)
    assert np.abs(batched - alone).max() <= TOL
    assert np.abs(batched - _st_predict(one_label_dir, pairs, batch_size=4)).max() <= TOL
    assert np.abs(one_label.predict(pairs, token_budget=50) - batched).max() <= TOL


@pytest.mark.parametrize("labels", [1, 3])
def test_saved_folder_loads_in_sentence_transformers_to_the_same_scores(
    labels, one_label_dir, three_label_dir, tmp_path
):
    source = one_label_dir if labels == 1 else three_label_dir
    model = CrossEncoder.load(source, device="cpu")
    saved = model.save(tmp_path / "saved")
    assert (saved / "model.safetensors").is_file() and not (saved / "pytorch_model.bin").exists()
    config = json.loads((saved / "config_sentence_transformers.json").read_text())
    assert config["model_type"] == "CrossEncoder"
    expected = _st_predict(source, PAIRS + LONG_PAIRS)
    assert np.abs(_st_predict(saved, PAIRS + LONG_PAIRS) - expected).max() <= TOL
    reloaded = CrossEncoder.load(saved, device="cpu")
    assert reloaded.max_length == MAX_LENGTH
    assert type(reloaded.activation) is type(model.activation)
    with pytest.raises(FileExistsError):
        model.save(saved)


def test_pickle_weights_are_refused_unless_allowed(one_label_dir, one_label, tmp_path):
    folder = _copy(one_label_dir, tmp_path)
    torch.save(one_label.model.state_dict(), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"pytorch_model\.bin: pickle weights .*allow_pickle"):
        CrossEncoder.load(folder, device="cpu")
    allowed = CrossEncoder.load(folder, device="cpu", allow_pickle=True)
    assert np.abs(allowed.predict(PAIRS) - one_label.predict(PAIRS)).max() <= TOL


def test_a_hub_id_fails_offline_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ModelLoadError, match="not a local folder, and the Hugging Face Hub is unreachable"
    ):
        CrossEncoder.load("cross-encoder/some-reranker-that-is-not-here", device="cpu")


def test_identity_changes_with_the_weights_and_the_settings(one_label_dir, one_label, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(one_label_dir, tmp_path)
    weights = load_file(folder / "model.safetensors")
    weights["classifier.bias"] = weights["classifier.bias"] + 0.5
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    changed = CrossEncoder.load(folder, device="cpu")
    assert changed.weights_sha256 != one_label.weights_sha256
    assert changed.identity != one_label.identity
    assert CrossEncoder.load(one_label_dir, device="cpu").identity == one_label.identity
    shorter = CrossEncoder.load(one_label_dir, device="cpu", max_length=16)
    assert shorter.weights_sha256 == one_label.weights_sha256
    assert shorter.identity != one_label.identity
    assert one_label.describe()["identity"] == one_label.identity


def test_a_missing_classifier_tensor_is_refused(one_label_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(one_label_dir, tmp_path)
    weights = load_file(folder / "model.safetensors")
    del weights["classifier.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"classifier\.weight"):
        CrossEncoder.load(folder, device="cpu")


def test_a_bi_encoder_folder_is_not_taken_for_a_cross_encoder(tiny_st_dir):
    with pytest.raises(ModelLoadError, match="SentenceTransformer folder, not a CrossEncoder"):
        CrossEncoder.load(tiny_st_dir, device="cpu")


def test_a_plain_folder_reads_the_activation_from_config_json(tmp_path):
    # What sentence-transformers 4 and 5 saved: config.json's sentence_transformers section.
    folder = _classifier_dir(tmp_path / "hf", 1)
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity"}
    config_file.write_text(json.dumps(config))
    model = CrossEncoder.load(folder, device="cpu")
    assert isinstance(model.activation, torch.nn.Identity)
    ours = model.predict(PAIRS)
    assert np.abs(ours - _st_predict(folder, PAIRS)).max() <= TOL


def test_an_activation_outside_torch_falls_back_to_the_default(one_label_dir, tmp_path):
    folder = _copy(one_label_dir, tmp_path)
    path = folder / "config_sentence_transformers.json"
    config = json.loads(path.read_text())
    config["activation_fn"] = "os.system"
    path.write_text(json.dumps(config))
    model = CrossEncoder.load(folder, device="cpu")
    assert isinstance(model.activation, torch.nn.Sigmoid)
    assert np.abs(model.predict(PAIRS) - _st_predict(folder, PAIRS)).max() <= TOL


def test_pairs_that_are_not_pairs_of_strings_are_refused(one_label):
    with pytest.raises(TypeError, match=r"pairs\[1\]"):
        one_label.predict([("a", "b"), ("only one",)])
    assert one_label.predict([]).shape == (0,)
    as_array = one_label.predict(np.array(PAIRS))
    assert np.abs(as_array - one_label.predict(PAIRS)).max() == 0


@pytest.mark.parametrize(
    "architecture", ["roberta", "distilbert", "deberta-v2", "mpnet", "electra"]
)
def test_other_architectures_match_sentence_transformers(architecture, tmp_path):
    # RoBERTa, DistilBERT and MPNet take no token type ids; DeBERTa-v2 takes them
    # (type_vocab_size 0) and ELECTRA as BERT does, with its own two-layer classification head.
    folder = architecture_folder(architecture, tmp_path)
    pairs = PAIRS + LONG_PAIRS
    ours = CrossEncoder.load(folder, device="cpu").predict(pairs, batch_size=3)
    assert np.abs(ours - _st_predict(folder, pairs)).max() <= TOL


def test_a_max_seq_length_in_sentence_bert_config_is_used_as_st_uses_it(one_label_dir, tmp_path):
    folder = _copy(one_label_dir, tmp_path)
    path = folder / "sentence_bert_config.json"
    config = json.loads(path.read_text())
    config["max_seq_length"] = 12
    path.write_text(json.dumps(config))
    model = CrossEncoder.load(folder, device="cpu")
    assert model.max_length == 12
    assert np.abs(model.predict(PAIRS) - _st_predict(folder, PAIRS)).max() <= TOL
