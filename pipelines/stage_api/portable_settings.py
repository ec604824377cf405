"""Settings of Beam's portable runners (Spark, Flink, a job endpoint): defaults and checks.

Beam's portable runners run the Python work in SDK workers whose kind ``--environment_type``
names. Left out, Beam picks Docker (or, for a ``local[N]`` Spark master or an ``[auto]`` Flink
master, LOOPBACK: the SDK workers inside the launcher), and without a job server jar it
downloads one. Here the defaults come from the local cluster that ``deploy/spark/local-cluster.sh
up`` records in ``$SBERT_SPARK_HOME/run/cluster.env`` (for Flink, ``deploy/flink/local-cluster.sh
up`` in ``$SBERT_FLINK_HOME/run/cluster.env``): its SDK worker pool (EXTERNAL), its job server
jar and, for Flink, its master and slots; SDK workers are kept for the whole job
(``--environment_cache_millis``) so each loads the model once. A set-up that cannot work (no
Java, no jar, a master or job endpoint that does not answer) is refused in one line when the
options are checked, before any output is touched.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import socket
import zipfile
from pathlib import Path
from typing import Any

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)
from sbert_pipeline.stage_api.spark_version import SparkVersionError, check_spark_version

logger = logging.getLogger(__name__)

# Without it Beam's default (0) has each Spark task start a new SDK worker, which loads the
# model again: 17 SDK workers and 112 s for 200 texts, against 2 and 42 s.
ENVIRONMENT_CACHE_MILLIS = 600000
# Flink's TaskManagers outlive a job (a stage), so its SDK workers would sit idle, each with its
# model (700-900 MB), for the whole cache time after every stage: a minute still spans a
# stage's tasks.
FLINK_ENVIRONMENT_CACHE_MILLIS = 60000
# How long a master, job endpoint or worker pool has to accept a connection when checked.
CONNECT_TIMEOUT_S = 3.0
_UP = "deploy/spark/local-cluster.sh up"
_FLINK_UP = "deploy/flink/local-cluster.sh up"
# Each local cluster's record: the variable naming its folder, and that folder's default.
_HOMES = {
    "spark": ("SBERT_SPARK_HOME", "~/.cache/sbert-pipeline/spark"),
    "flink": ("SBERT_FLINK_HOME", "~/.cache/sbert-pipeline/flink"),
}
_JAR_VERSION = re.compile(r"-(\d+\.\d+\.\d+)(?:-SNAPSHOT)?\.jar$")
_warned_versions: set[tuple[str, str]] = set()


class PortableSettingsError(ValueError):
    """A portable runner's set-up that cannot work; the message says what to run or give."""


def portable_kind(runner: Any) -> str | None:
    """``spark``, ``flink`` or ``portable`` for Beam's Spark, Flink or plain portable runner
    (any of its names or its class path, or a runner object); None for any other runner."""
    if runner is None:
        return None
    name = runner if isinstance(runner, str) else type(runner).__name__
    name = name.rpartition(".")[2].lower().removesuffix("runner")
    return name if name in {"spark", "flink", "portable"} else None


def cluster_env_path(cluster: str = "spark") -> Path:
    """Where ``deploy/<cluster>/local-cluster.sh up`` writes the local cluster's settings
    (``cluster``: ``spark`` or ``flink``)."""
    variable, default = _HOMES[cluster]
    home = os.environ.get(variable) or default
    return Path(home).expanduser() / "run" / "cluster.env"


def cluster_env(cluster: str = "spark") -> dict[str, str]:
    """The local Spark (or Flink) cluster's settings (``KEY=VALUE`` lines); empty when no such
    cluster is up."""
    try:
        text = cluster_env_path(cluster).read_text(encoding="utf-8")
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key and not key.startswith("#"):
            settings[key.strip()] = value.strip().strip("'\"")
    return settings


def recorded_pool(kind: str | None) -> tuple[str | None, str]:
    """The SDK worker pool (HOST:PORT) a runner of ``kind`` takes from a local cluster's record,
    and that cluster's name: Flink's own cluster's pool, else (for any portable runner) the
    Spark cluster's, since a pool on this machine serves either. None when none is recorded."""
    if kind == "flink":
        pool = cluster_env("flink").get("BEAM_WORKER_POOL")
        if pool:
            return pool, "Flink"
    return cluster_env().get("BEAM_WORKER_POOL"), "Spark"


def with_portable_defaults(options: PipelineOptions) -> PipelineOptions:
    """The options a portable runner runs with (a copy): the environment EXTERNAL on the local
    cluster's worker pool when no ``--environment_type`` is given, its job server jar when
    neither a jar, a job endpoint nor an uber jar is given, and SDK workers kept for
    :data:`ENVIRONMENT_CACHE_MILLIS`. For Flink the local Flink cluster's record also gives
    the master (unless one is named) and, on that master, one task per slot
    (``--parallelism``). Other runners' options are given back as they are.

    Raises:
        PortableSettingsError: no environment given and no local worker pool recorded, or no
            Spark job server jar given and none recorded.
    """
    kind = portable_kind(options.view_as(StandardOptions).runner)
    if kind is None:
        return options
    options = copy.deepcopy(options)
    portable = options.view_as(PortableOptions)
    if not portable.environment_type:
        portable.environment_type = "EXTERNAL"
    if portable.environment_type.upper() == "EXTERNAL" and not portable.environment_config:
        pool, _ = recorded_pool(kind)
        if not pool:
            up = _FLINK_UP if kind == "flink" else _UP
            raise PortableSettingsError(
                f"--runner {kind}: no SDK worker pool; start one with `{up}`, or give "
                "--environment_type (EXTERNAL with --environment_config HOST:PORT)"
            )
        portable.environment_config = pool
    if not _given(options, "environment_cache_millis"):
        portable.environment_cache_millis = (
            FLINK_ENVIRONMENT_CACHE_MILLIS if kind == "flink" else ENVIRONMENT_CACHE_MILLIS
        )
    spark = options.view_as(SparkRunnerOptions)
    if kind == "spark" and not (
        spark.spark_job_server_jar or portable.job_endpoint or spark.spark_submit_uber_jar
    ):
        jar = cluster_env().get("SPARK_JOB_SERVER_JAR")
        if not jar:
            raise PortableSettingsError(
                "--runner spark: no Spark job server (Maven Central serves no jar for Beam to "
                f"download); run `{_UP}`, or give --spark_job_server_jar or --job_endpoint"
            )
        spark.spark_job_server_jar = jar
    if kind == "flink" and not portable.job_endpoint:
        _fill_flink_defaults(options)
    return options


def _fill_flink_defaults(options: PipelineOptions) -> None:
    """The local Flink cluster's master, job server jar (with the Flink version it was built
    for) and slots, where not given. Without a recorded cluster nothing is filled, and a run
    with no jar is refused (:func:`check_portable_options`): Beam would download one, and
    Maven Central serves none."""
    local = cluster_env("flink")
    flink = options.view_as(FlinkRunnerOptions)
    if local.get("FLINK_MASTER") and not _given(options, "flink_master"):
        flink.flink_master = local["FLINK_MASTER"]
    uber_jar = flink.flink_submit_uber_jar and _flink_master(flink)
    if local.get("FLINK_JOB_SERVER_JAR") and not (flink.flink_job_server_jar or uber_jar):
        flink.flink_job_server_jar = local["FLINK_JOB_SERVER_JAR"]
        # Beam reads it only to pick a jar to download, but it should name the jar's Flink.
        if local.get("FLINK_VERSION") and not _given(options, "flink_version"):
            flink.flink_version = local["FLINK_VERSION"]
    on_local_master = _flink_master(flink) == local.get("FLINK_MASTER")
    if on_local_master and local.get("FLINK_PARALLELISM") and not _given(options, "parallelism"):
        # Beam's default (-1) leaves it to the job server's Flink configuration, which here
        # has none: 1 task for the whole cluster.
        flink.parallelism = int(local["FLINK_PARALLELISM"])


def check_portable_options(options: PipelineOptions) -> None:
    """Check what this machine must provide for a portable runner, its defaults filled: Java
    and the job server jar when Beam starts a job server, the local worker pool and jar when
    they are taken from the local cluster's record. A jar of another Beam version than the
    SDK's is logged once. Nothing is asked over the network (:func:`ready_to_run` does).

    Raises:
        PortableSettingsError: one line naming the setting and what to run or give.
    """
    kind = portable_kind(options.view_as(StandardOptions).runner)
    if kind is not None:
        _check_launch(kind, with_portable_defaults(options))


def _check_launch(kind: str, filled: PipelineOptions) -> None:
    """:func:`check_portable_options` on options whose defaults are filled already."""
    if filled.view_as(PortableOptions).job_endpoint:
        return
    if kind == "portable":
        raise PortableSettingsError(
            "--runner PortableRunner: give --job_endpoint HOST:PORT (a running job server), "
            "or --runner spark or flink"
        )
    if kind == "spark":
        _check_spark_launch(filled.view_as(SparkRunnerOptions))
    else:
        _check_flink_launch(filled.view_as(FlinkRunnerOptions))


def ready_to_run(options: PipelineOptions) -> PipelineOptions:
    """The options a portable runner runs with (:func:`with_portable_defaults`), checked as
    :func:`check_portable_options` does and then over the network: the job endpoint, else the
    Spark or Flink master Beam's job server will use, and a worker pool taken from the local
    cluster's record answer. Asked when a stage starts, before it touches its output. Other
    runners' options are given back as they are.

    Raises:
        PortableSettingsError: one line naming what does not answer and what to run.
    """
    kind = portable_kind(options.view_as(StandardOptions).runner)
    if kind is None:
        return options
    filled = with_portable_defaults(options)
    _check_launch(kind, filled)
    portable = filled.view_as(PortableOptions)
    if portable.job_endpoint and portable.job_endpoint != "embed":
        _check_answers(
            portable.job_endpoint,
            "--job_endpoint",
            f"start the job server (`{_UP} --job-server` on this machine) or give its address",
        )
    elif kind == "spark":
        spark = filled.view_as(SparkRunnerOptions)
        _check_spark_master(spark)
        _check_spark_version(spark)
    elif kind == "flink":
        _check_flink_master(filled.view_as(FlinkRunnerOptions))
    pool, cluster = recorded_pool(kind)
    if portable.environment_type.upper() == "EXTERNAL" and portable.environment_config == pool:
        # The local cluster's pool runs on this machine (another address may be an executor's
        # localhost, not reachable from here).
        up = _FLINK_UP if cluster == "Flink" else _UP
        _check_answers(
            pool,
            f"the SDK worker pool of the local {cluster} cluster",
            f"start it with `{up}`, or give --environment_type",
        )
    return filled


def _check_spark_launch(spark: SparkRunnerOptions) -> None:
    """Beam starts a Spark job server from the jar (Java needed), or, with
    ``--spark_submit_uber_jar``, submits to a master's REST endpoint."""
    if spark.spark_submit_uber_jar:
        if not spark.spark_rest_url:
            raise PortableSettingsError(
                "--spark_submit_uber_jar: give --spark_rest_url http://MASTER:6066"
            )
        return
    _check_java("--runner spark")
    _check_jar(spark.spark_job_server_jar, "--spark_job_server_jar", _UP)


def _check_spark_master(spark: SparkRunnerOptions) -> None:
    """A ``spark://`` master answers (one of them, when standby masters are listed)."""
    master = spark.spark_master_url or ""
    if spark.spark_submit_uber_jar or not master.startswith("spark://"):
        return
    hosts = master.removeprefix("spark://").split(",")
    problems = [_refusal(host, f"--spark_master_url {master}") for host in hosts]
    if all(problems):
        raise PortableSettingsError(
            f"{problems[0]}; start the master (`{_UP}` for one on this machine) or give its URL"
        )


def _check_spark_version(spark: SparkRunnerOptions) -> None:
    """The job server's Spark is of the master's line, where both can be told."""
    ui = cluster_env().get("SPARK_MASTER_WEBUI_URL")
    try:
        check_spark_version(
            spark.spark_job_server_jar,
            spark.spark_master_url,
            ui_urls=[ui] if ui else [],
            rest_url=spark.spark_rest_url if spark.spark_submit_uber_jar else None,
        )
    except SparkVersionError as err:
        raise PortableSettingsError(str(err)) from None


def _flink_master(flink: FlinkRunnerOptions) -> str | None:
    """HOST:PORT of a named Flink master; None for Beam's ``[auto]`` or ``[local]``."""
    master = flink.flink_master or ""
    if master in {"", "[auto]", "[local]"}:
        return None
    return master.split("://", 1)[-1].split("/", 1)[0]


def _check_flink_launch(flink: FlinkRunnerOptions) -> None:
    """Beam starts a Flink job server from a jar (Java needed), unless it submits an uber jar
    to a named master."""
    if flink.flink_submit_uber_jar and _flink_master(flink):
        return
    _check_java("--runner flink")
    if not flink.flink_job_server_jar:
        raise PortableSettingsError(
            "--runner flink: no Flink job server (Maven Central serves no jar for Beam to "
            f"download); run `{_FLINK_UP}`, or give --flink_job_server_jar or --job_endpoint"
        )
    _check_jar(flink.flink_job_server_jar, "--flink_job_server_jar", _FLINK_UP)


def _check_flink_master(flink: FlinkRunnerOptions) -> None:
    """A named Flink master (its REST address) answers."""
    host = _flink_master(flink)
    if host:
        _check_answers(
            host,
            f"--flink_master {flink.flink_master}",
            f"start Flink (`{_FLINK_UP}` for one on this machine) or give its address",
        )


def _check_java(what: str) -> None:
    if shutil.which("java") is None:
        raise PortableSettingsError(
            f"{what}: no `java` on PATH to start Beam's job server; install a Java runtime "
            "(17 works) or give --job_endpoint of a running job server"
        )


def _check_jar(jar: str | None, flag: str, up: str) -> None:
    """A local jar exists; a URL is Beam's to fetch. A jar of another Beam version than the
    SDK's is logged once (it runs, as the local cluster's does). ``up`` is the command that
    starts the local cluster whose script fetches the jar."""
    if not jar or "://" in jar:
        return
    if not os.path.isfile(jar):
        fetch = up.removesuffix(" up") + " fetch"
        raise PortableSettingsError(
            f"{flag} {jar}: no such file; run `{fetch}` (or up) or give the jar's path"
        )
    import apache_beam

    version, sdk = jar_version(jar), apache_beam.__version__
    if version and version != sdk and (jar, sdk) not in _warned_versions:
        _warned_versions.add((jar, sdk))
        logger.warning(
            "the job server jar is Beam %s and the Python SDK is Beam %s: the versions differ",
            version,
            sdk,
        )


def jar_version(jar: str) -> str | None:
    """The Beam version of a job server jar: from its file name, else its manifest."""
    match = _JAR_VERSION.search(os.path.basename(jar))
    if match:
        return match.group(1)
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = re.search(r"(?m)^Implementation-Version: *(\S+)", manifest)
    return found.group(1) if found else None


def _check_answers(address: str, what: str, advice: str) -> None:
    problem = _refusal(address, what)
    if problem:
        raise PortableSettingsError(f"{problem}; {advice}")


def _refusal(address: str, what: str) -> str | None:
    """Why ``address`` (HOST:PORT) takes no connection, as a phrase; None when it does."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        return f"{what}: {address!r} is not HOST:PORT"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
            return None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        return f"{what}: nothing answers at {address} ({reason})"


def _given(options: PipelineOptions, name: str) -> bool:
    """Whether option ``name`` was given (also at Beam's default value)."""
    if name in options.get_all_options(drop_default=True):
        return True
    flags = getattr(options, "_flags", None) or ()  # what Beam parsed the options from
    return any(flag.split("=", 1)[0] == f"--{name}" for flag in flags)
