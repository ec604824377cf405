import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from sbert_pipeline.cluster.cluster_summaries import (
    SUMMARY_SCHEMA,
    clusters_report_html,
    distinctive_terms,
    nearest_members,
    summarize,
    summary_table,
    text_sample,
)
from sbert_pipeline.io.html import SIZE_AXIS, Bins, histogram_svg


def test_class_based_tf_idf_known_values():
    documents = ["guitar guitar music", "dog dog music", "cat", ""]
    terms = distinctive_terms(documents, top_n=5, stop_words=None)
    mean_words = 7 / 4  # words per cluster, the empty one included
    assert terms[0] == [
        ("guitar", pytest.approx(2 / 3 * math.log(1 + mean_words / 2))),
        ("music", pytest.approx(1 / 3 * math.log(1 + mean_words / 2))),
    ]
    assert [t for t, _ in terms[1]] == ["dog", "music"]
    assert terms[2] == [("cat", pytest.approx(math.log(1 + mean_words / 1)))]
    assert terms[3] == []


def test_terms_skip_stop_words_and_prefer_what_sets_a_cluster_apart():
    documents = [
        "the guitar is loud and the band plays the guitar",
        "the dog is loud and the dog runs in the park",
    ]
    first, second = distinctive_terms(documents, top_n=2)
    assert first[0][0] == "guitar" and second[0][0] == "dog"
    assert "the" not in {t for t, _ in first + second}
    assert distinctive_terms(["the and of", ""]) == [[], []]  # only stop words


def test_nearest_members_and_text_sample():
    labels = np.array([1, 0, 1, -1, 1, 0, 2])
    scores = np.array([0.5, 0.9, 0.8, 0.99, 0.8, 0.1, 0.3], np.float32)
    nearest = nearest_members(labels, scores, 4, per_cluster=2)
    assert [n.tolist() for n in nearest] == [[1, 5], [2, 4], [6], []]
    sample = text_sample(labels, 4, per_cluster=2, seed=0)
    assert [len(s) for s in sample] == [2, 2, 1, 0]
    assert all(set(labels[s]) <= {c} for c, s in enumerate(sample))
    again = text_sample(labels, 4, per_cluster=2, seed=0)
    assert [s.tolist() for s in sample] == [s.tolist() for s in again]


def test_summary_table_and_report():
    ids = ["a", "b", "c", "d", "e"]
    labels = np.array([0, 0, 1, 1, -1])
    scores = np.array([0.9, 0.7, 0.8, 0.6, 0.0], np.float32)
    texts = {"a": "guitar <b>solo</b>", "b": "guitar band", "c": "dog park"}
    profiles = summarize(ids, labels, scores, 3, texts, representatives=1, top_terms=2)
    table = summary_table(profiles)
    assert table.schema.equals(SUMMARY_SCHEMA)
    rows = table.to_pylist()
    assert [r["size"] for r in rows] == [2, 2, 0]
    assert rows[0]["mean_score"] == pytest.approx(0.8) and rows[2]["mean_score"] is None
    assert rows[0]["representative_ids"] == ["a"] and rows[1]["representative_ids"] == ["c"]
    assert rows[0]["terms"][0] == "guitar" and rows[1]["terms"][0] in {"dog", "park"}
    page = clusters_report_html(profiles, {"method": "kmeans"})
    assert "guitar &lt;b&gt;solo&lt;/b&gt;" in page and "<b>solo" not in page
    assert page.count("<tr><td>") == 3 and "<svg" in page


@pytest.mark.parametrize("sizes", [[], [5], [1, 1, 1], list(range(1, 500))])
def test_histogram_is_valid_svg(sizes):
    bins = Bins.of(np.array(sizes, dtype=np.int64), integer=True)
    svg = ET.fromstring(histogram_svg(bins, SIZE_AXIS, "clusters"))
    bars = svg.findall("{http://www.w3.org/2000/svg}rect")
    assert 1 <= len(bars) <= 30
