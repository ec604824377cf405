"""Command-line options shared by every command that loads an encoder."""

from __future__ import annotations

import argparse

from sbert_core import DEFAULT_MODEL, SentenceEncoder
from sbert_core.pooling import POOLING_MODES
from sbert_core.precision import DTYPE_NAMES


def add_model_arguments(parser: argparse.ArgumentParser, *, dtype_flag: str = "--dtype") -> None:
    """Add ``--model``, the compute dtype, batching and device options to ``parser``.

    ``dtype_flag`` renames the compute-dtype option where ``--dtype`` means something else
    (``sbert embed --dtype`` is the stored embedding dtype).
    """
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"model directory, '{DEFAULT_MODEL}' (bundled, the default) or a Hugging Face Hub id",
    )
    group.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if present)"
    )
    group.add_argument(
        dtype_flag,
        dest="compute_dtype",
        default="float32",
        choices=DTYPE_NAMES,
        help="compute dtype; float32 matches sentence-transformers exactly (default)",
    )
    group.add_argument("--pooling", default=None, choices=POOLING_MODES, help="override pooling")
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


def load_encoder(args: argparse.Namespace, normalize: bool | None = None) -> SentenceEncoder:
    """Load the encoder the parsed options describe."""
    return SentenceEncoder.load(
        args.model,
        device=args.device,
        dtype=args.compute_dtype,
        pooling=args.pooling,
        normalize=normalize,
        max_seq_length=args.max_seq_length,
        allow_pickle=args.allow_pickle,
        num_threads=args.threads,
    )


def encode_kwargs(args: argparse.Namespace) -> dict:
    """Batching options for ``SentenceEncoder.encode``."""
    return {"batch_size": args.batch_size, "token_budget": args.token_budget}
