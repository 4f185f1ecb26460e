"""LayerNorm and RMSNorm against the float64 reference: the single pass and the looped path on
the CPU interpreter, every row-tile candidate, full sizes on a GPU.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import (  # noqa: E402  (sets TRITON_INTERPRET without a GPU)
    DEVICE,
    FLOAT_DTYPES,
    assert_matches_reference,
    kernel_fixture,
)

pytest.importorskip("triton")
import triton  # noqa: E402

from kernelab.harness.check import check_implementation  # noqa: E402

norms = kernel_fixture("norms")


def _norm_operands(cols: int, dtype: str, device: str = "cuda"):
    """One row of x, a weight and a bias, as LayerNorm's checker builds them (same dtype)."""
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    x = torch.zeros(1, cols, dtype=torch_dtype, device=device)
    return x, torch.ones(cols, dtype=torch_dtype, device=device), torch.zeros_like(x[0])


NORM_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 4, "cols": 127},
    {"rows": 2, "cols": 1031},
    {"rows": 3, "cols": 127, "stride": 140},
]


@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_norms_single_pass(norms, op, shape, dtype):
    assert_matches_reference(getattr(norms, op), op, shape, dtype)


@pytest.mark.parametrize("shape", NORM_SHAPES[2:], ids=str)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_norms_looped_path_at_small_size(norms, op, shape):
    fn = functools.partial(getattr(norms, op), single_pass_max_cols=8)
    assert_matches_reference(fn, op, shape, "fp32")
    assert_matches_reference(fn, op, shape, "bf16")


@pytest.mark.parametrize("limit", [None, 8])
def test_layernorm_without_bias_and_with_a_large_mean(norms, limit):
    # mean 1000, std 1: a one-pass E[x^2] - E[x]^2 in fp32 would lose the variance
    x = torch.randn(3, 203, device=DEVICE, dtype=torch.float64).add_(1000.0)
    weight = torch.rand(203, device=DEVICE) + 0.5
    expected = torch.nn.functional.layer_norm(x, (203,), weight.double(), None, 1e-5)
    y = norms.layernorm(x.float(), weight, None, 1e-5, single_pass_max_cols=limit)
    assert (y.double() - expected).abs().max() < 2e-3


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_norms_every_row_tile_candidate(norms, op):
    from kernelab.runtime.tuner import row_tile_candidates

    shape = {"rows": 5, "cols": 127, "stride": 130}
    for config in row_tile_candidates(triton.next_power_of_2(shape["cols"])):
        fn = functools.partial(getattr(norms, op), config=config)
        for dtype in ("fp32", "bf16"):
            report = check_implementation(fn, op, shape, dtype, trials=1, device=DEVICE)
            assert report.ok, f"{config} {dtype}: {report.message}"


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1024, 4096, 16384])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_layernorm_every_row_tile_candidate(norms, cols, dtype):
    from kernelab.runtime.tuner import row_tile_candidates

    shape = {"rows": (16 << 20) // (4 * cols), "cols": cols}
    itemsize = {"fp32": 4, "bf16": 2}[dtype]
    # x, weight and bias of the input dtype, as the checker builds them
    candidates = row_tile_candidates(triton.next_power_of_2(cols), loaded_bytes_per_column=3 * itemsize)
    assert candidates == norms.candidates_for(*_norm_operands(cols, dtype))
    for config in candidates:
        fn = functools.partial(norms.layernorm, config=config)
        report = check_implementation(fn, "layernorm", shape, dtype, trials=1)
        assert report.ok, f"{config}: {report.message}"


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1024, 4096, 8192, 16384, 50_000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_gpu_norms_full_size(norms, op, cols, dtype):
    rows = max(1, (64 << 20) // (4 * cols))
    assert_matches_reference(getattr(norms, op), op, {"rows": rows, "cols": cols}, dtype, trials=2)


def _pipeline_depths(candidates: list[dict]) -> list[int]:
    return [c["PIPELINE"] for c in candidates if c.get("PIPELINE", 1) > 1]


def test_pipelined_candidates_fit_in_shared_memory(norms):
    from kernelab.runtime.tuner import SM90_SHARED_BYTES_PER_PROGRAM as limit
    from kernelab.runtime.tuner import row_tile_candidates

    # LayerNorm at 16K fp32 stages x, weight and bias: 2 x 3 x 64 KiB at PIPELINE=3 is over
    # the 227 KiB a program may have (the H200 refuses it); 2 stages fit
    assert _pipeline_depths(norms.candidates_for(*_norm_operands(16384, "fp32", "cpu"))) == [2]
    assert _pipeline_depths(norms.candidates_for(*_norm_operands(16384, "bf16", "cpu"))) == [2, 3]
    # at 32K fp32 even one staged tile of x and weight (256 KiB) does not fit
    x, w, _ = _norm_operands(32768, "fp32", "cpu")
    assert _pipeline_depths(norms.candidates_for(x, w)) == []
    # the softmax stages only the row: 2 x 64 KiB at 16K fp32 fits
    assert _pipeline_depths(row_tile_candidates(16384, loaded_bytes_per_column=4)) == [2, 3]
    for block_n in (2048, 4096, 8192, 16384, 32768):
        for loaded in (2, 4, 6, 8, 12):
            for c in row_tile_candidates(block_n, loaded_bytes_per_column=loaded):
                assert (c.get("PIPELINE", 1) - 1) * block_n * loaded < limit, (block_n, c)


def test_config_for_names_the_single_pass_default_or_the_looped_path(norms):
    """What the benchmarks record beside each timing: the untuned default before any tuning,
    the looped path past SINGLE_PASS_MAX_COLS."""
    from kernelab.runtime.tuner import row_tile_candidates

    x, w = torch.zeros(3, 4096), torch.ones(4096)
    assert norms.config_for(x, w, is_rms=True) == {
        "path": "single-pass",
        **row_tile_candidates(4096)[0],
    }
    wide = torch.zeros(1, norms.SINGLE_PASS_MAX_COLS + 1)
    looped = norms.config_for(wide, torch.ones(wide.shape[1]), is_rms=False)
    assert looped == {"path": "looped", "BLOCK": norms.LOOP_BLOCK}
