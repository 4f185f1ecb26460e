"""The m = 1 launches of the late-summed quantized GEMVs (late.py), as data (launches.json).

Each entry: "kind" ("int8", "fp8" or "int4"), "m" (the batch bucket: 1, the one
these forms serve), "n" and "k" (an exact weight shape, or null for every shape), "launch"
(BLOCK_N, BLOCK_K in weights, X_AS_TILE, num_warps, num_stages, and "split": a K split count
or "heuristic", ops/gemv's fill-the-GPU rule), "status" ("measured", or "derived, not
measured" for a choice from register and load-width arithmetic), and for a measured entry
"figure" and "record" (its file under benchmarks/results/). An exact-shape entry wins over
the general one. sweep.py lists the candidates a GPU run times to fill it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from kernelab.errors import KernelabError

TABLE_PATH = Path(__file__).with_name("launches.json")
KINDS = ("int8", "fp8", "int4")
MEASURED = "measured"
LAUNCH_KEYS = ("BLOCK_N", "BLOCK_K", "X_AS_TILE", "num_warps", "num_stages", "split")


def _power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
        value & (value - 1)) == 0  # fmt: skip


def check_launch(launch: dict, where: str = "launch") -> dict:
    """`launch` when it is a form the late kernels take; else a one-line KernelabError."""
    missing = [key for key in LAUNCH_KEYS if key not in launch]
    if missing:
        raise KernelabError(f"{where} lacks {', '.join(missing)}")
    for key in ("BLOCK_N", "BLOCK_K", "num_warps"):
        if not _power_of_two(launch[key]):
            raise KernelabError(f"{where}: {key} must be a power of two, got {launch[key]!r}")
    if not isinstance(launch["num_stages"], int) or not 1 <= launch["num_stages"] <= 8:
        raise KernelabError(f"{where}: num_stages must be 1 to 8, got {launch['num_stages']!r}")
    if not isinstance(launch["X_AS_TILE"], bool):
        raise KernelabError(f"{where}: X_AS_TILE must be true or false")
    split = launch["split"]
    if split != "heuristic" and not (isinstance(split, int) and split >= 1):
        raise KernelabError(f"{where}: split must be a count >= 1 or 'heuristic', got {split!r}")
    return launch


def check_table(table: dict, where: str = "launches.json") -> dict:
    """The table when every entry is well formed and no two entries claim one key."""
    entries = table.get("entries") if isinstance(table, dict) else None
    if not isinstance(entries, list):
        raise KernelabError(f"{where} holds no list of entries")
    seen = set()
    for i, entry in enumerate(entries):
        what = f"{where} entry {i}"
        for key in ("kind", "m", "launch", "status"):
            if key not in entry:
                raise KernelabError(f"{what} lacks {key}")
        if entry["kind"] not in KINDS:
            raise KernelabError(f"{what}: kind must be one of {', '.join(KINDS)}")
        key = (entry["kind"], entry["m"], entry.get("n"), entry.get("k"))
        if key in seen:
            raise KernelabError(f"{what} repeats kind, m, n, k = {key}")
        seen.add(key)
        if (entry.get("n") is None) != (entry.get("k") is None):
            raise KernelabError(f"{what}: n and k are both a shape or both null")
        check_launch(entry["launch"], what)
        if entry["status"] == MEASURED and not entry.get("record"):
            raise KernelabError(f"{what} is measured but names no record")
    return table


@functools.cache
def _load(path: str) -> dict:
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KernelabError(f"cannot read the launch table {path}: {exc}") from None
    return check_table(table, Path(path).name)


def load_table(path: str | Path | None = None) -> dict:
    """The table at `path` (default: launches.json beside this file), checked, read once."""
    return _load(str(path or TABLE_PATH))


def lookup(kind: str, m: int, n: int, k: int, table: dict | None = None) -> dict | None:
    """The launch for one call: the smallest bucket >= m of the kind, its exact (n, k) entry
    if it has one, else its general one; None when the table has neither."""
    table = table if table is not None else load_table()
    mine = [e for e in table["entries"] if e["kind"] == kind and e["m"] >= m]
    if not mine:
        return None
    bucket = min(e["m"] for e in mine)
    exact = [e for e in mine if e["m"] == bucket and (e.get("n"), e.get("k")) == (n, k)]
    general = [e for e in mine if e["m"] == bucket and e.get("n") is None]
    found = (exact or general or [None])[0]
    return dict(found["launch"]) if found else None
