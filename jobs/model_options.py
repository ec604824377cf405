"""Command-line options shared by every command that loads an encoder.

Every command adds them with :func:`add_model_arguments` and turns the parsed values into one
:class:`~sbert_core.encoder_settings.EncoderSettings` with :func:`encoder_settings` (or
:func:`query_encoder_settings` for ``sbert search``, whose model settings come from the index),
so a flag means the same thing on every command: ``--compute-dtype`` is the dtype the model
computes in, and ``--dtype`` (where a command has it) the dtype its output stores.

This module imports no torch: ``sbert CMD --help`` builds the parsers from it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sbert_core.model_source import DEFAULT_MODEL

if TYPE_CHECKING:
    from sbert_core.encoder_settings import EncoderSettings

# The choices of sbert_core.pooling.POOLING_MODES and sbert_core.precision.DTYPE_NAMES, which
# import torch; tests/jobs/test_cli.py checks that these copies stay equal to them.
POOLING_CHOICES: tuple[str, ...] = (
    "cls",
    "max",
    "mean",
    "mean_sqrt_len_tokens",
    "weightedmean",
    "lasttoken",
)
COMPUTE_DTYPE_CHOICES: tuple[str, ...] = ("float32", "bfloat16", "float16", "auto", "int8")
# sbert_core.compute_paths.BACKENDS (checked equal in tests/sbert_core/test_openvino_path.py).
CPU_BACKEND_CHOICES: tuple[str, ...] = ("torch", "openvino")

# EncoderSettings field -> the argparse destination of its option.
_DESTS = {
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
# The options of a command that encodes queries for an existing index (``sbert search``): how
# the vectors are made is the index's; where the model runs, and the query prompt, are the
# command's (``--truncate-dim`` there may only repeat the index's).
_QUERY_FIELDS = (
    "model",
    "device",
    "num_threads",
    "allow_pickle",
    "prompt_name",
    "prompt",
    "truncate_dim",
)


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's destination, hidden from
    ``--help``, with a one-line warning on stderr naming the new spelling."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated; use {self.new}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_model_arguments(
    parser: argparse.ArgumentParser,
    *,
    old_dtype_flag: bool = False,
    normalize: bool = False,
    query_only: bool = False,
) -> None:
    """Add ``--model``, ``--compute-dtype``, pooling, prompt, truncation, batching and device
    options to ``parser``.

    Args:
        parser: the command's parser; the options form its "model" group.
        old_dtype_flag: also accept ``--dtype`` for the compute dtype, with a deprecation
            warning (commands whose ``--dtype`` meant the compute dtype before; no command
            that stores vectors in a chosen dtype may set it).
        normalize: also add ``--normalize/--no-normalize`` (commands that write vectors).
        query_only: only ``--model`` (default: the index's), ``--device``, ``--threads``,
            ``--allow-pickle``, the query prompt and ``--truncate-dim`` (the index's), for
            commands that encode queries against an existing index.
    """
    group = parser.add_argument_group("model")
    if query_only:
        group.add_argument(
            "--model",
            default=None,
            help="the query encoder (default: the model recorded in the index manifest)",
        )
    else:
        group.add_argument(
            "--model",
            default=DEFAULT_MODEL,
            help=f"model directory, '{DEFAULT_MODEL}' (bundled, the default) or a Hugging Face "
            "Hub id",
        )
    group.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if present)"
    )
    if not query_only:
        group.add_argument(
            "--compute-dtype",
            dest="compute_dtype",
            default="float32",
            choices=COMPUTE_DTYPE_CHOICES,
            help="dtype the model computes in; float32 matches sentence-transformers exactly; "
            "int8 quantizes the transformer's Linear layers (CPU with VNNI)",
        )
        group.add_argument(
            "--cpu-backend",
            dest="cpu_backend",
            default="torch",
            choices=CPU_BACKEND_CHOICES,
            help="what runs the transformer on CPU: torch, or openvino (pip install "
            "'sbert-pipeline[openvino]'; faster bfloat16 and int8, inference only)",
        )
        if old_dtype_flag:
            group.add_argument(
                "--dtype",
                dest="compute_dtype",
                choices=COMPUTE_DTYPE_CHOICES,
                action=DeprecatedAlias,
                new="--compute-dtype",
            )
        group.add_argument(
            "--pooling",
            default=None,
            choices=POOLING_CHOICES,
            help="pooling mode (default: the model's)",
        )
        if normalize:
            group.add_argument(
                "--normalize",
                action=argparse.BooleanOptionalAction,
                default=None,
                help="L2-normalise (default: as the model does)",
            )
        group.add_argument(
            "--max-seq-length",
            type=int,
            default=None,
            help="tokens per text at most (default: the model's)",
        )
    _add_prompt_arguments(group, query_only=query_only)
    if not query_only:
        group.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="texts per forward pass (default: by token budget)",
        )
        group.add_argument(
            "--token-budget",
            type=int,
            default=None,
            help="padded tokens per forward pass (default by device)",
        )
    group.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for this process (default: torch's choice)",
    )
    group.add_argument(
        "--allow-pickle",
        action="store_true",
        help="accept pytorch_model.bin weights (unpickling can run code: trusted sources only)",
    )


def _add_prompt_arguments(group, *, query_only: bool) -> None:
    """``--prompt-name``, ``--prompt`` and ``--truncate-dim`` (sentence-transformers' own)."""
    if query_only:
        name_help = (
            "the model's prompt to prepend to the queries (default: its 'query' prompt when the "
            "corpus had its 'document' prompt, else the corpus's prompt)"
        )
        dim_help = "dimensions of the query vectors: only the index's (default: the index's)"
    else:
        name_help = (
            "the model's prompt to prepend to every text, e.g. query or document (default: the "
            "model's default_prompt_name, if any)"
        )
        dim_help = "keep the first D dimensions (Matryoshka models; default: all)"
    prompts = group.add_mutually_exclusive_group()
    prompts.add_argument("--prompt-name", metavar="NAME", default=None, help=name_help)
    prompts.add_argument(
        "--prompt",
        metavar="TEXT",
        default=None,
        help="a prompt text to prepend instead of a named one ('' for none)",
    )
    group.add_argument("--truncate-dim", metavar="D", type=int, default=None, help=dim_help)


def encoder_settings(args: argparse.Namespace) -> EncoderSettings:
    """The encoder settings of options added by :func:`add_model_arguments`.

    Options a command does not have (``--normalize`` on ``sbert eval``) keep their defaults.
    """
    from sbert_core.encoder_settings import EncoderSettings

    values = {name: getattr(args, dest) for name, dest in _DESTS.items() if hasattr(args, dest)}
    return EncoderSettings(**values)


def query_encoder_settings(
    args: argparse.Namespace, manifest: Mapping[str, Any]
) -> EncoderSettings:
    """Settings that encode queries as the embeddings of ``manifest`` were encoded.

    ``--model`` (when given) names another copy of the manifest's model; ``--device``,
    ``--threads`` and ``--allow-pickle`` say where and how it is loaded; ``--prompt-name`` /
    ``--prompt`` the query prompt (none given: the caller chooses it); ``--truncate-dim``, when
    given, replaces the manifest's (callers refuse one that differs).
    """
    from sbert_core.encoder_settings import EncoderSettings

    values = {name: getattr(args, _DESTS[name]) for name in _QUERY_FIELDS}
    if values["truncate_dim"] is None:
        del values["truncate_dim"]
    return EncoderSettings.from_manifest(manifest, **values)
