"""The decode GEMV's tile table and its sweep without a GPU: plan() reads tiles.json (its
derived entries give the heuristic's launches exactly), an exact-shape entry wins over its
bucket's, the table's checks refuse malformed entries; the sweep's candidate grid, splits and
budget; the winners and the proposed table from a recorded fixture
(gemv_tiles_record.json: the sweep's record format, times invented); every candidate launch
form against the reference on the CPU interpreter."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, HAS_CUDA, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

FIXTURE = Path(__file__).with_name("gemv_tiles_record.json")
WEIGHTS = ((4096, 4096), (16384, 4096), (6144, 4096), (28672, 4096), (4096, 14336))


@pytest.fixture(scope="module")
def gemv():
    return kernel_module("gemv")


@pytest.fixture(scope="module")
def sweep(gemv):
    from kernelab.ops.gemv import tile_sweep

    return tile_sweep


def _table(*entries):
    return {"about": "test", "entries": list(entries)}


def _entry(itemsize, m, launch, n=None, k=None, status="derived, not measured", **more):
    return {"itemsize": itemsize, "m": m, "n": n, "k": k, "launch": launch, "status": status,
            **more}  # fmt: skip


# ---- plan() and the table ------------------------------------------------------------------


def test_the_committed_table_is_well_formed_and_says_what_backs_each_entry(gemv):
    from kernelab.ops.gemv import tiles

    table = tiles.load_table()
    assert {(e["itemsize"], e["m"]) for e in table["entries"] if e["n"] is None} >= {
        (size, m) for size in (2, 4) for m in gemv.GPU_TILES
    }
    for entry in table["entries"]:
        assert entry["status"] in (tiles.DERIVED, tiles.MEASURED)
        if entry["status"] == tiles.MEASURED:  # its record is committed beside the table
            root = Path(__file__).resolve().parents[3]
            assert (root / entry["record"]).is_file(), entry["record"]


@pytest.mark.parametrize("itemsize", [2, 4])
def test_the_derived_entries_give_the_heuristics_launches(gemv, itemsize):
    from kernelab.ops.gemv import tiles

    derived = [e for e in tiles.load_table()["entries"] if e["itemsize"] == itemsize
               and e["status"] == tiles.DERIVED]  # fmt: skip
    if not derived:
        pytest.skip("every entry of this itemsize is measured")
    buckets = {e["m"] for e in derived if e["n"] is None}
    for m in range(1, 65):
        bucket = min(b for b in gemv.GPU_TILES if b >= m)
        if bucket not in buckets:
            continue
        for n, k in [*WEIGHTS, (128256, 4096), (37, 100)]:
            if any(e["m"] == bucket and (e["n"], e["k"]) == (n, k) for e in derived):
                continue
            for sms, interpreter in ((132, False), (None, True)):
                assert gemv.plan(m, n, k, sms, interpreter=interpreter, itemsize=itemsize) == \
                    gemv.plan(m, n, k, sms, interpreter=interpreter), (m, n, k)  # fmt: skip


def test_the_heuristic_launch_keeps_the_kernels_earlier_form(gemv):
    # 4 warps; Triton pipelines the dot form's loop in 3 stages, the broadcast forms' none
    for m in (1, 8, 16, 64):
        launch = gemv.heuristic_launch(m)
        assert launch["num_warps"] == 4 and not launch["LATE_SUM"]
        assert launch["num_stages"] == (3 if launch["USE_DOT"] else 1)
        assert launch["split"] == "heuristic"


def test_plan_takes_an_exact_shape_entry_over_its_buckets_and_falls_back(gemv):
    general = {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 512, "USE_DOT": False, "LATE_SUM": True,
               "num_warps": 4, "num_stages": 1, "split": "heuristic"}  # fmt: skip
    exact = {**general, "BLOCK_N": 16, "num_stages": 3, "split": 2}
    table = _table(_entry(2, 1, general, status="measured", record="r.json"),
                   _entry(2, 1, exact, n=4096, k=4096, status="measured", record="r.json"))  # fmt: skip
    at = gemv.plan(1, 4096, 4096, 132, itemsize=2, table=table)
    assert (at["BLOCK_N"], at["num_stages"], at["split"], at["k_per_split"]) == (16, 3, 2, 2048)
    elsewhere = gemv.plan(1, 8192, 4096, 132, itemsize=2, table=table)
    assert (elsewhere["BLOCK_N"], elsewhere["BLOCK_K"], elsewhere["LATE_SUM"]) == (8, 512, True)
    assert elsewhere["split"] == 1  # 1024 column blocks fill 132 SMs: the rule splits nothing
    # no bucket >= m, or another itemsize: the heuristic
    assert gemv.plan(4, 4096, 4096, 132, itemsize=2, table=table) == gemv.plan(4, 4096, 4096, 132)
    assert gemv.plan(1, 4096, 4096, 132, itemsize=4, table=table) == gemv.plan(1, 4096, 4096, 132)
    # the interpreter keeps the entry's form at its own small tiles and splits to be seen
    small = gemv.plan(1, 37, 100, None, interpreter=True, itemsize=2, table=table)
    assert small["LATE_SUM"] and (small["BLOCK_N"], small["BLOCK_K"]) == gemv.INTERPRETER_TILE
    assert small["split"] > 1


def test_a_programs_per_sm_entry_changes_the_split_rule(gemv):
    launch = {**gemv.heuristic_launch(1), "programs_per_sm": 8}
    table = _table(_entry(2, 1, launch))
    # 64 column blocks: 4 a SM -> 8 splits; 8 a SM -> 16 (K allows 4096 / (128 * 4) = 8)
    assert gemv.plan(1, 4096, 4096, 132)["split"] == 8
    assert gemv.plan(1, 4096, 8192, 132, itemsize=2, table=table)["split"] == 16


@pytest.mark.parametrize(
    "change, match",
    [
        ({"BLOCK_N": 24}, "power of two"),
        ({"USE_DOT": True, "BLOCK_M": 16, "LATE_SUM": True}, "LATE_SUM"),
        ({"USE_DOT": True}, "BLOCK_M >= 16"),
        ({"split": 0}, "split"),
        ({"num_stages": 0}, "num_stages"),
        ({"num_warps": None}, "num_warps"),
        ({"X_AS_TILE": True}, "X_AS_TILE is a form of LATE_SUM"),
        ({"LATE_SUM": True, "BLOCK_M": 2, "X_AS_TILE": True}, "BLOCK_M = 1"),
        ({"LATE_SUM": True, "X_AS_TILE": 1}, "true or false"),
    ],
    ids=[
        "not-pow2",
        "dot-and-late",
        "dot-below-16",
        "split-0",
        "stages-0",
        "no-warps",
        "x-tile-not-late",
        "x-tile-two-rows",
        "x-tile-not-bool",
    ],  # fmt: skip
)
def test_the_table_refuses_a_malformed_launch_in_one_line(gemv, change, match):
    from kernelab.ops.gemv import tiles

    with pytest.raises(KernelabError, match=match) as raised:
        tiles.check_table(_table(_entry(2, 1, {**gemv.heuristic_launch(1), **change})))
    assert "\n" not in str(raised.value)


def test_the_table_refuses_repeats_half_shapes_and_unbacked_measurements(gemv):
    from kernelab.ops.gemv import tiles

    launch = gemv.heuristic_launch(1)
    with pytest.raises(KernelabError, match="repeats"):
        tiles.check_table(_table(_entry(2, 1, launch), _entry(2, 1, launch)))
    with pytest.raises(KernelabError, match="both"):
        tiles.check_table(_table(_entry(2, 1, launch, n=4096)))
    with pytest.raises(KernelabError, match="names no record"):
        tiles.check_table(_table(_entry(2, 1, launch, status="measured")))
    with pytest.raises(KernelabError, match="lacks"):
        tiles.check_table(_table({k: v for k, v in _entry(2, 1, launch).items() if k != "m"}))


def test_gemv_refuses_x_as_a_tile_outside_the_late_sum_at_one_row(gemv):
    x, w = torch.zeros(2, 8, device=DEVICE), torch.zeros(4, 8, device=DEVICE)
    launch = {**gemv.plan(2, 4, 8, None, interpreter=True), "LATE_SUM": True, "X_AS_TILE": True}
    assert launch["BLOCK_M"] == 2
    with pytest.raises(KernelabError, match="X_AS_TILE"):
        gemv.gemv(x, w, launch=launch)


def test_gemv_refuses_a_late_sum_dot_launch(gemv):
    x, w = torch.zeros(2, 8, device=DEVICE), torch.zeros(4, 8, device=DEVICE)
    launch = {**gemv.plan(16, 4, 8, None, interpreter=True), "USE_DOT": True, "LATE_SUM": True}
    with pytest.raises(KernelabError, match="LATE_SUM"):
        gemv.gemv(x, w, launch=launch)


# ---- the sweep's grid and budget -----------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 32, 64])
def test_each_batchs_grid_holds_the_heuristic_and_keeps_registers_sane(gemv, sweep, m):
    grid = sweep.tile_grid(m)
    assert len(grid) == len(set(grid)) and len({t.name for t in grid}) == len(grid)
    assert sweep.tile_of(gemv.heuristic_launch(m)) in grid
    for tile in grid:
        if tile.form == "dot":
            assert tile.block_m >= 16 and tile.block_m >= m
            assert tile.smem_bytes() <= sweep.SMEM_BUDGET or tile == sweep.tile_of(
                gemv.heuristic_launch(m)
            )
        else:
            assert tile.block_m >= m and tile.block_m < 16
            if tile != sweep.tile_of(gemv.heuristic_launch(m)):
                assert sweep.MIN_VALUES <= tile.values_per_thread()
                assert tile.block_m * tile.values_per_thread() <= sweep.MAX_VALUES
        from kernelab.ops.gemv import tiles

        tiles.check_launch({**tile.form_launch(), "split": 1}, tile.name)
    if m == 1:  # the late-summed form is the one m = 1 sweeps most
        assert sum(t.form == "late" for t in grid) > len(grid) // 2


@pytest.mark.parametrize("n, k", WEIGHTS)
def test_the_splits_hold_one_and_the_rules_and_cover_k_exactly(sweep, n, k):
    for m in sweep.SWEEP_BATCHES:
        for tile in sweep.tile_grid(m):
            splits = tile.splits(m, n, k, 132)
            assert 1 in splits and tile.rule_split(m, n, k, 132) in splits
            for split in splits:
                launch = tile.launch(m, n, k, split)
                assert launch["split"] == split  # a split the table can name and get back
                assert launch["k_per_split"] % tile.block_k == 0
                assert (split - 1) * launch["k_per_split"] < k <= split * launch["k_per_split"]


def test_the_sweep_fits_its_budget_and_compiles_every_kernel_it_may_run(sweep):
    points = sweep.sweep_points(
        [(f"{n}x{k}", n, k) for n, k in (*WEIGHTS, (4096, 4096))], sweep.SWEEP_BATCHES)  # fmt: skip
    assert [p.m for p in points[:6]] == [1] * 6  # m = 1, the target's batch, first
    plan = sweep.budget(points, 132, jobs=12)
    assert plan["points"] == 24
    assert 150 <= plan["compiles"] <= 400 and plan["coarse"] <= 1000
    assert plan["estimate_s"] <= 6 * 60  # compiled ahead on 12 processes
    assert sweep.budget(points, 132, jobs=1)["estimate_s"] <= 9 * 60  # compiled inline
    jobs = sweep.compile_jobs(points, 132)
    variants = {(m, sweep.tile_of(launch), launch["split"] > 1) for m, _, _, launch in jobs}
    for p in points:
        for tile in sweep.tile_grid(p.m):
            for split in tile.splits(p.m, p.n, p.k, 132):
                assert (p.m, tile, split > 1) in variants
    assert {launch["split"] for *_, launch in jobs} >= {
        s for p in points for t in sweep.tile_grid(p.m) for s in t.splits(p.m, p.n, p.k, 132)
    }


# ---- from a record to the table ------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_records():
    from kernelab.harness.records import load_records

    return load_records(FIXTURE)


def test_each_shapes_winner_is_the_fastest_checked_launch_of_the_confirm_pass(sweep,
                                                                               fixture_records):  # fmt: skip
    winners = sweep.point_winners(fixture_records)
    square = winners[(1, 4096, 4096)]
    # 12.2 us in the refine pass, 12.3 confirmed: the confirm pass decides
    assert square["candidate"] == "late-m1n16k512-w4s1.split2" and square["us"] == pytest.approx(
        12.3
    )
    assert square["pct_of_torch"] == pytest.approx(100 * 14.0 / 12.3)
    assert square["x_today"] == pytest.approx(20.0 / 12.3)
    # 4096^2 bf16 = 33.55 MB of W in 12.3 us: 2728 GB/s, 91 % of the 3000 GB/s copy
    assert square["w_gbps"] == pytest.approx(4096 * 4096 * 2 / 12.3e-6 / 1e9)
    assert square["pct_of_copy"] == pytest.approx(100 * square["w_gbps"] / 3000.0)
    assert winners[(1, 4096, 14336)]["candidate"] == "late-m1n8k512-w4s1.split1"
    assert winners[(16, 4096, 4096)]["candidate"] == "dot-m16n32k256-w4s4.split4"


def test_the_general_winner_is_the_tile_closest_to_every_shapes_fastest(sweep, fixture_records):
    general = sweep.general_winners(fixture_records)
    assert general[1]["tile"] == "late-m1n8k512-w4s1"  # the fastest coarse timing at both
    assert general[1]["geomean_of_best"] == pytest.approx(1.0)
    # the 32 x 256 dot tile was faster at 4096^2 but not timed at 4096 x 14336
    assert general[16]["tile"] == "dot-m16n64k128-w4s3"
    assert general[16]["worst_of_best"] == pytest.approx(15.5 / 16.0)


def derived_table(gemv, tiles) -> dict:
    """tiles.json as it stands before any sweep: its derived entries, and GPU_TILES' launch for
    every bucket whose general entry a sweep has replaced with a measured one."""
    table = json.loads(tiles.TABLE_PATH.read_text())
    entries = [e for e in table["entries"] if e["status"] != tiles.MEASURED]
    general = {(e["itemsize"], e["m"]) for e in entries if e.get("n") is None}
    for itemsize in (2, 4):
        for m in gemv.GPU_TILES:
            if (itemsize, m) not in general:
                entries.append({"itemsize": itemsize, "m": m, "n": None, "k": None,
                                "launch": gemv.heuristic_launch(m), "status": tiles.DERIVED,
                                "why": "GPU_TILES", "figure": None, "record": None})  # fmt: skip
    return {**table, "entries": sorted(entries, key=lambda e: (e["itemsize"], e["m"]))}


def test_the_proposed_table_gives_plan_the_winners(gemv, sweep, fixture_records):
    from kernelab.ops.gemv import tiles

    base = derived_table(gemv, tiles)
    record = str(Path("benchmarks", "results", "h100", "gemv_tiles", "gemv_tiles_fixture.json"))
    table = tiles.check_table(sweep.propose_table(fixture_records, copy.deepcopy(base), record,
                                                  132, "h100-sxm"))  # fmt: skip
    measured = [e for e in table["entries"] if e["status"] == tiles.MEASURED]
    # per swept batch a general entry, and an exact one where the shape's winner differs
    assert {(e["m"], e["n"], e["k"]) for e in measured} == {
        (1, None, None),
        (1, 4096, 4096),
        (16, None, None),
        (16, 4096, 4096),
    }
    assert all(e["record"] == record and e["card"] == "h100-sxm" for e in measured)
    # what was not swept keeps its entry
    untouched = [e for e in base["entries"] if e["itemsize"] == 4 or e["m"] not in (1, 16)]
    assert all(e in table["entries"] for e in untouched)

    def plan(m, n, k):
        return gemv.plan(m, n, k, 132, itemsize=2, table=table)

    square = plan(1, 4096, 4096)
    assert (square["BLOCK_N"], square["BLOCK_K"], square["LATE_SUM"], square["split"]) == (
        16, 512, True, 2)  # fmt: skip
    down = plan(1, 4096, 14336)
    assert (down["BLOCK_N"], down["BLOCK_K"], down["split"]) == (8, 512, 1)
    other = plan(1, 8192, 8192)  # a shape never swept: the general tile, the rule's split
    assert (other["BLOCK_N"], other["BLOCK_K"], other["LATE_SUM"]) == (8, 512, True)
    assert plan(16, 4096, 4096)["BLOCK_N"] == 32 and plan(9, 4096, 14336)["BLOCK_N"] == 64
    assert plan(2, 4096, 4096) == gemv.plan(2, 4096, 4096, 132)  # bucket 2: derived
    for entry in measured:  # every measured launch is one the sweep timed, as it was timed
        if entry["n"] is not None:
            timed = [r for r in fixture_records if r.extra.get("launch", {}).get("split")
                     == entry["launch"]["split"] and r.shape["n"] == entry["n"]]  # fmt: skip
            assert any({k: v for k, v in r.extra["launch"].items() if k != "k_per_split"}
                       == entry["launch"] for r in timed)  # fmt: skip


# ---- every candidate form on the interpreter -----------------------------------------------


def _forms():
    from kernelab.ops.gemv.tile_sweep import SWEEP_BATCHES, tile_grid

    seen = {}
    for m in SWEEP_BATCHES:
        for tile in tile_grid(m):
            key = (tile.form, tile.block_m, tile.block_n, tile.block_k)
            seen.setdefault(key, (m, tile))
    return list(seen.values())


FORMS = _forms()


@pytest.mark.parametrize("m, tile", FORMS, ids=[t.name for _, t in FORMS])
def test_every_candidate_form_matches_the_reference(gemv, m, tile):
    """Each (form, BLOCK_M, BLOCK_N, BLOCK_K) the sweep may time, unsplit and split in two, at a
    small shape with ragged edges: a batch below the bucket (masked rows), n not a multiple
    of BLOCK_N, k not of BLOCK_K. num_warps and num_stages do not change the interpreter's
    arithmetic; the GPU run checks each launch before it times it."""
    from kernelab.harness.check import compare
    from kernelab.spec.reference import OPS

    if HAS_CUDA:
        pytest.skip("on a GPU benchmarks/gemv_tiles.py checks every launch at full size")
    rows = max(1, m - 1) if m > 1 else 1
    shape = {"m": rows, "n": 37, "k": 8 * tile.block_k + 40}
    x, w = OPS["gemv"].make_inputs(shape, "bf16", seed=5, device=DEVICE)
    ref = OPS["gemv"].reference(x, w)
    for split in (1, 2):
        launch = tile.launch(rows, 37, shape["k"], split)
        assert launch["split"] == split
        result = compare(gemv.gemv(x, w, launch=launch), ref, dtype="bf16", bf16_truncates=True)
        assert result.ok, (tile.name, split, result.message)


def test_the_late_sum_form_at_m1_matches_the_step_form(gemv):
    """The two broadcast forms at one row add the same fp32 products in another order."""
    x = torch.randn(1, 300, device=DEVICE)
    w = torch.randn(21, 300, device=DEVICE)
    step = gemv.plan(1, 21, 300, None, interpreter=True)
    late = {**step, "LATE_SUM": True}
    assert not step["LATE_SUM"]
    torch.testing.assert_close(gemv.gemv(x, w, launch=late), gemv.gemv(x, w, launch=step))
    assert math.isfinite(float(gemv.gemv(x, w, launch=late).sum()))
