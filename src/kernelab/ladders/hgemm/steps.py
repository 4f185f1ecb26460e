"""The Hopper bf16 GEMM ladder as data: one row per step, from mma.sync to TMA + wgmma.

Each step names its source and kernel, the launch geometry its tile constants imply (mirrored
by the constants at the top of each .cu), the operand layout its launcher hands over, its
tiles and pipeline, the speedup it should give over the previous step at 4096^3 on an H200
(a prediction written before any GPU run; docs/notes/hgemm.md gives the reasoning), the
measurement that proves the technique worked, and the SASS opcodes CI asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kernelab.ladders.provider import find_step
from kernelab.runtime.cuda.launch import Launch, cdiv

SWIZZLE_ALIGN_SLACK = 1024  # the kernels round their dynamic shared memory up to 1024 bytes


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/hgemm/
    kernel: str  # extern "C" name
    technique: str
    b_layout: str  # "kn": B[K, N] row-major as given; "nk": B^T[N, K], transposed by the launcher
    uses_tma: bool  # the kernel takes two CUtensorMap parameters instead of A/B pointers
    tiles: dict  # block, warpgroup / warp tile, MMA instruction shape
    pipeline: dict  # stages, bytes in flight per SM, what overlaps with what
    expected_speedup: float  # over the previous step, 4096^3 on an H200: a prediction
    proof: str  # the Nsight Compute metric or SASS fact that shows the technique worked
    sass_claims: tuple[str, ...]  # opcodes (prefixes) that must appear in the kernel's SASS
    geometry: Callable[[int, int, int], Launch]
    # TMA steps: the box each load copies, (rows, cols) of the operand as the kernel reads it
    # (A [M, K]; B^T [N, K] for "nk", B [K, N] for "kn"), cols innermost, at most 128 bytes.
    tma_boxes: tuple[tuple[int, int], tuple[int, int]] | None = None
    persistent: bool = False  # one block per SM walking the tiles: the grid needs the SM count
    cluster: int = 1  # CTAs per thread-block cluster (compile-time __cluster_dims__ in the .cu)
    # TMA-store steps: the box each store writes, (rows, cols) of C; the kernel then takes a
    # third CUtensorMap (C) in place of the C pointer and ldc.
    tma_store_box: tuple[int, int] | None = None
    # Stream-K steps (19) take two more parameters: a workspace of STREAM_K_SLOT_BYTES per
    # consumer warpgroup of the grid for partial sums, and an int flag per slot, zero before
    # the first launch (each launch leaves them zero).
    stream_k: bool = False
    # A stream-K step's twin without the split: where the split would share nothing (no full
    # round, or less saved than the fix-up costs: stream_k_shares), the launcher runs that
    # step's kernel instead. None: always this step's own kernel.
    whole_tile_step: int | None = None

    @property
    def name(self) -> str:
        return f"hgemm:{self.number:02d}"

    def launch(self, m: int, n: int, k: int, *, sms: int | None = None) -> Launch:
        """Grid, block and shared memory for an m x n x k problem; a persistent step sizes
        its grid to `sms` (default: an H100/H200's 132), the blocks that can be resident at
        once (for a cluster step: cluster size x co-resident clusters)."""
        if self.persistent and sms is not None:
            return self.geometry(m, n, k, sms=sms)
        return self.geometry(m, n, k)

    def metadata(self) -> dict:
        return {
            "step": self.number,
            "technique": self.technique,
            "tiles": self.tiles,
            "pipeline": self.pipeline,
            "b_layout": self.b_layout,
            "expected_speedup": self.expected_speedup,
            "proof": self.proof,
            "sass_claims": list(self.sass_claims),
            "file": self.file,
            "kernel": self.kernel,
            "tma_boxes": [list(box) for box in self.tma_boxes] if self.tma_boxes else None,
            "cluster": self.cluster,
            "tma_store_box": list(self.tma_store_box) if self.tma_store_box else None,
            "stream_k": self.stream_k,
            "whole_tile_step": self.whole_tile_step,
        }


def _block_tile(threads: int, bm: int, bn: int, shared_bytes: int):
    def geometry(m: int, n: int, k: int) -> Launch:
        return Launch((cdiv(n, bn), cdiv(m, bm), 1), (threads, 1, 1), shared_bytes)

    return geometry


HOPPER_SMS = 132  # H100 SXM and H200


def _persistent_tiles(threads: int, bm: int, bn: int, shared_bytes: int):
    def geometry(m: int, n: int, k: int, *, sms: int = HOPPER_SMS) -> Launch:
        tiles = cdiv(m, bm) * cdiv(n, bn)
        return Launch((min(tiles, sms), 1, 1), (threads, 1, 1), shared_bytes)

    return geometry


def _persistent_cluster_tiles(threads: int, bm: int, bn: int, cluster: int, shared_bytes: int):
    """Clusters of `cluster` CTAs stacked along M walk pair tiles (cluster x bm rows, bn
    columns); the grid is whole clusters, no more than can be resident at once."""

    def geometry(m: int, n: int, k: int, *, sms: int = HOPPER_SMS) -> Launch:
        cluster_tiles = cdiv(cdiv(m, bm), cluster) * cdiv(n, bn)
        return Launch((cluster * min(cluster_tiles, sms // cluster), 1, 1), (threads, 1, 1),
                      shared_bytes)  # fmt: skip

    return geometry


# Shared memory of each step, in bytes, from its tile constants.
MMA_SYNC_SMEM = 3 * (128 * (32 + 8) + 32 * (128 + 8)) * 2  # padded A and B, 3 stages
WGMMA_STAGE = (128 * 64 + 128 * 64) * 2  # A + B^T tile, 128-byte swizzled rows
WGMMA_SMEM = 3 * WGMMA_STAGE + SWIZZLE_ALIGN_SLACK
TMA_SMEM = 3 * WGMMA_STAGE + SWIZZLE_ALIGN_SLACK
NO_TRANSPOSE_SMEM = 3 * WGMMA_STAGE + SWIZZLE_ALIGN_SLACK  # same bytes, B as two 64 x 64 boxes
WS_STAGE = (128 * 64 + 64 * 256) * 2  # A 128 x 64 + B 64 x 256: 48 KiB
WS_SMEM = 4 * WS_STAGE + SWIZZLE_ALIGN_SLACK
C_STAGING = 128 * 256 * 2  # step 08: the block's output tile in bf16, staged for TMA stores
TMA_STORE_SMEM = 3 * WS_STAGE + C_STAGING + SWIZZLE_ALIGN_SLACK
C_STAGING_HALF = C_STAGING // 2  # step 10: two 64 x 64 boxes per consumer, two rounds
FOUR_STAGE_STORE_SMEM = 4 * WS_STAGE + C_STAGING_HALF + SWIZZLE_ALIGN_SLACK
PINGPONG_STAGE = (64 * 64 + 64 * 256) * 2  # step 11: A 64 x 64 + B 64 x 256: 40 KiB
PINGPONG_SMEM = 4 * PINGPONG_STAGE + C_STAGING + SWIZZLE_ALIGN_SLACK

# TMA boxes as (rows, cols) of the operand in memory; 64 bf16 = 128 bytes = the swizzle span.
A_BOX = (128, 64)  # 128 rows of A x 64 k
A_BOX_PINGPONG = (64, 64)  # step 11: a 64-row tile
BT_BOX = (128, 64)  # 128 rows of B^T (n) x 64 k
B_KN_BOX = (64, 64)  # 64 rows of B (k) x 64 n: one n atom of the MN-major descriptor
C_BOX = (64, 64)  # 64 rows of C x 64 columns: one consumer's quarter of its 64 x 256 slice

# Steps 02-03: one warpgroup owns the 128 x 128 block tile as two m64 halves.
WGMMA_TILES = {
    "block": [128, 128, 64],
    "warpgroups": 1,
    "warpgroup_tile": [128, 128],
    "mma": "wgmma.m64n128k16.bf16 (2 per k16, 8 per K-tile)",
    "threads": 128,
}

# Steps 05+: a producer warpgroup and two consumer warpgroups of m64n256 each.
WS_TILES = {
    "block": [128, 256, 64],
    "warpgroups": 3,
    "warpgroup_tile": [64, 256],
    "mma": "wgmma.m64n256k16.bf16, B N-major (1 per consumer per k16, 4 per K-tile)",
    "threads": 384,
    "roles": "warpgroup 0 producer (1 thread issues TMA), 1-2 consumers",
}


def _step_10_variant(
    number: int,
    slug: str,
    kernel: str,
    technique: str,
    group_c_rows: int,
    overlap: str,
    expected_speedup: float,
    proof: str,
) -> Step:
    """A compile-time variant of step 10 (cooperative_store_gemm.cuh: 4 stages, 2x1 clusters,
    TMA-store epilogue, 230,400 bytes of shared memory); its expected speedup is over 10."""
    return Step(
        number,
        slug,
        f"{number:02d}_{slug}.cu",
        kernel,
        technique,
        "kn",
        True,
        {
            **WS_TILES,
            "cluster": [2, 1],
            "tma_store_box": list(C_BOX),
            "tile_order": f"pair tiles of 256 x 256 in groups of {group_c_rows} rows of C, "
            "column-major inside a group",
        },
        {
            "stages": 4,
            "shared_bytes": FOUR_STAGE_STORE_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "c_staging_bytes": C_STAGING_HALF,
            "blocks_per_sm": 1,
            "overlap": overlap,
        },
        expected_speedup,
        proof,
        ("HGMMA", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "STSM", "USETMAXREG"),
        _persistent_cluster_tiles(384, 128, 256, 2, FOUR_STAGE_STORE_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
        cluster=2,
        tma_store_box=C_BOX,
    )


STEPS: tuple[Step, ...] = (
    Step(
        1,
        "mma_sync",
        "01_mma_sync.cu",
        "hgemm_mma_sync",
        "warp-level mma.sync m16n8k16 fed by ldmatrix from a 3-stage cp.async ring",
        "kn",
        False,
        {
            "block": [128, 128, 32],
            "warps": [2, 4],
            "warp_tile": [64, 32],
            "mma": "mma.sync.m16n8k16.bf16 (16 per warp per k16)",
            "threads": 256,
        },
        {
            "stages": 3,
            "shared_bytes": MMA_SYNC_SMEM,
            "bytes_in_flight_per_block": 2 * 16384,
            "overlap": "cp.async of K-tiles k+1, k+2 with the ldmatrix + mma of tile k",
        },
        1.0,
        "HMMA.16816.F32.BF16 and LDSM in SASS; sm__pipe_tensor_cycles_active.avg.pct_of_peak_"
        "sustained_active well below 100 % (mma.sync caps Hopper at about 2/3 of its peak)",
        ("HMMA", "LDSM", "LDGSTS"),
        _block_tile(256, 128, 128, MMA_SYNC_SMEM),
    ),
    Step(
        2,
        "wgmma",
        "02_wgmma.cu",
        "hgemm_wgmma",
        "warpgroup wgmma.mma_async m64n128k16, both operands from 128-byte-swizzled shared memory",
        "nk",
        False,
        WGMMA_TILES,
        {
            "stages": 3,
            "shared_bytes": WGMMA_SMEM,
            "bytes_in_flight_per_block": 2 * WGMMA_STAGE,
            "blocks_per_sm": 2,
            "overlap": "cp.async of tiles k+1, k+2 with the wgmma of tile k; "
            "wgmma waited (wait_group 0) every K-tile",
        },
        1.4,
        "HGMMA.64x128x16.F32.BF16 in SASS, no HMMA; sm__pipe_tensor_cycles_active rises "
        "against step 01; stalls move from math-pipe throttle / short scoreboard to the gmma wait",
        ("HGMMA", "LDGSTS", "WARPGROUP"),
        _block_tile(128, 128, 128, WGMMA_SMEM),
    ),
    Step(
        3,
        "tma_mbarrier",
        "03_tma_mbarrier.cu",
        "hgemm_tma_mbarrier",
        "TMA tile loads (cp.async.bulk.tensor, hardware swizzle and edge zero-fill) completing "
        "on mbarriers, 3 stages",
        "nk",
        True,
        {**WGMMA_TILES, "tma_box": [64, 128]},
        {
            "stages": 3,
            "shared_bytes": TMA_SMEM,
            "bytes_in_flight_per_block": 2 * WGMMA_STAGE,
            "blocks_per_sm": 2,
            "overlap": "TMA of tiles k+1, k+2 with the wgmma of tile k; one thread issues "
            "2 TMA per K-tile instead of 2,048 cp.async",
        },
        1.2,
        "UTMALDG and SYNCS (mbarrier) in SASS, no LDGSTS; smsp__inst_executed falls against "
        "step 02 (no per-thread copy address math); sm__pipe_tensor_cycles_active rises",
        ("HGMMA", "UTMALDG", "SYNCS"),
        _block_tile(128, 128, 128, TMA_SMEM),
        (A_BOX, BT_BOX),
    ),
    Step(
        4,
        "no_transpose",
        "04_no_transpose.cu",
        "hgemm_no_transpose",
        "B read as stored (B[K, N], N innermost): TMA boxes of 64 k x 64 n, wgmma with "
        "imm-trans-b = 1 and the MN-major 128-byte-swizzle descriptor; no B transpose per call",
        "kn",
        True,
        {**WGMMA_TILES, "mma": "wgmma.m64n128k16.bf16, B N-major (2 per k16, 8 per K-tile)"},
        {
            "stages": 3,
            "shared_bytes": NO_TRANSPOSE_SMEM,
            "bytes_in_flight_per_block": 2 * WGMMA_STAGE,
            "blocks_per_sm": 2,
            "overlap": "as step 03; the launcher no longer transposes B (4 * K * N bytes of "
            "HBM traffic and one extra kernel per call gone)",
        },
        # 03 measured 336 us at 4096^3 cold, of which the transpose alone took 124 us; the
        # kernel's own ~212 us is unchanged by the layout -> 336 / 212.
        1.55,
        "HGMMA ... gdesc[..].tnspB in SASS (every wgmma reads B N-major); one kernel per call in "
        "an nsys/ncu trace instead of transpose + GEMM; time drops by the hgemm:transpose_b row",
        ("HGMMA", "UTMALDG", "SYNCS"),
        _block_tile(128, 128, 128, NO_TRANSPOSE_SMEM),
        (A_BOX, B_KN_BOX),
    ),
    Step(
        5,
        "warp_specialized",
        "05_warp_specialized.cu",
        "hgemm_warp_specialized",
        "warp specialisation: a TMA producer warpgroup (setmaxnreg.dec 40) and two wgmma "
        "consumer warpgroups (setmaxnreg.inc 232) on full/empty mbarrier pairs, 128 x 256 tile, "
        "one wgmma group kept in flight",
        "kn",
        True,
        WS_TILES,
        {
            "stages": 4,
            "shared_bytes": WS_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "blocks_per_sm": 1,
            "overlap": "TMA of up to 4 K-tiles ahead with the wgmma; consecutive K-tiles' wgmma "
            "groups back to back (wait_group 1); no block barrier in the main loop",
        },
        # 04 is predicted near 645 TFLOP/s at 4096^3 (its 2 blocks per SM already hide part of
        # the drain); the anchor ladder gained x1.4 from a pipelined mbarrier loop over its
        # plain warp-specialised one. Predict 760 TFLOP/s, ~cuBLAS: x1.18.
        1.18,
        "USETMAXREG (TRY_ALLOC and DEALLOC) in SASS; HGMMA.64x256x16 with tnspB; "
        "sm__pipe_tensor_cycles_active up against 04; the consumers' top stall is the gmma "
        "wait or the full barrier, not a block barrier",
        ("HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"),
        _block_tile(384, 128, 256, WS_SMEM),
        (A_BOX, B_KN_BOX),
    ),
    Step(
        6,
        "persistent",
        "06_persistent.cu",
        "hgemm_persistent",
        "persistent grid (one block per SM walking the tiles) in grouped order (8 tile rows "
        "per group) for L2 reuse; the producer loads the next tile during the epilogue",
        "kn",
        True,
        {**WS_TILES, "tile_order": "groups of 8 tile rows, column-major inside a group"},
        {
            "stages": 4,
            "shared_bytes": WS_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "blocks_per_sm": 1,
            "overlap": "as step 05, plus the next tile's first 4 K-tiles of TMA with this "
            "tile's epilogue; no block launch or prologue per tile",
        },
        # The epilogue (128 x 256 bf16 from registers) and the prologue (first TMA round trip)
        # of each tile stop idling the SM: ~5 % at 4096^3 (4 tiles per SM); grouped order
        # lowers HBM traffic where 05's row-major block order spans all of B: ~3 %.
        1.08,
        "grid = SM count in the launch; lts__t_sector_hit_rate up and dram__bytes_read down "
        "against step 05; sm__pipe_tensor_cycles_active up (shorter gaps between tiles)",
        ("HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"),
        _persistent_tiles(384, 128, 256, WS_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
    ),
    Step(
        7,
        "cluster_multicast",
        "07_cluster_multicast.cu",
        "hgemm_cluster_multicast",
        "2x1 thread-block clusters on vertically adjacent tiles: each CTA loads its A and half "
        "of the shared B tile, multicast by TMA into both CTAs (L2->SM traffic per K-tile "
        "48 -> 32 KiB); stages released to both CTAs' producers",
        "kn",
        True,
        {
            **WS_TILES,
            "cluster": [2, 1],
            "tile_order": "pair tiles of 256 x 256 in groups of 4 "
            "pair rows, column-major inside a group",
        },  # fmt: skip
        {
            "stages": 4,
            "shared_bytes": WS_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "l2_bytes_per_k_tile_per_sm": WS_STAGE - 64 * 128 * 2,  # A + half of B: 32 KiB
            "blocks_per_sm": 1,
            "overlap": "as step 06; each stage's B half arrives from the peer CTA's TMA",
        },
        # 06 measured 703 TFLOP/s at 4096^3 cold (92 % of cuBLAS): ~8 TB/s of L2->SM traffic
        # at 48 KiB per 0.8 us K-tile per SM. A third less of it should let the TMA keep
        # ahead where the L2 is the limit: the public anchor gained 783 -> 820 (x1.05) from
        # clusters at 8192^3. Predict x1.04 -> ~730.
        1.04,
        "UTMALDG.2D.MULTICAST in SASS; lts__t_sectors_srcunit_tex_op_read (L2 reads) down "
        "by ~1/3 against step 06 at the same FLOPs; sm__pipe_tensor_cycles_active up",
        ("HGMMA", "UTMALDG.2D.MULTICAST", "SYNCS", "USETMAXREG", "UCGABAR_ARV"),
        _persistent_cluster_tiles(384, 128, 256, 2, WS_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
        cluster=2,
    ),
    Step(
        8,
        "tma_store",
        "08_tma_store.cu",
        "hgemm_tma_store",
        "TMA-store epilogue: stmatrix packs each consumer's 64 x 256 tile into a swizzled "
        "staging buffer, one thread stores it with 4 cp.async.bulk.tensor stores and the "
        "consumers go on to the next tile's main loop; 3 stages to make room",
        "kn",
        True,
        {**WS_TILES, "cluster": [2, 1], "tma_store_box": list(C_BOX)},
        {
            "stages": 3,
            "shared_bytes": TMA_STORE_SMEM,
            "bytes_in_flight_per_block": 3 * WS_STAGE,
            "c_staging_bytes": C_STAGING,
            "blocks_per_sm": 1,
            "overlap": "as step 07, plus tile i's TMA stores with tile i+1's main loop; the "
            "ring is one stage shallower",
        },
        # The register epilogue (64 bf16-pair stores per thread, half-filled 32-byte
        # sectors) is ~1 us per tile that no wgmma overlaps: ~3 % at 4096^3 (36 us tiles),
        # less at 8192^3; the 3-stage ring may give some of it back. Predict x1.02 -> ~745.
        1.02,
        "UTMASTG.2D and STSM in SASS, no STG; fewer cycles between a tile's last HGMMA and "
        "the next tile's first in a timeline; l1tex__t_sectors_pipe_lsu_mem_global_op_st gone",
        ("HGMMA", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "STSM", "USETMAXREG"),
        _persistent_cluster_tiles(384, 128, 256, 2, TMA_STORE_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
        cluster=2,
        tma_store_box=C_BOX,
    ),
    Step(
        9,
        "cluster_4",
        "09_cluster_4.cu",
        "hgemm_cluster_4",
        "4x1 clusters: each CTA loads its A and one of B's four boxes, multicast to all four "
        "(L2->SM traffic per K-tile 48 -> 24 KiB); a stage is refilled only when all 8 "
        "consumer warpgroups of the cluster released it",
        "kn",
        True,
        {
            **WS_TILES,
            "cluster": [4, 1],
            "tile_order": "cluster tiles of 512 x 256 in groups "
            "of 2 cluster rows, column-major inside a group",
        },  # fmt: skip
        {
            "stages": 4,
            "shared_bytes": WS_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "l2_bytes_per_k_tile_per_sm": WS_STAGE - 3 * 64 * 64 * 2,  # A + a quarter of B
            "blocks_per_sm": 1,
            "overlap": "as step 07; each stage's B arrives from four CTAs' TMA",
        },
        # Against 07: a further quarter off the L2 feed, paid for by tighter coupling and
        # any SMs a 4-CTA cluster cannot use in a GPC. Predict x1.02 over 07.
        1.02,
        "UTMALDG.2D.MULTICAST with a 4-CTA mask; L2 read sectors down a further 25 % against "
        "step 07; the grid (4 x co-resident clusters) in the benchmark summary",
        ("HGMMA", "UTMALDG.2D.MULTICAST", "SYNCS", "USETMAXREG", "UCGABAR_ARV"),
        _persistent_cluster_tiles(384, 128, 256, 4, WS_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
        cluster=4,
    ),
    Step(
        10,
        "four_stage_store",
        "10_four_stage_store.cu",
        "hgemm_four_stage_store",
        "step 08 with the 4th stage back: each consumer stages its 64 x 256 slice in two "
        "rounds of two 64 x 64 boxes (16 KiB) instead of one round of four, which frees "
        "48 KiB of shared memory for a 4-stage ring",
        "kn",
        True,
        {**WS_TILES, "cluster": [2, 1], "tma_store_box": list(C_BOX)},
        {
            "stages": 4,
            "shared_bytes": FOUR_STAGE_STORE_SMEM,
            "bytes_in_flight_per_block": 4 * WS_STAGE,
            "c_staging_bytes": C_STAGING_HALF,
            "blocks_per_sm": 1,
            "overlap": "as step 08 with 192 KiB in flight instead of 144; a consumer's second "
            "round of stores waits for the first round to read the buffer",
        },
        # 08 measured 728.8 TFLOP/s at 4096^3 cold (93.3 % of cuBLAS) on 3 stages; 07 (4
        # stages, register epilogue) 701.0. If the shallower ring cost 08 about as much as
        # the 4th stage is worth to a cooperative kernel after each epilogue, ~2 %: x1.02.
        1.02,
        "shared_bytes 230,400 in the launch; smsp stall 'long scoreboard' / the full-barrier "
        "wait of the consumers down against step 08; sm__pipe_tensor_cycles_active up",
        ("HGMMA", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "STSM", "USETMAXREG"),
        _persistent_cluster_tiles(384, 128, 256, 2, FOUR_STAGE_STORE_SMEM),
        (A_BOX, B_KN_BOX),
        persistent=True,
        cluster=2,
        tma_store_box=C_BOX,
    ),
    Step(
        11,
        "pingpong",
        "11_pingpong.cu",
        "hgemm_pingpong",
        "ping-pong consumers: each consumer warpgroup owns whole 64 x 256 tiles in turn and "
        "the two take turns at the main loop (named barriers), so one's TMA-store epilogue "
        "runs under the other's wgmma; 2x1 clusters with B multicast, 4 stages of 40 KiB",
        "kn",
        True,
        {
            **WS_TILES,
            "block": [64, 256, 64],
            "warpgroup_tile": [64, 256],
            "cluster": [2, 1],
            "schedule": "pingpong: consumer c owns the CTA's tiles c, c + 2, ...",
            "tma_store_box": list(C_BOX),
        },
        {
            "stages": 4,
            "shared_bytes": PINGPONG_SMEM,
            "bytes_in_flight_per_block": 4 * PINGPONG_STAGE,
            "l2_bytes_per_k_tile_per_sm": PINGPONG_STAGE - 2 * 64 * 64 * 2,  # A + half of B
            "c_staging_bytes": C_STAGING,
            "blocks_per_sm": 1,
            "overlap": "one consumer's epilogue (and its last wgmma group) with the other "
            "consumer's main loop; TMA of up to 4 K-tiles ahead",
        },
        # Against 10: the epilogue of every tile (stmatrix, barriers, the drain of the last
        # wgmma group; ~1-2 us of a ~45 us tile pair at 4096^3) no longer idles the tensor
        # cores: ~3 %; the 1.5x L2->SM bytes per FLOP may give some back. Predict x1.03.
        1.03,
        "BAR.ARV (the turn) in SASS; sm__pipe_tensor_cycles_active up against step 10; in a "
        "timeline, HGMMA issue never stops for an epilogue",
        ("HGMMA", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "STSM", "USETMAXREG", "BAR.ARV"),
        _persistent_cluster_tiles(384, 64, 256, 2, PINGPONG_SMEM),
        (A_BOX_PINGPONG, B_KN_BOX),
        persistent=True,
        cluster=2,
        tma_store_box=C_BOX,
    ),
    *(
        _step_10_variant(*variant)
        for variant in (
            (
                12,
                "raster_2048",
                "hgemm_raster_2048",
                "step 10 with raster groups of 2048 rows of C instead of 1024: the clusters that "
                "run at once cover about 8 x 8 cluster tiles instead of 4 x 16, so the A rows and "
                "B columns each wave reads from HBM shrink (82 -> 65 MiB at 8192^3)",
                2048,
                "as step 10",
                # No change at 2048^3 (one wave: the same tiles run at once); at 4096^3 the
                # wave's footprint (40 -> 33 MiB) already sits in the 50 MiB L2 either way:
                # x1.00. At 8192^3, where the card runs at its power cap, ~1 % from fewer HBM
                # bytes.
                1.00,
                "lts__t_sector_hit_rate up and dram__bytes_read down against step 10 at 8192^3, "
                "the same FLOPs; the time at 8192^3, not at 2048^3, moves",
            ),
            (
                13,
                "borrowed_staging",
                "hgemm_borrowed_staging",
                "step 10 with a one-round epilogue: each consumer stages its whole 64 x 256 "
                "slice, two boxes in its own buffer and two in the B tile of the ring slot the "
                "tile's last K-tile used; that slot is released once the TMA stores have read it",
                1024,
                "as step 10, but a consumer's four TMA stores leave in one round (no wait for "
                "a first round to be read); the last slot is refilled one epilogue later",
                # Step 10's second round (wait until 16 KiB are read, a barrier, 8 stmatrix) is
                # a serial piece of every tile in which no wgmma issues: a few hundred ns of a
                # ~48 us tile at 4096^3, more of the single tile per SM at 2048^3. x1.01.
                1.01,
                "one UTMASTG round per tile (4 stores after 16 STSM, no bulk wait between); "
                "fewer cycles between a tile's last HGMMA and the next tile's first than step 10",
            ),
            (
                14,
                "borrowed_raster",
                "hgemm_borrowed_raster",
                "steps 12 and 13 together: the one-round epilogue in the borrowed slot and "
                "raster groups of 2048 rows of C",
                2048,
                "as step 13, in step 12's tile order",
                # The two touch different phases, so their gains should add: x1.01 at 4096^3
                # (13's), ~x1.02 at 8192^3.
                1.01,
                "step 13's epilogue and step 12's L2 counters together; faster than both where "
                "each of them helps",
            ),
            (
                15,
                "lean_loop",
                "hgemm_lean_loop",
                "step 12 with a leaner consumer K-tile loop: wgmma descriptors stepped by adds "
                "(slot 0's built once) instead of rebuilt from addresses for every k16, and the "
                "ring's slot and phase by unsigned arithmetic",
                2048,
                "as step 12",
                # Under ncu at 4096^3 step 12 took 1.3 % more cycles than cuBLAS, kept the tensor
                # pipe 1.2 % less busy and issued 88 % more instructions (ALU pipe 13.8 % vs
                # 2.8 %). If those issue slots delay the HGMMAs, x1.01; the HGMMAs are
                # asynchronous, so x1.00 is as likely. Not yet run on a GPU.
                1.01,
                "fewer instructions in the consumer's K-tile loop (SASS) and a lower ALU pipe "
                "share under ncu; sm__pipe_tensor_cycles_active up against step 12 if it matters",
            ),
            (
                16,
                "deferred_round",
                "hgemm_deferred_round",
                "step 15 with half of each tile's epilogue deferred: the slice's second store "
                "round waits, packed to bf16 in 32 registers, until the next tile's second "
                "K-tile is in flight, instead of waiting at the tile's end for the TMA unit to "
                "read the first round",
                2048,
                "as step 15, and a tile's second store round overlaps the next tile's wgmma",
                # Paired timings put step 15 at 95.6 / 98.9 / 102.3 % of cuBLAS at 2048^3 /
                # 4096^3 / 8192^3: a per-tile cost cuBLAS does not pay. If the second round is
                # ~1,000 of a 4096^3 tile's ~66,000 cycles, x1.015 at 4096^3, x1.007 at 8192^3;
                # nothing at 2048^3 (one tile per CTA: the last round has no next tile).
                1.015,
                "STSM between the HGMMAs of the consumer's K-tile loop in SASS; paired timings "
                "against step 15 at 4096^3, and a K sweep at 4096 x 4096 whose per-tile "
                "intercept falls",
            ),
            (
                17,
                "deferred_slice",
                "hgemm_deferred_slice",
                "step 16 with the whole epilogue deferred: a tile's end only packs its slice to "
                "bf16 (64 registers); the next tile stages and stores round 0 while its second "
                "K-tile's wgmma run and round 1 while its third's do",
                2048,
                "as step 15, and both store rounds of a tile overlap the next tile's wgmma",
                # Step 16 took 4096^3 from 98.9 to 99.8 % of cuBLAS (paired, H200);
                # the first round is about half of what remains serial at a tile's end
                # (barrier, 8 stmatrix, fence, barrier, the stores' issue; the drain of the
                # last wgmma group stays). x1.003 over 16 at 4096^3.
                1.003,
                "STSM only while a wgmma group is in flight or after the last tile (SASS); "
                "paired timings against step 16 at 4096^3",
            ),
            (
                18,
                "overwrite_first",
                "hgemm_overwrite_first",
                "step 17 whose tiles start with a wgmma that overwrites the accumulators "
                "(scale-d 0) instead of 128 moves per thread that zero them while the tensor "
                "cores wait",
                2048,
                "as step 17, with a shorter gap between a tile's last HGMMA and the next one's "
                "first",
                # ~256 issue cycles per tile (two consumer warps per sub-partition, 128 moves
                # each) of a 4096^3 tile's ~66,000: x1.003 over 17 at 4096^3, if the moves sit
                # on the path between the tiles' HGMMAs.
                1.003,
                "one HGMMA per K-tile loop with a predicate scale-d and no zeroing moves (SASS); "
                "paired timings against step 17 at 4096^3",
            ),
        )
    ),
)

# Step 19's workspace (stream_k.cuh): one slot per consumer warpgroup of the grid, each a
# 64 x 256 fp32 slice of partial sums, and an int flag per slot.
STREAM_K_CONSUMERS = 2
STREAM_K_SLOT_BYTES = 64 * 256 * 4


def stream_k_slots(grid_blocks: int) -> int:
    """Workspace slots a stream-K launch of `grid_blocks` CTAs may use."""
    return grid_blocks * STREAM_K_CONSUMERS


# stream_k_split.cuh's constants: a cluster tile is 2 CTA tiles of 128 x 256 (256 x 256 of C),
# a K-tile 64 deep; sharing needs spans of MIN_SPAN_K_TILES and MIN_SAVED_K_TILES saved.
STREAM_K_CLUSTER_TILE = (256, 256)
STREAM_K_K_TILE = 64
STREAM_K_MIN_SPAN_K_TILES = 8
STREAM_K_MIN_SAVED_K_TILES = 15


def stream_k_work(m: int, n: int, k: int) -> tuple[int, int]:
    """(cluster tiles, K-tiles per tile) of an m x n x k problem under step 19's split."""
    tile_m, tile_n = STREAM_K_CLUSTER_TILE
    return -(-m // tile_m) * -(-n // tile_n), -(-k // STREAM_K_K_TILE)


def stream_k_shares(m: int, n: int, k: int, clusters: int) -> bool:
    """Whether step 19 on `clusters` clusters shares the last round of an m x n x k problem
    out as K-tiles."""
    return split_shares(*stream_k_work(m, n, k), clusters)


def split_shares(cluster_tiles: int, k_tiles: int, clusters: int) -> bool:
    """stream_k_split.cuh's Split, rule for rule: whether it shares tiles out
    (tests/ladders/hgemm/test_hgemm_stream_k.py checks the two agree)."""
    rounds, left = divmod(cluster_tiles, clusters)
    return (
        rounds > 0
        and 2 * left >= clusters
        and left * k_tiles * clusters <= 0x7FFFFFFF  # the kernel's 32-bit range arithmetic
        and left * k_tiles >= STREAM_K_MIN_SPAN_K_TILES * clusters
        and (clusters - left) * k_tiles >= STREAM_K_MIN_SAVED_K_TILES * clusters
    )


STEPS = (
    *STEPS,
    replace(
        _step_10_variant(
            19,
            "stream_k",
            "hgemm_stream_k",
            "step 18 with stream-K over the last partial wave: clusters run whole tiles while "
            "each has one, then share the leftover tiles' K-tiles evenly; a tile's K-tiles "
            "split between clusters are summed through a global workspace (partial sums, "
            "release/acquire flags) by the cluster that runs its last K-tile, which copies "
            "them into its free stage ring with cp.async. Only where that saves at least 15 "
            "K-tile times per cluster (what the fix-up costs, measured); elsewhere the "
            "launcher runs step 18's kernel",
            2048,
            "as step 18; no cluster idles through the last round of tiles",
            # The first version shared at 4096^3 too and was predicted x1.015 there (3.88
            # tile times of work in 4, a fix-up of ~1-2 us); it measured x0.944 on an H100
            # (paired against cuBLAS beside step 18) and x1.024 at 8192^3. The owner's
            # read-back of the partial sums was the cost; staged through shared memory, sharing
            # breaks even near 15 saved K-tile times, so 4096^3 (7.8 saved) runs step 18's
            # kernel: x1.00 there; x1.023 at 8192^3 (62 saved), calibrated.
            1.0,
            "paired timings against step 18 and cuBLAS at 4096^3 and 8192^3; in SASS, the "
            "release store and acquire load of the fix-up (STG.E.STRONG.GPU, "
            "LDG.E.STRONG.GPU), its 32 cp.async copies per thread (LDGSTS), the flag wait's "
            "sleep and trap, and no local memory",
        ),
        stream_k=True,
        # Where the split would share nothing, step 18's kernel: the same schedule without the
        # split's setup (step 19 running whole tiles measured 0.5-1.1 % behind step 18 at
        # 2048^3 and 0.1-0.3 % at 4096^3, H100).
        whole_tile_step=18,
        sass_claims=(
            "HGMMA",
            "UTMALDG.2D.MULTICAST",
            "UTMASTG.2D",
            "STSM",
            "USETMAXREG",
            "LDG.E.STRONG.GPU",
            "STG.E.STRONG.GPU",
            "LDGSTS.E.BYPASS.128",
            "NANOSLEEP",
            "BPT.TRAP",
        ),  # fmt: skip
    ),
)

# The measured story's landmarks and the candidates: every step from 03 but 09 (clusters of 4,
# lost everywhere it was measured: 50-86 % of cuBLAS), what `kernelab ladder hgemm --steps
# 3-8,10-19` times; the last is the ladder's top step (benchmarks/cute_dsl.py compares it).
DEFAULT_BENCHMARK_STEPS = (3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)


# (M, N, K) every step must get right (tests/ladders/hgemm/test_hgemm.py on the GPU, and the ladder
# benchmark before it times anything): a single element; primes and tails of every tile; a
# 128-row tile whose second m64 half holds one row with a last column block of 8 columns (one
# partial TMA box, the others skipped) and a K tail of 9; 17 x 12 = 204 tiles of 128 x 256,
# more than the 132 SMs, so a persistent block walks 1-2 tiles with its 4-slot stage ring
# wrapping mid-tile (3 K-tiles per tile) and a last group of one tile row; skinny N; a
# full-size square; and one that step 19 shares out on 66 clusters (100 cluster tiles: one
# whole round, then 34 tiles of 126 K-tiles, the last 10 elements long, cut into spans of 64.9,
# with ragged bottom and right edges and rows that TMA cannot store).
CHECK_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (127, 257, 65),
    (65, 520, 777),
    (2100, 2900, 130),
    (1000, 1000, 1000),
    (4097, 129, 4100),
    (2048, 2048, 2048),
    (2500, 2550, 8010),
)


def get_step(number: int | str) -> Step:
    return find_step("hgemm", number, STEPS)
