"""Loss maths against hand-computed values and sentence-transformers' losses on the same
embeddings; the loss modules on the tiny encoder."""

import math

import pytest
import torch
from torch import nn

from sbert_core.training.losses import (
    PAIR_PARTS,
    CosineSimilarityLoss,
    LossConfig,
    MultipleNegativesRankingLoss,
    SoftmaxLoss,
    TripletLoss,
    build_loss,
    check_data_kind,
    cosine_similarity_loss,
    embed_padded_columns,
    multiple_negatives_ranking_loss,
    pair_features,
    softmax_loss,
    triplet_loss,
)


class EmbeddingsAsModel(nn.Module):
    """Stands in for a SentenceTransformer: each column's "features" are its embeddings."""

    device = torch.device("cpu")

    def forward(self, features):
        return {"sentence_embedding": features["embedding"]}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A fresh tiny encoder (gradients are computed on it; the shared fixture stays clean)."""
    from training_examples import build_trainable_model

    from sbert_core import SentenceEncoder

    return SentenceEncoder.load(build_trainable_model(tmp_path_factory.mktemp("m")), device="cpu")


@pytest.fixture
def embeddings():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(6, 8, generator=generator, dtype=torch.float64) for _ in range(3)]


def test_pair_features_concatenates_the_chosen_parts_in_order():
    u = torch.tensor([[1.0, -2.0]])
    v = torch.tensor([[3.0, 5.0]])
    assert pair_features(u, v, ("u", "v", "|u-v|")).tolist() == [[1, -2, 3, 5, 2, 7]]
    assert pair_features(u, v, ("|u-v|", "u*v")).tolist() == [[2, 7, 3, -10]]
    for part in PAIR_PARTS:
        assert pair_features(u, v, (part,)).shape == (1, 2)


def test_softmax_loss_by_hand():
    u = torch.tensor([[1.0, 0.0]])
    v = torch.tensor([[0.0, 1.0]])
    # Features (u, v, |u-v|) = (1, 0, 0, 1, 1, 1); two classes.
    weight = torch.tensor([[1.0, 0, 0, 0, 0, 0], [0, 0, 0, 1.0, 1.0, 1.0]])
    bias = torch.tensor([0.5, 0.0])
    logits = torch.tensor([1.5, 3.0])
    expected = -(logits[1] - torch.logsumexp(logits, 0))
    value = softmax_loss(u, v, torch.tensor([1]), weight, bias)
    assert value.item() == pytest.approx(expected.item(), abs=1e-7)


@pytest.mark.parametrize(
    ("parts", "flags"),
    [
        (("u", "v", "|u-v|"), (True, True, False)),
        (("u", "v", "|u-v|", "u*v"), (True, True, True)),
        (("|u-v|",), (False, True, False)),
        (("u", "v"), (True, False, False)),
    ],
)
def test_softmax_loss_matches_sentence_transformers(embeddings, parts, flags):
    from sentence_transformers.sentence_transformer.losses import SoftmaxLoss as TheirSoftmax

    u, v, _ = (e.float() for e in embeddings)
    labels = torch.tensor([0, 1, 2, 1, 0, 2])
    theirs = TheirSoftmax(
        EmbeddingsAsModel(),
        8,
        3,
        concatenation_sent_rep=flags[0],
        concatenation_sent_difference=flags[1],
        concatenation_sent_multiplication=flags[2],
    )
    expected = theirs([{"embedding": u}, {"embedding": v}], labels)
    ours = softmax_loss(u, v, labels, theirs.classifier.weight, theirs.classifier.bias, parts)
    assert ours.item() == pytest.approx(expected.item(), abs=1e-6)


def test_cosine_similarity_loss_by_hand():
    u = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    v = torch.tensor([[0.0, 2.0], [2.0, 2.0]])
    scores = torch.tensor([0.5, 0.8])  # cosines are 0 and 1
    assert cosine_similarity_loss(u, v, scores).item() == pytest.approx((0.25 + 0.04) / 2)


def test_cosine_similarity_loss_matches_sentence_transformers(embeddings):
    from sentence_transformers.sentence_transformer.losses import (
        CosineSimilarityLoss as TheirCosine,
    )

    u, v, _ = (e.float() for e in embeddings)
    scores = torch.linspace(0, 1, 6)
    expected = TheirCosine(EmbeddingsAsModel()).compute_loss_from_embeddings([u, v], scores)
    assert cosine_similarity_loss(u, v, scores).item() == pytest.approx(expected.item(), abs=1e-7)


def test_triplet_loss_by_hand():
    anchors = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    positives = torch.tensor([[3.0, 4.0], [1.0, 0.0]])  # distances 5 and 1
    negatives = torch.tensor([[1.0, 0.0], [0.0, 3.0]])  # distances 1 and 3
    # max(5 - 1 + 1, 0) = 5 and max(1 - 3 + 1, 0) = 0
    assert triplet_loss(anchors, positives, negatives).item() == pytest.approx(2.5)
    assert triplet_loss(anchors, positives, negatives, margin=3.0).item() == pytest.approx(4.0)


def test_triplet_loss_matches_sentence_transformers(embeddings):
    from sentence_transformers.sentence_transformer.losses import TripletLoss as TheirTriplet

    theirs = TheirTriplet(EmbeddingsAsModel(), triplet_margin=1.0)
    expected = theirs.compute_loss_from_embeddings(embeddings, None)
    assert triplet_loss(*embeddings).item() == pytest.approx(expected.item(), abs=1e-12)


def test_triplet_loss_gradient_is_finite_when_anchor_equals_positive():
    anchors = torch.ones(2, 4, requires_grad=True)
    positives = torch.ones(2, 4)
    negatives = torch.zeros(2, 4)
    triplet_loss(anchors, positives, negatives, margin=5.0).backward()
    assert torch.isfinite(anchors.grad).all()


def test_multiple_negatives_ranking_loss_by_hand():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    positives = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    # Cosines: anchor 0 -> (1, 1/sqrt2), anchor 1 -> (0, 1/sqrt2); scale 20.
    s = 20 / math.sqrt(2)
    expected = (
        -(20 - math.log(math.exp(20) + math.exp(s))) - (s - math.log(math.exp(0) + math.exp(s)))
    ) / 2
    value = multiple_negatives_ranking_loss(anchors, positives, torch.arange(2))
    assert value.item() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("with_negatives", [False, True])
def test_multiple_negatives_ranking_loss_matches_sentence_transformers(embeddings, with_negatives):
    from sentence_transformers.sentence_transformer.losses import (
        MultipleNegativesRankingLoss as TheirMNRL,
    )

    columns = embeddings if with_negatives else embeddings[:2]
    expected = TheirMNRL(EmbeddingsAsModel()).compute_loss_from_embeddings(columns, None)
    candidates = torch.cat(columns[1:])
    ours = multiple_negatives_ranking_loss(columns[0], candidates, torch.arange(6))
    assert ours.item() == pytest.approx(expected.item(), abs=1e-9)


def _columns(encoder, texts_by_column):
    return [encoder.pad(encoder.tokenize(texts).input_ids) for texts in texts_by_column]


def test_embed_padded_columns_merged_equals_separate(encoder):
    texts = (["a man plays the guitar", "sky"], ["the dog runs on the road in the rain", "a cat"])
    joint = encoder.pad([ids for t in texts for ids in encoder.tokenize(t).input_ids])
    merged = [{k: v[c * 2 : (c + 1) * 2] for k, v in joint.items()} for c in range(2)]
    with torch.inference_mode():
        together = embed_padded_columns(encoder, merged)
        apart = embed_padded_columns(encoder, _columns(encoder, texts))
    for a, b in zip(together, apart, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize(
    ("module", "n_columns", "targets"),
    [
        (lambda m: SoftmaxLoss(m, num_labels=3), 2, torch.tensor([0, 2])),
        (lambda m: SoftmaxLoss(m, 3, concatenation=("u*v", "|u-v|")), 2, torch.tensor([1, 2])),
        (CosineSimilarityLoss, 2, torch.tensor([0.1, 0.9])),
        (TripletLoss, 3, None),
        (MultipleNegativesRankingLoss, 2, None),
        (MultipleNegativesRankingLoss, 3, None),
    ],
)
def test_loss_modules_embed_and_backpropagate(encoder, module, n_columns, targets):
    texts = [["a man plays the guitar", "the sky is blue"]] * n_columns
    texts = [[f"{t} {c}" for t in column] for c, column in enumerate(texts)]
    loss = module(encoder)
    value = loss(_columns(encoder, texts), targets)
    assert value.ndim == 0 and torch.isfinite(value)
    value.backward()
    gradient = encoder.transformer.embeddings.word_embeddings.weight.grad
    assert gradient is not None and gradient.abs().sum() > 0
    encoder.zero_grad(set_to_none=True)


@pytest.mark.parametrize("normalized", [False, True])
def test_triplet_loss_takes_distances_before_or_after_normalisation(encoder, normalized):
    texts = [["a man plays the guitar", "sky"], ["a man plays music", "blue"], ["cats", "dogs"]]
    columns = _columns(encoder, texts)
    previous = encoder.normalize
    encoder.normalize = True  # a model that ends in a Normalize module
    try:
        with torch.no_grad():
            loss = TripletLoss(encoder, margin=1.0, normalized=normalized)(columns)
            embedded = [encoder(**column) for column in columns]
            raw = [encoder(**column, normalize=False) for column in columns]
    finally:
        encoder.normalize = previous
    assert all(torch.allclose(e.norm(dim=1), torch.ones(2), atol=1e-5) for e in embedded)
    assert not all(torch.allclose(r.norm(dim=1), torch.ones(2), atol=1e-2) for r in raw)
    expected = triplet_loss(*(embedded if normalized else raw), margin=1.0)
    other = triplet_loss(*(raw if normalized else embedded), margin=1.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert loss.item() != pytest.approx(other.item(), rel=1e-3)


def test_invalid_hyperparameters_are_refused(encoder):
    with pytest.raises(ValueError, match="concatenation"):
        SoftmaxLoss(encoder, 3, concatenation=("u", "w"))
    with pytest.raises(ValueError, match="num_labels"):
        SoftmaxLoss(encoder, 1)
    with pytest.raises(ValueError, match="margin"):
        TripletLoss(encoder, margin=-1)
    with pytest.raises(ValueError, match="scale"):
        MultipleNegativesRankingLoss(encoder, scale=0)


def test_build_loss_and_data_kinds(encoder):
    loss = build_loss(LossConfig(name="softmax", concatenation=("u", "v")), encoder, 3)
    assert isinstance(loss, SoftmaxLoss) and loss.classifier.in_features == 2 * encoder.dim
    assert build_loss(LossConfig(name="triplet", triplet_margin=2), encoder).margin == 2
    assert not build_loss(LossConfig(name="triplet"), encoder).normalized
    assert build_loss(LossConfig(name="triplet", triplet_normalized=True), encoder).normalized
    assert isinstance(build_loss(LossConfig(name="mnrl"), encoder), nn.Module)
    check_data_kind("mnrl", "triplets")
    with pytest.raises(ValueError, match="cosine loss trains on scored_pairs, not triplets"):
        check_data_kind("cosine", "triplets", "x.tsv")
