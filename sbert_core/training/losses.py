"""The training objectives of Sentence-BERT, each a loss module over a :class:`SentenceEncoder`.

Every loss is an ``nn.Module(model, **hyperparameters)``. Its ``forward(features, targets)``
embeds each input column with the encoder (``features`` holds one padded batch per column, as
:meth:`SentenceEncoder.pad` returns it) and hands the embeddings to a pure tensor function in
this module, so the maths can be checked without a transformer:

- :func:`softmax_loss` — classification (NLI): softmax over ``W·[u; v; |u−v|]``, cross-entropy;
  the concatenation is selectable for the paper's ablation (Table 6).
- :func:`cosine_similarity_loss` — regression (STS): MSE between cos(u, v) and a gold score
  scaled to [0, 1].
- :func:`triplet_loss` — ``max(‖a−p‖ − ‖a−n‖ + ε, 0)`` with Euclidean distance, ε = 1.
- :func:`multiple_negatives_ranking_loss` — in-batch negatives: cross-entropy over scaled cosine
  similarities of each anchor to every positive (and hard negative) in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from sbert_core.training.data import ExampleKind

PairPart = Literal["u", "v", "|u-v|", "u*v"]
PAIR_PARTS: tuple[str, ...] = get_args(PairPart)
# The paper's choice for NLI (section 3, Table 6): (u, v, |u−v|) worked best.
PAPER_PAIR_PARTS: tuple[PairPart, ...] = ("u", "v", "|u-v|")

# binary_cross_entropy trains a cross-encoder (finetune kind cross_encoder,
# sbert_core.training.cross_encoder_fit), not the bi-encoder losses here.
LossName = Literal["softmax", "cosine", "triplet", "mnrl", "binary_cross_entropy"]
LOSS_NAMES: tuple[str, ...] = get_args(LossName)
# Which kind of training examples each objective consumes (see sbert_core.training.data).
LOSS_DATA_KINDS: dict[str, tuple[ExampleKind, ...]] = {
    "softmax": ("labelled_pairs",),
    "cosine": ("scored_pairs",),
    "triplet": ("triplets",),
    "mnrl": ("pairs", "triplets"),
    "binary_cross_entropy": ("scored_pairs", "labelled_pairs"),
}

# ---------------------------------------------------------------------------- tensor maths


def pair_features(u: torch.Tensor, v: torch.Tensor, parts: Sequence[str]) -> torch.Tensor:
    """Concatenate the chosen combinations of two sentence embeddings.

    Args:
        u, v: ``(B, d)`` embeddings of the first and second sentences.
        parts: names from ``PAIR_PARTS`` in the order they are concatenated.

    Returns:
        ``(B, len(parts) * d)``.
    """
    pieces = {
        "u": lambda: u,
        "v": lambda: v,
        "|u-v|": lambda: torch.abs(u - v),
        "u*v": lambda: u * v,
    }
    return torch.cat([pieces[part]() for part in parts], dim=1)


def softmax_loss(
    u: torch.Tensor,
    v: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    parts: Sequence[str] = PAPER_PAIR_PARTS,
) -> torch.Tensor:
    """Cross-entropy of ``softmax(W·[parts of u, v] + b)`` against class labels.

    Args:
        u, v: ``(B, d)`` embeddings.
        labels: ``(B,)`` class indices.
        weight: ``(k, len(parts) * d)`` classifier weights; ``bias``: ``(k,)`` or None.
        parts: the concatenation, see :func:`pair_features`.

    Returns:
        The mean loss over the batch (a scalar).
    """
    logits = F.linear(pair_features(u, v, parts), weight, bias)  # (B, k)
    return F.cross_entropy(logits, labels)


def cosine_similarity_loss(u: torch.Tensor, v: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Mean squared error between ``cos(u_i, v_i)`` and ``scores_i`` (gold scores in [0, 1]).

    Args:
        u, v: ``(B, d)`` embeddings; ``scores``: ``(B,)``.
    """
    cosine = F.cosine_similarity(u, v, dim=1)  # (B,)
    return F.mse_loss(cosine, scores.to(cosine.dtype))


def triplet_loss(
    anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, margin: float = 1.0
) -> torch.Tensor:
    """Mean of ``max(‖a−p‖ − ‖a−n‖ + margin, 0)`` with Euclidean distances.

    Args:
        anchors, positives, negatives: ``(B, d)`` embeddings.
        margin: how much further the negative must be than the positive (the paper's ε = 1).
    """
    # vector_norm has a zero (not NaN) gradient at a zero difference, which happens when an
    # anchor and its positive are the same sentence.
    to_positive = torch.linalg.vector_norm(anchors - positives, dim=1)  # (B,)
    to_negative = torch.linalg.vector_norm(anchors - negatives, dim=1)  # (B,)
    return F.relu(to_positive - to_negative + margin).mean()


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` ``(N, d)`` with every row of ``b`` ``(M, d)``."""
    return F.normalize(a, p=2, dim=1) @ F.normalize(b, p=2, dim=1).T  # (N, M)


def multiple_negatives_ranking_loss(
    anchors: torch.Tensor,
    candidates: torch.Tensor,
    positive_index: torch.Tensor,
    scale: float = 20.0,
) -> torch.Tensor:
    """In-batch negatives: for each anchor, cross-entropy over its scaled cosine to all candidates.

    Args:
        anchors: ``(B, d)``.
        candidates: ``(M, d)``: the positives of the whole batch, then any hard negatives.
        positive_index: ``(B,)``: row ``i``'s positive is ``candidates[positive_index[i]]``;
            every other candidate is a negative for it.
        scale: multiplies the cosine similarities (1 / temperature).

    Returns:
        The mean loss over the anchors.
    """
    scores = cosine_matrix(anchors, candidates) * scale  # (B, M)
    return F.cross_entropy(scores, positive_index)


# ---------------------------------------------------------------------------- loss modules


def embed_padded_columns(
    model: nn.Module, features: Sequence[dict[str, torch.Tensor]], **options
) -> list[torch.Tensor]:
    """Embed each column's padded batch; returns one ``(B, d)`` tensor per column.

    Columns padded to the same width run as one forward pass (the trainer pads them together):
    one ``(k·B, T)`` batch keeps the matrix multiplications larger, which measured ~1.3x faster
    than ``k`` separate passes on CPU. ``options`` go to the model's forward (``normalize``).
    """
    widths = {column["input_ids"].shape[1] for column in features}
    if len(features) > 1 and len(widths) == 1:
        merged = {
            key: torch.cat([column[key] for column in features])
            for key in ("input_ids", "attention_mask")
        }
        if "prompt_length" in features[0]:  # one prompt for every column (the trainer's)
            merged["prompt_length"] = features[0]["prompt_length"]
        embeddings = model(**merged, **options)  # (k·B, d)
        return list(embeddings.split([column["input_ids"].shape[0] for column in features]))
    return [model(**column, **options) for column in features]


class SoftmaxLoss(nn.Module):
    """Classification objective (the paper's NLI training): ``softmax(W·[u; v; |u−v|])``.

    Args:
        model: the :class:`SentenceEncoder` being trained.
        num_labels: number of classes (3 for NLI).
        concatenation: which of ``"u"``, ``"v"``, ``"|u-v|"``, ``"u*v"`` feed the classifier.

    Example:
        >>> loss = SoftmaxLoss(encoder, num_labels=3)
        >>> value = loss([encoder.pad(ids_a), encoder.pad(ids_b)], labels)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: nn.Module,
        num_labels: int = 3,
        concatenation: Sequence[str] = PAPER_PAIR_PARTS,
    ) -> None:
        super().__init__()
        parts = tuple(concatenation)
        unknown = [part for part in parts if part not in PAIR_PARTS]
        if not parts or unknown or len(set(parts)) != len(parts):
            raise ValueError(
                f"concatenation must name distinct parts from {', '.join(PAIR_PARTS)}; "
                f"got {list(parts)}"
            )
        if num_labels < 2:
            raise ValueError(f"num_labels must be at least 2, got {num_labels}")
        self.model = model
        self.concatenation = parts
        # Training embeds whole vectors: a load-time truncate_dim applies to encode() only.
        self.classifier = nn.Linear(len(parts) * model.full_dim, num_labels)

    def logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Class scores ``(B, num_labels)`` for embedded pairs (used to evaluate accuracy)."""
        features = pair_features(u, v, self.concatenation).to(self.classifier.weight.dtype)
        return self.classifier(features)

    def forward(
        self, features: Sequence[dict[str, torch.Tensor]], labels: torch.Tensor
    ) -> torch.Tensor:
        """Mean cross-entropy over a batch of (sentence1, sentence2) pairs."""
        u, v = embed_padded_columns(self.model, features)
        return softmax_loss(
            u.to(self.classifier.weight.dtype),
            v.to(self.classifier.weight.dtype),
            labels,
            self.classifier.weight,
            self.classifier.bias,
            self.concatenation,
        )


class CosineSimilarityLoss(nn.Module):
    """Regression objective (the paper's STS training): MSE between cos(u, v) and a [0, 1] score.

    Args:
        model: the :class:`SentenceEncoder` being trained.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, features: Sequence[dict[str, torch.Tensor]], scores: torch.Tensor
    ) -> torch.Tensor:
        """Mean squared error over a batch of scored (sentence1, sentence2) pairs."""
        u, v = embed_padded_columns(self.model, features)
        return cosine_similarity_loss(u, v, scores)


class TripletLoss(nn.Module):
    """Triplet objective: ``max(‖a−p‖ − ‖a−n‖ + ε, 0)``, Euclidean distance.

    The paper's network ends in the pooling layer, so by default the distances are taken between
    pooled vectors *before* a model's Normalize module (the model still embeds normalised
    vectors afterwards). On unit vectors every distance lies in [0, 2] and ε = 1 demands more
    than the geometry allows: on SNLI triplets, training all-MiniLM-L6-v2 (which normalises)
    with ε = 1 on its normalised output lowered triplet accuracy from 94.22 to 92.58.

    Args:
        model: the :class:`SentenceEncoder` being trained.
        margin: ε, the paper's value is 1.
        normalized: take distances between the model's normalised embeddings instead
            (sentence-transformers' ``TripletLoss`` does, with a default margin of 5).
    """

    def __init__(self, model: nn.Module, margin: float = 1.0, normalized: bool = False) -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        self.model = model
        self.margin = margin
        self.normalized = normalized

    def forward(
        self, features: Sequence[dict[str, torch.Tensor]], targets: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Mean triplet loss over a batch of (anchor, positive, negative) triplets."""
        # normalize=None keeps the model's own setting (a model without Normalize stays raw).
        normalize = None if self.normalized else False
        anchors, positives, negatives = embed_padded_columns(
            self.model, features, normalize=normalize
        )
        return triplet_loss(anchors, positives, negatives, self.margin)


class MultipleNegativesRankingLoss(nn.Module):
    """In-batch negatives for (anchor, positive) pairs, optionally with one hard negative each.

    Every other positive (and every hard negative) in the batch is a negative for an anchor.
    Under data-parallel training the candidates of all processes are gathered (with gradients),
    so that N processes see the same negatives as one process with the whole batch.

    Args:
        model: the :class:`SentenceEncoder` being trained.
        scale: multiplies the cosine similarities (20, i.e. temperature 0.05).
        gather_across_processes: gather candidates from every process when training with DDP.
    """

    def __init__(
        self, model: nn.Module, scale: float = 20.0, gather_across_processes: bool = True
    ) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.model = model
        self.scale = scale
        self.gather_across_processes = gather_across_processes

    def forward(
        self, features: Sequence[dict[str, torch.Tensor]], targets: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Mean loss over the anchors of a batch of pairs or triplets."""
        if len(features) not in (2, 3):
            raise ValueError(
                f"expected (anchor, positive[, negative]) columns, got {len(features)}"
            )
        anchors, *others = embed_padded_columns(self.model, features)
        offset = 0
        if self.gather_across_processes and dist.is_available() and dist.is_initialized():
            offset, others = _gather_rows(others)
        candidates = torch.cat(others)  # (M, d): all positives, then all hard negatives
        positive_index = torch.arange(anchors.shape[0], device=anchors.device) + offset  # (B,)
        return multiple_negatives_ranking_loss(anchors, candidates, positive_index, self.scale)


def _gather_rows(tensors: list[torch.Tensor]) -> tuple[int, list[torch.Tensor]]:
    """All-gather ``(n_r, d)`` tensors of every process, keeping gradients for the local rows.

    Processes may hold different row counts (the last batch of an epoch rarely splits evenly),
    so rows are padded to the largest count, gathered, and the padding is cut off again.

    Returns:
        (rows of lower-ranked processes, i.e. where this process's rows start; gathered tensors).
    """
    from torch.distributed.nn.functional import all_gather

    rows, device = tensors[0].shape[0], tensors[0].device
    counts = [
        torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())
    ]
    dist.all_gather(counts, torch.tensor([rows], dtype=torch.int64, device=device))
    counts = [int(count) for count in counts]
    width = max(counts)
    gathered = []
    for tensor in tensors:
        padded = F.pad(tensor, (0, 0, 0, width - rows))  # (width, d)
        parts = all_gather(padded)  # world_size x (width, d), differentiable
        gathered.append(
            torch.cat([part[:count] for part, count in zip(parts, counts, strict=True)])
        )
    return sum(counts[: dist.get_rank()]), gathered


# ---------------------------------------------------------------------------- configuration


@dataclass
class LossConfig:
    """Which objective to train and its hyper-parameters."""

    name: LossName = "cosine"
    # softmax only: what the classifier sees (the paper's ablation, Table 6).
    concatenation: tuple[PairPart, ...] = PAPER_PAIR_PARTS
    # triplet only: the paper's ε.
    triplet_margin: float = 1.0
    # triplet only: distances between normalised embeddings instead of the pooled vectors.
    triplet_normalized: bool = False
    # mnrl only: 20 is sentence-transformers' default (temperature 0.05).
    scale: float = 20.0
    # mnrl only: negatives from every process under DDP, as with one process and the whole batch.
    gather_across_processes: bool = True


def build_loss(config: LossConfig, model: nn.Module, num_labels: int = 0) -> nn.Module:
    """The loss module ``config`` describes, around ``model``.

    Args:
        config: the objective.
        model: the encoder to train.
        num_labels: classes for ``softmax`` (the training data's label count).

    Raises:
        ValueError: unknown objective or invalid hyper-parameters.
    """
    if config.name == "softmax":
        return SoftmaxLoss(model, num_labels=num_labels, concatenation=config.concatenation)
    if config.name == "cosine":
        return CosineSimilarityLoss(model)
    if config.name == "triplet":
        return TripletLoss(
            model, margin=config.triplet_margin, normalized=config.triplet_normalized
        )
    if config.name == "mnrl":
        return MultipleNegativesRankingLoss(
            model, scale=config.scale, gather_across_processes=config.gather_across_processes
        )
    if config.name == "binary_cross_entropy":
        raise ValueError(
            "the binary_cross_entropy objective trains a cross-encoder (finetune kind "
            "cross_encoder), not a loss around a bi-encoder"
        )
    raise ValueError(f"unknown loss {config.name!r}; valid losses are: {', '.join(LOSS_NAMES)}")


def check_data_kind(loss_name: str, kind: str, source: str = "training data") -> None:
    """Raise ``ValueError`` if the objective ``loss_name`` cannot train on examples of ``kind``."""
    if loss_name not in LOSS_DATA_KINDS:
        raise ValueError(f"unknown loss {loss_name!r}; valid losses are: {', '.join(LOSS_NAMES)}")
    accepted = LOSS_DATA_KINDS[loss_name]
    if kind not in accepted:
        raise ValueError(
            f"{source}: the {loss_name} loss trains on {' or '.join(accepted)}, not {kind}"
        )
