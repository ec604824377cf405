"""Architecture rules from docs/architecture.md (section 2, "Import rules") that the code must keep.

The import rules read the source with ``ast``: every import statement counts, at module level,
inside functions and under ``if TYPE_CHECKING:``. Two rules (sbert_core and sbert_pipeline.vectors
load without Beam) are also checked at run time, in a fresh interpreter.

Rules (each test names the one it checks):

- R0 imports are absolute (no ``from . import``) in sbert_core, pipelines and jobs.
- R1 sbert_core imports no apache_beam, pipelines or jobs.
- R2 pipelines never imports jobs.
- R3 pipelines/ holds only ``__init__.py`` and exactly the packages in :data:`PACKAGES`.
- R4 sbert_pipeline.vectors imports no other pipelines package and no apache_beam;
  sbert_pipeline.grouping (the grouping library below the stages) imports only itself,
  sbert_pipeline.vectors and sbert_core, and no apache_beam.
- R5 sbert_pipeline.io imports only sbert_pipeline.io/vectors, and of Beam only its FileSystems.
- R6 a stage package imports only sbert_pipeline.io, sbert_pipeline.vectors,
  sbert_pipeline.grouping, sbert_pipeline.stage_api and itself, plus the other stages
  :data:`STAGE_READS` names with the reason; sbert_pipeline.stage_api imports only
  sbert_pipeline.io, sbert_pipeline.vectors and itself.
- R6b sbert_pipeline.in_memory (``deduplicate()``, above the stages like jobs) imports only the
  stage packages, sbert_pipeline.stage_api, sbert_pipeline.io and itself.
- R7 no import cycle among the sbert_core (its subpackages too), pipelines and jobs
  modules.
- R8 no module outside tests is over :data:`MAX_LINES` lines, but those in :data:`OVERSIZED`.
- R9 a module whose docstring says it is Beam-free imports nothing of ``apache_beam``.
- R10 sbert_core holds only its shared leaf modules and its subpackages, by concept.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("sbert_core", "pipelines", "jobs")  # the folders; installed as IMPORT_NAMES says
# The folder each layer lives in -> the name it is imported by: pipelines/ is installed as the
# package sbert_pipeline and jobs/ as sbert_pipeline.jobs (no generic top-level name).
IMPORT_NAMES = {
    "sbert_core": "sbert_core",
    "pipelines": "sbert_pipeline",
    "jobs": "sbert_pipeline.jobs",
}
STAGES = {"embed", "index", "cluster", "pairs", "verify", "dedup", "search", "finetune"}
PACKAGES = {"io", "vectors", "grouping", "stage_api", "in_memory", *STAGES}
# The few stages that use another stage's code, with the reason. Any other import between
# stage packages fails R6.
STAGE_READS: dict[str, dict[str, str]] = {
    "search": {"index": "it searches the index/ folder, through the index stage's reader"},
}
FILESYSTEMS = {"apache_beam.io.filesystems", "apache_beam.io.filesystem"}
MAX_LINES = 500
# Modules allowed over MAX_LINES, with the reason. A module listed here that is back under the
# limit fails the test, so the list cannot go stale.
OVERSIZED: dict[str, str] = {}
# Folders that hold no project source: tests (exempt from R8), build output, environments.
_NOT_SOURCE = {"tests", "build", "dist", "node_modules", "__pycache__"}


def _modules(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    """The name ``path`` is imported by."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = (IMPORT_NAMES[parts[0]], *parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str | None:
    """The layer (folder) an imported module belongs to, or None outside the project."""
    if module == "sbert_pipeline.jobs" or module.startswith("sbert_pipeline.jobs."):
        return "jobs"
    top = module.split(".")[0]
    return {"sbert_core": "sbert_core", "sbert_pipeline": "pipelines"}.get(top)


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import statement in the file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.append((module, node.level))
            # ``from sbert_pipeline import vectors`` imports the package sbert_pipeline.vectors;
            # counting ``from sbert_pipeline.vectors import kmeans`` as
            # sbert_pipeline.vectors.kmeans too costs nothing (a name that is no module never
            # matches one).
            if _layer(module):
                found += [(f"{module}.{alias.name}", node.level) for alias in node.names]
    return found


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _package(path: Path) -> str | None:
    """The pipelines package a module belongs to (None at the top of pipelines/)."""
    parts = path.relative_to(ROOT / "pipelines").parts
    return parts[0] if len(parts) > 1 else None


def _inner(module: str) -> str | None:
    """The pipelines package an imported module is in, or None outside pipelines."""
    _, _, rest = module.partition(".")
    return rest.split(".")[0] if _layer(module) == "pipelines" and rest else None


def _run_alone(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_r0_imports_are_absolute():
    relative = [
        f"{_where(path)}: from {'.' * level}{module} import ..."
        for folder in LAYERS
        for path in _modules(folder)
        for module, level in _imports(path)
        if level
    ]
    assert relative == []


def test_r1_sbert_core_imports_no_beam_pipelines_or_jobs():
    wrong = [
        f"{_where(path)} imports {module}"
        for path in _modules("sbert_core")
        for module, _ in _imports(path)
        if module.split(".")[0] == "apache_beam" or _layer(module) in ("pipelines", "jobs")
    ]
    assert wrong == []


def test_r1_sbert_core_loads_without_beam():
    modules = [_name(p) for p in _modules("sbert_core")]
    result = _run_alone(
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('apache_beam', 'sbert_pipeline', 'pipelines', 'jobs'))\n"
        "assert not loaded, f'sbert_core pulled in {loaded[:5]}'\n"
    )
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 8


def test_r2_pipelines_never_imports_jobs():
    wrong = [
        f"{_where(path)} imports {module}"
        for path in _modules("pipelines")
        for module, _ in _imports(path)
        if _layer(module) == "jobs"
    ]
    assert wrong == []


def test_r3_pipelines_holds_exactly_the_documented_packages():
    entries = {p.name for p in (ROOT / "pipelines").iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", *PACKAGES}, "put the module in one of the packages"
    packages = {p.name for p in (ROOT / "pipelines").iterdir() if (p / "__init__.py").is_file()}
    assert packages == PACKAGES


def _violations(package: str, allowed: set[str | None], beam) -> list[str]:
    """Imports of ``pipelines.<package>`` modules that leave ``allowed`` packages or Beam."""
    wrong = []
    for path in _modules(f"pipelines/{package}"):
        for module, _ in _imports(path):
            if module.split(".")[0] == "apache_beam" and not beam(module):
                wrong.append(f"{_where(path)} imports {module}")
            elif _layer(module) == "pipelines" and _inner(module) not in allowed:
                wrong.append(f"{_where(path)} ({package}) imports {module}")
    return wrong


def test_r4_vectors_imports_only_vectors_and_no_beam():
    assert _violations("vectors", {None, "vectors"}, beam=lambda module: False) == []


def test_r4_vectors_loads_without_beam():
    modules = [_name(p) for p in _modules("pipelines/vectors")]
    result = _run_alone(
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "assert 'apache_beam' not in sys.modules, 'sbert_pipeline.vectors pulled in apache_beam'\n"
    )
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 8


def test_r4_grouping_imports_only_grouping_vectors_and_no_beam():
    assert _violations("grouping", {None, "grouping", "vectors"}, beam=lambda module: False) == []


def test_r4_grouping_loads_without_beam_or_a_stage():
    modules = [_name(p) for p in _modules("pipelines/grouping")]
    result = _run_alone(
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "assert 'apache_beam' not in sys.modules, 'sbert_pipeline.grouping pulled in apache_beam'\n"
        f"stages = {sorted(STAGES)!r}\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'sbert_pipeline'\n"
        "          and m.split('.')[1:2] and m.split('.')[1] in stages]\n"
        "assert not loaded, f'sbert_pipeline.grouping pulled in {loaded[:3]}'\n"
    )
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 8


def test_r5_io_imports_only_io_vectors_and_beam_filesystems():
    assert _violations("io", {None, "io", "vectors"}, beam=FILESYSTEMS.__contains__) == []


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_r6_a_stage_imports_only_io_vectors_stage_api_and_itself(stage):
    allowed = {None, "io", "vectors", "grouping", "stage_api", stage, *STAGE_READS.get(stage, {})}
    assert _violations(stage, allowed, beam=lambda module: True) == []


def test_r6b_in_memory_imports_only_stages_stage_api_io_and_itself():
    allowed = {None, "io", "stage_api", "in_memory", *STAGES}
    assert _violations("in_memory", allowed, beam=lambda module: True) == []


def test_r6_stage_api_imports_only_io_vectors_and_itself():
    allowed = {None, "io", "vectors", "stage_api"}
    assert _violations("stage_api", allowed, beam=lambda module: True) == []


@pytest.mark.parametrize("layer", LAYERS)
def test_r9_a_module_that_says_beam_free_imports_no_beam(layer):
    said = [
        p
        for p in _modules(layer)
        if "Beam-free" in (ast.get_docstring(ast.parse(p.read_text())) or "")
    ]
    wrong = [
        _where(p) for p in said if any(m.split(".")[0] == "apache_beam" for m, _ in _imports(p))
    ]
    assert wrong == []


def test_r7_no_import_cycles():
    names = {_name(p): p for folder in LAYERS for p in _modules(folder)}
    edges = {
        name: sorted({m for m, _ in _imports(path) if m in names and m != name})
        for name, path in names.items()
    }
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for other in edges[name]:
            if state.get(other) == 1:
                cycles.append(" -> ".join([*trail[trail.index(other) :], other]))
            elif other not in state:
                visit(other, [*trail, other])
        state[name] = 2

    for name in sorted(names):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def _source_files() -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not any(
            part.startswith(".") or part in _NOT_SOURCE or part.endswith(".egg-info")
            for part in p.relative_to(ROOT).parts[:-1]
        )
    )


def test_r8_no_module_outside_tests_is_oversized():
    sizes = {_where(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _source_files()}
    assert "pipelines/vectors/kmeans.py" in sizes and not any(s.startswith("tests/") for s in sizes)
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    unlisted = {path: lines for path, lines in over.items() if path not in OVERSIZED}
    assert unlisted == {}, "split them, or name them in OVERSIZED with the reason"
    stale = sorted(set(OVERSIZED) - set(over))
    assert stale == [], "back under the limit (or gone): drop them from OVERSIZED"


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "."], capture_output=True, text=True, cwd=ROOT
    )


def test_source_files_are_lint_clean():
    result = _ruff("check", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_source_files_and_readme_snippets_are_formatted():
    result = _ruff("format", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_r10_sbert_core_holds_only_shared_leaves_and_its_subpackages():
    leaves = {"__init__.py", "errors.py", "version.py", "config.py", "tabular.py", "graph.py"}
    packages = {"model", "inference", "training", "evaluation"}
    entries = {p.name for p in (ROOT / "sbert_core").iterdir() if p.name != "__pycache__"}
    assert entries == leaves | packages, "put the module in the subpackage of its concept"
    for package in packages:
        init = ROOT / "sbert_core" / package / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{package}: say what it holds"
    # R7 covers the subpackages: _modules() walks them.
    assert any(_name(p).count(".") == 2 for p in _modules("sbert_core"))
