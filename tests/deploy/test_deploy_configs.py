"""The deploy/ configs, scripts and flex template, checked against the real option parsers.

Nothing is submitted: Dataflow needs a project, and the Spark and Flink runners download their
job-server jars at run time. What can be checked offline is checked: every config becomes a
command line that ``sbert embed`` accepts, whose Beam part Beam 2.77 parses without a single
unknown option, and whose runner-specific views hold the intended values.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import apache_beam as beam
import apache_beam.testing.test_pipeline
import pytest
import sbert_pipeline.embed
from apache_beam.options.pipeline_options import (
    DebugOptions,
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    SparkRunnerOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.options.pipeline_options import TestOptions as BeamTestOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from sbert_pipeline.jobs import submit
from sbert_pipeline.jobs.stage_cli import build_parser as stage_parser
from sbert_pipeline.jobs.submit import beam_argv, config_to_argv, job_options, load_job_config
from sbert_pipeline.stage_api.beam_options import beam_parser

from tests.stage_commands import embed

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Submit configs only: the Kubernetes manifests under deploy/dask are checked by their own test.
CONFIGS = sorted(p for p in DEPLOY.rglob("*.yaml") if "kubernetes" not in p.parts)
SCRIPTS = sorted(DEPLOY.rglob("*.sh"))
DOCKERFILES = sorted(DEPLOY.rglob("Dockerfile*"))
METADATA = DEPLOY / "dataflow" / "flex-template" / "metadata.json"
LAUNCHER = DEPLOY / "dataflow" / "flex-template" / "launch.py"

# Realistic dummies: Beam's Dataflow validator checks project ids and bucket names.
ENV = {
    "GCP_PROJECT": "my-project",
    "GCP_REGION": "us-central1",
    "GCS_BUCKET": "my-bucket",
    "WORKER_IMAGE": "us-central1-docker.pkg.dev/my-project/sbert/worker:0.1.0",
    "SPARK_MASTER": "spark://spark-master:7077",
    "JOB_ENDPOINT": "job-server:8099",
    "FLINK_MASTER": "flink-jobmanager:8081",
    "CORPUS": "s3://my-bucket/corpus/*.jsonl.gz",
    "OUTPUT": "s3://my-bucket/embeddings/corpus",
}
ACCELERATOR = "worker_accelerator=type:nvidia-l4;count:1;install-nvidia-driver:5xx"


@pytest.fixture
def deploy_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every variable any deploy config references, set to a dummy value."""
    referenced = set()
    for path in CONFIGS:
        referenced |= set(re.findall(r"\$\{(\w+)\}", path.read_text(encoding="utf-8")))
    unknown = referenced - set(ENV)
    assert not unknown, f"give these variables a dummy value in ENV: {sorted(unknown)}"
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    return ENV


def unknown_beam_options(beam_args: list[str]) -> list[str]:
    """Options Beam would drop: present when unknown options are kept, absent otherwise."""
    options = PipelineOptions(beam_args)
    every = options.get_all_options(retain_unknown_options=True)
    known = options.get_all_options()
    return sorted(set(every) - set(known))


def parsed(path: Path) -> tuple[object, PipelineOptions, dict]:
    """(job args, Beam options, config) for one deploy config, split as ``sbert embed`` does."""
    config = load_job_config(path)
    argv = config_to_argv(config)
    args, rest = stage_parser("embed").parse_known_args(argv)
    # Exactly the Beam options are left over: no job option leaks into Beam and no Beam
    # option is taken (by prefix matching, say) by the job's parser.
    assert rest == beam_argv(config)
    return args, PipelineOptions(rest), config


def dataflow_errors(options: PipelineOptions) -> list[str]:
    """Beam's own Dataflow option validation, without its calls to Cloud Storage."""
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    options.view_as(BeamTestOptions).dry_run = True
    return PipelineOptionsValidator(options, DataflowRunner()).validate()


def check_dataflow_common(args, options: PipelineOptions) -> None:
    cloud = options.view_as(GoogleCloudOptions)
    assert cloud.project == ENV["GCP_PROJECT"]
    assert cloud.region == ENV["GCP_REGION"]
    assert cloud.temp_location == "gs://my-bucket/tmp"
    assert cloud.staging_location == "gs://my-bucket/staging"
    assert options.view_as(WorkerOptions).sdk_container_image == ENV["WORKER_IMAGE"]
    assert options.view_as(SetupOptions).sdk_location == "container"
    assert "use_runner_v2" in options.view_as(DebugOptions).experiments
    assert args.input.startswith("gs://my-bucket/") and args.output.startswith("gs://my-bucket/")
    assert args.keep_text is True
    assert dataflow_errors(options) == []


def check_dataflow_gpu(args, options: PipelineOptions) -> None:
    check_dataflow_common(args, options)
    assert options.view_as(WorkerOptions).machine_type == "g2-standard-8"
    assert options.view_as(DebugOptions).number_of_worker_harness_threads == 1
    assert ACCELERATOR in options.view_as(GoogleCloudOptions).dataflow_service_options
    assert (args.device, args.compute_dtype) == ("cuda", "float16")


def check_dataflow_cpu(args, options: PipelineOptions) -> None:
    check_dataflow_common(args, options)
    assert options.view_as(WorkerOptions).machine_type == "n2-standard-8"
    assert not options.view_as(GoogleCloudOptions).dataflow_service_options
    assert (args.device, args.threads) == ("cpu", 1)


def check_spark(args, options: PipelineOptions) -> None:
    assert options.view_as(SparkRunnerOptions).spark_master_url == ENV["SPARK_MASTER"]
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == (
        "DOCKER",
        ENV["WORKER_IMAGE"],
    )
    assert (args.input, args.output) == (ENV["CORPUS"], ENV["OUTPUT"])


def check_portable(args, options: PipelineOptions) -> None:
    portable = options.view_as(PortableOptions)
    assert portable.job_endpoint == ENV["JOB_ENDPOINT"]
    assert (portable.environment_type, portable.environment_config) == (
        "EXTERNAL",
        "localhost:50000",
    )


def check_flink(args, options: PipelineOptions) -> None:
    flink = options.view_as(FlinkRunnerOptions)
    assert flink.flink_master == ENV["FLINK_MASTER"]
    assert flink.flink_version == "1.20"
    assert flink.parallelism == 8
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == (
        "DOCKER",
        ENV["WORKER_IMAGE"],
    )


EXPECTED = {
    "dataflow/embed-gpu.yaml": ("DataflowRunner", check_dataflow_gpu),
    "dataflow/embed-cpu.yaml": ("DataflowRunner", check_dataflow_cpu),
    "spark/embed-spark.yaml": ("SparkRunner", check_spark),
    "spark/embed-portable.yaml": ("PortableRunner", check_portable),
    "flink/embed-flink.yaml": ("FlinkRunner", check_flink),
}


def test_every_config_has_expectations() -> None:
    assert {path.relative_to(DEPLOY).as_posix() for path in CONFIGS} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_parses_into_job_and_beam_options(name: str, deploy_env) -> None:
    args, options, config = parsed(DEPLOY / name)
    runner, check = EXPECTED[name]
    assert config["job"] == "embed"
    assert unknown_beam_options(beam_argv(config)) == []
    assert options.view_as(StandardOptions).runner == runner
    check(args, options)


def test_unknown_option_check_sees_what_beam_would_drop() -> None:
    assert unknown_beam_options(["--runner=DataflowRunner", "--machine_typo=x", "--flag"]) == [
        "flag",
        "machine_typo",
    ]
    assert unknown_beam_options(["--runner=DataflowRunner", "--machine_type=x"]) == []


def test_job_and_beam_options_do_not_share_names() -> None:
    job = set(stage_parser("embed").actions)
    beam_flags = set(beam_parser().actions)
    assert job & beam_flags == {"--help"}


# ---- sbert submit: loading, overrides, conversion, errors ---------------------------------


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_set_overrides_values_before_variables_are_expanded(deploy_env, monkeypatch) -> None:
    monkeypatch.delenv("WORKER_IMAGE")
    config = load_job_config(
        DEPLOY / "dataflow" / "embed-gpu.yaml",
        [
            "args.output=gs://other-bucket/out",
            "beam.region=europe-west4",
            "beam.max_num_workers=null",
            "args.keep-text=false",
            "beam.sdk_container_image=${GCP_REGION}-docker.pkg.dev/p/r/img:2",
        ],
    )
    argv = config_to_argv(config)
    assert "--output=gs://other-bucket/out" in argv
    assert "--region=europe-west4" in argv
    assert "--sdk_container_image=us-central1-docker.pkg.dev/p/r/img:2" in argv
    assert not any(token.startswith(("--max_num_workers", "--keep-text")) for token in argv)


def test_set_keeps_version_like_values_as_written(deploy_env) -> None:
    config = load_job_config(DEPLOY / "flink" / "embed-flink.yaml", ["beam.flink_version=2.0"])
    assert "--flink_version=2.0" in config_to_argv(config)


def test_values_beam_would_reject_are_errors_before_submission(deploy_env) -> None:
    config = load_job_config(DEPLOY / "flink" / "embed-flink.yaml", ["beam.flink_version=1.18"])
    with pytest.raises(ValueError, match=r"--flink_version: invalid choice: '1\.18'"):
        config_to_argv(config)


@pytest.mark.parametrize("override", ["output=x", "args.output", "job.name=x", "beam.=x"])
def test_malformed_set_is_an_error(override: str, deploy_env) -> None:
    with pytest.raises(ValueError, match="--set expects"):
        load_job_config(DEPLOY / "dataflow" / "embed-cpu.yaml", [override])


def test_missing_variable_is_named(deploy_env, monkeypatch) -> None:
    monkeypatch.delenv("GCP_PROJECT")
    monkeypatch.setenv("GCS_BUCKET", "")
    with pytest.raises(ValueError, match=r"GCP_PROJECT \(used by beam\.project\)") as err:
        load_job_config(DEPLOY / "dataflow" / "embed-gpu.yaml")
    assert "GCS_BUCKET (used by args.input" in str(err.value)
    assert "\n" not in str(err.value)


def test_booleans_and_lists_become_flags(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
job: embed
args:
  input: in/*.jsonl
  output: out
  keep-text: true
  overwrite: false
  normalize: false
  keep-fields: [title, url]
  max-error-rate: 0.05
  id-field:
beam:
  runner: DataflowRunner
  experiments: [use_runner_v2, shuffle_mode=service]
  save_main_session: true
  use_public_ips: false
  streaming: false
""",
    )
    argv = config_to_argv(load_job_config(path))
    assert argv == [
        "--input=in/*.jsonl",
        "--output=out",
        "--keep-text",
        "--no-normalize",
        "--keep-fields=title,url",
        "--max-error-rate=0.05",
        "--runner=DataflowRunner",
        "--experiments=use_runner_v2",
        "--experiments=shuffle_mode=service",
        "--save_main_session",
        "--no_use_public_ips",
    ]
    args, rest = stage_parser("embed").parse_known_args(argv)
    assert (args.keep_text, args.overwrite, args.normalize) == (True, False, False)
    assert tuple(args.keep_fields) == ("title", "url")
    options = PipelineOptions(rest)
    assert options.view_as(DebugOptions).experiments == ["use_runner_v2", "shuffle_mode=service"]
    assert options.view_as(SetupOptions).save_main_session is True
    assert options.view_as(WorkerOptions).use_public_ips is False


@pytest.mark.parametrize(
    ("section", "line", "message"),
    [
        (
            "args",
            "text-feld: body",
            r"args.text_feld: not an option of args; did you mean 'text_field'",
        ),
        ("beam", "machine_typ: n2", r"unknown option --machine_typ; did you mean '--machine_type'"),
        ("args", "model: true", "args.model: expected text, got True"),
        ("args", "keep-text: yes please", "args.keep_text: expected true or false"),
        ("args", "keep-fields: {a: b}", "args.keep_fields: expected a list, got"),
        ("args", "dtype: float64", "args.dtype: 'float64' is not one of: float32, float16"),
        ("beam", "max_num_workers: lots", "beam: argument --max_num_workers: invalid int value"),
    ],
)
def test_bad_option_is_an_error(tmp_path: Path, section: str, line: str, message: str) -> None:
    args = "  input: in.txt\n  output: out\n"
    beam_section = "  runner: DataflowRunner\n"
    if section == "args":
        args += f"  {line}\n"
    else:
        beam_section += f"  {line}\n"
    path = write_config(tmp_path, f"job: embed\nargs:\n{args}beam:\n{beam_section}")
    with pytest.raises(ValueError, match=message):
        config_to_argv(load_job_config(path))


def test_missing_required_job_option_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, "job: embed\nargs:\n  input: in.txt\n")
    with pytest.raises(ValueError, match=r"args\.output: required"):
        config_to_argv(load_job_config(path))


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        (
            "job: finetune\nargs: {}\n",
            ValueError,
            "unknown job 'finetune'; known jobs: cluster, embed, index, pairs",
        ),
        ("args: {}\n", ValueError, "'job' must name a job"),
        ("job: embed\nrunner: DataflowRunner\n", ValueError, "unknown top-level key.* runner"),
        ("job: embed\nargs: [input]\n", ValueError, "'args' must be a mapping"),
        ("job: embed\nargs:\n  input: [unclosed\n", ValueError, "invalid YAML at line"),
        ("- just\n- a list\n", ValueError, "expected a mapping"),
    ],
)
def test_bad_config_is_a_one_line_error(tmp_path: Path, text: str, error, message: str) -> None:
    with pytest.raises(error, match=message) as err:
        load_job_config(write_config(tmp_path, text))
    assert "\n" not in str(err.value)


def test_an_alias_bomb_in_a_job_config_is_refused_naming_the_file(tmp_path: Path) -> None:
    levels = ['  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):  # 9^9 values once expanded: only a refusal returns at all
        levels.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    path = write_config(tmp_path, "job: embed\nbeam:\n" + "\n".join(levels) + "\n")
    with pytest.raises(ValueError, match=r"job.yaml: line 4: YAML aliases \(\*l0\)") as err:
        load_job_config(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"--set beam.x=\[\*a\]: .*YAML aliases \(\*a\)"):
        load_job_config(DEPLOY / "dataflow" / "embed-cpu.yaml", ["beam.x=[*a]"])


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_job_config(tmp_path / "nope.yaml")


def test_dry_run_prints_the_command(deploy_env, capsys) -> None:
    path = DEPLOY / "dataflow" / "embed-gpu.yaml"
    assert submit.main([str(path), "--dry-run", "--set", "beam.max_num_workers=2"]) == 0
    printed = capsys.readouterr().out.strip()
    words = shlex.split(printed)
    assert words[:3] == ["sbert", "embed", "--input=gs://my-bucket/corpus/*.jsonl.gz"]
    assert words[2:] == config_to_argv(load_job_config(path, ["beam.max_num_workers=2"]))
    assert f"--dataflow_service_options={ACCELERATOR}" in words


def test_main_runs_the_job_and_prints_its_summary(deploy_env, monkeypatch, capsys) -> None:
    calls = []

    class Summary:
        def line(self) -> str:
            return "read 3 rows: 3 embedded"

    def fake_run(options, pipeline=None):
        calls.append(options)
        return Summary()

    monkeypatch.setattr(sbert_pipeline.embed, "run", fake_run)
    path = DEPLOY / "spark" / "embed-portable.yaml"
    assert submit.main([str(path)]) == 0
    config = load_job_config(path)
    assert calls == [job_options(config).replace(beam_options=tuple(beam_argv(config)))]
    assert capsys.readouterr().out.strip() == "read 3 rows: 3 embedded"


# ---- flex template, scripts, images --------------------------------------------------------


def load_launcher():
    spec = importlib.util.spec_from_file_location("flex_template_launch", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flex_template_parameters_are_job_options() -> None:
    parameters = json.loads(METADATA.read_text(encoding="utf-8"))["parameters"]
    actions = stage_parser("embed").actions
    names = [parameter["name"] for parameter in parameters]
    assert len(names) == len(set(names))
    unknown = [name for name in names if f"--{name}" not in actions]
    assert unknown == []
    required = {flag for flag, action in actions.items() if action.required}
    declared_required = {f"--{p['name']}" for p in parameters if not p.get("isOptional", False)}
    assert declared_required == required
    for parameter in parameters:
        action = actions[f"--{parameter['name']}"]
        patterns = [re.compile(regex) for regex in parameter.get("regexes", [])]
        if action.nargs == 0:
            assert [p.pattern for p in patterns] == ["^(true|false)$"], parameter["name"]
        if action.choices:
            # The template accepts exactly what the job accepts.
            for choice in action.choices:
                assert all(p.fullmatch(choice) for p in patterns), (parameter["name"], choice)
            assert not any(p.fullmatch("bogus") for p in patterns), parameter["name"]


def test_flex_template_launcher_turns_true_false_into_flags() -> None:
    launcher = load_launcher()
    argv = launcher.template_argv(
        [
            "--input=gs://b/in/*.txt",
            "--output=gs://b/out",
            "--keep-text=true",
            "--overwrite=false",
            "--project=my-project",
            f"--dataflow_service_options={ACCELERATOR}",
        ]
    )
    assert argv == [
        "--input=gs://b/in/*.txt",
        "--output=gs://b/out",
        "--keep-text",
        "--project=my-project",
        f"--dataflow_service_options={ACCELERATOR}",
    ]
    args, rest = stage_parser("embed").parse_known_args(argv)
    assert (args.keep_text, args.overwrite) == (True, False)
    assert rest == ["--project=my-project", f"--dataflow_service_options={ACCELERATOR}"]
    with pytest.raises(ValueError, match="--keep-text is an on/off option"):
        launcher.template_argv(["--keep-text=yes"])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_shell_script_is_valid_bash(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script.read_text(encoding="utf-8")


def test_every_platform_has_a_script() -> None:
    assert {p.relative_to(DEPLOY).as_posix() for p in SCRIPTS} == {
        "dataflow/submit.sh",
        "flink/local-cluster.sh",
        "lib/local-cluster-common.sh",
        "spark/submit.sh",
        "spark/local-cluster.sh",
        "flink/submit.sh",
    }


def test_images_match_the_pinned_beam_and_copy_existing_paths() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["apache-beam"] == beam.__version__
    assert DOCKERFILES, "no Dockerfiles under deploy/"
    for dockerfile in DOCKERFILES:
        text = dockerfile.read_text(encoding="utf-8")
        for python, version in re.findall(r"apache/beam_python(\d+\.\d+)_sdk:([\w.]+)", text):
            assert version == pins["apache-beam"], dockerfile
            assert python == "3.11", dockerfile
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
                for source in words[1:-1]:
                    assert (ROOT / source).exists(), (dockerfile, source)


def test_flex_launcher_base_matches_the_worker_python() -> None:
    text = (DEPLOY / "dataflow" / "flex-template" / "Dockerfile").read_text(encoding="utf-8")
    assert "python311-template-launcher-base" in text
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/launch.py" in text


# --- examples/dataflow.yaml: GPUs only where the embed step runs (issue 16, item 9) ---

EXAMPLE = ROOT / "examples" / "dataflow.yaml"
# The GPU machine families of Compute Engine: no step but Embed may ask for one.
GPU_MACHINES = re.compile(r"^(g2|a2|a3|a4)-")
PINNED_DRIVER = re.compile(r"(^|;)install-nvidia-driver:\d(\d\d|xx)($|;)")


def example_plans(deploy_env, tmp_path):
    """(Beam options, {stage: StagePlan}) of examples/dataflow.yaml, with a local job_dir (the
    gcp extra that opens gs:// is not installed here)."""
    import dataclasses

    from sbert_pipeline.jobs.run import _beam_argv
    from sbert_pipeline.jobs.run_config import load_run_config
    from sbert_pipeline.jobs.run_inputs import CheckedInputs
    from sbert_pipeline.jobs.run_stages import plan_stages

    config = dataclasses.replace(load_run_config(EXAMPLE), job_dir=str(tmp_path / "job"))
    beam_args = _beam_argv(config)
    checked = CheckedInputs()
    plans = {plan.name: plan for plan in plan_stages(config, checked, beam_args)}
    return config, PipelineOptions(beam_args), plans


def accelerator_of(plan) -> str | None:
    return getattr(plan.options, "accelerator", None)


def test_dataflow_example_puts_gpus_on_the_embed_step_only(deploy_env, tmp_path) -> None:
    config, options, plans = example_plans(deploy_env, tmp_path)
    # Every Dataflow job runs on CPU workers; right fitting forbids worker_accelerator.
    assert not GPU_MACHINES.match(options.view_as(WorkerOptions).machine_type)
    assert not options.view_as(GoogleCloudOptions).dataflow_service_options
    assert "accelerator" not in " ".join(config.beam)
    # The embed stage's Embed step asks for an L4 with a pinned driver; no other stage does.
    hint = accelerator_of(plans["embed"])
    assert hint is not None and "type:nvidia-l4" in hint and "count:1" in hint
    assert "machine_type:g2-standard-8" in hint
    assert PINNED_DRIVER.search(hint), hint
    assert [name for name, plan in plans.items() if accelerator_of(plan)] == ["embed"]
    embed_options = plans["embed"].options
    assert (embed_options.device, embed_options.compute_dtype, embed_options.dtype) == (
        "cuda",
        "float16",
        "float32",
    )


def test_dataflow_example_worker_counts_match_its_comments(deploy_env, tmp_path) -> None:
    _, options, plans = example_plans(deploy_env, tmp_path)
    workers = options.view_as(WorkerOptions).max_num_workers
    comments = [line for line in EXAMPLE.read_text().splitlines() if "#" in line]
    stated = [int(n) for line in comments for n in re.findall(r"(\d+) (?:Dataflow )?workers", line)]
    assert stated and set(stated) == {workers}
    # "the 16 index shards ... filled in parallel"
    assert plans["index"].options.shards == workers


@pytest.mark.parametrize(
    "path", [DEPLOY / "dataflow" / "embed-gpu.yaml", DEPLOY / "dataflow" / "submit.sh"]
)
def test_gpu_deploy_files_pin_the_driver(path: Path) -> None:
    drivers = re.findall(r"install-nvidia-driver[^;\"\s]*", path.read_text())
    assert drivers and all(PINNED_DRIVER.search(d) for d in drivers), drivers


def test_the_accelerator_hint_reaches_the_embed_transforms_only(tmp_path, tiny_st_dir) -> None:
    """sbert embed --accelerator: the Embed step's transforms carry Beam's accelerator hint in
    the pipeline proto (what Dataflow reads); reading and writing do not. Runs locally, where
    the hint is ignored."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one text\nanother text\n")
    hint = "type:nvidia-l4;count:1;machine_type:g2-standard-8;install-nvidia-driver:5xx"
    pipeline = beam.testing.test_pipeline.TestPipeline(
        runner="FnApiRunner", is_integration_test=False, blocking=True
    )
    argv = ["--input", str(corpus), "--output", str(tmp_path / "out"), "--model", str(tiny_st_dir)]
    summary = embed([*argv, "--accelerator", hint], test_pipeline=pipeline)
    assert summary.embedded == 2
    proto = pipeline.to_runner_api()
    hinted = set()
    for transform in proto.components.transforms.values():
        hints = (
            proto.components.environments[transform.environment_id].resource_hints
            if transform.environment_id
            else {}
        )
        if any(hint.encode() == value for value in hints.values()):
            hinted.add(transform.unique_name.split("/")[0])
    assert hinted == {"Embed"}
