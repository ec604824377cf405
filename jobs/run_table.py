"""The stages of ``sbert run``, in run order: one line per stage package.

Each stage package describes its part in a job in its ``job_stage.py`` (``JOB_STAGE``: folder,
inputs, the options the job sets, what it reads from outside the job, its checks, facts, report
sections; ``pipelines/stage_api/job_stage.py``) and runs through its ``Options`` and ``run``.
Adding a stage is its package and one line here. This is the one place of ``sbert run`` that
names stages: the rest of it goes through these descriptors and the roles below.
"""

from __future__ import annotations

import os

from sbert_pipeline.cluster.job_stage import JOB_STAGE as CLUSTER
from sbert_pipeline.dedup.job_stage import JOB_STAGE as DEDUP
from sbert_pipeline.embed.job_stage import JOB_STAGE as EMBED
from sbert_pipeline.finetune.job_stage import JOB_STAGE as FINETUNE
from sbert_pipeline.index.job_stage import JOB_STAGE as INDEX
from sbert_pipeline.pairs.job_stage import JOB_STAGE as PAIRS
from sbert_pipeline.stage_api.job_stage import JobStage
from sbert_pipeline.verify.job_stage import JOB_STAGE as VERIFY

# In run order: each stage reads only what the ones before it wrote.
STAGES: tuple[JobStage, ...] = (FINETUNE, EMBED, INDEX, CLUSTER, PAIRS, VERIFY, DEDUP)
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in STAGES)
# The stages a config without ``stages:`` runs.
DEFAULT_STAGES: tuple[str, ...] = tuple(
    stage.name for stage in (EMBED, INDEX, CLUSTER, PAIRS, DEDUP)
)
# The stage whose output the job's ``embeddings:`` stands in for: the vectors the others read.
VECTORS_STAGE = EMBED.name
# ``model: <this name>`` means the model this stage of the same job writes.
MODEL_STAGE = FINETUNE.name
_BY_NAME = {stage.name: stage for stage in STAGES}


def stage_spec(name: str) -> JobStage:
    """The descriptor of stage ``name``."""
    return _BY_NAME[name]


def stage_folders(job_dir: str) -> dict[str, str]:
    """Stage -> its output folder in ``job_dir``.

    Joined as text (``/`` after a URL, the OS's separator for a local path), not through the
    path's filesystem: the config is checked where gs:// or s3:// may have no client installed.
    """
    if "://" in job_dir:
        return {stage.name: f"{job_dir.rstrip('/')}/{stage.folder}" for stage in STAGES}
    return {stage.name: os.path.join(job_dir, stage.folder) for stage in STAGES}
