"""The fp32 SGEMM ladder.

On any machine with nvcc: every step (and every tile candidate of the tunable steps)
compiles for sm_90 without spills, and its SASS shows what the step claims.
On any machine with g++: every step's CUDA source runs on the CPU through
tests/cuda_host_emulation.hpp at awkward shapes (1x1x1, primes, unaligned rows, beta != 0),
launched with the geometry from steps.py, and matches a float64 reference.
On a GPU (marked gpu): every step through the registry at the awkward shapes, against torch.
"""

from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library  # noqa: E402

from kernelab.ladders.sgemm import STEPS, build_step, get_step
from kernelab.runtime.cuda import build as cuda_build
from kernelab.runtime.cuda.sass import disassemble, sass_facts

TESTS = Path(__file__).resolve().parents[2]  # tests/, where the host emulation lives
SGEMM_DIR = cuda_build.KERNEL_DIR / "ladders" / "sgemm"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

# (M, N, K, extra row padding of A): primes, 1, non-multiples of every tile, and rows of A
# that are not 16-byte aligned (padding 1 or 3 makes lda odd).
AWKWARD = [(1, 1, 1, 0), (127, 257, 31, 0), (64, 64, 1, 0), (33, 17, 130, 1), (300, 130, 70, 3)]
# Row lengths that are multiples of 4 (16-byte aligned rows, so the 128-bit and 16-byte
# cp.async paths run) but of no tile: those paths meet partial edge tiles and a last,
# partial K-tile; K < BK; and lda = K + 4, a strided view that stays aligned.
AWKWARD += [(129, 132, 36, 0), (257, 388, 100, 0), (100, 100, 4, 0), (130, 136, 60, 4)]
# Tile candidates whose code paths differ from the defaults (TM/TN = 16, 64-wide, BK = 16).
EXTRA_CANDIDATES = [
    (8, {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 8}),
    (8, {"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16}),
    (8, {"BM": 256, "BN": 128, "BK": 8, "TM": 16, "TN": 8}),
    (11, {"BM": 256, "BN": 128, "BK": 16, "STAGES": 3, "GROUP_M": 8}),
    (11, {"BM": 128, "BN": 256, "BK": 8, "STAGES": 4, "GROUP_M": 8}),
    (11, {"BM": 128, "BN": 128, "BK": 8, "STAGES": 4, "GROUP_M": 1}),
]
EXTRA_CANDIDATES += [(n, dict(c)) for n in (12, 13) for c in get_step(n).candidates[1:]]


# ---- compile: every step, sm_90, no spills, the SASS facts each step claims ---------------


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_without_spills(step):
    built = build_step(step)
    report = built.report(step.kernel)
    assert built.arch == "sm_90"
    assert 0 < report.registers <= 255
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0
    assert report.stack_frame_bytes == 0
    assert report.shared_bytes <= 48 * 1024  # static; the big buffers are dynamic


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_sass_facts(step):
    built = build_step(step)
    facts = sass_facts(built.cubin, step.kernel)
    assert facts["local_loads"] == 0 and facts["local_stores"] == 0, "local memory traffic"
    assert facts["ffma"] > 0
    for fact in step.sass_facts:
        assert facts[fact] > 0, f"{step.name} claims {fact} but its SASS has none"
    if step.number < 10:
        assert facts["ldgsts"] == 0  # cp.async arrives at step 10, not before


@needs_nvcc
def test_vectorized_and_async_steps_in_sass():
    vectorized = sass_facts(build_step(get_step(6)).cubin, "sgemm_vectorized")
    assert vectorized["ldg_128"] > 0 and vectorized["lds_128"] > 0 and vectorized["stg_128"] > 0
    for number in (10, 11):
        step = get_step(number)
        facts = sass_facts(build_step(step).cubin, step.kernel)
        assert facts["ldgsts_128"] > 0  # 16-byte cp.async (LDGSTS.E.BYPASS.128)
        assert facts["ldgsts"] > facts["ldgsts_128"]  # and the 4-byte path for unaligned rows


@needs_nvcc
@pytest.mark.parametrize("step", [s for s in STEPS if s.tunable], ids=lambda s: s.name)
def test_every_tile_candidate_compiles_without_spills(step):
    for defines in step.candidates:
        report = build_step(step, defines).report(step.kernel)
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, defines
        launch = step.launch(4096, 4096, 4096, defines)
        assert launch.block[0] <= 1024 and launch.shared_bytes <= 227 * 1024, defines


@needs_nvcc
def test_builds_for_sm_90a():
    step = get_step(11)
    built = build_step(step, arch="sm_90a")
    assert built.arch == "sm_90a" and "-gencode=arch=compute_90a,code=sm_90a" in built.flags
    assert not built.report(step.kernel).spills


def test_steps_are_numbered_and_described():
    assert [s.number for s in STEPS] == list(range(1, len(STEPS) + 1))
    for step in STEPS:
        assert (SGEMM_DIR / step.file).is_file()
        assert step.file.startswith(f"{step.number:02d}_")
        meta = step.metadata()
        assert meta["technique"] and meta["proof"] and meta["expected_speedup"] > 0
        assert f"{step.kernel}(" in (SGEMM_DIR / step.file).read_text()


def test_registry_lists_every_step():
    from kernelab.spec.registry import get

    for step in STEPS:
        impl = get(step.name)
        assert impl.op == "gemm" and impl.dtypes == ("fp32",) and impl.math_mode is None
        assert impl.metadata["technique"] == step.technique


def test_launch_geometry_covers_the_matrix():
    for step in STEPS:
        for m, n, k, _ in AWKWARD + [(4096, 4096, 4096, 0)]:
            launch = step.launch(m, n, k)
            blocks = launch.grid[0] * launch.grid[1]
            assert blocks >= 1 and launch.block[0] * launch.block[1] <= 1024


# ---- run on the CPU: the CUDA sources under host emulation --------------------------------


def _emulator(step, defines: dict | None = None, extra: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile `step` for the CPU emulator (cached by content) and load it."""
    flags = [f"-DKERNEL={step.kernel}"]
    flags += [f"-D{k}={v}" for k, v in sorted({**step.default_defines, **(defines or {})}.items())]
    flags += list(extra)
    lib = emulated_library(step.slug, SGEMM_DIR,
                           [SGEMM_DIR / step.file, TESTS / "cuda_host_emulation_driver.cpp"], flags)  # fmt: skip
    ptr, i32, u32, f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_float
    lib.emulate.argtypes = [u32] * 5 + [i32] * 3 + [f32, ptr, i32, ptr, i32, f32, ptr, i32]
    return lib


def _emulate(lib, launch, a_rows, b, c, m, n, k, alpha, beta) -> int:
    return lib.emulate(
        launch.grid[0], launch.grid[1], launch.block[0], launch.block[1], launch.shared_bytes,
        m, n, k, alpha, a_rows.ctypes.data, a_rows.shape[1], b.ctypes.data, b.shape[1],
        beta, c.ctypes.data, c.shape[1],
    )  # fmt: skip


def _check(lib, step, m, n, k, pad, *, defines=None, alpha=1.0, beta=0.0, launch=None):
    """Run the emulated kernel once; return (faults, max relative error, NaN count)."""
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a_rows = rng.standard_normal((m, k + pad)).astype(np.float32)  # lda = k + pad
    b = rng.standard_normal((k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    # beta == 0 must not read C: start from NaN so that any read shows.
    c = np.full((m, n), np.nan, np.float32) if beta == 0.0 else c0.copy()
    faults = _emulate(
        lib, launch or step.launch(m, n, k, defines), a_rows, b, c, m, n, k, alpha, beta
    )
    ref = alpha * (a_rows[:, :k].astype(np.float64) @ b.astype(np.float64))
    if beta != 0.0:
        ref += beta * c0
    scale = np.abs(a_rows[:, :k]).astype(np.float64) @ np.abs(b).astype(np.float64) + 1e-30
    error = float(np.nanmax(np.abs(c - ref) / scale)) if c.size else 0.0
    return faults, error, int(np.isnan(c).sum())


# fp32 accumulation over K terms: relative to sum |a||b|, error stays ~K * 2^-24.
def _tolerance(k: int) -> float:
    return 4 * k * 2.0**-24


@needs_gxx
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_on_awkward_shapes_under_emulation(step):
    lib = _emulator(step)
    for m, n, k, pad in AWKWARD:
        faults, error, nans = _check(lib, step, m, n, k, pad)
        assert faults == 0 and nans == 0, (step.name, m, n, k, pad, faults, nans)
        assert error <= _tolerance(k), (step.name, m, n, k, pad, error)
    faults, error, nans = _check(lib, step, 45, 77, 19, 2, alpha=-1.5, beta=0.75)
    assert faults == 0 and nans == 0 and error <= _tolerance(19), (step.name, error)


@needs_gxx
@pytest.mark.parametrize("number,defines", EXTRA_CANDIDATES, ids=str)
def test_tile_candidates_are_correct_under_emulation(number, defines):
    step = get_step(number)
    lib = _emulator(step, defines)
    for m, n, k, pad in [(127, 257, 31, 0), (300, 130, 70, 3), (257, 388, 100, 0)]:
        faults, error, nans = _check(lib, step, m, n, k, pad, defines=defines)
        assert faults == 0 and nans == 0 and error <= _tolerance(k), (defines, m, n, k, error)


@needs_gxx
def test_emulation_rejects_a_wrong_launch():
    """The check can fail: step 11 launched with too few blocks leaves outputs unwritten."""
    step = get_step(11)
    lib = _emulator(step)
    launch = step.launch(300, 300, 40)
    short = type(launch)((launch.grid[0] - 1, 1, 1), launch.block, launch.shared_bytes)
    faults, error, nans = _check(lib, step, 300, 300, 40, 0, launch=short)
    assert nans > 0


@needs_gxx
def test_emulation_faults_on_a_misaligned_vector_access():
    """A variant of step 10 that skips the alignment check faults on lda = K + 1, as a GPU
    would; the real step takes its 4-byte path there (covered above) and does not."""
    step = get_step(10)
    wrong = _emulator(step, extra=("-DKERNELAB_EMU_ASSUME_ALIGNED=1",))
    faults, _, _ = _check(wrong, step, 40, 40, 40, 1)
    assert faults > 0
    assert _check(_emulator(step), step, 40, 40, 40, 1)[0] == 0


# ---- step 12: the register-level pipeline -------------------------------------------------
# Its claims are about the instructions the K loop issues, so the tests read the hot loop
# itself: the backward branch with the most FFMAs between it and its target.

_SASS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")


def _kernel_sass(cubin, kernel: str) -> list[tuple[int, str]]:
    """(address, instruction text) of one kernel, predicates and operands included."""
    rows, current = [], None
    for line in disassemble(cubin).splitlines():
        if m := _FUNCTION.match(line):
            current = m.group(1)
        elif current == kernel and (m := _SASS.match(line)):
            rows.append((int(m.group(1), 16), m.group(2)))
    assert rows, f"no SASS for {kernel}"
    return rows


def _opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def _hot_loop(cubin, kernel: str) -> list[str]:
    rows = _kernel_sass(cubin, kernel)
    index = {address: i for i, (address, _) in enumerate(rows)}
    best: list[str] = []
    for i, (address, text) in enumerate(rows):
        m = re.search(r"\bBRA\s+(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < address and int(m.group(1), 16) in index:
            body = [t for _, t in rows[index[int(m.group(1), 16)] : i + 1]]
            if sum(_opcode(t) == "FFMA" for t in body) > sum(_opcode(t) == "FFMA" for t in best):
                best = body
    return best


def _ffma_share(loop: list[str]) -> float:
    """FFMAs over all instructions the loop issues (a never-true @!PT still takes a slot)."""
    return sum(_opcode(t) == "FFMA" for t in loop) / len(loop)


def _one_bank_ffmas(loop: list[str]) -> int:
    """FFMAs whose three source registers all come from the register file and from the same
    bank (register number mod 2): the case the operand reuse cache exists to avoid. A source
    the previous FFMA marked .reuse in the same slot comes from that cache instead."""
    count, cached = 0, {}
    for text in loop:
        if _opcode(text) != "FFMA":
            cached = {}
            continue
        operands = [o.strip() for o in text.split(None, 1)[1].split(",")]
        fetched, reuse = set(), {}
        for slot, operand in enumerate(operands[1:4]):
            m = re.match(r"-?\|?R(\d+)(\.reuse)?", operand)
            if not m:
                continue
            reg = int(m.group(1))
            if cached.get(slot) != reg:
                fetched.add(reg)
            if m.group(2):
                reuse[slot] = reg
        cached = reuse
        if len(fetched) == 3 and len({r % 2 for r in fetched}) == 1:
            count += 1
    return count


def _min_blocks(defines: dict, number: int = 12) -> int:
    """The __launch_bounds__ occupancy target in 12_register_pipeline.cu (13 has the same)."""
    d = {**get_step(number).default_defines, **defines}
    threads = 32 * (d["BM"] // d["WM"]) * (d["BN"] // d["WN"])
    lane_outputs = (d["WM"] // 8) * (d["WN"] // 4)
    return (256 if lane_outputs > 64 else 512) // threads


@needs_nvcc
def test_step12_k_loop_is_leaner_than_step11():
    step11, step12 = get_step(11), get_step(12)
    loop11 = _hot_loop(build_step(step11).cubin, step11.kernel)
    loop12 = _hot_loop(build_step(step12).cubin, step12.kernel)
    assert _ffma_share(loop12) >= 0.89, _ffma_share(loop12)
    assert _ffma_share(loop12) > _ffma_share(loop11)
    ops = [_opcode(t) for t in loop12 if not t.startswith("@!PT")]
    assert ops.count("BAR.SYNC.DEFER_BLOCKING") == 1  # one barrier per K-tile
    assert "LDGSTS.E" in ops  # 4-byte copies: A transposed on its way into shared memory
    assert any(op.startswith("LDGSTS") and ".128" in op for op in ops)  # B, 16 bytes
    # Every shared load is 128-bit: per k, 2 for A and 4 for B (8 x 16 outputs per lane).
    assert [op for op in ops if op.startswith("LDS")] == ["LDS.128"] * (8 * (2 + 4))
    # Only the last, partial K-tile checks bounds, and it is loaded before the loop.
    assert sum(op.startswith("ISETP") for op in ops) <= 8
    assert _one_bank_ffmas(loop12) == 0


REGISTER_PIPELINES = [(n, dict(c)) for n in (12, 13) for c in get_step(n).candidates]


@needs_nvcc
@pytest.mark.parametrize("number,defines", REGISTER_PIPELINES, ids=str)
def test_step12_candidates_fit_their_occupancy_target(number, defines):
    step = get_step(number)
    built = build_step(step, defines)
    report = built.report(step.kernel)
    assert not report.spills and report.stack_frame_bytes == 0, defines
    launch = step.launch(4096, 4096, 4096, defines)
    blocks, threads = _min_blocks(defines, number), launch.block[0]
    assert blocks >= 1
    # Registers are allocated per warp in units of 256 (8 per thread): the blocks the
    # launch bounds ask for must fit the 64K-register file and 227 KiB of shared memory.
    assert blocks * threads * (-(-report.registers // 8) * 8) <= 65536, (defines, report.registers)
    assert blocks * (launch.shared_bytes + 1024) <= 228 * 1024, defines
    loop = _hot_loop(built.cubin, step.kernel)
    if (defines["WM"] // 8) * (defines["WN"] // 4) == 128:  # 8 x 16 lanes: as lean as the default
        # Step 13's spread copies each recompute a shared address: ~2 % of the loop.
        floor = 0.87 if defines.get("SPREAD", 1) > 1 else 0.89
        assert _ffma_share(loop) >= floor, (defines, _ffma_share(loop))


# ---- step 13: copies laid along k and spread over the k steps ------------------------------


def _copy_positions(loop: list[str]) -> list[int]:
    """For each LDGSTS in the loop, how many FFMAs precede it: copies issued together share
    a position, spread copies have FFMAs between them."""
    positions, ffmas = [], 0
    for text in loop:
        op = _opcode(text)
        ffmas += op == "FFMA"
        if op.startswith("LDGSTS"):
            positions.append(ffmas)
    return positions


def _a_copy_offsets(loop: list[str]) -> list[tuple[int, int]]:
    """(shared, global) immediate byte offsets of each 4-byte LDGSTS (A's copies) in the loop:
    `LDGSTS.E [R19+0x210], desc[UR6][R8.64+0x4]` -> (0x210, 0x4)."""
    offsets = []
    for text in loop:
        if _opcode(text) == "LDGSTS.E":
            m = re.search(r"\[R\d+(?:\+(0x[0-9a-f]+))?\].*\[R\d+\.64(?:\+(0x[0-9a-f]+))?\]", text)
            assert m, text
            offsets.append(tuple(int(g or "0", 16) for g in m.groups()))
    return offsets


@needs_nvcc
def test_step13_copies_run_along_k_and_spread_over_the_tile():
    step12, step13 = get_step(12), get_step(13)
    wide12 = {k: v for k, v in step13.default_defines.items() if k != "SPREAD"}
    loop12 = _hot_loop(build_step(step12, wide12).cubin, step12.kernel)
    loop13 = _hot_loop(build_step(step13).cubin, step13.kernel)
    burst = _hot_loop(build_step(step13, {"SPREAD": 1}).cubin, step13.kernel)
    # A thread's four A copies in step 12: 4 consecutive k of one row, so the source moves
    # 4 bytes and the destination one k row of As (A_LD = 132 floats) per copy. In step 13:
    # one k of 4 rows 32 apart (its lanes run along k), so the destination moves 32 floats
    # and each source is a row of its own (no immediate offset).
    row = 4 * (step13.default_defines["BM"] + 4)
    assert sorted(_a_copy_offsets(loop12)) == [(i * row, 4 * i) for i in range(4)]
    for loop in (loop13, burst):
        assert sorted(_a_copy_offsets(loop)) == [(i * 32 * 4, 0) for i in range(4)]
    # Spread: the 6 copies of a K-tile (2 B, 4 A) sit at 6 places with FFMAs between them;
    # SPREAD = 1 issues them together, as step 12 does.
    assert len(set(_copy_positions(loop13))) == 6, _copy_positions(loop13)
    assert len(set(_copy_positions(burst))) == 1 and len(set(_copy_positions(loop12))) == 1
    for loop in (loop13, burst):
        ops = [_opcode(t) for t in loop if not t.startswith("@!PT")]
        assert ops.count("BAR.SYNC.DEFER_BLOCKING") == 1
        assert [op for op in ops if op.startswith("LDS")] == ["LDS.128"] * (8 * (2 + 4))
        assert _one_bank_ffmas(loop) == 0
    # The spread costs a few address computations, never more than 3 % of the loop.
    assert _ffma_share(burst) >= 0.89 and _ffma_share(loop13) >= 0.87
    assert len(loop13) - len(burst) <= 0.03 * len(burst)


# Step 12's default, and step 13 for each way of spreading its copies and both ring depths.
PIPELINE_TURNS = [(12, {})] + [
    (13, {"SPREAD": spread, "STAGES": stages})
    for spread, stages in [(7, 3), (1, 3), (3, 4), (7, 4)]
]


@needs_gxx
@pytest.mark.parametrize("number,overrides", PIPELINE_TURNS, ids=str)
def test_register_pipeline_is_correct_where_it_turns(number, overrides):
    """K at the edges of the pipeline: fewer K-tiles than stages, one partial tile first,
    exactly STAGES tiles, and K = 1; aligned and unaligned A and B (for step 13, the burst
    path and the spread one); beta != 0."""
    step = get_step(number)
    defines = {**step.default_defines, **overrides}
    lib = _emulator(step, defines)
    bk, stages = defines["BK"], defines["STAGES"]
    for m, n, k, pad in [
        (130, 260, bk * stages, 0),
        (130, 264, bk * stages + 1, 0),
        (61, 129, bk * (stages - 2) + 3, 1),
        (200, 136, bk * stages * 3 + 5, 0),
        (64, 64, bk - 1, 0),
        (33, 255, 1, 2),
        (129, 257, 97, 1),
    ]:
        faults, error, nans = _check(lib, step, m, n, k, pad, defines=defines)
        assert faults == 0 and nans == 0 and error <= _tolerance(k), (m, n, k, pad, error)
    faults, error, nans = _check(lib, step, 130, 68, 45, 0, defines=defines, alpha=2.0, beta=-0.5)
    assert faults == 0 and nans == 0 and error <= _tolerance(45), error


@needs_gxx
@pytest.mark.parametrize("number", [12, 13])
def test_register_pipeline_emulation_faults_when_a_stage_is_missing(number):
    """The check can fail: one stage less shared memory than steps.py's geometry gives puts
    the ring's last stage outside the launch's allocation, which the emulator reports."""
    step = get_step(number)
    lib = _emulator(step)
    launch = step.launch(130, 260, 200)
    d = step.default_defines
    short = type(launch)(
        launch.grid, launch.block, launch.shared_bytes - d["BK"] * (d["BM"] + 4 + d["BN"]) * 4
    )
    faults, _, _ = _check(lib, step, 130, 260, 200, 0, launch=short)
    assert faults > 0


# ---- on the GPU ---------------------------------------------------------------------------

GPU_SHAPES = [
    (1, 1, 1),
    (127, 257, 31),
    (1000, 1000, 1000),
    (4097, 33, 129),
    (64, 64, 1),
    (2048, 2048, 2048),
]


@pytest.mark.gpu
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_matches_torch_on_gpu(step):
    import torch

    from kernelab.spec.registry import get

    torch.backends.cuda.matmul.allow_tf32 = False
    fn = get(step.name).build()
    for m, n, k in GPU_SHAPES:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        c = fn(a, b)
        ref = (a.double() @ b.double()).float()
        scale = (a.abs().double() @ b.abs().double()).float() + 1e-30
        error = ((c - ref).abs() / scale).max().item()
        assert torch.isfinite(c).all() and error <= _tolerance(k), (step.name, m, n, k, error)


@pytest.mark.gpu
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_handles_strided_views_and_beta_on_gpu(step):
    import torch

    from kernelab.ladders.sgemm import sgemm

    m, n, k = 300, 129, 77
    a = torch.randn(m, k + 1, device="cuda")[:, :k]  # lda = 78: rows not 16-byte aligned
    b = torch.randn(k, n + 3, device="cuda")[:, 1 : n + 1]  # ldb = 132, base offset 4 bytes
    out_full = torch.randn(m, n + 2, device="cuda")
    out = out_full[:, :n]  # ldc = n + 2
    before, padding = out.clone(), out_full[:, n:].clone()
    sgemm(step, a, b, out=out, alpha=0.5, beta=-2.0)
    ref = 0.5 * (a.double() @ b.double()) - 2.0 * before.double()
    scale = 0.5 * (a.abs().double() @ b.abs().double()) + 2.0 * before.abs().double()
    assert ((out.double() - ref).abs() / scale).max().item() <= _tolerance(k)
    assert torch.equal(out_full[:, n:], padding)  # the columns past N are not written


@pytest.mark.gpu
def test_ladder_checks_with_the_harness_on_gpu():
    from kernelab.harness.check import check_implementation
    from kernelab.spec.registry import get

    for step in STEPS:
        fn = get(step.name).build()
        for m, n, k in [(127, 257, 31), (4097, 33, 129)]:
            report = check_implementation(fn, "gemm", {"m": m, "n": n, "k": k}, "fp32")
            assert report.ok, (step.name, m, n, k, report.message)


@pytest.mark.gpu
@pytest.mark.parametrize("number,defines", REGISTER_PIPELINES, ids=str)
def test_step12_candidates_match_torch_on_gpu(number, defines):
    """Every tile candidate the tuner may pick, with real asynchronous copies (the emulator's
    are synchronous, so only a GPU can show a stage overwritten too early: for step 13, a
    spread copy landing in a stage another warp still reads)."""
    import torch

    from kernelab.ladders.sgemm import sgemm

    torch.backends.cuda.matmul.allow_tf32 = False
    step = get_step(number)
    for m, n, k, pad in [(127, 257, 31, 0), (1000, 1000, 1000, 0), (4097, 33, 129, 0),
                         (300, 129, 77, 1), (2048, 2048, 2048, 0), (513, 520, 4099, 0)]:  # fmt: skip
        a = torch.randn(m, k + pad, device="cuda")[:, :k]
        b = torch.randn(k, n, device="cuda")
        c = sgemm(step, a, b, defines=defines)
        ref = (a.double() @ b.double()).float()
        scale = (a.abs().double() @ b.abs().double()).float() + 1e-30
        error = ((c - ref).abs() / scale).max().item()
        assert torch.isfinite(c).all() and error <= _tolerance(k), (defines, m, n, k, error)


# ---- the ladder runner, tuning lookup and CLI without a GPU -------------------------------


def test_parse_steps():
    from kernelab.errors import UnknownNameError
    from kernelab.ladders.sgemm.ladder import parse_steps

    assert [s.number for s in parse_steps("1,5,10")] == [1, 5, 10]
    assert [s.number for s in parse_steps("9-11,2")] == [2, 9, 10, 11]
    assert [s.number for s in parse_steps("sgemm:03")] == [3]
    assert len(parse_steps(None)) == len(STEPS)
    with pytest.raises(UnknownNameError):
        parse_steps("99")


def test_shape_class():
    from kernelab.ladders.sgemm.tuning import shape_class

    assert shape_class(1024, 1024, 1024) == "small"  # 64 tiles of 128x128 < 132 SMs
    assert shape_class(2048, 2048, 2048) == "large"  # 256 tiles: measured better with big tiles
    assert shape_class(4096, 4096, 4096) == "large"  # 1024 tiles
    assert shape_class(2048, 2048, 64, sm_count=16) == "large"


def test_winner_lookup_order(monkeypatch, tmp_path):
    import json

    from kernelab.ladders.sgemm import tuning

    step = get_step(8)
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    monkeypatch.setattr(tuning, "_gpu", lambda: ("nvidia-h200", 132))
    monkeypatch.setattr(tuning, "_chosen", {})
    committed = json.loads(tuning.COMMITTED["h200"].read_text())
    assert tuning.winner(step, 4096, 4096, 4096) == committed["winners"]["08"]["large"]["defines"]
    user = {
        "winners": {"08": {"large": {"defines": {"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 8}}}}
    }
    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "nvidia-h200.json").write_text(json.dumps(user))
    monkeypatch.setattr(tuning, "_chosen", {})
    assert tuning.winner(step, 4096, 4096, 4096)["BM"] == 64  # the user's own search wins
    monkeypatch.setattr(tuning, "_gpu", lambda: ("nvidia-a100", 108))
    monkeypatch.setattr(tuning, "_chosen", {})
    assert tuning.winner(step, 4096, 4096, 4096) == step.default_defines  # nothing for A100


def test_committed_winners_are_candidates():
    import json

    from kernelab.ladders.sgemm import tuning

    data = json.loads(tuning.COMMITTED["h200"].read_text())
    assert isinstance(data["measured"], bool) and data["source"]
    for number, classes in data["winners"].items():
        step = get_step(number)
        for entry in classes.values():
            assert entry["defines"] in [dict(c) for c in step.candidates], (number, entry)


def test_plot_and_record_from_rows(tmp_path):
    from types import SimpleNamespace

    from kernelab.ladders.sgemm.ladder import plot, to_record

    rows = [
        {"step": "cuBLAS", "size": 1024, "gflops": 40000.0},
        {"step": "sgemm:01", "size": 1024, "gflops": 500.0},
        {"step": "sgemm:11", "size": 1024, "gflops": 38000.0},
    ]
    path = plot(rows, tmp_path / "ladder.png")
    assert path.stat().st_size > 1000
    timing = SimpleNamespace(median_ms=2.0, rel_noise=0.01, samples_ms=[2.0, 2.1], mode="cold")
    identity = SimpleNamespace(name="NVIDIA H200", gpu_id="h200", driver="580")
    row = {"gflops": 1.0, "bytes": 12.0, "pct_of_cublas": 50.0, "speedup_vs_prev": None,
           "expected_speedup": 1.2, "technique": "t"}  # fmt: skip
    record = to_record("sgemm:11", 1024, timing, 2.0 * 1024**3, identity, {}, row)
    assert record.median_ms == 2.0 and record.extra["pct_of_cublas"] == 50.0
    assert record.shape == {"m": 1024, "n": 1024, "k": 1024} and record.dtype == "fp32"


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@needs_nvcc
@pytest.mark.skipif(not _no_gpu(), reason="checks the no-GPU path")
def test_cli_without_gpu_prints_the_compile_report(capsys):
    import json

    from kernelab.cli import main

    assert main(["ladder", "sgemm", "--steps", "6,10", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # exactly one JSON document on stdout
    assert data["timed"] is False and [r["step"] for r in data["compile"]] == [
        "sgemm:06",
        "sgemm:10",
    ]
    assert (
        data["compile"][1]["dynamic_smem_bytes"] == 55296
        and data["compile"][1]["sass"]["ldgsts"] > 0
    )
    assert "timing and checking need a CUDA GPU" in captured.err


def test_cli_rejects_bad_input(capsys):
    from kernelab.cli import main

    assert main(["ladder", "dgemm"]) == 2
    assert main(["ladder", "sgemm", "--sizes", "0"]) == 2
    assert main(["ladder", "sgemm", "--steps", "42"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("kernelab: ") for line in err)


def test_a_tuned_winner_sets_the_tile_the_lenses_see():
    from kernelab.ladders.sgemm.tuning import committed_winner

    step = next(s for s in STEPS if s.name == "sgemm:13")
    winner = committed_winner(step, "h200")
    assert winner is not None  # the H200 winners are committed
    tiles = step.tiles_with(winner)
    assert (tiles["BM"], tiles["BN"], tiles["stages"]) == (
        winner["BM"],
        winner["BN"],
        winner["STAGES"],
    )
    # Threads follow the launch geometry: one per 8x16 outputs of the block tile.
    assert tiles["threads"] == winner["BM"] * winner["BN"] // (8 * 16)
    assert committed_winner(step, "b200") is None  # never tuned there
