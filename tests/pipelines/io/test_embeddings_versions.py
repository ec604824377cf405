"""Which rows of an embeddings folder are unchanged between two of its versions."""

from __future__ import annotations

import json

import numpy as np
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.embeddings_versions import compare_versions, part_digests, unchanged_row_mask

from tests.planted_vectors import write_embeddings_version


def _part(prefix: str, n: int, seed: int) -> tuple[list[str], np.ndarray]:
    vectors = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    return [f"{prefix}{i}" for i in range(n)], vectors


def _manifest(directory) -> dict:
    return json.loads((directory / "_manifest.json").read_text())


def test_kept_parts_are_unchanged_new_and_rewritten_parts_are_not(tmp_path):
    folder = tmp_path / "emb"
    write_embeddings_version(
        folder, {"part-a.parquet": _part("a", 5, 0), "part-b.parquet": _part("b", 4, 1)}
    )
    before = _manifest(folder)
    (folder / "part-b.parquet").unlink()  # file b changed: its part is written again
    write_embeddings_version(
        folder,
        {
            "part-a.parquet": _part("a", 5, 0),
            "part-b.parquet": _part("b", 4, 2),
            "part-c.parquet": _part("c", 3, 3),
        },
    )
    changes = compare_versions(before, _manifest(folder))
    assert changes.unchanged == {"part-a.parquet"}
    assert changes.new == {"part-b.parquet", "part-c.parquet"}
    assert changes.gone == {"part-b.parquet"}
    assert changes.reusable
    dataset = EmbeddingsDataset.open(str(folder))
    mask = unchanged_row_mask(dataset, changes)
    ids, _ = dataset.load()
    assert [i for i, old in zip(ids, mask, strict=True) if old] == [f"a{i}" for i in range(5)]
    assert len(mask) == 12


def test_a_removed_part_is_gone(tmp_path):
    folder = tmp_path / "emb"
    write_embeddings_version(
        folder, {"part-a.parquet": _part("a", 2, 0), "part-b.parquet": _part("b", 2, 1)}
    )
    before = _manifest(folder)
    write_embeddings_version(folder, {"part-a.parquet": _part("a", 2, 0)})
    changes = compare_versions(before, _manifest(folder))
    assert changes.unchanged == {"part-a.parquet"} and changes.gone == {"part-b.parquet"}
    assert not changes.new


def test_manifests_without_digests_share_nothing(tmp_path):
    folder = tmp_path / "emb"
    write_embeddings_version(folder, {"part-a.parquet": _part("a", 2, 0)})
    current = _manifest(folder)
    old = {key: value for key, value in current.items() if key != "commit"}
    assert part_digests(old) is None
    changes = compare_versions(old, current)
    assert not changes.reusable and changes.new == {"part-a.parquet"}
    # error parts and other files of the commit are not embeddings parts
    current["commit"]["files"].append({"path": "_errors/part-x.parquet", "sha256": "1"})
    assert set(part_digests(current)) == {"part-a.parquet"}
