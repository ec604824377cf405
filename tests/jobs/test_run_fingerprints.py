"""``sbert run``'s fingerprints keep their digests: what each stage reads from outside the job
(its ``external_inputs``) is described as jobs made before described it, so a job directory made
before does not rerun a stage that did not change.

Each fingerprint is rebuilt here from its documented parts (the stage's name, its options less
``overwrite``, its external inputs, its upstream identities) with the external inputs written
out by hand in the format ``_job_state.json`` files already hold: the corpus and data files by
path, size and xxh3_128, the model by its identity, verify's cross-encoder file by file, dedup's
reference folders by their manifests' sha256, ``embeddings:`` by its files and columns. Nothing
here runs a stage.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from sbert_pipeline.io.content_checks import file_digests
from sbert_pipeline.jobs.run import main as run_main
from sbert_pipeline.jobs.run_config import load_run_config, stage_options
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_stages import plan_stages
from sbert_pipeline.jobs.run_table import STAGE_NAMES
from sbert_pipeline.stage_api.input_files import model_identity

from tests.pipelines.verify.verify_data import build_cross_encoder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("fingerprint_ce") / "ce")


def file_entry(path: Path) -> dict:
    """A file as fingerprints record it."""
    size = path.stat().st_size
    (digest,) = file_digests([(str(path), size)])
    return {"path": str(path), "size": size, "digest": digest}


def expected_fingerprint(plan, inputs: dict, upstream: dict) -> str:
    """The fingerprint as the job state has always computed it."""
    options = plan.options.to_dict()
    options.pop("overwrite", None)
    payload = {"stage": plan.name, "options": options, "inputs": inputs, "upstream": upstream}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plans_of(tmp_path: Path, job: dict) -> dict:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    config = load_run_config(path)
    return config, {plan.name: plan for plan in plan_stages(config, check_job_inputs(config), [])}


def write_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": f"d{i}", "text": f"text number {i}"} for i in range(6)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return corpus


def assert_fingerprints(plans: dict, inputs: dict[str, dict]) -> None:
    for name, plan in plans.items():
        assert plan.inputs == inputs[name], name
        upstream = {other: f"manifest-of-{other}" for other in plan.upstream}
        assert plan.fingerprint(upstream) == expected_fingerprint(plan, inputs[name], upstream)


def test_embed_verify_and_dedup_describe_their_inputs_as_before(
    tmp_path, tiny_st_dir, cross_encoder
):
    corpus = write_corpus(tmp_path)
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "_manifest.json").write_text('{"counts": {"embedded": 3}}', encoding="utf-8")
    job = {
        "job_dir": str(tmp_path / "job"),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": str(tiny_st_dir),
        "stages": ["embed", "index", "pairs", "verify", "dedup"],
        "embed": {"device": "cpu"},
        "verify": {"model": str(cross_encoder), "device": "cpu"},
        "dedup": {"threshold": 0.5, "against": [str(reference)]},
    }
    config, plans = plans_of(tmp_path, job)
    model_files = sorted(p for p in cross_encoder.rglob("*") if p.is_file())
    verifier = [{**file_entry(p), "path": str(p.relative_to(cross_encoder))} for p in model_files]
    against = hashlib.sha256((reference / "_manifest.json").read_bytes()).hexdigest()
    assert_fingerprints(
        plans,
        {
            "embed": {
                "corpus": [file_entry(corpus)],
                "model": model_identity(stage_options(config, "embed")),
            },
            "index": {},
            "pairs": {},
            "verify": {"model": {"name": str(cross_encoder), "files": verifier}},
            "dedup": {"against": [{"directory": str(reference), "manifest_sha256": against}]},
        },
    )
    assert plans["embed"].inputs["model"]["dim"] == 32


def test_finetune_and_its_model_describe_their_inputs_as_before(tmp_path, tiny_st_dir):
    corpus = write_corpus(tmp_path)
    train = tmp_path / "train.tsv"
    train.write_text("sentence1\tsentence2\tscore\na b\tc d\t0.5\n", encoding="utf-8")
    recipe = {
        "model": str(tiny_st_dir),
        "objective": {"name": "cosine"},
        "train": {"path": str(train)},
        "training": {"epochs": 1, "device": "cpu"},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    job = {
        "job_dir": str(tmp_path / "job"),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": "finetune",
        "stages": ["finetune", "embed", "index"],
        "finetune": {"config": str(tmp_path / "train.yaml")},
        "embed": {"device": "cpu"},
        "index": {"factory": "Flat"},
    }
    _, plans = plans_of(tmp_path, job)
    described = plans["finetune"].inputs
    assert described["data"] == [{"role": "train", **file_entry(train)}]
    assert described["base_model"]["model_id"] == str(tiny_st_dir.resolve())
    assert described["base_model"]["dim"] == 32
    # Where it writes is the job's, never part of what it depends on.
    assert "output" not in described["config"] and "overwrite" not in described["config"]
    assert "checkpoint_dir" not in described["config"]["training"]
    assert described["config"]["objective"]["name"] == "cosine"
    assert_fingerprints(
        plans,
        {
            "finetune": described,
            # The model comes from the finetune stage: its manifest is an upstream identity.
            "embed": {"corpus": [file_entry(corpus)], "model": None},
            "index": {},
        },
    )


def test_vectors_made_before_are_described_as_before(tmp_path):
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    table = pa.table({"doc": ["a", "b", "c"], "vec": [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]})
    pq.write_table(table, vectors / "part-0.parquet")
    job = {
        "job_dir": str(tmp_path / "job"),
        "embeddings": {"path": str(vectors), "embedding_column": "vec", "id_column": "doc"},
        "stages": ["pairs", "dedup"],
        "pairs": {"method": "exact"},
    }
    _, plans = plans_of(tmp_path, job)
    columns = {"embedding_column": "vec", "id_column": "doc", "text_column": None}
    embeddings = {
        "files": [file_entry(vectors / "part-0.parquet")],
        "columns": {**columns, "model_name": None},
    }
    assert plans["pairs"].upstream == ()
    assert_fingerprints(plans, {"pairs": {"embeddings": embeddings}, "dedup": {}})


def test_a_reference_folder_that_is_no_embed_output_is_refused_naming_the_stage(
    tmp_path, tiny_st_dir, capsys
):
    corpus = write_corpus(tmp_path)
    (tmp_path / "not_embedded").mkdir()
    job = {
        "job_dir": str(tmp_path / "job"),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": str(tiny_st_dir),
        "stages": ["embed", "pairs", "dedup"],
        "embed": {"device": "cpu"},
        "dedup": {"against": [str(tmp_path / "not_embedded")]},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job), encoding="utf-8")
    with pytest.raises(FileNotFoundError) as raised:
        run_main([str(tmp_path / "job.yaml")])
    assert str(raised.value) == (
        f"dedup: dedup.against: {tmp_path / 'not_embedded'} has no _manifest.json (not a "
        "finished sbert embed output); nothing was run or written"
    )
    assert not (tmp_path / "job" / "embeddings").exists()


def test_run_modules_name_no_stage() -> None:
    """Stage names are in the stage table alone; the rest of ``sbert run`` goes through the
    stage descriptors. The job-wide key ``verify:`` (the digest check) is a config key that the
    verify stage's section shares, not a reference to the stage."""
    found = []
    for path in sorted((ROOT / "jobs").glob("run*.py")):
        if path.name == "run_table.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            (path.name, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in STAGE_NAMES
        ]
    assert found == [("run_config.py", "verify")]
