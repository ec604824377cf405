"""Dataflow flex-template entry point for ``sbert embed``.

The template launcher runs this file with every template parameter as ``--name=value``
(``metadata.json`` declares the job's own ones; pipeline options such as
``sdk_container_image`` ride along). On/off job options arrive as ``--keep-text=true``, which
argparse refuses for a flag, so they are rewritten to the bare flag before the embed stage's
generated parser splits its options from Beam's.

A flex template's launcher must not wait for the job it submits, so it runs with Beam's
``--no_wait_until_finish``: it checks the options, the model and the input, builds the graph,
submits it and exits; the job's last step counts, checks and publishes the output with its
``_manifest.json`` (docs/architecture.md, "Commit inside the pipeline").
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.options_cli import switch_flags

NO_WAIT = "--no_wait_until_finish"


def template_argv(argv: Sequence[str]) -> list[str]:
    """``--switch=true`` -> ``--switch``; ``=false`` -> its ``--no-`` form or nothing.

    Raises:
        ValueError: an on/off option with a value other than true or false.
    """
    switches = switch_flags(stage_cli.stage_package("embed").Options)
    result: list[str] = []
    for arg in argv:
        flag, has_value, value = arg.partition("=")
        if not has_value or flag not in switches:
            result.append(arg)
        elif value.lower() == "true":
            result.append(flag)
        elif value.lower() == "false":
            negative = switches[flag]
            result.extend([negative] if negative else [])
        else:
            raise ValueError(f"{flag} is an on/off option: use true or false, not {value!r}")
    return result


def launcher_argv(argv: Sequence[str]) -> list[str]:
    """The ``sbert embed`` arguments of a template launch: its parameters as flags, and Beam's
    ``--no_wait_until_finish`` (submit, do not wait)."""
    result = template_argv(argv)
    return result if NO_WAIT in result else [*result, NO_WAIT]


def main() -> None:
    """Submit the job with this process's arguments and log what was submitted."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    submitted = stage_cli.run_command("embed", launcher_argv(sys.argv[1:]))
    logging.info("%s", submitted.line())


if __name__ == "__main__":
    main()
