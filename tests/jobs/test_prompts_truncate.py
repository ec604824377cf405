"""Prompts and Matryoshka truncation on the command line (issue 17, items 2 and 3).

A tiny random BERT saved by sentence-transformers with a Dense layer, a Normalize module and
the prompts ``query: `` / ``passage: ``: ``sbert embed --prompt-name document --truncate-dim 16``
must give sentence-transformers' vectors and record the prompt and dimensions; ``sbert search``
must embed queries with the ``query`` prompt at the index's 16 dimensions; embeddings made with
another prompt or dimension must be refused as mixed; ``sbert encode`` and ``sbert run`` take
the same options.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError, require_compatible
from sbert_pipeline.jobs import run as run_job
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.cli import main as cli_main

from tests.stage_commands import embed, index, pairs, search

PROMPTS = {"query": "query: ", "document": "passage: "}
FULL_DIM = 24  # the Dense layer's output
DIM = 16
TEXTS = [
    "a man plays the guitar",
    "A woman is eating food.",
    "the dog runs on the road in the rain",
    "how do i play music?",
    "Why is the sky blue and the sun red?",
    "Quick brown foxes jump; 42 times!",
]
QUERY = "a dog plays music in the rain"


@pytest.fixture(scope="module")
def prompt_model(tiny_bert_dir, tmp_path_factory) -> Path:
    """Transformer -> mean Pooling -> Dense(32 -> 24, tanh) -> Normalize, with PROMPTS, saved
    by sentence-transformers."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(0)
    transformer = models.Transformer(str(tiny_bert_dir), max_seq_length=48)
    width = transformer.get_embedding_dimension()
    modules = [
        transformer,
        models.Pooling(width, pooling_mode="mean"),
        models.Dense(width, FULL_DIM, activation_function=torch.nn.Tanh()),
        models.Normalize(),
    ]
    folder = tmp_path_factory.mktemp("prompt_model") / "model"
    SentenceTransformer(modules=modules, device="cpu", prompts=PROMPTS).save(str(folder))
    return folder


def sentence_transformer(folder: Path, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True, **kwargs)


def run_embed(root: Path, model: Path, name: str, *flags: str) -> Path:
    """``sbert embed`` of TEXTS (ids doc-N, text kept) into ``root/name``."""
    corpus = root / "corpus.jsonl"
    if not corpus.exists():
        corpus.write_text(
            "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
        )
    out = root / name
    argv = ["--input", str(corpus), "--output", str(out), "--model", str(model), "--device", "cpu"]
    summary = embed([*argv, "--id-field", "id", "--keep-text", *flags])
    assert (summary.read, summary.embedded, summary.rejected) == (len(TEXTS), len(TEXTS), 0)
    return out


def manifest_of(directory: Path) -> dict:
    return json.loads((directory / "_manifest.json").read_text(encoding="utf-8"))


def vectors_of(directory: Path) -> np.ndarray:
    """The stored vectors in TEXTS order."""
    table = pq.read_table(sorted(directory.glob("part-*.parquet")))
    by_text = dict(
        zip(table.column("text").to_pylist(), table.column("embedding").to_pylist(), strict=True)
    )
    return np.asarray([by_text[text] for text in TEXTS], dtype=np.float32)


@pytest.fixture(scope="module")
def document_16(prompt_model, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("prompts")
    return run_embed(
        root, prompt_model, "doc16", "--prompt-name", "document", "--truncate-dim", "16"
    )


def test_embed_with_a_prompt_and_truncate_dim_equals_sentence_transformers(
    document_16, prompt_model
):
    manifest = manifest_of(document_16)
    assert manifest["prompt"] == "passage: " and manifest["prompt_name"] == "document"
    assert (manifest["dim"], manifest["full_dim"], manifest["truncate_dim"]) == (DIM, FULL_DIM, DIM)
    # Normalize runs before truncation, as in sentence-transformers: 16 of 24 unit components.
    assert manifest["normalized"] is False
    got = vectors_of(document_16)
    expected = sentence_transformer(prompt_model, truncate_dim=DIM).encode(
        TEXTS, prompt_name="document"
    )
    assert got.shape == (len(TEXTS), DIM)
    assert np.abs(got - expected).max() <= 1e-5
    unprompted = sentence_transformer(prompt_model, truncate_dim=DIM).encode(TEXTS)
    assert np.abs(got - unprompted).max() > 1e-3  # the prompt changes the tiny model's vectors


def _cosines(corpus: np.ndarray, query: np.ndarray) -> np.ndarray:
    corpus = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    return corpus @ (query / np.linalg.norm(query))


def _assert_hits_are(hits, cosines: np.ndarray) -> None:
    """The hits are the brute-force neighbours with their exact cosines."""
    scores = np.array([hit.score for hit in hits])
    rows = [int(hit.id.removeprefix("doc-")) for hit in hits]
    assert np.allclose(scores, np.sort(cosines)[::-1][: len(hits)], atol=1e-5)
    assert np.allclose(scores, cosines[rows], atol=1e-5)


def test_search_embeds_queries_with_the_query_prompt_at_the_index_dim(
    document_16, prompt_model, tmp_path
):
    built = tmp_path / "index"
    index(["--embeddings", str(document_16), "--output", str(built)])
    st = sentence_transformer(prompt_model)
    corpus = st.encode(TEXTS, prompt_name="document", truncate_dim=DIM)
    with_query_prompt = _cosines(corpus, st.encode(QUERY, prompt_name="query", truncate_dim=DIM))
    with_document_prompt = _cosines(
        corpus, st.encode(QUERY, prompt_name="document", truncate_dim=DIM)
    )
    assert np.abs(with_query_prompt - with_document_prompt).max() > 1e-4  # prompts matter here

    (result,) = search(["--index", str(built), QUERY, "--k", "3", "--device", "cpu"]).results
    _assert_hits_are(result.hits, with_query_prompt)
    # --prompt-name overrides the query prompt.
    argv = ["--index", str(built), QUERY, "--k", "3", "--prompt-name", "document"]
    (result,) = search(argv).results
    _assert_hits_are(result.hits, with_document_prompt)
    # The queries keep the index's dimensions; another --truncate-dim is refused, as is a
    # prompt name the model does not have.
    with pytest.raises(ValueError, match=r"--truncate-dim 8: the index .* 16-dimensional"):
        search(["--index", str(built), QUERY, "--truncate-dim", "8"])
    with pytest.raises(ValueError, match=r"unknown prompt name 'questions'.*'document'"):
        search(["--index", str(built), QUERY, "--prompt-name", "questions"])


def test_mixing_prompts_or_dimensions_is_refused_naming_the_difference(
    document_16, prompt_model, tmp_path
):
    root = document_16.parent
    query_16 = run_embed(
        root, prompt_model, "query16", "--prompt-name", "query", "--truncate-dim", "16"
    )
    document_full = run_embed(root, prompt_model, "docfull", "--prompt-name", "document")
    assert manifest_of(document_full)["dim"] == FULL_DIM
    out = str(tmp_path / "pairs")
    with pytest.raises(IncompatibleEmbeddingsError, match=r"prompt: 'passage: ' vs 'query: '"):
        pairs(["--embeddings", str(document_16), str(query_16), "--output", out])
    with pytest.raises(IncompatibleEmbeddingsError, match=r"dim: 16 vs 24"):
        pairs(["--embeddings", str(document_16), str(document_full), "--output", out])
    assert not Path(out).exists()
    # Pairs of one such folder record its prompt and dimensions with the model.
    pairs(["--embeddings", str(document_16), "--output", out, "--k", "2"])
    recorded = manifest_of(Path(out))
    assert (recorded["prompt"], recorded["dim"], recorded["truncate_dim"]) == ("passage: ", 16, 16)


def test_manifests_from_before_prompts_read_as_no_prompt():
    old = {"weights_sha256": "s", "dim": 4, "pooling": "mean", "normalized": True}
    old["max_seq_length"] = 8
    require_compatible(old, {**old, "prompt": "", "include_prompt": True}, "old and new")
    with pytest.raises(IncompatibleEmbeddingsError, match="prompt: '' vs 'query: '"):
        require_compatible(old, {**old, "prompt": "query: "}, "old and new")


def test_embed_refuses_an_unknown_prompt_name_before_touching_the_output(prompt_model, tmp_path):
    with pytest.raises(ValueError, match="unknown prompt name 'questions'"):
        run_embed(tmp_path, prompt_model, "out", "--prompt-name", "questions")
    with pytest.raises(ValueError, match=r"truncate_dim must be an integer in \[1, 24\]"):
        run_embed(tmp_path, prompt_model, "out", "--truncate-dim", "25")
    assert not (tmp_path / "out").exists()


def test_encode_with_a_prompt_text_and_truncate_dim(prompt_model, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    argv = ["encode", "--input", str(texts), "--output", str(out), "--model", str(prompt_model)]
    assert cli_main([*argv, "--device", "cpu", "--prompt", "query: ", "--truncate-dim", "8"]) == 0
    got = np.load(out)
    assert got.shape == (len(TEXTS), 8)
    expected = sentence_transformer(prompt_model).encode(TEXTS, prompt="query: ", truncate_dim=8)
    assert np.abs(got - expected).max() <= 1e-5
    # --normalize with truncation: truncate, then normalise (sentence-transformers' order).
    assert cli_main([*argv, "--truncate-dim", "8", "--normalize", "--overwrite"]) == 0
    expected = sentence_transformer(prompt_model).encode(
        TEXTS, truncate_dim=8, normalize_embeddings=True
    )
    assert np.abs(np.load(out) - expected).max() <= 1e-5


def test_sbert_run_embeds_with_the_prompt_and_dimension_of_its_config(prompt_model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}}}\nmodel: {prompt_model}\n"
        "stages: [embed]\nembed: {prompt_name: document, truncate_dim: 16, device: cpu}\n",
        encoding="utf-8",
    )
    run_job.run([str(config)])
    embedded = tmp_path / "job" / "embeddings"
    manifest = manifest_of(embedded)
    assert (manifest["prompt_name"], manifest["prompt"], manifest["dim"]) == (
        "document",
        "passage: ",
        16,
    )
    table = pq.read_table(sorted(embedded.glob("part-*.parquet")))
    # Ids of a text file end in the line number: order the rows by it.
    lines = [int(row_id.rsplit(":", 1)[1]) for row_id in table.column("id").to_pylist()]
    got = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)[np.argsort(lines)]
    expected = sentence_transformer(prompt_model, truncate_dim=DIM).encode(
        TEXTS, prompt_name="document"
    )
    assert np.abs(got - expected).max() <= 1e-5


def test_embed_without_prompt_options_embeds_documents_like_encode_document(prompt_model, tmp_path):
    """A corpus is embedded as documents: sentence-transformers' encode_document."""
    out = run_embed(tmp_path, prompt_model, "plain")
    manifest = manifest_of(out)
    assert (manifest["prompt"], manifest["prompt_name"]) == ("passage: ", "document")
    expected = sentence_transformer(prompt_model).encode_document(TEXTS)
    assert np.abs(vectors_of(out) - expected).max() <= 1e-5


def test_every_command_takes_the_prompt_and_truncate_dim_flags():
    from sbert_pipeline.jobs.cli import build_parser
    from sbert_pipeline.jobs.model_flags import settings_from_flags

    flags = ["--model", "m", "--prompt-name", "query", "--truncate-dim", "16"]
    settings = stage_cli.parse(
        "embed", ["--input", "c", "--output", "o", *flags]
    ).encoder_settings()
    assert (settings.prompt_name, settings.prompt, settings.truncate_dim) == ("query", None, 16)
    # embed encodes a corpus as documents; an explicit prompt name still wins over the task
    assert settings.encode_kwargs() == {"prompt_name": "query", "task": "document"}
    commands = [["encode", "--input", "c", "--output", "o.npy"]]
    commands += [["eval", name, "--data", "d.tsv"] for name in ("sts", "pairs")]
    for command in commands:
        parsed = settings_from_flags(build_parser().parse_args([*command, *flags]))
        assert parsed == replace(settings, task=None)
    text = settings_from_flags(build_parser().parse_args([*commands[1], "--prompt", "q: "]))
    assert text.encode_kwargs() == {"prompt": "q: "}
    with pytest.raises(SystemExit):  # argparse: not allowed with --prompt-name
        build_parser().parse_args([*commands[0], *flags, "--prompt", "q: "])
    with pytest.raises(ValueError, match="--truncate-dim: must be at least 1, got 0"):
        stage_cli.parse("embed", ["--input", "c", "--output", "o", "--truncate-dim", "0"])
