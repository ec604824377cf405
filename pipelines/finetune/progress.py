"""The finetune stage's progress, shown as every stage shows it
(:mod:`sbert_pipeline.vectors.progress`): on a terminal a bar, elsewhere a line on stderr every
30 seconds, such as::

    finetune: 120/1,400 steps (8.6%), 0.93 steps/s, ETA 22m57s

The training loop's own lines (every ``training.log_every`` steps: the mean loss, the learning
rate, s/step and ETA) are logged beside it. Only the first process of a torchrun shows either.
"""

from __future__ import annotations

import os

from sbert_pipeline.vectors.progress import Progress, show_progress_unless_quiet, stage_progress

from sbert_core.training.step_loop import TrainingProgress

# The description of the training bar, first on its line.
STEPS = "finetune"


def show_training_progress() -> None:
    """Turn progress on in this process when it is the first one (or the only one) and the
    user did not ask for ``--quiet``."""
    show_progress_unless_quiet(here=int(os.environ.get("RANK", "0")) == 0)


class StepBar:
    """A training callback counting optimizer steps on a progress bar.

    The total is what is left when the first step ends (all steps, or those after the
    checkpoint a resumed run started from), so the rate and ETA are this run's.
    """

    def __init__(self) -> None:
        self._bar: Progress | None = None

    def __call__(self, progress: TrainingProgress) -> None:
        if self._bar is None:
            left = progress.total_steps - progress.step + 1
            self._bar = stage_progress(STEPS, total=left, unit="steps")
        self._bar.update()

    def close(self) -> None:
        """Finish the bar (a run that stopped early leaves it short)."""
        if self._bar is not None:
            self._bar.close()
