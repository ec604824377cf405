"""Architecture rules from DESIGN.md that the code must keep."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sbert_core_never_imports_beam():
    modules = sorted(p.stem for p in (ROOT / "sbert_core").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('sbert_core.' + name)\n"
        "assert 'apache_beam' not in sys.modules, 'sbert_core pulled in apache_beam'\n"
        "print(len(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 8


def test_source_files_are_lint_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
