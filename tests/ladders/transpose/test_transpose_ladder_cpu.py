"""The transpose ladder without a GPU: every step compiles for sm_90 with no spills, every
step's logic is exact under host emulation (tests/cuda_host_emulation.hpp) at awkward shapes
in fp32 and bf16, bad input gets one line before any compile, and the op's reference is the
exact transpose.

Under emulation each CUDA thread is a std::thread and __syncthreads a barrier, so a missing
barrier, a wrong edge guard or a swizzle that does not invert shows up as a wrong element.
bf16 is moved as its 16 bits: the check is bit-exact.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library, sparse_zeros  # noqa: E402

from kernelab.errors import KernelabError
from kernelab.ladders.transpose import STEPS, build_step, get_step, transpose
from kernelab.ladders.transpose import launch as transpose_launch
from kernelab.ladders.transpose.steps import BLOCK_ROWS, DTYPES, TILE, parse_steps
from kernelab.runtime.cuda import build as cuda_build

TESTS = Path(__file__).parents[2]
HERE = Path(__file__).parent
SOURCE_DIR = cuda_build.KERNEL_DIR / "ladders" / "transpose"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

AWKWARD = [(1, 1), (1, 33), (33, 1), (31, 65), (127, 129)]
# Step 5 moves pairs: even sides take its wide loads (cols) and stores (rows), odd ones the
# element path, and 64 is its tile.
PAIRED = [(2, 2), (1, 64), (64, 1), (64, 64), (1, 65), (63, 129), (66, 130), (130, 66)]
NUMPY_TYPE = {"fp32": np.float32, "bf16": np.uint16}  # bf16 as its bits
C_TYPE = {"fp32": "float", "bf16": "unsigned short"}


# ---- nvcc: every step builds for sm_90, both dtype entries, no spills ---------------------


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_for_sm90_without_spills(step):
    built = build_step(step, arch="sm_90")
    for dtype in DTYPES:
        report = built.report(step.kernel_for(dtype))
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report
        assert report.registers > 0
    # The tile's shared memory is what the step claims: none, 32 x 32 elements, or 32 rows of
    # 32 elements and one 4-byte bank word.
    fp32_bytes, bf16_bytes = step.shared_bytes
    assert built.report(step.kernel_for("fp32")).shared_bytes == fp32_bytes
    assert built.report(step.kernel_for("bf16")).shared_bytes == bf16_bytes


@needs_nvcc
@pytest.mark.parametrize("dtype, wide", [("bf16", "LDG.E.CONSTANT"), ("fp32", "LDG.E.64.CONSTANT")])
def test_wide_step_issues_its_8_pair_loads_before_the_first_shared_store(dtype, wide):
    """Step 5's SASS for sm_90: 8 pair loads a thread (4-byte bf16 pairs, 8-byte fp32 ones),
    every one issued before the first shared store, so 8 are in flight before the barrier;
    stores and shared accesses a pair wide; 32 registers, 8 blocks of 256 threads an SM."""
    from kernelab.runtime.cuda import sass

    if sass.find_tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    step = get_step("wide")
    built = build_step(step, arch="sm_90")
    kernel = step.kernel_for(dtype)
    assert built.report(kernel).registers <= 32
    ops = sass.functions(sass.disassemble(built.cubin))[kernel]
    unit = "" if dtype == "bf16" else ".64"
    first_store = ops.index(f"STS{unit}")
    assert ops[:first_store].count(wide) == 8 and ops.count(wide) == 8
    assert ops.count(f"STS{unit}") == 8 and ops.count(f"LDS{unit}") == 16  # wide + element path
    assert ops.count(f"STG.E{unit}") == 8 and "BAR.SYNC.DEFER_BLOCKING" in ops


# ---- host emulation: exact at awkward shapes ----------------------------------------------


def _emulator(step, dtype: str) -> ctypes.CDLL:
    flags = [f"-DKERNEL={step.kernel_for(dtype)}", f"-DELEM={C_TYPE[dtype]}"]
    lib = emulated_library(f"transpose-{step.slug}-{dtype}", SOURCE_DIR,
                           [SOURCE_DIR / step.file, HERE / "emulation_driver.cpp"], flags)  # fmt: skip
    lib.emulate.argtypes = [ctypes.c_uint] * 4 + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 2
    lib.emulate_blocks.restype = ctypes.c_int
    lib.emulate_blocks.argtypes = [ctypes.c_uint] * 8 + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 2
    return lib


def _run(lib, step, x: np.ndarray) -> tuple[int, np.ndarray]:
    rows, cols = x.shape
    launch = step.launch(rows, cols)
    # Start from a marker no input holds, so an element the kernel forgets shows.
    out = np.full((cols, rows), 0x7FC1 if x.dtype == np.uint16 else np.nan, dtype=x.dtype)
    faults = lib.emulate(
        launch.grid[0], launch.grid[1], launch.block[0], launch.block[1], rows, cols,
        x.ctypes.data, out.ctypes.data,
    )  # fmt: skip
    return faults, out


def _data(rows, cols, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bf16":  # finite bf16 bit patterns, none equal to the marker
        return rng.integers(0, 0x7F00, size=(rows, cols), dtype=np.uint16)
    return rng.standard_normal((rows, cols)).astype(np.float32)


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_exact_on_awkward_shapes_under_emulation(step, dtype):
    lib = _emulator(step, dtype)
    for rows, cols in AWKWARD + PAIRED:
        x = _data(rows, cols, dtype, rows * 1000 + cols)
        faults, out = _run(lib, step, x)
        assert faults == 0
        reference = x.astype(np.float64).T if dtype == "fp32" else x.T
        assert np.array_equal(out, reference), f"{step.name} {dtype} {rows}x{cols}"


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_offsets_past_2_to_the_32_under_emulation(step, dtype):
    """The offsets past 32 bits, on the CPU: a 2^17 x (2^15 + 3) matrix (2^32 + 393,216
    elements) in sparse buffers (only the touched pages exist), and only the grid's last two
    tiles of its last tile row run. Their reads (row x cols + col) and writes (col x rows +
    row) straddle element 2^32; an offset computed in 32 bits would read or write elsewhere
    (the zeros of an untouched page, or outside the buffer)."""
    rows, cols = 1 << 17, (1 << 15) + 3
    x = sparse_zeros(rows * cols, NUMPY_TYPE[dtype])
    out = sparse_zeros(rows * cols, NUMPY_TYPE[dtype])
    if x is None or out is None:
        pytest.skip("the system refuses a sparse 2^32-element mapping")
    x, out = x.reshape(rows, cols), out.reshape(cols, rows)
    side = step.side
    x[-side:] = _data(side, cols, dtype, 7) + (1 if dtype == "bf16" else 4.0)  # no zeros
    launch = step.launch(rows, cols)
    gx, gy = launch.grid[0], launch.grid[1]
    assert (gx - 2) * side * rows < 2**32 < rows * cols - 1  # the tiles straddle 2^32
    lib = _emulator(step, dtype)
    faults = lib.emulate_blocks(gx, gy, gx - 2, gx, gy - 1, gy, TILE, BLOCK_ROWS, rows, cols,
                                x.ctypes.data, out.ctypes.data)  # fmt: skip
    assert faults == 0
    first = (gx - 2) * side
    got, want = out[first:, -side:], x[-side:, first:].T
    assert (want != 0).all() and np.array_equal(got, want), f"{step.name} {dtype}"


@needs_gxx
def test_emulation_catches_a_launch_that_misses_tiles():
    """The check can fail: one tile too few down the rows leaves the last rows unwritten."""
    step = get_step("padded")
    lib = _emulator(step, "fp32")
    x = _data(33, 40, "fp32", 1)
    launch = step.launch(33, 40)
    out = np.full((40, 33), np.nan, np.float32)
    lib.emulate(launch.grid[0], launch.grid[1] - 1, TILE, BLOCK_ROWS, 33, 40,
                x.ctypes.data, out.ctypes.data)  # fmt: skip
    assert np.isnan(out[:, 32]).all() and not np.isnan(out[:, :32]).any()


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1025, 2047), (1024, 2048)], ids=["odd", "even"])
def test_wide_step_is_exact_at_the_benchmark_scale_under_emulation(dtype, shape):
    """Step 5 at a shape like the benchmark's 4097x8191 (the same remainders of its 64 x 64
    tile: a last tile of one row and of 63 columns; the odd sides take the element paths),
    and an even twin (every load and store a pair), at a quarter of the side for the CPU."""
    step = get_step("wide")
    rows, cols = shape
    x = _data(rows, cols, dtype, 11)
    faults, out = _run(_emulator(step, dtype), step, x)
    assert faults == 0
    assert np.array_equal(out, x.T), f"{rows}x{cols} {dtype}"


def _misaligned(a: np.ndarray) -> np.ndarray:
    """a's values in a buffer that starts one element past a pair boundary."""
    flat = np.empty(a.size + 1, a.dtype)
    assert flat.ctypes.data % 16 == 0  # numpy's allocations: aligned, so + 1 element is not
    view = flat[1:].reshape(a.shape)
    view[...] = a
    return view


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", ["in", "out"])
def test_wide_step_moves_elements_when_a_pointer_starts_mid_pair(dtype, side):
    """Even sides but a pointer one element past a pair boundary (a view into a larger
    tensor): that side must move single elements. Under emulation a misaligned wide access
    is a fault, as it is on the GPU, so dropping the alignment test fails here."""
    step = get_step("wide")
    lib = _emulator(step, dtype)
    rows, cols = 66, 130
    x = _data(rows, cols, dtype, 5)
    if side == "in":
        x = _misaligned(x)
    out = np.full((cols, rows), 0x7FC1 if dtype == "bf16" else np.nan, NUMPY_TYPE[dtype])
    if side == "out":
        out = _misaligned(out)
    launch = step.launch(rows, cols)
    faults = lib.emulate(launch.grid[0], launch.grid[1], TILE, BLOCK_ROWS, rows, cols,
                         x.ctypes.data, out.ctypes.data)  # fmt: skip
    assert faults == 0
    assert np.array_equal(out, x.T)


# ---- geometry and steps -------------------------------------------------------------------


def test_geometry_covers_every_element_once():
    for rows, cols in [*AWKWARD, (8192, 8192), (65, 1)]:
        launch = STEPS[0].launch(rows, cols)
        assert launch.block == (TILE, BLOCK_ROWS, 1)
        assert launch.grid[0] * TILE >= cols > (launch.grid[0] - 1) * TILE
        assert launch.grid[1] * TILE >= rows > (launch.grid[1] - 1) * TILE


def test_steps_are_named_in_order_and_each_names_its_proof():
    assert [s.name for s in STEPS] == [f"transpose:0{i}" for i in range(1, 6)]
    assert [s.name for s in parse_steps("2-3")] == ["transpose:02", "transpose:03"]
    for step in STEPS:
        assert (SOURCE_DIR / step.file).is_file()
        assert step.proof.startswith(("l1tex__", "lts__")) and step.fixes and step.technique
    assert get_step("padded").proof.startswith("l1tex__data_bank_conflicts")
    assert get_step("wide").proof.startswith("l1tex__t_requests_pipe_lsu_mem_global_op_ld")
    assert get_step("wide").direction == "down" and get_step("wide").side == 2 * TILE
    with pytest.raises(KernelabError):
        get_step("06")


def test_too_many_row_tiles_is_one_line():
    with pytest.raises(KernelabError, match="gridDim.y"):
        STEPS[0].launch(65536 * TILE, 1)
    wide = get_step("wide")  # 64-row tiles: twice the rows fit
    assert wide.launch(65535 * 2 * TILE, 1).grid[1] == 65535
    with pytest.raises(KernelabError, match="gridDim.y"):
        wide.launch(65535 * 2 * TILE + 1, 1)


def test_the_wide_step_launches_one_block_per_64_x_64_tile():
    wide = get_step("wide")
    for rows, cols in [*AWKWARD, *PAIRED, (8192, 8192), (4097, 8191)]:
        launch = wide.launch(rows, cols)
        assert launch.block == (TILE, BLOCK_ROWS, 1)
        assert launch.grid[0] * 64 >= cols > (launch.grid[0] - 1) * 64
        assert launch.grid[1] * 64 >= rows > (launch.grid[1] - 1) * 64
    assert wide.metadata()["tiles"] == {"tile": 64, "block_rows": 8, "threads": 256}


# ---- bad input: one line, before anything compiles ----------------------------------------


torch = pytest.importorskip("torch")


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("reached the compiler with bad input")

    monkeypatch.setattr(transpose_launch, "build_step", refuse)


@pytest.mark.parametrize(
    "x, words",
    [
        (lambda: torch.randn(4, 5, dtype=torch.float64), "torch.float64"),
        (lambda: torch.ones(4, 5, dtype=torch.int32), "torch.int32"),
        (lambda: torch.randn(4, 5, dtype=torch.float16), "torch.float16"),
        (lambda: torch.randn(4, 5, 6), "2-D"),
        (lambda: torch.randn(4, 5), "CUDA"),  # a CPU tensor
        (lambda: torch.randn(0, 5), "CUDA"),  # empty, still on the CPU
        (lambda: torch.randn(4, 10)[:, ::2], "CUDA"),  # non-contiguous
        (lambda: [[1.0]], "torch.Tensor"),
    ],
    ids=["fp64", "int32", "fp16", "3-D", "cpu", "empty-cpu", "strided-cpu", "list"],
)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_bad_input_is_one_line_before_compiling(no_compile, step, x, words):
    with pytest.raises(KernelabError) as raised:
        transpose(step, x())
    message = str(raised.value)
    assert words in message and "\n" not in message


# ---- the op: exact float64 reference, costs ----------------------------------------------


def test_the_reference_is_the_exact_transpose():
    from kernelab.spec.reference import get_op

    spec = get_op("transpose")
    for dtype in ("fp32", "bf16"):
        (x,) = spec.make_inputs({"rows": 31, "cols": 65}, dtype, seed=3)
        ref = spec.reference(x)
        assert ref.dtype == torch.float64 and ref.shape == (65, 31)
        assert torch.equal(ref, x.double().t())
        assert torch.equal(spec.torch_eager(x).double(), ref)
        assert spec.torch_eager(x).is_contiguous()


def test_cost_is_one_read_and_one_write():
    from kernelab.spec.reference import get_op

    cost = get_op("transpose").cost({"rows": 8192, "cols": 8192}, "bf16")
    assert cost.bytes == 2 * 8192 * 8192 * 2 and cost.flops == 0


# ---- the bank arithmetic of each step's column walk ----------------------------------------

BANKS, WORD = 32, 4


def _wavefronts(addresses: list[int]) -> int:
    """Shared-memory passes a warp's access needs: the most distinct words in one bank."""
    words_in_bank: dict[int, set[int]] = {}
    for address in addresses:
        word = address // WORD
        words_in_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in words_in_bank.values())


def _column_walk(step: str, itemsize: int, y: int, row_pad_bytes: int | None = None) -> int:
    """Wavefronts of the warp that reads tile[x][y] (swizzled: tile[x][y ^ x]), x = 0..31."""
    row = TILE * itemsize + (WORD if row_pad_bytes is None else row_pad_bytes)
    if step == "shared":
        return _wavefronts([x * TILE * itemsize + y * itemsize for x in range(TILE)])
    if step == "padded":
        return _wavefronts([x * row + y * itemsize for x in range(TILE)])
    return _wavefronts([x * TILE * itemsize + (y ^ x) * itemsize for x in range(TILE)])


@pytest.mark.parametrize("itemsize", [4, 2], ids=["fp32", "bf16"])
def test_padding_one_word_and_the_swizzle_read_a_column_in_one_pass(itemsize):
    """The layouts of 03_padded.cu and 04_swizzled.cu, by the bank arithmetic: one wavefront
    per column walk at every column; step 2's plain tile needs 32 (fp32) or 16 (bf16)."""
    for y in range(TILE):
        assert _column_walk("padded", itemsize, y) == 1, y
        assert _column_walk("swizzled", itemsize, y) == 1, y
    assert {_column_walk("shared", itemsize, y) for y in range(TILE)} == {TILE * itemsize // WORD}


def test_one_bf16_element_of_padding_conflicts_2_way_on_odd_columns():
    """Why step 3 pads a bank word, not an element: a 66-byte bf16 row puts rows 0 and 31 of an
    odd column in one bank (ncu counted 0.5 extra wavefronts per load more than a word's pad)."""
    walks = [_column_walk("padded", 2, y, row_pad_bytes=2) for y in range(TILE)]
    assert walks == [1 if y % 2 == 0 else 2 for y in range(TILE)]


# ---- step 5: pairs in shared memory -------------------------------------------------------


def _wide_wavefronts(slots: list[int], unit: int) -> int:
    """Passes of one warp access to 4- (bf16) or 8-byte (fp32) pairs at the given slots of
    one 64-slot pair row; an 8-byte access is served a half-warp (16 lanes) at a time."""
    lanes = 32 if unit == WORD else 16
    return sum(_wavefronts([s * unit for s in slots[h : h + lanes]]) for h in range(0, 32, lanes))


def _wide_slot(c: int, i: int) -> int:
    """05_wide.cu: tile column c of pair row i sits at ((c & 1) * 32 + (c >> 1)) ^ i."""
    return ((c & 1) * TILE + (c >> 1)) ^ i


@pytest.mark.parametrize("unit", [4, 8], ids=["bf16", "fp32"])
def test_the_wide_layout_stores_and_reads_pairs_in_the_fewest_passes(unit):
    """Every warp access of step 5's tile takes the fewest passes its bytes allow: one for a
    warp of 4-byte pairs (128 bytes), two for 8-byte pairs (256 bytes, a half-warp each)."""
    least = 32 * unit // (BANKS * WORD)
    rows_of_pairs = 64 * unit  # bytes of one pair row: a multiple of the 128 bytes of banks
    assert rows_of_pairs % (BANKS * WORD) == 0
    for i in range(TILE):  # the load phase: lane x stores columns 2x and 2x + 1 of pair row i
        assert _wide_wavefronts([_wide_slot(2 * x, i) for x in range(32)], unit) == least
        assert _wide_wavefronts([_wide_slot(2 * x + 1, i) for x in range(32)], unit) == least
    for c in range(2 * TILE):  # the store phase: lane x reads column c of pair row x
        walk = [x * 2 * TILE + _wide_slot(c, x) for x in range(32)]
        assert _wide_wavefronts(walk, unit) == least, c


def test_without_splitting_even_and_odd_columns_the_bf16_stores_conflict_2_way():
    """Why 05_wide.cu keeps even columns in slots 0-31 and odd ones in 32-63: with the plain
    swizzle (slot c ^ i) lane x's column 2x shares a bank with lane x + 16's."""
    for i in range(TILE):
        assert _wide_wavefronts([(2 * x) ^ i for x in range(32)], WORD) == 2
