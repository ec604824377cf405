"""The stage commands as tests call them: ``index([...flags])`` -> the stage's summary.

Each runs ``sbert <stage> ARGV`` through the generated parser and the stage's ``run``, as the
CLI does (``jobs/stage_cli.py``), with an optional test pipeline.
"""

from __future__ import annotations

from typing import Any

from sbert_pipeline.jobs.stage_cli import run_command


def _command(stage: str):
    def run(argv: list[str] | None = None, test_pipeline: Any = None) -> Any:
        return run_command(stage, argv, pipeline=test_pipeline).summary

    run.__name__ = stage
    run.__doc__ = f"``sbert {stage} ARGV``; returns its summary."
    return run


cluster = _command("cluster")
dedup = _command("dedup")
embed = _command("embed")
finetune = _command("finetune")
index = _command("index")
pairs = _command("pairs")
search = _command("search")
