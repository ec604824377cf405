"""Generated corpora in every input format, with a known set of good and bad rows."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GOOD_TEXTS = [
    "a man plays the guitar",
    "A woman is eating food.",
    'She said "hello" to the dog',
    "the dog runs on the road, in the rain",
    "how do i play music?",
    "Why is the sky blue?",
    "café au lait with naïve résumé",
    "tab-free text; with punctuation!",
]


def write_corpus(
    directory: Path, fmt: str, texts: list[str], *, gz: bool = False, name: str = "corpus"
) -> Path:
    """Write ``texts`` as one file of ``fmt``, with ids ``t0, t1, ...`` where rows have fields."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"t{i}", "text": text, "lang": "en"} for i, text in enumerate(texts)]
    path = directory / f"{name}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
        return path
    if fmt == "txt":
        payload = "".join(text + "\n" for text in texts)
    elif fmt == "jsonl":
        payload = "".join(json.dumps(row) + "\n" for row in rows)
    elif fmt == "tsv":  # quoting off, as in this project's data files
        lines = ["id\ttext\tlang"] + [f"{r['id']}\t{r['text']}\t{r['lang']}" for r in rows]
        payload = "\n".join(lines) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["id", "text", "lang"])
        for row in rows:
            writer.writerow([row["id"], row["text"], row["lang"]])
        payload = buffer.getvalue()
    data = payload.encode("utf-8")
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


def write_bad_jsonl(directory: Path) -> tuple[Path, set[str], int]:
    """A JSONL corpus with every kind of bad row; returns (path, good ids, number of bad rows)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines: list[bytes] = []
    good: set[str] = set()

    def add_good(record_id: str, text: str) -> None:
        good.add(record_id)
        lines.append(json.dumps({"id": record_id, "text": text}).encode("utf-8"))

    add_good("g1", "a man plays the guitar")
    lines.append(json.dumps({"id": "b1", "text": ""}).encode())  # empty
    lines.append(json.dumps({"id": "b2", "text": "   \t "}).encode())  # whitespace only
    lines.append(json.dumps({"id": "b3", "text": None}).encode())  # null
    lines.append(json.dumps({"id": "b4", "text": 42}).encode())  # non-string
    lines.append(b'{"id": "b5", "text": "caf\xe9 latin-1 bytes"}')  # undecodable (mixed encoding)
    add_good("g2", "the dog runs on the road")
    lines.append(b'{"id": "b6", "text": "unterminated')  # malformed JSON
    lines.append(json.dumps({"id": "b7", "body": "no text field"}).encode())  # missing field
    lines.append(json.dumps(["not", "an", "object"]).encode())  # not an object
    lines.append(json.dumps({"id": "g1", "text": "duplicate of the first id"}).encode())  # dup id
    lines.append(json.dumps({"text": "no id here"}).encode())  # missing id field
    lines.append(b"")  # blank line
    add_good("g3", "word " * 200_000)  # a 1 MB line: truncated, not rejected
    add_good("g4", "naïve café, written in UTF-8")  # valid non-ASCII
    path = directory / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, good, len(lines) - len(good)
