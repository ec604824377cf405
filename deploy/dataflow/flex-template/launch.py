"""Dataflow flex-template entry point for ``sbert embed``.

The template launcher runs this file with every template parameter as ``--name=value``
(``metadata.json`` declares the job's own ones; pipeline options such as
``sdk_container_image`` ride along). On/off job options arrive as ``--keep-text=true``, which
argparse refuses for a flag, so they are rewritten to the bare flag before ``jobs.embed.run``
splits job options from Beam's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from jobs import embed
from jobs.submit import option_actions


def template_argv(argv: Sequence[str]) -> list[str]:
    """``--switch=true`` -> ``--switch``; ``=false`` -> its ``--no-`` form or nothing.

    Raises:
        ValueError: an on/off option with a value other than true or false.
    """
    actions = option_actions(embed.build_parser())
    result: list[str] = []
    for arg in argv:
        flag, has_value, value = arg.partition("=")
        action = actions.get(flag)
        if not has_value or action is None or action.nargs != 0:
            result.append(arg)
        elif value.lower() == "true":
            result.append(flag)
        elif value.lower() == "false":
            negative = f"--no-{flag.removeprefix('--')}"
            result.extend([negative] if negative in actions else [])
        else:
            raise ValueError(f"{flag} is an on/off option: use true or false, not {value!r}")
    return result


def main() -> None:
    """Run the job with this process's arguments and log its summary."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = embed.run(template_argv(sys.argv[1:]))
    logging.info("%s", summary.line())


if __name__ == "__main__":
    main()
