"""A first look at the GPU machine: versions and the APIs kernelab relies on.

Run once per new image (PYTHONPATH=src python3 benchmarks/probe_device.py); it changes nothing.
"""

import importlib
import json
import os
import subprocess
import sys


def version(name):
    try:
        return importlib.metadata.version(name)
    except Exception as exc:  # noqa: BLE001 - a probe reports whatever went wrong
        return f"missing ({exc.__class__.__name__})"


import importlib.metadata  # noqa: E402

report = {
    n: version(n)
    for n in (
        "torch",
        "triton",
        "typer",
        "click",
        "rich",
        "cuda-core",
        "cuda-bindings",
        "nvidia-ml-py",
        "numpy",
        "matplotlib",
        "pytest",
        "setuptools",
    )
}
import torch  # noqa: E402

p = torch.cuda.get_device_properties(0)
report["device"] = {
    "name": p.name,
    "sms": p.multi_processor_count,
    "mem": p.total_memory,
    "l2": getattr(p, "L2_cache_size", None),
    "cc": f"{p.major}.{p.minor}",
}
import triton.language as tl  # noqa: E402

report["triton_has"] = {
    a: hasattr(tl, a)
    for a in ("make_tensor_descriptor", "range", "_experimental_make_tensor_descriptor")
}
try:
    import triton.tools.tensor_descriptor as td  # noqa: F401

    report["triton_host_descriptor"] = True
except Exception:
    report["triton_host_descriptor"] = False
import cuda.core as cc  # noqa: E402

report["cuda_core_names"] = sorted(n for n in dir(cc) if not n.startswith("_"))
try:
    import cuda.core._module as m
    from cuda.core import Kernel  # noqa: F401

    report["kernel_attrs"] = [n for n in dir(m.KernelAttributes) if not n.startswith("_")]
except Exception as exc:
    report["kernel_attrs"] = repr(exc)
sys.path.append("/opt/nvidia/nsight-compute/2025.3.1/extras/python")
try:
    import ncu_report  # noqa: F401

    report["ncu_report"] = "ok"
except Exception as exc:
    report["ncu_report"] = repr(exc)
report["ncu"] = subprocess.run(
    ["bash", "-lc", "which ncu; ncu --version | tail -1"], capture_output=True, text=True
).stdout
report["nvcc"] = subprocess.run(
    ["bash", "-lc", "which nvcc; nvcc --version | tail -1"], capture_output=True, text=True
).stdout
report["smi"] = subprocess.run(
    [
        "nvidia-smi",
        "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit",
        "--format=csv",
    ],
    capture_output=True,
    text=True,
).stdout
print(json.dumps(report, indent=1))
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "probe.json"), "w") as f:
        json.dump(report, f, indent=1)
