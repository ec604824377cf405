"""Reading and writing the sentence-transformers model directory format.

A directory is either a sentence-transformers model (``modules.json`` naming a chain of
Transformer -> Pooling -> any of Dense, LayerNorm, Normalize, Dropout; see
:mod:`sbert_core.model.module_chain`) or a plain Hugging Face encoder (``config.json`` plus
weights), which gets MEAN pooling, the paper's default. Only those module types are accepted: code
named by a model folder is never imported, and pickle weights are refused unless allowed.
Every path a model folder names (module folders in ``modules.json``, shards in a sharded-weight
index) must stay inside the folder: no absolute paths, no ``..``, no symlink out of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from sbert_core.errors import ModelLoadError
from sbert_core.model.json_files import read_json_object
from sbert_core.model.module_chain import HeadEntry, read_module_chain
from sbert_core.model.pooling import PoolingConfig
from sbert_core.model.prompts import PromptSettings
from sbert_core.model.safetensors_header import check_safetensors, safetensors_header

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
MANIFEST_FILE = "sbert_manifest.json"


@dataclass(frozen=True)
class ModelLayout:
    """Where the parts of a model live and what its sentence-transformers config says.

    Attributes:
        root: the model directory.
        transformer_dir: folder holding ``config.json``, weights and tokenizer files.
        pooling: pooling config, or None for a plain Hugging Face encoder (caller picks MEAN).
        heads: the modules after Pooling (Dense, LayerNorm, Normalize, Dropout), in order.
        max_seq_length: from ``sentence_bert_config.json``; None means "use the tokenizer's".
        do_lower_case: lower-case texts before tokenising.
        is_sentence_transformer: True when ``modules.json`` was found.
        prompts: the prompts of ``config_sentence_transformers.json``.
        padding_side: a tokenizer override from ``sentence_bert_config.json``, else None.
    """

    root: Path
    transformer_dir: Path
    pooling: PoolingConfig | None
    heads: tuple[HeadEntry, ...]
    max_seq_length: int | None
    do_lower_case: bool
    is_sentence_transformer: bool
    prompts: PromptSettings = field(default_factory=PromptSettings)
    padding_side: str | None = None

    @property
    def normalize(self) -> bool:
        """Whether a Normalize module ends the chain."""
        return bool(self.heads) and self.heads[-1].kind == "normalize"


def is_sentence_transformers_folder(root: Path) -> bool:
    """Whether ``root`` is a sentence-transformers folder (``modules.json``) rather than a plain
    Hugging Face one (``config.json`` only).

    Raises:
        ModelLoadError: ``root`` has neither.
    """
    if (root / "modules.json").is_file():
        return True
    if not (root / "config.json").is_file():
        raise ModelLoadError(
            f"{root} is not a model directory: it has neither modules.json "
            "(sentence-transformers) nor config.json (Hugging Face)"
        )
    return False


def read_layout(root: Path) -> ModelLayout:
    """Inspect a model directory without loading weights.

    Raises:
        ModelLoadError: naming the file that is missing, unreadable or unsupported.
    """
    if not is_sentence_transformers_folder(root):
        # sentence-transformers reads no sentence-transformers config from a plain folder.
        return ModelLayout(root, root, None, (), None, False, is_sentence_transformer=False)

    chain = read_module_chain(root, inside_model_dir)
    try:
        pooling = PoolingConfig.load(chain.pooling_dir / "config.json")
    except ValueError as err:
        raise ModelLoadError(str(err)) from err
    return ModelLayout(
        root=root,
        transformer_dir=chain.transformer_dir,
        pooling=pooling,
        heads=chain.heads,
        max_seq_length=chain.settings.max_seq_length,
        do_lower_case=chain.settings.do_lower_case,
        is_sentence_transformer=True,
        prompts=PromptSettings.read(root),
        padding_side=chain.settings.padding_side,
    )


def weight_files(transformer_dir: Path, allow_pickle: bool = False) -> list[Path]:
    """The weight files ``from_pretrained`` will read, after checking they are intact.

    Safetensors files are checked for a complete header and data section, so a truncated
    download fails here, naming the file, before any model code runs.

    Raises:
        ModelLoadError: no weights, corrupt weights, or pickle weights without ``allow_pickle``.
    """
    single = transformer_dir / SAFETENSORS_FILE
    index = transformer_dir / SAFETENSORS_INDEX
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{index}: no weight_map naming the shard files")
        shard_names = sorted(set(map(str, weight_map.values())))
        files = [inside_model_dir(transformer_dir, name, index) for name in shard_names]
    else:
        pickles = [
            transformer_dir / name for name in PICKLE_FILES if (transformer_dir / name).is_file()
        ]
        if not pickles:
            raise ModelLoadError(
                f"{transformer_dir}: no {SAFETENSORS_FILE} (or sharded index) found"
            )
        if not allow_pickle:
            raise ModelLoadError(
                f"{pickles[0]}: pickle weights can execute code when loaded and are refused; "
                "convert the model to safetensors, or pass allow_pickle=True "
                "(--allow-pickle) if you trust its source"
            )
        return pickles
    for path in files:
        check_safetensors(path)
    return files


def inside_model_dir(root: Path, relative: str, named_in: Path) -> Path:
    """``root / relative``, refused unless it stays inside the model folder.

    The folder is ``root`` itself, or for a Hugging Face cache snapshot
    (``models--org--name/snapshots/REV``) the repository's cache folder, whose ``blobs/`` the
    snapshot's files link to.

    Raises:
        ModelLoadError: ``relative`` is absolute, climbs with ``..``, or resolves (through a
            symlink) outside the folder; the message names ``named_in``.
    """
    pure = [PurePosixPath(relative), PureWindowsPath(relative)]
    if any(p.is_absolute() or p.drive or p.root or ".." in p.parts for p in pure):
        raise ModelLoadError(
            f"{named_in}: path {relative!r} leaves the model folder {root} (only relative paths "
            "inside it are allowed)"
        )
    path = root / relative
    boundary = _model_boundary(root)
    resolved = path.resolve()
    if resolved != boundary and boundary not in resolved.parents:
        raise ModelLoadError(
            f"{named_in}: path {relative!r} resolves to {resolved}, outside the model folder "
            f"{root} (a symlink out of the folder?)"
        )
    return path


def _model_boundary(root: Path) -> Path:
    resolved = root.resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith("models--"):
        return resolved.parent.parent
    return resolved


def safetensors_tensors(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Every tensor named in the headers of ``files``: ``{name: (file, shape)}``.

    Raises:
        ModelLoadError: a corrupt file, or a tensor named in two files.
    """
    tensors: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for path in files:
        for name, info in safetensors_header(path).items():
            if name == "__metadata__":
                continue
            if name in tensors:
                raise ModelLoadError(
                    f"{path}: tensor {name!r} is also in {tensors[name][0]} (which one is meant?)"
                )
            tensors[name] = (path, tuple(int(n) for n in info.get("shape", ())))
    return tensors


def sha256_of_files(paths: list[Path]) -> str:
    """SHA-256 over the bytes of ``paths`` in order (one file: that file's usual digest)."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
