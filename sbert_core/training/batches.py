"""Which examples each optimizer step trains on, and their padded token tensors.

Order and sharding: each epoch shuffles the examples with a generator seeded by (seed, epoch)
and cuts the order into global batches of ``batch_size``; with group ids (the ``no_duplicates``
sampler) the batches come from :func:`sbert_core.training.group_batches.group_exclusive_batches`
instead, so no global batch (hence no micro-batch) holds two members of a group, and every
example is in exactly one batch of each epoch. Each global batch is split into
``world_size x gradient_accumulation_steps`` contiguous parts; process ``r`` takes its parts,
and every part's loss is weighted by its share of the batch. So 1 process, N processes and any
accumulation compute the same update up to float rounding, as long as dropout is off (its masks
depend on the process).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from sbert_core.inference.encoder import SentenceEncoder
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.group_batches import (
    batch_count,
    check_groups,
    group_exclusive_batches,
    largest_group,
    text_groups,
)

logger = logging.getLogger(__name__)


def epoch_order(n_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled example order of one epoch; the same on every process and every rerun."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_examples, generator=generator).numpy()


@dataclass(frozen=True)
class BatchPlan:
    """Global batches of each epoch and each process's micro-batches within them.

    Attributes:
        groups: ``(n_examples,)`` group ids: batches never hold two members of one group
            (:mod:`sbert_core.training.group_batches`); None: a plain shuffle.
    """

    n_examples: int
    batch_size: int
    world_size: int = 1
    accumulation: int = 1
    seed: int = 0
    groups: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts = self.world_size * self.accumulation
        if self.batch_size < parts:
            raise ValueError(
                f"batch_size {self.batch_size} is smaller than processes x accumulation steps "
                f"({self.world_size} x {self.accumulation}); every part needs an example"
            )
        if self.steps_per_epoch == 0:
            raise ValueError(f"{self.n_examples} examples make no batch of {self.batch_size}")
        if self.groups is not None:
            groups = check_groups(self.groups)
            if groups.size != self.n_examples:
                raise ValueError(f"{groups.size} group ids for {self.n_examples} examples")
            smallest = self.n_examples // self.steps_per_epoch
            if smallest < parts:
                raise ValueError(
                    f"the largest duplicate group ({largest_group(groups)} examples) needs "
                    f"{self.steps_per_epoch} batches, and batches of {smallest} examples cannot "
                    f"give each of {self.world_size} x {self.accumulation} parts one; cap the "
                    "group (max_pairs_per_group) or use fewer processes or accumulation steps"
                )

    @classmethod
    def for_training(
        cls, examples: ExampleSet, config: TrainingConfig, world_size: int
    ) -> BatchPlan:
        """The plan of a training run: ``config.batch_sampler`` picks the groups (if any)."""
        sampler = config.batch_sampler
        groups = None
        if sampler == "no_duplicates" or (sampler == "auto" and examples.groups is not None):
            groups = examples.groups if examples.groups is not None else text_groups(examples.texts)
        plan = cls(
            len(examples),
            config.batch_size,
            world_size,
            config.gradient_accumulation_steps,
            config.seed,
            groups,
        )
        if groups is not None:
            largest = largest_group(groups)
            logger.info(
                "batches without two examples of one group: %d groups, the largest has %d "
                "examples; %d batches per epoch of %d to %d examples",
                np.unique(groups).size,
                largest,
                plan.steps_per_epoch,
                len(examples) // plan.steps_per_epoch,
                -(-len(examples) // plan.steps_per_epoch),
            )
            if largest > -(-len(examples) // config.batch_size):
                logger.warning(
                    "the largest group (%d examples) needs more batches than batch_size %d "
                    "gives (%d): batches are smaller (fewer in-batch negatives); cap it with "
                    "max_pairs_per_group",
                    largest,
                    config.batch_size,
                    -(-len(examples) // config.batch_size),
                )
        return plan

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch. A shuffle drops a last batch too small to give every part
        an example; group-exclusive batches keep every example (module docstring)."""
        if self.groups is not None:
            return batch_count(self.groups, self.batch_size)
        full, rest = divmod(self.n_examples, self.batch_size)
        return full + (1 if rest >= self.world_size * self.accumulation else 0)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The global batches (example indices) of ``epoch``."""
        if self.groups is not None:
            return group_exclusive_batches(self.groups, self.batch_size, self.seed, epoch)
        order = epoch_order(self.n_examples, self.seed, epoch)
        return [
            order[start : start + self.batch_size]
            for start in range(0, self.steps_per_epoch * self.batch_size, self.batch_size)
        ]

    def micro_batches(self, batch: np.ndarray, rank: int) -> list[np.ndarray]:
        """Process ``rank``'s share of a global batch, as ``accumulation`` micro-batches."""
        parts = np.array_split(batch, self.world_size * self.accumulation)
        return parts[rank * self.accumulation : (rank + 1) * self.accumulation]


def training_prompt(encoder: SentenceEncoder, config: TrainingConfig) -> str:
    """The prompt every training text gets ("" for none).

    A configured prompt (``prompt_name`` or ``prompt``) becomes the encoder's default prompt, so
    the trained model records it and embeds as it was trained (dev evaluation included).
    """
    if config.prompt_name is None and config.prompt is None:
        return ""
    encoder.prompts = encoder.prompts.with_default(config.prompt_name, config.prompt)
    return encoder.prompts.resolve()


class BatchFeatures:
    """Token ids of every training text (tokenised once, up front) and batch assembly.

    With a ``prompt``, every text is tokenised as ``prompt + text`` and each batch carries the
    prompt's token count, which pooling leaves out when the model's pooling has
    ``include_prompt`` False (as at inference).
    """

    def __init__(
        self,
        encoder: SentenceEncoder,
        examples: ExampleSet,
        merge: bool,
        device: torch.device,
        prompt: str = "",
    ) -> None:
        unique = list(dict.fromkeys(text for column in examples.texts for text in column))
        position = {text: i for i, text in enumerate(unique)}
        self.encoder = encoder
        self.merge = merge
        self.token_ids = encoder.tokenize(unique, prompt=prompt).input_ids
        self.prompt_length = encoder.prompt_length(prompt)
        self.columns = [np.array([position[t] for t in column]) for column in examples.texts]
        self.target_values = (
            None
            if examples.targets is None
            else torch.from_numpy(np.asarray(examples.targets)).to(device)
        )

    def features(self, indices: np.ndarray) -> list[dict[str, torch.Tensor]]:
        """One padded batch per column; with ``merge`` all columns share one width."""
        columns = [[self.token_ids[i] for i in column[indices]] for column in self.columns]
        if not self.merge:
            batches = [self.encoder.pad(ids) for ids in columns]
        else:
            joint = self.encoder.pad([ids for column in columns for ids in column])  # (k·B, T)
            rows = len(indices)
            batches = [
                {key: tensor[c * rows : (c + 1) * rows] for key, tensor in joint.items()}
                for c in range(len(columns))
            ]
        if self.prompt_length:
            for batch in batches:
                batch["prompt_length"] = self.prompt_length
        return batches

    def targets(self, indices: np.ndarray) -> torch.Tensor | None:
        """Scores or labels of the examples at ``indices``."""
        if self.target_values is None:
            return None
        return self.target_values[torch.from_numpy(indices).to(self.target_values.device)]
