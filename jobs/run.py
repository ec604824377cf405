"""``sbert run``: a whole job from one config (embed, index, cluster, pairs, verify, dedup), one
report.

    sbert run job.yaml [--set key=value ...] [--only STAGE] [--force STAGE|all] [--print-config]
    sbert run examples/quickstart.yaml          # the bundled sample, local runner, default model

The config (see ``examples/quickstart.yaml``) names the corpus, the model (the default, a
directory, or ``finetune``: the output of the optional finetune stage), the runner and its Beam
options, the job directory and the stages with their parameters. It is checked whole before the
job directory is touched, including every stage's own option values (device, threads, token
budget, ranges, paths in ``options:``) and the files each stage reads from outside the job, so a
bad value for a late stage fails the job before an earlier stage runs. Each stage publishes its
folder in one step: a stage that fails leaves its previous output as it was.

Each stage writes a folder in the job directory (``model/``, ``embeddings/``, ``index/``,
``clusters/``, ``pairs/``, ``verify/``, ``dedup/``) as its own command (``sbert embed`` ...)
would. A rerun skips every stage whose inputs (by content) and parameters are unchanged and whose
output is still the one it wrote; ``--force STAGE`` reruns one anyway, and the stages after it
follow because their input changed. ``--only STAGE`` runs just that stage (repeatable) on the
outputs already in the job directory. At the end ``report.html`` (counts, times, plots, the
largest duplicate groups and clusters, links to every output) is written to the job directory,
and a table of the stages is printed, with each stage's time and the process's peak RSS at its
end (also in ``_job_state.json``).

The stages run in this process, one after the other, so the peak RSS only grows: a stage that
did not raise it is shown as ``<= peak``. They are not run in child processes, which would give
each its own peak but change what a stage is: Ctrl-C and a failure's exception would have to
cross a process boundary, and every stage would load torch, FAISS and Beam again.
``benchmarks/scale_job.py`` measures each stage's own peak from outside, by sampling ``/proc``.

A failed stage stops the job with exit status 1 and a message saying which stage failed, why,
and how to continue; the stages that finished are kept and skipped by the next run.

A job directory belongs to one job and one run at a time. Its state records what makes the job
itself (the corpus and how it is read, the model, ``embeddings:``): a config that differs there
is refused before anything is written, ``--only`` included, while other stage parameters and
added stages are changes of the same job. The run holds a lock on the job directory from its
checks to its report (the one each stage holds on its folder), so a second run on it is
refused, naming the first one's pid and command from the directory's ``_STARTED`` marker,
instead of redoing a stage whose folder the first one is reading.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from sbert_pipeline.io.atomic import write_json_replacing, write_text_replacing
from sbert_pipeline.io.output_dir import STARTED, OutputLockedError, delete_quietly, join
from sbert_pipeline.io.resources import peak_rss
from sbert_pipeline.io.staged_output import holder_record, take_lock
from sbert_pipeline.jobs.parsers.run import build_parser
from sbert_pipeline.jobs.run_config import (
    CONFIG_COPY,
    STATE_FILE,
    RunConfig,
    config_as_dict,
    load_run_config,
)
from sbert_pipeline.jobs.run_inputs import check_job_inputs, check_same_job, job_identity
from sbert_pipeline.jobs.run_report import REPORT_FILE, write_job_report
from sbert_pipeline.jobs.run_stages import (
    StagePlan,
    StageResult,
    output_identity,
    plan_stages,
    run_stage,
    stage_facts,
)
from sbert_pipeline.stage_api.dask_cluster import dask_cluster
from sbert_pipeline.stage_api.portable_settings import ready_to_run
from sbert_pipeline.stage_api.stage_records import JobState
from sbert_pipeline.stage_api.stops import JobFailedError

logger = logging.getLogger(__name__)

# Loggers whose progress lines are shown while a stage runs (unless the user set their level).
PROGRESS_LOGGERS = ("sbert_core.training.loop", "sbert_pipeline")


@dataclass
class JobSummary:
    """What ``sbert run`` did: every stage's result, the report and the total time."""

    job_dir: str
    stages: list[StageResult]
    report: str | None
    seconds: float

    @property
    def failed(self) -> StageResult | None:
        """The stage that failed, if any."""
        return next((stage for stage in self.stages if stage.status == "failed"), None)

    def table(self) -> str:
        """The terminal summary: one row per stage, then the report's location."""
        rows = [("stage", "status", "time", "peak RSS", "counts")]
        for stage in self.stages:
            memory = stage.peak_rss_text()
            if stage.status == "skipped" and stage.recorded_seconds is not None:
                shown = f"({stage.recorded_seconds:.1f}s)"
                memory = f"({memory})" if stage.peak_rss is not None else memory
            else:
                shown = "-" if stage.seconds is None else f"{stage.seconds:.1f}s"
            counts = ", ".join(f"{k} {_format(v)}" for k, v in stage.facts.items())
            rows.append((stage.name, stage.status, shown, memory, counts))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
            + "  "
            + row[4]
            for row in rows
        ]
        ran = sum(1 for stage in self.stages if stage.status == "ran")
        skipped = sum(1 for stage in self.stages if stage.status == "skipped")
        lines.append(
            f"{ran} stage(s) ran, {skipped} skipped in {self.seconds:.1f}s; (time) of a skipped "
            "stage is that of the run that wrote its output; peak RSS is the process's at the "
            "stage's end (<=: an earlier stage had reached it, the stage's own is at most that)"
        )
        if self.report:
            lines.append(f"report: {self.report}")
        return "\n".join(line.rstrip() for line in lines)


class StageFailedError(JobFailedError):
    """A stage raised; carries the job's summary up to the point of failure."""

    def __init__(self, message: str, summary: JobSummary) -> None:
        super().__init__(message)
        self.summary = summary


def run(argv: list[str] | None = None) -> JobSummary:
    """Check the config, run or skip each stage, write the report; returns the summary.

    There is no ``test_pipeline`` argument: a job runs one pipeline per stage, each built by
    that stage from the job's Beam options.

    Raises:
        FileNotFoundError, ValueError, ModelLoadError: the config, its inputs or the options
            are wrong; nothing has been written.
        StageFailedError: a stage failed; the stages before it are kept and recorded.
    """
    args = build_parser().parse_args(argv)
    config = load_run_config(args.config, args.overrides)
    checked = check_job_inputs(config)
    beam_argv = _beam_argv(config)
    plans = plan_stages(config, checked, beam_argv)
    if any(plan.beam_argv for plan in plans):
        # A Spark or Flink master, job server or worker pool that does not answer is refused
        # here, before the job folder exists (each stage asks again when it starts).
        ready_to_run(PipelineOptions(beam_argv))

    start = time.perf_counter()
    with _job_held(config, plans, args) as state:
        _write_config_copy(config)
        # One Dask cluster for every stage (local[N]), so its workers keep their models.
        with _progress_shown(), dask_cluster(beam_argv):
            results = _run_stages(config, plans, state, args.only, args.force)
        summary = JobSummary(config.job_dir, results, None, 0.0)
        try:
            report = join(config.job_dir, REPORT_FILE)
            summary.report = write_job_report(config, plans, results, report)
        except Exception as err:  # the report must not hide the stages' outcome
            logger.warning("could not write the report: %s", err, exc_info=True)
    summary.seconds = time.perf_counter() - start
    failed = summary.failed
    if failed is not None:
        raise StageFailedError(_failure_message(args, config, plans, failed), summary)
    return summary


@contextmanager
def _job_held(
    config: RunConfig, plans: list[StagePlan], args: argparse.Namespace
) -> Iterator[JobState]:
    """The job directory, this run's alone while the block runs; yields the job state.

    Everything is checked before anything is written: the directory is this job's (not one
    another job config made) and the ``--only`` stages' inputs are there. Then the directory is
    made and locked for the whole run (a second ``sbert run`` on it is refused, naming this one
    from the ``_STARTED`` marker), and checked again holding the lock, since a run that ended
    meanwhile may have changed it; the state read then is the one this run goes on from.

    Raises:
        ValueError: another job's directory, or an ``--only`` stage without its inputs.
        OutputLockedError: another run holds the job directory.
    """
    _checked_state(config, plans, args)
    if not FileSystems.exists(config.job_dir):
        FileSystems.mkdirs(config.job_dir)
    try:
        lock = take_lock(config.job_dir)
    except OutputLockedError as err:
        raise OutputLockedError(f"job_dir: {err}") from None
    marker = join(config.job_dir, STARTED)
    try:
        state = _checked_state(config, plans, args)
        state.save()  # marks the directory as this job's before any stage writes into it
        if lock is not None:
            holder = holder_record(uuid.uuid4().hex[:12], {"command": _command(args)})
            write_json_replacing(marker, holder)
        yield state
    finally:
        if lock is not None:
            delete_quietly([marker])
            lock.release()


def _checked_state(config: RunConfig, plans: list[StagePlan], args: argparse.Namespace) -> JobState:
    """The job's state, once the directory is known to be this job's and the ``--only``
    stages' inputs are there; nothing is written."""
    state = JobState.load(config.job_dir)
    check_same_job(state.identity, config)
    _check_selection(config, plans, args.only, args.force)
    state.identity = job_identity(config)
    return state


def _command(args: argparse.Namespace) -> str:
    """This run's command line, as the job directory's ``_STARTED`` marker records it."""
    words = ["sbert run", args.config, *[f"--set {o}" for o in args.overrides]]
    return " ".join([*words, *[f"--only {n}" for n in args.only]])


def _run_stages(
    config: RunConfig,
    plans: list[StagePlan],
    state: JobState,
    only: list[str],
    force: list[str],
) -> list[StageResult]:
    """Run or skip each stage in order; stops at the first failure."""
    identities: dict[str, str | None] = {}
    results: list[StageResult] = []
    selected = [plan for plan in plans if not only or plan.name in only]
    for plan in plans:
        result = StageResult(plan.name, "not run", plan.output)
        results.append(result)
        current = output_identity(plan)
        if plan not in selected:
            identities[plan.name] = current
            result.facts = stage_facts(plan) if current else {}
            continue
        position = f"[{selected.index(plan) + 1}/{len(selected)}] {plan.name}"
        fingerprint = plan.fingerprint({name: identities[name] for name in plan.upstream})
        forced = plan.name in force or "all" in force
        if not forced and state.is_current(plan.name, fingerprint, current):
            identities[plan.name] = current
            record = state.stages[plan.name]
            result.status, result.recorded_seconds = "skipped", record.seconds
            result.peak_rss, result.peak_rss_at_start = record.peak_rss, record.peak_rss_at_start
            result.facts = stage_facts(plan)
            _say(f"{position}: skipped (unchanged since {record.finished}) -> {plan.output}")
            continue
        why = "forced" if forced else _why(state, plan, current)
        previous = state.stages.get(plan.name)
        state.forget(plan.name)
        _say(f"{position}: running ({why}) -> {plan.output}")
        began, result.peak_rss_at_start = time.perf_counter(), peak_rss()
        try:
            stage_result = run_stage(plan, overwrite=_has_content(plan.output))
        except Exception as err:
            result.status, result.seconds = "failed", time.perf_counter() - began
            result.peak_rss = peak_rss()
            result.error = str(err) or type(err).__name__
            # The traceback is for -v: the stages' loggers are raised to INFO for their progress
            # lines (see _progress_shown), so ask the level the user chose.
            if logging.getLogger().isEnabledFor(logging.INFO):
                logger.info("stage %s failed", plan.name, exc_info=True)
            _say(f"{position}: FAILED after {result.seconds:.1f}s")
            if previous is not None and output_identity(plan) == previous.output_identity:
                # It failed before touching its output: what the state said still holds.
                state.stages[plan.name] = previous
                state.save()
            break
        result.seconds, result.peak_rss = time.perf_counter() - began, peak_rss()
        identity = output_identity(plan)
        if identity is None:
            result.status = "failed"
            result.error = f"the stage finished but {plan.output} has no manifest"
            break
        state.record(
            plan.name,
            fingerprint,
            identity,
            result.seconds,
            (result.peak_rss_at_start, result.peak_rss),
        )
        identities[plan.name] = identity
        result.status = "ran"
        result.line = stage_result.line()
        result.facts = stage_facts(plan)
        _say(
            f"{position}: done in {result.seconds:.1f}s (peak RSS {result.peak_rss_text()}): "
            f"{result.line}"
        )
    for plan in plans[len(results) :]:
        results.append(StageResult(plan.name, "not run", plan.output))
    return results


def _why(state: JobState, plan: StagePlan, current: str | None) -> str:
    """Why a stage runs: the words in its progress line."""
    record = state.stages.get(plan.name)
    if current is None:
        return "no complete output yet"
    if record is None:
        return "output not recorded by this job"
    if record.output_identity != current:
        return "its output was replaced"
    return "inputs or parameters changed"


def _check_selection(
    config: RunConfig, plans: list[StagePlan], only: list[str], force: list[str]
) -> None:
    """``--only``/``--force`` name listed stages; ``--only`` stages have their inputs on disk."""
    listed = set(config.stages)
    for flag, names in (("--only", only), ("--force", force)):
        for name in names:
            if name != "all" and name not in listed:
                raise ValueError(
                    f"{flag} {name}: not in this job's stages ({', '.join(config.stages)})"
                )
    if not only:
        return
    by_name = {plan.name: plan for plan in plans}
    for name in only:
        for needed in by_name[name].upstream:
            if needed not in only and output_identity(by_name[needed]) is None:
                raise ValueError(
                    f"--only {name}: it reads the output of {needed}, and "
                    f"{by_name[needed].output} has none that is complete; run the job without "
                    "--only first (or add --only " + needed + ")"
                )


def _beam_argv(config: RunConfig) -> list[str]:
    """The runner and Beam options as arguments, checked by Beam's own parser."""
    from sbert_pipeline.jobs.submit import beam_argv

    options = dict(config.beam)
    if options.get("no_wait_until_finish"):
        # Each stage reads the output of the one before: a job that only submits its first
        # stage would leave the next with nothing to read.
        raise ValueError(
            "beam.no_wait_until_finish: sbert run waits for each stage, whose output the next "
            "one reads; submit without waiting with `sbert embed --no_wait_until_finish` or "
            "`sbert submit`"
        )
    if not config.is_local:
        options = {"runner": config.runner, **options}
    try:
        return beam_argv({"beam": options})
    except ValueError as err:
        raise ValueError(f"{config.runner} runner options: {err}") from None


def _has_content(directory: str) -> bool:
    """Whether a stage output folder exists with anything in it (then it is replaced)."""
    from sbert_pipeline.io.output_dir import list_files

    return bool(list_files(directory))


def _write_config_copy(config: RunConfig) -> None:
    """``job.yaml``, replaced in one step: a run killed while writing it leaves the old one."""
    import yaml

    text = yaml.safe_dump(config_as_dict(config), sort_keys=False)
    write_text_replacing(join(config.job_dir, CONFIG_COPY), text, mime_type="text/yaml")


@contextmanager
def _progress_shown() -> Iterator[None]:
    """Let the stages' own progress lines through (unless the user chose a level) while the
    stages run; the levels are put back afterwards."""
    levels = {name: logging.getLogger(name).level for name in PROGRESS_LOGGERS}
    for name, level in levels.items():
        if level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.INFO)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _failure_message(
    args: argparse.Namespace, config: RunConfig, plans: list[StagePlan], failed: StageResult
) -> str:
    """One paragraph: which stage failed, why, what is kept, where, and how to go on."""
    by_name = {plan.name: plan for plan in plans}
    finished = [plan.name for plan in plans if plan.name != failed.name and output_identity(plan)]
    kept = (
        f"The complete outputs of {', '.join(finished)} are kept in {config.job_dir}, and the "
        "next run skips those whose inputs and parameters did not change. "
        if finished
        else ""
    )
    if output_identity(by_name[failed.name]) is None:
        partial = (
            f"{failed.output} holds no manifest, so nothing reads it; the next run clears what "
            "our records list there."
        )
    else:
        partial = f"{failed.output} still holds the complete output of an earlier run."
    rerun = " ".join(["sbert run", args.config, *[f"--set {o}" for o in args.overrides]])
    return (
        f"stage {failed.name} failed after {failed.seconds or 0:.1f}s: {failed.error}. "
        f"{kept}{partial} The job state is {join(config.job_dir, STATE_FILE)}. Fix the cause and "
        f"run `{rerun}` again (add -v before run for the full traceback)."
    )


def _say(text: str) -> None:
    print(text, flush=True)


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    """CLI entry (``argv`` is what follows ``sbert run``); returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.print_config:
        import yaml

        config = load_run_config(args.config, args.overrides)
        print(yaml.safe_dump(config_as_dict(config), sort_keys=False), end="")
        return 0
    try:
        summary = run(argv)
    except StageFailedError as err:
        print(err.summary.table())
        print(f"sbert run: {err}", file=sys.stderr)
        return 1
    print(summary.table())
    return 0
