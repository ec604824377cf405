"""Training checkpoints: everything a killed run needs to go on as if it had not stopped.

A checkpoint is a folder ``step-NNNNNNNN`` holding the model (and loss head), the best weights so
far, the optimizer, every process's random state (safetensors) and the position in the data, the
gradient scaler and the run's history (``trainer_state.json``). No pickle. A folder is written
under a temporary name and renamed, so it exists whole or not at all. A checkpoint is read only
once every file is verified (:func:`verify_checkpoint`): a damaged one, whether cut short on disk
or holding NaN weights, is refused with a line naming its file, never resumed from or reported
as good.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sbert_core.errors import ModelLoadError
from sbert_core.model.safetensors_header import check_safetensors
from sbert_core.model.weight_checks import check_finite_weights

CHECKPOINT_PREFIX = "step-"
BEST_FILE = "best.safetensors"
STATE_FILE = "trainer_state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
# The trainer_state.json keys a resume reads.
STATE_KEYS = (
    "step",
    "epoch",
    "batch_in_epoch",
    "world_size",
    "data_fingerprint",
    "config",
    "scaler",
    "result",
    "optimizer",
    "random",
)
# Changing these would change which examples a resumed run has already seen.
RESUME_MUST_MATCH = ("batch_size", "seed")
# These never change what is trained.
RESUME_FREE = (
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


def write_checkpoint(
    directory: str | os.PathLike,
    step: int,
    *,
    weights: dict[str, torch.Tensor],
    best_weights: dict[str, torch.Tensor] | None,
    optimizer_state: dict,
    random_states: list[dict],
    state: dict,
    keep: int,
) -> Path:
    """Write the checkpoint of ``step`` into ``directory``; keep only the newest ``keep``.

    Args:
        weights: the loss module's state dict (the encoder and any head).
        best_weights: the best weights so far, or None before the first evaluation.
        optimizer_state: ``optimizer.state_dict()``.
        random_states: :func:`random_state` of every process, by rank.
        state: the position in the data and the run's history, as JSON values; stored in
            ``trainer_state.json`` together with the optimizer's and generators' plain values.

    Returns:
        The checkpoint folder.
    """
    directory = Path(directory)

    def write_files(folder: Path) -> None:
        from safetensors.torch import save_file

        save_file(_plain_tensors(weights), folder / MODEL_FILE)
        if best_weights is not None:
            # The best weights so far go with every checkpoint, so that a resumed run keeps
            # exactly the best it had at that step.
            save_file(_plain_tensors(best_weights), folder / BEST_FILE)
        tensors, optimizer_meta = _optimizer_tensors(optimizer_state)
        save_file(tensors, folder / OPTIMIZER_FILE)
        rng_tensors = {}
        for rank, generators in enumerate(random_states):
            rng_tensors[f"{rank}.torch"] = generators["torch"]
            for index, cuda_state in enumerate(generators["cuda"]):
                rng_tensors[f"{rank}.cuda.{index}"] = cuda_state
        save_file(rng_tensors, folder / RNG_FILE)
        plain = {
            **state,
            "optimizer": optimizer_meta,
            "random": [
                {"numpy": s["numpy"], "python": s["python"], "cuda_devices": len(s["cuda"])}
                for s in random_states
            ],
        }
        (folder / STATE_FILE).write_text(json.dumps(plain, indent=1) + "\n")

    folder = _write_atomically(directory, f"{CHECKPOINT_PREFIX}{step:08d}", write_files)
    steps = sorted(
        (p for p in directory.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir()),
        key=lambda p: p.name,
    )
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder opened to resume from; its tensors are read when asked for.

    Attributes:
        path: the ``step-NNNNNNNN`` folder.
        state: its ``trainer_state.json``: position, config, history, optimizer hyper-parameters.
    """

    path: Path
    state: dict

    @classmethod
    def open(cls, path: str | os.PathLike) -> Checkpoint:
        """Verify the checkpoint at ``path`` and read its state.

        Raises:
            ValueError: a damaged file, named (see :func:`verify_checkpoint`).
        """
        path = Path(path)
        return cls(path, verify_checkpoint(path))

    def check_resumable(self, fingerprint: str, config: dict) -> list[str]:
        """Check that a run on data ``fingerprint`` with ``config`` may continue from here.

        Returns:
            The changed settings that do not stop a resume, as ``"key: old -> new"``.

        Raises:
            ValueError: other training data, or a changed setting that decides the data order.
        """
        if self.state["data_fingerprint"] != fingerprint:
            raise ValueError(
                f"{self.path} was written for different training data; use another "
                "checkpoint_dir or set resume=false"
            )
        saved = self.state["config"]
        changed = [
            key for key in config if key not in RESUME_FREE and saved.get(key) != config[key]
        ]
        blocking = [key for key in changed if key in RESUME_MUST_MATCH]
        if blocking:
            details = ", ".join(f"{k}: {saved.get(k)!r} -> {config[k]!r}" for k in blocking)
            raise ValueError(
                f"cannot resume from {self.path}: {details} would change the data order; "
                "use another checkpoint_dir or set resume=false"
            )
        return [f"{k}: {saved.get(k)!r} -> {config[k]!r}" for k in changed]

    def weights(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The loss module's state dict at this step, on ``device``."""
        from safetensors.torch import load_file

        return load_file(self.path / MODEL_FILE, device=str(device))

    def best_weights(self, device: torch.device) -> dict[str, torch.Tensor] | None:
        """The best weights up to this step, or None when no evaluation had run."""
        from safetensors.torch import load_file

        path = self.path / BEST_FILE
        return load_file(path, device=str(device)) if path.is_file() else None

    def optimizer_state(self) -> dict:
        """A state dict for ``optimizer.load_state_dict``."""
        from safetensors.torch import load_file

        return _optimizer_state(load_file(self.path / OPTIMIZER_FILE), self.state["optimizer"])

    def random_state(self, rank: int) -> dict:
        """Process ``rank``'s random generators, for :func:`restore_random_state`."""
        from safetensors.torch import load_file

        tensors = load_file(self.path / RNG_FILE)
        saved = self.state["random"][rank]
        return {
            "torch": tensors[f"{rank}.torch"],
            "cuda": [tensors[f"{rank}.cuda.{i}"] for i in range(saved["cuda_devices"])],
            "numpy": saved["numpy"],
            "python": saved["python"],
        }


def verify_checkpoint(folder: str | os.PathLike) -> dict:
    """Check every file of the checkpoint ``folder``; its ``trainer_state.json`` if all is well.

    The state must be a JSON object with the keys a resume reads, and each safetensors file
    complete with finite values (the weights and optimizer moments a resume would carry on
    from; the random states are integers).

    Raises:
        ValueError: one line naming the first damaged file and what to do.
    """
    folder = Path(folder)
    state = _read_state(folder / STATE_FILE)
    for name in (MODEL_FILE, BEST_FILE, OPTIMIZER_FILE, RNG_FILE):
        path = folder / name
        if name == BEST_FILE and not path.exists():
            continue  # written only once the dev set was scored
        if not path.is_file():
            raise ValueError(_damaged(path, "missing"))
        try:
            check_safetensors(path)
        except ModelLoadError as err:
            raise ValueError(_damaged(path, "truncated or not safetensors")) from err
        try:
            check_finite_weights(path)
        except ModelLoadError as err:
            raise ValueError(_damaged(path, "NaN or infinite values")) from err
    return state


def non_finite_tensor(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first tensor holding a NaN or infinite value, or None."""
    return next(
        (
            name
            for name, tensor in tensors.items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
        ),
        None,
    )


def _read_state(path: Path) -> dict:
    """``trainer_state.json``, checked to hold what a resume reads."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(_damaged(path, "truncated or not JSON")) from err
    if not isinstance(state, dict):
        raise ValueError(_damaged(path, "not a JSON object"))
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise ValueError(_damaged(path, f"no {missing[0]!r}"))
    return state


def _damaged(path: Path, reason: str) -> str:
    """The one line that names a damaged checkpoint file and what to do about it."""
    return (
        f"{path} is damaged ({reason}): delete the checkpoint folder {path.parent} and run "
        "again to resume from an earlier checkpoint, or set resume=false to start over"
    )


def random_state() -> dict:
    """This process's random generators: torch (CPU and CUDA), numpy and Python."""
    numpy_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }


def restore_random_state(state: dict) -> None:
    """Set this process's random generators to a state from :func:`random_state`."""
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
    """The inverse of :func:`_optimizer_tensors`."""
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


def _plain_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies: safetensors refuses views and shared storage."""
    return {name: tensor.detach().cpu().contiguous().clone() for name, tensor in state.items()}
