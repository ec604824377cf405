"""The README's Python blocks run exactly as written, so the README cannot drift from the code.

The blocks are one session, run in order in one namespace (the Beam block embeds the ``texts``
of the first), with a fresh folder as the working directory (the first saves ``my-model``) that
sees the repository's ``examples/``. The stage block's outputs are compared with the CLI's.
"""

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.jobs import stage_cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    """The text of every fenced ``python`` block of README.md, in order."""
    return PYTHON_BLOCK.findall(README.read_text(encoding="utf-8"))


def test_readme_has_the_python_blocks():
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert "SentenceEncoder.load" in blocks[0]
    assert "FnApiRunner" in blocks[1]
    assert "dedup.run(" in blocks[2]


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    namespace: dict = {"__name__": "__readme__"}
    for number, block in enumerate(python_blocks(), start=1):
        exec(compile(block, f"README.md python block {number}", "exec"), namespace)

    # What the first block's comments promise.
    vectors = namespace["vectors"]
    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32
    result = namespace["result"]
    assert np.array_equal(result.embeddings, vectors)
    assert result.n_tokens.shape == result.truncated.shape == (2,)
    saved = SentenceTransformer(str(tmp_path / "my-model"), device="cpu", local_files_only=True)
    assert np.abs(saved.encode(namespace["texts"]) - vectors).max() <= 1e-5

    # The stage block: the Python API gives what the CLI gives with the same flags.
    corpus = "examples/sample_corpus.jsonl"
    cli = {
        "embed": ["--input", corpus, "--output", "cli/embeddings", "--id-field", "id"],
        "pairs": ["--embeddings", "cli/embeddings", "--output", "cli/pairs"],
        "dedup": ["--pairs", "cli/pairs", "--output", "cli/dedup", "--corpus", corpus],
    }
    cli["embed"] += ["--keep-text"]
    cli["pairs"] += ["--threshold", "0.8"]
    cli["dedup"] += ["--threshold", "0.85"]
    for stage, argv in cli.items():
        assert stage_cli.main(stage, argv) == 0
    api_result = namespace["deduplicated"]
    assert api_result.manifest["counts"]["groups"] > 0
    for pattern in ["pairs/pairs/part-*.parquet", "dedup/groups.parquet"]:
        api = _rows(tmp_path / "out" / "api", pattern)
        assert api and api == _rows(tmp_path / "cli", pattern), pattern
    for listed in ["kept_ids.txt", "removed_ids.txt"]:
        api_ids = (tmp_path / "out" / "api" / "dedup" / listed).read_text()
        assert api_ids == (tmp_path / "cli" / "dedup" / listed).read_text(), listed
    cli_manifest = json.loads((tmp_path / "cli" / "dedup" / "_manifest.json").read_text())
    assert cli_manifest["counts"] == api_result.manifest["counts"]


def _rows(folder: Path, pattern: str) -> list:
    """The rows of the Parquet files under ``folder`` matching ``pattern``, sorted."""
    rows = [
        tuple(row.values())
        for path in sorted(folder.glob(pattern))
        for row in pq.read_table(path).to_pylist()
    ]
    return sorted(rows, key=repr)
