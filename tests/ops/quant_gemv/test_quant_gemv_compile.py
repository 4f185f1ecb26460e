"""The late-summed m = 1 forms of the quantized GEMVs and of the fused gate/up GEMV compile
for Hopper (sm_90) with this Triton, no GPU needed, as a launch at K a multiple of 16 and
aligned tensors specialises them: what a K step costs. With x loaded as a tile in W's layout
(X_AS_TILE, the tables' launches) the loop is 16-byte loads, integer unpacking and FMAs: no
shuffle, no barrier, no shared memory, no local memory. With x as a row, Triton brings it into
W's layout through shared memory, barriers and all (the sweep times both)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sass_probes import run_probe, total

PROBE = Path(__file__).with_name("quant_sass_probe.py")

# name: (kind, constants, num_warps, stages)
FORMS = {
    # the table's int8 / fp8 launch: 4 x 1024 at 4 warps, 32 weights a thread a step
    "int8 x-tile n4 k1024": ("int8", {"BLOCK_N": 4, "BLOCK_K": 1024, "X_AS_TILE": True}, 4, 1),
    "fp8 x-tile n4 k1024": ("fp8", {"BLOCK_N": 4, "BLOCK_K": 1024, "X_AS_TILE": True}, 4, 1),
    "int8 x-row n4 k1024": ("int8", {"BLOCK_N": 4, "BLOCK_K": 1024, "X_AS_TILE": False}, 4, 1),
    # the table's int4 launch at g = 128: 8 rows x 8 groups, 32 packed bytes a thread a step
    "int4 x-tile n8 g8": ("int4", {"BLOCK_N": 8, "GROUPS": 8, "X_AS_TILE": True,
                                   "HAS_ZEROS": False}, 4, 1),
    "int4 zp x-tile n8 g8": ("int4", {"BLOCK_N": 8, "GROUPS": 8, "X_AS_TILE": True,
                                      "HAS_ZEROS": True}, 4, 1),
    "int4 x-row n8 g8": ("int4", {"BLOCK_N": 8, "GROUPS": 8, "X_AS_TILE": False,
                                  "HAS_ZEROS": False}, 4, 1),
    # the table's gate/up launch: 4 rows of each weight x 1024 at 8 warps (at 4 warps x 512,
    # the same work a thread, ptxas reloads one value from local memory every step)
    "gate_up x-tile n4 k1024": ("gate_up", {"BLOCK_N": 4, "BLOCK_K": 1024, "X_AS_TILE": True},
                                8, 1),
}  # fmt: skip


@pytest.fixture(scope="module")
def compiled():
    return run_probe(PROBE, FORMS, timeout=900)


SHARED = ("BAR", "SHFL", "STS", "STSM", "LDS", "LDSM")


@pytest.mark.slow
def test_x_as_a_tile_leaves_loads_and_arithmetic_in_the_k_loop(compiled):
    for name, (loop, local) in compiled.items():
        assert loop, f"{name}: no K loop found in the SASS"
        assert total(loop, "LDL", "STL") == 0, (name, loop)
        assert local == 0, f"{name} spills ({local} local-memory instructions)"
        if "x-tile" in name:
            assert total(loop, *SHARED) == 0, (name, loop)


@pytest.mark.slow
def test_the_loads_of_a_step(compiled):
    # int8/fp8: 32 weights a thread = two 16-byte loads of W, 32 bf16 of x = four
    for name in ("int8 x-tile n4 k1024", "fp8 x-tile n4 k1024"):
        loop, _ = compiled[name]
        assert total(loop, "LDG.E.128") == 6, (name, loop)
        assert total(loop, "FFMA") == 32, (name, loop)
    # int4: 32 packed bytes a thread (16 in each of two rows): two 16-byte loads; x's 32
    # values of those columns as 16 words: four (the two rows share them: one load serves
    # both); one fp16 scale (and a zero point) a group, two groups; an FMUL and an FFMA a
    # pair of products, one FFMA a byte for the scale
    for name in ("int4 x-tile n8 g8", "int4 zp x-tile n8 g8"):
        loop, _ = compiled[name]
        assert total(loop, "LDG.E.128") == 6, (name, loop)
        assert total(loop, "LDG.E.U16") == 2, (name, loop)
        assert total(loop, "LDG.E.U8") == (2 if "zp" in name else 0), (name, loop)
        # 2^23 bit tricks, not the I2F unit, for the nibbles: I2F only for a zero point a group
        assert total(loop, "I2F") == (2 if "zp" in name else 0), (name, loop)
        assert total(loop, "FFMA") == 64 and total(loop, "FMUL") == 32, (name, loop)
    # gate/up: 16 values of each weight a thread: two 16-byte loads each and two of x
    loop, _ = compiled["gate_up x-tile n4 k1024"]
    assert total(loop, "LDG.E.128") == 6, loop
    assert total(loop, "FFMA") == 32, loop


@pytest.mark.slow
def test_x_as_a_row_goes_through_shared_memory(compiled):
    for name in ("int8 x-row n4 k1024", "int4 x-row n8 g8"):
        loop, _ = compiled[name]
        assert total(loop, "BAR") >= 2 and total(loop, "SHFL") == 0, (name, loop)
