"""Output folders no job may take, refused from their name alone, before anything lists them.

A job directory or output folder is listed recursively (to find what it holds) and written
into. Given the filesystem root, the home folder or a folder above the current directory, the
listing alone walks a large part of the disk (39 s for ``job_dir: /``) before the folder is
refused for holding files that are not ours; with ``--overwrite`` a stage would write next to
them. These are refused at once, compared as the OS resolves them (so a symlink to ``$HOME`` is
``$HOME``). Object-store paths are not compared: a bucket has no such folders.

Two kinds of names are refused too: a name with a glob character (``*``, ``?``, ``[``), which
Beam's file writers read as a pattern when they move their temporary files into place (the
write fails after the run), and a name that is not UTF-8, which the manifest cannot record.

Example:
    >>> refuse_output_folder("/", "job_dir")  # ValueError: job_dir: / is the filesystem root: ...
"""

from __future__ import annotations

import os
import re

_GLOB = re.compile(r"[*?\[]")
_CHOOSE = "choose a new folder of its own (e.g. out/myjob)"


def refuse_output_folder(path: str, what: str) -> None:
    """Refuse ``path`` as a job's folder if its name cannot be written or it is too wide.

    Too wide: the filesystem root, the home folder or a folder above it, or a folder above the
    current directory (the current directory itself is allowed: an empty one is a fine output).

    Args:
        path: a job directory or output folder as the user gave it.
        what: how the message names it (``job_dir``, ``--output``).

    Raises:
        ValueError: one line naming ``what``, the path and what is wrong with it.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what}: {os.fsencode(path)!r} is not valid UTF-8, which the manifest cannot "
            "record; choose another name"
        ) from None
    glob = _GLOB.search(path)
    if glob:
        raise ValueError(
            f"{what}: {path!r} holds the glob character {glob.group()!r}, which Beam's file "
            "writers read as a pattern; choose a name without * ? ["
        )
    reason = None if "://" in path else _too_wide(path)
    if reason:
        raise ValueError(
            f"{what}: {reason}: a job's folder holds only what the job writes; {_CHOOSE}"
        )


def _too_wide(path: str) -> str | None:
    """What makes local ``path`` too wide to be a job's folder, or None."""
    resolved, root = os.path.realpath(path), os.path.realpath(os.sep)
    home, cwd = os.path.expanduser("~"), os.path.realpath(os.getcwd())
    home = os.path.realpath(home) if home != "~" else None  # "~": no home is known
    shown = path if path == resolved else f"{path} (that is {resolved})"
    if resolved == root:
        return f"{shown} is the filesystem root"
    if home is not None and _within(home, resolved):
        return f"{shown} is your home folder" if home == resolved else f"{shown} holds {home}"
    if _within(cwd, resolved) and cwd != resolved:
        return f"{shown} holds the current directory {cwd}"
    return None


def _within(inner: str, outer: str) -> bool:
    """Whether ``inner`` is ``outer`` or below it (both resolved)."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)
