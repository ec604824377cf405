"""When a stage's output can be reused: its fingerprint, its output's identity and the record
of finished stages. Beam-free (local paths are served without Beam).

``sbert run`` (its job directory) and ``deduplicate(output=...)`` (its kept stage folders) both
skip a stage when nothing it depends on changed, by the same rule:

- a stage's *fingerprint* (:func:`stage_fingerprint`) is a sha256 over its name, its options
  (``overwrite`` left out: whether it replaces an output does not change what it writes), its
  inputs from outside (described by the caller) and the *identity* of each output it reads;
- an output's identity (:func:`output_identity`) is the sha256 of its manifest, which a stage
  writes last and only on success, so a stage that ran again changes the fingerprints of the
  stages reading it, and a half-written output (no manifest, or an unparsable one) has none;
- the :class:`JobState` file records per stage the fingerprint it ran with and the identity of
  the output it wrote. A stage is skipped when both still match. Its record is removed before it
  runs, so a run that dies leaves no record claiming an output being replaced.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sbert_pipeline.io.atomic import write_json_replacing
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, join

JOB_STATE_FILE = "_job_state.json"  # sbert run's, in its job directory
STATE_FORMAT = 1


def stage_fingerprint(
    stage: str,
    options: Mapping[str, Any],
    inputs: Mapping[str, Any],
    upstream: Mapping[str, str | None],
) -> str:
    """sha256 of what a stage's output depends on.

    Args:
        stage: the stage's name.
        options: its options as a dict (``overwrite``, if there, is left out).
        inputs: its inputs from outside, described (paths, sizes, digests, ...).
        upstream: the name of each output it reads -> that output's :func:`output_identity`.
    """
    payload = {
        "stage": stage,
        "options": {name: value for name, value in options.items() if name != "overwrite"},
        "inputs": dict(inputs),
        "upstream": dict(upstream),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def output_identity(folder: str, manifest_name: str = MANIFEST) -> str | None:
    """sha256 of the output's manifest; None when the output is not complete (no manifest, or
    an empty or unparsable one, as after a failed write: the stage then runs again)."""
    path = join(folder, manifest_name)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        data = handle.read()
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return hashlib.sha256(data).hexdigest() if isinstance(value, dict) else None


@dataclass
class StageRecord:
    """What the job state remembers about a stage's last successful run.

    The stages of one ``sbert run`` share its process, whose peak RSS only grows: ``peak_rss``
    (bytes, :func:`sbert_pipeline.io.resources.peak_rss` at the stage's end) is the stage's own peak
    when it exceeds ``peak_rss_at_start``, and an upper bound of it otherwise. A state written
    before they were recorded reads as None.
    """

    fingerprint: str
    output_identity: str
    seconds: float
    finished: str
    peak_rss: int | None = None
    peak_rss_at_start: int | None = None


@dataclass
class JobState:
    """A folder's record of finished stages (``state_file`` in ``job_dir``: ``sbert run``'s
    ``_job_state.json`` by default), and of the job that made it (``identity``: what
    ``sbert run`` checks the directory is its job's by; None in a state written before it was
    recorded, and where no job config made the folder)."""

    job_dir: str
    stages: dict[str, StageRecord] = field(default_factory=dict)
    identity: dict | None = None
    state_file: str = JOB_STATE_FILE

    @classmethod
    def load(cls, job_dir: str, state_file: str = JOB_STATE_FILE) -> JobState:
        """The saved state, or an empty one for a new job directory.

        Raises:
            ValueError: the state file is unreadable (it names the file to delete).
        """
        path = join(job_dir, state_file)
        if not FileSystems.exists(path):
            return cls(job_dir, state_file=state_file)
        try:
            with FileSystems.open(path) as handle:
                raw = json.loads(handle.read().decode("utf-8"))
            stages = {name: StageRecord(**record) for name, record in raw["stages"].items()}
            identity = raw.get("job")
            if identity is not None and not isinstance(identity, dict):
                raise TypeError("job: not a mapping")
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{path} is not a readable job state ({err}); delete it to rerun every stage"
            ) from None
        return cls(job_dir, stages, identity, state_file)

    def is_current(self, stage: str, fingerprint: str, identity: str | None) -> bool:
        """True when ``stage`` last ran with ``fingerprint`` and its output is still that run's."""
        record = self.stages.get(stage)
        return (
            record is not None
            and identity is not None
            and record.fingerprint == fingerprint
            and record.output_identity == identity
        )

    def forget(self, stage: str) -> None:
        """Drop a stage's record and save (before its output is replaced)."""
        if self.stages.pop(stage, None) is not None:
            self.save()

    def record(
        self,
        stage: str,
        fingerprint: str,
        identity: str,
        seconds: float,
        peak_rss: tuple[int, int] | None = None,
    ) -> None:
        """Remember a stage that finished, and save.

        Args:
            peak_rss: the process's peak RSS at the stage's start and at its end, in bytes.
        """
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        at_start, at_end = peak_rss if peak_rss is not None else (None, None)
        self.stages[stage] = StageRecord(
            fingerprint, identity, round(seconds, 3), finished, at_end, at_start
        )
        self.save()

    def save(self) -> None:
        """Write the state so that readers see the old file or the new one, never a mix."""
        value = {
            "format": STATE_FORMAT,
            "job": self.identity,
            "stages": {name: asdict(record) for name, record in self.stages.items()},
        }
        write_json_replacing(join(self.job_dir, self.state_file), value)
