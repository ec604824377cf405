"""The Dask cluster a job runs on: a scheduler's address, a scheduler file, or ``local[N]``.

Beam's Dask runner connects a client to ``--dask_client_address`` (or ``--dask_scheduler_file``)
when a pipeline runs. Here those settings are checked when the options are (a scheduler that
does not answer fails before any output is touched), ``local[N]`` starts a
``distributed.LocalCluster`` of N worker processes with one thread each, kept for the process
(``sbert run`` keeps one for the whole job, :func:`dask_cluster`, so the workers keep their
loaded models from one stage to the next), and a pipeline gets as many partitions as the
cluster has workers times :data:`PARTITIONS_PER_WORKER` unless ``--dask_npartitions`` or
``--dask_partition_size`` says otherwise.
"""

from __future__ import annotations

import atexit
import copy
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

logger = logging.getLogger(__name__)

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
# Partitions per worker when the user gave no partitioning: enough that a worker that finishes
# early takes another partition instead of waiting for the slowest one.
PARTITIONS_PER_WORKER = 2
# How long the check waits for a scheduler that does not answer (unless
# --dask_connection_timeout says otherwise).
CHECK_TIMEOUT_S = 10
_LOCAL = re.compile(r"local\[(\d+)\]")
# Beam finds its Dask runner only by its class path; here `dask` (or DaskRunner) names it too.
_SHORT_NAMES = {"dask": DASK_RUNNER, "daskrunner": DASK_RUNNER}

_lock = threading.Lock()
_clusters: dict[int, Any] = {}  # N -> the LocalCluster local[N] started in this process
_workers: dict[str, int] = {}  # scheduler address or file -> its workers when checked


class DaskSettingsError(ValueError):
    """A Dask cluster setting that cannot work (a malformed ``local[N]``, no scheduler)."""


def runner_path(runner: str) -> str:
    """A ``--runner`` value as Beam can create it: ``dask`` or ``DaskRunner`` (any case) is
    Beam's Dask runner's class path; any other name is given back as it is."""
    return _SHORT_NAMES.get(runner.lower(), runner)


def is_dask(runner: Any) -> bool:
    """Whether ``runner`` (a ``--runner`` value, as resolved) is Beam's Dask runner."""
    return isinstance(runner, str) and runner == DASK_RUNNER


def local_workers(address: str | None) -> int | None:
    """N of a ``local[N]`` address; None for any other address.

    Raises:
        DaskSettingsError: ``local[...]`` without a positive whole number.
    """
    if not address or not address.startswith("local["):
        return None
    match = _LOCAL.fullmatch(address)
    if match is None or int(match.group(1)) < 1:
        raise DaskSettingsError(
            f"--dask_client_address {address}: write local[N] with N >= 1 worker processes, "
            "or a scheduler's HOST:PORT"
        )
    return int(match.group(1))


def check_dask_options(options: PipelineOptions) -> None:
    """Check the Dask runner's cluster settings before anything is written: ``local[N]`` is
    well formed, a scheduler file exists and a scheduler answers.

    Raises:
        DaskSettingsError: one line naming the setting and what is wrong.
    """
    settings = _settings(options)
    address, scheduler_file = settings.get("address"), settings.get("scheduler_file")
    if local_workers(address) is not None:
        if scheduler_file:
            raise DaskSettingsError(
                "--dask_scheduler_file: not with --dask_client_address local[N], which starts "
                "its own cluster"
            )
        return
    if address and address in _started_addresses():
        return
    if scheduler_file and not os.path.isfile(scheduler_file):
        raise DaskSettingsError(f"--dask_scheduler_file {scheduler_file}: no such file")
    if address or scheduler_file:
        _connected_workers(address, scheduler_file, settings.get("timeout"))


def resolved(options: PipelineOptions) -> PipelineOptions:
    """The options a Dask pipeline runs with (a copy): ``local[N]`` replaced by the address of
    this process's LocalCluster of N workers (started now if it is not running), and
    ``--dask_npartitions`` set from the cluster's workers when no partitioning was given.
    Other runners' options are given back as they are."""
    runner = options.view_as(StandardOptions).runner
    if not (isinstance(runner, str) and is_dask(runner_path(runner))):
        return options
    from apache_beam.runners.dask.dask_runner import DaskOptions
    from sbert_pipeline.stage_api.dask_translations import register_translations

    register_translations()
    options = copy.deepcopy(options)
    options.view_as(StandardOptions).runner = DASK_RUNNER
    dask = options.view_as(DaskOptions)
    n = local_workers(dask.address)
    if n is not None:
        dask.address = local_cluster(n).scheduler_address
    if not (dask.npartitions or dask.partition_size):
        workers = n or _connected_workers(dask.address, dask.scheduler_file, dask.timeout)
        dask.npartitions = max(1, workers) * PARTITIONS_PER_WORKER
    return options


def dask_partitions(options: PipelineOptions) -> int | None:
    """The partitions a Dask pipeline is spread over (``--dask_npartitions``, as
    :func:`resolved` sets it); None for other runners or when not set."""
    if not is_dask(options.view_as(StandardOptions).runner):
        return None
    return _settings(options).get("npartitions")


def local_cluster(n: int) -> Any:
    """This process's LocalCluster of ``n`` worker processes (one thread each), started on
    first use and closed when the process exits (or by :func:`close_local_clusters`)."""
    with _lock:
        cluster = _clusters.get(n)
        if cluster is None:
            from distributed import LocalCluster

            logger.info("starting a local Dask cluster of %d worker processes", n)
            # Its scheduler and nannies run in this process: their INFO lines (each worker
            # started, each client connected) are not the job's, unless the user asked.
            dask_logger = logging.getLogger("distributed")
            if dask_logger.level == logging.NOTSET:
                dask_logger.setLevel(logging.WARNING)
            with worker_environ():
                cluster = LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
                )
            _clusters[n] = cluster
        return cluster


@contextmanager
def worker_environ() -> Iterator[None]:
    """Dask's environment for the worker processes it spawns in the block, without its
    ``MALLOC_TRIM_THRESHOLD_=65536``: glibc then gives memory back on every large free, which
    made a worker's model inference about a fifth slower than the same code in a plain process
    here (the thread limits Dask sets stay)."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        yield


def close_local_clusters() -> None:
    """Close every LocalCluster this process started (their workers' models go with them)."""
    with _lock:
        clusters = list(_clusters.values())
        _clusters.clear()
    for cluster in clusters:
        try:
            cluster.close()
        except Exception as err:  # closing must not hide the job's own outcome
            logger.warning("could not close the local Dask cluster: %s", err)


atexit.register(close_local_clusters)


@contextmanager
def dask_cluster(beam_args: Sequence[str]) -> Iterator[None]:
    """One LocalCluster for the block when ``beam_args`` name the Dask runner with
    ``local[N]`` (``sbert run``: every stage of the job runs on it); closed when the block
    ends, also when it raises. Other settings need nothing here."""
    options = PipelineOptions(list(beam_args))
    runner = options.view_as(StandardOptions).runner
    dask = isinstance(runner, str) and is_dask(runner_path(runner))
    n = local_workers(_settings(options).get("address")) if dask else None
    if n is None:
        yield
        return
    local_cluster(n)
    try:
        yield
    finally:
        close_local_clusters()


def _settings(options: PipelineOptions) -> dict[str, Any]:
    """The Dask runner's settings as its options class names them (address, scheduler_file,
    timeout, npartitions, partition_size)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)


def _started_addresses() -> set[str]:
    with _lock:
        return {cluster.scheduler_address for cluster in _clusters.values()}


def _connected_workers(address: str | None, scheduler_file: str | None, timeout: Any) -> int:
    """The workers of the scheduler at ``address`` (or in ``scheduler_file``), asked once per
    process.

    Raises:
        DaskSettingsError: no scheduler answered within the timeout.
    """
    key = address or scheduler_file or ""
    if key in _workers:
        return _workers[key]
    from distributed import Client

    wait = timeout if isinstance(timeout, int | float) else CHECK_TIMEOUT_S
    where = f"--dask_client_address {address}" if address else f"--dask_scheduler_file {key}"
    try:
        with Client(address, scheduler_file=scheduler_file, timeout=wait) as client:
            workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
    except Exception as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DaskSettingsError(
            f"{where}: no Dask scheduler answered within {wait}s ({reason}); start one or "
            "give another address (or local[N] for a cluster on this machine)"
        ) from None
    _workers[key] = workers
    return workers


@contextmanager
def quiet_client() -> Iterator[None]:
    """While a Dask pipeline runs, the client's own error tracebacks (its attempts to reach a
    scheduler that went away) are not logged: :func:`run_failure` says it in one line."""
    client_logger = logging.getLogger("distributed.client")

    def below_error(record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR

    client_logger.addFilter(below_error)
    try:
        yield
    finally:
        client_logger.removeFilter(below_error)


def run_failure(err: BaseException | None, result: Any, options: PipelineOptions) -> Any:
    """What ended a Dask pipeline that did not finish, as one line (a ``JobFailedError``): the
    scheduler gone (the client lost it: a future cancelled or left unfinished) or a worker
    that died running the same task again and again. None when ``err`` is an error of the
    pipeline's own steps (the stage reports those), or when every future finished."""
    import asyncio
    import concurrent.futures

    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker
    from sbert_pipeline.stage_api.stops import JobFailedError

    dask = _settings(options)
    where = dask.get("address") or dask.get("scheduler_file") or "?"
    if isinstance(err, KilledWorker):
        return JobFailedError(
            f"Dask workers died running the same task too often ({err}); nothing was published"
        )
    lost = (CommClosedError, asyncio.CancelledError, concurrent.futures.CancelledError, OSError)
    if err is None:
        futures = getattr(result, "futures", None) or []
        unfinished = [future for future in futures if future.status != "finished"]
        if not unfinished:
            return None
        reason = f"{len(unfinished)} of its results {unfinished[0].status}"
    elif isinstance(err, lost):
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    else:
        return None
    return JobFailedError(
        f"the Dask scheduler ({where}) stopped answering while the pipeline ran ({reason}); "
        "nothing was published"
    )
