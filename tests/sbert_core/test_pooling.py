import pytest
import torch

from sbert_core.pooling import PoolingConfig, check_pooling_mode, pool


def _batch():
    # Two sentences: 3 real tokens, then 1 real token + 2 padding tokens holding huge values
    # that any padding leak would show.
    tokens = torch.tensor(
        [
            [[1.0, 2.0], [3.0, -4.0], [5.0, 0.0]],
            [[-1.0, 7.0], [100.0, 100.0], [100.0, 100.0]],
        ]
    )
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    return tokens, mask


def test_mean_ignores_padding():
    tokens, mask = _batch()
    assert torch.allclose(pool(tokens, mask, "mean"), torch.tensor([[3.0, -2 / 3], [-1.0, 7.0]]))


def test_max_ignores_padding():
    tokens, mask = _batch()
    assert torch.equal(pool(tokens, mask, "max"), torch.tensor([[5.0, 2.0], [-1.0, 7.0]]))


def test_cls_takes_first_token():
    tokens, mask = _batch()
    assert torch.equal(pool(tokens, mask, "cls"), torch.tensor([[1.0, 2.0], [-1.0, 7.0]]))


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="mean, max, cls"):
        check_pooling_mode("median")


@pytest.mark.parametrize(
    ("config", "mode"),
    [
        ({"word_embedding_dimension": 8, "pooling_mode_mean_tokens": True}, "mean"),
        ({"word_embedding_dimension": 8, "pooling_mode_cls_token": True}, "cls"),
        ({"word_embedding_dimension": 8, "pooling_mode_max_tokens": True}, "max"),
        ({"embedding_dimension": 8, "pooling_mode": "max"}, "max"),
        ({"word_embedding_dimension": 8, "pooling_mode": "mean_tokens"}, "mean"),
    ],
)
def test_config_reads_old_and_new_spelling(config, mode):
    assert PoolingConfig.from_dict(config) == PoolingConfig(dim=8, mode=mode)


def test_config_refuses_unsupported_or_ambiguous_modes():
    with pytest.raises(ValueError, match="valid modes"):
        PoolingConfig.from_dict({"embedding_dimension": 8, "pooling_mode": "weightedmean"})
    with pytest.raises(ValueError, match="not supported"):
        PoolingConfig.from_dict(
            {"word_embedding_dimension": 8, "pooling_mode_mean_sqrt_len_tokens": True}
        )
    with pytest.raises(ValueError, match="exactly one"):
        PoolingConfig.from_dict(
            {
                "word_embedding_dimension": 8,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": True,
            }
        )


def test_config_round_trips_through_old_spelling():
    for mode in ("mean", "max", "cls"):
        config = PoolingConfig(dim=16, mode=mode)
        assert PoolingConfig.from_dict(config.to_dict()) == config
