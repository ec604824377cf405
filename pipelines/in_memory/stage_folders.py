"""Where ``deduplicate`` runs its stages: a temporary folder removed at the end, or the caller's
``output`` folder, kept, whose stages a later call reuses when nothing they depend on changed.

Reuse is ``sbert run``'s (:mod:`sbert_pipeline.stage_api.stage_records`): a stage's fingerprint
covers its name, its options (``input``, a temporary file of the rows, and ``overwrite`` left
out), the digest of the rows it reads from memory and the identity of each output it reads;
``_deduplicate_state.json`` is the folder's job state. A state of the earlier format (per stage
only its fingerprint and manifest sha256) is read as records that no longer match: those stages
run again, replacing the outputs it recorded, and the state is rewritten.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sbert_pipeline.io.output_dir import read_json_or_none
from sbert_pipeline.stage_api.stage_records import (
    JobState,
    StageRecord,
    output_identity,
    stage_fingerprint,
)

STATE_FILE = "_deduplicate_state.json"
TEMP_PREFIX = "sbert-deduplicate-"


@dataclass
class StageFolders:
    """The stage folders of one ``deduplicate`` call, under ``root``.

    Attributes:
        root: the folder holding one folder per stage.
        state: the stages last run there, for a kept root (the caller's, reused); None for a
            temporary one.
    """

    root: str
    state: JobState | None

    def folder(self, stage: str) -> str:
        """The output folder of ``stage``."""
        return os.path.join(self.root, stage)

    def run(
        self,
        stage: str,
        options: Any,
        run: Callable[[Any], Any],
        *,
        rows_digest: str | None = None,
        reads: Sequence[str] = (),
    ) -> str:
        """Run ``run(options)`` into ``options.output`` (the folder of ``stage``), unless a kept
        root holds that stage's output of the same fingerprint; returns the folder.

        Args:
            stage: the stage's name here (``embeddings``, ``pairs``, ``dedup``, ``against``).
            options: its ``Options``.
            run: the stage's ``run``.
            rows_digest: the digest of the rows in memory it reads.
            reads: the output folders it reads.
        """
        folder = options.output
        if self.state is None:
            run(options)
            return folder
        settings = {k: v for k, v in options.to_dict().items() if k != "input"}
        upstream = {os.path.basename(read): output_identity(read) for read in reads}
        fingerprint = stage_fingerprint(stage, settings, {"rows": rows_digest}, upstream)
        if self.state.is_current(stage, fingerprint, output_identity(folder)):
            return folder
        # Ours to replace only when the state says this function wrote it; anything else there
        # is refused by the stage, as the command would refuse it.
        ours = stage in self.state.stages
        self.state.forget(stage)
        began = time.perf_counter()
        run(options.replace(overwrite=ours))
        identity = output_identity(folder)
        if identity is not None:
            self.state.record(stage, fingerprint, identity, time.perf_counter() - began)
        return folder


def _kept_state(root: str) -> JobState:
    """The state of a kept root: its job state, or one read from a state of the earlier format
    (see the module docstring), or an empty one when there is none or it is unreadable."""
    try:
        return JobState.load(root, STATE_FILE)
    except ValueError:
        earlier = read_json_or_none(os.path.join(root, STATE_FILE)) or {}
    stages = {
        name: StageRecord(str(record["fingerprint"]), str(record["manifest"]), 0.0, "")
        for name, record in earlier.items()
        if isinstance(record, dict) and {"fingerprint", "manifest"} <= record.keys()
    }
    return JobState(root, stages, state_file=STATE_FILE)


@contextmanager
def stage_folders(output: str | None) -> Iterator[StageFolders]:
    """The stage folders: under ``output`` (made if missing, kept), or under a new temporary
    folder that is removed on leaving, whatever happened."""
    if output is not None:
        os.makedirs(output, exist_ok=True)
        yield StageFolders(output, _kept_state(output))
        return
    root = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    try:
        yield StageFolders(root, None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
