"""The worker processes of ``local[N]`` run without Dask's malloc trim threshold (it made model
inference about a fifth slower) and keep Dask's one-thread limits."""

from __future__ import annotations

import os

from sbert_pipeline.stage_api.dask_cluster import close_local_clusters, local_cluster


def _environ() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}


def test_local_workers_have_no_malloc_trim_threshold_and_one_thread():
    from distributed import Client

    try:
        cluster = local_cluster(1)
        with Client(cluster) as client:
            (seen,) = client.run(_environ).values()
    finally:
        close_local_clusters()
    assert seen == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}
