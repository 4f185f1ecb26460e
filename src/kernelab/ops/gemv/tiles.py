"""The decode GEMV's tile table (tiles.json): which launch plan() uses, per itemsize of x and
W, batch bucket and, where one was measured, exact weight shape.

Each entry: "itemsize" (2 for bf16 and fp16, 4 for fp32), "m" (the bucket: it serves the
batches above the next smaller bucket up to m), "n" and "k" (an exact weight shape, or null
for every shape), "launch" (BLOCK_M, BLOCK_N, BLOCK_K, USE_DOT, LATE_SUM, num_warps,
num_stages, and "split": a K split count, or "heuristic" for plan()'s fill-the-GPU rule, with
"programs_per_sm" its target where the entry sets one), "status" ("measured", or "derived, not
measured" for a choice from register and occupancy arithmetic), and for a measured entry
"figure" (what it measured) and "record" (the file under benchmarks/results/ that holds it).
An exact-shape entry wins over its bucket's general one. benchmarks/gemv_tiles.py sweeps the
candidates on a GPU and writes the measured entries (docs/ops/gemv.md).
"""

from __future__ import annotations

from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.runtime import launch_tables
from kernelab.runtime.launch_tables import DERIVED as DERIVED  # the statuses, as callers read them
from kernelab.runtime.launch_tables import MEASURED as MEASURED
from kernelab.runtime.launch_tables import power_of_two

TABLE_PATH = Path(__file__).with_name("tiles.json")
LAUNCH_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "USE_DOT", "LATE_SUM", "num_warps", "num_stages",
               "split")  # fmt: skip


def check_launch(launch: dict, where: str = "launch") -> dict:
    """`launch` when its keys and values are a form gemv_split_kernel takes; else a one-line
    KernelabError naming what is wrong."""
    missing = [key for key in LAUNCH_KEYS if key not in launch]
    if missing:
        raise KernelabError(f"{where} lacks {', '.join(missing)}")
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        if not power_of_two(launch[key]):
            raise KernelabError(f"{where}: {key} must be a power of two, got {launch[key]!r}")
    if not isinstance(launch["num_stages"], int) or not 1 <= launch["num_stages"] <= 8:
        raise KernelabError(f"{where}: num_stages must be 1 to 8, got {launch['num_stages']!r}")
    split = launch["split"]
    if split != "heuristic" and not (isinstance(split, int) and split >= 1):
        raise KernelabError(f"{where}: split must be a count >= 1 or 'heuristic', got {split!r}")
    if launch["USE_DOT"] and launch["LATE_SUM"]:
        raise KernelabError(f"{where}: LATE_SUM is a form of the broadcast product, not of tl.dot")
    x_as_tile = launch.get("X_AS_TILE", False)  # optional: False where absent
    if not isinstance(x_as_tile, bool):
        raise KernelabError(f"{where}: X_AS_TILE must be true or false, got {x_as_tile!r}")
    if x_as_tile and not (launch["LATE_SUM"] and launch["BLOCK_M"] == 1):
        raise KernelabError(f"{where}: X_AS_TILE is a form of LATE_SUM at BLOCK_M = 1")
    if launch["USE_DOT"] and launch["BLOCK_M"] < 16:
        raise KernelabError(f"{where}: tl.dot needs BLOCK_M >= 16, got {launch['BLOCK_M']}")
    return launch


def check_table(table: dict, where: str = "tiles.json") -> dict:
    """The table when every entry is well formed and no two entries claim one key."""
    return launch_tables.check_table(table, where, key="itemsize", check_launch=check_launch)


def load_table(path: str | Path | None = None) -> dict:
    """The tile table at `path` (default: tiles.json beside this file), checked, read once."""
    return launch_tables.load_table(str(path or TABLE_PATH), check_table, "GEMV tile table")


def lookup(table: dict, itemsize: int, m: int, n: int, k: int) -> dict | None:
    """The entry for one call: the smallest bucket >= m among the itemsize's entries, its
    exact (n, k) entry if it has one, else its general one; None when the table has neither."""
    mine = [e for e in table["entries"] if e["itemsize"] == itemsize]
    return launch_tables.lookup(mine, m, n, k)
