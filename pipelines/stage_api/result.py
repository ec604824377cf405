"""What a stage's ``run(options)`` returns: its output folder, its manifest and its summary.
Beam-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Result:
    """A finished stage run.

    Attributes:
        output: the output folder, published (its manifest written last).
        manifest: the published manifest, as read back.
        summary: the stage's summary: its counts and measurements, with ``line()``, the one-line
            report the CLI prints.
    """

    output: str
    manifest: dict
    summary: Any

    def line(self) -> str:
        """The one-line human summary (what ``sbert <stage>`` prints)."""
        return self.summary.line()
