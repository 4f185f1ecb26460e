"""The quick test subset (`pytest -m "not slow"`, issue 32) leaves out exactly what
conftest.SLOW names, and every entry there still names a module or test that exists."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import SLOW, is_slow

TESTS = Path(__file__).resolve().parent


def test_is_slow_matches_modules_tests_and_parameters():
    assert is_slow("tests/ladders/sgemm/test_sgemm_ladder.py::test_anything[sgemm:03]")
    assert is_slow("tests/lab/test_lab.py::test_cpu_lab_quick_writes_a_report_with_every_section")
    assert not is_slow("tests/lab/test_lab.py::test_exit_check_reads_a_results_folder")
    assert not is_slow("tests/commands/test_compare.py::test_compare_json")
    assert not is_slow("tests/test_sgemm_ladder_other.py::test_x")


def test_every_slow_entry_names_something_that_exists():
    for entry in SLOW:
        module, _, name = entry.partition("::")
        [path] = TESTS.rglob(module)  # a missing module fails here, and so does a name twice
        source = path.read_text()
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", source, re.M), entry


def test_the_quick_subset_deselects_the_slow_ones():
    """`-m "not slow"` on test_lab.py collects all of it but the CPU lab run."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
         str(TESTS / "lab" / "test_lab.py")],
        capture_output=True, text=True, cwd=TESTS.parent,
    )  # fmt: skip
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected, done.stdout + done.stderr
    assert all("test_lab.py::" in line for line in collected)
    assert not any("test_cpu_lab_quick" in line for line in collected)
    assert "1 deselected" in done.stdout
