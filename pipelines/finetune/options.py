"""Options of the finetune stage (``sbert finetune``, ``sbert run``'s ``finetune:``,
``finetune.Options``).

The training itself is described by a config file (:class:`sbert_pipeline.finetune.config.
FinetuneConfig`); these options name that file, override its values and choose what the run
does with them. Beam-free and torch-free: the command line is generated from these fields
(``jobs/options_cli.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sbert_pipeline.stage_api.options import OptionError, StageOptions, option

from sbert_core.config import parse_override


@dataclass(frozen=True)
class Options(StageOptions):
    """Fine-tune a Sentence-BERT model (or train a cross-encoder) as a config file describes,
    and save it for the pipeline with a manifest and a model card. Under torchrun it trains on
    several processes (DDP); a killed run started again resumes from its last checkpoint."""

    # model, output, overwrite and resume left at None leave the value to the config; given,
    # they override it (after the overrides).

    INPUT_OPTIONS = ("config", "model")
    DOCS = ("docs/models.md", "docs/distributed.md")

    config: str | None = option(help="YAML or JSON config", metavar="FILE")
    overrides: tuple[str, ...] = option(
        (),
        "override a config value, e.g. --set training.epochs=4 (repeatable)",
        flag="--set",
        cli={"action": "append", "nargs": None, "metavar": "KEY=VALUE"},
        old_positional=True,
    )
    model: str | None = option(help="base model (overrides the config)")
    output: str | None = option(help="output directory (overrides the config)", metavar="DIR")
    overwrite: bool | None = option(help="replace OUTPUT (default: as the config says)")
    resume: bool | None = option(
        help="continue from the newest checkpoint in OUTPUT.checkpoints (default: yes)"
    )
    print_config: bool = option(False, "print the resolved config as YAML and exit")

    def check(self) -> None:
        """Refuse malformed overrides and empty names before any file is read."""
        for override in self.overrides:
            try:
                parse_override(override)
            except ValueError as err:
                raise OptionError("overrides", str(err)) from None
        for name in ("config", "model", "output"):
            if getattr(self, name) == "":
                raise OptionError(name, "must not be empty")
