"""The verify stage: every candidate pair of a pairs folder scored by a cross-encoder.

Run from Python as ``verify.run(verify.Options(pairs=..., model=..., output=...))``,
or with the command ``sbert verify`` (its ``--help`` lists the options).

Retrieve, then verify: the bi-encoder's pairs (``sbert pairs --threshold T``) are the
candidates; the cross-encoder reads both texts of a pair together and decides it. Every pair
whose cosine lies in the band ``[LOW, HIGH)`` (default: every pair) is scored on Beam workers,
``RunInference`` around the cross-encoder (loaded once per worker, batched by length). A pair at
or above HIGH keeps score 1.0 (always a duplicate) and one below LOW gets 0.0 (never one at a
threshold above 0), both unscored and counted, so rows in == rows out.

The launcher reads the pairs (their ids and cosines) and the texts of the band's pairs, and
writes those as chunk files in the run's attempt area, which the workers read: it holds them
in memory, and remote workers need an output on storage they read (gs://, s3://).

Texts come from the embeddings the pairs were made from when they kept them (``sbert embed
--keep-text``, or own vectors read with ``--text-field``), and only from the version the pairs
recorded (embeddings made again since are refused, naming both versions); else from
``--corpus`` (the corpus files, read by id as the embed job read them, or by ``--id-field`` for
the pairs of own vectors). A pair whose text is missing is refused, naming the id, before the
output is touched; so is a cross-encoder that is no cross-encoder or gives more than one score
per pair (from its config, before any pair is read), or that does not load.

Output (docs/architecture.md, ``pairs/``): a pairs folder, so ``sbert dedup --pairs DIR`` reads
it unchanged (``--labels`` and the threshold sweep too). ``pairs/`` holds every candidate pair
once (``id_a < id_b``) with ``score`` the verified score and ``cosine`` the bi-encoder's;
``neighbors/`` is the input's (the bi-encoder's top-k lists and cosines). The manifest copies
what dedup reads from the input's (the embeddings, the model fields, ``k``, ``method``, the item
count); its ``threshold`` is -1 (every candidate is in ``pairs/``, whatever its verified score:
dedup never mixes in neighbour-list cosines), and its ``verify`` section holds the
cross-encoder's identity, the band, the counts (pairs read, scored, above and below the band),
seconds, pairs/s and how the scores moved (pairs that crossed 0.5 each way, mean |score -
cosine|). Scores must be finite and within [-1, 1] (a Sigmoid head's are in [0, 1]), as every
pairs folder's are.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.atomic import write_parquet_replacing, write_table
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.embeddings import count_rows, shard_paths
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.manifest_fields import created_now, model_fields, software_versions
from sbert_pipeline.io.output_dir import OutputLayout, join
from sbert_pipeline.io.pairs_output import (
    NEIGHBORS,
    PAIRS,
    VERIFIED_PAIRS_SCHEMA,
    VERIFY_SECTION,
    PairColumns,
    PairsOutput,
)
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA
from sbert_pipeline.stage_api.beam_run import (
    TransformRunner,
    options_for,
    show_progress,
    transform_runner,
    workers_here,
    workers_read_local_paths,
)
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.verify.band import (
    ABOVE_SCORE,
    BELOW_SCORE,
    score_movement,
    split_band,
    verified_scores,
)
from sbert_pipeline.verify.inputs import open_candidates, pair_texts
from sbert_pipeline.verify.model_check import check_cross_encoder, require_one_score
from sbert_pipeline.verify.model_handler import CrossEncoderSettings
from sbert_pipeline.verify.options import Options
from sbert_pipeline.verify.transforms import ScorePairs, read_scores, write_chunks

if TYPE_CHECKING:
    import apache_beam as beam

# What a verify run writes: a pairs folder (see docs/architecture.md, folder contracts).
LAYOUT = OutputLayout(datasets=(NEIGHBORS, PAIRS))
# The chunk and score files of the pipeline, in the attempt area; deleted before the commit.
WORK_DIR = "_work"
# Pairs per output part of pairs/.
ROWS_PER_PART = 1 << 20
# The manifest's threshold: every candidate pair is in pairs/, whatever its verified score.
COMPLETE_FLOOR = -1.0


@dataclass(frozen=True)
class VerifySummary:
    """What a finished verify run reports."""

    output: str
    model_id: str
    counts: dict[str, int]
    movement: dict
    pairs_per_second: float | None
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        counts, moved = self.counts, self.movement
        change = moved["mean_abs_change"]
        rate = "" if self.pairs_per_second is None else f" at {self.pairs_per_second:.0f} pairs/s"
        movement = (
            f"; {moved['up']} crossed {moved['cut']:g} up and {moved['down']} down, mean "
            f"|score - cosine| {change:.3f}"
            if change is not None
            else ""
        )
        return (
            f"verified {counts['scored']} of {counts['read']} pairs with {self.model_id} "
            f"({counts['above_band']} above the band scored {ABOVE_SCORE:g}, "
            f"{counts['below_band']} below it {BELOW_SCORE:g}){movement}{rate} in "
            f"{self.seconds:.1f}s -> {self.output}"
        )


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Score the candidate pairs and publish the verified pairs folder.

    Args:
        options: the stage's options (checked when they were built).
        pipeline: a pipeline to build the scoring into (tests pass a ``TestPipeline``).

    Raises:
        ValueError, FileNotFoundError, ModelLoadError, OutputExistsError: bad inputs (a pairs
            folder already verified or without pairs, a missing text, a model that does not
            load), before any output is written.
        JobFailedError: the pipeline lost or repeated pairs, or the model gave scores that are
            not finite or not in [-1, 1]; nothing is published.
    """
    with content_checks(options.verify):
        return _run(options, pipeline)


def _run(options: Options, pipeline: beam.Pipeline | None) -> Result:
    """:func:`run` inside the content checks."""
    start = time.perf_counter()
    check_cross_encoder(options.model)  # from its config, before any pair or text is read
    source = open_candidates(options.pairs)
    candidates = source.read_pairs(-math.inf)
    split = split_band(candidates.scores, options.band_edges())
    band = _band_texts(source, options, candidates, split.scored)
    settings = _cross_encoder_settings(options)
    beam_options = options_for(options.beam_options, pipeline)
    here = workers_here(beam_options, pipeline)
    if not workers_read_local_paths(beam_options, pipeline) and "://" not in options.output:
        raise ValueError(
            f"--output {options.output} is a local folder, where remote workers cannot read the "
            "pairs to score; write to storage the workers read (gs://, s3://) or run locally"
        )
    verifier = _describe_verifier(settings, here=here)
    out = stage_output("verify", options, LAYOUT)
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    with out:
        show_progress(beam_options)
        work = out.path(WORK_DIR)
        run = transform_runner(beam_options, pipeline)
        scored, runner, pipeline_seconds = _score_band(band, settings, work, run, options.output)
        _check_scores(scored, band.id_a, band.id_b, options.model)
        written = _write_pairs(out.attempt, candidates, verified_scores(split, scored))
        neighbor_rows = _copy_neighbors(source, out.attempt)
        if written != len(candidates):
            raise JobFailedError(
                f"read {len(candidates)} pairs but wrote {written}; nothing was published and "
                f"the previous content of {options.output} is unchanged"
            )
        if FileSystems.exists(work):  # an empty band writes no chunk
            FileSystems.delete([work])
        counts = {**split.counts(), "written": written}
        movement = score_movement(candidates.scores[split.scored], scored)
        rate = None
        if pipeline_seconds and counts["scored"]:
            rate = counts["scored"] / pipeline_seconds
        seconds = time.perf_counter() - start
        summary = VerifySummary(
            options.output, verifier["model_id"], counts, movement, rate, seconds
        )
        facts = {
            "verifier": verifier,
            "text_source": band.text_source,
            "text_ids": band.text_ids,
            "neighbor_rows": neighbor_rows,
            "runner": runner,
            "pipeline_seconds": pipeline_seconds,
        }
        manifest = _manifest(options, source, summary, facts)
        return Result(options.output, out.commit(manifest), summary)


@dataclass(frozen=True)
class _BandTexts:
    """The pairs to score (those in the band) and their two texts."""

    id_a: pa.Array
    id_b: pa.Array
    text_a: list[str]
    text_b: list[str]
    text_source: str  # where the texts were read from (for the manifest)
    text_ids: int  # distinct ids whose text was read


def _band_texts(
    source: PairsOutput, options: Options, candidates: PairColumns, scored: np.ndarray
) -> _BandTexts:
    """Read the texts of the band's pairs (only those): each pair's two texts, in order.

    Raises:
        DataFileError, ValueError: a text is missing, or its source is not the pairs' version.
    """
    id_a = candidates.id_a.filter(pa.array(scored))
    id_b = candidates.id_b.filter(pa.array(scored))
    ids = pc.unique(pa.concat_arrays([id_a, id_b])).to_pylist()
    texts, text_source = pair_texts(source, options, ids)
    text_a = [texts[item] for item in id_a.to_pylist()]
    text_b = [texts[item] for item in id_b.to_pylist()]
    return _BandTexts(id_a, id_b, text_a, text_b, text_source, len(ids))


def _cross_encoder_settings(options: Options) -> CrossEncoderSettings:
    """How each worker loads and runs the cross-encoder."""
    return CrossEncoderSettings(
        model=options.model,
        device=options.device,
        dtype=options.compute_dtype,
        backend=options.cpu_backend,
        allow_pickle=options.allow_pickle,
        max_length=options.max_length,
        num_threads=options.threads,
        batch_size=options.batch_size,
    )


def _score_band(
    band: _BandTexts, settings: CrossEncoderSettings, work: str, run: TransformRunner, output: str
) -> tuple[np.ndarray, str, float | None]:
    """Score the band's pairs on Beam workers, through chunk files in ``work``.

    Returns:
        ``(scores in the band's order, runner, pipeline seconds or None)``.

    Raises:
        JobFailedError: the workers' scores do not cover every pair.
    """
    chunks = write_chunks(work, band.text_a, band.text_b)
    runner, pipeline_seconds = "none (no pair in the band)", None
    if chunks:
        finished = run("VerifyPairs", ScorePairs(chunks, settings, work))
        runner, pipeline_seconds = finished.runner, finished.seconds
    try:
        scored = read_scores(work, len(chunks), len(band.text_a))
    except ValueError as err:
        raise JobFailedError(
            f"{err}; nothing was published and the previous content of {output} is unchanged"
        ) from err
    return scored, runner, pipeline_seconds


def _describe_verifier(settings: CrossEncoderSettings, *, here: bool) -> dict:
    """The cross-encoder's identity for the manifest, loaded here once: a model that does not
    load, or gives more than one score per pair, is refused before the output is touched (the
    workers load their own copy). Loaded on the workers' device when they run on this machine
    (``auto`` resolves by device), else on the CPU (a launcher may have no accelerator).

    Raises:
        ModelLoadError, ValueError: as :meth:`CrossEncoder.load`; ValueError for a model with
            several labels.
    """
    from dataclasses import replace

    model = (settings if here else replace(settings, device="cpu")).load()
    require_one_score(settings.model, model.num_labels)
    return model.describe()


def _check_scores(scored: np.ndarray, id_a: pa.Array, id_b: pa.Array, model: str) -> None:
    """Refuse scores a pairs folder cannot hold (dedup compares them with cosines).

    Raises:
        JobFailedError: a score is not finite or outside [-1, 1], naming its pair.
    """
    bad = ~np.isfinite(scored) | (scored < -1.0) | (scored > 1.0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        pair = f"{id_a[first].as_py()!r}, {id_b[first].as_py()!r}"
        raise JobFailedError(
            f"--model {model} gave {int(bad.sum())} scores outside [-1, 1] (first: "
            f"{float(scored[first]):g} for the pair {pair}); "
            "a pairs folder holds scores dedup compares with cosines: use a cross-encoder with "
            "a Sigmoid activation. Nothing was published"
        )


def _write_pairs(attempt: str, candidates: PairColumns, scores: np.ndarray) -> int:
    """``pairs/`` parts of at most :data:`ROWS_PER_PART` pairs, in the input's order; the rows
    written, counted from the files."""
    n = len(candidates)
    parts = max(1, math.ceil(n / ROWS_PER_PART))
    for part in range(parts):
        rows = slice(part * ROWS_PER_PART, min((part + 1) * ROWS_PER_PART, n))
        table = pa.Table.from_arrays(
            [
                candidates.id_a[rows],
                candidates.id_b[rows],
                pa.array(scores[rows], pa.float32()),
                pa.array(candidates.scores[rows], pa.float32()),
            ],
            schema=VERIFIED_PAIRS_SCHEMA,
        )
        write_table(join(attempt, PAIRS, f"part-{part:05d}-of-{parts:05d}.parquet"), table)
    return count_rows(shard_paths(join(attempt, PAIRS)))


def _copy_neighbors(source: PairsOutput, attempt: str) -> int:
    """The input's ``neighbors/`` parts, copied as they are (streamed); the rows copied."""
    files = source.neighbor_files
    for number, path in enumerate(files):
        target = join(attempt, NEIGHBORS, f"part-{number:05d}-of-{len(files):05d}.parquet")
        with FileSystems.open(path) as handle:
            batches = pq.ParquetFile(handle).iter_batches(batch_size=1 << 16)
            tables = (pa.Table.from_batches([batch]).cast(NEIGHBORS_SCHEMA) for batch in batches)
            write_parquet_replacing(target, tables, NEIGHBORS_SCHEMA)
    return count_rows(shard_paths(join(attempt, NEIGHBORS)))


def _manifest(options: Options, source: PairsOutput, summary: VerifySummary, facts: dict) -> dict:
    """The ``_manifest.json`` of a finished run: the input's fields that dedup reads, then the
    ``verify`` section."""
    recorded = source.manifest
    band = options.band_edges()
    input_counts = recorded.get("counts") or {}
    return {
        "kind": "pairs",
        **model_fields(recorded),
        "method": recorded.get("method"),
        "k": recorded.get("k"),
        "threshold": COMPLETE_FLOOR,
        "recall_at_k": recorded.get("recall_at_k"),
        "pairs": {
            "count": summary.counts["written"],
            "threshold": COMPLETE_FLOOR,
            "complete": "every candidate pair of the input (its pairs with cosine >= "
            f"{source.threshold:g}), each with its verified score",
        },
        "counts": {
            "items": input_counts.get("items", recorded.get("n")),
            "neighbor_rows": facts["neighbor_rows"],
            "pairs": summary.counts["written"],
        },
        "embeddings": recorded.get("embeddings"),
        VERIFY_SECTION: {
            "model": facts["verifier"],
            "band": None if band is None else list(band),
            "band_rule": "scored: LOW <= cosine < HIGH; above: score "
            f"{ABOVE_SCORE:g}; below: score {BELOW_SCORE:g} (float32 comparisons)",
            "counts": summary.counts,
            "movement": summary.movement,
            "seconds": round(summary.seconds, 3),
            "pipeline_seconds": None
            if facts["pipeline_seconds"] is None
            else round(facts["pipeline_seconds"], 3),
            "pairs_per_second": None
            if summary.pairs_per_second is None
            else round(summary.pairs_per_second, 1),
            "compute": {
                "device": options.device,
                "compute_dtype": options.compute_dtype,
                "cpu_backend": options.cpu_backend,
                "batch_size": options.batch_size,
                "threads": options.threads,
                "max_length": options.max_length,
            },
            "texts": {"source": facts["text_source"], "ids": facts["text_ids"]},
            "input": {"directory": options.pairs, "manifest": recorded},
        },
        "runner": facts["runner"],
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "created": created_now(),
    }
