"""The encoder options, declared once for every command that loads a model. Beam-free.

Two mixins of stage ``Options``:

- :class:`ModelOptions`: how a command that makes vectors loads and runs its model (``sbert
  embed``; ``sbert encode`` and ``sbert eval`` build their flags from the same fields, in
  ``jobs/model_flags.py``, whose ``settings_from_flags`` is this module's
  :func:`encoder_settings` for parsed flags);
- :class:`QueryModelOptions`: a command that encodes queries against an existing index
  (``sbert search``): how the vectors are made is the index's, where the model runs and the
  query prompt are the command's.

:func:`encoder_settings` and :func:`query_encoder_settings` turn them into one
:class:`~sbert_core.inference.encoder_settings.EncoderSettings`, so a flag means the same thing on
every
command: ``--compute-dtype`` is the dtype the model computes in, and ``--dtype`` (where a
command has it) the dtype its output stores.

Imports no torch: ``sbert CMD --help`` builds the parsers from these fields. A stage whose
``Options`` overrides ``check()`` calls ``super().check()`` so that these checks run too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from sbert_pipeline.stage_api.options import OptionError, StageOptions, at_least, option

from sbert_core.model.source import DEFAULT_MODEL

if TYPE_CHECKING:
    from sbert_core.inference.encoder_settings import EncoderSettings

MODEL_GROUP = "model"

# The choices of sbert_core.model.pooling.POOLING_MODES, sbert_core.inference.precision.DTYPE_NAMES
# and sbert_core.inference.compute_paths.BACKENDS, whose modules import torch;
# tests/jobs/test_cli.py and tests/sbert_core/test_openvino_path.py check that these copies stay
# equal to them.
PoolingChoice = Literal["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]
ComputeDtype = Literal["float32", "bfloat16", "float16", "auto", "int8"]
CpuBackend = Literal["torch", "openvino"]
POOLING_CHOICES: tuple[str, ...] = get_args(PoolingChoice)
COMPUTE_DTYPE_CHOICES: tuple[str, ...] = get_args(ComputeDtype)
CPU_BACKEND_CHOICES: tuple[str, ...] = get_args(CpuBackend)

# EncoderSettings field -> the option that sets it.
SETTINGS_FIELDS = {
    "model": "model",
    "device": "device",
    "dtype": "compute_dtype",
    "backend": "cpu_backend",
    "pooling": "pooling",
    "normalize": "normalize",
    "max_seq_length": "max_seq_length",
    "batch_size": "batch_size",
    "token_budget": "token_budget",
    "num_threads": "threads",
    "allow_pickle": "allow_pickle",
    "prompt_name": "prompt_name",
    "prompt": "prompt",
    "truncate_dim": "truncate_dim",
}
# The EncoderSettings fields a query encoder takes from its command; the rest are the index's.
QUERY_SETTINGS_FIELDS = (
    "model",
    "device",
    "num_threads",
    "allow_pickle",
    "prompt_name",
    "prompt",
    "truncate_dim",
)


def _device_option() -> Any:
    return option(help="cpu, cuda, cuda:1 ... (default: cuda if present)", group=MODEL_GROUP)


def _prompt_option() -> Any:
    return option(
        help="a prompt text to prepend instead of a named one ('' for none)",
        metavar="TEXT",
        group=MODEL_GROUP,
        advanced=True,
    )


def _threads_option() -> Any:
    return option(
        help="torch threads for this process (default: torch's choice)",
        group=MODEL_GROUP,
        advanced=True,
    )


def _allow_pickle_option() -> Any:
    return option(
        False,
        "accept pytorch_model.bin weights (unpickling can run code: trusted sources only)",
        group=MODEL_GROUP,
        advanced=True,
    )


def _check_common(options: ModelOptions | QueryModelOptions) -> None:
    """The checks both mixins share: one prompt option at most, positive counts."""
    if options.prompt_name is not None and options.prompt is not None:
        raise OptionError("prompt", "give --prompt-name or --prompt, not both")
    at_least("truncate_dim", options.truncate_dim, 1)
    at_least("threads", options.threads, 1)


@dataclass(frozen=True)
class ModelOptions(StageOptions):
    """The model a command loads and how it encodes (``--model``, ``--compute-dtype``, pooling,
    prompt, truncation, batching, device)."""

    model: str = option(
        DEFAULT_MODEL,
        f"model directory, '{DEFAULT_MODEL}' (bundled, the default) or a Hugging Face Hub id",
        group=MODEL_GROUP,
    )
    device: str | None = _device_option()
    compute_dtype: ComputeDtype = option(
        "float32",
        "dtype the model computes in; float32 matches sentence-transformers exactly; int8 "
        "quantizes the transformer's Linear layers (CPU with VNNI)",
        group=MODEL_GROUP,
    )
    cpu_backend: CpuBackend = option(
        "torch",
        "what runs the transformer on CPU: torch, or openvino (pip install "
        "'sbert-pipeline[openvino]'; faster bfloat16 and int8, inference only)",
        group=MODEL_GROUP,
        advanced=True,
    )
    pooling: PoolingChoice | None = option(
        help="pooling mode (default: the model's)", group=MODEL_GROUP, advanced=True
    )
    normalize: bool | None = option(
        help="L2-normalise (default: as the model does)", group=MODEL_GROUP, advanced=True
    )
    max_seq_length: int | None = option(
        help="tokens per text at most (default: the model's)", group=MODEL_GROUP, advanced=True
    )
    prompt_name: str | None = option(
        help="the model's prompt to prepend to every text, e.g. query or document (default: "
        "the model's default_prompt_name, if any)",
        metavar="NAME",
        group=MODEL_GROUP,
    )
    prompt: str | None = _prompt_option()
    truncate_dim: int | None = option(
        help="keep the first D dimensions (Matryoshka models; default: all)",
        metavar="D",
        group=MODEL_GROUP,
    )
    batch_size: int | None = option(
        help="texts per forward pass (default: by token budget)", group=MODEL_GROUP, advanced=True
    )
    token_budget: int | None = option(
        help="padded tokens per forward pass (default by device)", group=MODEL_GROUP, advanced=True
    )
    threads: int | None = _threads_option()
    allow_pickle: bool = _allow_pickle_option()

    def check(self) -> None:
        """Refuse values no model accepts (the device and the model's own limits are checked
        when the settings are validated and the model inspected)."""
        _check_common(self)
        at_least("max_seq_length", self.max_seq_length, 1)
        at_least("batch_size", self.batch_size, 1)
        at_least("token_budget", self.token_budget, 1)


@dataclass(frozen=True)
class QueryModelOptions(StageOptions):
    """The query encoder of a command that searches an existing index: its model defaults to
    the index's, and how the vectors are made (pooling, normalisation, length) is the index's."""

    model: str | None = option(
        help="the query encoder (default: the model recorded in the index manifest)",
        group=MODEL_GROUP,
    )
    device: str | None = _device_option()
    prompt_name: str | None = option(
        help="the model's prompt to prepend to the queries (default: its 'query' prompt when "
        "the corpus had its 'document' prompt, else the corpus's prompt)",
        metavar="NAME",
        group=MODEL_GROUP,
    )
    prompt: str | None = _prompt_option()
    truncate_dim: int | None = option(
        help="dimensions of the query vectors: only the index's (default: the index's)",
        metavar="D",
        group=MODEL_GROUP,
    )
    threads: int | None = _threads_option()
    allow_pickle: bool = _allow_pickle_option()

    def check(self) -> None:
        """Refuse values no model accepts."""
        _check_common(self)


def encoder_settings(options: ModelOptions, **overrides: Any) -> EncoderSettings:
    """The encoder settings of ``options`` (``overrides``: other EncoderSettings fields, such
    as ``task``)."""
    from sbert_core.inference.encoder_settings import EncoderSettings

    values = {name: getattr(options, field) for name, field in SETTINGS_FIELDS.items()}
    return EncoderSettings(**values, **overrides)


def query_encoder_settings(
    options: QueryModelOptions, manifest: Mapping[str, Any]
) -> EncoderSettings:
    """Settings that encode queries as the embeddings of ``manifest`` were encoded.

    ``model`` (when given) names another copy of the manifest's model; ``device``, ``threads``
    and ``allow_pickle`` say where and how it is loaded; ``prompt_name`` / ``prompt`` the query
    prompt (none given: the caller chooses it); ``truncate_dim``, when given, replaces the
    manifest's (callers refuse one that differs).
    """
    from sbert_core.inference.encoder_settings import EncoderSettings

    values = {name: getattr(options, SETTINGS_FIELDS[name]) for name in QUERY_SETTINGS_FIELDS}
    if values["truncate_dim"] is None:
        del values["truncate_dim"]
    return EncoderSettings.from_manifest(manifest, **values)
