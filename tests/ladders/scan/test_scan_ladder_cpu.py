"""The scan ladder without a GPU: every step compiles for sm_90 with no spills; every step's
launch plan (steps.plan, the same sequence launch.py runs on a GPU) gives the right prefix
sums under host emulation (tests/cuda_host_emulation.hpp) for fp32 and int32, inclusive and
exclusive, at n = 1, 2, 31, 33, 1023, 1025, 100003; bad input gets one line before any
compile; the op's references (float64 for fp32, exact wrapping int32) and its cost.

What the emulation checks and what it cannot: blocks run one after another, so step 4's
look-back always finds its predecessor's inclusive prefix already published and never waits
or walks past it. The emulation checks the arithmetic and the indexing of the single pass
(tile ids from the counter, descriptors packed and unpacked, the prefix seeded into the
tile), not its concurrency: the spinning, the aggregate-then-prefix walk across several
tiles and the memory ordering show only on a GPU (tests/ladders/scan/test_scan_ladder_gpu.py).
The look-back's walk over aggregates is exercised here through a stand-in: descriptors
published as aggregates by hand before the kernel runs (test_look_back_adds_aggregates...).
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library  # noqa: E402

from kernelab.errors import KernelabError
from kernelab.ladders.scan import STEPS, build_step, get_step, scan
from kernelab.ladders.scan import launch as scan_launch
from kernelab.ladders.scan.steps import DTYPES, MAX_N, THREADS, TILE, parse_steps, plan
from kernelab.runtime.cuda import build as cuda_build

TESTS = Path(__file__).parents[2]
HERE = Path(__file__).parent
SOURCE_DIR = cuda_build.KERNEL_DIR / "ladders" / "scan"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

C_TYPE = {"fp32": ("float", "f32"), "int32": ("int", "i32")}
NUMPY_TYPE = {"fp32": np.float32, "int32": np.int32}
SIZES = (1, 2, 31, 33, 1023, 1025, 4096, 100003)


# ---- nvcc: every step builds for sm_90, both element types, no spills ---------------------


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_for_sm90_without_spills(step):
    built = build_step(step, arch="sm_90")
    for dtype in DTYPES:
        for kernel in step.kernels:
            report = built.report(step.kernel_for(dtype, kernel))
            assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report
            assert report.registers <= 64, report  # 256 threads: 8 blocks an SM fit
    # The tile in shared memory: step 3/4 stage 2048 words plus one pad word per 32.
    if step.number >= 3:
        report = built.report(step.kernel_for("fp32", step.kernels[-1]))
        assert report.shared_bytes >= (TILE + TILE // 32) * 4


# ---- host emulation: the plan, run kernel by kernel -----------------------------------------


def _emulator(step, dtype: str, items: int | None = None) -> ctypes.CDLL:
    elem, suffix = C_TYPE[dtype]
    flags = [f"-DSTEP={step.number}", f"-DELEM={elem}", f"-DSFX={suffix}", "-include",
             str(HERE / "warp_votes.hpp")]  # fmt: skip
    flags += [f"-D{k}={v}" for k, v in (step.defines(items) or {}).items()]
    lib = emulated_library(f"scan-{step.slug}-{dtype}-{items}", SOURCE_DIR,
                           [SOURCE_DIR / step.file, HERE / "emulation_driver.cpp"], flags,
                           depends=(HERE / "warp_votes.hpp",))  # fmt: skip
    lib.emulate.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
    return lib


def _driver_name(step, kernel: str) -> str:
    if step.structure == "propagate":  # the driver's two roles for steps 1 and 2
        return "tile" if kernel == step.kernels[0] else "offsets"
    return kernel


def emulate_scan(lib, step, x: np.ndarray, exclusive: bool, state=None, items=None,
                 out=None) -> np.ndarray:  # fmt: skip
    """Run `plan(step, n, exclusive, items)` on host arrays, as launch.py runs it on a GPU."""
    n = x.size
    launches = plan(step, n, exclusive, items)
    if out is None:
        out = np.full(n, 7, dtype=x.dtype)  # a value no prefix here takes by chance
    scratch = np.zeros(max(launches.scratch_elements, 1), dtype=x.dtype)
    if state is None:
        state = np.zeros(max(launches.state_words, 1), dtype=np.uint64)  # zeroed, as on a GPU
    buffers = {"x": x, "out": out, "scratch": scratch, "state": state}
    for call in launches.calls:
        words = []
        for arg in call.args:
            if arg[0] == "ptr":
                array = buffers[arg[1]]
                words.append(array.ctypes.data + arg[2] * array.itemsize)
            else:
                words.append(arg[1])
        packed = np.array(words, dtype=np.int64)
        name = _driver_name(step, call.kernel).encode()
        faults = lib.emulate(name, call.grid, THREADS, packed.ctypes.data)
        assert faults == 0, f"{step.name} {call.kernel}: {faults}"
    return out


def expected(x: np.ndarray, exclusive: bool) -> np.ndarray:
    """float64 prefix sums of fp32; int32 prefix sums in int64 wrapped to int32."""
    wide = x.astype(np.float64 if x.dtype == np.float32 else np.int64)
    total = np.cumsum(wide)
    if exclusive:
        total = np.concatenate([np.zeros(1, dtype=total.dtype), total[:-1]])
    return total if x.dtype == np.float32 else total.astype(np.int32)  # two's complement wrap


def _values(n: int, dtype: str, seed: int, *, integral: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "int32":  # large enough that the running sums wrap past 2^31 many times
        return rng.integers(-(2**31), 2**31, size=n, dtype=np.int64).astype(np.int32)
    if integral:  # small integers: every prefix below 2^24 is exact in fp32, in any order
        return rng.integers(-8, 9, size=n).astype(np.float32)
    return (rng.standard_normal(n) + 1.0).astype(np.float32)


@needs_gxx
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_scans_exactly_under_emulation(step, dtype, exclusive):
    """int32 bit-exact (wrapping); fp32 exact on integer-valued inputs, where any order of
    adds gives the same prefixes, so a dropped, doubled or shifted element cannot hide."""
    lib = _emulator(step, dtype)
    for n in SIZES:
        x = _values(n, dtype, seed=n, integral=True)
        got = emulate_scan(lib, step, x, exclusive)
        assert np.array_equal(got, expected(x, exclusive).astype(x.dtype)), (step.name, n)


@needs_gxx
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fp32_rounding_stays_within_the_ops_tolerance(step):
    """N(0, 1) + 1 inputs against float64: the relative norm error within op scan's bound."""
    from kernelab.spec.primitives import scan_tolerance

    lib = _emulator(step, "fp32")
    for n in (1025, 100003):
        x = _values(n, "fp32", seed=3, integral=False)
        for exclusive in (False, True):
            ref = expected(x, exclusive)
            got = emulate_scan(lib, step, x, exclusive).astype(np.float64)
            error = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert error <= scan_tolerance(n, "fp32"), (n, exclusive, error)


@needs_gxx
def test_reduce_then_scan_carries_across_chunks_of_tile_sums():
    """scan_tile_sums walks more than one 2048-sum chunk (n past 2048^2 on a GPU): 5000 sums
    here, scanned exclusive in place by the one block."""
    lib = _emulator(get_step(3), "int32")
    sums = _values(5000, "int32", seed=9, integral=True)
    want = expected(sums, exclusive=True)
    packed = np.array([sums.size, sums.ctypes.data], dtype=np.int64)
    assert lib.emulate(b"scan_tile_sums", 1, THREADS, packed.ctypes.data) == 0
    assert np.array_equal(sums, want)


@needs_gxx
def test_look_back_adds_aggregates_until_an_inclusive_prefix():
    """A stand-in for a slow predecessor chain: tiles 0-3 hand-published (tile 0 an inclusive
    prefix, 1-3 aggregates only), the counter set so the kernel's one block draws tile 4. Its
    look-back must walk 3 aggregates and stop at tile 0's prefix."""
    step = get_step(4)
    lib = _emulator(step, "int32")
    n = 5 * TILE
    x = _values(n, "int32", seed=4, integral=True)
    tile_sums = [x[t * TILE : (t + 1) * TILE].astype(np.int64).sum() for t in range(5)]
    state = np.zeros(1 + 5, dtype=np.uint64)
    state[0] = 4  # the counter: the next tile id drawn is 4
    for t in range(4):
        status = 2 if t == 0 else 1
        bits = np.int64(tile_sums[t]).astype(np.int32).view(np.uint32)
        state[1 + t] = (status << 32) | int(bits)
    out = np.zeros(n, dtype=np.int32)
    args = np.array([n, x.ctypes.data, out.ctypes.data, state.ctypes.data + 8,
                     state.ctypes.data, 0], dtype=np.int64)  # fmt: skip
    assert lib.emulate(b"scan_lookback", 1, THREADS, args.ctypes.data) == 0
    assert np.array_equal(out[4 * TILE :], expected(x, False)[4 * TILE :])
    assert int(state[5]) >> 32 == 2  # tile 4 published its inclusive prefix
    assert np.uint32(int(state[5]) & 0xFFFFFFFF).view(np.int32) == expected(x, False)[-1]


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_look_back_walks_two_windows_of_aggregates(dtype):
    """Step 5's warp-wide look-back past one window: tiles 0-39 hand-published (tile 0 an
    inclusive prefix, 1-39 aggregates only), the counter set so the one block draws tile 40.
    Lanes 0-31 sum tiles 39..8 (no prefix among them), the next window 7..0 stops at tile 0."""
    step = get_step(5)
    lib = _emulator(step, dtype)
    tile, tiles = step.tile, 41
    n = tiles * tile
    x = _values(n, dtype, seed=6, integral=True)
    wide = x.astype(np.int64)
    state = np.zeros(1 + tiles, dtype=np.uint64)
    state[0] = tiles - 1  # the next tile id drawn is 40
    for t in range(tiles - 1):
        total = wide[t * tile : (t + 1) * tile].sum()
        bits = np.array([total], dtype=np.int64).astype(x.dtype).view(np.uint32)[0]
        state[1 + t] = ((2 if t == 0 else 1) << 32) | int(bits)
    out = np.zeros(n, dtype=x.dtype)
    args = np.array([n, x.ctypes.data, out.ctypes.data, state.ctypes.data + 8,
                     state.ctypes.data, 0], dtype=np.int64)  # fmt: skip
    assert lib.emulate(b"scan_wide", 1, THREADS, args.ctypes.data) == 0
    want = expected(x, False).astype(x.dtype)
    assert np.array_equal(out[-tile:], want[-tile:])
    assert int(state[tiles]) >> 32 == 2  # tile 40 published its inclusive prefix


@needs_gxx
@pytest.mark.parametrize("items", [8, 24])
def test_wide_tile_candidates_scan_exactly(items):
    """Other tiles of step 5 (ITEM_CANDIDATES): full tiles through 16-byte loads, a partial
    last tile through the scalar path, int32 wrapping exactly."""
    step = get_step(5)
    lib = _emulator(step, "int32", items)
    n = 3 * THREADS * items + 5
    x = _values(n, "int32", seed=items, integral=True)
    for exclusive in (False, True):
        got = emulate_scan(lib, step, x, exclusive, items=items)
        assert np.array_equal(got, expected(x, exclusive)), (items, exclusive)


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_scan_off_16_byte_alignment_takes_the_scalar_path(dtype):
    """x and out one element past a 16-byte boundary (a tensor slice x[1:]): every tile goes
    through the bounds-checked scalar loads and stores, still exact; nothing is written past
    out's end (the guard element after it keeps its value)."""
    step = get_step(5)
    lib = _emulator(step, dtype)
    n = 2 * step.tile + 3
    backing = _values(n + 1, dtype, seed=11, integral=True)
    x = backing[1:]
    assert x.ctypes.data % 16 != 0
    out_backing = np.full(n + 2, 7, dtype=x.dtype)
    out = out_backing[1:-1]
    got = emulate_scan(lib, step, x, False, out=out)
    assert np.array_equal(got, expected(x, False).astype(x.dtype))
    assert out_backing[0] == 7 and out_backing[-1] == 7


# ---- plans, geometry and steps --------------------------------------------------------------


def test_plans_move_the_bytes_each_step_claims():
    """Launch counts and scratch for n = 2^26: steps 1-2 recurse, 3 is three kernels, 4 one."""
    n = 1 << 26
    counts = [len(plan(s, n, False).calls) for s in STEPS]
    assert counts == [7, 5, 3, 1, 1]  # 256^3 < 2^26 <= 256^4: 4 levels; 512: 3 levels
    assert plan(STEPS[3], n, False).state_words == 1 + n // TILE
    assert plan(STEPS[4], n, False).state_words == 1 + n // (2 * TILE)  # 4096-element tiles
    assert plan(STEPS[4], n, False, items=24).calls[0].grid == -(-n // (THREADS * 24))
    assert plan(STEPS[2], n, True).scratch_elements == n // TILE
    for step in STEPS:
        for n in (1, TILE, TILE + 1):
            assert plan(step, n, False).calls[0].grid == -(-n // step.tile)
    with pytest.raises(KernelabError):
        plan(STEPS[0], MAX_N, False)


def test_steps_are_named_in_order_and_each_names_its_proof():
    assert [s.name for s in STEPS] == ["scan:01", "scan:02", "scan:03", "scan:04", "scan:05"]
    assert [s.number for s in parse_steps("2-4")] == [2, 3, 4]
    for step in STEPS:
        assert (SOURCE_DIR / step.file).is_file()
        assert step.proof.startswith(("smsp__", "dram__")) and step.fixes and step.technique
        text = (SOURCE_DIR / step.file).read_text()
        assert all(kernel in text for kernel in step.kernels)
    with pytest.raises(KernelabError):
        get_step("6")
    with pytest.raises(KernelabError, match="fixed tile"):
        plan(get_step(4), 100, False, items=16)
    with pytest.raises(KernelabError, match="items must be one of"):
        plan(get_step(5), 100, False, items=10)


def test_profiled_steps_sum_every_launch_of_their_kernels():
    """Stand-in ncu rows: step 1's three levels and offsets, step 2's launches, step 3's three
    kernels summed; a step whose kernels were not profiled has no value (MISSING), and the
    verdict compares each step's proof with the same metric of the step before."""
    from types import SimpleNamespace

    from kernelab.ladders.scan.ladder import step_totals
    from kernelab.ladders.scan.steps import DRAM_BYTES, SHARED_STORES

    def launch(name, stores, dram):
        values = {SHARED_STORES: stores, DRAM_BYTES: dram}
        return SimpleNamespace(name=name, metric=lambda metric: values.get(metric))

    kernels = [
        launch("scan_hillis_steele_f32", 900, 40), launch("scan_hillis_steele_f32", 9, 1),
        launch("scan_hillis_steele_offsets_f32", 0, 40), launch("scan_hillis_steele_i32", 1, 1),
        launch("scan_blelloch_f32", 480, 40), launch("scan_blelloch_offsets_f32", 0, 40),
        launch("scan_reduce_tiles_f32", 10, 20), launch("scan_tile_sums_f32", 5, 1),
        launch("scan_tiles_seeded_f32", 500, 40),
    ]  # fmt: skip
    rows = step_totals(STEPS[:4], kernels, "fp32", [DRAM_BYTES, SHARED_STORES])
    assert [r["launches"] for r in rows] == [3, 2, 3, 0]
    assert [r["value"] for r in rows] == [909, 480, 61, None]
    assert [r["previous"] for r in rows] == [None, 909, 80, 61]
    assert [r["verdict"] for r in rows] == ["PASS", "PASS", "PASS", "MISSING"]
    rows = step_totals(STEPS[1:3], kernels[4:6] + [launch("scan_reduce_tiles_f32", 0, 90)] +
                       kernels[7:], "fp32", [DRAM_BYTES, SHARED_STORES])  # fmt: skip
    assert rows[1]["value"] == 131 and rows[1]["verdict"] == "FAIL"  # 131 bytes after 80


# ---- bad input: one line, before anything compiles ------------------------------------------


torch = pytest.importorskip("torch")


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("reached the compiler with bad input")

    monkeypatch.setattr(scan_launch, "build_step", refuse)


@pytest.mark.parametrize(
    "x, words",
    [
        (lambda: torch.zeros(9, dtype=torch.float64), "torch.float64"),
        (lambda: torch.zeros(9, dtype=torch.int64), "torch.int64"),
        (lambda: torch.zeros(9, dtype=torch.bfloat16), "torch.bfloat16"),
        (lambda: torch.zeros(3, 3), "1-D"),
        (lambda: torch.zeros(9), "CUDA"),
        (lambda: torch.zeros(0), "CUDA"),
        (lambda: torch.zeros(9, 2)[:, 0], "CUDA"),
        (lambda: [1.0, 2.0], "torch.Tensor"),
    ],
    ids=["fp64", "int64", "bf16", "2d", "cpu", "empty-cpu", "strided-cpu", "list"],
)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_bad_input_is_one_line_before_compiling(no_compile, step, x, words):
    with pytest.raises(KernelabError) as raised:
        scan(step, x())
    message = str(raised.value)
    assert words in message and "\n" not in message


def test_exclusive_must_be_a_bool(no_compile):
    with pytest.raises(KernelabError, match="exclusive"):
        scan(1, torch.zeros(4), exclusive="yes")


def test_n_past_the_supported_range_is_one_line(no_compile, monkeypatch):
    """2^38 elements is refused in one line (checked by count, without allocating them)."""
    monkeypatch.setattr(scan_launch, "MAX_N", 10)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with pytest.raises(KernelabError, match="2\\^38"):
        scan(1, torch.zeros(10))


# ---- the op: references, tolerance, cost ----------------------------------------------------


def test_the_fp32_reference_is_a_float64_cumsum_and_int32_wraps():
    from kernelab.spec.reference import get_op

    spec = get_op("scan")
    x, exclusive = spec.make_inputs({"n": 1025}, "fp32", seed=5)
    assert exclusive is False and x.dtype == torch.float32
    ref = spec.reference(x, False)
    assert ref.dtype == torch.float64
    assert np.allclose(ref.numpy(), expected(x.numpy(), False), rtol=0, atol=0)
    assert np.array_equal(spec.reference(x, True).numpy(), expected(x.numpy(), True))
    ints, _ = spec.make_inputs({"n": 1025}, "int32", seed=5)
    assert ints.dtype == torch.int32
    want = expected(ints.numpy(), False)
    assert np.array_equal(spec.reference(ints, False).numpy(), want)
    assert (np.abs(np.cumsum(ints.numpy().astype(np.int64))) >= 2**31).any()  # it does wrap
    assert torch.equal(spec.torch_eager(ints, False), torch.from_numpy(want))


def test_the_tolerance_grows_with_the_chain_and_catches_a_shifted_scan():
    from kernelab.spec.primitives import scan_tolerance

    assert scan_tolerance(1 << 26, "fp32") > scan_tolerance(1 << 10, "fp32") > 0
    assert scan_tolerance(100, "int32") == 0.0
    n = 1 << 16
    x = _values(n, "fp32", seed=1, integral=False)
    ref = expected(x, False)
    shifted = np.concatenate([[0.0], ref[:-1]])  # the exclusive scan where inclusive was asked
    assert np.linalg.norm(shifted - ref) / np.linalg.norm(ref) > scan_tolerance(n, "fp32")


def test_cost_reads_and_writes_n():
    from kernelab.spec.reference import get_op

    floating = get_op("scan").cost({"n": 1 << 20}, "fp32")
    assert floating.bytes == 2 * 4 * (1 << 20) and floating.flops == (1 << 20) - 1
    integer = get_op("scan").cost({"n": 1 << 20}, "int32")  # integer adds are not FLOPs
    assert integer.bytes == floating.bytes and integer.flops == 0
