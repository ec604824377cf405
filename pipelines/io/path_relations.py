"""Where an output folder lies relative to an input: the same place, inside it, or above it.

An output equal to an input replaces it; one inside an input mixes its files into the input's
(a reader of the input then lists both); one above an input holds it, so writing or
``--overwrite`` replaces it. Each is refused before anything is written.

Local paths are compared as the OS resolves them (``os.path.realpath``: an output that is a
symlink to an input is that input); remote URLs (``gs://``, ``s3://``) by their names, trailing
and doubled slashes aside. An input with a glob character (``data/*.jsonl``) stands for the
files it can match: an output at or above its fixed folder holds them, and one inside that
folder only meets them when the pattern could match the output or a file under it
(``data/**``, ``data/*`` for ``data/emb``); a sibling such as ``data/emb`` next to
``data/*.jsonl`` is apart from it.

Example:
    >>> relation("out/pairs/verified", "out/pairs")
    'inside'
    >>> overlap_error("out/pairs", "--pairs", "out/pairs")
    'out/pairs is --pairs out/pairs itself: ...'
"""

from __future__ import annotations

import os
import re
from typing import Literal

from sbert_pipeline.io.filesystems import pattern_regex, split_pattern

Relation = Literal["equal", "inside", "above"]

_SCHEME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9+.]*://")
_GLOB = re.compile(r"[*?\[]")
_WHY = {
    "equal": "is {input} itself: writing would replace the input",
    "inside": "is inside {input}: its files would mix with the input's",
    "above": "holds {input}: writing or --overwrite would replace the input",
    "matched": "is a name {input} matches: the input would read the output",
}


def relation(output: str, input: str) -> Relation | None:
    """Where ``output`` lies relative to ``input`` (a folder, a file or a glob).

    Returns:
        ``"equal"``: the same place (for a glob, the output is one of the names it matches);
        ``"inside"``: the output is below the input (for a glob, where it could match files);
        ``"above"``: the output holds the input (for a glob, its fixed folder);
        None: apart, or one is local and the other remote.
    """
    out, out_remote = _names(output)
    folder, rest = split_pattern(input) if _GLOB.search(input) else (input, "")
    base, in_remote = _names(folder or ".")
    if out_remote != in_remote:
        return None
    if out[: len(base)] != base:
        return "above" if base[: len(out)] == out else None
    below = out[len(base) :]
    if not rest:
        return "inside" if below else "equal"
    return _glob_relation(below, [name for name in rest.split("/") if name])


def overlap_error(output: str, input_name: str, input: str) -> str | None:
    """Why ``output`` may not be written where it lies relative to ``input`` (one line, both
    paths named, for the caller to put after the output's name), or None where they are apart.

    Args:
        output: the output path as given.
        input_name: how the message names the input (``--pairs``, ``corpus``).
        input: the input path or glob as given.
    """
    found = relation(output, input)
    if found is None:
        return None
    key = "matched" if found == "equal" and _GLOB.search(input) else found
    why = _WHY[key].format(input=f"{input_name} {_shown(input)}")
    return f"{_shown(output)} {why}; choose an output folder apart from every input"


def _glob_relation(below: list[str], pattern: list[str]) -> Relation | None:
    """Where an output ``below`` a glob's folder lies relative to the files of the rest of the
    glob (its names ``pattern``): None where no name it matches could be the output or under
    it."""
    if not below:
        return "above"
    for depth, name in enumerate(below):
        if depth >= len(pattern):
            return None  # the output lies deeper than any name the pattern matches
        if "**" in pattern[depth]:
            return "inside"  # matches at any depth
        if not pattern_regex("", pattern[depth]).match(name):
            return None
    return "equal" if len(below) == len(pattern) else "inside"


def _names(path: str) -> tuple[list[str], bool]:
    """``path`` as its list of names (resolved locally; a URL's scheme first), and whether
    it is remote."""
    if _SCHEME.match(path):
        scheme, _, rest = path.partition("://")
        return [f"{scheme.lower()}://", *(name for name in rest.split("/") if name)], True
    return [name for name in os.path.realpath(path).split(os.sep) if name], False


def _shown(path: str) -> str:
    """``path``, with what it resolves to when a link or ``..`` makes that differ."""
    if _SCHEME.match(path) or _GLOB.search(path):
        return path
    resolved = os.path.realpath(path)
    same = resolved == os.path.abspath(path)
    return path if same else f"{path} (that is {resolved})"
