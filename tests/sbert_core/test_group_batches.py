"""The in-batch-negatives sampler: no batch holds two members of one group, every example is in
exactly one batch per epoch, the batches follow the seed, and the training plan uses it."""

import numpy as np
import pytest

from sbert_core.training.batches import BatchPlan
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.group_batches import (
    batch_count,
    group_exclusive_batches,
    largest_group,
    text_groups,
)


def random_groups(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` group ids with a skewed size distribution: many singletons, a few large groups."""
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(min(rng.zipf(1.6), n - sum(sizes))))
    ids = rng.permutation(len(sizes)) * 7 - 3  # arbitrary, negative and sparse ids are fine
    return rng.permutation(np.repeat(ids, sizes))


def assert_exclusive_partition(batches, groups, batch_size):
    seen = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    assert np.array_equal(np.sort(seen), np.arange(groups.size)), "every example exactly once"
    for batch in batches:
        assert 0 < len(batch) <= batch_size
        assert len(set(groups[batch].tolist())) == len(batch), "two members of one group"


@pytest.mark.parametrize("trial", range(40))
def test_random_groups_are_never_batched_together_and_every_example_is_used(trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(1, 400))
    groups = random_groups(rng, n)
    batch_size = int(rng.integers(1, 40))
    batches = group_exclusive_batches(groups, batch_size, seed=trial, epoch=int(rng.integers(5)))
    assert len(batches) == batch_count(groups, batch_size)
    assert len(batches) == max(-(-n // batch_size), largest_group(groups))
    assert_exclusive_partition(batches, groups, batch_size)
    sizes = [len(batch) for batch in batches]
    assert max(sizes) - min(sizes) <= 1, "the deal keeps batches within one example"


def test_a_group_larger_than_the_batch_count_makes_more_smaller_batches():
    groups = np.array([5] * 12 + list(range(100, 120)))  # 32 examples, one group of 12
    batches = group_exclusive_batches(groups, batch_size=16, seed=0, epoch=0)
    assert len(batches) == 12  # not 2: each member of the big group needs its own batch
    assert_exclusive_partition(batches, groups, 16)


def test_batches_follow_the_seed_and_the_epoch():
    groups = random_groups(np.random.default_rng(7), 300)

    def run(seed, epoch):
        return [b.tolist() for b in group_exclusive_batches(groups, 16, seed, epoch)]

    assert run(3, 1) == run(3, 1)
    assert run(3, 1) != run(3, 2)
    assert run(3, 1) != run(4, 1)


def test_text_groups_join_examples_sharing_any_text_transitively():
    anchors = ["a", "b", "c", "d", "a"]
    positives = ["x", "y", "b", "z", "w"]
    groups = text_groups([anchors, positives])
    assert groups[0] == groups[4]  # anchor "a" twice
    assert groups[1] == groups[2]  # "b" as anchor and as positive
    assert len({groups[0], groups[1], groups[3]}) == 3


def test_plan_micro_batches_split_group_exclusive_batches_across_processes():
    groups = np.random.default_rng(11).integers(0, 80, 250)  # groups of about 3
    plan = BatchPlan(250, 24, world_size=2, accumulation=2, seed=5, groups=groups)
    for epoch in range(3):
        batches = plan.batches(epoch)
        assert len(batches) == plan.steps_per_epoch
        assert_exclusive_partition(batches, groups, 24)
        for batch in batches:
            parts = [part for rank in range(2) for part in plan.micro_batches(batch, rank)]
            assert len(parts) == 4 and all(len(part) for part in parts)
            assert np.array_equal(np.concatenate(parts), batch)


def test_plan_refuses_batches_too_small_for_every_part():
    groups = np.array([0] * 10 + [1, 2])  # 12 examples, 10 batches of 1 or 2
    with pytest.raises(ValueError, match="largest duplicate group"):
        BatchPlan(12, 8, world_size=2, accumulation=2, groups=groups)


def pairs_with_groups(groups):
    texts = tuple(f"q{i}" for i in range(len(groups)))
    return ExampleSet("pairs", (texts, tuple(t + "'" for t in texts)), groups=np.asarray(groups))


def test_training_plan_keeps_duplicate_groups_apart_by_default():
    # 4 groups of 8 examples and batches of 8: a plain shuffle puts duplicates together.
    groups = np.repeat(np.arange(4), 8)
    examples = pairs_with_groups(groups)
    plan = BatchPlan.for_training(examples, TrainingConfig(batch_size=8), world_size=1)
    assert plan.steps_per_epoch == 8
    assert_exclusive_partition(plan.batches(0), groups, 8)
    shuffled = BatchPlan.for_training(
        examples, TrainingConfig(batch_size=8, batch_sampler="shuffle"), world_size=1
    )
    assert shuffled.groups is None
    assert any(len(set(groups[b].tolist())) < len(b) for b in shuffled.batches(0))


def test_no_duplicates_without_group_ids_groups_copies_of_a_text():
    anchors = ("a", "a", "a", "b", "c", "d")
    examples = ExampleSet("pairs", (anchors, ("p", "q", "r", "s", "t", "u")))
    config = TrainingConfig(batch_size=3, batch_sampler="no_duplicates")
    plan = BatchPlan.for_training(examples, config, world_size=1)
    for epoch in range(5):
        for batch in plan.batches(epoch):
            assert [anchors[i] for i in batch].count("a") <= 1
    auto = BatchPlan.for_training(examples, TrainingConfig(batch_size=3), world_size=1)
    assert auto.groups is None  # auto: a plain shuffle for data without group ids


def test_unknown_batch_sampler_is_refused():
    with pytest.raises(ValueError, match="batch_sampler"):
        TrainingConfig(batch_sampler="greedy").validate()
