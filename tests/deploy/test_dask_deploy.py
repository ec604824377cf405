"""deploy/dask/ and examples/dask.yaml, checked offline against the real parsers.

No Kubernetes cluster is started: the manifests are parsed, the Dask commands in them are
parsed by Dask's own command-line parsers, and the job configs (the example and the one in the
ConfigMap) are loaded as ``sbert run`` loads them, with their Beam options parsed by Beam's
Dask options.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask.dask_runner import DaskOptions
from sbert_pipeline.jobs.run_config import DEFAULT_STAGES, load_run_config
from sbert_pipeline.jobs.submit import beam_argv

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "dask" / "kubernetes"
README = ROOT / "deploy" / "dask" / "README.md"
EXAMPLE = ROOT / "examples" / "dask.yaml"
IMAGE = "${WORKER_IMAGE}"
SHARED = "/data"


def documents(name: str) -> list[dict]:
    """The resources of one manifest file."""
    return list(yaml.safe_load_all((KUBERNETES / name).read_text(encoding="utf-8")))


def one(name: str, kind: str) -> dict:
    """The single resource of ``kind`` in manifest ``name``."""
    found = [doc for doc in documents(name) if doc["kind"] == kind]
    assert len(found) == 1, (name, kind)
    return found[0]


def cluster() -> dict:
    return one("daskcluster.yaml", "DaskCluster")


def pod_specs() -> dict[str, dict]:
    """Every pod template: the Dask workers and scheduler, and the launcher Job."""
    spec = cluster()["spec"]
    return {
        "worker": spec["worker"]["spec"],
        "scheduler": spec["scheduler"]["spec"],
        "launcher": one("job.yaml", "Job")["spec"]["template"]["spec"],
    }


def job_config(tmp_path: Path):
    """The ConfigMap's job config, loaded as ``sbert run`` loads a file."""
    path = tmp_path / "job.yaml"
    path.write_text(one("job.yaml", "ConfigMap")["data"]["job.yaml"], encoding="utf-8")
    return load_run_config(path)


def dask_options(config) -> DaskOptions:
    """The job's Beam options as Beam's Dask runner reads them (``--dask_client_address`` is
    its ``address``, ``--dask_scheduler_file`` its ``scheduler_file``); nothing Beam would drop."""
    argv = beam_argv({"beam": dict(config.beam)})
    options = PipelineOptions(argv)
    assert set(options.get_all_options(retain_unknown_options=True)) == set(
        options.get_all_options()
    )
    return options.view_as(DaskOptions)


def expand(word: str, pod_name: str) -> str:
    """A container argument as the kubelet gives it: ``$(VAR)`` from the operator's env."""
    return word.replace("$(DASK_WORKER_NAME)", f"{pod_name}-worker-0")


def test_the_files_are_the_resources_the_readme_lists() -> None:
    kinds = {path.name: [d["kind"] for d in documents(path.name)] for path in KUBERNETES.iterdir()}
    assert kinds == {
        "storage.yaml": ["PersistentVolumeClaim"],
        "daskcluster.yaml": ["ConfigMap", "DaskCluster"],
        "job.yaml": ["ConfigMap", "Job"],
    }
    text = README.read_text(encoding="utf-8")
    for name in kinds:
        assert f"kubernetes/{name}" in text or f"{name}  " in text, name
    assert cluster()["apiVersion"] == "kubernetes.dask.org/v1"


def test_workers_read_a_dask_config_without_the_malloc_trim_threshold(tmp_path) -> None:
    """The ConfigMap mounted at /etc/dask unsets Dask's MALLOC_TRIM_THRESHOLD_ for the worker
    processes, as Dask itself reads that folder (checked here through DASK_CONFIG)."""
    config = one("daskcluster.yaml", "ConfigMap")
    (tmp_path / "sbert.yaml").write_text(config["data"]["sbert.yaml"], encoding="utf-8")
    mounts = pod_specs()["worker"]["containers"][0]["volumeMounts"]
    assert {"name": "dask-config", "mountPath": "/etc/dask"} in mounts
    code = (
        "from distributed.nanny import _get_env_variables as e;"
        "print(sorted(e('distributed.nanny.pre-spawn-environ')))"
    )
    env = {**os.environ, "DASK_CONFIG": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    names = out.stdout.strip()
    assert "MALLOC_TRIM_THRESHOLD_" not in names and "OMP_NUM_THREADS" in names


def test_every_container_runs_the_worker_image() -> None:
    for role, spec in pod_specs().items():
        images = [container["image"] for container in spec["containers"]]
        assert images == [IMAGE], role
    # The one variable the manifests read, so `envsubst '$WORKER_IMAGE'` fills all of them.
    text = "".join(path.read_text(encoding="utf-8") for path in KUBERNETES.iterdir())
    assert set(re.findall(r"\$\{(\w+)\}", text)) == {"WORKER_IMAGE"}
    assert "envsubst '$WORKER_IMAGE'" in README.read_text(encoding="utf-8")


def test_dask_commands_parse_with_dask_own_parsers() -> None:
    from distributed.cli.dask_scheduler import main as scheduler_main
    from distributed.cli.dask_worker import main as worker_main

    specs = pod_specs()
    worker = specs["worker"]["containers"][0]
    scheduler = specs["scheduler"]["containers"][0]
    # The image's entry point is Beam's boot: each container must name its own command.
    assert worker["command"] == ["dask", "worker"]
    assert scheduler["command"] == ["dask", "scheduler"]
    args = [expand(word, "sbert") for word in worker["args"]]
    params = worker_main.make_context("dask worker", args).params
    assert params["nthreads"] == 1  # one Dask thread per worker process: one model, one core
    assert params["name"] == "sbert-worker-0"
    assert scheduler_main.make_context("dask scheduler", scheduler.get("args", [])).params
    # One core per worker process, as its single thread uses.
    assert worker["resources"]["limits"]["cpu"] == "1"


def test_the_scheduler_service_is_what_the_job_connects_to(tmp_path: Path) -> None:
    name = cluster()["metadata"]["name"]
    scheduler = cluster()["spec"]["scheduler"]
    service = scheduler["service"]
    assert service["selector"] == {
        "dask.org/cluster-name": name,
        "dask.org/component": "scheduler",
    }
    ports = {port["name"]: port for port in service["ports"]}
    container_ports = {
        p["name"]: p["containerPort"] for p in scheduler["spec"]["containers"][0]["ports"]
    }
    assert ports["tcp-comm"]["targetPort"] == "tcp-comm"
    assert container_ports["tcp-comm"] == 8786  # the scheduler's default port
    # The operator names the scheduler's service <cluster>-scheduler.
    address = dask_options(job_config(tmp_path)).address
    assert address == f"tcp://{name}-scheduler:{ports['tcp-comm']['port']}"


def test_every_pod_that_reads_or_writes_the_job_mounts_the_shared_volume(tmp_path) -> None:
    claim = one("storage.yaml", "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for role in ("worker", "launcher"):
        spec = pod_specs()[role]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        data = volumes[mounts[SHARED]]
        assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], role
    config = job_config(tmp_path)
    assert config.job_dir.startswith(SHARED + "/")
    assert config.input.path.startswith(SHARED + "/")


def test_the_launcher_runs_the_configmap_job(tmp_path: Path) -> None:
    launcher = pod_specs()["launcher"]
    container = launcher["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in launcher["volumes"]}
    config_map = one("job.yaml", "ConfigMap")["metadata"]["name"]
    assert volumes["job-config"]["configMap"]["name"] == config_map
    assert container["command"] == ["sbert", "run", f"{mounts['job-config']}/job.yaml"]
    assert launcher["restartPolicy"] == "Never"
    config = job_config(tmp_path)
    assert config.runner == "dask"
    assert config.ordered_stages() == list(DEFAULT_STAGES)
    # As many index shards as worker processes fill them.
    assert config.sections["index"]["shards"] == cluster()["spec"]["worker"]["replicas"]


def test_the_example_names_a_local_cluster_and_one_thread_per_worker() -> None:
    config = load_run_config(EXAMPLE)
    assert config.runner == "dask"
    assert config.ordered_stages() == list(DEFAULT_STAGES)
    assert re.fullmatch(r"local\[(\d+)\]", dask_options(config).address)
    assert config.sections["embed"]["threads"] == 1


def test_the_example_takes_a_scheduler_file_instead(tmp_path: Path) -> None:
    overrides = ["beam.dask_client_address=null", "beam.dask_scheduler_file=/shared/s.json"]
    options = dask_options(load_run_config(EXAMPLE, overrides))
    assert (options.address, options.scheduler_file) == (None, "/shared/s.json")


@pytest.mark.parametrize("page", [README, EXAMPLE], ids=lambda p: p.name)
def test_documented_sbert_run_commands_load(page: Path, monkeypatch) -> None:
    """Every `sbert run examples/dask.yaml --set ...` shown loads with its overrides, names one
    cluster, and points a remote cluster's workers at paths they can reach."""
    monkeypatch.chdir(ROOT)
    # The example shows them in comments: drop the comment marks, join continued lines.
    lines = [re.sub(r"^#\s*", "", line) for line in page.read_text(encoding="utf-8").splitlines()]
    text = "\n".join(lines).replace("\\\n", " ")
    commands = [
        line for line in text.splitlines() if line.startswith("sbert run examples/dask.yaml")
    ]
    assert commands
    for command in commands:
        words = shlex.split(command, comments=True)
        overrides = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
        config = load_run_config(ROOT / words[2], overrides)
        options = dask_options(config)
        assert bool(options.address) != bool(options.scheduler_file), command
        if not re.fullmatch(r"local\[\d+\]", options.address or ""):
            # Another machine's workers: the job's paths must mean the same file there.
            for path in (config.job_dir, config.input.path):
                assert path.startswith(("/", "s3://", "gs://", "hdfs://")), command
