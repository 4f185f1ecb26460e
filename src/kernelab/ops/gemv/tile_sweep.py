"""The decode GEMV's tile sweep without a GPU: the candidate launches, the sweep's budget, and
the winners read back from its records as tiles.json entries (benchmarks/gemv_tiles.py times
the candidates; this module is what the CPU tests check).

A candidate is a Tile (kernel form, BLOCK_M/N/K, num_warps, num_stages) and a K split. Per
weight shape and batch the sweep times, L2 flushed before each call (kernelab's cold timer):
  coarse   every tile of the batch's grid at the split plan()'s rule gives it (PROGRAMS_PER_SM
           programs a SM): the figure the table's general entry for the bucket is chosen on;
  refine   the REFINE fastest tiles at their other splits (1 and the rule at 2 and 8 programs
           a SM), so an unsplit launch and a deeper split are measured where they matter;
  confirm  the CONFIRM fastest launches again with a longer timer, beside torch (cuBLAS) and
           the launch the table gives today ("triton.gemv").
Every candidate is checked against torch's x @ W^T (float64, the harness's bf16 tolerance)
before it is timed; one that fails is
a line in the run's failures, never a record.

The grids (tile_grid) keep each form where its registers stay sane: the broadcast forms at
8 to 64 values of W a thread (at least one 16-byte load of bf16; the fp32 products or the
accumulator at most 64 a thread), the dot form's pipeline within SMEM_BUDGET of shared memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelab.ops.gemv import PROGRAMS_PER_SM, heuristic_launch, split_k
from kernelab.ops.gemv.tiles import DERIVED, MEASURED

SUITE = "gemv_tiles"
SWEEP_BATCHES = (1, 4, 16, 64)
FORMS = ("step", "late", "late_x", "dot")
SPLIT_RULES = (2, PROGRAMS_PER_SM, 8)  # programs a SM the refine pass also tries, with 1
REFINE = 6  # tiles re-timed at their other splits, per shape and batch
CONFIRM = 3  # launches re-timed with the longer timer, per shape and batch
SMEM_BUDGET = 160 * 1024  # bytes of staged dot operands a program may hold
MIN_VALUES, MAX_VALUES = 8, 64  # values of W a thread per step (broadcast forms)
# seconds, for the budget: a compile (Triton + ptxas), a short cold timing, a long one, and
# the fixed cost of a run (imports, CUDA, the copy ceiling, the compile workers' start)
COMPILE_S, SHORT_S, LONG_S, FIXED_S = 0.8, 0.06, 0.3, 40.0
SHORT_TIMER = {"max_time_s": 0.03, "max_samples": 100, "warmup_ms": 5.0}
LONG_TIMER = {"max_time_s": 0.2, "max_samples": 1000, "warmup_ms": 10.0}


@dataclass(frozen=True)
class Tile:
    # "step": broadcast, summed each step; "late": summed once; "late_x": summed once, x loaded
    # as a tile in W's layout (X_AS_TILE, m = 1); "dot": tl.dot
    form: str
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    @property
    def name(self) -> str:
        return (f"{self.form}-m{self.block_m}n{self.block_n}k{self.block_k}-w{self.num_warps}"
                f"s{self.num_stages}")  # fmt: skip

    def form_launch(self) -> dict:
        """The table's launch keys of this tile (the split is the caller's)."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
                "USE_DOT": self.form == "dot", "LATE_SUM": self.form in ("late", "late_x"),
                "X_AS_TILE": self.form == "late_x",
                "num_warps": self.num_warps, "num_stages": self.num_stages}  # fmt: skip

    def launch(self, m: int, n: int, k: int, split: int) -> dict:
        """gemv(launch=...) for this tile at `split` slices of K (plan()'s arithmetic: the
        split it returns is the one the launch has)."""
        split, k_per_split = split_k(m, n, k, self.block_m, self.block_n, self.block_k, None,
                                     wanted=split)  # fmt: skip
        return {**self.form_launch(), "split": split, "k_per_split": k_per_split}

    def rule_split(self, m: int, n: int, k: int, sms: int,
                   programs_per_sm: int = PROGRAMS_PER_SM) -> int:  # fmt: skip
        return split_k(m, n, k, self.block_m, self.block_n, self.block_k, sms,
                       programs_per_sm=programs_per_sm)[0]  # fmt: skip

    def splits(self, m: int, n: int, k: int, sms: int) -> list[int]:
        """The splits the sweep may time: 1 and the rule's at SPLIT_RULES programs a SM."""
        return sorted({1, *(self.rule_split(m, n, k, sms, p) for p in SPLIT_RULES)})

    def values_per_thread(self) -> int:
        return self.block_n * self.block_k // (32 * self.num_warps)

    def smem_bytes(self, itemsize: int = 2) -> int:
        """Shared memory a pipelined loop stages: num_stages tiles of x and W."""
        return self.num_stages * (self.block_m + self.block_n) * self.block_k * itemsize


def tile_of(launch: dict) -> Tile:
    form = ("dot" if launch["USE_DOT"] else "late_x" if launch.get("X_AS_TILE")
            else "late" if launch.get("LATE_SUM") else "step")  # fmt: skip
    return Tile(form, launch["BLOCK_M"], launch["BLOCK_N"], launch["BLOCK_K"],
                launch.get("num_warps", 4), launch.get("num_stages", 3 if form == "dot" else 1))  # fmt: skip


def _pow2_at_least(m: int) -> int:
    return 1 << max(0, (m - 1).bit_length())


def _broadcast_ok(tile: Tile) -> bool:
    values = tile.values_per_thread()
    return MIN_VALUES <= values and tile.block_m * values <= MAX_VALUES


def tile_grid(m: int) -> list[Tile]:
    """The tiles the sweep times for a batch of m, the heuristic's own among them."""
    tiles: list[Tile] = []
    if m == 1:
        for bn in (4, 8, 16, 32):
            for bk in (256, 512, 1024):
                for warps in (2, 4, 8):
                    for stages in (1, 3):
                        tiles.append(Tile("late", 1, bn, bk, warps, stages))
        # x as a tile in W's layout: no barrier in the loop, unpipelined (a pipelined loop
        # stages x through shared memory, barriers and all), at 4 warps (the sweep's budget:
        # the late form's 2- and 8-warp tiles say whether the warp count matters)
        tiles += [Tile("late_x", 1, t.block_n, t.block_k, t.num_warps, 1)
                  for t in tiles if t.num_stages == 1 and t.num_warps == 4]  # fmt: skip
        tiles = [t for t in tiles if _broadcast_ok(t)]
        tiles += [Tile("step", 1, bn, bk, 4, 1) for bn, bk in ((64, 128), (32, 128), (16, 256))]
    elif m <= 8:
        bm = _pow2_at_least(m)
        for form, stage_options in (("step", (1,)), ("late", (1, 3))):
            for bn in (8, 16, 32, 64):
                for bk in (64, 128, 256):
                    for warps in (4, 8):
                        for stages in stage_options:
                            tiles.append(Tile(form, bm, bn, bk, warps, stages))
        tiles = [t for t in tiles if _broadcast_ok(t)]
        tiles += [Tile("dot", 16, bn, bk, 4, stages) for bn in (32, 64) for bk in (128, 256)
                  for stages in (3, 4)]  # fmt: skip
    else:
        bm = max(16, _pow2_at_least(m))
        for bn in (16, 32, 64, 128):
            for bk in (64, 128, 256):
                for warps in (4, 8):
                    for stages in (3, 4):
                        tile = Tile("dot", bm, bn, bk, warps, stages)
                        if (warps == 8 and bn < 64) or tile.smem_bytes() > SMEM_BUDGET:
                            continue
                        if bm * bn // (32 * warps) > MAX_VALUES:  # the fp32 accumulator
                            continue
                        tiles.append(tile)
    heuristic = tile_of(heuristic_launch(m))
    if heuristic not in tiles:
        tiles.append(heuristic)
    return tiles


@dataclass(frozen=True)
class Point:
    label: str
    m: int
    n: int
    k: int


def sweep_points(weights, batches=SWEEP_BATCHES) -> list[Point]:
    """Every (weight shape, batch), batch-major: m = 1, the target's batch, is swept first."""
    return [Point(label, m, n, k) for m in batches for label, n, k in weights]


def compile_jobs(points: list[Point], sms: int) -> list[tuple[int, int, int, dict]]:
    """(m, n, k, launch) launches that together compile every kernel the sweep may run: one
    per tile, batch and output kind (unsplit: y itself; split: fp32 partials), and one per
    split count (the reduction kernel's SPLIT)."""
    jobs, seen, splits_seen = [], set(), set()
    for point in points:
        for tile in tile_grid(point.m):
            for split in tile.splits(point.m, point.n, point.k, sms):
                key = (point.m, tile, split > 1)
                if key in seen and (split == 1 or split in splits_seen):
                    continue
                seen.add(key)
                splits_seen.add(split)
                jobs.append((point.m, point.n, point.k, tile.launch(point.m, point.n, point.k,
                                                                    split)))  # fmt: skip
    return jobs


def compile_worker(jobs, device: str = "cuda") -> tuple[int, list[str]]:
    """Run each (m, n, k, launch) of compile_jobs once on `device`, on zeros: on a GPU the
    kernels land in Triton's cache, where the timing process finds them built. (How many
    ran, one line per launch that raised.)"""
    import torch

    from kernelab.ops.gemv import gemv

    done, errors, made = 0, [], {}
    for m, n, k, launch in jobs:
        try:
            if (m, n, k) not in made:
                made.clear()  # one shape's operands at a time
                made[(m, n, k)] = (torch.zeros(m, k, dtype=torch.bfloat16, device=device),
                                   torch.zeros(n, k, dtype=torch.bfloat16, device=device))  # fmt: skip
            gemv(*made[(m, n, k)], launch=launch)
            done += 1
        except Exception as exc:  # the timing pass meets it again and records it
            errors.append(f"{launch}: {type(exc).__name__}: {str(exc).strip()[:160]}")
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return done, errors


def budget(points: list[Point], sms: int, jobs: int = 1) -> dict:
    """How much the sweep does and about how long it takes: compiles spread over `jobs`
    processes, then the timings (refine counts its most: every split of REFINE tiles)."""
    compiles = len(compile_jobs(points, sms))
    coarse = refine = 0
    for point in points:
        grid = tile_grid(point.m)
        coarse += len(grid)
        extra = sorted((len(t.splits(point.m, point.n, point.k, sms)) - 1 for t in grid),
                       reverse=True)  # fmt: skip
        refine += sum(extra[:REFINE])
    confirm = len(points) * (CONFIRM + 2)  # and torch, and today's launch
    seconds = (FIXED_S + compiles * COMPILE_S / max(1, jobs) + (coarse + refine) * SHORT_S
               + confirm * LONG_S)  # fmt: skip
    return {"points": len(points), "compiles": compiles, "coarse": coarse, "refine": refine,
            "confirm": confirm, "jobs": jobs, "estimate_s": round(seconds)}  # fmt: skip


# ---- from the records back to the table ----------------------------------------------------


def w_gbps(m: int, n: int, k: int, ms: float, itemsize: int = 2) -> float:
    """Bytes of W a second, in GB/s: the target's measure (W dominates the traffic)."""
    return n * k * itemsize / (ms * 1e-3) / 1e9


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _ours(records, point_key):
    return [r for r in records if r.extra.get("candidate") and _key(r) == point_key
            and r.check.get("ok", True)]  # fmt: skip


def _key(record) -> tuple[int, int, int]:
    return (record.shape["m"], record.shape["n"], record.shape["k"])


def sweep_records(records) -> list:
    return [r for r in records if r.extra.get("suite") == SUITE and r.op == "gemv"
            and r.dtype == "bf16"]  # fmt: skip


def copy_gbps(records) -> float | None:
    copies = [r for r in records if r.op == "copy" and r.extra.get("suite") == SUITE]
    return copies[-1].achieved_gbps if copies else None


def point_winners(records) -> dict[tuple[int, int, int], dict]:
    """Per (m, n, k): the fastest checked candidate (of the confirm pass where it ran, which
    re-timed the fastest ones longer), with torch's and today's launch's times beside."""
    copy = copy_gbps(records)
    records = sweep_records(records)
    winners = {}
    for key in sorted({_key(r) for r in records}):
        ours = _ours(records, key)
        if not ours:
            continue
        confirmed = [r for r in ours if r.extra.get("pass") == "confirm"]
        best = min(confirmed or ours, key=lambda r: r.median_ms)
        torch_ms = _median_of(records, key, "torch.gemv")
        today_ms = _median_of(records, key, "triton.gemv")
        m, n, k = key
        gbps = w_gbps(m, n, k, best.median_ms)
        winners[key] = {"record": best, "launch": dict(best.extra["launch"]),
                        "candidate": best.extra["candidate"], "us": best.median_ms * 1e3,
                        "w_gbps": gbps, "pct_of_copy": 100 * gbps / copy if copy else None,
                        "pct_of_torch": 100 * torch_ms / best.median_ms if torch_ms else None,
                        "x_today": today_ms / best.median_ms if today_ms else None}  # fmt: skip
    return winners


def _median_of(records, key, implementation) -> float | None:
    found = [r for r in records if r.implementation == implementation and _key(r) == key]
    return min(r.median_ms for r in found) if found else None


def general_winners(records) -> dict[int, dict]:
    """Per batch: the tile whose coarse timings (each at the split plan()'s rule gives it)
    come closest to each shape's fastest coarse timing, by their geometric mean; only tiles
    timed at every shape of the batch compete."""
    records = [r for r in sweep_records(records) if r.extra.get("pass") == "coarse"
               and r.extra.get("candidate") and r.check.get("ok", True)]  # fmt: skip
    result = {}
    for m in sorted({r.shape["m"] for r in records}):
        mine = [r for r in records if r.shape["m"] == m]
        shapes = sorted({_key(r) for r in mine})
        best = {s: min(r.median_ms for r in mine if _key(r) == s) for s in shapes}
        by_tile: dict[str, dict] = {}
        for r in mine:
            by_tile.setdefault(r.extra["tile"], {})[_key(r)] = r
        scored = []
        for tile, at in by_tile.items():
            if set(at) != set(shapes):
                continue
            ratios = [best[s] / at[s].median_ms for s in shapes]
            scored.append((_geomean(ratios), min(ratios), tile, at))
        if not scored:
            continue
        score, worst, tile, at = max(scored, key=lambda item: (item[0], item[1]))
        launch = {key: value for key, value in next(iter(at.values())).extra["launch"].items()
                  if key not in ("split", "k_per_split")}  # fmt: skip
        result[m] = {"tile": tile, "launch": launch, "geomean_of_best": score,
                     "worst_of_best": worst, "shapes": len(shapes)}  # fmt: skip
    return result


def _entry(m, n, k, launch, figure, record_path, why, card) -> dict:
    return {"itemsize": 2, "m": m, "n": n, "k": k, "launch": launch, "status": MEASURED,
            "why": why, "card": card, "figure": figure, "record": record_path}  # fmt: skip


def propose_table(records, base: dict, record_path: str, sms: int, card: str) -> dict:
    """tiles.json with the measured batches' itemsize-2 entries replaced by the sweep's
    winners: per batch a general entry (the best tile across shapes, split by plan()'s rule)
    and an exact-shape entry wherever that shape's winner is another launch. Batches and
    itemsizes the records do not cover keep their entries."""
    winners, general = point_winners(records), general_winners(records)
    measured = set(general)
    entries = [e for e in base["entries"] if not (e["itemsize"] == 2 and e["m"] in measured)]
    added = []
    for m in sorted(measured):
        g = general[m]
        figure = {"geomean_of_best": round(g["geomean_of_best"], 4),
                  "worst_of_best": round(g["worst_of_best"], 4), "shapes": g["shapes"],
                  "what": "coarse cold timings at plan()'s split against each shape's fastest"}  # fmt: skip
        added.append(_entry(m, None, None, {**g["launch"], "split": "heuristic"}, figure,
                            record_path, f"the tile {g['tile']} came closest to each shape's "
                            "fastest launch (bf16, m in this bucket's swept batch)", card))  # fmt: skip
        tile = tile_of(g["launch"])
        for (wm, n, k), win in sorted(winners.items()):
            if wm != m:
                continue
            general_split = tile.rule_split(m, n, k, sms)
            if win["candidate"] == f"{tile.name}.split{general_split}":
                continue  # the general entry gives this launch already
            launch = {key: value for key, value in win["launch"].items() if key != "k_per_split"}
            figure = {key: round(value, 4) if isinstance(value, float) else value
                      for key, value in win.items() if key not in ("record", "launch")}  # fmt: skip
            added.append(_entry(m, n, k, launch, figure, record_path,
                                f"the fastest checked launch at {n} x {k}, m = {m}", card))  # fmt: skip
    order = {DERIVED: 1, MEASURED: 0}
    entries = sorted([*entries, *added], key=lambda e: (e["itemsize"], e["m"],
                     e.get("n") is None, e.get("n") or 0, e.get("k") or 0,
                     order.get(e["status"], 2)))  # fmt: skip
    return {**base, "entries": entries}
