"""What `pip install -e ".[dev]"` brings: every optional module a CPU test imports, so no
test skips on a developer machine or in CI for want of a package (issue 32: pyyaml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Import name -> distribution name, where they differ.
DISTRIBUTIONS = {"yaml": "pyyaml", "importlinter": "import-linter"}
# Installed with the project itself (its dependencies) or with Python, not by the dev extra.
BASE = {"torch", "numpy", "typer", "rich", "matplotlib", "tomllib"}  # tomllib: the stdlib


def _dev_extra() -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["dev"]
    return {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower() for spec in extra}


def test_every_module_a_test_skips_without_is_in_the_dev_extra():
    skipped_without = set()
    for test in (ROOT / "tests").rglob("test_*.py"):
        skipped_without |= set(re.findall(r'importorskip\("([\w.]+)"', test.read_text()))
    needed = {DISTRIBUTIONS.get(name.split(".")[0], name.split(".")[0]) for name in skipped_without}
    assert "pyyaml" in needed  # the cross-check of task.yml reading
    assert needed - BASE - _dev_extra() == set()
