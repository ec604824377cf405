"""What is installed claims no generic top-level name.

The repository's folders ``pipelines/`` and ``jobs/`` are installed as ``sbert_pipeline`` and
``sbert_pipeline.jobs``: PyPI has an unrelated ``pipelines`` distribution, and many ML
repositories have their own ``pipelines/`` or ``jobs/`` folder, which Python finds first from
that repository's working directory. Each test puts both kinds of impostor in the way (an
installed ``pipelines`` and ``jobs`` on ``PYTHONPATH``, and the working directory's own
folders) and runs a stage through the Python API and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPOSTOR = "raise ImportError('the wrong {name}: not sbert-pipeline')\n"


def _with_impostors(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory with its own ``pipelines/`` and ``jobs/``, an environment whose
    path has another installed ``pipelines`` and ``jobs``, and a small corpus."""
    site, work = tmp_path / "site-packages", tmp_path / "repo"
    for folder in (site, work):
        for name in ("pipelines", "jobs"):
            (folder / name).mkdir(parents=True)
            (folder / name / "__init__.py").write_text(IMPOSTOR.format(name=name))
    texts = ["a cat sat on the mat", "the dog ran home", "rain falls in spring"]
    lines = [json.dumps({"id": f"q{i}", "text": text}) for i, text in enumerate(texts)]
    (work / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    return work, env


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_impostors_are_found_first(tmp_path):
    """Without the unique name, ``import pipelines`` would get the other package: the tests
    below would prove nothing if it did not."""
    work, env = _with_impostors(tmp_path)
    done = _run([sys.executable, "-c", "import pipelines"], work, env)
    assert done.returncode != 0 and "the wrong pipelines" in done.stderr
    done = _run([sys.executable, "-c", "import jobs"], work, env)
    assert done.returncode != 0 and "the wrong jobs" in done.stderr


def test_the_python_api_runs_a_stage_beside_other_pipelines_and_jobs(tmp_path, tiny_st_dir):
    work, env = _with_impostors(tmp_path)
    code = (
        "from sbert_pipeline import embed\n"
        f"result = embed.run(embed.Options(input='corpus.jsonl', output='emb', id_field='id', "
        f"model={str(tiny_st_dir)!r}))\n"
        "import sys\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pipelines', 'jobs')))\n"
    )
    done = _run([sys.executable, "-c", code], work, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    counts = json.loads((work / "emb" / "_manifest.json").read_text())["counts"]
    assert (counts["read"], counts["embedded"], counts["rejected"]) == (3, 3, 0)


def test_the_cli_runs_a_stage_beside_other_pipelines_and_jobs(tmp_path, tiny_st_dir):
    work, env = _with_impostors(tmp_path)
    sbert = Path(sys.executable).parent / "sbert"
    command = [str(sbert), "embed", "--input", "corpus.jsonl", "--output", "emb"]
    done = _run([*command, "--id-field", "id", "--model", str(tiny_st_dir)], work, env)
    assert done.returncode == 0, done.stderr
    counts = json.loads((work / "emb" / "_manifest.json").read_text())["counts"]
    assert (counts["read"], counts["embedded"], counts["rejected"]) == (3, 3, 0)
    done = _run([sys.executable, "-m", "sbert_pipeline.jobs.cli", "--version"], work, env)
    assert done.returncode == 0, done.stderr


def test_the_wheel_installs_only_sbert_pipeline_and_sbert_core(tmp_path):
    # Built from a copy: an in-tree build would leave build/ and egg-info in the checkout.
    source = tmp_path / "source"
    for name in ("pipelines", "jobs", "sbert_core"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("sbert_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"sbert_pipeline", "sbert_core"}
    assert "sbert_pipeline/jobs/cli.py" in names and "sbert_pipeline/dedup/stage.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "sbert = sbert_pipeline.jobs.cli:main" in scripts
