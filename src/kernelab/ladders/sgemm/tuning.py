"""Pick a tunable step's tile configuration by timing the candidates on this GPU.

A winner is stored per GPU, per step and per shape class, in the user's cache
($KERNELAB_CACHE/tuning/<gpu>.json). Lookup order: that cache, then the committed winners
for the GPU next to this file (tuned_h200.json), then the step's first candidate. The
committed file says whether its winners were measured; until they are, it holds the
defaults and says so.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.ladders.sgemm.steps import Step

COMMITTED = {"h200": Path(__file__).with_name("tuned_h200.json")}
H200_SMS = 132


def shape_class(m: int, n: int, k: int, sm_count: int = H200_SMS) -> str:
    """ "small" when a 128x128 tiling gives fewer blocks than the GPU has SMs: there,
    smaller tiles that fill the SMs beat bigger tiles that reuse more; else "large".

    The line was two waves until the H200 run of 2026-11-29 put 2048^3 (256 tiles) in the
    small class: step 12 then ran its 64x64 tile, tuned at 1024^3, at 26 TFLOP/s where its
    large tiles gave 45 at 4096^3."""
    tiles = -(-m // 128) * -(-n // 128)
    return "small" if tiles < sm_count else "large"


@functools.cache
def _gpu() -> tuple[str, int]:
    """(a file-name-safe id of the current GPU, its SM count)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    slug = re.sub(r"[^a-z0-9]+", "-", props.name.lower()).strip("-")
    return slug, props.multi_processor_count


def _user_file(gpu: str) -> Path:
    from kernelab.runtime.cuda.build import cache_dir

    return cache_dir().parent / "tuning" / f"{gpu}.json"


def _committed_for(gpu: str) -> dict:
    for key, path in COMMITTED.items():
        if key in gpu and path.is_file():
            return json.loads(path.read_text()).get("winners", {})
    return {}


_chosen: dict[tuple[int, str], dict] = {}  # per process; tune() clears it


def winner(step: Step, m: int, n: int, k: int) -> dict:
    """The tile defines to use for `step` at this shape on this GPU."""
    gpu, sms = _gpu()
    cls = shape_class(m, n, k, sms)
    if (step.number, cls) not in _chosen:
        _chosen[(step.number, cls)] = _lookup(step, gpu, cls)
    return dict(_chosen[(step.number, cls)])


def committed_winner(step: Step, gpu_id: str, cls: str = "large") -> dict | None:
    """The committed winner's defines for `step` on the catalog GPU `gpu_id` (e.g. "h200"),
    or None: what that GPU's committed records ran, whatever GPU this process sees."""
    found = _committed_for(gpu_id).get(f"{step.number:02d}", {}).get(cls)
    if not found:
        return None
    return dict(found["defines"] if "defines" in found else found)


def _lookup(step: Step, gpu: str, cls: str) -> dict:
    key = f"{step.number:02d}"
    for source in (_read(_user_file(gpu)), _committed_for(gpu)):
        found = source.get(key, {}).get(cls)
        if found:
            return dict(found["defines"] if "defines" in found else found)
    return step.default_defines


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text()).get("winners", {})
    except (OSError, ValueError):
        return {}


def _with_defines(step: Step, defines: dict, a, b):
    from kernelab.ladders.sgemm import sgemm

    return sgemm(step, a, b, defines=defines)


def tune(step: Step, m: int, n: int, k: int, *, time_ms, candidates=None, check=None) -> dict:
    """Time every candidate of `step` at m x n x k and store the fastest for its shape class.

    `time_ms(fn) -> float` times a zero-argument callable (median, cold L2); `check(f)`,
    given f(a, b) -> a @ b with the candidate's tiles, may reject it (False) before timing. Returns
    {"winner": defines, "results": [{"defines", "ms", "gflops"} ...], "shape_class", "gpu"}.
    """
    import torch

    from kernelab.ladders.sgemm import sgemm

    gpu, sms = _gpu()
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    c = torch.empty(m, n, device="cuda")
    results = []
    for defines in candidates or step.candidates:

        def run(d=defines):
            return sgemm(step, a, b, out=c, defines=d)

        candidate = functools.partial(_with_defines, step, defines)
        if check is not None and not check(candidate):
            results.append({"defines": defines, "ms": None, "gflops": None, "rejected": True})
            continue
        ms = time_ms(run)
        results.append({"defines": defines, "ms": ms, "gflops": 2.0 * m * n * k / ms / 1e6})
    timed = [r for r in results if r["ms"] is not None]
    if not timed:
        raise KernelabError(f"no candidate of {step.name} passed the check")
    best = min(timed, key=lambda r: r["ms"])
    cls = shape_class(m, n, k, sms)
    path = _user_file(gpu)
    data = {"gpu": gpu, "winners": _read(path)}
    data["winners"].setdefault(f"{step.number:02d}", {})[cls] = {
        "defines": best["defines"],
        "shape": [m, n, k],
        "ms": best["ms"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    _chosen.clear()
    return {"winner": best["defines"], "results": results, "shape_class": cls, "gpu": gpu}
