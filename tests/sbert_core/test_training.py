"""The training loop on a tiny model: it learns, resumes exactly, shards exactly, stops on NaN."""

import json
import math
import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from training_examples import build_trainable_model, scored_pairs, triplets

from sbert_core import SentenceEncoder
from sbert_core.config import load_config
from sbert_core.evaluation.evaluators import build_evaluator
from sbert_core.training.batches import BatchPlan, epoch_order
from sbert_core.training.checkpoint import latest_checkpoint
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.loop import TrainingDivergedError, train
from sbert_core.training.losses import CosineSimilarityLoss, MultipleNegativesRankingLoss
from sbert_core.training.optimizer import linear_schedule, warmup_steps

# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_trainable_model(tmp_path_factory.mktemp("dropout"))


@pytest.fixture(scope="module")
def still_model_dir(tmp_path_factory):
    """Dropout off: runs that shard batches differently must agree to float rounding."""
    return build_trainable_model(tmp_path_factory.mktemp("still"), dropout=False)


def as_examples(rows, kind="scored_pairs"):
    if kind == "scored_pairs":
        first, second, scores = zip(*rows, strict=True)
        return ExampleSet(kind, (first, second), np.asarray(scores, np.float32) / 5)
    return ExampleSet(kind, tuple(zip(*rows, strict=True)))


@pytest.fixture(scope="module")
def train_set():
    return as_examples(scored_pairs(80, seed=1))


@pytest.fixture(scope="module")
def dev_set():
    return as_examples(scored_pairs(60, seed=2))


def quick_config(**changes):
    values = {
        "batch_size": 8,
        "learning_rate": 3e-3,
        "epochs": 2,
        "device": "cpu",
        "num_threads": 1,
        "log_every": 1,
        "checkpoint_every": 0,
    }
    return TrainingConfig(**{**values, **changes})


def cosine_loss(directory):
    return CosineSimilarityLoss(SentenceEncoder.load(directory, device="cpu"))


def weights(loss):
    return {name: tensor.detach().clone() for name, tensor in loss.state_dict().items()}


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


# ---------------------------------------------------------------------------- configuration


def test_config_from_yaml_with_overrides(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("batch_size: 32\nlearning_rate: 2e-5\npooling: cls\nmax_steps: 10\n")
    config = load_config(
        TrainingConfig, path, ["epochs=3", "max_steps=null", "precision=bf16", "keep_best=no"]
    )
    assert (config.batch_size, config.learning_rate, config.epochs) == (32, 2e-5, 3)
    assert config.pooling == "cls" and config.max_steps is None and config.precision == "bfloat16"
    assert config.keep_best is False and config.seed == 42
    json_path = tmp_path / "train.json"
    json_path.write_text(json.dumps({"warmup_ratio": 0.2}))
    assert load_config(TrainingConfig, json_path).warmup_ratio == 0.2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("batch_sise=4", r"unknown config key\(s\) 'batch_sise'; valid keys: batch_size"),
        ("epochs=two", "epochs: expected an integer, got 'two'"),
        ("precision=fp8", "precision: 'fp8' is not one of: float32, bfloat16, float16"),
        ("learning_rate", "not of the form key=value"),
    ],
)
def test_config_errors_name_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        load_config(TrainingConfig, None, [override])


def test_precision_is_stored_in_one_spelling_and_old_spellings_are_read():
    for written, stored in [("bf16", "bfloat16"), ("fp16", "float16"), ("bfloat16", "bfloat16")]:
        assert load_config(TrainingConfig, None, [f"precision={written}"]).precision == stored
        assert TrainingConfig(precision=written).precision == stored
    assert load_config(TrainingConfig, None, ["precision=float16"]).precision == "float16"


def test_config_validation():
    with pytest.raises(ValueError, match="warmup_ratio"):
        TrainingConfig(warmup_ratio=1.5).validate()
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        TrainingConfig(batch_size=0).validate()


# ---------------------------------------------------------------------------- schedule and order


def test_linear_warmup_then_decay():
    assert warmup_steps(100, 0.1) == 10 and warmup_steps(95, 0.1) == 10
    factors = [linear_schedule(step, 100, 10) for step in range(100)]
    assert factors[0] == 0 and factors[5] == 0.5 and factors[10] == 1
    assert factors[55] == pytest.approx(0.5) and factors[99] == pytest.approx(1 / 90)
    assert linear_schedule(0, 10, 0) == 1


def test_batch_plan_shards_each_batch_exactly_once():
    single = BatchPlan(52, 16, seed=3)
    double = BatchPlan(52, 16, world_size=2, accumulation=2, seed=3)
    assert single.steps_per_epoch == double.steps_per_epoch == 4  # the last batch has 4 examples
    # A last batch of 2 cannot give each of 4 parts an example: it is dropped.
    assert BatchPlan(50, 16, world_size=2, accumulation=2).steps_per_epoch == 3
    for whole, batch in zip(single.batches(0), double.batches(0), strict=True):
        assert len(whole) in (16, 4)
        assert np.array_equal(whole, batch)
        parts = [p for rank in (0, 1) for p in double.micro_batches(batch, rank)]
        assert len(parts) == 4 and np.array_equal(np.concatenate(parts), batch)
    assert sorted(np.concatenate(single.batches(1)).tolist()) == list(range(52))
    assert np.array_equal(epoch_order(50, 3, 0), epoch_order(50, 3, 0))
    assert not np.array_equal(epoch_order(50, 3, 0), epoch_order(50, 3, 1))
    with pytest.raises(ValueError, match="smaller than processes x accumulation"):
        BatchPlan(50, 3, world_size=2, accumulation=2)


# ---------------------------------------------------------------------------- training


def test_training_lowers_the_loss_and_raises_dev_spearman(model_dir, train_set, dev_set):
    loss = cosine_loss(model_dir)
    evaluator = build_evaluator(dev_set)
    before = evaluator(loss.model)["cosine_spearman"]
    modes = []

    def watch_mode(encoder):
        modes.append(("eval", encoder.training))
        return evaluator(encoder)

    watch_mode.primary_metric = "cosine_spearman"
    result = train(
        loss,
        train_set,
        quick_config(epochs=3, evaluate_every=10),
        evaluator=watch_mode,
        callbacks=[lambda progress: modes.append(("train", loss.model.training))],
    )
    losses = [value for _, value in result.loss_history]
    assert result.steps == result.total_steps == 30
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert result.best_score > before + 20
    assert [step["step"] for step in result.dev_history] == [10, 20, 30]
    assert {mode for kind, mode in modes if kind == "train"} == {True}
    assert {mode for kind, mode in modes if kind == "eval"} == {False}
    assert loss.model.training is False


def test_resume_after_a_kill_ends_with_the_same_weights(model_dir, train_set, dev_set, tmp_path):
    config = quick_config(
        checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=4, evaluate_every=3
    )
    evaluator = build_evaluator(dev_set)
    uninterrupted = cosine_loss(model_dir)
    reference = train(uninterrupted, train_set, quick_config(evaluate_every=3), evaluator=evaluator)

    def killed_at_step_7(progress):
        if progress.step == 7:
            raise KeyboardInterrupt("simulated kill")

    with pytest.raises(KeyboardInterrupt):
        train(
            cosine_loss(model_dir),
            train_set,
            config,
            callbacks=[killed_at_step_7],
            evaluator=evaluator,
        )
    checkpoint = latest_checkpoint(config.checkpoint_dir)
    assert checkpoint.name == "step-00000004"
    assert sorted(p.name for p in checkpoint.iterdir()) == [
        "best.safetensors",
        "model.safetensors",
        "optimizer.safetensors",
        "rng.safetensors",
        "trainer_state.json",
    ]

    resumed_loss = cosine_loss(model_dir)
    resumed = train(resumed_loss, train_set, config, evaluator=evaluator)
    assert resumed.resumed_from == 4 and resumed.steps == reference.steps == 20
    assert max_difference(weights(resumed_loss), weights(uninterrupted)) <= 1e-6
    assert [step for step, _ in resumed.loss_history] == list(range(1, 21))
    resumed_losses = [value for _, value in resumed.loss_history]
    assert resumed_losses == pytest.approx([value for _, value in reference.loss_history], abs=1e-6)
    assert resumed.best_step == reference.best_step


def test_resume_refuses_a_checkpoint_of_another_run(model_dir, train_set, tmp_path):
    config = quick_config(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3, epochs=1)
    train(cosine_loss(model_dir), train_set, config)
    assert latest_checkpoint(config.checkpoint_dir) is not None
    with pytest.raises(ValueError, match="different training data"):
        train(cosine_loss(model_dir), train_set.select(range(40)), config)
    changed = quick_config(checkpoint_dir=config.checkpoint_dir, checkpoint_every=3, batch_size=4)
    with pytest.raises(ValueError, match="batch_size: 8 -> 4 would change the data order"):
        train(cosine_loss(model_dir), train_set, changed)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(model_dir, train_set, tmp_path):
    config = quick_config(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    loss = cosine_loss(model_dir)

    def poison_after_step_5(progress):
        if progress.step == 5:
            with torch.no_grad():
                loss.model.transformer.embeddings.word_embeddings.weight.fill_(float("nan"))

    with pytest.raises(TrainingDivergedError, match=r"loss became nan at step 6 of 20") as error:
        train(loss, train_set, config, callbacks=[poison_after_step_5])
    checkpoint = latest_checkpoint(config.checkpoint_dir)
    assert checkpoint.name == "step-00000004" and str(checkpoint) in str(error.value)
    from safetensors.torch import load_file

    saved = load_file(checkpoint / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in saved.values())


def test_gradient_accumulation_computes_the_same_update(still_model_dir, train_set):
    whole, split = cosine_loss(still_model_dir), cosine_loss(still_model_dir)
    train(whole, train_set, quick_config(epochs=1))
    train(split, train_set, quick_config(epochs=1, gradient_accumulation_steps=4))
    assert max_difference(weights(whole), weights(split)) <= 1e-5


def test_bf16_autocast_on_cpu_trains_and_fp16_is_refused(model_dir, train_set):
    result = train(cosine_loss(model_dir), train_set, quick_config(epochs=1, precision="bf16"))
    assert all(math.isfinite(value) for _, value in result.loss_history)
    with pytest.raises(ValueError, match="float16 needs a CUDA device"):
        train(cosine_loss(model_dir), train_set, quick_config(precision="fp16"))


# ---------------------------------------------------------------------------- data parallel


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _train_in_process_group(rank, world_size, port, model_dir, out_dir):
    """One of ``world_size`` processes: train cosine and in-batch-negatives runs, save weights."""
    import torch.distributed as dist
    from safetensors.torch import save_file

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        for name, loss, examples in _ddp_runs(model_dir):
            train(loss, examples, quick_config(epochs=1, batch_size=12))
            if rank == 0:
                save_file(weights(loss), os.path.join(out_dir, f"{name}.safetensors"))
        # Both ranks leave together: tearing gloo down while the peer is still busy (rank 0
        # saving) can abort the other process ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _ddp_runs(model_dir):
    yield "cosine", cosine_loss(model_dir), as_examples(scored_pairs(50, seed=4))
    mnrl = MultipleNegativesRankingLoss(SentenceEncoder.load(model_dir, device="cpu"))
    yield "mnrl", mnrl, as_examples(triplets(50, seed=5), kind="triplets")


def test_two_processes_train_like_one_with_the_same_global_batch(still_model_dir, tmp_path):
    from safetensors.torch import load_file

    # 50 examples in batches of 12: the last batch (2 examples) splits 1 + 1 over the processes.
    mp.spawn(
        _train_in_process_group,
        args=(2, _free_port(), str(still_model_dir), str(tmp_path)),
        nprocs=2,
        join=True,
    )
    for name, loss, examples in _ddp_runs(still_model_dir):
        train(loss, examples, quick_config(epochs=1, batch_size=12))
        distributed = load_file(tmp_path / f"{name}.safetensors")
        assert max_difference(weights(loss), distributed) <= 1e-5, name
