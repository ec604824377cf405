"""``sbert run`` configs: loading, overrides, validation messages, stage command lines.

Nothing here runs a stage: configs are checked and turned into stage plans only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from sbert_pipeline import cluster, dedup, index
from sbert_pipeline.jobs.run import main as run_main
from sbert_pipeline.jobs.run_config import (
    DEFAULT_STAGES,
    STAGE_ORDER,
    config_as_dict,
    load_run_config,
    stage_options,
)
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_stages import plan_stages
from sbert_pipeline.jobs.stage_cli import parse
from sbert_pipeline.stage_api.options import defaults

from sbert_core.errors import ModelLoadError

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n', encoding="utf-8")
    return path


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def minimal(tmp_path: Path, corpus: Path, model: Path | str, extra: str = "") -> Path:
    return write(
        tmp_path,
        f"job_dir: {tmp_path / 'job'}\ninput:\n  path: {corpus}\n  id_field: id\n"
        f"model: {model}\ncluster:\n  k: 2\n{extra}",
    )


def test_quickstart_config_is_valid_and_runs_every_stage() -> None:
    config = load_run_config(QUICKSTART)
    assert config.ordered_stages() == list(DEFAULT_STAGES)
    assert config.model == "all-MiniLM-L6-v2" and config.is_local
    assert config.input.path == "examples/sample_corpus.jsonl"
    assert stage_options(config, "dedup").threshold >= stage_options(config, "pairs").threshold


def test_defaults_and_print_config_round_trip(tmp_path, corpus, capsys) -> None:
    path = minimal(tmp_path, corpus, "all-MiniLM-L6-v2")
    assert run_main([str(path), "--print-config", "--set", "dedup.keep=longest"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["dedup"]["keep"] == "longest"
    assert printed["stages"] == list(DEFAULT_STAGES)
    assert printed["runner"] == "local" and printed["beam"] == {}
    # What --print-config shows is itself a valid config describing the same job.
    again = write(tmp_path, yaml.safe_dump(printed), "printed.yaml")
    assert config_as_dict(load_run_config(again)) == printed


def test_set_overrides_values_lists_and_nested_keys(tmp_path, corpus) -> None:
    path = minimal(tmp_path, corpus, "all-MiniLM-L6-v2")
    config = load_run_config(
        path,
        [
            "dedup.threshold=0.95",
            "stages=[embed, cluster]",
            "beam.direct_num_workers=2",
            "input.keep_fields=source,lang",
            "embed.options.max-batch-size=8192",
        ],
    )
    assert stage_options(config, "dedup").threshold == 0.95
    assert config.ordered_stages() == ["embed", "cluster"]
    assert config.beam == {"direct_num_workers": 2}
    assert config.input.keep_fields == ["source", "lang"]
    assert stage_options(config, "embed").max_batch_size == 8192


def test_job_wide_incremental_turns_on_every_stage_that_has_it(tmp_path, corpus) -> None:
    path = minimal(tmp_path, corpus, "all-MiniLM-L6-v2")
    assert not load_run_config(path).incremental
    assert stage_options(load_run_config(path), "pairs").incremental is False
    config = load_run_config(path, ["incremental=true", "index.incremental=false"])
    assert stage_options(config, "pairs").incremental is True
    assert stage_options(config, "index").incremental is False  # a section says otherwise
    # A stage without the option is left alone, not refused.
    config = load_run_config(path, ["incremental=true", "dedup.threshold=0.95"])
    assert not hasattr(stage_options(config, "dedup"), "incremental")


def test_stages_run_in_pipeline_order_whatever_the_list_order(tmp_path, corpus) -> None:
    path = minimal(tmp_path, corpus, "all-MiniLM-L6-v2", "stages: [dedup, pairs, embed]\n")
    assert load_run_config(path).ordered_stages() == ["embed", "pairs", "dedup"]


def test_environment_variables_are_expanded(tmp_path, corpus, monkeypatch) -> None:
    monkeypatch.setenv("SBERT_TEST_JOBS", str(tmp_path / "jobs"))
    path = write(
        tmp_path,
        f"job_dir: ${{SBERT_TEST_JOBS}}/one\ninput: {{path: {corpus}}}\ncluster: {{k: 2}}\n",
    )
    assert load_run_config(path).job_dir == f"{tmp_path}/jobs/one"
    monkeypatch.delenv("SBERT_TEST_JOBS")
    with pytest.raises(ValueError, match=r"SBERT_TEST_JOBS \(used by job_dir\)"):
        load_run_config(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("clusterr: {k: 3}\n", r"unknown config key\(s\) 'clusterr'; valid keys: job_dir, input"),
        ("dedup: {treshold: 0.9}\n", r"dedup.treshold: not an option of dedup; did you mean"),
        ("stages: [embed, dedupe]\n", r"stages\[1\]: 'dedupe' is not one of: finetune, embed"),
        ("dedup: {threshold: high}\n", r"dedup.threshold: expected a number, got 'high'"),
        ("pairs: {k: 2.5}\n", r"pairs.k: expected an integer, got 2.5"),
        ("input: {path: x, keep_text: maybe}\n", r"input.keep_text: expected true or false"),
        ("index: {metric: cos}\n", r"index.metric: 'cos' is not one of: ip, l2"),
        ("embed: {compute_dtype: fp8}\n", r"embed.compute_dtype: 'fp8' is not one of: float32"),
        ("index: {output: /elsewhere}\n", r"index.output: set by sbert run, not by the config"),
        ("stages: [index]\n", r"stages: index reads the output of embed; add it to stages"),
        ("stages: [embed, dedup]\n", r"stages: dedup reads the output of pairs"),
        ("stages: []\n", r"stages: list at least one of"),
        ("stages: [embed, embed]\n", r"stages: embed listed more than once"),
        ("dedup: {threshold: 0.7}\n", r"dedup.threshold: 0.7 is below pairs.threshold 0.8"),
        ("pairs: {threshold: 1.5}\n", r"pairs.threshold: must be in \[-1, 1\], got 1.5"),
        ("index: {target_recall: 0}\n", r"index.target_recall: must be in \(0, 1\]"),
        ("index: {memory_budget: lots}\n", r"index.memory_budget: cannot read the size 'lots'"),
        ("cluster: {k: null}\n", r"cluster.k: required with --method kmeans"),
        ("cluster: {method: communities, k: 3}\n", r"cluster.k: applies to --method kmeans"),
        ("model: finetune\n", r"model: 'finetune' means the model the finetune stage writes"),
        ("stages: [finetune, embed]\n", r"finetune.config: required with the finetune stage"),
        ("beam: {runner: DataflowRunner}\n", r"beam.runner: set the runner with the top-level"),
        ("runner: DataflowRunner\n", r"job_dir: '.*' is a local path, which DataflowRunner"),
    ],
)
def test_invalid_config_gives_one_message_naming_the_key(tmp_path, corpus, extra, message):
    # A key given twice keeps its last value, so `extra` replaces the minimal config's.
    path = minimal(tmp_path, corpus, "all-MiniLM-L6-v2", extra)
    with pytest.raises(ValueError, match=message) as err:
        load_run_config(path)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(str(path))


def test_config_file_problems(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"job config .* does not exist"):
        load_run_config(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="invalid YAML/JSON at line"):
        load_run_config(write(tmp_path, "job_dir: [unclosed\n"))
    with pytest.raises(ValueError, match="--set stages: override 'stages' is not of the form"):
        load_run_config(write(tmp_path, "job_dir: x\n"), ["stages"])


def test_missing_input_and_missing_model_are_named(tmp_path, corpus) -> None:
    config = load_run_config(minimal(tmp_path, tmp_path / "nothing*.jsonl", "all-MiniLM-L6-v2"))
    with pytest.raises(FileNotFoundError, match=r"^input.path: no files match .*nothing\*"):
        check_job_inputs(config)
    config = load_run_config(minimal(tmp_path, corpus, tmp_path / "no-such-model"))
    with pytest.raises(ModelLoadError, match=r"^model: model directory .*no-such-model does not"):
        check_job_inputs(config)


def test_a_foreign_job_dir_is_refused(tmp_path, corpus, tiny_st_dir) -> None:
    config = load_run_config(minimal(tmp_path, corpus, tiny_st_dir))
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"job_dir: .* holds files of something other than"):
        check_job_inputs(config)


def plans_for(tmp_path, corpus, model, extra: str = "", overrides=()) -> dict:
    config = load_run_config(minimal(tmp_path, corpus, model, extra), list(overrides))
    return {plan.name: plan for plan in plan_stages(config, check_job_inputs(config), [])}


def test_stage_options_come_from_the_sections_and_the_job(tmp_path, corpus, tiny_st_dir) -> None:
    plans = plans_for(
        tmp_path,
        corpus,
        tiny_st_dir,
        "embed: {normalize: false, options: {max-batch-size: 8192}}\n"
        "index: {shards: 2}\ndedup: {threshold: 0.95, keep: longest, apply: true}\n",
    )
    job = tmp_path / "job"
    embed_options = plans["embed"].options
    assert (embed_options.input, embed_options.output) == (str(corpus), f"{job}/embeddings")
    assert embed_options.model == str(tiny_st_dir)
    assert embed_options.id_field == "id" and embed_options.keep_text is True
    assert embed_options.normalize is False and embed_options.max_batch_size == 8192
    index_options = plans["index"].options
    assert (index_options.embeddings, index_options.output) == (
        f"{job}/embeddings",
        f"{job}/index",
    )
    assert index_options.shards == 2
    dedup_options = plans["dedup"].options
    assert (dedup_options.pairs, dedup_options.output, dedup_options.corpus) == (
        f"{job}/pairs",
        f"{job}/dedup",
        str(corpus),
    )
    assert dedup_options.threshold == 0.95 and dedup_options.apply is True
    assert (
        dedup_options.keep
        == parse(
            "dedup", ["--pairs", "p", "--output", "o", "--threshold", "0.95", "--keep", "longest"]
        ).keep
    )


def test_beam_options_go_only_to_stages_that_run_pipelines(tmp_path, corpus, tiny_st_dir):
    config = load_run_config(minimal(tmp_path, corpus, tiny_st_dir))
    beam = ["--direct_num_workers=2"]
    plans = {plan.name: plan for plan in plan_stages(config, check_job_inputs(config), beam)}
    assert {name for name, plan in plans.items() if plan.beam_argv} == {"embed", "cluster", "pairs"}
    options = plans["embed"].run_options(overwrite=True)
    assert options.overwrite is True and options.beam_options == ("--direct_num_workers=2",)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "embed: {options: {no-such-flag: 1}}\n",
            r"embed.no_such_flag: not an option of embed",
        ),
        ("embed: {options: {output: /elsewhere}}\n", r"embed.output: set by sbert run"),
        ("cluster: {k: 2, options: {k: 3}}\n", r"cluster.options.k: set it as cluster.k"),
        ("index: {options: {batch-size: many}}\n", r"index.batch_size: expected an integer"),
        ("pairs: {options: {precision: float8}}\n", r"pairs.precision: 'float8' is not one of"),
        ("dedup: {options: {overwrite: true}}\n", r"dedup.overwrite: set by sbert run"),
    ],
)
def test_stage_options_are_checked_against_the_stage(tmp_path, corpus, tiny_st_dir, extra, message):
    with pytest.raises(ValueError, match=message):
        plans_for(tmp_path, corpus, tiny_st_dir, extra)


def fingerprints(plans: dict) -> dict[str, str]:
    identities = {name: f"output-of-{name}" for name in STAGE_ORDER}
    return {name: plan.fingerprint(identities) for name, plan in plans.items()}


def test_fingerprints_follow_parameters_inputs_and_upstream(tmp_path, corpus, tiny_st_dir):
    base = fingerprints(plans_for(tmp_path, corpus, tiny_st_dir))
    assert base == fingerprints(plans_for(tmp_path, corpus, tiny_st_dir))
    changed = fingerprints(
        plans_for(tmp_path, corpus, tiny_st_dir, overrides=["dedup.threshold=0.95"])
    )
    assert [name for name in base if base[name] != changed[name]] == ["dedup"]
    # Beam options say where a stage runs, not what it writes.
    config = load_run_config(minimal(tmp_path, corpus, tiny_st_dir))
    remote = plan_stages(config, check_job_inputs(config), ["--direct_num_workers=2"])
    assert fingerprints({plan.name: plan for plan in remote}) == base
    # A corpus file that changed (size and modification time) changes the embed fingerprint;
    # the later stages follow through the embed output's identity, not directly.
    corpus.write_text(corpus.read_text() + '{"id": "c", "text": "three"}\n', encoding="utf-8")
    os.utime(corpus, (1_000_000_000, 1_000_000_000))
    touched = fingerprints(plans_for(tmp_path, corpus, tiny_st_dir))
    assert [name for name in base if base[name] != touched[name]] == ["embed"]
    plans = plans_for(tmp_path, corpus, tiny_st_dir)
    other = {name: "other" for name in STAGE_ORDER}
    assert plans["cluster"].fingerprint(other) != touched["cluster"]


def test_runner_options_are_checked_by_beam(tmp_path, corpus, tiny_st_dir) -> None:
    path = minimal(tmp_path, corpus, tiny_st_dir, "beam: {direct_num_workrs: 2}\n")
    with pytest.raises(ValueError, match=r"beam.direct_num_workrs: unknown option.*did you mean"):
        run_main([str(path)])
    assert not (tmp_path / "job").exists()


def test_run_refuses_to_submit_without_waiting(tmp_path, corpus, tiny_st_dir) -> None:
    """Each stage reads the one before, so `sbert run` cannot leave its first stage running."""
    path = minimal(tmp_path, corpus, tiny_st_dir, "beam: {no_wait_until_finish: true}\n")
    with pytest.raises(ValueError, match=r"beam.no_wait_until_finish: sbert run waits"):
        run_main([str(path)])
    assert not (tmp_path / "job").exists()


def test_remote_runner_with_remote_paths_is_accepted(tmp_path) -> None:
    path = write(
        tmp_path,
        "job_dir: gs://bucket/jobs/one\ninput: {path: 'gs://bucket/corpus/*.jsonl'}\n"
        "runner: DataflowRunner\nbeam: {project: p, region: us-central1}\ncluster: {k: 8}\n",
    )
    config = load_run_config(path)
    assert not config.is_local and config.beam["project"] == "p"


REMOTE_ENV = {
    "GCP_PROJECT": "my-project",
    "GCP_REGION": "us-central1",
    "GCS_BUCKET": "my-bucket",
    "WORKER_IMAGE": "us-central1-docker.pkg.dev/my-project/sbert/worker:0.1.0",
    "SPARK_MASTER": "spark://spark-master:7077",
    "CORPUS": "s3://my-bucket/corpus/*.jsonl.gz",
    "JOB_DIR": "s3://my-bucket/jobs/quickstart",
}


@pytest.mark.parametrize(
    ("name", "runner"), [("dataflow.yaml", "DataflowRunner"), ("spark.yaml", "SparkRunner")]
)
def test_cluster_job_configs_give_options_beam_knows(monkeypatch, name, runner) -> None:
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )
    from sbert_pipeline.jobs.run import _beam_argv

    for key, value in REMOTE_ENV.items():
        monkeypatch.setenv(key, value)
    config = load_run_config(ROOT / "examples" / name)
    assert config.ordered_stages() == list(DEFAULT_STAGES)
    assert config.job_dir.startswith(("gs://", "s3://"))
    argv = _beam_argv(config)  # every option name and value checked by Beam's own parser
    options = PipelineOptions(argv)
    assert options.view_as(StandardOptions).runner == runner
    every = options.get_all_options(retain_unknown_options=True)
    assert set(every) == set(options.get_all_options())  # nothing Beam would drop
    if runner == "SparkRunner":
        portable = options.view_as(PortableOptions)
        assert portable.environment_config == REMOTE_ENV["WORKER_IMAGE"]
    else:
        assert "--sdk_container_image=" + REMOTE_ENV["WORKER_IMAGE"] in argv
        assert stage_options(config, "embed").device == "cuda"


def test_the_stage_table_describes_every_stage_once() -> None:
    from sbert_pipeline.jobs.run_table import STAGES
    from sbert_pipeline.jobs.stage_cli import stage_package

    assert tuple(spec.name for spec in STAGES) == STAGE_ORDER
    assert len({spec.folder for spec in STAGES}) == len(STAGES)
    for position, spec in enumerate(STAGES):
        assert all(STAGE_ORDER.index(need) < position for need in spec.inputs), spec.name
        package = stage_package(spec.name)
        assert callable(package.run) and hasattr(package, "Options"), spec.name


def test_section_defaults_are_the_stages_own(tmp_path, corpus, capsys) -> None:
    # --print-config shows each stage's own defaults (the job's thresholds aside) ...
    assert run_main([str(minimal(tmp_path, corpus, "all-MiniLM-L6-v2")), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["index"]["queries"] == defaults(index.Options)["queries"]
    assert printed["cluster"]["iterations"] == defaults(cluster.Options)["iterations"]
    assert printed["dedup"]["keep"] == defaults(dedup.Options)["keep"]
    assert printed["pairs"]["threshold"] == 0.8 and printed["dedup"]["threshold"] == 0.9
    # ... and none of what the job sets itself.
    assert "output" not in printed["index"] and "embeddings" not in printed["pairs"]
    assert "overwrite" not in printed["dedup"] and "beam_options" not in printed["embed"]


def test_set_keeps_scalars_as_written_as_sbert_submit_does(tmp_path, corpus, tiny_st_dir):
    plans = plans_for(tmp_path, corpus, tiny_st_dir, overrides=["input.text_field=1.20"])
    assert plans["embed"].options.text_field == "1.20"  # YAML would have read 1.2


def test_run_modules_import_each_other_without_cycles() -> None:
    """Every import counts, inside functions and under TYPE_CHECKING too."""
    import ast

    names = [
        "run",
        "run_report",
        "run_stages",
        "run_table",
        "run_config",
        "run_inputs",
        "run_paths",
    ]
    names += ["submit", "stage_cli", "options_cli"]
    edges: dict[str, set[str]] = {}
    for name in names:
        tree = ast.parse((ROOT / "jobs" / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        edges[name] = {
            other for other in names if f"sbert_pipeline.jobs.{other}" in found and other != name
        }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            other == goal or (other not in seen and reaches(other, goal, seen | {other}))
            for other in edges[start]
        )

    assert [name for name in names if reaches(name, name, {name})] == []
