"""The decode GEMV's m = 1 forms compile for Hopper (sm_90) with this Triton, no GPU needed,
as a launch at K a multiple of 16 specialises them (unit K strides, 16-byte aligned rows): what
each K step of the loop costs besides W's loads. The step-summed form ends every step in a
cross-lane reduction (shuffles, and the products' layout changed through shared memory between
barriers); the late-summed form's step is W's 16-byte loads and the FMAs, with x's row brought
into the W tile's layout through shared memory (a barrier or two) and no shuffle; with x loaded
as a tile in that layout (X_AS_TILE) the step is loads and FMAs only. Which is fastest is the
tile sweep's to measure (benchmarks/gemv_tiles.py); this is why it asks."""

from __future__ import annotations

from pathlib import Path

import pytest
from sass_probes import run_probe, total

PROBE = Path(__file__).with_name("sass_probe.py")  # {form: {"loop": ..., "local": ...}}

FORMS = {  # name: (LATE_SUM, BLOCK_N, BLOCK_K, num_warps, STAGES, X_AS_TILE)
    "step n64 k128": (False, 64, 128, 4, 1, False),  # the heuristic's m = 1 launch
    "late n64 k128": (True, 64, 128, 4, 1, False),
    "late n32 k256": (True, 32, 256, 4, 1, False),
    "late_x n64 k128": (True, 64, 128, 4, 1, True),
    "late_x n32 k256": (True, 32, 256, 4, 1, True),
}


@pytest.fixture(scope="module")
def compiled():
    return run_probe(PROBE, FORMS, timeout=600)


@pytest.mark.slow
def test_every_m1_form_streams_w_in_16_byte_loads_without_local_memory(compiled):
    for name, (loop, local) in compiled.items():
        assert loop, f"{name}: no K loop found in the SASS"
        # 64 bf16 values of W a thread a step: 8 loads of 16 bytes, and one FMA each; x as a
        # tile: its 64 values of the thread's K positions too, 8 more (L1 serves the repeats)
        assert total(loop, "LDG.E.128") == (16 if name.startswith("late_x") else 8), (name, loop)
        assert total(loop, "FFMA") == 64, (name, loop)
        assert local == 0, f"{name} spills ({local} local-memory instructions)"


@pytest.mark.slow
def test_the_late_sum_takes_the_reduction_out_of_the_k_loop(compiled):
    step, _ = compiled["step n64 k128"]
    # the step form: a cross-lane reduction every K step
    assert total(step, "SHFL") >= 64 and total(step, "BAR") >= 8, step
    for name in ("late n64 k128", "late n32 k256"):
        late, _ = compiled[name]
        assert total(late, "SHFL") == 0, (name, late)
        assert total(late, "BAR") <= 4 < total(step, "BAR"), (name, late)  # x's row only
        assert total(late, "STS", "STSM", "LDS", "LDSM") < total(step, "STS", "LDS", "LDSM")


@pytest.mark.slow
def test_x_as_a_tile_leaves_the_k_loop_loads_and_fmas(compiled):
    for name in ("late_x n64 k128", "late_x n32 k256"):
        loop, _ = compiled[name]
        assert total(loop, "BAR", "SHFL", "STS", "STSM", "LDS", "LDSM") == 0, (name, loop)
