"""The README's Python blocks run exactly as written, so the README cannot drift from the code.

The blocks are one session, run in order in one namespace (the Beam block embeds the ``texts``
of the first), with a fresh folder as the working directory (the first saves ``my-model``).
"""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    """The text of every fenced ``python`` block of README.md, in order."""
    return PYTHON_BLOCK.findall(README.read_text(encoding="utf-8"))


def test_readme_has_the_python_blocks():
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert "SentenceEncoder.load" in blocks[0]
    assert "FnApiRunner" in blocks[1]


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    monkeypatch.chdir(tmp_path)
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
