"""Which tile configuration a tunable step runs with on this GPU (the timing that finds it is
ladder.tune).

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

from kernelab.ladders.sgemm.steps import Step
from kernelab.runtime.cuda.build import cache_dir

COMMITTED = {"h200": Path(__file__).with_name("tuned_h200.json")}
H200_SMS = 132


def shape_class(m: int, n: int, k: int, sm_count: int = H200_SMS) -> str:
    """ "small" when a 128x128 tiling gives fewer blocks than the GPU has SMs: there,
    smaller tiles that fill the SMs beat bigger tiles that reuse more; else "large".

    The line is one wave, not two: 2048^3 (256 tiles, under two waves on an H200) runs faster
    with the large tiles (step 12's 64x64 tile, tuned at 1024^3, reaches about 26 TFLOP/s
    there against about 45 for its large tiles at 4096^3)."""
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


REFERENCE_GPU = "h200"  # the GPU whose committed winners the ladder's figures describe


def reference_defines(step: Step) -> dict:
    """The one tile configuration that describes a step wherever no GPU picks one: what its
    H200 records ran at large shapes (the committed winner), else its default. The compile
    report, the registry's tile metadata (the tile lens) and the lab's report all read it."""
    if not step.tunable:
        return {}
    return committed_winner(step, REFERENCE_GPU) or step.default_defines


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


def store_winner(step: Step, m: int, n: int, k: int, defines: dict, ms: float) -> tuple[str, str]:
    """Keep `defines` as this GPU's winner for `step` in the shape class of m x n x k (the
    user's tuning file); returns (shape class, GPU id). Later lookups in this process see it."""
    gpu, sms = _gpu()
    cls = shape_class(m, n, k, sms)
    path = _user_file(gpu)
    data = {"gpu": gpu, "winners": _read(path)}
    data["winners"].setdefault(f"{step.number:02d}", {})[cls] = {
        "defines": defines,
        "shape": [m, n, k],
        "ms": ms,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    _chosen.clear()
    return cls, gpu
