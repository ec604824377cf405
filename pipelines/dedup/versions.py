"""The previous dedup version in the output folder: stable decisions and what changed (Beam-free).

A dedup run reads the version its output folder holds before it prepares the new one
(:func:`read_previous`): the manifest, ``kept_ids.txt``, ``removed_ids.txt`` and
``groups.parquet``, checked against the manifest's digests.

* **Pinned rows**: every row the previous version kept and that still exists is kept again
  (:mod:`sbert_pipeline.dedup.decide`) when the settings that decide groups are those it was made
  with (``--stable-keep auto``, the default: "kept stays kept" is for new data). A changed
  setting (a lowered threshold, another method) asks for other decisions, so the run decides
  afresh unless ``--stable-keep`` pins them anyway; ``--no-stable-keep`` never pins. Never across a
  changed model identity (weights, prompt, dimension, ...): the similarities are not
  comparable. The manifest's ``stable_keep`` and the summary line say which happened and why.
* **Stable group ids** (:func:`stable_group_ids`): a group whose members are exactly those of
  a previous group keeps that group's id; every other group gets an id above the previous
  version's largest, in group order.
* **What changed** (:func:`changes`): new, grown, changed and unchanged groups, rows newly
  removed or newly kept, previously kept rows now removed, rows gone.

A version's files: ``groups.parquet`` (:data:`GROUPS_SCHEMA`) and the id lists
``kept_ids.txt`` / ``removed_ids.txt``: UTF-8, one id per line, LF-terminated; a backslash is
written as ``\\\\``, a line feed as ``\\n`` and a carriage return as ``\\r`` (read them back with
:func:`read_id_list`). Its ``corpus_index.parquet`` says where each record sits in each corpus
file, so that the next run over the same files parses only the new and changed ones
(:func:`previous_index`; a file whose path, id prefix, bytes and sha256 are unchanged is taken
from the index).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.dedup.options import deciding_settings, settings_changed
from sbert_pipeline.grouping.item_ids import ItemIds
from sbert_pipeline.grouping.model import Grouping
from sbert_pipeline.io.embeddings import (
    EmbeddingsDataset,
    IncompatibleEmbeddingsError,
    require_compatible,
)
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, CorruptOutputError, join, read_manifest
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_embeddings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreviousVersion:
    """A published dedup version: its manifest, id lists and groups (``groups.parquet``'s
    ``id`` and ``group`` columns: grouped rows only), all held as Arrow arrays (a version of
    millions of rows as Python strings would take gigabytes)."""

    directory: str
    manifest: dict
    kept: pa.Array
    removed: pa.Array
    groups: pa.Table

    @property
    def max_group(self) -> int:
        """The largest group id it used (-1: none)."""
        largest = pc.max(self.groups.column("group")).as_py()
        return -1 if largest is None else int(largest)


@dataclass(frozen=True)
class Stability:
    """What the previous version gives this run: the version (None: none or ignored), whether
    its kept rows are pinned, why (one line for the summary, the log and the manifest), the
    ``--stable-keep`` value and the deciding settings that changed since that version."""

    previous: PreviousVersion | None
    pins: bool
    reason: str
    option: str
    changed: tuple[str, ...] = ()

    def to_json(self, n_pinned: int) -> dict:
        """The manifest's ``stable_keep`` section."""
        manifest = None if self.previous is None else self.previous.manifest
        return {
            "option": self.option,
            "pinned": self.pins,
            "reason": self.reason,
            "settings_changed": list(self.changed),
            "previous_created": None if manifest is None else manifest.get("created"),
            "previous_settings": None if manifest is None else manifest_settings(manifest),
            "rows_pinned": n_pinned,
        }


def manifest_settings(manifest: dict) -> dict:
    """The deciding settings (:func:`sbert_pipeline.dedup.options.deciding_settings`) a dedup
    manifest records."""
    recorded = manifest.get("settings") or {}
    return deciding_settings(
        method=manifest.get("method"),
        threshold=manifest.get("threshold"),
        keep=manifest.get("keep"),
        radius=recorded.get("radius"),
        mutual_k=recorded.get("mutual_k"),
        missing_score=recorded.get("missing_score"),
        seed=recorded.get("seed"),
    )


def read_previous(output: str | None, stable_keep: str, model: dict, settings: dict) -> Stability:
    """The previous version in ``output`` and whether its kept rows are pinned.

    Args:
        output: the output folder (None: a dry run without one).
        stable_keep: ``auto`` (pin when ``settings`` are the previous version's), ``on``
            (pin) or ``off`` (never pin).
        model: this run's embeddings manifest (its model identity is compared).
        settings: this run's deciding settings (:func:`deciding_settings`).

    A folder whose manifest disagrees with its files (or is not ours) pins nothing: the
    reason says why.
    """
    if output is None or not FileSystems.exists(join(output, MANIFEST)):
        return Stability(None, False, "no previous version in the output folder", stable_keep)
    try:
        manifest = read_manifest(output)
        if manifest.get("kind") != "dedup":
            # A foreign folder: prepare_output refuses it (or --overwrite replaces it).
            return Stability(None, False, f"{output} holds no dedup version", stable_keep)
        previous = PreviousVersion(
            output,
            manifest,
            read_id_array(join(output, KEPT_FILE)),
            read_id_array(join(output, REMOVED_FILE)),
            _group_ids(join(output, GROUPS_FILE)),
        )
    except (CorruptOutputError, FileNotFoundError, ValueError) as err:
        # A damaged folder must not block its replacement (--overwrite); it pins nothing.
        logger.warning("the dedup version in %s cannot be read: %s", output, err)
        return Stability(
            None, False, f"the version in {output} cannot be read ({err})", stable_keep
        )
    changed = tuple(settings_changed(manifest_settings(manifest), settings))
    return Stability(
        previous, *_decision(stable_keep, changed, manifest, model), stable_keep, changed
    )


def _decision(
    stable_keep: str, changed: tuple[str, ...], manifest: dict, model: dict
) -> tuple[bool, str]:
    """Whether the previous version's kept rows are pinned, and why."""
    if stable_keep == "off":
        return False, "decided afresh: --no-stable-keep"
    try:
        require_compatible(manifest, model, "the previous dedup version and these embeddings")
    except IncompatibleEmbeddingsError as err:
        return False, f"decided afresh: {err}"
    if not changed:
        return True, "the previous version's kept rows kept again (same settings)"
    what = ", ".join(changed)
    if stable_keep == "on":
        return (
            True,
            f"the previous version's kept rows kept again (--stable-keep), though {what}",
        )
    return False, (
        f"decided afresh: {what} since the previous version; --stable-keep keeps its decisions"
    )


def _group_ids(path: str) -> pa.Table:
    """The ``id`` (string) and ``group`` (int64) columns of a ``groups.parquet``."""
    with FileSystems.open(path) as handle:
        table = pq.read_table(handle, columns=["id", "group"])
    return pa.table(
        {
            "id": table.column("id").combine_chunks().cast(pa.string()),
            "group": table.column("group").combine_chunks().cast(pa.int64()),
        }
    )


def pinned_rows(stability: Stability, ids: ItemIds, n: int) -> np.ndarray:
    """``(n,)`` bool: the rows (of ``ids``) the previous version kept."""
    out = np.zeros(n, bool)
    if stability.pins and stability.previous is not None:
        rows = ids.rows_of(stability.previous.kept)
        out[rows[rows >= 0]] = True
    return out


def _memberships(grouping: Grouping, ids: Sequence[str]) -> list[frozenset[str]]:
    """The member ids of every group, in group order."""
    rows = np.flatnonzero(grouping.group >= 0)
    rows = rows[np.argsort(grouping.group[rows], kind="stable")]
    bounds = np.searchsorted(grouping.group[rows], np.arange(grouping.n_groups + 1))
    members = ItemIds.of(ids).take(rows)
    return [frozenset(members[lo:hi]) for lo, hi in itertools.pairwise(bounds.tolist())]


def _previous_memberships(previous: PreviousVersion) -> dict[int, frozenset[str]]:
    """``{group id: member ids}`` of the previous version's groups."""
    groups = previous.groups.column("group").to_numpy()
    order = np.argsort(groups, kind="stable")
    members = previous.groups.column("id").take(pa.array(order)).to_pylist()
    starts = [*np.flatnonzero(np.diff(groups[order], prepend=-2)).tolist(), len(order)]
    return {
        int(groups[order[lo]]): frozenset(members[lo:hi]) for lo, hi in itertools.pairwise(starts)
    }


def stable_group_ids(
    grouping: Grouping, ids: Sequence[str], previous: PreviousVersion | None
) -> np.ndarray:
    """``(G,)`` int64: each group's published id (module docstring); ``0 .. G-1`` without a
    previous version."""
    if previous is None:
        return np.arange(grouping.n_groups, dtype=np.int64)
    before = {members: group for group, members in _previous_memberships(previous).items()}
    out = np.empty(grouping.n_groups, np.int64)
    following = previous.max_group + 1
    for number, members in enumerate(_memberships(grouping, ids)):
        if members in before:
            out[number] = before[members]
        else:
            out[number] = following
            following += 1
    return out


def changes(
    grouping: Grouping, ids: Sequence[str], kept: np.ndarray, previous: PreviousVersion | None
) -> dict | None:
    """What changed since ``previous`` (None without one): groups and rows.

    Args:
        grouping: this run's groups.
        ids: every row's id (a reference row's too).
        kept: ``(n,)`` bool, the rows this run keeps that ``kept_ids.txt`` lists (corpus rows).
        previous: the previous version.

    Groups: ``unchanged`` (same members as a previous group), ``new`` (no member was in a
    previous group), ``grown`` (holds every member of each previous group it shares a member
    with, and more), ``changed`` (the others). Rows: ``newly_removed`` (removed now, not
    before: new rows and rows kept before), ``previously_kept_removed`` (kept before, removed
    now: 0 while the kept rows are pinned, but for rows that match an ``--against`` reference
    row), ``newly_kept`` (removed before, kept now), ``new``
    (not in the previous version), ``gone`` (in the previous version, not now).
    """
    if previous is None:
        return None
    before = _previous_memberships(previous)
    group_of = {item: group for group, members in before.items() for item in members}
    counts = {"unchanged": 0, "new": 0, "grown": 0, "changed": 0}
    identical = set(before.values())
    for members in _memberships(grouping, ids):
        if members in identical:
            counts["unchanged"] += 1
            continue
        touched = {group_of[item] for item in members if item in group_of}
        if not touched:
            counts["new"] += 1
        elif all(before[group] <= members for group in touched):
            counts["grown"] += 1
        else:
            counts["changed"] += 1
    # Rows in Arrow (set membership over millions of ids); the id lists hold the corpus rows.
    listed = ItemIds.of(ids).array.slice(0, len(kept))
    was_kept = pc.is_in(listed, value_set=previous.kept).to_numpy(zero_copy_only=False)
    was_removed = pc.is_in(listed, value_set=previous.removed).to_numpy(zero_copy_only=False)
    before_ids = pa.concat_arrays([previous.kept, previous.removed]).unique()
    still = pc.is_in(before_ids, value_set=listed).to_numpy(zero_copy_only=False)
    kept = kept.astype(bool)
    return {
        "previous_created": previous.manifest.get("created"),
        "groups": counts,
        "rows": {
            "new": int((~was_kept & ~was_removed).sum()),
            "gone": int((~still).sum()),
            "newly_removed": int((~kept & ~was_removed).sum()),
            "previously_kept_removed": int((~kept & was_kept).sum()),
            "newly_kept": int((kept & was_removed).sum()),
        },
    }


INDEX_FILE = "corpus_index.parquet"
INDEX_SCHEMA = pa.schema(
    [("file", pa.int32(), False), ("row", pa.int64(), False), ("id", pa.string(), False)]
)

# A file as the index knows it: (path, id prefix, bytes, sha256).
FileKey = tuple[str, str, int, str]


@dataclass(frozen=True)
class FileRows:
    """What the reader gave for one corpus file.

    Attributes:
        rows: rows read (records and rejected rows).
        numbers: ``(m,)`` int64, each record's row number (1-based, as in its ``source``).
        ids: each record's id, in row order.
    """

    rows: int
    numbers: np.ndarray
    ids: list[str]


def spec_json(spec) -> dict:
    """A reading spec as the manifest records it (tuples as lists), for comparison."""
    return json.loads(json.dumps(asdict(spec)))


def embedded_texts(
    datasets: Sequence[EmbeddingsDataset], spec
) -> Callable[[set[str]], dict[str, str]] | None:
    """A function giving the texts of ids from the embeddings, when every embeddings folder
    holds its texts and was read from the corpus with ``spec`` (so its texts are the ones the
    reader gives); None otherwise."""
    if not datasets or not all(dataset.has_text for dataset in datasets):
        return None
    if any(recorded_corpus_spec(dataset.manifest) != spec for dataset in datasets):
        return None
    return lambda wanted: texts_from_embeddings(datasets, wanted)


def previous_index(output: str | None, spec) -> dict[FileKey, FileRows]:
    """The files of the corpus index in the dedup version in ``output`` that were read with
    ``spec`` (empty: none, or one that cannot be used, logged with the reason)."""
    if output is None or not FileSystems.exists(join(output, MANIFEST)):
        return {}
    try:
        return _read_index(output, spec)
    except (CorruptOutputError, FileNotFoundError, ValueError, KeyError, pa.ArrowException) as err:
        logger.warning("the corpus index in %s is not used (%s): every file is read", output, err)
        return {}


def _read_index(output: str, spec) -> dict[FileKey, FileRows]:
    manifest = read_manifest(output, verify=False)  # the one file used is checked below
    if not isinstance(manifest, dict) or manifest.get("kind") != "dedup":
        return {}
    section = (manifest.get("corpus") or {}).get("index")
    if not isinstance(section, dict):
        return {}
    if section.get("spec") != spec_json(spec):
        logger.info("the corpus index in %s was read with other settings: not used", output)
        return {}
    listed = {entry["path"]: entry for entry in manifest.get("commit", {}).get("files", [])}
    entry = listed.get(INDEX_FILE)
    if entry is None:
        raise CorruptOutputError(f"{INDEX_FILE} is not listed in the manifest's commit")
    path = join(output, INDEX_FILE)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        data = handle.read()
    if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CorruptOutputError(f"{path} differs from the bytes and sha256 its manifest lists")
    table = pq.read_table(io.BytesIO(data))
    numbers = table.column("file").to_numpy()
    bounds = np.searchsorted(numbers, np.arange(len(section["files"]) + 1))
    rows = table.column("row").to_numpy()
    ids = table.column("id")
    out: dict[FileKey, FileRows] = {}
    for number, file in enumerate(section["files"]):
        lo, hi = int(bounds[number]), int(bounds[number + 1])
        if hi - lo != file["records"]:
            found = f"file {number} has {hi - lo} rows, not {file['records']}"
            raise CorruptOutputError(f"{path}: {found}")
        key = (file["path"], file["id_prefix"], int(file["bytes"]), file["sha256"])
        out[key] = FileRows(int(file["rows"]), rows[lo:hi].copy(), ids[lo:hi].to_pylist())
    return out


ID_LIST_ENCODING = (
    "UTF-8, one id per line, LF-terminated; backslash, LF and CR inside an id are written as "
    "\\\\, \\n and \\r"
)


GROUPS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("group", pa.int64(), nullable=False),
        pa.field("is_representative", pa.bool_(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        # Score of the pair (member, representative); null for the representative itself and
        # for chained members (their pair with it is under the threshold; grouping/model.py).
        pa.field("score", pa.float32()),
    ]
)


GROUPS_FILE, KEPT_FILE, REMOVED_FILE = "groups.parquet", "kept_ids.txt", "removed_ids.txt"


REPORT_FILE = "report.html"


def encode_id(value: str) -> str:
    """An id as one line of an id list (without the line feed)."""
    if "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}


_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)


def decode_id(line: str) -> str:
    """The id written as ``line`` by :func:`encode_id`.

    Raises:
        ValueError: an escape other than ``\\\\``, ``\\n`` or ``\\r``.
    """

    def replace(match: re.Match) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"bad escape {match.group(0)!r} in id list line {line!r}")
        return _ESCAPES[match.group(1)]

    return _ESCAPE.sub(replace, line) if "\\" in line else line


def write_id_list(path: str, ids: Iterable[str]) -> int:
    """Write ids one per line (see the module docstring); returns how many."""
    count = 0
    chunk: list[str] = []
    with FileSystems.create(path, mime_type="text/plain") as handle:
        for value in ids:
            chunk.append(encode_id(value))
            count += 1
            if len(chunk) >= 65536:
                handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
                chunk = []
        if chunk:
            handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
    return count


def read_id_list(path: str) -> list[str]:
    """Ids from a list written by :func:`write_id_list`."""
    return read_id_array(path).to_pylist()


def read_id_array(path: str) -> pa.Array:
    """Ids from a list written by :func:`write_id_list`, as a ``string`` array: split in
    Arrow, so that millions of ids never become Python strings; only escaped lines are."""
    with FileSystems.open(path) as handle:
        data = handle.read()
    if not data:
        return pa.array([], pa.string())
    text = pa.array([data.decode("utf-8")], pa.large_string())
    lines = pc.split_pattern(text, "\n").flatten()
    lines = lines.slice(0, len(lines) - 1).cast(pa.string())  # the last line feed ends the list
    escaped = np.flatnonzero(pc.match_substring(lines, "\\").to_numpy(zero_copy_only=False))
    if len(escaped) == 0:
        return lines
    decoded = [decode_id(line) for line in lines.take(pa.array(escaped)).to_pylist()]
    values = lines.to_pylist()  # rare: ids with a backslash or a line break
    for row, value in zip(escaped.tolist(), decoded, strict=True):
        values[row] = value
    return pa.array(values, pa.string())
