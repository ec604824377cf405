"""Options of the verify stage (``sbert verify``, ``sbert run``'s ``verify:``, ``verify.Options``).

Beam-free, torch-free and numpy-free: the command line is generated from these fields
(``jobs/options_cli.py``), and ``--help`` loads no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sbert_pipeline.stage_api.model_options import MODEL_GROUP, ComputeDtype, CpuBackend
from sbert_pipeline.stage_api.options import OptionError, StageOptions, at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    beam_options_option,
    output_option,
    overwrite_option,
    verify_option,
)

from sbert_core.tabular import FORMATS

# Pairs per forward pass: sentence-transformers' CrossEncoder.predict default.
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class Options(StageOptions):
    """Score the candidate pairs of sbert pairs with a cross-encoder, so that sbert dedup
    groups them by the verified score (retrieve, then verify). The output is a pairs folder."""

    INPUT_OPTIONS = ("pairs", "corpus", "model")
    DOCS = ("docs/verify.md",)

    pairs: str = option(
        help="an sbert pairs output directory (written with --threshold)",
        required=True,
        metavar="DIR",
    )
    model: str = option(
        help="a cross-encoder folder (sentence-transformers CrossEncoder, or sbert finetune "
        "with kind: cross_encoder)",
        required=True,
        metavar="DIR",
        group=MODEL_GROUP,
    )
    output: str = output_option("verified pairs output directory (a pairs folder)")
    band: tuple[float, ...] | None = option(
        help="score only the pairs whose cosine lies in [LOW, HIGH); pairs at or above HIGH "
        "get score 1.0, pairs below LOW score 0.0, unscored (default: score every pair)",
        metavar=("LOW", "HIGH"),
        cli={"nargs": 2, "action": "store", "default": None},
    )
    corpus: str | None = option(
        help="the corpus files (a glob, read as the embed job read them) to take the texts "
        "from, by id (default: the texts the embeddings hold: kept with --keep-text, or the "
        "text field of own vectors)",
        metavar="GLOB",
    )
    id_field: str | None = option(
        help="corpus id field (default: as the embed job read it; needed for pairs of own vectors)",
        metavar="FIELD",
    )
    text_field: str | None = option(
        help="corpus text field (default: as the embed job)", metavar="FIELD"
    )
    format: str | None = option(
        help="corpus format (default: as the embed job)", cli={"choices": FORMATS}
    )
    device: str | None = option(
        help="cpu, cuda, cuda:1 ... (default: cuda if present)", group=MODEL_GROUP
    )
    compute_dtype: ComputeDtype = option(
        "float32",
        "dtype the cross-encoder computes in; float32 matches sentence-transformers",
        group=MODEL_GROUP,
        advanced=True,
    )
    cpu_backend: CpuBackend = option(
        "torch",
        "what runs the cross-encoder on CPU: torch or openvino",
        group=MODEL_GROUP,
        advanced=True,
    )
    batch_size: int = option(
        DEFAULT_BATCH_SIZE,
        f"pairs per forward pass (default {DEFAULT_BATCH_SIZE})",
        group=MODEL_GROUP,
    )
    threads: int | None = option(
        help="torch threads per worker process (default: torch's choice)",
        group=MODEL_GROUP,
        advanced=True,
    )
    allow_pickle: bool = option(
        False,
        "accept pytorch_model.bin weights (unpickling can run code: trusted sources only)",
        group=MODEL_GROUP,
        advanced=True,
    )
    max_length: int | None = option(
        help="tokens per pair at most, special tokens included (default: the model's)",
        group=MODEL_GROUP,
        advanced=True,
    )
    overwrite: bool = overwrite_option()
    verify: bool = verify_option()
    beam_options: Any = beam_options_option()

    def check(self) -> None:
        """Refuse values that cannot work, before any input is read."""
        if self.band is not None:
            if len(self.band) != 2:
                raise OptionError("band", f"give two cosines, LOW and HIGH, got {list(self.band)}")
            low, high = self.band
            for value in (low, high):  # cosines
                in_range("band", value, -1.0, 1.0)
            if low > high:
                raise OptionError("band", f"LOW {low:g} is above HIGH {high:g}")
        for name in ("id_field", "text_field", "format"):  # they say how --corpus is read
            if getattr(self, name) is not None and self.corpus is None:
                raise OptionError(name, "says how the corpus is read; give --corpus GLOB too")
        if self.format is not None and self.format not in FORMATS:
            raise OptionError("format", f"must be one of {', '.join(FORMATS)}, got {self.format!r}")
        at_least("batch_size", self.batch_size, 1)
        at_least("threads", self.threads, 1)
        at_least("max_length", self.max_length, 1)

    def band_edges(self) -> tuple[float, float] | None:
        """``(LOW, HIGH)``, or None when every pair is scored."""
        return None if self.band is None else (float(self.band[0]), float(self.band[1]))
