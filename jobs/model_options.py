"""Command-line options shared by every command that loads an encoder.

Every command adds them with :func:`add_model_arguments` and turns the parsed values into one
:class:`~sbert_core.encoder_settings.EncoderSettings` with :func:`encoder_settings` (or
:func:`query_encoder_settings` for ``sbert search``, whose model settings come from the index),
so a flag means the same thing on every command.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from sbert_core import DEFAULT_MODEL
from sbert_core.encoder_settings import EncoderSettings
from sbert_core.pooling import POOLING_MODES
from sbert_core.precision import DTYPE_NAMES

# EncoderSettings field -> the argparse destination of its option.
_DESTS = {
    "model": "model",
    "device": "device",
    "dtype": "compute_dtype",
    "pooling": "pooling",
    "normalize": "normalize",
    "max_seq_length": "max_seq_length",
    "batch_size": "batch_size",
    "token_budget": "token_budget",
    "num_threads": "threads",
    "allow_pickle": "allow_pickle",
}
# The options of a command that encodes queries for an existing index (``sbert search``): how
# the vectors are made is the index's, only where the model runs is the command's.
_QUERY_FIELDS = ("model", "device", "num_threads", "allow_pickle")


def add_model_arguments(
    parser: argparse.ArgumentParser,
    *,
    dtype_flag: str = "--dtype",
    normalize: bool = False,
    query_only: bool = False,
) -> None:
    """Add ``--model``, the compute dtype, pooling, batching and device options to ``parser``.

    Args:
        parser: the command's parser; the options form its "model" group.
        dtype_flag: renames the compute-dtype option where ``--dtype`` means something else
            (``sbert embed --dtype`` is the stored embedding dtype).
        normalize: also add ``--normalize/--no-normalize`` (commands that write vectors).
        query_only: only ``--model`` (default: the index's), ``--device``, ``--threads`` and
            ``--allow-pickle``, for commands that encode queries against an existing index.
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
            dtype_flag,
            dest="compute_dtype",
            default="float32",
            choices=DTYPE_NAMES,
            help="compute dtype; float32 matches sentence-transformers exactly (default)",
        )
        group.add_argument(
            "--pooling", default=None, choices=POOLING_MODES, help="override pooling"
        )
        if normalize:
            group.add_argument(
                "--normalize",
                action=argparse.BooleanOptionalAction,
                default=None,
                help="L2-normalise (default: as the model does)",
            )
        group.add_argument(
            "--max-seq-length", type=int, default=None, help="override truncation length"
        )
        group.add_argument("--batch-size", type=int, default=None, help="texts per forward pass")
        group.add_argument(
            "--token-budget",
            type=int,
            default=None,
            help="padded tokens per forward pass (default by device)",
        )
    group.add_argument("--threads", type=int, default=None, help="torch threads for this process")
    group.add_argument(
        "--allow-pickle",
        action="store_true",
        help="accept pytorch_model.bin weights (unpickling can run code: trusted sources only)",
    )


def encoder_settings(args: argparse.Namespace) -> EncoderSettings:
    """The encoder settings of options added by :func:`add_model_arguments`.

    Options a command does not have (``--normalize`` on ``sbert eval``) keep their defaults.
    """
    values = {name: getattr(args, dest) for name, dest in _DESTS.items() if hasattr(args, dest)}
    return EncoderSettings(**values)


def query_encoder_settings(
    args: argparse.Namespace, manifest: Mapping[str, Any]
) -> EncoderSettings:
    """Settings that encode queries as the embeddings of ``manifest`` were encoded.

    ``--model`` (when given) names another copy of the manifest's model; ``--device``,
    ``--threads`` and ``--allow-pickle`` say where and how it is loaded.
    """
    values = {name: getattr(args, _DESTS[name]) for name in _QUERY_FIELDS}
    return EncoderSettings.from_manifest(manifest, **values)
