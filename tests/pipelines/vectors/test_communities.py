import numpy as np
import pytest
import torch
from planted import overlapping_groups
from sbert_pipeline.vectors.communities import (
    TruncatedNeighborsError,
    communities_from_neighbors,
    detect_communities,
)
from sbert_pipeline.vectors.topk import topk_neighbors
from sentence_transformers.util import community_detection


@pytest.fixture(scope="module")
def groups():
    return overlapping_groups()


@pytest.mark.parametrize(
    ("threshold", "min_size", "neighbors"), [(0.75, 10, 16), (0.72, 5, 64), (0.8, 3, 300)]
)
def test_same_communities_as_sentence_transformers(groups, threshold, min_size, neighbors):
    expected = community_detection(
        torch.from_numpy(groups), threshold=threshold, min_community_size=min_size
    )
    # Short lists force the threshold search; blocks smaller than N force several blocks.
    found = detect_communities(
        groups,
        threshold=threshold,
        min_community_size=min_size,
        neighbors=neighbors,
        block_size=700,
    )
    assert len(expected) > 15
    # Neighbouring groups overlap, so the greedy order decides membership.
    assert max(len(c) for c in expected) > 80
    assert [c.tolist() for c in found] == [list(c) for c in expected]


def test_from_complete_neighbor_lists(groups):
    indices, scores = topk_neighbors(groups, groups, 200, exclude_self=False)
    found = communities_from_neighbors(indices, scores, threshold=0.75, min_community_size=10)
    expected = community_detection(torch.from_numpy(groups), 0.75, 10)
    assert [c.tolist() for c in found] == [list(c) for c in expected]


def test_short_neighbor_lists_are_refused(groups):
    indices, scores = topk_neighbors(groups, groups, 12, exclude_self=False)
    with pytest.raises(TruncatedNeighborsError, match="larger k"):
        communities_from_neighbors(indices, scores, threshold=0.75, min_community_size=10)


def test_each_item_in_at_most_one_community_and_sizes_descend(groups):
    found = detect_communities(groups, threshold=0.7, min_community_size=4)
    members = np.concatenate(found)
    assert len(members) == len(set(members.tolist()))
    sizes = [len(c) for c in found]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= 4
    for community in found:  # every member is close enough to its centre
        assert (groups[community] @ groups[community[0]] >= np.float32(0.7) - 1e-6).all()


def test_small_inputs():
    rng = np.random.default_rng(0)
    assert detect_communities(rng.standard_normal((5, 8)), min_community_size=10) == []
    same = np.ones((4, 8), np.float32)
    assert [c.tolist() for c in detect_communities(same, min_community_size=4)] == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="min_community_size"):
        detect_communities(same, min_community_size=0)
