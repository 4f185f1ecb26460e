"""Running a SASS probe script (tests/ops/*/..._probe.py: compiles kernels for sm_90 on the
CPU and prints each form's main loop, runtime.cuda.sass.loop_report) from a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_probe(probe: Path, forms: dict, timeout: int) -> dict:
    """{form: (its main loop's opcode counts, its local-memory instructions)}; the probe runs
    in a process without TRITON_INTERPRET, so Triton compiles for the GPU target."""
    from kernelab.runtime.cuda.sass import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump (the Triton wheel carries it)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    probe_run = subprocess.run([sys.executable, str(probe), json.dumps(forms)],
                               capture_output=True, text=True, env=env, timeout=timeout)  # fmt: skip
    assert probe_run.returncode == 0, probe_run.stderr[-2000:]
    found = json.loads(probe_run.stdout.strip().splitlines()[-1])
    return {name: (Counter(form["loop"]), form["local"]) for name, form in found.items()}


def total(loop: Counter, *prefixes: str) -> int:
    """Instructions of `loop` whose opcode starts with one of `prefixes`."""
    return sum(n for op, n in loop.items() if op.startswith(prefixes))
