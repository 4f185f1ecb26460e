"""Launch tables: an op's launches as data, a JSON file of entries read once and looked up
per call (ops/gemv/tiles.json, ops/quant_gemv/launches.json, ops/swiglu/gate_up_tiles.json).

Each entry names what it serves by a key of the op's own ("itemsize", "kind"), a batch bucket
"m" (the batches above the next smaller bucket, up to m), and "n" and "k" (an exact weight
shape, or null for every shape); "launch" is the op's launch dict, checked by the op's own
check_launch; "status" is "measured" (with the "record" under benchmarks/results/ it came
from, and its "figure") or "derived, not measured". An exact-shape entry wins over its
bucket's general one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

from kernelab.errors import KernelabError

DERIVED = "derived, not measured"
MEASURED = "measured"


def power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
        value & (value - 1)) == 0  # fmt: skip


def check_table(table: dict, where: str, *, key: str, check_launch: Callable,
                allowed: tuple | None = None) -> dict:  # fmt: skip
    """The table when every entry is well formed (its `key` among `allowed` where given, its
    launch what check_launch accepts) and no two entries claim one (key, m, n, k)."""
    entries = table.get("entries") if isinstance(table, dict) else None
    if not isinstance(entries, list):
        raise KernelabError(f"{where} holds no list of entries")
    seen = set()
    for i, entry in enumerate(entries):
        what = f"{where} entry {i}"
        for field in (key, "m", "launch", "status"):
            if field not in entry:
                raise KernelabError(f"{what} lacks {field}")
        if allowed is not None and entry[key] not in allowed:
            raise KernelabError(f"{what}: {key} must be one of {', '.join(map(str, allowed))}")
        claim = (entry[key], entry["m"], entry.get("n"), entry.get("k"))
        if claim in seen:
            raise KernelabError(f"{what} repeats {key}, m, n, k = {claim}")
        seen.add(claim)
        if (entry.get("n") is None) != (entry.get("k") is None):
            raise KernelabError(f"{what}: n and k are both a shape or both null")
        check_launch(entry["launch"], what)
        if entry["status"] == MEASURED and not entry.get("record"):
            raise KernelabError(f"{what} is measured but names no record")
    return table


@functools.cache
def load_table(path: str, check: Callable, name: str) -> dict:
    """The table at `path`, checked by check(table, file name), read once; `name` says what
    it is in the error a file that cannot be read gives."""
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KernelabError(f"cannot read the {name} {path}: {exc}") from None
    return check(table, Path(path).name)


def lookup(entries: list[dict], m: int, n: int, k: int) -> dict | None:
    """Among one key's entries, the one for a call: the smallest bucket >= m, its exact (n, k)
    entry if it has one, else its general one; None when there is neither."""
    mine = [e for e in entries if e["m"] >= m]
    if not mine:
        return None
    bucket = min(e["m"] for e in mine)
    exact = [e for e in mine if e["m"] == bucket and (e.get("n"), e.get("k")) == (n, k)]
    general = [e for e in mine if e["m"] == bucket and e.get("n") is None]
    return (exact or general or [None])[0]
