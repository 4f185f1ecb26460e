"""An op walked over its batch m (kernelab.roofline.walk): the crossing found on the cost
model against the closed form, and the bound of each point."""

from __future__ import annotations

import pytest

from kernelab.hardware import get_gpu
from kernelab.ops.gemv.roofline_walk import crossover_m
from kernelab.roofline.costs import gemm, gemv, gemv_batched
from kernelab.roofline.model import Ceilings, place
from kernelab.roofline.walk import crossover, walk


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "b200", "a100-sxm"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (28672, 4096), (4096, 14336), (512, 512)])
def test_the_crossing_is_the_closed_forms_m_star(gpu, n, k):
    ceilings = Ceilings.from_spec(get_gpu(gpu))
    result = walk(lambda m: gemv_batched(m, n, k, dtype="bf16"), [1, 64], ceilings)
    assert result.crossover_m == crossover_m(n, k, ceilings.ridge("bf16"), 2)


def test_the_crossing_is_the_first_compute_bound_m():
    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))

    def placed(m):
        return place(gemm(m, 4096, 4096, dtype="bf16"), ceilings)

    star = crossover(placed)
    assert placed(star).bound == "compute" and placed(star - 1).bound == "memory"


def test_points_are_sorted_and_each_bound_is_its_placements():
    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    result = walk(lambda m: gemv_batched(m, 4096, 4096, dtype="bf16"), [64, 1, 1024, 16],
                  ceilings)  # fmt: skip
    assert [p.shape["m"] for p in result.points] == [1, 16, 64, 1024]
    for p in result.points:
        assert p.bound == ("memory" if p.intensity < p.ridge else "compute")
    assert result.bound_change() == "memory-bound up to m = 64, compute-bound from m = 1024"


def test_an_op_that_levels_off_below_the_ridge_never_crosses():
    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    result = walk(lambda m: gemv(m, 4096, dtype="bf16"), [1, 2], ceilings, search_max=1 << 20)
    assert result.crossover_m is None and "never crosses" in result.crossover_note
    assert "2^20" in result.crossover_note


def test_times_judge_each_point():
    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    cost = lambda m: gemv_batched(m, 4096, 4096, dtype="bf16")  # noqa: E731
    floors = {m: place(cost(m), ceilings).floor_ms for m in (1, 16)}
    result = walk(cost, [1, 16], ceilings, times_ms={1: 2 * floors[1]})
    assert result.points[0].sol_pct == pytest.approx(50)
    assert result.points[1].time_ms is None
