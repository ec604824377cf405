"""The staged output folder of a stage run, opened the same way by every stage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.io.staged_output import prepare_output

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from sbert_pipeline.io.output_dir import OutputLayout
    from sbert_pipeline.io.staged_output import StagedOutput
    from sbert_pipeline.stage_api.options import StageOptions


def stage_output(
    stage: str,
    options: StageOptions,
    layout: OutputLayout,
    *,
    replace_kind: str | None = None,
    adopt: Callable[[str], Collection[str]] | None = None,
) -> StagedOutput:
    """The staged output of a run of ``stage`` with ``options`` (its ``output`` and
    ``overwrite``): refused before any work when it exists (without ``overwrite``) or is not
    this project's; the manifest records the stage and its options. ``replace_kind``: an
    incremental run's own kind, whose complete output it replaces without ``overwrite``
    (:func:`sbert_pipeline.io.staged_output.prepare_output`). ``adopt``: what a resumed run takes
    over from a killed run's attempt area (same function)."""
    return prepare_output(
        options.output,
        overwrite=options.overwrite,
        job={"command": stage, "options": options.to_dict()},
        layout=layout,
        replace_kind=replace_kind,
        adopt=adopt,
    )
