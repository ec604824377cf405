"""What an embed run needs of the process's memory budget, counted before it reads its input.

A local run (the FnApiRunner, whose workers are this process) holds, at its peak:

* the runtime: Python with torch, transformers, Beam and pyarrow imported (399 MiB measured
  after the imports alone), the runner's own structures and thread stacks: :data:`RUNTIME`;
* the model: its weight files' bytes twice (the state dict and the module while loading, or the
  torch model and the compiled one with ``--cpu-backend openvino``; a float16 file computed in
  float32 doubles too);
* one inference call: the tokenised batch (``--max-batch-size`` texts x max_seq_length x 3
  int64 arrays), its vectors twice (the encoder's array and the rows' copies), and one forward
  pass of at most the token budget: :data:`ACTIVATION_COPIES` hidden-size float32 tensors per
  token (queries, keys, values, attention output, the 4x wide feed-forward, residual and norm;
  inference frees a layer's tensors after it, so layers do not add up) plus the attention
  scores (heads x tokens x max_seq_length float32);
* the writers' buffers: Beam's Parquet sink holds a row group (64 MiB) per open file, one for
  the embeddings and one for the errors;
* the records between steps: the runner keeps every record of a step's output until the next
  step has consumed it (the reshuffle before inference holds the whole corpus). Measured: 44
  bytes of peak RSS per byte of corpus on 200,000 short texts of 53 bytes each (2.3 KiB a
  row), counted as :data:`BYTES_PER_CORPUS_BYTE`; rows of longer texts cost less per byte, so
  this is conservative for them. Compressed files count :data:`COMPRESSION_RATIO` times their
  size (text compresses 3-4x with gzip).

Workers elsewhere (Dataflow, Spark, Flink) hold the model and the records, not this process:
their runs are not refused here (the budget is still recorded).
"""

from __future__ import annotations

from dataclasses import dataclass

from sbert_pipeline.io.resources import MemoryBudget, require_memory
from sbert_pipeline.io.sizes import format_size

MIB = 1 << 20
RUNTIME = 640 * MIB
WEIGHT_COPIES = 2
ACTIVATION_COPIES = 12
WRITER_BUFFERS = 2 * 64 * MIB
BYTES_PER_CORPUS_BYTE = 48
COMPRESSION_RATIO = 4
_COMPRESSED = (".gz", ".bz2", ".zst", ".xz", ".deflate")
_CHANGE = (
    "need less: a smaller --max-batch-size (texts per inference call), --batch-size or "
    "--token-budget (texts or tokens per forward pass), a shorter --max-seq-length, "
    "--dtype float16, or fewer input files per run (--incremental embeds file by file)"
)


@dataclass(frozen=True)
class EmbedMemory:
    """The budget and what a run needs of it, in parts (bytes)."""

    budget: MemoryBudget
    parts: dict[str, int]

    @property
    def needed(self) -> int:
        """Bytes the run needs in all."""
        return sum(self.parts.values())

    def describe(self, peak: int) -> dict:
        """What the manifest records: the budget, the need counted (and its parts), the
        process's peak RSS measured."""
        return {
            **self.budget.to_json(),
            "needed_bytes": self.needed,
            "needed_parts": dict(self.parts),
            "peak_rss_bytes": peak,
        }


def corpus_bytes(files: list[tuple[str, str, int]] | tuple) -> int:
    """The corpus's bytes as read: compressed files count :data:`COMPRESSION_RATIO` times."""
    return sum(
        size * (COMPRESSION_RATIO if path.endswith(_COMPRESSED) else 1) for path, _, size in files
    )


def embed_memory(
    budget: MemoryBudget,
    info,
    settings,
    files,
    *,
    max_batch_size: int,
    dtype: str,
    weight_bytes: int,
) -> EmbedMemory:
    """What a local embed run of ``files`` with model ``info`` (``settings.inspect()``) needs.

    Args:
        budget: the resolved ``--memory-budget``.
        info: the model's :class:`~sbert_core.model.info.ModelInfo` (config and limits).
        settings: the :class:`~sbert_core.inference.encoder_settings.EncoderSettings`.
        files: ``(path, id prefix, bytes)`` of the input files.
        max_batch_size: texts per inference call at most.
        dtype: the stored vectors' dtype.
        weight_bytes: bytes of the model's weight files.
    """
    from sbert_core.inference.batching import DEFAULT_TOKEN_BUDGET

    config = info.config
    hidden = int(getattr(config, "hidden_size", 0) or info.full_dim)
    heads = int(getattr(config, "num_attention_heads", 0) or 1)
    max_seq = min(settings.max_seq_length or info.max_seq_length, info.max_seq_length)
    if settings.batch_size is not None:
        tokens = settings.batch_size * max_seq
    else:
        tokens = settings.token_budget or DEFAULT_TOKEN_BUDGET["cpu"]
    tokens = min(tokens, max_batch_size * max_seq)
    vector_bytes = 4 if dtype == "float32" else 2
    batch = max_batch_size * (max_seq * 8 * 3 + info.full_dim * (4 + vector_bytes))
    forward = tokens * hidden * 4 * ACTIVATION_COPIES + heads * tokens * max_seq * 4
    return EmbedMemory(
        budget,
        {
            "runtime": RUNTIME,
            "model_weights": WEIGHT_COPIES * weight_bytes,
            "inference_batch": batch + forward,
            "writer_buffers": WRITER_BUFFERS,
            "records_between_steps": BYTES_PER_CORPUS_BYTE * corpus_bytes(files),
        },
    )


def check_embed_memory(memory: EmbedMemory, n_files: int) -> None:
    """Refuse before the run starts when it needs more than the budget.

    Raises:
        ResourceError: the sizes, the budget and what to change.
    """
    parts = ", ".join(
        f"{name.replace('_', ' ')} {format_size(size)}" for name, size in memory.parts.items()
    )
    require_memory(
        memory.needed, memory.budget, f"embedding {n_files} input file(s) here ({parts})", _CHANGE
    )
