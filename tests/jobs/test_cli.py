import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs.cli import main


@pytest.fixture
def corpus_tsv(tmp_path, sample_texts):
    path = tmp_path / "corpus.tsv"
    lines = ["id\ttext"] + [f"doc-{i}\t{text}" for i, text in enumerate(sample_texts)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_encode_to_npy(tmp_path, corpus_tsv, tiny_st_dir, tiny_encoder, sample_texts, capsys):
    out = tmp_path / "vectors.npy"
    assert (
        main(
            [
                "encode",
                "--model",
                str(tiny_st_dir),
                "--input",
                str(corpus_tsv),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    vectors = np.load(out)
    assert np.abs(vectors - tiny_encoder.encode(sample_texts)).max() <= 1e-6
    assert f"encoded {len(sample_texts)} texts" in capsys.readouterr().out


def test_encode_to_parquet_with_ids_and_text(
    tmp_path, corpus_tsv, tiny_st_dir, tiny_encoder, sample_texts
):
    out = tmp_path / "vectors.parquet"
    argv = [
        "encode",
        "--model",
        str(tiny_st_dir),
        "--input",
        str(corpus_tsv),
        "--output",
        str(out),
        "--id-col",
        "id",
        "--keep-text",
        "--no-normalize",
    ]
    assert main(argv) == 0
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(len(sample_texts))]
    assert table.column("text").to_pylist() == sample_texts
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[32]"
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    expected = tiny_encoder.encode(sample_texts, normalize=False)
    assert np.abs(vectors - expected).max() <= 1e-6
    assert (
        sum(table.column("truncated").to_pylist())
        == tiny_encoder.encode_detailed(sample_texts).n_truncated
    )


def test_encode_refuses_existing_output(tmp_path, corpus_tsv, tiny_st_dir, capsys):
    out = tmp_path / "vectors.npy"
    out.write_bytes(b"keep")
    assert (
        main(
            [
                "encode",
                "--model",
                str(tiny_st_dir),
                "--input",
                str(corpus_tsv),
                "--output",
                str(out),
            ]
        )
        == 2
    )
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"keep"


def test_eval_sts_json(tmp_path, tiny_st_dir, capsys):
    path = tmp_path / "pairs.tsv"
    rows = ["score\tsentence1\tsentence2", "5\ta man\ta man", "0\tsky\tthe dog", "2\tcar\tred car"]
    path.write_text("\n".join(rows) + "\n")
    assert main(["eval", "sts", "--model", str(tiny_st_dir), "--data", str(path), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_pairs"] == 3
    assert set(metrics) >= {
        "cosine_spearman",
        "manhattan_pearson",
        "euclidean_spearman",
        "dot_pearson",
    }


def test_user_errors_are_one_line(tmp_path, tiny_st_dir, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("score\tsentence1\tsentence2\nx\ta\tb\n")
    assert main(["eval", "sts", "--model", str(tiny_st_dir), "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sbert: error:") and "row 1, column 'score'" in err
    assert "Traceback" not in err
