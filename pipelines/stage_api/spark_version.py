"""Whether Beam's Spark job server speaks the Spark of the master it is sent to.

The job server is the Spark driver: it runs the Spark its jar holds, and a standalone master of
another Spark line (3.2 against 3.5, say) takes its application in and fails it later with a
Java stack trace, or never runs it. So the two versions are compared before a stage touches its
output, and a mismatch is refused in one line naming both.

- The jar's Spark: a self-contained job server jar holds Spark, with its Maven record
  (``META-INF/maven/org.apache.spark/spark-core_2.12/pom.properties``); the local cluster's jar
  holds only a manifest whose ``Class-Path`` names ``jars/spark-core_2.12-X.jar``.
- The master's Spark: its REST submission server (``--spark_rest_url``) says it in every answer
  (``serverSparkVersion``); its web UI (port 8080 unless the cluster records another) shows it
  beside the master's own URL, which must be the master asked about, so that the UI of another
  master on that port is never taken for it.

Whatever cannot be told (a jar of neither kind, no UI or REST server answering, a page of another
master) refuses nothing: the check only stops a set-up that cannot work.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

# The standalone master's web UI port when nothing else is known (Spark's default).
DEFAULT_UI_PORT = 8080
# How long the master's UI or REST server has to answer; silence refuses nothing.
HTTP_TIMEOUT_S = 2.0
# The most of a page read (the master's page lists its workers and applications).
_PAGE_BYTES = 1 << 20
_SPARK_CORE = re.compile(r"(?:^|/)spark-core_2\.1[0-9]-(\d+\.\d+\.\d+[\w.-]*?)\.jar$")
_POM_PROPERTIES = re.compile(
    r"^META-INF/maven/org\.apache\.spark/spark-core_2\.1[0-9]/pom\.properties$"
)
_UI_VERSION = re.compile(r'<span class="version"[^>]*>\s*(\d+\.\d+[\w.-]*)\s*</span>')
_UI_MASTER = re.compile(r"Spark Master at (spark://[^\s<\"']+)")
_UP = "deploy/spark/local-cluster.sh up"


class SparkVersionError(ValueError):
    """The job server's Spark is of another line than the master's; the message names both."""


def jar_spark_version(jar: str | Path) -> str | None:
    """The Spark version a job server jar runs: from Spark's Maven record inside a
    self-contained jar, else from the ``spark-core`` jar its manifest's ``Class-Path`` names
    (or the ``jars/`` folder beside it holds). None when it cannot be told."""
    path = Path(jar)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            record = next((name for name in names if _POM_PROPERTIES.match(name)), None)
            if record is not None:
                found = re.search(r"(?m)^version=(\S+)", archive.read(record).decode("utf-8"))
                if found:
                    return found.group(1)
            manifest = (
                archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
                if "META-INF/MANIFEST.MF" in names
                else ""
            )
    except (OSError, zipfile.BadZipFile, KeyError, UnicodeDecodeError):
        return None
    for entry in _class_path(manifest):
        found = _SPARK_CORE.search(entry)
        if found:
            return found.group(1)
    for neighbour in sorted(path.parent.glob("jars/spark-core_2.1*-*.jar")):
        found = _SPARK_CORE.search(neighbour.name)
        if found:
            return found.group(1)
    return None


def _class_path(manifest: str) -> list[str]:
    """The ``Class-Path`` entries of a manifest (its lines continue after a leading space)."""
    unfolded = re.sub(r"\r?\n ", "", manifest)
    found = re.search(r"(?m)^Class-Path: *(.*)$", unfolded)
    return found.group(1).split() if found else []


def master_spark_version(
    master_url: str, *, ui_urls: Iterable[str] = (), rest_url: str | None = None
) -> str | None:
    """The Spark version of the standalone master at ``master_url`` (``spark://HOST:PORT``,
    standby masters comma-separated; empty: only ``rest_url`` is asked): said by its REST
    server ``rest_url`` when given, else shown by its web UI, at ``ui_urls`` and then at port
    8080 of each master host, where the page names this master. None when none tells."""
    if rest_url:
        version = _rest_version(rest_url)
        if version:
            return version
    masters = _addresses(master_url) if master_url else []
    candidates = list(
        dict.fromkeys([*ui_urls, *(f"http://{h}:{DEFAULT_UI_PORT}" for h, _ in masters)])
    )
    for url in candidates:
        page = _get(url)
        if page is None:
            continue
        named = _UI_MASTER.search(page)
        version = _UI_VERSION.search(page)
        if named and version and _same_master(_addresses(named.group(1)), masters):
            return version.group(1)
    return None


def check_spark_version(
    jar: str | None,
    master_url: str | None,
    *,
    ui_urls: Iterable[str] = (),
    rest_url: str | None = None,
) -> None:
    """Refuse a job server jar whose Spark is of another line (major.minor) than the master's.
    Nothing is refused when either version cannot be told (see the module's notes).

    Raises:
        SparkVersionError: one line naming both versions and what to run or give.
    """
    standalone = master_url if master_url and master_url.startswith("spark://") else None
    if not jar or "://" in jar or not (standalone or rest_url):
        return  # a jar Beam downloads, or a master (local[N], YARN) with no version to ask
    ours = jar_spark_version(jar)
    if ours is None:
        return
    theirs = master_spark_version(standalone or "", ui_urls=ui_urls, rest_url=rest_url)
    where = standalone or rest_url
    if theirs is None:
        logger.debug("the Spark version of %s could not be told; not compared", where)
        return
    if _line(ours) == _line(theirs):
        return
    raise SparkVersionError(
        f"the Spark job server runs Spark {ours} and the master {where} is Spark {theirs}: "
        f"a job server speaks only its own Spark {'.'.join(_line(ours))}; send the job to a "
        f"Spark {'.'.join(_line(ours))} master (`{_UP}` starts one on this machine), or give "
        f"--spark_job_server_jar of a job server built for Spark {'.'.join(_line(theirs))}"
    )


def _line(version: str) -> tuple[str, ...]:
    """A version's Spark line: its major and minor numbers."""
    return tuple(version.split(".")[:2])


def _addresses(master_url: str) -> list[tuple[str, int | None]]:
    """The (host, port) pairs of a ``spark://`` URL (standby masters comma-separated)."""
    pairs = []
    for part in master_url.removeprefix("spark://").split(","):
        host, _, port = part.strip().rstrip("/").rpartition(":")
        if not host:
            host, port = port, ""
        pairs.append((host.strip("[]"), int(port) if port.isdigit() else None))
    return pairs


def _same_master(
    named: list[tuple[str, int | None]], masters: list[tuple[str, int | None]]
) -> bool:
    """Whether the page's master is one of ``masters``: the same port on the same host (by
    name, or by the address the names resolve to)."""
    for host, port in named:
        for other_host, other_port in masters:
            if port == other_port and _resolved(host) == _resolved(other_host):
                return True
    return False


def _resolved(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host.lower()


def _get(url: str) -> str | None:
    """The text at ``url`` (HTTP GET), or None when nothing answers in time or it is an error."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.read(_PAGE_BYTES).decode("utf-8", "replace")
    except Exception as err:  # no answer, an HTTP error, a bad URL: not told
        logger.debug("no Spark master page at %s: %s", url, err)
        return None


def _rest_version(rest_url: str) -> str | None:
    """``serverSparkVersion`` of a standalone master's REST submission server; it says it in
    its answer to any request, the status of a submission it does not know included."""
    url = rest_url.rstrip("/") + "/v1/submissions/status/sbert-version-check"
    try:
        request = urllib.request.Request(url)
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            body = answer.read(_PAGE_BYTES)
    except urllib.error.HTTPError as err:  # an error answer still names the version
        body = err.read(_PAGE_BYTES) if err.fp is not None else b""
    except Exception as err:
        logger.debug("no Spark REST server at %s: %s", rest_url, err)
        return None
    try:
        version = json.loads(body).get("serverSparkVersion")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and re.match(r"\d+\.\d+", version) else None
