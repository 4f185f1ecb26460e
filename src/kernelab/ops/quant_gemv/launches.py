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

from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.runtime import launch_tables
from kernelab.runtime.launch_tables import MEASURED as MEASURED  # the status, as callers read it
from kernelab.runtime.launch_tables import power_of_two

TABLE_PATH = Path(__file__).with_name("launches.json")
KINDS = ("int8", "fp8", "int4")
LAUNCH_KEYS = ("BLOCK_N", "BLOCK_K", "X_AS_TILE", "num_warps", "num_stages", "split")


def check_launch(launch: dict, where: str = "launch") -> dict:
    """`launch` when it is a form the late kernels take; else a one-line KernelabError."""
    missing = [key for key in LAUNCH_KEYS if key not in launch]
    if missing:
        raise KernelabError(f"{where} lacks {', '.join(missing)}")
    for key in ("BLOCK_N", "BLOCK_K", "num_warps"):
        if not power_of_two(launch[key]):
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
    return launch_tables.check_table(table, where, key="kind", check_launch=check_launch,
                                     allowed=KINDS)  # fmt: skip


def load_table(path: str | Path | None = None) -> dict:
    """The table at `path` (default: launches.json beside this file), checked, read once."""
    return launch_tables.load_table(str(path or TABLE_PATH), check_table, "launch table")


def lookup(kind: str, m: int, n: int, k: int, table: dict | None = None) -> dict | None:
    """The launch for one call: the smallest bucket >= m of the kind, its exact (n, k) entry
    if it has one, else its general one; None when the table has neither."""
    table = table if table is not None else load_table()
    found = launch_tables.lookup([e for e in table["entries"] if e["kind"] == kind], m, n, k)
    return dict(found["launch"]) if found else None
