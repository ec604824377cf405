"""One description of how to load and run an encoder, shared by every command and worker.

``sbert embed`` (launcher and Beam workers), ``sbert encode``, ``sbert eval``, ``sbert search``
and ``sbert run`` all build an :class:`EncoderSettings` and ask it to check the model
(:meth:`~EncoderSettings.inspect`), load it (:meth:`~EncoderSettings.load`) and encode with it
(:meth:`~EncoderSettings.encode_kwargs`), so an option given on any of them means the same
thing everywhere. The fields are plain values: the settings pickle with a Beam pipeline and the
worker loads the model the launcher checked.

A new encoder option is a field here plus its name in one group: ``_MODEL_FIELDS`` (what the
vectors are: inspect and load), ``_RUNTIME_FIELDS`` (where the model runs: load) or
``_ENCODE_FIELDS`` (how texts are batched and which prompt is prepended: encode);
tests/jobs/test_embed_settings.py fails while a field is in none. The command-line side is
``pipelines/stage_api/model_options.py`` (the options that fill these fields).

Prompts and Matryoshka truncation are as sentence-transformers': ``prompt_name``/``prompt`` go
to every ``encode`` call (none: the model's ``default_prompt_name``, if any), ``truncate_dim`` to
the load, and with ``normalize=True`` the truncated vectors are normalised again (truncate, then
normalise), as ``encode(normalize_embeddings=True)`` does there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sbert_core.inference.compute_paths import ComputePath, resolve_compute_path
from sbert_core.inference.encoder import SentenceEncoder
from sbert_core.model.info import ModelInfo, inspect_model
from sbert_core.model.pooling import PoolingMode
from sbert_core.model.prompts import PromptTask

# Fields that decide which model is loaded and what its vectors are (inspect and load).
_MODEL_FIELDS = ("allow_pickle", "pooling", "normalize", "max_seq_length", "truncate_dim")
# Fields that only decide where and how fast the model runs (load only).
_RUNTIME_FIELDS = ("device", "dtype", "num_threads", "backend")
# Keyword arguments of ``SentenceEncoder.encode`` / ``encode_detailed``.
_ENCODE_FIELDS = ("batch_size", "token_budget", "prompt_name", "prompt", "task")
# What an embeddings manifest records about the encoder (manifest key -> field); the
# normalisation is read separately (_manifest_normalize) and the prompt is the caller's.
_MANIFEST_FIELDS = {
    "model_id": "model",
    "pooling": "pooling",
    "max_seq_length": "max_seq_length",
    "truncate_dim": "truncate_dim",
}


@dataclass(frozen=True)
class EncoderSettings:
    """Everything needed to load an encoder and embed texts with it the same way everywhere.

    ``None`` means "as the model (or the encoder) does by default".

    Args:
        model: a model directory, ``all-MiniLM-L6-v2`` or a Hugging Face Hub id.
        device: ``cpu``, ``cuda``, ``cuda:1`` ... (default: CUDA when available).
        dtype: compute dtype (``float32`` matches sentence-transformers exactly; ``int8`` is
            the quantized CPU path of :mod:`sbert_core.inference.compute_paths`).
        pooling: override the model's pooling mode.
        normalize: override whether vectors are L2-normalised.
        max_seq_length: override the truncation length (at most the model's limit).
        batch_size: at most this many texts per forward pass.
        token_budget: at most this many padded tokens per forward pass.
        num_threads: torch intra-op threads for the process that loads the model.
        allow_pickle: accept ``pytorch_model.bin`` weights (unpickling can run code).
        prompt_name: one of the model's prompts to prepend to every text (``query``, ...).
        prompt: a prompt text to prepend instead (not with ``prompt_name``).
        task: ``"document"`` or ``"query"`` when neither prompt option is given: the model's
            prompt of that name, as sentence-transformers' ``encode_document`` /
            ``encode_query`` (``sbert embed`` embeds a corpus as documents).
        truncate_dim: keep the first ``truncate_dim`` components (Matryoshka models).
        backend: what runs the transformer on CPU: ``torch`` or ``openvino``
            (:mod:`sbert_core.inference.openvino_path`).

    Example:
        >>> settings = EncoderSettings("all-MiniLM-L6-v2", device="cpu", pooling="cls")
        >>> vectors = settings.load().encode(["a text"], **settings.encode_kwargs())
    """

    model: str
    device: str | None = None
    dtype: str = "float32"
    pooling: PoolingMode | None = None
    normalize: bool | None = None
    max_seq_length: int | None = None
    batch_size: int | None = None
    token_budget: int | None = None
    num_threads: int | None = None
    allow_pickle: bool = False
    prompt_name: str | None = None
    prompt: str | None = None
    truncate_dim: int | None = None
    task: PromptTask | None = None
    backend: str = "torch"

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], **overrides: Any) -> EncoderSettings:
        """The encoder an embeddings manifest was made with, so that queries embed the same way.

        The prompt is not taken over: which prompt queries get is the caller's choice
        (``sbert search`` gives them the model's ``query`` prompt when the corpus had its
        ``document`` one).

        Args:
            manifest: an embeddings ``_manifest.json`` (model_id, pooling, normalized,
                modules, max_seq_length, truncate_dim).
            overrides: other fields (device, num_threads, prompt, ...); ``model=None`` keeps
                the manifest's model, another value names another copy of it (callers check
                the copy is the same model with ``require_compatible``).
        """
        values = {name: manifest.get(key) for key, name in _MANIFEST_FIELDS.items()}
        values["normalize"] = _manifest_normalize(manifest)
        if overrides.get("model") is None:
            overrides.pop("model", None)
        return cls(**{**values, **overrides})

    def validate(self) -> None:
        """Check device, threads and batching on the launcher, before any output is touched.

        The prompt name and truncate_dim are checked against the model by :meth:`inspect`.

        Raises:
            ValueError: a device torch does not know or this machine lacks, threads, a batch
                size, a token budget or a truncate_dim below 1, both a prompt name and a
                prompt text, a compute dtype this machine cannot run (int8 without VNNI or
                off CPU); the message names the option.
        """

        if self.prompt_name is not None and self.prompt is not None:
            raise ValueError("give --prompt-name or --prompt, not both")
        if self.truncate_dim is not None and self.truncate_dim < 1:
            raise ValueError(f"--truncate-dim must be at least 1, got {self.truncate_dim}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"--threads must be at least 1, got {self.num_threads}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"--token-budget must be at least 1, got {self.token_budget}")
        if self.device is not None:
            self._validate_device()
        if self.dtype == "int8" or self.backend != "torch":
            # Checked here, on the machine that launches (and runs, locally) the job, so an
            # unsupported CPU is told before any output is touched.
            self.compute_path()

    def _validate_device(self) -> None:
        import torch

        try:
            device = torch.device(self.device)
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"--device {self.device!r} is not a device torch knows ({err}); use cpu, cuda "
                "or cuda:N"
            ) from None
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"--device {self.device}: CUDA is not available on this machine")
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise ValueError(
                    f"--device {self.device}: this machine has {torch.cuda.device_count()} "
                    "CUDA device(s)"
                )
        elif device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"--device {self.device}: MPS is not available on this machine")
        elif device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"--device {self.device}: unsupported device; use cpu or cuda[:N]")

    def inspect(self) -> ModelInfo:
        """Check the model's files and read its config without loading weights (launcher side).

        :meth:`describe` of the result is what manifests record.

        Raises:
            ModelLoadError: as ``inspect_model``.
            ValueError: as ``inspect_model``, or a prompt name the model does not have.
        """
        info = inspect_model(self.model, **self._values(_MODEL_FIELDS))
        self.describe(info)  # an unknown prompt name fails here, before any work
        return info

    def describe(self, model: ModelInfo | SentenceEncoder) -> dict:
        """What manifests record about vectors these settings make with ``model`` (inspected or
        loaded with them): the pooling, normalisation, length, prompt (name and text) and
        dimensions chosen, not only the model's defaults.

        A loaded encoder also names the compute path that ran (``compute``: path, quantizer,
        CPU features); an inspected model gets the path these settings resolve to here.

        Raises:
            ValueError: a prompt name the model does not have, or both a name and a text.
        """
        description = model.describe(
            prompt_name=self.prompt_name,
            prompt=self.prompt,
            task=self.task,
            normalize=self.normalize,
        )
        if "compute" not in description:
            # A device or dtype this machine cannot run: validate() refuses it, naming the
            # stage's option, before anything runs; the description is only left without it.
            with contextlib.suppress(ValueError):
                description["compute"] = self.compute_path().describe()["compute"]
        return description

    def compute_path(self) -> ComputePath:
        """The dtype path these settings run on this machine (``auto`` resolved).

        Raises:
            ValueError: as :func:`~sbert_core.inference.compute_paths.resolve_compute_path`.
        """
        import torch

        if self.device is not None:
            self._validate_device()  # a ValueError naming the option, not torch's RuntimeError
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return resolve_compute_path(self.dtype, torch.device(device), self.backend)

    def load(self) -> SentenceEncoder:
        """Load the encoder these settings describe (on the compute path they resolve to)."""
        runtime = self._values(_RUNTIME_FIELDS)
        del runtime["backend"]  # resolved into the compute path
        if self.backend != "torch":
            runtime["dtype"] = self.compute_path()
        return SentenceEncoder.load(self.model, **self._values(_MODEL_FIELDS), **runtime)

    def encode_kwargs(self) -> dict[str, Any]:
        """The batching and prompt options that were set, as keyword arguments of ``encode``.

        Options left at ``None`` are left out, so the encoder's own defaults apply (the model's
        default prompt, if it names one). ``normalize=True`` is passed on as well when vectors
        are truncated, so that they are normalised after truncation, as in sentence-transformers.
        """
        values = self._values(_ENCODE_FIELDS)
        if self.normalize and self.truncate_dim is not None:
            values["normalize"] = True
        return {name: value for name, value in values.items() if value is not None}

    def _values(self, names: tuple[str, ...]) -> dict[str, Any]:
        return {name: getattr(self, name) for name in names}


def _manifest_normalize(manifest: Mapping[str, Any]) -> bool | None:
    """The ``normalize`` setting that made a manifest's vectors.

    ``normalized`` says whether the stored vectors are unit length. Truncated vectors of a model
    ending in Normalize are not, though its chain keeps the module (None); the chain is in
    ``modules``. Without truncation both readings agree.
    """
    normalized = manifest.get("normalized")
    if normalized or manifest.get("truncate_dim") is None or "modules" not in manifest:
        return normalized
    return None if "Normalize" in manifest["modules"] else False
