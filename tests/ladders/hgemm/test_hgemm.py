"""The Hopper bf16 GEMM ladder (hgemm:01..11).

On any machine with nvcc: every step compiles for sm_90a with no spills or local memory, its
SASS holds the instructions the step claims (HMMA + LDSM for mma.sync, HGMMA from the wgmma
steps on, UTMALDG + SYNCS for TMA/mbarrier, USETMAXREG for warp specialisation) and not the
ones it replaced, every wgmma has the instruction shape the step claims and reads B N-major
(tnspB) exactly when the step reads B[K, N] as stored, and the TMA steps' kernel parameters
in the cubin have the sizes the launcher packs.
Anywhere: the TMA tensor-map arguments (dims, strides, box, every documented constraint),
the parameter array handed to cuLaunchKernel, and the launcher's layout helpers.
On a GPU (marked gpu): every step through the registry at awkward shapes, against the
harness checker; views and a provided output; the tensor map encoded by the real driver.
"""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.ladders.hgemm import (
    CHECK_SHAPES,
    STEPS,
    aligned_rows,
    build_step,
    exact_store_columns,
    get_step,
    hgemm,
    output_map_param,
    tensor_map_params,
    tma,
    tma_step_params,
    transposed_rows,
)
from kernelab.runtime.cuda import build as cuda_build
from kernelab.runtime.cuda import prepared
from kernelab.runtime.cuda.sass import disassemble, find_tool, has, opcode_counts

HGEMM_DIR = cuda_build.KERNEL_DIR / "ladders" / "hgemm"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
needs_cuobjdump = pytest.mark.skipif(find_tool("cuobjdump") is None, reason="needs cuobjdump")

MAX_SMEM_PER_BLOCK = 227 * 1024  # H100/H200 opt-in limit
GPU_SHAPES = list(CHECK_SHAPES)
TMA_STEPS = [s for s in STEPS if s.uses_tma]
WGMMA_STEPS = [s for s in STEPS if s.number >= 2]


# ---- compile: sm_90a, no spills, the SASS each step claims --------------------------------


@needs_nvcc
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_compiles_for_sm_90a_without_spills(step):
    built = build_step(step)
    report = built.report(step.kernel)
    assert built.arch == "sm_90a"
    assert "-gencode=arch=compute_90a,code=sm_90a" in built.flags
    assert 0 < report.registers <= 255
    assert not report.spills and report.stack_frame_bytes == 0
    threads = step.launch(4096, 4096, 4096).block[0]
    assert report.registers * threads <= 64 * 1024  # one block fits the register file
    # ptxas says so when wgmma cannot be pipelined (accumulators touched between wgmma).
    assert "serialized" not in built.ptxas_log


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_sass_has_what_it_claims(step):
    counts = opcode_counts(build_step(step).cubin, step.kernel)
    for claim in step.sass_claims:
        assert has(counts, claim), f"{step.name} claims {claim} but its SASS has none"
    assert not has(counts, "LDL") and not has(counts, "STL"), "local memory traffic"
    if step.number == 1:
        assert not has(counts, "HGMMA")
        assert has(counts, "HMMA.16816.F32.BF16")
    else:
        assert not has(counts, "HMMA"), "a wgmma step fell back to mma.sync"
        assert not has(counts, "LDSM"), "wgmma reads shared memory itself; no ldmatrix"
    if step.stream_k:  # operands by TMA; cp.async only for the fix-up's 32 copies a thread
        assert sum(n for op, n in counts.items() if op.startswith("LDGSTS")) == 32
    elif step.uses_tma:
        assert not has(counts, "LDGSTS"), "the TMA step still copies with cp.async"
    else:
        assert not has(counts, "UTMALDG")


def _kernel_param_sizes(cubin, kernel: str) -> list[int]:
    """Parameter sizes in declaration order, from the cubin's EIATTR_KPARAM_INFO records."""
    listing = subprocess.run(
        [find_tool("cuobjdump"), "-elf", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(
        r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*0x([0-9a-f]+)",
        listing,
    )
    sizes = {int(o, 16): int(s, 16) for o, s in found}
    return [sizes[i] for i in range(len(sizes))]


def _sass_lines(cubin, kernel: str) -> list[str]:
    """The SASS instruction lines of one kernel, operands included (opcode_counts keeps only
    the opcode, and the wgmma shape and the tnspB operand flag live past it)."""
    lines, inside = [], False
    for line in disassemble(cubin).splitlines():
        if "Function :" in line:
            inside = line.split("Function :")[1].strip() == kernel
        elif inside and re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            lines.append(line)
    return lines


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("step", WGMMA_STEPS, ids=lambda s: s.name)
def test_wgmma_shape_and_b_majorness_in_sass(step):
    hgmma = [line for line in _sass_lines(build_step(step).cubin, step.kernel) if "HGMMA" in line]
    assert hgmma
    shape = re.search(r"m64n(\d+)k16", step.tiles["mma"]).group(1)
    assert all(f"HGMMA.64x{shape}x16.F32.BF16" in line for line in hgmma), hgmma[0]
    transposed = [".tnspB" in line for line in hgmma]
    if step.b_layout == "kn":  # B[K, N] as stored: every wgmma reads it N-major
        assert all(transposed), "a wgmma reads B K-major in a step that does not transpose B"
    else:
        assert not any(transposed)


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("number", [5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18])
def test_warp_specialized_step_moves_registers_between_roles(number):
    step = get_step(number)
    sass = "\n".join(_sass_lines(build_step(step).cubin, step.kernel))
    # The producer gives registers back down to 40 (0x28), the consumers claim 232 (0xe8).
    assert re.search(r"USETMAXREG\.DEALLOC\S* 0x28\b", sass)
    assert re.search(r"USETMAXREG\.TRY_ALLOC\S* \S+, 0xe8\b", sass)
    # The main loop keeps one wgmma group in flight (wait_group 1); the epilogue waits for all.
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
    if step.cluster == 1:
        # One block barrier (after the mbarrier init), none in the main loop.
        assert sass.count("BAR.SYNC") == 1


CLUSTER_STEPS = [s for s in STEPS if s.cluster > 1]


def _stsm_while_wgmma_in_flight(lines: list[str]) -> bool:
    """Whether some STSM comes after an HGMMA and before the next wait for every wgmma group
    (WARPGROUP.DEPBAR.LE gsb0, 0x0): staging while the tensor cores still work."""
    in_flight = False
    for line in lines:
        if "HGMMA" in line:
            in_flight = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            in_flight = False
        elif in_flight and "STSM" in line:
            return True
    return False


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("number", [16, 17, 18])
def test_deferred_rounds_stage_while_the_next_tiles_wgmma_run(number):
    deferred, lean = get_step(number), get_step(15)
    deferred_lines = _sass_lines(build_step(deferred).cubin, deferred.kernel)
    lean_lines = _sass_lines(build_step(lean).cubin, lean.kernel)
    assert _stsm_while_wgmma_in_flight(deferred_lines)
    # step 15 stages only after its last wait: the check can tell the two apart
    assert not _stsm_while_wgmma_in_flight(lean_lines)
    # the same main loop otherwise: four HGMMA per K-tile, one group kept in flight
    assert sum("HGMMA" in line for line in deferred_lines) == 4
    assert any("WARPGROUP.DEPBAR.LE gsb0, 0x1" in line for line in deferred_lines)
    # and no local memory for the packed rounds (a register array indexed at run time)
    assert not any(re.search(r"\b(STL|LDL)\b", line) for line in deferred_lines)


def _hgmma_with_scale_predicate(lines: list[str]) -> list[str]:
    """HGMMAs whose scale-d is a predicate (`..., R24, UP0`): they may overwrite instead of
    accumulate. A constant scale-d of 1 prints no operand there."""
    return [line for line in lines if re.search(r"HGMMA\S* [^;]*, R\d+, !?U?P\d", line)]


def _zeroed_accumulators(lines: list[str]) -> int:
    """Writes of zero (MOV Rn, RZ or CS2R Rn, SRZ, the latter two registers at once) into
    the 128 accumulator registers, which start at the HGMMA's destination register."""
    base = int(re.search(r"HGMMA\S* R(\d+),", next(x for x in lines if "HGMMA" in x)).group(1))
    count = 0
    for line in lines:
        zero = re.search(r"\b(MOV|CS2R)\s+R(\d+), S?RZ\b", line)
        if zero and base <= int(zero.group(2)) < base + 128:
            count += 2 if zero.group(1) == "CS2R" else 1
    return count


@needs_nvcc
@needs_cuobjdump
def test_overwrite_first_starts_a_tile_with_scale_d_instead_of_zeroing():
    first, zeroing = get_step(18), get_step(17)
    first_lines = _sass_lines(build_step(first).cubin, first.kernel)
    zeroing_lines = _sass_lines(build_step(zeroing).cubin, zeroing.kernel)
    assert len(_hgmma_with_scale_predicate(first_lines)) == 1  # the K-tile's first k16 only
    assert not _hgmma_with_scale_predicate(zeroing_lines)
    # 17 zeroes its 128 accumulators (the HGMMA's destination registers) every tile with
    # moves of zero; 18 has none of those left
    zero_moves = [_zeroed_accumulators(lines) for lines in (zeroing_lines, first_lines)]
    assert zero_moves[0] >= 64 and zero_moves[1] == 0, zero_moves


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("step", CLUSTER_STEPS, ids=lambda s: s.name)
def test_cluster_step_multicasts_b_and_keeps_fences_out_of_the_main_loop(step):
    lines = _sass_lines(build_step(step).cubin, step.kernel)
    sass = "\n".join(lines)
    # Its own A (plain) and its half of B (multicast to both CTAs): one load of each kind.
    assert sass.count("UTMALDG.2D.MULTICAST") >= 1 and "UTMALDG.2D " in sass
    # Two cluster barriers: after the mbarrier init and before exit.
    assert sass.count("UCGABAR_ARV") == 2 and sass.count("UCGABAR_WAIT") == 2
    # The remote stage release is a plain mbarrier arrival; a .release.cluster one compiles
    # to MEMBAR.ALL.GPU per K-tile (measured here before the fix). Only the two cluster
    # barriers may carry a GPU-scope fence, and no MEMBAR may sit between HGMMAs.
    # Step 19 adds one: the release store of its fix-up flag (stream_k.cuh), after a segment.
    assert sass.count("MEMBAR.ALL.GPU") <= 2 + step.stream_k
    hgmma_at = [i for i, line in enumerate(lines) if "HGMMA" in line]
    first = min(hgmma_at)
    # Step 19 compiles the K-tile loop twice (whole tiles, then its segments) with epilogue
    # code between the copies: each copy's HGMMAs, a run of nearby lines, must be fence-free.
    runs = [[first]]
    for at in hgmma_at[1:]:
        if step.stream_k and at - runs[-1][-1] > 200:
            runs.append([at])
        else:
            runs[-1].append(at)
    assert len(runs) == (2 if step.stream_k else 1)
    assert not any("MEMBAR" in line for run in runs for line in lines[run[0] : run[-1]])
    if step.tma_store_box is not None:
        # The epilogue: 16 stmatrix.x4 per thread into the staging buffer (in one round or
        # two), TMA stores out; per-thread global stores only in the fallback for tiles TMA
        # cannot store exactly (N not a multiple of 8), after the last HGMMA.
        # Steps 16 and 17 stage deferred rounds in more places (inside the next tile's loop,
        # before the next epilogue, after the last tile): 8 more per place.
        stsm = sass.count("STSM.16.M88.4")
        deferred = step.number >= 16
        assert (stsm % 8 == 0 and stsm > 16 if deferred else stsm == 16) and "UTMASTG.2D" in sass
        stores = [i for i, line in enumerate(lines) if re.search(r"\bSTG\.", line)]
        assert stores and min(stores) > first
    if step.tiles.get("schedule", "").startswith("pingpong"):
        # The turn: each consumer arrives on the other's named barrier.
        assert any(re.search(r"\bBAR\.ARV\b", line) for line in lines)


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("step", TMA_STEPS, ids=lambda s: s.name)
def test_tma_step_parameters_match_what_the_launcher_packs(step):
    sizes = _kernel_param_sizes(build_step(step).cubin, step.kernel)
    blank = tma.TensorMapParam.from_encoded(bytes(tma.TENSOR_MAP_BYTES))
    if step.tma_store_box is None:
        params = tma_step_params(blank, blank, 10, 20, 30, 0x1000, 20)
        assert sizes == [ctypes.sizeof(p) for p in params] == [128, 128, 4, 4, 4, 8, 4]
    else:
        workspace = (0x2000, 0x3000) if step.stream_k else None
        params = tma_step_params(blank, blank, 10, 20, 30, 0x1000, 20, map_c=blank,
                                 workspace=workspace)  # fmt: skip
        packed = [ctypes.sizeof(p) for p in params]
        # a stream-K step's partial sums and flags after exact_cols
        assert sizes == packed == [128, 128, 128, 4, 4, 4, 8, 4, 4] + [8, 8] * step.stream_k


def test_steps_are_numbered_and_described():
    assert [s.number for s in STEPS] == list(range(1, len(STEPS) + 1))
    for step in STEPS:
        source = (HGEMM_DIR / step.file).read_text()
        assert step.file.startswith(f"{step.number:02d}_")
        assert f"{step.kernel}(" in source
        assert "// kernelab-arch: sm_90a" in source
        meta = step.metadata()
        assert meta["technique"] and meta["proof"] and meta["expected_speedup"] > 0
        assert meta["tiles"]["block"] and meta["tiles"]["mma"]
        # The step table mirrors the .cu's constants: stages and threads per block.
        stages = re.search(r"STAGES = (\d+)", source)
        assert stages and int(stages.group(1)) == step.pipeline["stages"]
        block = re.search(r"BM = (\d+), BN = (\d+), BK = (\d+)", source)
        assert block and [int(x) for x in block.groups()] == step.tiles["block"]
        launch = step.launch(4096, 4096, 4096)
        assert launch.block[0] == step.tiles["threads"]
        assert launch.shared_bytes == step.pipeline["shared_bytes"] <= MAX_SMEM_PER_BLOCK
        # Awkward shapes round the grid up: every output element has a block.
        odd = step.launch(4097, 129, 4100)
        bm, bn = step.tiles["block"][:2]
        if step.persistent:  # a block per tile up to the SM count; blocks then walk tiles
            c = step.cluster  # clusters of c CTAs stacked along M walk c x 1 groups of tiles
            tiles_m, tiles_n = -(-4097 // bm), -(-129 // bn)
            groups = -(-tiles_m // c) * tiles_n
            assert odd.grid == (c * min(groups, 132 // c), 1, 1)
        else:
            assert odd.grid[0] * bn >= 129 and odd.grid[1] * bm >= 4097


def test_registry_lists_every_step():
    from kernelab.spec.registry import get

    for step in STEPS:
        impl = get(step.name)
        assert impl.op == "gemm" and impl.dtypes == ("bf16",)
        assert impl.metadata["tiles"] == step.tiles


def test_unknown_step_is_a_clear_error():
    with pytest.raises(UnknownNameError, match="hgemm step"):
        get_step("hgemm:99")
    assert get_step("hgemm:02") is get_step(2) is get_step("2")


# ---- TMA tensor-map arguments and the launch parameter array (no driver needed) ----------


def test_tiled_map_is_innermost_first_in_bytes():
    t = tma.tiled_map_2d(0x10000, 4097, 4100, 4104, box_rows=128, box_cols=64)
    assert t.global_dim == (4100, 4097)  # (k, rows): the real K, so the tail reads zeros
    assert t.global_strides == (4104 * 2,)
    assert t.box_dim == (64, 128)
    assert t.element_strides == (1, 1)
    assert t.box_bytes == 16384  # what one load's mbarrier must expect, edges included


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"address": 0x10008}, "16-byte aligned"),
        ({"row_stride": 4100}, "multiple of 16"),
        ({"row_stride": 4000}, "shorter than a row"),
        ({"rows": 0}, "at least 1 x 1"),
        ({"box_rows": 257}, "outside 1..256"),
        ({"box_cols": 128}, "at most 128 bytes wide"),  # 256 bytes > the 128-byte swizzle
        ({"box_cols": 4}, "inner extent"),  # 8 bytes: not a multiple of 16
    ],
)
def test_tiled_map_refuses_what_tma_cannot_describe(kwargs, message):
    args = {"address": 0x10000, "rows": 100, "cols": 4100, "row_stride": 4104}
    args.update(kwargs)
    box = {k: args.pop(k) for k in ("box_rows", "box_cols") if k in args}
    with pytest.raises(KernelabError, match=message):
        tma.tiled_map_2d(
            **args, box_rows=box.get("box_rows", 128), box_cols=box.get("box_cols", 64)
        )


def test_tensor_map_param_is_the_encoded_bytes():
    data = bytes(range(128))
    param = tma.TensorMapParam.from_encoded(data)
    assert ctypes.sizeof(param) == 128 and ctypes.alignment(param) >= 8
    assert ctypes.string_at(ctypes.addressof(param), 128) == data
    with pytest.raises(KernelabError, match="128 bytes"):
        tma.TensorMapParam.from_encoded(bytes(64))


def test_param_array_points_at_each_argument():
    data = bytes(range(1, 129))
    params = tma_step_params(
        tma.TensorMapParam.from_encoded(data), tma.TensorMapParam.from_encoded(data[::-1]),
        7, 11, 13, 0xDEADBEEF00, 6,
    )  # fmt: skip
    array = prepared.param_array(params)
    assert len(array) == 7
    assert ctypes.string_at(array[0], 128) == data
    assert ctypes.string_at(array[1], 128) == data[::-1]
    ints = [
        ctypes.cast(array[i], ctypes.POINTER(ctypes.c_int32)).contents.value for i in (2, 3, 4, 6)
    ]
    assert ints == [7, 11, 13, 6]
    assert ctypes.cast(array[5], ctypes.POINTER(ctypes.c_uint64)).contents.value == 0xDEADBEEF00


def test_persistent_step_launches_one_block_per_sm_at_most():
    step = get_step(6)
    assert step.launch(4096, 4096, 4096).grid == (132, 1, 1)  # 512 tiles on an H200
    assert step.launch(4096, 4096, 4096, sms=114).grid == (114, 1, 1)
    assert step.launch(300, 600, 64, sms=132).grid == (3 * 3, 1, 1)  # fewer tiles than SMs
    assert get_step(5).launch(300, 600, 64, sms=7).grid == (3, 3, 1)  # not persistent


def test_cluster_step_grid_is_whole_clusters_that_fit_at_once():
    step = get_step(7)
    assert step.cluster == 2
    # 4096^2: 32 x 16 tiles = 16 x 16 pair tiles = 256 > 66 co-resident clusters.
    assert step.launch(4096, 4096, 4096).grid == (132, 1, 1)
    assert step.launch(4096, 4096, 4096, sms=2 * 60).grid == (120, 1, 1)
    assert step.launch(4096, 4096, 4096, sms=131).grid == (130, 1, 1)  # never half a cluster
    # 2048^2: 8 pair rows x 8 columns = 64 clusters, 128 CTAs; an odd tile row count still
    # needs its last pair (the second CTA there owns no rows).
    assert step.launch(2048, 2048, 2048).grid == (128, 1, 1)
    assert step.launch(129, 256, 64).grid == (2, 1, 1)
    assert step.launch(3 * 128, 300, 64).grid == (2 * 2 * 2, 1, 1)
    four = get_step(9)
    assert four.cluster == 4
    assert four.launch(4096, 4096, 4096).grid == (132, 1, 1)  # 128 cluster tiles, 33 fit
    assert four.launch(4096, 4096, 4096, sms=4 * 30).grid == (120, 1, 1)
    assert four.launch(2048, 2048, 2048).grid == (128, 1, 1)  # 4 cluster rows x 8 columns
    assert four.launch(129, 256, 64).grid == (4, 1, 1)  # 2 tile rows: 2 CTAs own none
    # Ping-pong: 64-row tiles, a cluster tile is 2 x 64 rows; 4096^2 has 32 x 16 of them.
    pingpong = get_step(11)
    assert pingpong.launch(4096, 4096, 4096).grid == (132, 1, 1)
    assert pingpong.launch(2048, 2048, 2048).grid == (132, 1, 1)  # 128 cluster tiles > 66
    assert pingpong.launch(65, 256, 64).grid == (2, 1, 1)  # 2 tile rows, one cluster tile
    assert pingpong.launch(64, 300, 64).grid == (2 * 2, 1, 1)  # the second CTAs own no rows


TMA_STORE_STEPS = [s for s in STEPS if s.tma_store_box is not None]
STEP_10_VARIANTS = [s for s in STEPS if s.file.startswith(("10_", "12_", "13_", "14_", "15_"))]


@pytest.mark.parametrize("step", STEP_10_VARIANTS, ids=lambda s: s.name)
def test_step_10_variants_differ_only_in_what_they_claim(step):
    """10 and 12-15 are one kernel body (cooperative_store_gemm.cuh) with compile-time choices:
    the raster group the metadata names, for 13-14 the borrowed slot, for 15 the lean loop."""
    source = (HGEMM_DIR / step.file).read_text()
    call = re.search(
        r"cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, (\S+), (\w+)(?:, (\w+))?>",
        source,
    )
    assert call, "not built on the shared body"
    group = re.search(r"GROUP_C_ROWS = (\d+);", source)
    rows = int(group.group(1)) if group else 1024  # 10: cluster_gemm's default
    if "tile_order" in step.tiles:
        assert f"groups of {rows} rows of C" in step.tiles["tile_order"]
    assert call.group(2) == ("true" if step.number in (13, 14) else "false")
    assert (call.group(3) or "false") == ("true" if step.number == 15 else "false")
    assert step.launch(4096, 4096, 4096) == get_step(10).launch(4096, 4096, 4096)
    assert step.pipeline["shared_bytes"] == get_step(10).pipeline["shared_bytes"] == 230_400


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("step", STEP_10_VARIANTS, ids=lambda s: s.name)
def test_borrowed_slot_epilogue_stores_in_one_round(step):
    """Step 10 commits its TMA stores in two bulk groups per tile (UTMACMDFLUSH twice, a
    warpgroup barrier per round); 13-14 in one, and meet both consumers on barrier 5 first."""
    sass = "\n".join(_sass_lines(build_step(step).cubin, step.kernel))
    borrows = step.number in (13, 14)
    assert sass.count("UTMACMDFLUSH") == (1 if borrows else 2)
    assert sass.count("UTMASTG.2D") == 4 and sass.count("STSM.16.M88.4") == 16
    assert bool(re.search(r"BAR\.SYNC\S* 0x5, 0x100\b", sass)) == borrows  # 256 threads


def _k_tile_loop(sass_lines: list[str]) -> list[str]:
    """The consumer's K-tile loop: from the target of the first backward branch after the first
    HGMMA to that branch."""
    addressed = [
        (int(m.group(1), 16), m.group(2))
        for m in (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line) for line in sass_lines)
        if m
    ]
    first = next(i for i, (_, text) in enumerate(addressed) if "HGMMA" in text)
    for address, text in addressed[first:]:
        branch = re.search(r"BRA (0x[0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < addressed[first][0]:
            start = int(branch.group(1), 16)
            return [t for a, t in addressed if start <= a <= address]
    raise AssertionError("no K-tile loop around the first HGMMA")


@needs_nvcc
@needs_cuobjdump
def test_lean_loop_issues_fewer_instructions_per_k_tile_than_step_12():
    """Step 15's claim in the SASS: the same 4 HGMMAs per K-tile, at least 20 fewer other
    instructions per warp than step 12 (111 and 84 with nvcc 13.0)."""
    loops = {}
    for number in (12, 15):
        step = get_step(number)
        loops[number] = _k_tile_loop(_sass_lines(build_step(step).cubin, step.kernel))
    assert [sum("HGMMA" in t for t in loops[n]) for n in (12, 15)] == [4, 4]
    assert len(loops[15]) <= len(loops[12]) - 20, (len(loops[12]), len(loops[15]))


def test_exact_store_columns_stop_at_the_last_16_bytes_inside_n():
    # TMA clips stores at 16 bytes: 131 bf16 columns (262 bytes) would be written to 136.
    assert exact_store_columns(131) == 128
    assert [exact_store_columns(n) for n in (1, 7, 8, 9, 256, 4096)] == [0, 0, 8, 8, 256, 4096]


def test_tma_store_params_carry_the_output_for_the_edge_fallback():
    blank = tma.TensorMapParam.from_encoded(bytes(tma.TENSOR_MAP_BYTES))
    params = tma_step_params(blank, blank, 300, 131, 77, 0xDEADBEEF00, 136, map_c=blank)
    array = prepared.param_array(params)
    assert len(array) == 9
    assert ctypes.cast(array[6], ctypes.POINTER(ctypes.c_uint64)).contents.value == 0xDEADBEEF00
    ints = [ctypes.cast(array[i], ctypes.POINTER(ctypes.c_int32)).contents.value for i in (3, 7, 8)]
    assert ints == [300, 136, 128]  # M, ldc, exact_cols: the last tile is stored from registers


@pytest.mark.parametrize("step", TMA_STORE_STEPS, ids=lambda s: s.name)
def test_tma_store_step_maps_c_with_its_store_box(monkeypatch, step):
    import torch

    seen = []
    monkeypatch.setattr(tma, "encode", lambda tiled: seen.append(tiled) or bytes(128))
    out = torch.zeros(300, 136, dtype=torch.bfloat16)[:, :131]
    output_map_param(step, out, 136)
    assert [(t.global_dim, t.global_strides, t.box_dim) for t in seen] == [
        ((131, 300), (272,), (64, 64))
    ]
    assert seen[0].swizzle_bytes == 128  # the layout the kernel's stmatrix writes
    with pytest.raises(KernelabError, match="multiple of 16"):  # the launcher pads these
        output_map_param(step, torch.zeros(300, 131, dtype=torch.bfloat16), 131)


def test_tensor_maps_follow_each_steps_boxes(monkeypatch):
    """Step 03 maps B^T [N, K] with 128 x 64 boxes; steps 04+ map B [K, N] as stored with
    64 k x 64 n boxes (dims innermost first: (n, k)); A is 128 x 64 everywhere."""
    import torch

    seen = []
    monkeypatch.setattr(tma, "encode", lambda tiled: seen.append(tiled) or bytes(128))
    a = torch.zeros(300, 80, dtype=torch.bfloat16)[:, :77]
    b = torch.zeros(77, 136, dtype=torch.bfloat16)[:, :131]
    bt = torch.zeros(131, 80, dtype=torch.bfloat16)[:, :77]
    for number in range(4, len(STEPS) + 1):
        seen.clear()
        tensor_map_params(get_step(number), a, 80, b, 136)
        a_rows = 64 if number == 11 else 128  # ping-pong tiles are 64 rows high
        assert [(t.global_dim, t.global_strides, t.box_dim) for t in seen] == [
            ((77, 300), (160,), (64, a_rows)),
            ((131, 77), (272,), (64, 64)),
        ]
        assert seen[1].box_bytes == 8192  # one n atom: the LBO the kernels' descriptors use
    seen.clear()
    tensor_map_params(get_step(3), a, 80, bt, 80)
    assert seen[1].global_dim == (77, 131) and seen[1].box_dim == (64, 128)
    with pytest.raises(KernelabError, match="TMA"):
        tensor_map_params(get_step(2), a, 80, bt, 80)


# ---- the launcher's layouts (CPU tensors stand in for CUDA ones) -------------------------


def test_aligned_rows_keeps_aligned_operands_and_pads_the_rest():
    import torch

    a = torch.randn(5, 16).to(torch.bfloat16)
    same, ld = aligned_rows(a)
    assert same.data_ptr() == a.data_ptr() and ld == 16
    for odd in (torch.randn(5, 13).to(torch.bfloat16), torch.randn(16, 5).to(torch.bfloat16).t()):
        padded, ld = aligned_rows(odd)
        assert ld % 8 == 0 and padded.stride() == (ld, 1) and padded.data_ptr() % 16 == 0
        assert torch.equal(padded, odd)


def test_transposed_rows_is_b_transposed_with_aligned_rows():
    import torch

    b = torch.randn(13, 7).to(torch.bfloat16)
    bt, ld = transposed_rows(b)
    assert ld == 16 and bt.stride() == (16, 1) and bt.shape == (7, 13)
    assert torch.equal(bt, b.t())


def test_hgemm_refuses_bad_operands():
    import torch

    a = torch.randn(4, 8).to(torch.bfloat16)
    with pytest.raises(KernelabError, match="bfloat16"):
        hgemm(1, a.float(), a.t())
    with pytest.raises(KernelabError, match="CUDA tensor"):
        hgemm(1, a, a.t())
    with pytest.raises(KernelabError, match="2-D"):
        hgemm(1, a[0], a.t())


# ---- on the GPU -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_on_gpu(step, shape):
    from kernelab.harness.check import check_implementation
    from kernelab.spec.registry import get

    m, n, k = shape
    fn = get(step.name).build()
    report = check_implementation(fn, "gemm", {"m": m, "n": n, "k": k}, "bf16", trials=2)
    assert report.ok, report.message


@pytest.mark.gpu
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_handles_views_and_a_given_output(step):
    """A a view with lda = K + 3 = 80 (aligned rows, read in place, a K tail of 5 elements),
    B a view whose base is 2 bytes off alignment (copied), C a strided view whose padding
    must stay untouched, and an output base that is not 4-byte aligned."""
    import torch

    from kernelab.harness.check import compare

    m, n, k = 300, 131, 77
    a = torch.randn(m, k + 3, device="cuda").to(torch.bfloat16)[:, :k]
    b = torch.randn(k, n + 1, device="cuda").to(torch.bfloat16)[:, 1:]
    ref = a.double() @ b.double()
    # Guard rows below and columns right of the view (row stride 136: TMA-describable), so a
    # store past either edge shows; then a view whose N is a multiple of 8 (all TMA).
    for cols, stride in ((n, n + 5), (128, 136)):
        c_full = torch.full((m + 3, stride), 7.0, device="cuda", dtype=torch.bfloat16)
        hgemm(step, a, b[:, :cols], out=c_full[:m, :cols])
        assert compare(c_full[:m, :cols], ref[:, :cols], dtype="bf16").ok
        assert (c_full[:, cols:] == 7.0).all(), "wrote past the output's columns"
        assert (c_full[m:] == 7.0).all(), "wrote past the output's rows"
    shifted = torch.zeros(m * n + 1, device="cuda", dtype=torch.bfloat16)[1:].view(m, n)
    hgemm(step, a, b, out=shifted)
    assert compare(shifted, ref, dtype="bf16").ok


@pytest.mark.gpu
@pytest.mark.parametrize("step", CLUSTER_STEPS, ids=lambda s: s.name)
def test_cluster_grid_fits_the_gpu_at_once(step):
    import torch

    from kernelab.ladders.hgemm import persistent_launch
    from kernelab.ladders.hgemm.tma import co_resident_clusters

    built = build_step(step)
    probe = step.launch(4096, 4096, 4096)
    clusters = co_resident_clusters(built.cubin, step.kernel, built.arch, probe)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert 1 <= clusters <= sms // step.cluster
    launch = persistent_launch(step, built, 4096, 4096, 4096, torch.device("cuda"))
    assert launch.grid == (step.cluster * clusters, 1, 1)


@pytest.mark.gpu
def test_tensor_map_encodes_on_the_driver():
    import torch

    a = torch.empty(300, 136, device="cuda", dtype=torch.bfloat16)
    t = tma.tiled_map_2d(a.data_ptr(), 300, 130, 136, box_rows=128, box_cols=64)
    assert len(tma.encode(t)) == tma.TENSOR_MAP_BYTES
