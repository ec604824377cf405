"""Where ``deduplicate`` runs its stages: a temporary folder removed at the end, or the caller's
``output`` folder, kept, whose stages a later call reuses when nothing they depend on changed.

Reuse follows ``sbert run``'s rule: a stage's *fingerprint* is a sha256 over its name, its
options (``overwrite`` left out), the digest of the rows it reads from memory and the manifest
of each output it reads. ``_deduplicate_state.json`` records, per stage, the fingerprint it ran
with and the sha256 of the manifest it wrote; a stage is skipped when both still match. A
stage's record is dropped before it runs, so a call that fails never leaves a record claiming an
output being replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sbert_pipeline.io.atomic import write_json_replacing
from sbert_pipeline.io.output_dir import MANIFEST, read_json_or_none

STATE_FILE = "_deduplicate_state.json"
TEMP_PREFIX = "sbert-deduplicate-"


@dataclass
class StageFolders:
    """The stage folders of one ``deduplicate`` call, under ``root``.

    Attributes:
        root: the folder holding one folder per stage.
        kept: whether ``root`` is the caller's (kept, reused) rather than temporary.
        state: stage name -> ``{"fingerprint", "manifest"}`` of its last run (kept roots).
    """

    root: str
    kept: bool
    state: dict

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
        if not self.kept:
            run(options)
            return folder
        settings = {k: v for k, v in options.to_dict().items() if k not in ("input", "overwrite")}
        payload = {
            "stage": stage,
            "options": settings,
            "rows": rows_digest,
            "reads": [manifest_digest(read) for read in reads],
        }
        fingerprint = _sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8"))
        record = self.state.pop(stage, None)
        if record == {"fingerprint": fingerprint, "manifest": manifest_digest(folder)}:
            self.state[stage] = record
            return folder
        self._save()
        # Ours to replace only when this call's state says it wrote it; anything else there
        # is refused by the stage, as the command would refuse it.
        run(options.replace(overwrite=record is not None))
        self.state[stage] = {"fingerprint": fingerprint, "manifest": manifest_digest(folder)}
        self._save()
        return folder

    def _save(self) -> None:
        write_json_replacing(os.path.join(self.root, STATE_FILE), self.state)


def manifest_digest(folder: str) -> str | None:
    """sha256 of a folder's manifest, or None when it has none (no complete output)."""
    try:
        with open(os.path.join(folder, MANIFEST), "rb") as handle:
            return _sha256(handle.read())
    except FileNotFoundError:
        return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def stage_folders(output: str | None) -> Iterator[StageFolders]:
    """The stage folders: under ``output`` (made if missing, kept), or under a new temporary
    folder that is removed on leaving, whatever happened."""
    if output is not None:
        os.makedirs(output, exist_ok=True)
        state = read_json_or_none(os.path.join(output, STATE_FILE)) or {}
        yield StageFolders(output, True, state)
        return
    root = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    try:
        yield StageFolders(root, False, {})
    finally:
        shutil.rmtree(root, ignore_errors=True)
