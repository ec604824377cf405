"""``sbert run``'s report.html as a dedup user reads it: a table of contents, dedup's sections
first (its figures, the threshold sweep, the groups nearest the threshold beside the largest),
and the run's own details (peak memory, part file names) folded away.

The job reads planted vectors with texts (no model): a background and near-duplicate twins at
cosines spread around the threshold, so that groups near it exist.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from planted_vectors import write_embeddings_dir
from sbert_pipeline.dedup.report_section import SHOWN_GROUPS, dedup_sections
from sbert_pipeline.grouping.sizes import size_distribution
from sbert_pipeline.jobs.run import run
from sbert_pipeline.stage_api.job_stage import ReportContext

N, DIM, TWINS, THRESHOLD = 200, 24, 40, 0.9
STAGES = ["cluster", "pairs", "dedup"]
DETAILS = re.compile(r"<details\b.*?</details>", re.DOTALL)


def planted() -> tuple[list[str], np.ndarray]:
    """A random background and twins whose noise spreads their cosines over about 0.8 to 1."""
    rng = np.random.default_rng(40)
    background = rng.standard_normal((N - TWINS, DIM))
    background /= np.linalg.norm(background, axis=1, keepdims=True)
    bases = rng.choice(N - TWINS, TWINS, replace=False)
    noise = rng.standard_normal((TWINS, DIM))
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    twins = background[bases] + np.linspace(0.05, 0.75, TWINS)[:, None] * noise
    vectors = np.concatenate([background, twins]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [f"row {i} of the planted corpus" for i in range(N)], vectors


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """The job (cluster, pairs, dedup on the planted vectors), run once: its folder."""
    root = tmp_path_factory.mktemp("run_report")
    texts, vectors = planted()
    emb = write_embeddings_dir(root / "emb", vectors, texts=texts, model_id="planted")
    config = {
        "job_dir": str(root / "job"),
        "embeddings": str(emb),
        "stages": STAGES,
        "cluster": {"k": 3},
        "pairs": {"method": "exact", "k": 5, "threshold": 0.8},
        "dedup": {"threshold": THRESHOLD},
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run([str(path)])
    return root / "job"


def page_of(job: Path) -> str:
    return (job / "report.html").read_text(encoding="utf-8")


def titles(page: str) -> list[str]:
    """The section titles in page order, the table of contents' own left out."""
    return re.findall(r'<h2 id="[^"]+">(.*?)</h2>', page)


def test_contents_link_every_section_and_dedup_comes_first(job) -> None:
    page = page_of(job)
    contents = re.search(r'<nav class="contents">(.*?)</nav>', page, re.DOTALL)
    assert contents, "no table of contents"
    assert page.index("<nav") < page.index("<h2 id=")  # at the top
    linked = re.findall(r'href="#([^"]+)"', contents.group(1))
    anchors = re.findall(r'<h2 id="([^"]+)"', page)
    assert linked == [*anchors, "run-details"]
    assert re.search(r'<details id="run-details">', page)
    shown = titles(page)
    assert shown[:2] == ["Counts", "Duplicates"]
    for later in ("Pair similarity", "Cluster sizes", "Largest clusters", "Stages"):
        assert shown.index(later) > shown.index("Largest duplicate groups"), later
    assert shown.index("Threshold sweep") < shown.index("Groups nearest the threshold")


def test_groups_nearest_the_threshold_are_those_whose_weakest_member_is(job) -> None:
    groups = pq.read_table(job / "dedup" / "groups.parquet").to_pylist()
    weakest: dict[int, float] = {}
    for row in groups:
        if not row["is_representative"] and row["score"] is not None:
            weakest[row["group"]] = min(weakest.get(row["group"], 1.0), row["score"])
    expected = sorted(weakest, key=lambda group: (abs(weakest[group] - THRESHOLD), group))
    assert len(expected) > SHOWN_GROUPS  # more groups than shown: the choice matters
    page = page_of(job)
    section = page.split(">Groups nearest the threshold</h2>")[1].split("<h2")[0]
    shown = [int(group) for group in re.findall(r"<h3>group (\d+) ·", section)]
    assert shown == expected[:SHOWN_GROUPS]
    for group in shown:
        assert f"group {group} · " in section and f"lowest {weakest[group]:.3f}" in section
    # Not the largest groups again: the two lists differ.
    largest = page.split(">Largest duplicate groups</h2>")[1].split("<h2")[0]
    assert re.findall(r"<h3>group (\d+) ·", largest) != [str(group) for group in shown]


def test_part_file_names_and_memory_only_in_the_run_details(job) -> None:
    page = page_of(job)
    (details,) = DETAILS.findall(page)
    reader_view = DETAILS.sub("", page)
    assert re.search(r"part-[0-9a-f]{6,}", details)  # the run id in the part names
    assert "peak RSS" in details and re.search(r"\d (MiB|GiB)", details)
    assert "part-" not in reader_view
    assert not re.search(r"peak RSS|RSS|\bMiB\b|\bGiB\b|&le;", reader_view)


def test_dedup_figures_and_the_sweep_plot(job) -> None:
    page = page_of(job)
    manifest = json.loads((job / "dedup" / "_manifest.json").read_text())
    counts = manifest["counts"]
    removed, rows = counts["removed"], counts["rows_in"]
    text = re.sub(r"<[^>]+>", "", page)
    assert f"{removed:,} of {rows:,} rows removed ({removed / rows:.1%})" in text
    sizes = [row["size"] for row in pq.read_table(job / "dedup" / "groups.parquet").to_pylist()]
    assert f"Largest group: {max(sizes):,} rows" in text
    assert "group size (rows)" in page
    # The sweep plot is the dedup stage's own, in the job report too.
    sweep = page.split(">Threshold sweep</h2>")[1].split("<h2")[0]
    assert 'aria-label="rows removed by threshold"' in sweep
    assert sweep.count("<circle") == len(manifest["sweep"])
    assert f"threshold {THRESHOLD:g}" in sweep


def test_figures_the_manifest_gives_are_shown_and_older_manifests_still_work(job, tmp_path) -> None:
    folder = tmp_path / "dedup"
    shutil.copytree(job / "dedup", folder)
    context = ReportContext(str(tmp_path), {"dedup": str(folder)}, {}, verify=False)
    manifest = json.loads((folder / "_manifest.json").read_text())
    for name in ("largest_group", "group_sizes", "removed_share"):  # not in older manifests
        manifest.pop(name, None)
        manifest.get("counts", {}).pop(name, None)
    (folder / "_manifest.json").write_text(json.dumps(manifest))
    older = html.unescape(re.sub(r"<[^>]+>", "", "".join(dedup_sections(context))))
    groups = pq.read_table(folder / "groups.parquet").column("group").to_numpy()
    computed = size_distribution(np.unique(groups, return_counts=True)[1])
    assert sum(computed.values()) == len(set(groups.tolist()))
    assert all(f"{size}{count:,}" in older for size, count in computed.items())
    manifest = json.loads((folder / "_manifest.json").read_text())
    manifest.update(largest_group=77, removed_share=0.25, group_sizes={"2-3": 5, "4+": 1})
    (folder / "_manifest.json").write_text(json.dumps(manifest))
    newer = re.sub(r"<[^>]+>", "", "".join(dedup_sections(context)))
    assert "(25.0%)" in newer and "Largest group: 77 rows" in newer
    assert "2-35" in newer and "4+1" in newer  # size, then groups, cell by cell
