"""The command-line parser every benchmark script starts from (imports nothing heavy)."""

from __future__ import annotations

import argparse


def benchmark_parser(doc: str | None, planted: int | None = None) -> argparse.ArgumentParser:
    """The parser of a benchmark script, its docstring as the description.

    Args:
        doc: the script's docstring.
        planted: for a benchmark on planted vectors, the default of ``--n`` (how many); ``--dim``
            and ``--seed`` of the planted data come with it.
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    if planted is not None:
        parser.add_argument("--n", type=int, default=planted, help="planted vectors")
        parser.add_argument("--dim", type=int, default=384)
        parser.add_argument("--seed", type=int, default=0)
    return parser
