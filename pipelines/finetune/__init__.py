"""The finetune stage: labelled pairs or triplets -> a fine-tuned sentence-transformers model.

``finetune.run(finetune.Options(config="train.yaml", output="runs/model"))`` trains one; the
options are in ``options.py``, the training config in ``config.py``, the run in ``stage.py``
(loaded when it runs: torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sbert_pipeline.finetune.options import Options

# Its line in `sbert --help`.
SUMMARY = "fine-tune a model on labelled pairs or triplets"

if TYPE_CHECKING:
    from sbert_pipeline.stage_api.result import Result

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: Any = None) -> Result:
    """Fine-tune and save the model (see ``pipelines/finetune/stage.py``); ``pipeline`` is
    unused, accepted for the signature every stage's ``run`` has."""
    from sbert_pipeline.finetune.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
