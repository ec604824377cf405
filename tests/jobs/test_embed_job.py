import json

import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to
from corpus_files import GOOD_TEXTS, write_bad_jsonl, write_corpus
from sbert_pipeline.embed.read_corpus import RECORDS, REJECTED, ReadCorpus, RejectDuplicateIds
from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.stage_api.stops import JobFailedError

from tests.stage_commands import embed as run


def test_read_corpus_transform(local_pipeline, tmp_path):
    write_corpus(tmp_path / "in", "jsonl", GOOD_TEXTS[:3], name="a")
    (tmp_path / "in" / "b.jsonl").write_text(
        '{"id": "x", "text": ""}\n{"id": "y", "text": "fine"}\n'
    )
    with local_pipeline as p:
        corpus = p | ReadCorpus(str(tmp_path / "in" / "*.jsonl"), CorpusSpec(id_field="id"))
        assert_that(
            corpus[RECORDS] | "Ids" >> _map(lambda r: r.id),
            equal_to(["t0", "t1", "t2", "y"]),
            label="Records",
        )
        assert_that(
            corpus[REJECTED] | "Reasons" >> _map(lambda r: (r.id, r.reason)),
            equal_to([("x", "empty text")]),
            label="Rejected",
        )


def test_reject_duplicate_ids_keeps_first_in_file_order(local_pipeline):
    import apache_beam as beam

    records = [
        CorpusRecord("a", "third", "f2.jsonl:1"),
        CorpusRecord("a", "first", "f1.jsonl:2"),
        CorpusRecord("b", "only", "f1.jsonl:3"),
        CorpusRecord("a", "second", "f1.jsonl:10"),
    ]
    with local_pipeline as p:
        split = p | beam.Create(records) | RejectDuplicateIds()
        assert_that(
            split[RECORDS] | "Kept" >> _map(lambda r: r.text),
            equal_to(["first", "only"]),
            label="Kept",
        )
        assert_that(
            split[REJECTED] | "Dups" >> _map(lambda r: (r.source, r.reason)),
            equal_to(
                [
                    ("f2.jsonl:1", "duplicate id (first seen at f1.jsonl:2)"),
                    ("f1.jsonl:10", "duplicate id (first seen at f1.jsonl:2)"),
                ]
            ),
            label="Dups",
        )


def _map(fn):
    import apache_beam as beam

    return beam.Map(fn)


@pytest.mark.parametrize(
    ("fmt", "gz"),
    [("txt", True), ("jsonl", False), ("csv", True), ("tsv", False), ("parquet", False)],
)
def test_embed_job_in_every_format(
    local_pipeline, tmp_path, tiny_st_dir, tiny_encoder, read_output, fmt, gz
):
    write_corpus(tmp_path / "in", fmt, GOOD_TEXTS, gz=gz)
    out = tmp_path / "out"
    argv = [
        "--input",
        str(tmp_path / "in" / "*"),
        "--output",
        str(out),
        "--model",
        str(tiny_st_dir),
        "--keep-text",
    ]
    if fmt != "txt":
        argv += ["--id-field", "id", "--keep-fields", "lang"]
    summary = run(argv, test_pipeline=local_pipeline)
    output = read_output(out)
    assert (summary.read, summary.embedded, summary.rejected) == (
        len(GOOD_TEXTS),
        len(GOOD_TEXTS),
        0,
    )
    assert (
        output.manifest["counts"]["read"]
        == output.manifest["counts"]["embedded"]
        == len(GOOD_TEXTS)
    )
    assert output.manifest["weights_sha256"] == tiny_encoder.weights_sha256
    assert output.manifest["dim"] == 32 and output.manifest["normalized"] is True
    expected = dict(zip(GOOD_TEXTS, tiny_encoder.encode(GOOD_TEXTS), strict=True))
    texts = output.table.column("text").to_pylist()
    vectors = output.vectors_by_id()
    for record_id, text in zip(output.ids, texts, strict=True):
        assert np.abs(vectors[record_id] - expected[text]).max() <= 1e-5
    if fmt != "txt":
        assert sorted(output.ids) == sorted(f"t{i}" for i in range(len(GOOD_TEXTS)))
        assert set(output.table.column("lang").to_pylist()) == {"en"}
    assert output.errors.num_rows == 0
    assert not (out / "_STARTED").exists()


def test_bad_input_corpus_loses_nothing(local_pipeline, tmp_path, tiny_st_dir, read_output):
    path, good, n_bad = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    summary = run(
        [
            "--input",
            str(path),
            "--output",
            str(out),
            "--model",
            str(tiny_st_dir),
            "--id-field",
            "id",
        ],
        test_pipeline=local_pipeline,
    )
    output = read_output(out)
    assert summary.read == len(good) + n_bad
    assert summary.read == summary.embedded + summary.rejected
    assert set(output.ids) == good  # every good row, once
    assert output.errors.num_rows == n_bad
    assert all(output.errors.column("reason").to_pylist())
    assert all(output.errors.column("source").to_pylist())
    reasons = output.errors.column("reason").to_pylist()
    assert any(r.startswith("duplicate id") for r in reasons)
    assert any(r.startswith("undecodable") for r in reasons)
    long_row = output.table.filter(output.table.column("id").to_numpy(zero_copy_only=False) == "g3")
    assert long_row.column("truncated").to_pylist() == [True]
    assert output.manifest["counts"] == {
        **output.manifest["counts"],
        "read": summary.read,
        "rejected": n_bad,
    }


def test_error_rate_limit_fails_without_manifest(local_pipeline, tmp_path, tiny_st_dir):
    path, _, _ = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    with pytest.raises(JobFailedError, match="max-error-rate"):
        run(
            [
                "--input",
                str(path),
                "--output",
                str(out),
                "--model",
                str(tiny_st_dir),
                "--max-error-rate",
                "0.1",
            ],
            test_pipeline=local_pipeline,
        )
    assert not (out / "_manifest.json").exists()
    # Nothing is published; the failed run's dead letters stay in its attempt area for a look.
    assert not (out / ERRORS_DIR).exists()
    assert list(out.glob(f"_attempts/*/{ERRORS_DIR}/part-*.parquet"))


def test_existing_output_is_refused_unless_overwrite(tmp_path, tiny_st_dir, local_pipeline):
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "someone_elses.txt").write_text("keep me")
    argv = [
        "--input",
        str(tmp_path / "in" / "*.txt"),
        "--output",
        str(out),
        "--model",
        str(tiny_st_dir),
    ]
    with pytest.raises(OutputExistsError, match="--overwrite"):
        run(argv)
    assert (out / "someone_elses.txt").read_text() == "keep me"
    run([*argv, "--overwrite"], test_pipeline=local_pipeline)
    assert (out / "someone_elses.txt").read_text() == "keep me"  # never deleted: not ours
    assert json.loads((out / "_manifest.json").read_text())["counts"]["embedded"] == len(GOOD_TEXTS)


def test_bad_options_fail_before_any_work(tmp_path, tiny_st_dir):
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    out = tmp_path / "out"
    base = ["--input", str(tmp_path / "in" / "*.txt"), "--output", str(out)]
    with pytest.raises(FileNotFoundError, match="no input files match"):
        run(
            [
                "--input",
                str(tmp_path / "nothing*"),
                "--output",
                str(out),
                "--model",
                str(tiny_st_dir),
            ]
        )
    with pytest.raises(Exception, match="does not exist"):
        run([*base, "--model", str(tmp_path / "no-model")])
    with pytest.raises(ValueError, match="max-error-rate"):
        run([*base, "--model", str(tiny_st_dir), "--max-error-rate", "2"])
    assert not out.exists()


def test_multi_processing_workers(tmp_path, tiny_st_dir, tiny_encoder, read_output):
    texts = [f"{text} {i}" for i in range(40) for text in GOOD_TEXTS]
    write_corpus(tmp_path / "in", "txt", texts[:160], name="a")
    write_corpus(tmp_path / "in", "txt", texts[160:], name="b")
    out = tmp_path / "out"
    summary = run(
        [
            "--input",
            str(tmp_path / "in" / "*.txt"),
            "--output",
            str(out),
            "--model",
            str(tiny_st_dir),
            "--keep-text",
            "--direct_num_workers",
            "2",
            "--direct_running_mode",
            "multi_processing",
        ]
    )
    output = read_output(out)
    assert summary.embedded == len(texts) == len(set(output.ids))
    expected = tiny_encoder.encode(output.table.column("text").to_pylist())
    got = np.asarray(output.table.column("embedding").to_pylist(), dtype=np.float32)
    assert np.abs(got - expected).max() <= 1e-5
    assert output.manifest["runner"] == "FnApiRunner"


@pytest.mark.slow
def test_minilm_pipeline_equals_encode(
    local_pipeline, tmp_path, minilm, stsb_test_sentences, read_output
):
    texts = stsb_test_sentences[:600]
    write_corpus(tmp_path / "in", "jsonl", texts)
    out = tmp_path / "out"
    run(
        ["--input", str(tmp_path / "in" / "*"), "--output", str(out), "--id-field", "id"],
        test_pipeline=local_pipeline,
    )
    output = read_output(out)
    vectors = output.vectors_by_id()
    expected = minilm.encode(texts)
    assert len(vectors) == len(texts)
    worst = max(np.abs(vectors[f"t{i}"] - expected[i]).max() for i in range(len(texts)))
    assert worst <= 1e-5
    assert output.manifest["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_grouped_batching_matches_bundle_batching(
    local_pipeline, tmp_path, tiny_st_dir, read_output
):
    path, good, n_bad = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    summary = run(
        [
            "--input",
            str(path),
            "--output",
            str(out),
            "--model",
            str(tiny_st_dir),
            "--id-field",
            "id",
            "--batching",
            "grouped",
        ],
        test_pipeline=local_pipeline,
    )
    output = read_output(out)
    assert summary.read == summary.embedded + summary.rejected == len(good) + n_bad
    assert set(output.ids) == good
    assert output.errors.num_rows == n_bad
    assert output.manifest["input"]["files"] == [{"path": str(path), "rows": len(good) + n_bad}]
    assert not (out / "_reads").exists()


def test_dask_runner_on_a_local_cluster(tmp_path, tiny_st_dir, tiny_encoder, read_output):
    from dask.distributed import LocalCluster

    _, good, n_bad = write_bad_jsonl(tmp_path / "in")
    write_corpus(tmp_path / "in", "csv", GOOD_TEXTS, gz=True)
    out = tmp_path / "out"
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        summary = run(
            [
                "--input",
                str(tmp_path / "in" / "*"),
                "--output",
                str(out),
                "--model",
                str(tiny_st_dir),
                "--id-field",
                "id",
                "--keep-text",
                "--runner",
                "apache_beam.runners.dask.dask_runner.DaskRunner",
                "--dask_client_address",
                cluster.scheduler_address,
            ]
        )
    output = read_output(out)
    assert output.manifest["runner"].endswith("DaskRunner")
    # t0..t7 from the CSV, g1..g4 from the JSONL: every good row once, every bad one rejected.
    assert sorted(output.ids) == sorted(good | {f"t{i}" for i in range(len(GOOD_TEXTS))})
    assert summary.rejected == output.errors.num_rows == n_bad
    assert summary.read == len(good) + n_bad + len(GOOD_TEXTS)
    texts = output.table.column("text").to_pylist()
    got = np.asarray(output.table.column("embedding").to_pylist(), dtype=np.float32)
    assert np.abs(got - tiny_encoder.encode(texts)).max() <= 1e-5
