"""The pairs stage's default sizes that its options' help names (``--tune-sample``,
``--max-block``, ``--sample``, ``--ranges``, ``--shards``): plain numbers, so that the options
module reads them without loading numpy."""

from __future__ import annotations

# Queries whose exact neighbours choose nprobe (the recall sample is kept apart from them, so
# the measured recall is not the one the choice was made on).
TUNE_SAMPLE = 500
# The largest block one worker searches by default: a 100k x 384 block is as much work as the
# exact search of 100k vectors (98 s here) and 150 MB of vectors, so no task runs for long.
DEFAULT_MAX_BLOCK = 100_000
# k-means sample: 32 rows per centroid, at least 20,000; blocking needs centroids that cover the
# data, not the cluster quality ``sbert cluster`` aims for (64 per centroid).
SAMPLE_PER_CLUSTER = 32
MIN_SAMPLE = 20_000
# Query rows per exact range and items per clustered output shard.
ROWS_PER_RANGE = 10_000
ROWS_PER_SHARD = 100_000
