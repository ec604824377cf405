"""The encoder flags of ``sbert encode`` and ``sbert eval``, generated from the fields of
:class:`~sbert_pipeline.stage_api.model_options.ModelOptions`, where each is declared once (the
stage commands, ``sbert embed`` and ``sbert search``, get them from their ``Options``).

:func:`add_model_arguments` adds the flags to a command's parser and
:func:`settings_from_flags` turns the parsed values into one
:class:`~sbert_core.inference.encoder_settings.EncoderSettings`, checked as the stages check them
(``model_options.encoder_settings`` does the same from a stage's options).

This module imports no torch: ``sbert CMD --help`` builds the parsers from it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sbert_pipeline.jobs.options_cli import argparse_settings, cli_fields, flag_of
from sbert_pipeline.stage_api import model_options
from sbert_pipeline.stage_api.model_options import COMPUTE_DTYPE_CHOICES, MODEL_GROUP, ModelOptions
from sbert_pipeline.stage_api.old_spellings import say_once
from sbert_pipeline.stage_api.options import field_types

# The fields of which one at most may be given.
PROMPT_FIELDS = ("prompt_name", "prompt")

if TYPE_CHECKING:
    from sbert_core.inference.encoder_settings import EncoderSettings


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's destination, hidden from
    ``--help``, with a deprecation line naming the new spelling."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        say_once(
            f"{option_string} is the old name of {self.new}; it will be removed in the next version"
        )
        setattr(namespace, self.dest, values)


def add_model_arguments(
    parser: argparse.ArgumentParser, *, old_dtype_flag: bool = False, normalize: bool = False
) -> None:
    """Add the flags of :class:`ModelOptions` to ``parser``, as its "model" group.

    Args:
        parser: the command's parser.
        old_dtype_flag: also accept ``--dtype`` for the compute dtype, with a deprecation
            warning (commands whose ``--dtype`` meant the compute dtype before; no command
            that stores vectors in a chosen dtype may set it).
        normalize: also add ``--normalize/--no-normalize`` (commands that write vectors).
    """
    group = parser.add_argument_group(MODEL_GROUP)
    # One prompt option at most: refused by argparse here, as by ModelOptions.check elsewhere.
    prompts = group.add_mutually_exclusive_group()
    hints = field_types(ModelOptions)
    for item in cli_fields(ModelOptions):
        if item.name == "normalize" and not normalize:
            continue
        target = prompts if item.name in PROMPT_FIELDS else group
        flags = [flag_of(item.name), *item.metadata.get("aliases", ())]
        target.add_argument(*flags, dest=item.name, **argparse_settings(item, hints[item.name]))
    if old_dtype_flag:
        group.add_argument(
            "--dtype",
            dest="compute_dtype",
            choices=COMPUTE_DTYPE_CHOICES,
            action=DeprecatedAlias,
            new="--compute-dtype",
        )


def settings_from_flags(args: argparse.Namespace) -> EncoderSettings:
    """The encoder settings of the flags :func:`add_model_arguments` added.

    Options a command does not have (``--normalize`` on ``sbert eval``) keep their defaults.

    Raises:
        OptionError: a value :class:`ModelOptions` refuses, naming the flag.
    """
    names = [item.name for item in cli_fields(ModelOptions) if hasattr(args, item.name)]
    options = ModelOptions(**{name: getattr(args, name) for name in names})
    return model_options.encoder_settings(options)
