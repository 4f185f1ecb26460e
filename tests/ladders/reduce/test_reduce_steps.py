"""The sum-reduction ladder without a GPU.

With nvcc: every step compiles for sm_90 in every dtype with no spills, and step 9 (and 10)
read with 128-bit loads (LDG.E.128 in the SASS, through Triton's bundled cuobjdump).
With g++: every step's kernels run on the CPU under tests/cuda_host_emulation.hpp, pass by
pass as launch.py plans them, at awkward n in fp32 against a float64 sum; a misaligned
start exercises the vector steps' scalar head.
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


def _emulator(step) -> ctypes.CDLL:
    """Compile `step` with the reduction driver for the CPU (cached by content) and load it."""
    flags = [f"-DKERNEL={step.kernel}", f'-DSTEP_SOURCE="{REDUCE_DIR / step.file}"']
    flags += ["-DONE_PASS"] if step.one_pass else []
    lib = emulated_library(f"reduce-{step.slug}", REDUCE_DIR, [DRIVER], flags,
                           depends=(REDUCE_DIR / step.file,))  # fmt: skip
    ptr, u32, i64 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_longlong
    last = [ptr, ptr] if step.one_pass else [ctypes.c_int]
    lib.emulate.argtypes = [u32, u32, ptr, i64, ptr, *last]
    return lib


def _emulated_sum(lib, step, x: np.ndarray, passes=None) -> tuple[float, int]:
    """Run every pass of `step` over x (fp32) as launch.py would; (sum, faults)."""
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


def _bound(n: int) -> float:
    """fp32 accumulation error relative to sum |x|: at most a chain of n terms (2^-24 each)
    and the tree's log2 levels; the emulated sizes keep chains short, so this is loose."""
    return (n + 64) * 2.0**-24


@needs_gxx
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_at_awkward_n_under_emulation(step):
    lib = _emulator(step)
    rng = np.random.default_rng(step.number)
    for n in AWKWARD_N:
        x = (rng.standard_normal(n) + 1.0).astype(np.float32)
        got, faults = _emulated_sum(lib, step, x)
        ref = x.astype(np.float64).sum()
        assert faults == 0, (step.name, n)
        scale = np.abs(x.astype(np.float64)).sum()
        assert abs(got - ref) <= _bound(n) * scale, (step.name, n, got, ref)


@needs_gxx
@pytest.mark.parametrize("step", [s for s in STEPS if s.vector_loads], ids=lambda s: s.name)
@pytest.mark.parametrize("offset", (1, 2, 3))
def test_vector_steps_read_a_misaligned_start_element_by_element(step, offset):
    """x starting 4, 8 or 12 bytes past a 16-byte boundary: the scalar head takes the first
    elements, the 16-byte loads stay aligned (a misaligned one is an emulated fault)."""
    lib = _emulator(step)
    rng = np.random.default_rng(offset)
    base = (rng.standard_normal(4099) + 1.0).astype(np.float32)
    assert base.ctypes.data % 16 == 0
    for n in (1, 2, 3, 5, 4099 - offset):
        x = base[offset : offset + n]
        got, faults = _emulated_sum(lib, step, x)
        ref = x.astype(np.float64).sum()
        assert faults == 0, (step.name, offset, n)
        assert abs(got - ref) <= _bound(n) * np.abs(x).sum(), (step.name, offset, n)


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
