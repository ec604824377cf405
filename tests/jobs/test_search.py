import json

import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError
from sbert_pipeline.jobs import stage_cli
from testdata import build_st_dir, build_tiny_bert

from sbert_core.errors import DataFileError
from tests.stage_commands import embed, index
from tests.stage_commands import search as run


def main(argv: list[str]) -> int:
    """``sbert search ARGV`` as the CLI runs it, printing what it prints."""
    return stage_cli.main("search", argv)


def embed_and_index(root, model: str, texts: list[str]):
    """``texts`` (ids doc-N) embedded with ``model`` keeping the text, then indexed (auto)."""
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    embed(
        [
            *("--input", str(corpus), "--output", str(root / "embeddings")),
            *("--model", model, "--id-field", "id", "--keep-text"),
        ],
        test_pipeline=BeamTestPipeline(
            runner="FnApiRunner", is_integration_test=False, blocking=True
        ),
    )
    index(["--embeddings", str(root / "embeddings"), "--output", str(root / "index")])
    return root / "index"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_st_dir, sample_texts):
    return embed_and_index(tmp_path_factory.mktemp("search"), str(tiny_st_dir), sample_texts)


def test_search_returns_the_exact_neighbours_with_text(indexed, tiny_encoder, sample_texts):
    """Against brute force with the encoder itself.

    The random tiny BERT maps texts of equal token length to the same vector, so neighbours
    tie; the scores, and each hit's agreement of id, text and score, are exact.
    """
    queries = [sample_texts[3], "a dog plays music in the rain"]
    summary = run(["--index", str(indexed), *queries, "--k", "5"])
    assert [r.query for r in summary.results] == queries
    corpus = tiny_encoder.encode(sample_texts)
    for result in summary.results:
        cosines = corpus @ tiny_encoder.encode([result.query])[0]
        scores = [hit.score for hit in result.hits]
        assert np.allclose(scores, np.sort(cosines)[::-1][:5], atol=1e-5)
        rows = [int(hit.id.removeprefix("doc-")) for hit in result.hits]
        assert np.allclose(scores, cosines[rows], atol=1e-5)
        assert [hit.text for hit in result.hits] == [sample_texts[row] for row in rows]
        assert [hit.rank for hit in result.hits] == [1, 2, 3, 4, 5]


def test_json_lines_and_output_files(indexed, tmp_path, capsys, sample_texts):
    assert main(["--index", str(indexed), "--json", "--k", "2", sample_texts[0]]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["query"] == sample_texts[0] and record["metric"] == "ip"
    best = record["hits"][0]
    assert set(best) == {"rank", "id", "score", "text"} and len(record["hits"]) == 2
    assert best["rank"] == 1 and best["score"] == pytest.approx(1.0, abs=1e-5)
    assert best["text"] == sample_texts[int(best["id"].removeprefix("doc-"))]

    queries = tmp_path / "queries.txt"
    queries.write_text(f"{sample_texts[1]}\n{sample_texts[2]}\n")
    jsonl, tsv = tmp_path / "hits.jsonl", tmp_path / "hits.tsv"
    assert main(["--index", str(indexed), "--queries", str(queries), "--output", str(jsonl)]) == 0
    assert f"searched 2 queries for 10 neighbours in {indexed}" in capsys.readouterr().out
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [line["query"] for line in lines] == sample_texts[1:3]
    assert all(len(line["hits"]) == 10 for line in lines)
    run(["--index", str(indexed), "--queries", str(queries), "--output", str(tsv), "--k", "3"])
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    assert rows[0] == ["query_index", "query", "rank", "id", "score", "text"]
    assert len(rows) == 1 + 2 * 3 and rows[1][:3] == ["0", sample_texts[1], "1"]
    assert rows[1][5] == sample_texts[int(rows[1][3].removeprefix("doc-"))]


def test_text_output_for_people(indexed, capsys, sample_texts):
    main(["--index", str(indexed), "--k", "1", sample_texts[4]])
    out = capsys.readouterr().out
    assert out.startswith(f"query: {sample_texts[4]}\n")
    assert "  1. cosine 1.0000  [doc-" in out


def test_blank_lines_in_the_query_file_are_skipped(indexed, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("how do i play music?\n\nsky\n   \n")
    summary = run(["--index", str(indexed), "--queries", str(queries), "--k", "2"])
    assert [result.query for result in summary.results] == ["how do i play music?", "sky"]
    assert all(len(result.hits) == 2 for result in summary.results)


def test_a_query_file_of_blank_lines_is_refused(indexed, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("\n   \n")
    with pytest.raises(DataFileError, match=r"queries\.txt holds no queries"):
        run(["--index", str(indexed), "--queries", str(queries)])


def test_a_different_model_is_refused(indexed, tmp_path):
    other = build_st_dir(build_tiny_bert(tmp_path / "bert", seed=1), tmp_path / "other")
    with pytest.raises(IncompatibleEmbeddingsError, match="weights_sha256"):
        run(["--index", str(indexed), "--model", str(other), "hello"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one"),
        (["--queries", "q.txt", "hello"], "exactly one"),
        (["--k", "0", "hello"], "--k: must be at least 1"),
        (["--output", "hits.csv", "hello"], r"--output: must end in \.jsonl or \.tsv"),
        (["  "], "query 1 on the command line is empty"),
    ],
)
def test_bad_options(indexed, argv, message):
    with pytest.raises(ValueError, match=message):
        run(["--index", str(indexed), *argv])


@pytest.mark.slow
def test_minilm_finds_sensible_neighbours(tmp_path):
    corpus = [
        "A man is playing a guitar.",
        "A woman is slicing an onion.",
        "The stock market fell sharply today.",
        "A child is riding a bicycle.",
        "How do I bake bread at home?",
        "The cat sleeps on the sofa.",
    ]
    indexed = embed_and_index(tmp_path, "all-MiniLM-L6-v2", corpus)
    queries = {
        "someone plays an instrument": "A man is playing a guitar.",
        "recipe for homemade bread": "How do I bake bread at home?",
        "shares dropped on wall street": "The stock market fell sharply today.",
        "a kitten napping on the couch": "The cat sleeps on the sofa.",
    }
    summary = run(["--index", str(indexed), "--k", "2", *queries])
    assert [r.hits[0].text for r in summary.results] == list(queries.values())
    assert all(r.hits[0].score > r.hits[1].score + 0.1 for r in summary.results)


def test_a_search_result_reads_its_hits_as_a_table(indexed, sample_texts):
    from sbert_pipeline import search

    queries = (sample_texts[1], sample_texts[2])
    result = search.run(search.Options(index=str(indexed), query=queries, k=3))
    table = result.to_arrow()
    assert table.column_names == ["query_index", "query", "rank", "id", "score", "text"]
    expected = [
        (n, r.query, h.rank, h.id, h.score, h.text)
        for n, r in enumerate(result.summary.results)
        for h in r.hits
    ]
    assert len(expected) == 2 * 3
    got = list(zip(*(table.column(name).to_pylist() for name in table.column_names), strict=True))
    assert [row[:4] + row[5:] for row in got] == [row[:4] + row[5:] for row in expected]
    assert np.allclose([row[4] for row in got], [row[4] for row in expected], atol=1e-6)
    frame = result.to_pandas()
    assert frame["query"].tolist()[::3] == list(queries) and frame["rank"].tolist()[:3] == [1, 2, 3]
