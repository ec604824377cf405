"""What the Spark set-up tests share: the local cluster's record as ``local-cluster.sh up``
writes it."""

from __future__ import annotations

from pathlib import Path

JAR_NAME = "beam-runners-spark-3-job-server-2.62.0.jar"


def record_cluster(home: Path, **settings: str) -> None:
    """Write the local cluster's record (``run/cluster.env``) as ``local-cluster.sh up`` does."""
    text = "".join(f"{key}={value}\n" for key, value in settings.items())
    (home / "run" / "cluster.env").write_text(text)
