"""``sbert embed --incremental``: embed only new and changed input files, keep the rest, and
publish one new version; resumable after a kill.

The launcher compares the input with the published version
(:func:`sbert_pipeline.embed.file_records.plan_version`), then runs the embed pipeline once per
input file to embed, each writing into ``_attempts/<run id>/_groups/<key>/`` and ending in
:class:`~sbert_pipeline.embed.commit.RecordTallies` instead of the commit step. After each run it
checks that file's counts (rows read == embedded + rejected), moves its parts into the attempt
area as ``part-<key>-...`` and writes the file's done-record (atomically, last). When every file
is done it commits once: the new parts move in, the kept files' parts stay under their
published names and digests (``StagedOutput.commit(keep=...)``), the removed files' parts go.

Ids stay unique across files (with ``--id-field``): a row whose id a kept file, or a file
embedded earlier in the run (in path order), already holds is rejected, naming the id and that
file. Unlike a from-scratch run, which keeps the first row in path order, a kept file's row wins
even when the new file sorts before it: kept parts never change.

So the launcher waits for every job (``--no_wait_until_finish`` is refused), and a run killed
after some files, rerun with the same settings, adopts those files' records and parts
(``stage_output(adopt=...)``, see :func:`sbert_pipeline.io.staged_output.prepare_output`) and
embeds only the others.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping

from sbert_pipeline.embed.commit import (
    TALLIES,
    CommitPlan,
    CommitRefusedError,
    RecordTallies,
    check_rejections,
    checked_row_counts,
    manifest_counts,
)
from sbert_pipeline.embed.file_records import (
    GROUPS,
    InputFile,
    VersionPlan,
    adoptable,
    done_path,
    error_part,
    hash_inputs,
    part_digest,
    part_name,
    plan_version,
    read_done,
)
from sbert_pipeline.embed.options import Options
from sbert_pipeline.embed.read_corpus import ReadCorpus, refuse_output_inside_input
from sbert_pipeline.embed.sinks import output_schema
from sbert_pipeline.embed.stage import (
    LAYOUT,
    REPORTED_COUNTS,
    build_pipeline,
    job_error,
    launch_manifest,
    published_result,
)
from sbert_pipeline.io.atomic import replace, write_json_replacing
from sbert_pipeline.io.embeddings import shard_paths
from sbert_pipeline.io.manifest_fields import created_now
from sbert_pipeline.io.output_dir import file_sizes, join, read_json_or_none
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.io.staged_output import StagedOutput
from sbert_pipeline.stage_api.beam_options import is_local
from sbert_pipeline.stage_api.beam_run import options_for, run_pipeline, waits
from sbert_pipeline.stage_api.options import OptionError
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.progress import close_shared_progress

logger = logging.getLogger(__name__)


def run_incremental(options: Options) -> Result:
    """Embed the new and changed input files of ``options.input``, keep the unchanged ones'
    rows, drop the removed ones', and publish one version (see the module docstring).

    Raises:
        OptionError: ``--no_wait_until_finish`` (the launcher publishes after the jobs).
        ModelLoadError, FileNotFoundError, OutputExistsError, ValueError: before any work.
        JobFailedError: a file's rows were lost, or too many rows were rejected.
        DataFileError: an input file was damaged (and ``on_bad_file`` is ``fail``).
    """
    started = time.time()
    spec = options.corpus_spec()
    settings = options.encoder_settings()
    beam_options = options_for(options.beam_options, None)
    if not waits(beam_options):
        raise OptionError(
            "incremental",
            "waits for its jobs (it publishes after the last file); drop --no_wait_until_finish",
        )
    options.check_launcher(workers_here=is_local(beam_options))
    description = settings.describe(settings.inspect())
    corpus = ReadCorpus(options.input, spec)
    refuse_output_inside_input(options.output, options.input, corpus.files)
    schema = output_schema(description["dim"], options.dtype, options.keep_text, spec.keep_fields)
    launch = launch_manifest(options, description, spec, beam_options)
    version = plan_version(options.output, launch, hash_inputs(corpus.files))
    _log_plan(options.output, version)
    out = stage_output(
        "embed",
        options,
        LAYOUT,
        replace_kind="embeddings",
        adopt=functools.partial(adoptable, version, options.id_field),
    )
    plan = CommitPlan(
        output=options.output,
        input_files=tuple(file.path for file in version.embed),
        max_error_rate=options.max_error_rate,
        allow_all_rejected=options.allow_all_rejected,
        manifest=launch,
        started=started,
        reported=REPORTED_COUNTS,
    )
    with out:
        done = read_done(out.attempt)  # files a killed run finished, adopted by record
        resumed = sorted(done)
        if resumed:
            logger.info(
                "%s: resuming run %s: %d file(s) already embedded, %d to go",
                options.output,
                out.run_id,
                len(resumed),
                len(version.embed) - len(resumed),
            )
        for file in version.embed:
            if file.path not in done:
                context = (settings, schema, spec, beam_options)
                done[file.path] = _embed_file(options, out, version, file, done, context)
        manifest = _manifest(out, version, plan, done, resumed)
        written = out.commit(manifest, keep=version.keep_entries())
    return published_result(options.output, written)


def _log_plan(output: str, version: VersionPlan) -> None:
    if version.reason is not None:
        logger.info(
            "%s: incremental embed runs in full (%s): %d file(s) to embed",
            output,
            version.reason,
            len(version.embed),
        )
        return
    logger.info(
        "%s: incremental embed: %d file(s) kept (%d rows), %d to embed, %d removed or changed",
        output,
        len(version.kept),
        sum(entry["embedded"] for entry in version.kept),
        len(version.embed),
        len(version.removed),
    )


def _taken(out: StagedOutput, version: VersionPlan, file: InputFile, done: Mapping) -> tuple:
    """``(part path, input file)`` of the files whose ids ``file``'s rows may not reuse: the
    kept files' published parts and the parts of the files embedded before it."""
    taken = [
        (join(out.directory, part), entry["path"])
        for entry in version.kept
        for part in entry["parts"]
    ]
    for earlier in version.embed:
        if earlier.path < file.path:
            taken += [(out.path(part), earlier.path) for part in done[earlier.path]["parts"]]
    return tuple(taken)


def _embed_file(
    options: Options,
    out: StagedOutput,
    version: VersionPlan,
    file: InputFile,
    done: Mapping,
    context: tuple,
) -> dict:
    """Run the embed pipeline over one input file, check its counts, move its parts into the
    attempt area and write its done-record (last, atomically); returns the record."""
    settings, schema, spec, beam_options = context
    group = out.path(GROUPS, file.key)
    reader = ReadCorpus(options.input, spec, files=[(file.path, file.id_prefix, file.bytes)])
    taken = _taken(out, version, file, done) if options.id_field else ()
    pipeline = build_pipeline(
        options,
        group,
        RecordTallies(group, REPORTED_COUNTS),
        (settings, schema, spec),
        beam_options,
        reader,
        None,
        taken,
    )
    try:
        run_pipeline(pipeline, beam_options)
    except Exception as err:
        known = job_error(err)
        if known is None:
            raise
        raise known from None
    finally:
        close_shared_progress()
    tallies = read_json_or_none(join(group, TALLIES))
    if tallies is None:
        raise JobFailedError(f"the pipeline over {file.path} finished without its counts")
    try:
        ledger, embedded, rejected = checked_row_counts(group, [file.path], tallies, options.output)
    except CommitRefusedError as err:
        raise JobFailedError(str(err)) from None
    sizes: dict[str, int] = {}
    parts = _move_parts(group, out.attempt, file.key, "", sizes)
    error_parts = _move_parts(group, out.attempt, file.key, ERRORS_DIR, sizes)
    record = {
        "path": file.path,
        "id_prefix": file.id_prefix,
        "bytes": file.bytes,
        "sha256": file.sha256,
        "rows": ledger[file.path],
        "embedded": embedded,
        "rejected": rejected,
        "counts": {name: int(tallies.get(name, 0)) for name in REPORTED_COUNTS},
        "parts": parts,
        "error_parts": error_parts,
        "part_bytes": sizes,
        "part_xxh3_128": {name: part_digest(out.path(name), size) for name, size in sizes.items()},
        "settings": version.settings,
        "basis": version.basis(file),
    }
    write_json_replacing(done_path(out.attempt, file), record)
    logger.info("%s: %d rows embedded, %d rejected", file.path, embedded, rejected)
    return record


def _move_parts(group: str, attempt: str, key: str, folder: str, sizes: dict) -> list[str]:
    """Move a file's parts from its group folder into the attempt area under its key; their
    names (relative to the attempt area) in order, with their sizes added to ``sizes``."""
    found = file_sizes(join(group, folder) if folder else group)
    names = []
    for path in shard_paths(join(group, folder) if folder else group):
        written = path.rsplit("/", 1)[-1]
        name = part_name(key, written)
        name = error_part(name) if folder else name
        replace(path, join(attempt, name))
        sizes[name] = found[written]
        names.append(name)
    return names


def _manifest(
    out: StagedOutput, version: VersionPlan, plan: CommitPlan, done: Mapping, resumed: list
) -> dict:
    """The new version's manifest: launch fields, counts of every file (kept and new), each
    file's entry with its published parts, the shards, and the ``incremental`` section."""
    new = []
    for file in version.embed:
        record = done[file.path]
        entry = {
            name: record[name]
            for name in ("path", "id_prefix", "bytes", "sha256", "rows", "embedded", "rejected")
        }
        entry["counts"] = record["counts"]
        entry["parts"] = [out.final_name(part) for part in record["parts"]]
        entry["error_parts"] = [out.final_name(part) for part in record["error_parts"]]
        new.append(entry)
    files = sorted([*version.kept, *new], key=lambda entry: entry["path"])
    read, embedded, rejected = (
        sum(e[name] for e in files) for name in ("rows", "embedded", "rejected")
    )
    try:
        check_rejections(read, embedded, rejected, plan, join(out.attempt, ERRORS_DIR))
    except CommitRefusedError as err:
        raise JobFailedError(str(err)) from None
    tallies = {name: sum(e.get("counts", {}).get(name, 0) for e in files) for name in plan.reported}
    seconds = round(time.time() - plan.started, 3)
    launch = dict(plan.manifest)
    return {
        **launch,
        "counts": manifest_counts(read, embedded, rejected, tallies, plan.reported),
        "input": {**launch.get("input", {}), "files": files},
        "shards": sorted(part for entry in files for part in entry["parts"]),
        "incremental": _section(version, new, resumed, seconds),
        "seconds": seconds,
        "created": created_now(),
    }


def _section(version: VersionPlan, new: list[dict], resumed: list, seconds: float) -> dict:
    """The manifest's ``incremental`` section, the shape every stage records (full or not)."""
    if version.reason is not None:
        return {"mode": "full", "reason": version.reason, "resumed": resumed, "seconds": seconds}
    previous = version.previous or {}
    rows_old = sum(entry["embedded"] for entry in version.kept)
    current = {file.path for file in version.embed} | {e["path"] for e in version.kept}
    return {
        "mode": "incremental",
        "previous_created": previous.get("created"),
        "rows_old": rows_old,
        "rows_new": sum(entry["embedded"] for entry in new),
        "rows_gone": int(previous.get("counts", {}).get("embedded", 0)) - rows_old,
        "reused": [entry["path"] for entry in version.kept],
        "recomputed": [entry["path"] for entry in new],
        "removed": [e["path"] for e in version.removed if e["path"] not in current],
        "resumed": resumed,
        "seconds": seconds,
    }
