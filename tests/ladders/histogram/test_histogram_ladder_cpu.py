"""The histogram ladder without a GPU: every step compiles for sm_90 with no spills, every
step's counts are exact under host emulation (tests/cuda_host_emulation.hpp, with its
atomics and lockstep-warp __match_any_sync) for int32 ids and uint8 bytes, uniform and
skewed (every value in one bin) data, out-of-range values in the overflow slot; bad input
gets one line before any compile; the op's reference is the exact integer count.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library, sparse_zeros  # noqa: E402

from kernelab.errors import KernelabError
from kernelab.ladders.histogram import STEPS, build_step, get_step, histogram
from kernelab.ladders.histogram import launch as histogram_launch
from kernelab.ladders.histogram.steps import DTYPES, MAX_BLOCKS, THREADS, parse_steps
from kernelab.runtime.cuda import build as cuda_build

TESTS = Path(__file__).parents[2]
HERE = Path(__file__).parent
SOURCE_DIR = cuda_build.KERNEL_DIR / "ladders" / "histogram"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

C_TYPE = {"int32": "int", "uint8": "unsigned char"}
NUMPY_TYPE = {"int32": np.int32, "uint8": np.uint8}


# ---- nvcc: every step builds for sm_90, both value types, no spills -----------------------


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_for_sm90_without_spills(step):
    built = build_step(step, arch="sm_90")
    for dtype in DTYPES:
        report = built.report(step.kernel_for(dtype))
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report
        # Step 1 keeps no shared bins; steps 2-4 a 32-bit counter per bin and overflow slot;
        # step 5 32 copies (one per lane) of 256 bins and the overflow slot.
        shared = {1: 0, 5: (256 + 1) * 32 * 4}.get(step.number, (4096 + 1) * 4)
        assert report.shared_bytes == shared
        assert report.registers <= 40, report  # 6 blocks an SM or more (steps.resident_blocks)


# ---- host emulation: exact counts -----------------------------------------------------------


def _emulator(step, dtype: str) -> ctypes.CDLL:
    flags = [f"-DKERNEL={step.kernel_for(dtype)}", f"-DELEM={C_TYPE[dtype]}"]
    lib = emulated_library(f"histogram-{step.slug}-{dtype}", SOURCE_DIR,
                           [SOURCE_DIR / step.file, HERE / "emulation_driver.cpp"], flags)  # fmt: skip
    lib.emulate.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_longlong, ctypes.c_void_p,
                            ctypes.c_int, ctypes.c_void_p]  # fmt: skip
    lib.emulate_blocks.restype = ctypes.c_int
    lib.emulate_blocks.argtypes = [ctypes.c_uint] * 4 + [
        ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
    ]  # fmt: skip
    return lib


def _exact(values: np.ndarray, bins: int) -> np.ndarray:
    """counts[bins + 1] in int64: the last slot for values outside [0, bins)."""
    v = values.astype(np.int64)
    slot = np.where((v >= 0) & (v < bins), v, bins)
    return np.bincount(slot, minlength=bins + 1)


def _values(n: int, bins: int, dtype: str, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "skewed":  # every value in one bin
        return np.full(n, bins // 2, dtype=NUMPY_TYPE[dtype])
    top = 256 if dtype == "uint8" else bins
    values = rng.integers(0, top, size=n).astype(np.int64)
    if dtype == "int32":  # a few ids out of range on both sides
        values[96::97] = -1
        values[193::194] = bins + 5
    return values.astype(NUMPY_TYPE[dtype])


def _run(lib, values, bins, grid: int, block: int) -> tuple[int, np.ndarray]:
    counts = np.zeros(bins + 1, dtype=np.uint64)
    faults = lib.emulate(grid, block, values.size, values.ctypes.data, bins, counts.ctypes.data)
    return faults, counts.astype(np.int64)


# n = 100003 runs on 4 blocks of 64 threads (2 warps each): the grid-stride loop, the per-block
# flush and the warp collectives are all exercised without 391 emulated 256-thread blocks.
LAUNCHES = {1: None, 7: None, 100003: (4, 64)}


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_counts_exactly_under_emulation(step, dtype):
    lib = _emulator(step, dtype)
    for n, launch in LAUNCHES.items():
        if launch is None:  # the step's own geometry
            geometry = step.launch(n)
            launch = (geometry.grid[0], geometry.block[0])
        for bins in (8, 64, 256):
            for kind in ("uniform", "skewed"):
                values = _values(n, bins, dtype, kind, seed=n + bins)
                faults, counts = _run(lib, values, bins, *launch)
                assert faults == 0
                expected = _exact(values, bins)
                assert np.array_equal(counts, expected), f"{step.name} {dtype} n={n} {bins} {kind}"


@needs_gxx
def test_out_of_range_ids_land_in_the_overflow_slot():
    values = np.array([-7, 0, 8, 3, 2**31 - 1, -(2**31), 7], dtype=np.int32)
    for step in STEPS:
        faults, counts = _run(_emulator(step, "int32"), values, 8, 1, 32)
        assert faults == 0
        assert counts.tolist() == [1, 0, 0, 1, 0, 0, 0, 1, 4]


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", [s for s in STEPS if s.units], ids=lambda s: s.name)
def test_units_off_16_byte_alignment_count_head_body_and_tail(step, dtype):
    """Steps 4-5 read 16-byte units from the first 16-byte boundary: values starting 1 to 15
    bytes past one (a slice into a tensor) count the head one value at a time (thread 0), the
    whole units by LDG.E.128, the tail (thread units mod stride); every value exactly once,
    at bins on both sides of step 5's 256 (its per-lane copies, and one copy past them)."""
    lib = _emulator(step, dtype)
    size = 16 // NUMPY_TYPE[dtype]().itemsize
    for bins in (8, 256, 300, 4096):
        backing = _values(4099, bins, dtype, "uniform", seed=bins)
        for start in range(size):
            for n in (1, size - 1, 3 * size + 2, 4099 - start):
                values = backing[start : start + n]
                faults, counts = _run(lib, values, bins, 2, 64)
                assert faults == 0
                assert np.array_equal(counts, _exact(values, bins)), (bins, start, n)


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", [s for s in STEPS if s.units], ids=lambda s: s.name)
def test_unit_indices_past_2_to_the_32_under_emulation(step, dtype):
    """Steps 4-5's index arithmetic past 32 bits: n = 2^32 + 17 values in a sparse buffer, a
    grid of one thread per 16-byte unit, only its last two blocks run. They own the last
    2 x 256 units (elements up to 2^32 + 16, far past what a 32-bit index reaches) and the
    tail after the last whole unit, and must count exactly those values."""
    n = (1 << 32) + 17
    values = sparse_zeros(n, NUMPY_TYPE[dtype])
    if values is None:
        pytest.skip("the system refuses a sparse 2^32-value mapping")
    per = 16 // values.itemsize
    units = n // per
    grid = -(-units // THREADS)
    first = (grid - 2) * THREADS * per  # the first value the last two blocks own
    bins = 200 if dtype == "uint8" else 64
    count = n - first
    tail = (np.arange(count, dtype=np.int64) * 37 + 11) % (256 if dtype == "uint8" else bins + 6)
    if dtype == "int32":
        tail -= 1
    values[first:] = tail.astype(NUMPY_TYPE[dtype])
    assert units % (grid * THREADS) >= (grid - 2) * THREADS  # the tail's owner runs too
    counts = np.zeros(bins + 1, dtype=np.uint64)
    lib = _emulator(step, dtype)
    faults = lib.emulate_blocks(grid, grid - 2, grid, THREADS, n, values.ctypes.data, bins,
                                counts.ctypes.data)  # fmt: skip
    assert faults == 0
    assert np.array_equal(counts.astype(np.int64), _exact(values[first:], bins)), step.name


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", [s for s in STEPS if not s.units], ids=lambda s: s.name)
def test_indices_past_2_to_the_32_under_emulation(step, dtype):
    """The index arithmetic past 32 bits, on the CPU: n = 2^32 + 17 values in a sparse
    buffer (only the touched pages exist), a grid of one block per 256 values (2^24 + 1
    blocks, so blockIdx.x x blockDim.x reaches 2^32), and only its last two blocks run. They
    must count exactly the 273 values from 2^32 - 256 on; an index computed in 32 bits would
    wrap to the start of the buffer (zeros, which land in bin 0) or before it."""
    n = (1 << 32) + 17
    values = sparse_zeros(n, NUMPY_TYPE[dtype])
    if values is None:
        pytest.skip("the system refuses a sparse 2^32-value mapping")
    bins = 200 if dtype == "uint8" else 64  # bytes >= 200 and ids -1, 69 overflow
    first = n - 256 - 17
    tail = (np.arange(273, dtype=np.int64) * 37 + 11) % (256 if dtype == "uint8" else bins + 6)
    if dtype == "int32":
        tail -= 1  # ids from -1 to bins + 4: both sides out of range
    values[first:] = tail.astype(NUMPY_TYPE[dtype])
    grid = -(-n // THREADS)
    assert grid == (1 << 24) + 1
    counts = np.zeros(bins + 1, dtype=np.uint64)
    lib = _emulator(step, dtype)
    faults = lib.emulate_blocks(grid, grid - 2, grid, THREADS, n, values.ctypes.data, bins,
                                counts.ctypes.data)  # fmt: skip
    assert faults == 0
    expected = _exact(values[first:], bins)
    assert expected[0] < 273 and expected[bins] > 0  # the tail is not all zeros, and overflows
    assert np.array_equal(counts.astype(np.int64), expected), step.name


@needs_gxx
def test_emulated_warp_match_rejects_a_partial_block():
    """The emulation's contract is whole warps: a 48-thread block is refused, not guessed."""
    lib = _emulator(get_step("warp_aggregated"), "int32")
    counts = np.zeros(9, dtype=np.uint64)
    values = np.zeros(5, dtype=np.int32)
    assert lib.emulate(1, 48, 5, values.ctypes.data, 8, counts.ctypes.data) == -1


# ---- geometry and steps -------------------------------------------------------------------


def test_geometry_is_whole_warps_and_capped():
    for n, blocks in ((1, 1), (256, 1), (257, 2), (10**9, MAX_BLOCKS), (2**33, MAX_BLOCKS)):
        launch = STEPS[0].launch(n)
        assert launch.block == (THREADS, 1, 1) and THREADS % 32 == 0
        assert launch.grid == (blocks, 1, 1)


def test_steps_are_named_in_order_and_each_names_its_proof():
    assert [s.name for s in STEPS] == [f"histogram:0{k}" for k in range(1, 6)]
    assert [s.number for s in parse_steps("2,3")] == [2, 3]
    for step in STEPS:
        assert (SOURCE_DIR / step.file).is_file()
        assert step.proof.startswith(("l1tex__", "lts__")) and step.fixes and step.technique
    with pytest.raises(KernelabError):
        get_step("6")
    with pytest.raises(KernelabError, match="loads must be one of"):
        get_step(4).defines(3)
    with pytest.raises(KernelabError, match="one value at a time"):
        get_step(2).defines(2)


def test_unit_steps_size_their_grid_by_units_and_the_resident_blocks():
    """Steps 4-5: one thread per 16-byte unit, capped at the blocks the GPU holds at once
    (never so few that a block sees 2^31 values); resident_blocks from threads, registers and
    shared memory per SM."""
    from kernelab.ladders.histogram.steps import geometry, resident_blocks

    assert resident_blocks(32, (4096 + 1) * 4, 132) == 132 * 8  # step 4: thread-bound
    assert resident_blocks(40, 257 * 32 * 4, 132) == 132 * 6  # step 5: registers and shared
    step = get_step(5)
    assert step.launch(1 << 26, "uint8", 792).grid == (792, 1, 1)
    assert step.launch(16 * THREADS + 1, "uint8", 792).grid == (2, 1, 1)
    assert step.launch(4 * THREADS, "int32", 792).grid == (1, 1, 1)
    assert geometry(1 << 40, "uint8", 10).grid == (512, 1, 1)  # 2^40 / 2^31 blocks at least


# ---- bad input: one line, before anything compiles ----------------------------------------


torch = pytest.importorskip("torch")


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("reached the compiler with bad input")

    monkeypatch.setattr(histogram_launch, "build_step", refuse)


@pytest.mark.parametrize(
    "values, bins, words",
    [
        (lambda: torch.zeros(9, dtype=torch.int64), 8, "torch.int64"),
        (lambda: torch.zeros(9, dtype=torch.float32), 8, "torch.float32"),
        (lambda: torch.zeros(9, dtype=torch.int32), 0, "1..4096"),
        (lambda: torch.zeros(9, dtype=torch.int32), 4097, "1..4096"),
        (lambda: torch.zeros(9, dtype=torch.int32), 8.0, "1..4096"),
        (lambda: torch.zeros(9, dtype=torch.int32), True, "1..4096"),
        (lambda: torch.zeros(9, dtype=torch.int32), 8, "CUDA"),
        (lambda: torch.zeros(0, dtype=torch.uint8), 8, "CUDA"),
        (lambda: torch.zeros(9, 2, dtype=torch.int32)[:, 0], 8, "CUDA"),
        (lambda: [1, 2], 8, "torch.Tensor"),
    ],
    ids=[
        "int64",
        "fp32",
        "bins-0",
        "bins-4097",
        "bins-float",
        "bins-bool",
        "cpu",
        "empty-cpu",
        "strided-cpu",
        "list",
    ],  # fmt: skip
)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_bad_input_is_one_line_before_compiling(no_compile, step, values, bins, words):
    with pytest.raises(KernelabError) as raised:
        histogram(step, values(), bins)
    message = str(raised.value)
    assert words in message and "\n" not in message


def test_n_past_the_supported_range_is_one_line(no_compile, monkeypatch):
    """2^40 values is refused in one line (checked by count, without allocating them)."""
    monkeypatch.setattr(histogram_launch, "MAX_N", 10)
    values = torch.zeros(10, dtype=torch.int32)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with pytest.raises(KernelabError, match="at most 2\\^40"):
        histogram(1, values, 8)


# ---- the op: exact integer reference, costs -----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_reference_counts_exactly_with_an_overflow_slot(dtype):
    from kernelab.spec.reference import get_op

    spec = get_op("histogram")
    values, bins = spec.make_inputs({"n": 100003, "bins": 64}, dtype, seed=5)
    ref = spec.reference(values, bins)
    assert ref.dtype == torch.int64 and ref.shape == (65,)
    assert torch.equal(ref, torch.from_numpy(_exact(values.numpy(), 64)))
    assert int(ref.sum()) == 100003 and int(ref[64]) > 0  # the inputs exercise the slot
    assert torch.equal(spec.torch_eager(values, bins), ref)


def test_cost_reads_the_values_and_writes_the_counts():
    from kernelab.spec.reference import get_op

    cost = get_op("histogram").cost({"n": 1 << 20, "bins": 256}, "uint8")
    assert cost.bytes == (1 << 20) + 257 * 8 and cost.flops == 0


@pytest.mark.parametrize("distribution", ["uniform", "skewed"])
@pytest.mark.parametrize("bins", [1, 256, 4096])
def test_uint8_values_stay_inside_a_byte_at_any_bin_count(distribution, bins):
    from kernelab.ladders.histogram.ladder import make_values

    values = make_values(1000, bins, "uint8", distribution, device="cpu")
    assert values.dtype == torch.uint8
    assert int(values.max()) < min(bins, 256)
    if distribution == "skewed":
        assert (values == min(bins, 256) // 2).all()
