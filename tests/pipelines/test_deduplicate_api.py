"""The in-memory API, as a notebook uses it: ``deduplicate(df, ...)`` gives what ``sbert embed``,
``sbert pairs --threshold T`` and ``sbert dedup --threshold T`` give on the same rows, for a
DataFrame, a pyarrow Table and a list of texts, with ``against`` and ``output``; bad input is
refused naming the argument; embed takes rows in memory; every stage ``Result`` reads its main
table; importing the stages prints no third-party warning.

The tiny random BERT of conftest.py embeds: its cosines are high for any two texts, so the
threshold is high and exact copies make sure some rows are removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest
from sbert_pipeline import deduplicate, embed
from sbert_pipeline.dedup.versions import read_id_list
from sbert_pipeline.in_memory.stage_folders import STATE_FILE
from sbert_pipeline.jobs.stage_cli import run_command

THRESHOLD = 0.985
STAGES = ("embeddings", "pairs", "dedup")  # the stage folders of a call without against
QUESTIONS = [
    "How do I learn Python?",
    "How can I learn Python quickly?",
    "How do I learn Python?",  # a copy: removed whatever the model
    "What is the capital of France?",
    "Which city is the capital of France?",
    "What is the capital of France?",  # a copy
    "Best pizza in town",
    "Where can I eat the best pizza?",
    "How do I fix a flat bicycle tyre?",
    "Why is the sky blue?",
    "Why is the sky blue during the day?",
    "How many legs does a spider have?",
    "What is the tallest mountain on Earth?",
    "Who wrote Hamlet?",
]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """Questions with integer ids and an extra column, as a notebook would hold them."""
    qids = [100 + 7 * row for row in range(len(QUESTIONS))]
    return pd.DataFrame({"qid": qids, "question": QUESTIONS, "source": ["quiz"] * len(QUESTIONS)})


@pytest.fixture(scope="module")
def api_run(frame, tiny_st_dir, tmp_path_factory):
    """``deduplicate`` on the DataFrame, its stage folders kept in ``output``."""
    output = tmp_path_factory.mktemp("api") / "stages"
    result = deduplicate(
        frame, text="question", id="qid", threshold=THRESHOLD, model=str(tiny_st_dir),
        output=str(output),
    )  # fmt: skip
    return result, output


@pytest.fixture(scope="module")
def cli_run(frame, tiny_st_dir, tmp_path_factory):
    """The three commands on the same rows written as JSONL; their Results by stage."""
    root = tmp_path_factory.mktemp("cli")
    corpus = root / "questions.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict("records")))
    emb, pairs, out = (str(root / name) for name in ("emb", "pairs", "dedup"))
    argvs = {
        "embed": [
            *("--input", str(corpus), "--output", emb, "--text-field", "question"),
            *("--id-field", "qid", "--model", str(tiny_st_dir)),
        ],
        "pairs": ["--embeddings", emb, "--output", pairs, "--threshold", str(THRESHOLD)],
        "dedup": ["--pairs", pairs, "--output", out, "--threshold", str(THRESHOLD)],
    }
    return {stage: run_command(stage, argv) for stage, argv in argvs.items()}


def test_a_dataframe_is_deduplicated_as_the_commands_do(frame, api_run, cli_run):
    result, _ = api_run
    out = cli_run["dedup"].output
    removed = read_id_list(os.path.join(out, "removed_ids.txt"))
    kept = read_id_list(os.path.join(out, "kept_ids.txt"))
    assert 0 < len(removed) < len(frame), "the data must have both kept and removed rows"
    assert sorted(map(str, result.removed["qid"])) == sorted(removed)
    assert sorted(map(str, result.kept["qid"])) == sorted(kept)
    # Every input column, the input's index and order; the removed rows say what they duplicate.
    assert list(result.kept.columns) == ["qid", "question", "source"]
    assert list(result.removed.columns) == ["qid", "question", "source", "duplicate_of", "score"]
    assert result.kept.index.tolist() == sorted(result.kept.index.tolist())
    groups = cli_run["dedup"].to_pandas()
    representative = groups[groups.is_representative].set_index("group")["id"]
    cli_group = groups.set_index("id")["group"]
    for qid, duplicate_of, score in zip(
        result.removed.qid, result.removed.duplicate_of, result.removed.score, strict=True
    ):
        assert str(duplicate_of) == representative[cli_group[str(qid)]]
        assert duplicate_of in set(result.kept.qid)  # the id as given: an int
        assert THRESHOLD - 0.2 <= score <= 1.0 + 1e-6
    assert set(result.groups.columns) == {"id", "group", "kept", "score"}
    assert sorted(result.groups.id.map(str)) == sorted(groups.id)
    assert result.groups.kept.sum() == groups.is_representative.sum()


def test_every_stage_result_reads_its_main_table(cli_run, frame):
    embeddings = cli_run["embed"].to_arrow()
    assert embeddings.num_rows == len(frame)
    assert {"id", "embedding"} <= set(embeddings.column_names)
    pairs = cli_run["pairs"].to_pandas()
    assert {"id_a", "id_b", "score"} <= set(pairs.columns) and len(pairs) > 0
    assert (pairs.score >= THRESHOLD - 1e-6).all()
    groups = cli_run["dedup"].to_arrow()
    assert {"id", "group", "is_representative", "score"} <= set(groups.column_names)


def test_a_result_without_a_table_says_so():
    from sbert_pipeline.stage_api.result import Result

    with pytest.raises(ValueError, match="published no table"):
        Result(None, {}, None).to_arrow()


def test_a_pyarrow_table_gives_tables_and_the_same_decisions(frame, api_run, tiny_st_dir):
    result = deduplicate(
        pa.Table.from_pandas(frame, preserve_index=False), text="question", id="qid",
        threshold=THRESHOLD, model=str(tiny_st_dir),
    )  # fmt: skip
    expected, _ = api_run
    assert isinstance(result.kept, pa.Table) and isinstance(result.groups, pa.Table)
    assert result.kept.column("qid").to_pylist() == expected.kept.qid.tolist()
    assert (
        result.removed.column("duplicate_of").to_pylist() == expected.removed.duplicate_of.tolist()
    )
    assert result.removed.column_names == ["qid", "question", "source", "duplicate_of", "score"]
    assert result.output is None


def test_a_list_of_texts_gets_row_numbers_as_ids(tmp_path, monkeypatch, tiny_st_dir):
    monkeypatch.chdir(tmp_path)  # nothing may be left in the working directory
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    result = deduplicate(QUESTIONS, threshold=THRESHOLD, model=str(tiny_st_dir))
    assert isinstance(result.kept, pd.DataFrame)
    assert list(result.kept.columns) == ["id", "text"]
    assert 2 in set(result.removed.id) and 5 in set(result.removed.id)  # the copies
    assert result.removed.set_index("id").loc[2, "duplicate_of"] in (0, 1)
    assert sorted([*result.kept.id, *result.removed.id]) == list(range(len(QUESTIONS)))
    assert sorted(os.listdir(tmp_path)) == ["temp"]
    assert os.listdir(temp) == [], "the temporary stage folders are removed"


def test_against_removes_the_rows_that_duplicate_the_reference(frame, tiny_st_dir, caplog):
    reference = frame.iloc[:3]
    new = frame.iloc[3:].assign(qid=frame.qid.iloc[3:] + 1000)
    new = pd.concat([new, reference.assign(qid=[1, 2, 3])])  # copies of reference rows
    with caplog.at_level(logging.WARNING, logger="sbert_pipeline"):
        result = deduplicate(
            new, text="question", id="qid", against=reference, threshold=THRESHOLD,
            model=str(tiny_st_dir),
        )  # fmt: skip
    # What dedup warns about names this function's arguments, never a command's flags.
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(line.startswith("with against= the data is not deduplicated") for line in warned)
    assert not [line for line in warned if "--" in line]
    assert {1, 2, 3} <= set(result.removed.qid)
    copied = result.removed.set_index("qid").loc[[1, 2, 3]]
    assert set(copied.duplicate_of) <= set(reference.qid)
    assert set(result.kept.qid) | set(result.removed.qid) == set(new.qid)
    assert result.groups.reference.any() and "reference" in result.groups.columns


def test_output_keeps_the_stage_folders_and_a_rerun_reuses_them(frame, api_run, tiny_st_dir):
    first, output = api_run
    manifests = {
        stage: (output / stage / "_manifest.json").read_bytes()
        for stage in ("embeddings", "pairs", "dedup")
    }
    assert (output / STATE_FILE).exists() and first.output == str(output)
    options = {"text": "question", "id": "qid", "model": str(tiny_st_dir), "output": str(output)}
    again = deduplicate(frame, threshold=THRESHOLD, **options)
    for stage, manifest in manifests.items():
        assert (output / stage / "_manifest.json").read_bytes() == manifest, f"{stage} reran"
    assert again.removed.qid.tolist() == first.removed.qid.tolist()
    # A new threshold runs pairs and dedup again, not embed.
    deduplicate(frame, threshold=THRESHOLD - 0.001, **options)
    assert (output / "embeddings" / "_manifest.json").read_bytes() == manifests["embeddings"]
    assert (output / "dedup" / "_manifest.json").read_bytes() != manifests["dedup"]


def test_output_reruns_every_stage_when_a_text_changed(frame, tiny_st_dir, tmp_path):
    options = {"text": "question", "id": "qid", "model": str(tiny_st_dir), "output": str(tmp_path)}
    deduplicate(frame, threshold=THRESHOLD, **options)
    manifests = {stage: (tmp_path / stage / "_manifest.json").read_bytes() for stage in STAGES}
    changed = frame.assign(question=[*frame.question[:-1], "Who wrote Macbeth?"])
    deduplicate(changed, threshold=THRESHOLD, **options)
    for stage, manifest in manifests.items():
        assert (tmp_path / stage / "_manifest.json").read_bytes() != manifest, f"{stage} kept"


def test_output_replaces_the_stages_an_earlier_state_format_recorded(frame, tiny_st_dir, tmp_path):
    options = {"text": "question", "id": "qid", "model": str(tiny_st_dir), "output": str(tmp_path)}
    deduplicate(frame, threshold=THRESHOLD, **options)
    manifests = {stage: (tmp_path / stage / "_manifest.json").read_bytes() for stage in STAGES}
    earlier = {  # per stage, its fingerprint and the sha256 of its manifest
        stage: {"fingerprint": "0" * 64, "manifest": hashlib.sha256(manifest).hexdigest()}
        for stage, manifest in manifests.items()
    }
    (tmp_path / STATE_FILE).write_text(json.dumps(earlier))
    again = deduplicate(frame, threshold=THRESHOLD, **options)
    for stage, manifest in manifests.items():
        assert (tmp_path / stage / "_manifest.json").read_bytes() != manifest, f"{stage} kept"
    assert set(json.loads((tmp_path / STATE_FILE).read_text())["stages"]) == set(STAGES)
    assert len(again.removed) > 0


@pytest.mark.parametrize(
    ("data", "keywords", "error", "message"),
    [
        ([], {}, ValueError, "data: no rows"),
        ("just a string", {}, TypeError, "data: expected a pandas DataFrame"),
        (["a", None], {}, ValueError, r"data: item 1 has no text \(null\)"),
        (["a", "  "], {}, ValueError, "data: item 1 has an empty text"),
        (["a"], {"id": "qid"}, ValueError, "id: data is a list of texts"),
        (pd.DataFrame({"q": ["a"]}), {}, ValueError, "text: data has no column 'text'; its col"),
        (pd.DataFrame({"text": ["a"]}), {"id": "qid"}, ValueError, "id: data has no column 'qid'"),
        (
            pd.DataFrame({"text": ["a", "b", "c"], "qid": [1, 2, 1]}),
            {"id": "qid"},
            ValueError,
            r"id: 1 ids of data occur more than once \(first: '1'\)",
        ),
        (pd.DataFrame({"text": ["a", None]}), {}, ValueError, "text: row 1 of data .* no text"),
        (pd.DataFrame({"text": ["a", 3]}), {}, ValueError, "text: row 1 .* has 3, not a text"),
        (
            pd.DataFrame({"text": ["a"], "qid": [None]}),
            {"id": "qid"},
            ValueError,
            "id: row 0 of data has no id",
        ),
        (pd.DataFrame({"text": ["a"], "score": [1]}), {}, ValueError, "data: has a column 'score'"),
        (["a", "b"], {"against": pd.DataFrame({"x": [1]})}, ValueError, "text: against has no"),
        (["a", "b"], {"compute_dtyp": "float32"}, TypeError, "unknown model options compute_dtyp"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(data, keywords, error, message):
    with pytest.raises(error, match=message):
        deduplicate(data, **keywords)


def test_shared_ids_with_the_reference_are_refused():
    data = pd.DataFrame({"text": ["a", "b"], "qid": [1, 2]})
    with pytest.raises(ValueError, match=r"against: 1 ids are both in data and in against"):
        deduplicate(data, id="qid", against=data.iloc[1:])


def test_embed_takes_rows_in_memory(tmp_path, tiny_st_dir, frame):
    model = str(tiny_st_dir)
    texts = embed.run(embed.Options(input=QUESTIONS[:3], output=str(tmp_path / "a"), model=model))
    assert texts.to_pandas().id.tolist() == ["0", "1", "2"]
    options = embed.Options(
        input=frame, text_field="question", id_field="qid", keep_fields=["source"],
        output=str(tmp_path / "b"), model=model,
    )  # fmt: skip
    table = embed.run(options).to_arrow()
    assert sorted(table.column("id").to_pylist()) == sorted(map(str, frame.qid))
    assert set(table.column("source").to_pylist()) == {"quiz"}


@pytest.mark.parametrize(
    ("value", "keywords", "error", "message"),
    [
        (3, {}, TypeError, "^input: expected a glob of corpus files"),
        (["a", None], {}, TypeError, "^input: item 1 is None"),
        (["a"], {"id_field": "qid"}, ValueError, "^id_field: a list of texts has no columns"),
        (pd.DataFrame({"q": ["a"]}), {}, ValueError, "^text_field: the input has no column"),
        (["a"], {"incremental": True}, ValueError, "^incremental: needs input files"),
    ],
)
def test_embed_refuses_rows_it_cannot_read_in_python_words(value, keywords, error, message):
    with pytest.raises(error, match=message):
        embed.Options(input=value, output="out", **keywords)


def test_a_glob_input_is_still_kept_apart_from_the_output(tmp_path):
    from sbert_pipeline.stage_api.options import OptionError

    with pytest.raises(OptionError, match=r"--output: .* is --input .* itself"):
        embed.Options(input=str(tmp_path), output=str(tmp_path))


def test_importing_the_stages_prints_no_third_party_warning(tmp_path):
    code = (
        "import logging\n"
        "import sbert_pipeline.embed.stage, sbert_pipeline.dedup.stage\n"
        "from sbert_pipeline import deduplicate\n"
        "logging.getLogger('sbert_pipeline.check').warning('our own warning')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["WARNING:sbert_pipeline.check:our own warning"]


def test_importing_the_package_loads_no_beam(tmp_path):
    """``import sbert_pipeline`` (and its in-memory package) stays light: the stages and Beam
    load when ``deduplicate`` is first asked for."""
    code = (
        "import sys\n"
        "import sbert_pipeline, sbert_pipeline.in_memory, sbert_pipeline.in_memory.stage_folders\n"
        "assert 'apache_beam' not in sys.modules, 'importing sbert_pipeline loaded Beam'\n"
        "from sbert_pipeline import deduplicate, Deduplicated\n"
        "from sbert_pipeline.in_memory import deduplicate as same\n"
        "assert callable(deduplicate) and same is deduplicate and isinstance(Deduplicated, type)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("argument", ["data", "against"])
def test_a_list_of_texts_without_pandas_says_how_to_install_it(monkeypatch, argument):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` fails
    table = pa.table({"text": ["a", "b"]})
    data, against = (["a", "b"], None) if argument == "data" else (table, ["c"])
    with pytest.raises(ImportError, match=rf"^{argument}: .* pip install pandas \(or pass a py"):
        deduplicate(data, against=against)
