"""Known-duplicate recall in the dedup outputs (issue 16 item 8): the pairs a ``duplicate_of``
field names (or the labelled duplicates) found per method and threshold, in the summary, the
manifest, dedup's report.html and sbert run's; and the one word for chained members."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.dedup.known import known_found, read_known_duplicates
from sbert_pipeline.dedup.report_section import dedup_sections
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.schemas import ERRORS_DIR, ERRORS_SCHEMA, embeddings_table
from sbert_pipeline.stage_api.job_stage import ReportContext

from tests.stage_commands import dedup as run

MODEL = {
    "model_id": "planted",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 48,
}
IDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
TEXTS = {i: f"text of {i}" for i in IDS}
# b and c copy a, e copies d; f names an id that was never embedded, g names itself and a names
# b back (the same pair as b -> a): 3 known pairs (a, b), (a, c), (d, e).
DUPLICATE_OF = {"a": "b", "b": "a", "c": "a", "e": "d", "f": "zz", "g": "g", "h": None, "d": ""}
# a ~ b ~ c chain at 0.85 (a-c itself is 0.82); d-e only at 0.80.
PAIRS = [("a", "b", 0.95), ("b", "c", 0.90), ("a", "c", 0.82), ("d", "e", 0.80)]
OLD_WORDS = ("linked", "joined through", "transitive", "indirect", " via ")


def write_embeddings(directory: Path, duplicate_of: dict | None) -> Path:
    directory.mkdir(parents=True)
    vectors = np.random.default_rng(0).standard_normal((len(IDS), 4)).astype(np.float32)
    extra = None if duplicate_of is None else {"duplicate_of": [duplicate_of[i] for i in IDS]}
    table = embeddings_table(
        IDS,
        vectors,
        np.full(len(IDS), 5, np.int32),
        np.zeros(len(IDS), bool),
        texts=[TEXTS[i] for i in IDS],
        extra=extra,
    )
    pq.write_table(table, directory / "part-00000-of-00001.parquet")
    (directory / ERRORS_DIR).mkdir()
    pq.write_table(
        pa.Table.from_pylist([], schema=ERRORS_SCHEMA),
        directory / ERRORS_DIR / "part-00000-of-00001.parquet",
    )
    manifest = {
        "kind": "embeddings",
        **MODEL,
        "dim": 4,
        "keep_text": True,
        "input": {"pattern": "corpus/*", "id_field": "id", "text_field": "text"},
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory


def write_pairs(directory: Path, embeddings: Path) -> Path:
    (directory / "pairs").mkdir(parents=True)
    (directory / "neighbors").mkdir()
    schema = pa.schema([("id_a", pa.string()), ("id_b", pa.string()), ("score", pa.float32())])
    rows = [{"id_a": a, "id_b": b, "score": s} for a, b, s in PAIRS]
    pq.write_table(
        pa.Table.from_pylist(rows, schema=schema),
        directory / "pairs" / "part-00000-of-00001.parquet",
    )
    manifest = {
        "kind": "pairs",
        **MODEL,
        "method": "exact",
        "k": 3,
        "threshold": 0.8,
        "embeddings": [
            {
                "directory": str(embeddings),
                "manifest": json.loads((embeddings / "_manifest.json").read_text()),
            }
        ],
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture
def corpus(tmp_path):
    """(tmp_path, pairs dir, embeddings dir) with the duplicate_of field kept."""
    emb = write_embeddings(tmp_path / "emb", DUPLICATE_OF)
    return tmp_path, write_pairs(tmp_path / "pairs", emb), emb


def dedup(tmp_path: Path, pairs: Path, *extra: str, out: str = "out"):
    argv = ["--pairs", str(pairs), "--output", str(tmp_path / out), "--threshold", "0.85"]
    argv += ["--sweep-from", "0.8", "--sweep-to", "0.95", "--sweep-step", "0.05"]
    summary = run([*argv, *extra])
    manifest = json.loads((tmp_path / out / "_manifest.json").read_text())
    return summary, manifest, (tmp_path / out / "report.html").read_text()


def test_known_pairs_and_recall_by_hand(corpus):
    _, _, emb = corpus
    known = read_known_duplicates([EmbeddingsDataset.open(str(emb))], "duplicate_of", IDS)
    rows = sorted(zip(known.pairs.a.tolist(), known.pairs.b.tolist(), strict=True))
    assert rows == [(0, 1), (0, 2), (3, 4)]  # (a, b), (a, c), (d, e)
    assert known.naming == 6 and known.pairs.unknown == 1 and known.pairs.same_item == 1
    assert known.repeated == 1
    # a, b in group 0; c alone in group 1; d and e in no group: only (a, b) is found.
    group = np.array([0, 0, 1, -1, -1, -1, -1, -1])
    found = known_found(group, known)
    assert (found.found, found.known, found.missed) == (1, 3, 2)
    assert found.recall == pytest.approx(1 / 3)


def job_sections(tmp_path: Path, out: str = "out", emb: Path | None = None) -> str:
    """sbert run's dedup sections of report.html for the dedup output ``out``."""
    outputs = {"dedup": str(tmp_path / out), **({"embed": str(emb)} if emb else {})}
    return "".join(dedup_sections(ReportContext(str(tmp_path), outputs, {}, verify=False)))


def _points(manifest: dict, method: str) -> dict[float, tuple[int, float]]:
    (entry,) = [m for m in manifest["known_duplicates"]["methods"] if m["method"] == method]
    return {round(p["threshold"], 2): (p["found"], p["recall"]) for p in entry["points"]}


def test_recall_per_method_and_threshold_in_the_manifest_report_and_summary(corpus):
    tmp_path, pairs, _ = corpus
    summary, manifest, page = dedup(
        tmp_path, pairs, "--method", "ranked", "--rank", "corpus", "--sweep", "all"
    )
    known = manifest["known_duplicates"]
    assert known["source"] == "field" and known["field"] == "duplicate_of"
    assert (known["pairs"], known["unknown_ids"], known["same_item"]) == (3, 1, 1)
    # ranked in corpus (here id) order at 0.85: a keeps b; c is 0.82 to the kept a, so kept
    third, two_thirds = pytest.approx(1 / 3, abs=1e-6), pytest.approx(2 / 3, abs=1e-6)
    assert known["method"] == "ranked"
    assert known["at_threshold"] == {
        "found": 1,
        "missed": 2,
        "recall": third,
        "labelled_precision": None,
    }
    ranked = _points(manifest, "ranked")
    assert ranked == {0.8: (3, 1.0), 0.85: (1, third), 0.9: (1, third), 0.95: (1, third)}
    # components: {a, b, c} at 0.85 and 0.90 (c through b), {a, b} at 0.95, all at 0.80
    components = _points(manifest, "components")
    assert components == {
        0.8: (3, 1.0),
        0.85: (2, two_thirds),
        0.9: (2, two_thirds),
        0.95: (1, third),
    }
    assert summary.known.found == 1 and "known duplicates: 1 of 3 pairs" in summary.line()
    text = re.sub(r"<[^>]+>", "", page)
    assert "Known duplicates" in text and "found 1 of 3 (recall 0.333)" in text
    assert "not counted" in text  # the unknown id and the self-reference are said
    # the missed pairs are listed with their scores and texts
    assert "0.820 text of a" in text and "0.800 text of d" in text and "text of e" in text
    # sbert run's report section, from the manifest
    section = re.sub(r"<[^>]+>", "", job_sections(tmp_path))
    assert "Of the 3 known duplicate pairs" in section and "1 ended in one group" in section
    assert "recall 0.333" in section


def test_labels_give_the_known_pairs_and_the_precision(tmp_path):
    emb = write_embeddings(tmp_path / "emb", None)
    pairs = write_pairs(tmp_path / "pairs", emb)
    labels = tmp_path / "labels.tsv"
    rows = [("a", "b", 1), ("a", "c", 1), ("d", "e", 1), ("b", "c", 0), ("g", "h", 0)]
    labels.write_text(
        "qid1\tqid2\tis_duplicate\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows)
    )
    _, manifest, page = dedup(tmp_path, pairs, "--method", "components", "--labels", str(labels))
    known = manifest["known_duplicates"]
    assert known["source"] == "labels" and known["pairs"] == 3
    # at 0.85 (a, b), (a, c) found; (b, c) is a labelled non-duplicate in one group: P = 2/3
    assert known["at_threshold"]["found"] == 2
    assert known["at_threshold"]["labelled_precision"] == pytest.approx(2 / 3)
    assert "Precision on the labelled pairs: 0.667" in page


def test_no_known_duplicates_without_the_field_or_labels(tmp_path, corpus):
    emb = write_embeddings(tmp_path / "plain" / "emb", None)
    pairs = write_pairs(tmp_path / "plain" / "pairs", emb)
    summary, manifest, page = dedup(tmp_path, pairs)
    assert manifest["known_duplicates"] is None and summary.known is None
    assert "Known duplicates" not in page and "known duplicates" not in summary.line()
    assert "Known duplicates" not in job_sections(tmp_path)
    # the field is there but turned off
    root, with_field, _ = corpus
    _, manifest, page = dedup(root, with_field, "--known-duplicates-field", "none", out="off")
    assert manifest["known_duplicates"] is None and "Known duplicates" not in page


def test_a_named_field_the_embeddings_lack_is_refused(corpus):
    tmp_path, pairs, _ = corpus
    with pytest.raises(ValueError, match="--known-duplicates-field 'copy_of': the embeddings"):
        dedup(tmp_path, pairs, "--known-duplicates-field", "copy_of")
    assert not (tmp_path / "out").exists()


def test_chained_is_the_one_word_in_the_reports(corpus):
    tmp_path, pairs, emb = corpus
    _, _, page = dedup(tmp_path, pairs, "--method", "components")
    job_section = job_sections(tmp_path, emb=emb)
    for html in (page, job_section):
        # c is in a's group only through b (a-c is 0.82 < 0.85): shown as chained, with the
        # legend that defines the word
        assert "chained" in html and "only because it is similar to another member" in html
        lowered = html.lower()
        assert not [word for word in OLD_WORDS if word in lowered]
