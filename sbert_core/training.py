"""Fine-tuning a :class:`SentenceEncoder`: the paper's recipe, resumable and data-parallel.

The defaults are Reimers & Gurevych (2019), section 4: batch 16, AdamW with learning rate 2e-5,
linear warm-up over 10% of the steps then linear decay, one epoch, MEAN pooling.

    config = load_config(TrainingConfig, "train.yaml", ["epochs=4"])
    encoder = load_base_encoder("all-MiniLM-L6-v2", config)
    loss = CosineSimilarityLoss(encoder)
    result = train(loss, load_examples(DataSpec(path="stsb/train.tsv.gz")), config)

Order and sharding: each epoch shuffles the examples with a generator seeded by (seed, epoch)
and cuts the order into global batches of ``batch_size``. Each global batch is split into
``world_size x gradient_accumulation_steps`` contiguous parts; process ``r`` takes its parts,
and every part's loss is weighted by its share of the batch. So 1 process, N processes
(``torchrun --nproc_per_node N``; gloo on CPU, NCCL on GPUs) and any accumulation compute the
same update up to float rounding, as long as dropout is off (its masks depend on the process).

Checkpoints hold the model (and loss head), the best weights so far, the optimizer, the gradient
scaler, every process's random state and the position in the data, in safetensors + JSON (no
pickle). A run that is
killed resumes from the newest one and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import time
import types
import typing
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sbert_core.encoder import SentenceEncoder
from sbert_core.losses import SoftmaxLoss
from sbert_core.pooling import PoolingMode
from sbert_core.training_data import ExampleSet

logger = logging.getLogger(__name__)

Precision = Literal["float32", "bf16", "fp16"]
ConfigT = TypeVar("ConfigT")


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite; training stopped before applying that step."""


# ---------------------------------------------------------------------------- configuration


@dataclass
class TrainingConfig:
    """How to train. Hyper-parameters default to the paper's recipe (to sentence-transformers'
    choices where the paper is silent)."""

    # Examples per optimizer step, over all processes and accumulation micro-batches, so that a
    # config trains the same way on 1 or N processes.
    batch_size: int = 16
    learning_rate: float = 2e-5
    # sentence-transformers' fit() value; biases and LayerNorm weights are never decayed.
    weight_decay: float = 0.01
    # Linear warm-up over this fraction of all steps, then linear decay to zero.
    warmup_ratio: float = 0.1
    epochs: int = 1
    # Stop after this many optimizer steps (the schedule is laid out over them); None: all epochs.
    max_steps: int | None = None
    # Micro-batches per step, to bound memory; in-batch negatives then see only their part.
    gradient_accumulation_steps: int = 1
    # Clip the gradient norm (sentence-transformers' default); None: no clipping.
    max_grad_norm: float | None = 1.0
    # The paper pools by MEAN; None keeps the base model's own pooling.
    pooling: PoolingMode | None = "mean"
    # Truncate inputs to this many tokens; None: the base model's limit.
    max_seq_length: int | None = None
    seed: int = 42
    # Autocast for the forward pass (weights and optimizer stay float32): bf16 on GPUs or on CPUs
    # with AVX512-BF16/AMX; fp16 on GPUs only, with loss scaling.
    precision: Precision = "float32"
    # None: CUDA when available (cuda:LOCAL_RANK under torchrun), else CPU.
    device: str | None = None
    num_threads: int | None = None
    # Pad all columns of a batch to one width and embed them in one forward pass: faster for
    # sentence pairs; switch off for short queries against long documents.
    merge_columns: bool = True
    # Evaluate on the dev set every N steps, and after each epoch; 0: after each epoch only.
    evaluate_every: int = 0
    # With a dev set: end with the weights that scored best on it rather than the last ones.
    keep_best: bool = True
    # Where checkpoints go; None: no checkpoints (the finetune job puts them next to its output).
    checkpoint_dir: str | None = None
    # Write a checkpoint every N steps; 0: never.
    checkpoint_every: int = 500
    # How many step checkpoints to keep (the newest ones).
    keep_checkpoints: int = 1
    # Continue from the newest checkpoint in checkpoint_dir when there is one.
    resume: bool = True
    log_every: int = 50

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field."""
        positive = {
            "batch_size": self.batch_size,
            "epochs": self.epochs,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "keep_checkpoints": self.keep_checkpoints,
            "log_every": self.log_every,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        for name in ("max_steps", "max_seq_length", "num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {value}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or null, got {self.max_grad_norm}")
        if self.evaluate_every < 0 or self.checkpoint_every < 0:
            raise ValueError("evaluate_every and checkpoint_every must be >= 0")


def load_config(
    cls: type[ConfigT],
    path: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
) -> ConfigT:
    """Build a config dataclass from a YAML/JSON file and ``key=value`` overrides.

    Nested sections are addressed with dots (``training.epochs=4``), list items by position
    (``test.0.path=...``). Values are read as YAML (``null``, ``true``, ``[a, b]``) and converted
    to the field's declared type; a comma-separated string fills a tuple field.

    Raises:
        ValueError: unreadable file, unknown key, or a value of the wrong type, naming the key.
    """
    data = read_config_file(path) if path is not None else {}
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(cls, data)


def read_config_file(path: str | os.PathLike) -> dict:
    """The mapping in a YAML or JSON file (JSON is read as YAML, which it is a subset of)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{path}: cannot read the config ({err.strerror or err})") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"{path}: invalid YAML/JSON{where}: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config must be a mapping of keys to values")
    return data


def apply_override(data: dict, override: str) -> None:
    """Set ``key.path=value`` in a nested dict of config values, creating sections as needed."""
    import yaml

    key, separator, raw = override.partition("=")
    if not separator or not key.strip():
        raise ValueError(f"override {override!r} is not of the form key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node: Any = data
    for position, part in enumerate(parts[:-1]):
        child = _child(node, part, override)
        if child is None:
            child = [] if parts[position + 1].isdigit() else {}
            _set_child(node, part, child, override)
        node = child
    _set_child(node, parts[-1], value, override)


def _child(node: Any, part: str, override: str) -> Any:
    if isinstance(node, list):
        index = _list_index(node, part, override, allow_append=True)
        return node[index] if index < len(node) else None
    if isinstance(node, dict):
        return node.get(part)
    raise ValueError(f"override {override!r}: {part!r} is inside a value that is not a section")


def _set_child(node: Any, part: str, value: Any, override: str) -> None:
    if isinstance(node, list):
        index = _list_index(node, part, override, allow_append=True)
        if index == len(node):
            node.append(value)
        else:
            node[index] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ValueError(f"override {override!r}: {part!r} is inside a value that is not a section")


def _list_index(node: list, part: str, override: str, *, allow_append: bool) -> int:
    limit = len(node) + (1 if allow_append else 0)
    if not part.isdigit() or int(part) >= limit:
        raise ValueError(f"override {override!r}: list index {part!r} must be 0..{limit - 1}")
    return int(part)


def config_from_dict(cls: type[ConfigT], data: Any, where: str = "") -> ConfigT:
    """Build the dataclass ``cls`` from a mapping, converting each value to its field's type."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(repr(where + str(k)) for k in unknown)}; "
            f"valid keys{' in ' + where.rstrip('.') if where else ''}: {', '.join(names)}"
        )
    values = {key: _coerce(hints[key], value, where + key) for key, value in data.items()}
    return cls(**values)


def _coerce(kind: Any, value: Any, where: str) -> Any:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (typing.Union, types.UnionType):
        is_null = value is None or (
            isinstance(value, str) and value.lower() in {"null", "none", "~"}
        )
        if is_null and type(None) in args:
            return None
        errors = []
        for option in (arg for arg in args if arg is not type(None)):
            try:
                return _coerce(option, value, where)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError(errors[-1] if errors else f"{where}: invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            choices = ", ".join(str(arg) for arg in args)
            raise ValueError(f"{where}: {value!r} is not one of: {choices}")
        return value
    if origin is tuple or origin is list:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise ValueError(f"{where}: expected {len(args)} values, got {list(value)}")
            return tuple(
                _coerce(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        item = args[0] if args else Any
        items = [_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args or (Any, Any)
        return {
            _coerce(key_type, k, f"{where}.{k}"): _coerce(value_type, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if is_dataclass(kind):
        return config_from_dict(kind, value, where + ".")
    return _coerce_scalar(kind, value, where)


def _coerce_scalar(kind: Any, value: Any, where: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"true", "yes", "on", "1"}:
            return True
        if text in {"false", "no", "off", "0"}:
            return False
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)  # YAML reads "2e-5" (no dot) as a string
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"{where}: expected text, got {value!r}")
    return value


def config_to_dict(config: Any) -> dict:
    """A config dataclass as plain JSON/YAML-safe values (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(asdict(config))


# ---------------------------------------------------------------------------- schedule and order


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Warm-up length in steps (rounded up, as Hugging Face's Trainer does)."""
    return math.ceil(total_steps * warmup_ratio)


def linear_schedule(step: int, total_steps: int, warmup: int) -> float:
    """Learning-rate multiplier for optimizer step ``step`` (0-based).

    Rises linearly from 0 over ``warmup`` steps, then falls linearly to 0 at ``total_steps``:
    the schedule of the paper and of ``transformers.get_linear_schedule_with_warmup``.
    """
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def epoch_order(n_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled example order of one epoch; the same on every process and every rerun."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_examples, generator=generator).numpy()


@dataclass(frozen=True)
class BatchPlan:
    """Global batches of each epoch and each process's micro-batches within them."""

    n_examples: int
    batch_size: int
    world_size: int = 1
    accumulation: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        parts = self.world_size * self.accumulation
        if self.batch_size < parts:
            raise ValueError(
                f"batch_size {self.batch_size} is smaller than processes x accumulation steps "
                f"({self.world_size} x {self.accumulation}); every part needs an example"
            )
        if self.steps_per_epoch == 0:
            raise ValueError(f"{self.n_examples} examples make no batch of {self.batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch; a last batch too small to give every part an example is
        dropped."""
        full, rest = divmod(self.n_examples, self.batch_size)
        return full + (1 if rest >= self.world_size * self.accumulation else 0)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The global batches (example indices) of ``epoch``."""
        order = epoch_order(self.n_examples, self.seed, epoch)
        return [
            order[start : start + self.batch_size]
            for start in range(0, self.steps_per_epoch * self.batch_size, self.batch_size)
        ]

    def micro_batches(self, batch: np.ndarray, rank: int) -> list[np.ndarray]:
        """Process ``rank``'s share of a global batch, as ``accumulation`` micro-batches."""
        parts = np.array_split(batch, self.world_size * self.accumulation)
        return parts[rank * self.accumulation : (rank + 1) * self.accumulation]


# ---------------------------------------------------------------------------- evaluation


class PairClassificationEvaluator:
    """Accuracy (%) of a :class:`SoftmaxLoss` classifier on labelled sentence pairs."""

    primary_metric = "accuracy"

    def __init__(self, examples: ExampleSet, loss: SoftmaxLoss, name: str = "") -> None:
        self.examples = examples
        self.loss = loss
        self.name = name or examples.source

    def __call__(self, encoder: SentenceEncoder, **encode_kwargs) -> dict[str, float]:
        """Classify every pair and compare with the gold labels."""
        u, v = _encode_columns(encoder, self.examples, **encode_kwargs)
        weight = self.loss.classifier.weight
        with torch.inference_mode():
            logits = self.loss.logits(
                torch.from_numpy(u).to(weight.device), torch.from_numpy(v).to(weight.device)
            )  # (N, k)
        predicted = logits.argmax(dim=1).cpu().numpy()
        accuracy = float((predicted == self.examples.targets).mean() * 100)
        return {"accuracy": accuracy, "n_pairs": len(self.examples)}


class TripletEvaluator:
    """How often (%) an anchor is nearer its positive than its negative, by cosine and Euclid."""

    primary_metric = "cosine_accuracy"

    def __init__(self, examples: ExampleSet, name: str = "") -> None:
        self.examples = examples
        self.name = name or examples.source

    def __call__(self, encoder: SentenceEncoder, **encode_kwargs) -> dict[str, float]:
        """Embed every triplet and count the ones ordered correctly."""
        anchors, positives, negatives = _encode_columns(encoder, self.examples, **encode_kwargs)

        def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
            return np.einsum("nd,nd->n", a, b) / np.maximum(norms, 1e-12)

        by_cosine = cosine(anchors, positives) > cosine(anchors, negatives)
        by_euclid = np.linalg.norm(anchors - positives, axis=1) < np.linalg.norm(
            anchors - negatives, axis=1
        )
        return {
            "cosine_accuracy": float(by_cosine.mean() * 100),
            "euclidean_accuracy": float(by_euclid.mean() * 100),
            "n_triplets": len(self.examples),
        }


def _encode_columns(encoder: SentenceEncoder, examples: ExampleSet, **kwargs) -> list[np.ndarray]:
    """Embeddings of each text column, encoding every distinct text once."""
    unique = list(dict.fromkeys(text for column in examples.texts for text in column))
    position = {text: i for i, text in enumerate(unique)}
    embeddings = encoder.encode(unique, **kwargs)
    return [embeddings[[position[text] for text in column]] for column in examples.texts]


Evaluator = Callable[..., dict]


def build_evaluator(
    examples: ExampleSet, loss: nn.Module | None = None, name: str = ""
) -> Evaluator:
    """The metric for a dev or test set: STS correlations for scored pairs, the softmax head's
    accuracy for labelled pairs, triplet accuracy for triplets.

    Raises:
        ValueError: labelled pairs without a softmax loss, or plain pairs (no metric).
    """
    from sbert_core.evaluation import STSEvaluator  # scipy: only needed when there is a dev set

    name = name or Path(examples.source).name
    if examples.kind == "scored_pairs":
        first, second = examples.texts
        return STSEvaluator(list(first), list(second), examples.targets.tolist(), name=name)
    if examples.kind == "labelled_pairs":
        if not isinstance(loss, SoftmaxLoss):
            raise ValueError(
                f"{examples.source}: labelled pairs are scored by the softmax classifier, "
                "which only the softmax loss trains"
            )
        return PairClassificationEvaluator(examples, loss, name)
    if examples.kind == "triplets":
        return TripletEvaluator(examples, name)
    raise ValueError(
        f"{examples.source}: {examples.kind} have no metric; evaluate on triplets or scored pairs"
    )


# ---------------------------------------------------------------------------- checkpoints

CHECKPOINT_PREFIX = "step-"
BEST_FILE = "best.safetensors"
STATE_FILE = "trainer_state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
# Changing these would change which examples a resumed run has already seen.
_RESUME_MUST_MATCH = ("batch_size", "seed")
# These never change what is trained.
_RESUME_FREE = (
    "checkpoint_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "log_every",
    "num_threads",
    "device",
)


def latest_checkpoint(directory: str | os.PathLike | None) -> Path | None:
    """The newest complete step checkpoint in ``directory``, or None."""
    if directory is None or not Path(directory).is_dir():
        return None
    complete = [
        path
        for path in Path(directory).glob(f"{CHECKPOINT_PREFIX}*")
        if re.fullmatch(rf"{CHECKPOINT_PREFIX}\d+", path.name) and (path / STATE_FILE).is_file()
    ]
    return max(
        complete, key=lambda path: int(path.name.removeprefix(CHECKPOINT_PREFIX)), default=None
    )


def _write_atomically(directory: Path, name: str, write: Callable[[Path], None]) -> Path:
    """Fill a staging folder with ``write`` and rename it to ``directory/name``: a checkpoint
    folder exists whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory))
    final = directory / name
    try:
        write(staging)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _optimizer_tensors(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state dict into tensors (for safetensors) and the rest (for JSON)."""
    tensors, values = {}, {}
    for param_id, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param_id}.{key}"] = value.detach().cpu().contiguous()
            else:
                values.setdefault(str(param_id), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "values": values}


def _optimizer_state(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for name, tensor in tensors.items():
        param_id, key = name.split(".", 1)
        state.setdefault(int(param_id), {})[key] = tensor
    for param_id, entries in meta["values"].items():
        state.setdefault(int(param_id), {}).update(entries)
    groups = [
        {**group, "betas": tuple(group["betas"])} if "betas" in group else group
        for group in meta["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _random_state() -> dict:
    """This process's random generators: torch (CPU and CUDA), numpy and Python."""
    numpy_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }


def _restore_random_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's generators (model heads are initialised from these)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------- processes


def training_device(config: TrainingConfig) -> torch.device:
    """The device this process trains on: the config's, else ``cuda:LOCAL_RANK`` or the CPU."""
    if config.device is not None:
        device = torch.device(config.device)
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and device.index is None:
        # One GPU per process under torchrun.
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def load_base_encoder(
    model: str | os.PathLike, config: TrainingConfig, *, allow_pickle: bool = False
) -> SentenceEncoder:
    """Load the model to fine-tune in float32 with the config's pooling, length and device."""
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    return SentenceEncoder.load(
        model,
        device=training_device(config),
        pooling=config.pooling,
        max_seq_length=config.max_seq_length,
        allow_pickle=allow_pickle,
    )


@dataclass(frozen=True)
class _Processes:
    rank: int
    world_size: int
    owns_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _join_processes(device: torch.device) -> _Processes:
    """Join the process group torchrun describes (WORLD_SIZE > 1), or run alone."""
    if dist.is_available() and dist.is_initialized():
        return _Processes(dist.get_rank(), dist.get_world_size(), owns_group=False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return _Processes(0, 1, owns_group=False)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return _Processes(dist.get_rank(), dist.get_world_size(), owns_group=True)


# ---------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class TrainingProgress:
    """What callbacks see after each optimizer step."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    learning_rate: float


@dataclass
class TrainingResult:
    """What a finished run reports.

    Attributes:
        steps: optimizer steps done, including those before a resume.
        total_steps: steps the schedule was laid out over.
        seconds: wall time of this call (not of earlier, interrupted calls).
        examples_per_second: training examples processed per second in this call.
        loss_history: ``(step, mean loss over the last log_every steps)``.
        dev_history: dev metrics with their ``step``.
        best_step, best_score: the dev evaluation whose weights were kept (None without dev).
        primary_metric: the dev metric that picks the best weights.
        resumed_from: the step of the checkpoint this run continued from, or None.
        world_size: processes that trained together.
    """

    steps: int = 0
    total_steps: int = 0
    seconds: float = 0.0
    examples_per_second: float = 0.0
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    dev_history: list[dict] = field(default_factory=list)
    best_step: int | None = None
    best_score: float | None = None
    primary_metric: str | None = None
    resumed_from: int | None = None
    world_size: int = 1

    @property
    def final_loss(self) -> float | None:
        """Mean loss of the last logging window."""
        return self.loss_history[-1][1] if self.loss_history else None


def train(
    loss: nn.Module,
    examples: ExampleSet,
    config: TrainingConfig,
    *,
    evaluator: Evaluator | None = None,
    callbacks: Sequence[Callable[[TrainingProgress], None]] = (),
) -> TrainingResult:
    """Train ``loss.model`` (a :class:`SentenceEncoder`) on ``examples``.

    Args:
        loss: a loss module from :mod:`sbert_core.losses` around the encoder.
        examples: training examples of a kind the loss accepts.
        config: hyper-parameters, evaluation, checkpointing.
        evaluator: dev-set metric (see :func:`build_evaluator`): a callable on the encoder
            returning a dict of metrics, with a ``primary_metric`` attribute; run on the main
            process every ``evaluate_every`` steps and after each epoch.
        callbacks: called on every process after each optimizer step.

    Returns:
        The run's summary; ``loss.model`` holds the final (or best, with ``keep_best``) weights
        and is left in eval mode.

    Raises:
        TrainingDivergedError: the loss became NaN/inf; the last checkpoint is kept.
        ValueError: invalid config, or a checkpoint written for another run.
    """
    config.validate()
    if evaluator is not None and not getattr(evaluator, "primary_metric", None):
        raise ValueError("the evaluator needs a primary_metric attribute naming its main metric")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = training_device(config)
    processes = _join_processes(device)
    try:
        return _TrainingRun(loss, examples, config, evaluator, device, processes).fit(callbacks)
    finally:
        if processes.owns_group and dist.is_initialized():
            dist.destroy_process_group()


class _TrainingRun:
    """The state of one call to :func:`train`."""

    def __init__(
        self,
        loss: nn.Module,
        examples: ExampleSet,
        config: TrainingConfig,
        evaluator: Evaluator | None,
        device: torch.device,
        processes: _Processes,
    ) -> None:
        self.config = config
        self.loss = loss
        self.encoder: SentenceEncoder = loss.model
        self.examples = examples
        self.evaluator = evaluator
        self.device = device
        self.processes = processes
        self.plan = BatchPlan(
            len(examples),
            config.batch_size,
            self.processes.world_size,
            config.gradient_accumulation_steps,
            config.seed,
        )
        per_run = self.plan.steps_per_epoch * config.epochs
        self.total_steps = min(per_run, config.max_steps) if config.max_steps else per_run
        self.warmup = warmup_steps(self.total_steps, config.warmup_ratio)
        self.autocast_dtype = _autocast_dtype(config.precision, self.device)

        loss.to(self.device)
        # BERT-style poolers are computed but never used by sentence embeddings: their weights
        # get no gradient, which DDP would treat as an error.
        for name, parameter in self.encoder.transformer.named_parameters():
            if name.startswith("pooler."):
                parameter.requires_grad_(False)
        self.optimizer = _adamw(loss, config, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type) if config.precision == "fp16" else None
        self.batches = _BatchFeatures(self.encoder, examples, config.merge_columns, self.device)

        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.result = TrainingResult(
            total_steps=self.total_steps,
            primary_metric=getattr(evaluator, "primary_metric", None),
            world_size=self.processes.world_size,
        )
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._window: list[float] = []
        self._last_checkpoint: Path | None = None

        seed_everything(config.seed + self.processes.rank)
        checkpoint = latest_checkpoint(config.checkpoint_dir) if config.resume else None
        if checkpoint is not None:
            self._restore(checkpoint)
        self.model = self._wrap(loss)

    # ------------------------------------------------------------------ setup

    def _wrap(self, loss: nn.Module) -> nn.Module:
        if self.processes.world_size == 1:
            return loss
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(
            loss,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            # Buffers (position ids) never change; broadcasting them each step is wasted traffic.
            broadcast_buffers=False,
        )

    # ------------------------------------------------------------------ training

    def fit(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        config = self.config
        logger.info(
            "training on %d examples: %d steps (%d per epoch, warm-up %d), batch %d over %d "
            "process(es)%s",
            len(self.examples),
            self.total_steps,
            self.plan.steps_per_epoch,
            self.warmup,
            config.batch_size,
            self.processes.world_size,
            f", resumed at step {self.step}" if self.result.resumed_from is not None else "",
        )
        start = time.perf_counter()
        examples_seen = 0
        self.loss.train()
        while self.step < self.total_steps:
            batches = self.plan.batches(self.epoch)
            while self.batch_in_epoch < len(batches) and self.step < self.total_steps:
                batch = batches[self.batch_in_epoch]
                value = self._optimizer_step(batch)
                self.batch_in_epoch += 1
                self.step += 1
                examples_seen += len(batch)
                end_of_epoch = self.batch_in_epoch == len(batches)
                self._after_step(value, end_of_epoch, callbacks)
            if self.batch_in_epoch == len(batches):
                self.epoch += 1
                self.batch_in_epoch = 0

        if self.best_weights is not None and config.keep_best:
            self.loss.load_state_dict(self.best_weights)
        self.loss.eval()
        self.result.steps = self.step
        self.result.seconds = time.perf_counter() - start
        self.result.examples_per_second = examples_seen / max(self.result.seconds, 1e-9)
        return self.result

    def _optimizer_step(self, batch: np.ndarray) -> float:
        """One update from one global batch; returns the batch's mean loss over all processes."""
        learning_rate = self.config.learning_rate * linear_schedule(
            self.step, self.total_steps, self.warmup
        )
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        parts = self.plan.micro_batches(batch, self.processes.rank)
        total = torch.zeros((), device=self.device)
        for position, indices in enumerate(parts):
            share = len(indices) / len(batch)
            # Accumulate locally; DDP averages gradients over processes once, on the last part.
            syncing = position == len(parts) - 1 or self.processes.world_size == 1
            context = nullcontext() if syncing else self.model.no_sync()
            with context:
                with torch.autocast(
                    self.device.type,
                    dtype=self.autocast_dtype or torch.float32,
                    enabled=self.autocast_dtype is not None,
                ):
                    value = self.model(
                        self.batches.features(indices), self.batches.targets(indices)
                    )
                # Scaled so that after DDP divides by world_size, the gradient is the mean over
                # the whole global batch.
                weighted = value.float() * share * self.processes.world_size
                (self.scaler.scale(weighted) if self.scaler else weighted).backward()
            total += value.detach().float() * share
        if self.processes.world_size > 1:
            dist.all_reduce(total)
        mean_loss = float(total)
        if not math.isfinite(mean_loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(self._divergence_message(mean_loss))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._trainable(), self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return mean_loss

    def _trainable(self) -> list[nn.Parameter]:
        return [p for p in self.loss.parameters() if p.requires_grad]

    def _divergence_message(self, value: float) -> str:
        where = (
            f"the last good checkpoint is {self._last_checkpoint}"
            if self._last_checkpoint is not None
            else "no checkpoint was written before it"
        )
        return (
            f"the loss became {value} at step {self.step + 1} of {self.total_steps} "
            f"(epoch {self.epoch + 1}); training stopped before applying that step, and {where}. "
            "Lower learning_rate, or use precision float32 if mixed precision is on."
        )

    def _after_step(
        self,
        value: float,
        end_of_epoch: bool,
        callbacks: Sequence[Callable[[TrainingProgress], None]],
    ) -> None:
        config = self.config
        self._window.append(value)
        last = self.step == self.total_steps
        if self.step % config.log_every == 0 or last:
            mean = sum(self._window) / len(self._window)
            self.result.loss_history.append((self.step, mean))
            self._window = []
            logger.info(
                "step %d/%d (epoch %d) loss %.5f lr %.3g",
                self.step,
                self.total_steps,
                self.epoch + 1,
                mean,
                self.optimizer.param_groups[0]["lr"],
            )
        if self.evaluator is not None and (
            end_of_epoch
            or last
            or (config.evaluate_every and self.step % config.evaluate_every == 0)
        ):
            self._evaluate()
        if (
            config.checkpoint_dir is not None
            and config.checkpoint_every
            and self.step % config.checkpoint_every == 0
            and not last
        ):
            self._checkpoint()
        progress = TrainingProgress(
            self.step,
            self.total_steps,
            self.epoch,
            value,
            self.optimizer.param_groups[0]["lr"],
        )
        for callback in callbacks:
            callback(progress)

    # ------------------------------------------------------------------ evaluation

    def _evaluate(self) -> None:
        """Score the dev set on the main process; every process learns the result."""
        metrics = None
        if self.processes.is_main:
            self.loss.eval()
            try:
                metrics = {"step": self.step, **self.evaluator(self.encoder)}
            finally:
                self.loss.train()
        if self.processes.world_size > 1:
            shared = [metrics]
            dist.broadcast_object_list(shared, src=0)
            metrics = shared[0]
        self.result.dev_history.append(metrics)
        score = metrics[self.result.primary_metric]
        logger.info("dev %s at step %d: %.4f", self.result.primary_metric, self.step, score)
        if self.result.best_score is None or score > self.result.best_score:
            self.result.best_score = score
            self.result.best_step = self.step
            self.best_weights = {k: v.detach().clone() for k, v in self.loss.state_dict().items()}

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self) -> None:
        random_states = [_random_state()]
        if self.processes.world_size > 1:
            random_states = [None] * self.processes.world_size
            dist.all_gather_object(random_states, _random_state())
        if not self.processes.is_main:
            return
        directory = Path(self.config.checkpoint_dir)
        name = f"{CHECKPOINT_PREFIX}{self.step:08d}"
        self._last_checkpoint = _write_atomically(
            directory, name, lambda folder: self._write_checkpoint(folder, random_states)
        )
        steps = sorted(
            (p for p in directory.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir()),
            key=lambda p: p.name,
        )
        for old in steps[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    def _write_checkpoint(self, folder: Path, random_states: list[dict]) -> None:
        from safetensors.torch import save_file

        save_file(_plain_tensors(self.loss.state_dict()), folder / MODEL_FILE)
        if self.best_weights is not None:
            # The best weights so far go with every checkpoint, so that a resumed run keeps
            # exactly the best it had at that step.
            save_file(_plain_tensors(self.best_weights), folder / BEST_FILE)
        tensors, optimizer_meta = _optimizer_tensors(self.optimizer.state_dict())
        save_file(tensors, folder / OPTIMIZER_FILE)
        rng_tensors = {}
        for rank, state in enumerate(random_states):
            rng_tensors[f"{rank}.torch"] = state["torch"]
            for index, cuda_state in enumerate(state["cuda"]):
                rng_tensors[f"{rank}.cuda.{index}"] = cuda_state
        save_file(rng_tensors, folder / RNG_FILE)
        state = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "total_steps": self.total_steps,
            "world_size": self.processes.world_size,
            "data_fingerprint": self.examples.fingerprint(),
            "config": config_to_dict(self.config),
            "optimizer": optimizer_meta,
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "random": [
                {"numpy": s["numpy"], "python": s["python"], "cuda_devices": len(s["cuda"])}
                for s in random_states
            ],
            "result": {
                "loss_history": self.result.loss_history,
                "dev_history": self.result.dev_history,
                "best_step": self.result.best_step,
                "best_score": self.result.best_score,
                "window": self._window,
            },
        }
        (folder / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")

    def _restore(self, checkpoint: Path) -> None:
        from safetensors.torch import load_file

        state = json.loads((checkpoint / STATE_FILE).read_text())
        self._check_resumable(checkpoint, state)
        self.loss.load_state_dict(load_file(checkpoint / MODEL_FILE, device=str(self.device)))
        self.optimizer.load_state_dict(
            _optimizer_state(load_file(checkpoint / OPTIMIZER_FILE), state["optimizer"])
        )
        if self.scaler is not None and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        rank = self.processes.rank
        if state["world_size"] == self.processes.world_size:
            rng = load_file(checkpoint / RNG_FILE)
            saved = state["random"][rank]
            _restore_random_state(
                {
                    "torch": rng[f"{rank}.torch"],
                    "cuda": [rng[f"{rank}.cuda.{i}"] for i in range(saved["cuda_devices"])],
                    "numpy": saved["numpy"],
                    "python": saved["python"],
                }
            )
        else:
            logger.warning(
                "%s was written by %d process(es), this run has %d: dropout masks will differ "
                "from an uninterrupted run",
                checkpoint,
                state["world_size"],
                self.processes.world_size,
            )
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        saved_result = state["result"]
        self.result.loss_history = [tuple(entry) for entry in saved_result["loss_history"]]
        self.result.dev_history = saved_result["dev_history"]
        self.result.best_step = saved_result["best_step"]
        self.result.best_score = saved_result["best_score"]
        self.result.resumed_from = self.step
        self._window = saved_result["window"]
        self._last_checkpoint = checkpoint
        if (checkpoint / BEST_FILE).is_file():
            self.best_weights = load_file(checkpoint / BEST_FILE, device=str(self.device))
        logger.info("resumed from %s (step %d)", checkpoint, self.step)

    def _check_resumable(self, checkpoint: Path, state: dict) -> None:
        if state["data_fingerprint"] != self.examples.fingerprint():
            raise ValueError(
                f"{checkpoint} was written for different training data; use another "
                "checkpoint_dir or set resume=false"
            )
        saved, current = state["config"], config_to_dict(self.config)
        changed = [
            key for key in current if key not in _RESUME_FREE and saved.get(key) != current[key]
        ]
        blocking = [key for key in changed if key in _RESUME_MUST_MATCH]
        if blocking:
            details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in blocking)
            raise ValueError(
                f"cannot resume from {checkpoint}: {details} would change the data order; "
                "use another checkpoint_dir or set resume=false"
            )
        if changed:
            logger.warning(
                "resuming from %s with changed settings: %s",
                checkpoint,
                ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed),
            )


class _BatchFeatures:
    """Token ids of every training text (tokenised once, up front) and batch assembly."""

    def __init__(
        self, encoder: SentenceEncoder, examples: ExampleSet, merge: bool, device: torch.device
    ) -> None:
        unique = list(dict.fromkeys(text for column in examples.texts for text in column))
        position = {text: i for i, text in enumerate(unique)}
        self.encoder = encoder
        self.merge = merge
        self.token_ids = encoder.tokenize(unique).input_ids
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
            return [self.encoder.pad(ids) for ids in columns]
        joint = self.encoder.pad([ids for column in columns for ids in column])  # (k·B, T)
        rows = len(indices)
        return [
            {key: tensor[c * rows : (c + 1) * rows] for key, tensor in joint.items()}
            for c in range(len(columns))
        ]

    def targets(self, indices: np.ndarray) -> torch.Tensor | None:
        """Scores or labels of the examples at ``indices``."""
        if self.target_values is None:
            return None
        return self.target_values[torch.from_numpy(indices).to(self.target_values.device)]


def _adamw(loss: nn.Module, config: TrainingConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, without weight decay on biases and norms."""
    no_decay = set()
    for module in loss.modules():
        if isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower():
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    for name, parameter in loss.named_parameters():
        if name.endswith("bias"):
            no_decay.add(id(parameter))
    trainable = [p for p in loss.parameters() if p.requires_grad]
    groups = [
        {
            "params": [p for p in trainable if id(p) not in no_decay],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for p in trainable if id(p) in no_decay], "weight_decay": 0.0},
    ]
    # The fused kernel (CPU and CUDA) is the fastest and what Hugging Face's Trainer uses.
    fused = device.type in ("cpu", "cuda") and all(p.dtype == torch.float32 for p in trainable)
    return torch.optim.AdamW(groups, lr=config.learning_rate, fused=fused or None)


def _autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "float32":
        return None
    if precision == "fp16":
        if device.type != "cuda":
            raise ValueError("precision fp16 needs a CUDA device; on CPU use bf16 or float32")
        return torch.float16
    if precision == "bf16":
        return torch.bfloat16
    raise ValueError(f"unknown precision {precision!r}; valid: float32, bf16, fp16")


def _plain_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies: safetensors refuses views and shared storage."""
    return {name: tensor.detach().cpu().contiguous().clone() for name, tensor in state.items()}
