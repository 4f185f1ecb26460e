"""On the GPU: a streaming kernel profiled with kernelab's metrics (lts__t_bytes among them)
shows L2 traffic about its DRAM traffic, so the diagnosis names DRAM, never tiles from L2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kernelab.profiling import diagnose as d


@pytest.mark.gpu
def test_a_profiled_vector_add_is_diagnosed_as_streaming(tmp_path):
    if shutil.which("ncu") is None and not os.environ.get("KERNELAB_NCU"):
        pytest.fail("ncu is not on PATH: add /usr/local/cuda/bin (Nsight Compute) to PATH")
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "profile", "torch.add", "--n", str(1 << 26)]
        + ["--dtype", "bf16", "--out", str(tmp_path / "add.ncu-rep"), "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kernel = max(json.loads(done.stdout)["kernels"], key=lambda k: k["duration_ns"] or 0)
    ratio = next(e for e in kernel["evidence"] if e["metric"] == "l2_bytes_over_dram_bytes")
    assert "measured" in ratio["meaning"]  # lts__t_bytes was collected
    assert ratio["value"] < d.L2_REUSE_RATIO, kernel["diagnosis"]
    assert kernel["bottleneck"] == "memory" and kernel["unit"] in ("DRAM", "L2 fabric")
    assert d.MEMORY_ADVICE["L2"] not in kernel["advice"]
