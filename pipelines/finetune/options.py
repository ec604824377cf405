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
    """How to fine-tune a model (see ``pipelines/finetune/stage.py``).

    ``model``, ``output``, ``overwrite`` and ``resume`` left at None leave the value to the
    config; given, they override it (after the ``overrides``).
    """

    INPUT_OPTIONS = ("config", "model")

    config: str | None = option(help="YAML or JSON config (FinetuneConfig)")
    overrides: tuple[str, ...] = option(
        (),
        "override config values, e.g. training.epochs=4 train.limit=500",
        cli={"positional": True, "nargs": "*", "metavar": "KEY=VALUE"},
    )
    model: str | None = option(help="base model (overrides the config)")
    output: str | None = option(help="output directory (overrides the config)")
    # A switch that only turns overwriting on, as before: without it the config decides.
    overwrite: bool | None = option(help="replace OUTPUT", cli={"action": "store_true"})
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
