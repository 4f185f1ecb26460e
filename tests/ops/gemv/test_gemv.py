"""The decode GEMV (ops/gemv): the teaching kernel and the split-K fast path against the float64
reference at awkward shapes in every dtype (the Triton kernels on the CPU interpreter), the
launch plan's arithmetic, bad input, and the roofline walk against hand arithmetic. On a GPU
(marked gpu): every listed decode shape and batch."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

# m: 1, a prime, one tile of rows and one past it, the largest decode batch; n and k: 1, primes,
# non-multiples of the interpreter's 16-wide tiles, and K long enough for several splits
SHAPES = [
    {"m": 1, "n": 1, "k": 1},
    {"m": 1, "n": 37, "k": 100},
    {"m": 3, "n": 33, "k": 129},
    {"m": 16, "n": 17, "k": 64},
    {"m": 17, "n": 9, "k": 47},
    {"m": 64, "n": 5, "k": 33},
]
DTYPES = ("fp32", "bf16", "fp16")


@pytest.fixture(scope="module")
def gemv():
    return kernel_module("gemv")


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("gemv.teaching")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_fast_gemv_matches_the_reference(gemv, shape, dtype):
    assert_matches_reference(gemv.gemv, "gemv", shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES[1:4], ids=shape_id)
def test_teaching_gemv_matches_the_reference(teaching, shape, dtype):
    assert_matches_reference(teaching.gemv, "gemv", shape, dtype)


def _pinned(gemv, m, n, k, **changes):
    launch = gemv.plan(m, n, k, None, interpreter=True)
    launch.update(changes)
    if "split" in changes:  # keep the K ranges covering K
        launch["k_per_split"] = math.ceil(math.ceil(k / launch["split"]) / launch["BLOCK_K"])
        launch["k_per_split"] *= launch["BLOCK_K"]
        launch["split"] = math.ceil(k / launch["k_per_split"])
    return launch


@pytest.mark.parametrize(
    "changes",
    [{"split": 1}, {"split": 4}, {"USE_DOT": True, "BLOCK_M": 16}, {"USE_DOT": False}],
    ids=["no-split", "split-4", "dot-at-m-3", "broadcast"],
)
def test_every_form_of_the_fast_kernel_matches_the_reference(gemv, changes):
    from kernelab.spec.reference import OPS

    m, n, k = 3, 21, 90
    x, w = OPS["gemv"].make_inputs({"m": m, "n": n, "k": k}, "fp32", seed=3, device=DEVICE)
    launch = _pinned(gemv, m, n, k, **changes)
    y = gemv.gemv(x, w, launch=launch)
    ref = OPS["gemv"].reference(x, w)
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-6, launch


def test_the_plan_splits_k_to_fill_the_gpu_and_covers_k_exactly(gemv):
    plan = gemv.plan(1, 4096, 4096, 132)
    programs = math.ceil(4096 / plan["BLOCK_N"])
    assert plan["split"] > 1 and programs * plan["split"] <= 4 * 132
    assert plan["k_per_split"] % plan["BLOCK_K"] == 0
    assert (plan["split"] - 1) * plan["k_per_split"] < 4096 <= plan["split"] * plan["k_per_split"]
    # a wide matrix fills the GPU with column blocks alone: no split, no second kernel
    assert gemv.plan(1, 128256, 4096, 132)["split"] == 1
    # tensor cores from 16 rows on, the broadcast product below
    assert not gemv.plan(8, 4096, 4096, 132)["USE_DOT"] and gemv.plan(9, 4096, 4096, 132)["USE_DOT"]


def test_split_k_is_deterministic(gemv):
    x = torch.randn(2, 200, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(19, 200, device=DEVICE, dtype=torch.bfloat16)
    assert gemv.plan(2, 19, 200, None, interpreter=True)["split"] > 1
    assert torch.equal(gemv.gemv(x, w), gemv.gemv(x, w))


def test_transposed_and_strided_operands_give_the_same_answer(gemv):
    x = torch.randn(4, 40, device=DEVICE)
    w = torch.randn(24, 40, device=DEVICE)
    expected = gemv.gemv(x, w)
    torch.testing.assert_close(gemv.gemv(x.t().contiguous().t(), w.t().contiguous().t()), expected)
    wide = torch.zeros(24, 80, device=DEVICE)
    wide[:, ::2] = w
    torch.testing.assert_close(gemv.gemv(x, wide[:, ::2]), expected)


@pytest.mark.parametrize("module", ["gemv", "gemv.teaching"])
def test_nan_in_one_row_of_x_stays_in_that_row(module):
    fn = kernel_module(module).gemv
    x = torch.randn(3, 50, device=DEVICE)
    x[1, 7] = float("nan")
    y = fn(x, torch.randn(20, 50, device=DEVICE))
    assert y[1].isnan().all() and y[[0, 2]].isfinite().all()


@pytest.mark.parametrize("module", ["gemv", "gemv.teaching"])
def test_empty_batch_and_empty_k_have_defined_answers(module):
    fn = kernel_module(module).gemv
    w = torch.randn(6, 8, device=DEVICE)
    assert fn(torch.empty(0, 8, device=DEVICE), w).shape == (0, 6)
    y = fn(torch.empty(2, 0, device=DEVICE), torch.empty(6, 0, device=DEVICE))
    assert y.shape == (2, 6) and bool((y == 0).all())  # an empty sum


@pytest.mark.parametrize(
    "x_shape, w_shape, dtypes, match",
    [
        ((2, 8), (6, 9), ("fp32", "fp32"), "x\\[m, k\\] and w\\[n, k\\]"),
        ((8,), (6, 8), ("fp32", "fp32"), "x\\[m, k\\]"),
        ((2, 8), (6, 8), ("bf16", "fp16"), "one dtype"),
        ((2, 8), (6, 8), ("fp64", "fp64"), "one dtype"),
        ((65, 8), (6, 8), ("fp32", "fp32"), "m <= 64"),
    ],
    ids=["k-mismatch", "1-d-x", "mixed", "fp64", "m-65"],
)
def test_bad_input_is_refused_in_one_line(gemv, x_shape, w_shape, dtypes, match):
    from kernelab.spec.op_spec import dtype_of

    x = torch.zeros(x_shape, device=DEVICE, dtype=dtype_of(dtypes[0]))
    w = torch.zeros(w_shape, device=DEVICE, dtype=dtype_of(dtypes[1]))
    with pytest.raises(KernelabError, match=match) as raised:
        gemv.gemv(x, w)
    assert "\n" not in str(raised.value)
    if "m <= 64" not in match:
        with pytest.raises(KernelabError):
            kernel_module("gemv.teaching").gemv(x, w)


def test_both_are_registered(gemv, teaching):
    from kernelab.spec.registry import get

    assert get("triton.gemv").build() is gemv.gemv
    assert get("triton.gemv.teaching").build() is teaching.gemv
    assert get("torch.gemv").is_baseline


# ---- the roofline walk: pure arithmetic ----------------------------------------------------


def test_m1_4096_square_bf16_is_one_flop_per_byte_on_h100():
    from kernelab.hardware.catalog import get_gpu
    from kernelab.ops.gemv.roofline_walk import walk

    result = walk(4096, 4096, gpu="h100-sxm", dtype="bf16")
    first = result["points"][0]
    # 2 * 4096^2 FLOPs over (4096^2 + 2 * 4096) * 2 bytes
    assert first.intensity == pytest.approx(4096**2 / (4096**2 + 2 * 4096))
    assert 0.99 < first.intensity < 1.0
    spec = get_gpu("h100-sxm")
    bandwidth, peak = spec.bandwidth_bytes_per_s, spec.peak_flops("bf16")
    assert first.attainable_tflops == pytest.approx(first.intensity * bandwidth / 1e12)
    assert first.floor_us == pytest.approx(first.bytes / bandwidth * 1e6)
    assert result["ridge"] == pytest.approx(peak / bandwidth)
    # intensity ~ m: every listed batch is memory-bound on an H100 (ridge ~ 300 FLOP/byte)
    assert [p.m for p in result["points"]] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p.bound == "memory" for p in result["points"])
    intensities = [p.intensity for p in result["points"]]
    assert intensities == sorted(intensities)


def test_the_crossover_is_where_the_intensity_reaches_the_ridge():
    from kernelab.ops.gemv.roofline_walk import crossover_m, walk

    n = k = 4096
    ridge = 295.0
    m_star = crossover_m(n, k, ridge, 2.0)
    # by hand: m* = ridge * 2 * n*k / (2*n*k - ridge * 2 * (n + k)) = 295 * 2 / (2 - 590 *
    # 8192 / 4096^2) = 590 / 1.71191... = 344.6 -> 345
    assert m_star == 345

    def intensity(m):
        return 2 * m * n * k / ((n * k + m * k + m * n) * 2)

    assert intensity(m_star) >= ridge > intensity(m_star - 1)
    assert crossover_m(8, 8, 295.0, 2.0) is None  # x and y traffic keep a tiny W memory-bound
    result = walk(n, k, gpu="h100-sxm", batches=(1, 512))
    assert result["points"][1].bound == "compute" and result["crossover_m"] < 512


# ---- on a GPU: the decode shapes of the issue -----------------------------------------------

# (n, k): square 4096, 16384 x 4096, and a Llama-3-8B layer: qkv (4096 + 2 * 1024 heads),
# o, gate/up fused (2 * 14336) and down
GPU_WEIGHTS = [(4096, 4096), (16384, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m", GPU_BATCHES)
@pytest.mark.parametrize("n, k", GPU_WEIGHTS)
def test_gpu_gemv_at_every_decode_shape(gemv, n, k, m, dtype):
    assert_matches_reference(gemv.gemv, "gemv", {"m": m, "n": n, "k": k}, dtype, trials=1)


@pytest.mark.gpu
@pytest.mark.parametrize("m", (1, 16))
def test_gpu_teaching_gemv_at_4096(teaching, m):
    assert_matches_reference(teaching.gemv, "gemv", {"m": m, "n": 4096, "k": 4096}, "bf16")
