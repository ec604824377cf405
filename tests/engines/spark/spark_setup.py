"""The name the local Spark cluster gives its job server jar, for the set-up tests."""

from __future__ import annotations

JAR_NAME = "beam-runners-spark-3-job-server-2.62.0.jar"
