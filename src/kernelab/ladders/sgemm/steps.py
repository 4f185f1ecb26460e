"""The fp32 SGEMM ladder as data: one row per step, from naive to cuBLAS-class.

Each step names its source file and kernel, the launch geometry its tile constants imply
(kept here, next to the tiles, and mirrored by the constants at the top of each .cu), the
technique it adds, the speedup that technique should give over the previous step at
4096^3 on an H200, and the measurement that proves the technique did what it claims.
Expected speedups are predictions written before the GPU runs (docs/notes/sgemm.md compares
them with what was measured); the first step's is 1 by definition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelab.ladders.provider import find_step, select_steps
from kernelab.runtime.cuda.launch import Launch, cdiv

TILE_KEYS_UPPER = frozenset({"BM", "BN", "BK", "TM", "TN", "WM", "WN"})


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/sgemm/
    kernel: str  # extern "C" name
    technique: str
    tiles: dict  # BM, BN, BK, TM, TN, WM, WN, threads, stages (what applies)
    expected_speedup: float  # over the previous step, 4096^3 on an H200: a prediction
    proof: str  # the Nsight Compute metric or SASS fact that shows the technique worked
    geometry: Callable[[int, int, int, dict], Launch]  # (M, N, K, tile defines) -> Launch
    candidates: tuple[dict, ...] = ()  # -D tile configurations a search may try
    sass_facts: dict = field(default_factory=dict)  # static SASS facts CI asserts

    @property
    def name(self) -> str:
        return f"sgemm:{self.number:02d}"

    @property
    def tunable(self) -> bool:
        return bool(self.candidates)

    def launch(self, m: int, n: int, k: int, defines: dict | None = None) -> Launch:
        return self.geometry(m, n, k, {**self.default_defines, **(defines or {})})

    @property
    def default_defines(self) -> dict:
        return dict(self.candidates[0]) if self.candidates else {}

    def tiles_with(self, defines: dict) -> dict:
        """This step's tiles as a tile configuration `defines` sets them (a tuned winner):
        the block, warp and pipeline sizes from the defines, threads from the launch."""
        chosen = {**self.default_defines, **defines}
        tiles = {key: value for key, value in self.tiles.items() if value != "tuned"}
        for define, value in chosen.items():  # BM..WN keep their case; STAGES -> stages
            tiles[define if define in TILE_KEYS_UPPER else define.lower()] = value
        tiles["threads"] = math.prod(self.launch(4096, 4096, 4096, chosen).block)
        return tiles

    def metadata(self, defines: dict | None = None) -> dict:
        """What the registry shows of this step; its "tiles" are the configuration `defines`
        set (by default the step's default tiles), as the tile lens reads them."""
        return {
            "step": self.number,
            "technique": self.technique,
            "tiles": self.tiles_with(defines or {}),
            "expected_speedup": self.expected_speedup,
            "proof": self.proof,
            "file": self.file,
            "kernel": self.kernel,
            "tunable": self.tunable,
        }


def _fixed(block: int, bm: int, bn: int) -> Callable[[int, int, int, dict], Launch]:
    return lambda m, n, k, d: Launch((cdiv(n, bn), cdiv(m, bm), 1), (block, 1, 1), 0)


def _naive(m: int, n: int, k: int, d: dict) -> Launch:
    return Launch((cdiv(m, 32), cdiv(n, 32), 1), (32, 32, 1), 0)


def _tuned(m: int, n: int, k: int, d: dict) -> Launch:
    threads = (d["BM"] // d["TM"]) * (d["BN"] // d["TN"])
    return Launch((cdiv(n, d["BN"]), cdiv(m, d["BM"]), 1), (threads, 1, 1), 0)


def _pipelined(warp_m: int, warp_n: int, swizzled: bool):
    """Steps 10-11: warps of warp_m x warp_n outputs; a STAGES-deep ring of A and B tiles."""

    def geometry(m: int, n: int, k: int, d: dict) -> Launch:
        bm, bn, bk, stages = d["BM"], d["BN"], d["BK"], d["STAGES"]
        threads = 32 * (bm // warp_m) * (bn // warp_n)
        shared = stages * (bm * (bk + 4) + bk * bn) * 4  # A padded row-major + B, fp32
        grid = (cdiv(m, bm) * cdiv(n, bn), 1, 1) if swizzled else (cdiv(n, bn), cdiv(m, bm), 1)
        return Launch(grid, (threads, 1, 1), shared)

    return geometry


def _register_pipeline(m: int, n: int, k: int, d: dict) -> Launch:
    """Steps 12-13: warps of WM x WN outputs; a STAGES-deep ring of k-major A and row-major B."""
    bm, bn, bk, stages = d["BM"], d["BN"], d["BK"], d["STAGES"]
    threads = 32 * (bm // d["WM"]) * (bn // d["WN"])
    shared = stages * bk * ((bm + 4) + bn) * 4  # A[BK][BM + 4] + B[BK][BN], fp32
    return Launch((cdiv(m, bm) * cdiv(n, bn), 1, 1), (threads, 1, 1), shared)


# Step 13's block tile: step 12's H200 winner, 8 warps of 64x64 in one block per SM.
_WIDE_128X256 = {"BM": 128, "BN": 256, "BK": 8, "WM": 64, "WN": 64, "GROUP_M": 8}

STEPS: tuple[Step, ...] = (
    Step(
        1,
        "naive",
        "01_naive.cu",
        "sgemm_naive",
        "one thread per output, operands from global memory",
        {"BM": 32, "BN": 32, "threads": 1024},
        1.0,
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum ~ 32 (uncoalesced)",
        _naive,
    ),
    Step(
        2,
        "coalesced",
        "02_coalesced.cu",
        "sgemm_coalesced",
        "global-memory coalescing: consecutive threads own consecutive columns",
        {"BM": 32, "BN": 32, "threads": 1024},
        12.0,
        "sectors per global load request (l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / "
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum) falls from ~32 to ~4-5",
        _fixed(1024, 32, 32),
    ),
    Step(
        3,
        "smem_blocking",
        "03_smem_blocking.cu",
        "sgemm_smem_blocking",
        "shared-memory blocking: 32x32 tiles of A and B reused 32 times from shared memory",
        {"BM": 32, "BN": 32, "BK": 32, "threads": 1024},
        1.45,
        "global load requests per FFMA (l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum / "
        "FFMA) fall from 2 toward 2/32, shared loads taking their place; dram__bytes_read.sum "
        "and lts__t_sectors_srcunit_tex_op_read.sum need not drop: L1 already caught step 2's "
        "reuse",
        _fixed(1024, 32, 32),
    ),
    Step(
        4,
        "1d_blocktiling",
        "04_1d_blocktiling.cu",
        "sgemm_1d_blocktiling",
        "1D block tiling: 8 outputs per thread, one B value feeds 8 FMAs",
        {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "threads": 512},
        2.2,
        "smsp__inst_executed_op_shared_ld.sum per FFMA falls from 2 to ~1.1",
        _fixed(512, 64, 64),
    ),
    Step(
        5,
        "2d_blocktiling",
        "05_2d_blocktiling.cu",
        "sgemm_2d_blocktiling",
        "2D block tiling: an 8x8 outer product per thread per k",
        {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "threads": 256},
        1.3,
        "sm__inst_executed_pipe_lsu / sm__inst_executed_pipe_fma falls; FFMA share of issue rises",
        _fixed(256, 128, 128),
    ),
    Step(
        6,
        "vectorized",
        "06_vectorized.cu",
        "sgemm_vectorized",
        "128-bit global and shared accesses; A transposed in shared memory; scalar edge path",
        {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "threads": 256, "a_transposed": True},
        1.2,
        "LDG.E.128 and STG.E.128 in SASS (CI checks LDG.E.128); global load instructions per "
        "FFMA (smsp__inst_executed_op_global_ld.sum) ~4x lower. Shared loads do not fall: "
        "ptxas already merged step 5's fragment reads into LDS.128 (32 per K tile in both)",
        _fixed(256, 128, 128),
        sass_facts={"ldg_128": True, "lds_128": True},
    ),
    Step(
        7,
        "bank_conflicts",
        "07_bank_conflicts.cu",
        "sgemm_bank_conflicts",
        "bank-conflict-free shared memory: padded transposed A, fragments in contiguous 16-byte lanes",
        {
            "BM": 128,
            "BN": 128,
            "BK": 8,
            "TM": 8,
            "TN": 8,
            "threads": 256,
            "A_pad": 4,
            "a_transposed": True,
        },
        1.1,
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum and _op_st.sum fall toward 0",
        _fixed(256, 128, 128),
        sass_facts={"ldg_128": True, "lds_128": True},
    ),
    Step(
        8,
        "tuned",
        "08_tuned.cu",
        "sgemm_tuned",
        "tile shape chosen by a search on the card, per GPU and shape class",
        {
            "BM": "tuned",
            "BN": "tuned",
            "BK": "tuned",
            "TM": "tuned",
            "TN": "tuned",
            "A_pad": 4,
            "a_transposed": True,
        },
        1.05,
        "the winner's time against step 7 in the same run; launch__waves_per_multiprocessor",
        _tuned,
        candidates=(
            {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
            {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8},
            {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 8},
            {"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 8},
            {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 8},
            {"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16},
            {"BM": 256, "BN": 128, "BK": 8, "TM": 16, "TN": 8},
        ),
        sass_facts={"ldg_128": True},
    ),
    Step(
        9,
        "warptiling",
        "09_warptiling.cu",
        "sgemm_warptiling",
        "warp tiling: each warp owns a 64x32 sub-tile, every shared load is one wavefront",
        {
            "BM": 128,
            "BN": 128,
            "BK": 16,
            "WM": 64,
            "WN": 32,
            "TM": 8,
            "TN": 8,
            "threads": 256,
            "A_pad": 4,
            "a_transposed": True,
        },
        1.15,
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__inst_executed_op_shared_ld.sum -> 1",
        _fixed(256, 128, 128),
        sass_facts={"ldg_128": True, "lds_128": True},
    ),
    Step(
        10,
        "double_buffering",
        "10_double_buffering.cu",
        "sgemm_double_buffering",
        "multi-stage cp.async pipeline: 16-byte async copies, zero-filled edges, 3 stages",
        {
            "BM": 128,
            "BN": 128,
            "BK": 16,
            "WM": 64,
            "WN": 32,
            "TM": 8,
            "TN": 8,
            "threads": 256,
            "stages": 3,
            "A_pad": 4,
        },
        1.1,
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active and "
        "..._stalled_barrier_... drop; LDGSTS.E.BYPASS.128 in SASS",
        _pipelined(64, 32, swizzled=False),
        candidates=({"BM": 128, "BN": 128, "BK": 16, "STAGES": 3},),
        sass_facts={"ldgsts_128": True, "lds_128": True},
    ),
    Step(
        11,
        "hopper_tiles",
        "11_hopper_tiles.cu",
        "sgemm_hopper_tiles",
        "8x16 outputs per lane in 64x64 warp tiles, lean K loop, grouped block order; block "
        "tile searched (cuBLAS's 256x128 at 1 block/SM, or 128x128 at 2: the H200's pick)",
        {
            "BM": 256,
            "BN": 128,
            "BK": 8,
            "WM": 64,
            "WN": 64,
            "TM": 8,
            "TN": 16,
            "threads": 256,
            "stages": 4,
            "group_m": 8,
            "A_pad": 4,
        },
        1.25,
        "FFMA share of issued instructions (sm__inst_executed_pipe_fma / sm__inst_executed) "
        "rises toward ~87 % (static K loop: 63 % in step 10, 87 % in step 11's 128x128); "
        "lts__t_sectors_srcunit_tex_op_read.sum falls only with the 256x128 tile: the H200 "
        "winner is 128x128, step 10's block tile",
        _pipelined(64, 64, swizzled=True),
        candidates=(
            {"BM": 256, "BN": 128, "BK": 8, "STAGES": 4, "GROUP_M": 8},
            {"BM": 256, "BN": 128, "BK": 8, "STAGES": 3, "GROUP_M": 8},
            {"BM": 256, "BN": 128, "BK": 16, "STAGES": 3, "GROUP_M": 8},
            {"BM": 128, "BN": 256, "BK": 8, "STAGES": 4, "GROUP_M": 8},
            {"BM": 128, "BN": 128, "BK": 8, "STAGES": 4, "GROUP_M": 8},
            {"BM": 256, "BN": 128, "BK": 8, "STAGES": 4, "GROUP_M": 1},
        ),
        sass_facts={"ldgsts_128": True, "lds_128": True},
    ),
    Step(
        12,
        "register_pipeline",
        "12_register_pipeline.cu",
        "sgemm_register_pipeline",
        "pipelined to the registers: k-major A via 4-byte cp.async, fragments for k+1 loaded "
        "during the FFMAs of k, one barrier per K-tile, partial K-tile first",
        {
            "BM": 128,
            "BN": 128,
            "BK": 8,
            "WM": 64,
            "WN": 64,
            "TM": 8,
            "TN": 16,
            "threads": 128,
            "stages": 4,
            "group_m": 8,
            "A_pad": 4,
            "a_transposed": True,
        },
        1.14,
        "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active falls against "
        "step 11; FFMA share of issued instructions (sm__inst_executed_pipe_fma / "
        "sm__inst_executed) >= 89 %; LDGSTS.E (4-byte, A transposed) and LDGSTS.E.BYPASS.128 "
        "(B) in SASS; l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum ~ 0",
        _register_pipeline,
        candidates=(
            # 4 warps of 64x64, 2 blocks (8 warps) per SM: one block's barrier overlaps the
            # other's FFMAs.
            {"BM": 128, "BN": 128, "BK": 8, "WM": 64, "WN": 64, "STAGES": 4, "GROUP_M": 8},
            # cuBLAS's own shape: 8 warps of 64x64 in one block per SM.
            {"BM": 256, "BN": 128, "BK": 8, "WM": 64, "WN": 64, "STAGES": 3, "GROUP_M": 8},
            {"BM": 128, "BN": 256, "BK": 8, "WM": 64, "WN": 64, "STAGES": 3, "GROUP_M": 8},
            # Half the per-K-tile overhead (barrier, copies, pointers) per FFMA.
            {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 64, "STAGES": 3, "GROUP_M": 8},
            # 8 x 8 per lane, <= 128 registers: 2 blocks of 8 warps, 16 warps per SM.
            {"BM": 128, "BN": 128, "BK": 8, "WM": 64, "WN": 32, "STAGES": 4, "GROUP_M": 8},
            # Small shapes (1024^3: 256 blocks instead of 64), 4 x 8 per lane.
            {"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "STAGES": 4, "GROUP_M": 8},
        ),
        sass_facts={"ldgsts_128": True, "lds_128": True},
    ),
    Step(
        13,
        "spread_copies",
        "13_spread_copies.cu",
        "sgemm_spread_copies",
        "copies that never hold up the fragment loads: A copied along k (4 rows x 32 bytes "
        "per warp request, cuBLAS's layout, 4 lines instead of 16) and each K-tile's copies "
        "spread over its k steps instead of one burst after the barrier",
        {
            "BM": 128,
            "BN": 256,
            "BK": 8,
            "WM": 64,
            "WN": 64,
            "TM": 8,
            "TN": 16,
            "threads": 256,
            "stages": 3,
            "group_m": 8,
            "spread": 7,
            "A_pad": 4,
            "a_transposed": True,
        },
        1.05,
        "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active falls from 0.56 "
        "(step 12) toward cuBLAS's 0.21 and smsp__issue_active.avg.pct_of_peak_sustained_active "
        "rises toward 90 %; global sectors per LDGSTS request ~4 "
        "(sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access.sum / "
        "sm__sass_l1tex_t_requests_pipe_lsu_mem_global_op_ldgsts.sum); "
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum ~ 0",
        _register_pipeline,
        candidates=(
            # Step 12's H200 winner (45.1 TFLOP/s at 4096^3) with the two changes.
            {**_WIDE_128X256, "STAGES": 3, "SPREAD": 7},
            # The layout alone, copies still in one burst: separates the two changes.
            {**_WIDE_128X256, "STAGES": 3, "SPREAD": 1},
            # Halfway: two or three copies a k step over k = 0..2, fewer address recomputations.
            {**_WIDE_128X256, "STAGES": 3, "SPREAD": 3},
            # A fourth stage: the copies now take the whole K-tile to issue, so one more tile
            # in flight keeps long_scoreboard (0.08 against cuBLAS's 0.02) from growing.
            {**_WIDE_128X256, "STAGES": 4, "SPREAD": 7},
            {**_WIDE_128X256, "STAGES": 4, "SPREAD": 3},
            # Small shapes (1024^3: 256 blocks instead of 64), 4 x 8 per lane.
            {
                "BM": 64,
                "BN": 64,
                "BK": 8,
                "WM": 32,
                "WN": 32,
                "STAGES": 4,
                "GROUP_M": 8,
                "SPREAD": 7,
            },
            # Not here: 256x128 and 128x128, which need 8 A pointers a thread (255 registers,
            # 60 FFMAs reading one register bank, 85-87 % FFMA in the loop).
        ),
        sass_facts={"ldgsts_128": True, "lds_128": True},
    ),
)


def get_step(number: int | str) -> Step:
    return find_step("sgemm", number, STEPS)


def parse_steps(spec: str | None) -> list[Step]:
    """ "1,5,10" or "1-4,11" or None (all) -> steps in ladder order."""
    return select_steps(spec, STEPS, get_step)
