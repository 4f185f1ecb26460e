"""The sum-reduction ladder without a GPU.

With nvcc: every step compiles for sm_90 in every dtype with no spills, and step 9 (and 10)
read with 128-bit loads (LDG.E.128 in the SASS, through Triton's bundled cuobjdump).
With g++: every step's kernels run on the CPU under tests/cuda_host_emulation.hpp, pass by
pass as launch.py plans them, at awkward n in fp32, bf16 and fp16 (the emulation header's
16-bit types, converted as CUDA converts them) against the float64 sum of the same values,
held to the checker's tolerance for the dtype; a misaligned start exercises the vector
steps' scalar head, and a NaN or an inf anywhere in the input reaches the sum.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library  # noqa: E402

from kernelab.ladders.reduce import STEPS, build_step, get_step
from kernelab.ladders.reduce.steps import BLOCK, DTYPES, MAX_GRID, parse_steps
from kernelab.runtime.cuda import build as cuda_build
from kernelab.runtime.cuda.sass import find_tool, opcode_counts

REDUCE_DIR = Path(__file__).parents[3] / "src" / "kernelab" / "ladders" / "reduce"
TESTS = Path(__file__).parents[2]
DRIVER = Path(__file__).parent / "reduce_emulation_driver.cpp"

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")
needs_cuobjdump = pytest.mark.skipif(find_tool("cuobjdump") is None, reason="needs cuobjdump")

AWKWARD_N = (1, 2, 31, 33, 255, 257, 1023, 100003)
# The 16-bit dtypes at the same awkward sizes, the largest a smaller prime: it still spans
# many blocks and a second pass in every two-pass step (79 blocks of 256), and the emulated
# threads stay within the suite's time (a 256-thread block is 256 host threads).
AWKWARD_N_16 = (1, 2, 31, 33, 255, 257, 1023, 4099, 20011)


# ---- compiled by nvcc ----------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_without_spills(step, dtype):
    built = build_step(step, dtype)
    kernels = [step.kernel] if step.one_pass else [step.kernel, step.partials_kernel]
    for kernel in kernels:
        report = built.report(kernel)
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, (kernel, report)
        assert report.stack_frame_bytes == 0, (kernel, report)
        assert 0 < report.registers <= 255


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_steps_load_16_bytes_and_the_others_do_not(dtype):
    for step in STEPS:
        counts = opcode_counts(build_step(step, dtype).cubin, step.kernel)
        wide = sum(n for op, n in counts.items() if op.startswith("LDG") and ".128" in op)
        if step.vector_loads:
            assert wide > 0, (step.name, dtype, counts)
        else:
            assert wide == 0, (step.name, dtype, counts)


@needs_nvcc
@needs_cuobjdump
def test_shuffle_steps_use_shfl_and_one_pass_uses_an_atomic():
    for step in STEPS:
        counts = opcode_counts(build_step(step).cubin, step.kernel)
        shuffles = sum(n for op, n in counts.items() if op.startswith("SHFL.DOWN"))
        assert (shuffles > 0) == (step.number >= 8), (step.name, counts)
        atomics = sum(n for op, n in counts.items() if op.startswith(("ATOM", "RED")))
        assert (atomics > 0) == step.one_pass, (step.name, counts)


@needs_nvcc
def test_a_bad_dtype_is_one_line():
    from kernelab.errors import KernelabError

    with pytest.raises(KernelabError, match="dtype"):
        build_step(STEPS[0], "fp64")


# ---- the plan: grids and passes ------------------------------------------------------------


def test_steps_are_numbered_and_described():
    assert [s.number for s in STEPS] == list(range(1, 11))
    for step in STEPS:
        assert (REDUCE_DIR / step.file).is_file()
        assert step.file.startswith(f"{step.number:02d}_")
        assert step.technique and step.fixes and step.metric and step.expected_speedup > 0
        text = (REDUCE_DIR / step.file).read_text()
        assert f"reduce_{step.number:02d}" in text
        assert "Bytes:" in text  # the byte accounting, in every file
    assert STEPS[0].expected_speedup == 1.0
    assert [s.name for s in parse_steps("3-5")] == ["reduce:03", "reduce:04", "reduce:05"]
    assert get_step("reduce:09").slug == "vector_loads"


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("n", (1, 2, 255, 256, 257, 512, 513, 10**6, 2**31 + 7, 2**33))
def test_passes_cover_every_element_and_end_in_one_value(step, n):
    passes = step.passes(n)
    assert passes[0][0] == n
    for (count, launch), following in zip(passes, passes[1:] + [None], strict=True):
        blocks = launch.grid[0]
        assert launch.block == (BLOCK, 1, 1)
        if step.elements_per_block:
            assert (
                blocks * step.elements_per_block >= count > (blocks - 1) * step.elements_per_block
            )
        else:
            assert blocks <= MAX_GRID
            # a grid-stride thread's chain stays within the tolerance's K_MAX = 65536
            assert -(-count // (blocks * BLOCK)) <= 65536
        if following is not None:
            assert following[0] == blocks
    if step.one_pass:
        assert len(passes) == 1
    else:
        assert passes[-1][1].grid[0] == 1


def test_grid_past_cuda_limit_is_one_line():
    from kernelab.errors import KernelabError

    with pytest.raises(KernelabError, match="grid-stride"):
        get_step(1).passes(2**40)
    assert get_step(7).passes(2**40)[0][1].grid[0] == MAX_GRID


# ---- run on the CPU under host emulation ---------------------------------------------------

# How each dtype travels to the emulated kernels: its storage as numpy holds it (bf16 as its
# 16 bits) and the -DREDUCE_DTYPE the nvcc build uses (steps.DTYPE_DEFINES).
STORAGE = {"fp32": np.float32, "bf16": np.uint16, "fp16": np.float16}
ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def _emulator(step, dtype: str = "fp32") -> ctypes.CDLL:
    """Compile `step` for inputs of `dtype` with the reduction driver for the CPU (cached by
    content) and load it."""
    from kernelab.ladders.reduce.steps import DTYPE_DEFINES

    flags = [f"-DKERNEL={step.kernel}", f'-DSTEP_SOURCE="{REDUCE_DIR / step.file}"',
             f"-DREDUCE_DTYPE={DTYPE_DEFINES[dtype]}"]  # fmt: skip
    flags += ["-DONE_PASS"] if step.one_pass else []
    lib = emulated_library(f"reduce-{step.slug}-{dtype}", REDUCE_DIR, [DRIVER], flags,
                           depends=(REDUCE_DIR / step.file,))  # fmt: skip
    ptr, u32, i64 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_longlong
    last = [ptr, ptr] if step.one_pass else [ctypes.c_int]
    lib.emulate.argtypes = [u32, u32, ptr, i64, ptr, *last]
    return lib


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (finite inputs; NaN stays NaN)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    rounded[nan] = 0x7FC0
    return rounded


def _as_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """x (float32) stored as `dtype` (STORAGE)."""
    if dtype == "bf16":
        return _to_bf16_bits(x)
    return x.astype(STORAGE[dtype])


def _values(stored: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values a stored array holds: the reference's input (exact for every dtype:
    a bf16's bits are the top half of the fp32 with the same value)."""
    if dtype == "bf16":
        wide = stored.astype(np.uint32) << 16
        return wide.view(np.float32).astype(np.float64)
    return stored.astype(np.float64)


def _emulated_sum(lib, step, x: np.ndarray, passes=None) -> tuple[float, int]:
    """Run every pass of `step` over x (stored as its dtype) as launch.py would; (sum, faults)."""
    passes = passes or step.passes(x.size)
    out = np.full(1, np.nan, np.float32)
    faults = 0
    if step.one_pass:
        ((count, launch),) = passes
        partials = np.full(launch.grid[0], np.nan, np.float32)
        counter = np.zeros(1, np.uint32)
        faults += lib.emulate(launch.grid[0], launch.block[0], x.ctypes.data, count,
                              out.ctypes.data, partials.ctypes.data, counter.ctypes.data)  # fmt: skip
        assert counter[0] == 0  # the last block leaves the ticket counter ready for reuse
        return float(out[0]), faults
    source = x
    for index, (count, launch) in enumerate(passes):
        last = index == len(passes) - 1
        target = out if last else np.full(launch.grid[0], np.nan, np.float32)
        faults += lib.emulate(launch.grid[0], launch.block[0], source.ctypes.data, count,
                              target.ctypes.data, int(index > 0))  # fmt: skip
        source = target
    return float(out[0]), faults


def _threshold(dtype: str) -> float:
    """The checker's threshold on the relative error for inputs of `dtype`: the output is
    fp32 for every input dtype (fp32 accumulation; spec.primitives), as on the GPU."""
    from kernelab.harness.tolerances import tolerance

    return tolerance(dtype, None, "fp32").threshold


def _relative_error(got: float, ref: float) -> float:
    """|got - ref| / |ref|, the checker's relative norm error of a scalar; NaN never passes."""
    if not np.isfinite(got):
        return float("inf")
    return abs(got - ref) / abs(ref) if ref else abs(got)


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_at_awkward_n_under_emulation(step, dtype):
    lib = _emulator(step, dtype)
    rng = np.random.default_rng(step.number)
    threshold = _threshold(dtype)
    for n in AWKWARD_N if dtype == "fp32" else AWKWARD_N_16:
        # N(0, 1) + 1, as the op draws: a sum near n, far from zero (spec.primitives)
        x = _as_dtype((rng.standard_normal(n) + 1.0).astype(np.float32), dtype)
        got, faults = _emulated_sum(lib, step, x)
        ref = _values(x, dtype).sum()
        assert faults == 0, (step.name, dtype, n)
        error = _relative_error(got, ref)
        assert error <= threshold, (step.name, dtype, n, got, ref, error, threshold)
        # and within fp32's own accumulation bound, relative to sum |x|
        assert abs(got - ref) <= _bound(n) * np.abs(_values(x, dtype)).sum()


def _bound(n: int) -> float:
    """fp32 accumulation error relative to sum |x|: at most a chain of n terms (2^-24 each)
    and the tree's log2 levels; the emulated sizes keep chains short, so this is loose."""
    return (n + 64) * 2.0**-24


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_a_nan_or_an_inf_anywhere_reaches_the_sum(step, dtype):
    """A NaN never passes as a number: one NaN (or +inf) in the head, the body or the last
    element of the input makes the sum NaN (or +inf), in every dtype."""
    lib = _emulator(step, dtype)
    n = 1027  # two blocks of the blocked steps, a scalar tail for the vector steps
    for special, check in ((np.nan, np.isnan), (np.inf, lambda v: v == np.inf)):
        for where in (0, 3, 600, n - 1):
            values = np.ones(n, np.float32)
            values[where] = special
            got, faults = _emulated_sum(lib, step, _as_dtype(values, dtype))
            assert faults == 0 and check(got), (step.name, dtype, special, where, got)


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", [s for s in STEPS if s.vector_loads], ids=lambda s: s.name)
def test_vector_steps_read_a_misaligned_start_element_by_element(step, dtype):
    """x starting 1 to 3 fp32 (1 to 7 bf16 or fp16) elements past a 16-byte boundary: the
    scalar head takes the first elements, the 16-byte loads stay aligned (a misaligned one
    is an emulated fault)."""
    lib = _emulator(step, dtype)
    threshold = _threshold(dtype)
    per_pack = 16 // ITEMSIZE[dtype]
    rng = np.random.default_rng(per_pack)
    size = 4099
    # a 16-byte aligned buffer: numpy's own alignment is only the item size's
    raw = np.zeros(size * ITEMSIZE[dtype] + 16, np.uint8)
    start = (-raw.ctypes.data) % 16
    base = raw[start : start + size * ITEMSIZE[dtype]].view(STORAGE[dtype])
    base[:] = _as_dtype((rng.standard_normal(size) + 1.0).astype(np.float32), dtype)
    assert base.ctypes.data % 16 == 0
    for offset in range(1, per_pack):
        for n in (1, 2, 3, 5, per_pack + 1, size - offset):
            x = base[offset : offset + n]
            got, faults = _emulated_sum(lib, step, x)
            ref = _values(x, dtype).sum()
            assert faults == 0, (step.name, dtype, offset, n)
            assert _relative_error(got, ref) <= threshold, (step.name, dtype, offset, n)


@needs_gxx
def test_emulation_catches_a_short_grid():
    """The check can fail: step 3 with one block too few leaves elements out of the sum."""
    step = get_step(3)
    lib = _emulator(step)
    x = np.ones(1000, np.float32)
    (count, launch), _ = step.passes(1000)
    short = type(launch)((launch.grid[0] - 1, 1, 1), launch.block)
    finish = step.passes(short.grid[0])  # one block over the short grid's partials
    got, faults = _emulated_sum(lib, step, x, [(count, short), *finish])
    assert faults == 0 and got != 1000.0


@needs_gxx
def test_emulation_catches_a_bf16_input_read_as_fp16():
    """The check can fail in the narrow dtypes: bf16 bits summed by the fp16 build are other
    numbers entirely, far outside the tolerance."""
    step = get_step(9)
    x = _as_dtype((np.random.default_rng(0).standard_normal(1000) + 1.0).astype(np.float32),
                  "bf16")  # fmt: skip
    got, faults = _emulated_sum(_emulator(step, "fp16"), step, x)
    assert faults == 0
    assert _relative_error(got, _values(x, "bf16").sum()) > _threshold("bf16")
