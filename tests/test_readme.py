"""The Python blocks of the README and docs/ run exactly as written, so they cannot drift.

Only fences marked ``python`` run; a ``py`` fence is a sketch that is not run (docs/outputs.md
reads the quickstart's output with pandas, polars, DuckDB and Spark, which a test run neither
has written nor installed). The blocks of one file are one session, run in order in one
namespace (python-api.md's Beam block embeds the ``texts`` of its first), with a fresh folder as
the working directory (the encoder block saves ``my-model``) that sees the repository's
``examples/``. The README's stage block's outputs are compared with the CLI's.

The README is the front door: at most 250 lines, and every link in it and in docs/ leads to a
file (and a heading) that exists; docs/commands.md has the section each command's --help names.
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
DOCS = ROOT / "docs"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
ANY_BLOCK = re.compile(r"^```.*?^```$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
COMMANDS = [
    "embed",
    "pairs",
    "index",
    "cluster",
    "search",
    "verify",
    "dedup",
    "finetune",
    "run",
    "encode",
    "eval",
    "submit",
]
README_MAX_LINES = 250


def python_blocks(page: Path = README) -> list[str]:
    """The text of every fenced ``python`` block of ``page``, in order."""
    return PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))


def doc_pages() -> list[Path]:
    """Every Markdown page under docs/."""
    return sorted(DOCS.glob("*.md"))


def _run_blocks(page: Path, blocks: list[str]) -> dict:
    """Run ``blocks`` in order in one namespace, as one session; return the namespace."""
    namespace: dict = {"__name__": f"__{page.stem}__"}
    for number, block in enumerate(blocks, start=1):
        where = f"{page.relative_to(ROOT)} python block {number}"
        exec(compile(block, where, "exec"), namespace)
    return namespace


def _in_fresh_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")


def test_readme_has_the_python_example():
    blocks = python_blocks()
    assert len(blocks) == 1, "the README shows one Python example; more go to docs/"
    assert "from sbert_pipeline import dedup, embed, pairs" in blocks[0]
    assert "dedup.run(" in blocks[0]


def test_python_api_page_has_its_blocks():
    blocks = python_blocks(DOCS / "python-api.md")
    assert "SentenceEncoder.load" in blocks[0]
    assert "FnApiRunner" in blocks[1]


def test_readme_fits_on_a_few_screens():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, "move the detail to a page under docs/"


def test_readme_keeps_the_set_up_commands():
    text = README.read_text(encoding="utf-8")
    quickstart = (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt -e . "
        "&& sbert run examples/quickstart.yaml"
    )
    tests = (
        "python3 -m venv .venv && . .venv/bin/activate && "
        'pip install -q -c constraints.txt -e ".[test]" && python -m pytest'
    )
    assert quickstart in text.splitlines()
    assert tests in text.splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci.splitlines(), ".ci/run runs the README's test command"


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = ANY_BLOCK.sub("", page.read_text(encoding="utf-8"))
    return {_anchor(heading) for heading in HEADING.findall(text)}


@pytest.mark.parametrize("page", [README, *doc_pages()], ids=lambda p: p.name)
def test_links_lead_to_files_and_headings_that_exist(page: Path):
    text = ANY_BLOCK.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s)://, mailto: ...
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_heading = anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        if not linked.exists() or missing_heading:
            broken.append(target)
    assert broken == [], f"{page.name}: links to nothing"


def test_commands_page_has_a_section_per_command():
    sections = re.findall(r"^## (\S+)$", (DOCS / "commands.md").read_text(), re.MULTILINE)
    assert set(COMMANDS) <= set(sections), "each --help points at docs/commands.md#<command>"


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    _in_fresh_folder(tmp_path, monkeypatch)
    namespace = _run_blocks(README, python_blocks())

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


@pytest.mark.slow
def test_python_api_page_blocks_run_as_written(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    _in_fresh_folder(tmp_path, monkeypatch)
    page = DOCS / "python-api.md"
    namespace = _run_blocks(page, python_blocks(page))

    # What the encoder block's comments promise.
    vectors = namespace["vectors"]
    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32
    result = namespace["result"]
    assert np.array_equal(result.embeddings, vectors)
    assert result.n_tokens.shape == result.truncated.shape == (2,)
    saved = SentenceTransformer(str(tmp_path / "my-model"), device="cpu", local_files_only=True)
    assert np.abs(saved.encode(namespace["texts"]) - vectors).max() <= 1e-5


@pytest.mark.slow
def test_other_docs_python_blocks_run_as_written(tmp_path, monkeypatch):
    """Every other page's ``python`` blocks run too, each page in a fresh folder (most pages
    have none: their examples are shell commands and YAML)."""
    for page in doc_pages():
        if page.name == "python-api.md":
            continue
        folder = tmp_path / page.stem
        folder.mkdir()
        _in_fresh_folder(folder, monkeypatch)
        _run_blocks(page, python_blocks(page))


def _rows(folder: Path, pattern: str) -> list:
    """The rows of the Parquet files under ``folder`` matching ``pattern``, sorted."""
    rows = [
        tuple(row.values())
        for path in sorted(folder.glob(pattern))
        for row in pq.read_table(path).to_pylist()
    ]
    return sorted(rows, key=repr)
