import json

import pytest
import torch
from sentence_transformers.models import Pooling as StPooling

from sbert_core.model.pooling import (
    POOLING_MODES,
    PoolingConfig,
    check_pooling_mode,
    exclude_prompt,
    pool,
)


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


def test_lasttoken_takes_last_real_token_on_either_side():
    tokens, mask = _batch()
    assert torch.equal(pool(tokens, mask, "lasttoken"), torch.tensor([[5.0, 0.0], [-1.0, 7.0]]))
    left = torch.tensor([[[9.0, 9.0], [9.0, 9.0], [2.0, 3.0]]])
    assert torch.equal(
        pool(left, torch.tensor([[0, 0, 1]]), "lasttoken"), torch.tensor([[2.0, 3.0]])
    )


def test_weightedmean_weights_positions_from_the_first_real_token():
    tokens = torch.tensor([[[1.0], [4.0]], [[50.0], [1.0]]])
    right = pool(tokens[:1], torch.tensor([[1, 1]]), "weightedmean")
    assert torch.allclose(right, torch.tensor([[(1 * 1.0 + 2 * 4.0) / 3]]))
    # Left padding: the one real token has weight 1, the pad none.
    left = pool(tokens[1:], torch.tensor([[0, 1]]), "weightedmean")
    assert torch.allclose(left, torch.tensor([[1.0]]))


def test_modes_concatenate_in_the_order_given():
    tokens, mask = _batch()
    both = pool(tokens, mask, ("cls", "mean"))
    assert both.shape == (2, 4)
    assert torch.equal(both[:, :2], pool(tokens, mask, "cls"))


def test_prompt_tokens_are_dropped_after_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    assert exclude_prompt(mask, 2).tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 1, 1]]
    assert mask.sum() == 10  # the caller's mask is untouched


def _st_pool(tokens, mask, mode, prompt_length):
    module = StPooling(tokens.shape[-1], pooling_mode=mode, include_prompt=prompt_length is None)
    features = {"token_embeddings": tokens, "attention_mask": mask}
    if prompt_length is not None:
        features["prompt_length"] = prompt_length
    return module(features)["sentence_embedding"]


@pytest.mark.parametrize("mode", [*POOLING_MODES, ("cls", "max", "mean")])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("prompt_length", [None, 2])
def test_every_mode_matches_sentence_transformers(mode, side, prompt_length):
    torch.manual_seed(0)
    lengths = [7, 3, 5, 1, 7]
    tokens = torch.randn(len(lengths), 7, 6) * 3
    mask = torch.zeros(len(lengths), 7, dtype=torch.int64)
    for row, length in enumerate(lengths):
        if side == "right":
            mask[row, :length] = 1
        else:
            mask[row, 7 - length :] = 1
    expected = _st_pool(tokens, mask, mode, prompt_length)
    ours = pool(tokens, mask, mode, prompt_length=prompt_length or 0)
    assert ours.shape == expected.shape
    # A one-token row with its token excluded pools to -inf (max) exactly as the oracle does.
    finite = torch.isfinite(expected)
    assert torch.equal(finite, torch.isfinite(ours))
    assert torch.equal(expected[~finite], ours[~finite])
    assert (ours[finite] - expected[finite]).abs().max() <= 1e-6


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="cls, max, mean, mean_sqrt_len_tokens"):
        check_pooling_mode("median")


@pytest.mark.parametrize(
    ("config", "mode"),
    [
        ({"word_embedding_dimension": 8, "pooling_mode_mean_tokens": True}, "mean"),
        ({"word_embedding_dimension": 8, "pooling_mode_cls_token": True}, "cls"),
        ({"word_embedding_dimension": 8, "pooling_mode_max_tokens": True}, "max"),
        ({"word_embedding_dimension": 8, "pooling_mode_lasttoken": True}, "lasttoken"),
        ({"word_embedding_dimension": 8, "pooling_mode_weightedmean_tokens": True}, "weightedmean"),
        (
            {"word_embedding_dimension": 8, "pooling_mode_mean_sqrt_len_tokens": True},
            "mean_sqrt_len_tokens",
        ),
        ({"embedding_dimension": 8, "pooling_mode": "max"}, "max"),
        ({"embedding_dimension": 8, "pooling_mode": ["lasttoken"]}, "lasttoken"),
        ({"word_embedding_dimension": 8, "pooling_mode": "mean_tokens"}, "mean"),
        # sentence-transformers: no mode switched on means mean; several are concatenated.
        ({"word_embedding_dimension": 8}, "mean"),
        (
            {
                "word_embedding_dimension": 8,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_cls_token": True,
            },
            ("cls", "mean"),
        ),
    ],
)
def test_config_reads_old_and_new_spelling(config, mode):
    assert PoolingConfig.from_dict(config) == PoolingConfig(dim=8, mode=mode)


def test_config_reads_include_prompt():
    config = PoolingConfig.from_dict({"embedding_dimension": 8, "include_prompt": False})
    assert config.include_prompt is False
    assert PoolingConfig.from_dict({"embedding_dimension": 8}).include_prompt is True


def test_config_refuses_unknown_modes_and_bad_values():
    with pytest.raises(ValueError, match="valid modes"):
        PoolingConfig.from_dict({"embedding_dimension": 8, "pooling_mode": "median"})
    with pytest.raises(ValueError, match="include_prompt"):
        PoolingConfig.from_dict({"embedding_dimension": 8, "include_prompt": "no"})
    with pytest.raises(ValueError, match="word_embedding_dimension"):
        PoolingConfig.from_dict({"pooling_mode": "mean"})


@pytest.mark.parametrize(
    "config",
    [
        PoolingConfig(dim=16, mode=mode, include_prompt=include)
        for mode in (*POOLING_MODES, ("cls", "mean"), ("mean", "cls"))
        for include in (True, False)
    ],
)
def test_config_round_trips_and_sentence_transformers_reads_it(config, tmp_path):
    saved = config.to_dict()
    assert PoolingConfig.from_dict(saved) == config
    (tmp_path / "config.json").write_text(json.dumps(saved))
    module = StPooling.load(str(tmp_path))
    assert module.pooling_mode == config.mode
    assert module.include_prompt == config.include_prompt
    assert module.get_embedding_dimension() == config.output_dim
