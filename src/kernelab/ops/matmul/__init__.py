"""Matmul c[M, N] = a[M, K] @ b[K, N] with fp32 accumulation: bf16, fp16 and fp8 (e4m3).

Per call: 2*M*N*K FLOPs; at least (M*K + K*N) * itemsize bytes read and M*N * out_itemsize
written. At 4096^3 bf16 that is 137 GFLOP over 100 MiB: ~1,300 FLOP/byte, far right of
the H200's ridge (~206), so the game is keeping the tensor cores fed, not bandwidth.

Two kernels:

- `_matmul_tma_persistent_kernel` (Hopper and newer, cc >= 9.0): the operands are
  described once on the host as TMA tensor descriptors (triton.tools.tensor_descriptor,
  Triton >= 3.4, so the H200's 3.6 has it); each load is one TMA bulk copy into shared memory
  whose out-of-bounds parts read as zero, and stores are clipped, so any M, N, K works without
  masks as long as rows are 16-byte aligned. A persistent grid of one program per SM walks
  the output tiles in grouped order (GROUP_M tile-rows share their B tiles in L2) and, with
  flatten=True, the pipeliner overlaps a tile's epilogue with the next tile's first loads.
  Warp specialization (tl.range(..., warp_specialize=True): producer and consumer warps) is
  a tuned candidate for the large bf16/fp16 tiles, where the H200 sweep measured it ahead.
- `_matmul_kernel`: the plain pointer-and-mask version with the same grouped order, for
  GPUs without TMA, unaligned strides, and the CPU interpreter.

Small problems: at 1024^3 a 128x128 tile makes 64 tiles for the H200's 132 SMs, so half of
them sit idle (74 % of cuBLAS in the sweep). When no large tile fills the SMs (fewer than
80 % of the program slots of the last wave busy), smaller tiles (64x128, 128x64, 64x64) join
the candidates; 2048^3 and up keep the large tiles that won there. Small tiles did not help
(1024^3 stayed at 71 % of cuBLAS): they fill the SMs but double the bytes each FLOP pulls
from L2. What did help bf16/fp16 small problems is 256-byte K rows (BK 128: half the barrier
round trips per byte): 92 % of cuBLAS at 1024^3 on the H200, and with a fourth stage 97-98 %
on the H100 (benchmarks/results/h100/session28/matmul-small/). Candidates that close are
ranked in a final round of alternating pairs after Triton's autotuner has timed them one by one (_runtime.settle_close_choices).
Split-K (SPLIT_K programs share a large tile, each takes a share of K; the last to finish adds
the others' fp32 partials) measured slower everywhere and is a forced option only
(docs/ops/matmul.md).

fp8 inputs produce a bf16 output (kernelab.spec.reference says so). Hopper's fp8 wgmma
wants both operands K-major, so pass b as the transpose of an [N, K] tensor (column-major
b, b.stride(0) == 1) for full speed; a row-major fp8 b is correct but slower.
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton
import triton.language as tl

from kernelab.runtime import tuner as _runtime
from kernelab.runtime.launch_plans import keep, launch, planned
from kernelab.runtime.tuner import (
    autotuner_bench,
    config_as_dict,
    interpreting,
    sm_count,
)

GROUP_M = 8

# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def _plain_configs():
    shapes = [  # BM, BN, BK, warps, stages: the plain autotuned set that reached 94.5 %
        (128, 256, 64, 8, 3),
        (128, 128, 64, 4, 4),
        (128, 128, 32, 4, 4),
        (64, 256, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 4, 3),
    ]
    return [
        triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in shapes
    ]


def _set_descriptor_blocks(nargs):
    """Autotune pre-hook: the TMA boxes must match the config's tile before each launch."""
    bm, bn, bk = nargs["BM"], nargs["BN"], nargs["BK"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_KMAJOR"] else [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn // 2] if nargs["EPILOGUE_SPLIT"] else [bm, bn]


# BM, BN, warps, stages, split epilogue. Shared memory per stage: (BM + BN) * BK * itemsize;
# 3-4 stages of 128x256x64 bf16 (48 KiB each) plus the epilogue tile must fit in 227 KiB;
# configs that do not fit are dropped by the autotuner (OutOfResources).
LARGE_TILES = [  # the set that won at 2048^3 and up (98-100 % of cuBLAS in the H200 sweep)
    (128, 256, 8, 3, False),
    (128, 256, 8, 4, True),
    (128, 128, 8, 4, False),
    (128, 128, 4, 4, False),
]
SMALL_TILES = [  # 128-256 tiles at 1024^3: every SM gets one or two
    (64, 128, 4, 4, False),
    (64, 128, 8, 3, False),
    (128, 64, 4, 4, False),
    (64, 64, 4, 4, False),
]
# bf16/fp16 only, for outputs that no large tile fills (where SMALL_TILES alone did not help
# at 1024^3): BM, BN, bytes of K per row of a stage, warps, stages. 256-byte K rows halve the
# barrier round trips per byte (fp8's winner at 1024^3 was 128x64 with BK 128); on the H200
# (benchmarks/results/h200/experiments/triton_matmul_small.json) 64x128 with 256-byte rows at
# 4 warps took 1024^3 bf16 from 70 % to 92 % of cuBLAS, 128x64 to 88 %. Shared memory per
# stage: (BM + BN) * K bytes. On the H100 (benchmarks/results/h100/session28/matmul-small/,
# paired against torch.mm) a fourth stage took 64x128 from 90 to 98 % at 1024^3: with K = 1024
# in eight K-steps of 128, three stages leave too little in flight (two: 71 %).
SMALL_PROBLEM_TILES = [
    (64, 128, 256, 4, 3),
    (64, 128, 256, 4, 4),
    (128, 64, 256, 4, 4),
]
# Split-K (SPLIT_K programs share a large tile, each with its share of K; the last to arrive
# adds the fp32 partials): measured slower than no split in every case of that run (1024^3:
# 47-62 % of cuBLAS; K = 64 to 4096 at M = N = 1024), so it is not a tuning candidate; it
# stays as a forced configuration (`split_k_candidates`), kept correct by the tests.
SPLIT_K_TILES = [  # BM, BN, bytes of K per row, warps, stages, SPLIT_K
    (128, 128, 128, 8, 4, 2),
    (128, 128, 128, 4, 4, 2),
    (128, 128, 256, 8, 3, 2),
    (128, 256, 128, 8, 3, 2),
    (128, 256, 128, 8, 3, 4),
    (64, 128, 128, 8, 3, 2),
]
# A tiling "fills the machine" when its last wave keeps at least this share of the SMs busy.
MIN_WAVE_EFFICIENCY = 0.8


def _candidate(bm, bn, bk, warps, stages, *, split=False, ws=False, split_k=1) -> dict:
    return {
        "BM": bm,
        "BN": bn,
        "BK": bk,
        "EPILOGUE_SPLIT": split,
        "WARP_SPECIALIZE": ws,
        "SPLIT_K": split_k,
        "num_warps": warps,
        "num_stages": stages,
    }


def tma_candidates(
    itemsize: int, *, warp_specialize: bool | None = None, small_tiles: bool = True
) -> list[dict]:
    """Launch configurations the TMA kernel's autotuner chooses from, as plain dicts.

    warp_specialize None: tuned (the large bf16/fp16 tiles both ways, the rest without);
    True or False: forced (True keeps only the large tiles, the ones the sweep ran that way).
    small_tiles=False, warp_specialize=False: the large tiles without ws, the fallback.
    """
    bk = 128 // itemsize  # 128 bytes of K per row: one 128-byte-swizzled TMA box
    if warp_specialize is None:  # fp8 was never run warp-specialized: not a candidate yet
        large_ws = (False, True) if itemsize == 2 else (False,)
    else:
        large_ws = (warp_specialize,)
    found = [
        _candidate(bm, bn, bk, warps, stages, split=split, ws=ws)
        for bm, bn, warps, stages, split in LARGE_TILES
        for ws in large_ws
    ]
    if small_tiles and not warp_specialize:
        found += [
            _candidate(bm, bn, bk, warps, stages, split=split)
            for bm, bn, warps, stages, split in SMALL_TILES
        ]
        if itemsize == 2:
            found += [
                _candidate(bm, bn, k_bytes // itemsize, warps, stages)
                for bm, bn, k_bytes, warps, stages in SMALL_PROBLEM_TILES
            ]
    return found


def split_k_candidates(itemsize: int) -> list[dict]:
    """The split-K configurations (bf16/fp16): forced with matmul(config=...), never tuned."""
    if itemsize != 2:
        return []
    return [
        _candidate(bm, bn, k_bytes // itemsize, warps, stages, split_k=split_k)
        for bm, bn, k_bytes, warps, stages, split_k in SPLIT_K_TILES
    ]


def _wave_efficiency(tiles: int, programs: int) -> float:
    waves = -(-tiles // programs)
    return tiles / (waves * programs)


def fills_machine(m: int, n: int, bm: int, bn: int, programs: int) -> bool:
    """True when an m x n output cut into bm x bn tiles keeps the SMs' last wave busy enough."""
    tiles = -(-m // bm) * -(-n // bn)
    return _wave_efficiency(tiles, programs) >= MIN_WAVE_EFFICIENCY


def for_small_problems(candidate: dict) -> bool:
    """Whether a candidate is only worth timing where no large tile fills the machine."""
    small_shapes = {(bm, bn) for bm, bn, *_ in SMALL_TILES}
    return (candidate["BM"], candidate["BN"]) in small_shapes or candidate.get("SPLIT_K", 1) > 1


def candidates_for(m: int, n: int, programs: int, candidates: list[dict]) -> list[dict]:
    """The candidates worth timing for an m x n output on `programs` SMs.

    Large tiles always; the small-problem ones (small tiles, 256-byte K rows) only when no large tile
    fills the machine, so 2048^3 and up are tuned over the large tiles alone and pay no extra
    compile or tuning time.
    """
    large_shapes = {(bm, bn) for bm, bn, *_ in LARGE_TILES}
    if any(fills_machine(m, n, bm, bn, programs) for bm, bn in large_shapes):
        kept = [c for c in candidates if not for_small_problems(c)]
        return kept or candidates
    return candidates


def _triton_config(candidate: dict, **extra):
    meta = {k: v for k, v in candidate.items() if k not in ("num_warps", "num_stages")}
    return triton.Config(
        meta, num_warps=candidate["num_warps"], num_stages=candidate["num_stages"], **extra
    )


def _prune_tma(configs, named_args, **kwargs):
    """Autotuner early prune: drop the small tiles where a large one fills the machine."""
    args = {**named_args, **kwargs}
    as_dicts = [config_as_dict(c) for c in configs]
    kept = candidates_for(args["M"], args["N"], args["NUM_PROGRAMS"], as_dicts)
    return [c for c, d in zip(configs, as_dicts, strict=True) if d in kept]


@triton.jit
def _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile (pid_m, pid_n) of a linear tile id, walking GROUP_M tile-rows per column sweep.

    Consecutive programs then share B tiles (and nearby A tiles) while they are in L2.
    """
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_group) % group_rows
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_FP32: tl.constexpr = False,
):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    rows = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    cols = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    ks = tl.arange(0, BK)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        k_left = K - k * BK
        # read BM*BK + BK*BN elements (from L2 mostly: neighbours load the same tiles)
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        if DOT_FP32:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)  # 2*BM*BN*BK FLOPs
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    # write BM*BN elements
    c_tile = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _matmul_tma_persistent_kernel(
    a_desc,
    b_desc,
    c_desc,
    partials_ptr,
    arrivals_ptr,
    M,
    N,
    K,
    NUM_PROGRAMS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
    DOT_FP32: tl.constexpr = False,
):
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    out_dtype = c_desc.dtype
    # Work units: SPLIT_K consecutive units share an output tile, each with its share of K.
    for work in tl.range(
        tl.program_id(0),
        num_pid_m * num_pid_n * SPLIT_K,
        NUM_PROGRAMS,
        flatten=True,
        warp_specialize=WARP_SPECIALIZE,
    ):
        if SPLIT_K == 1:
            tile_id = work
            k_first = 0
            k_stop = k_tiles
        else:
            tile_id = work // SPLIT_K
            split = work % SPLIT_K
            k_per_split = tl.cdiv(k_tiles, SPLIT_K)
            k_first = split * k_per_split
            k_stop = tl.minimum(k_first + k_per_split, k_tiles)
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_first, k_stop):
            # two TMA copies: BM*BK + BN*BK elements into shared memory; past K reads zero
            a = a_desc.load([off_m, k * BK])
            if B_KMAJOR:
                b = b_desc.load([off_n, k * BK]).T
            else:
                b = b_desc.load([k * BK, off_n])
            if DOT_FP32:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc)  # wgmma: 2*BM*BN*BK FLOPs
        if SPLIT_K > 1:
            # Every split leaves its fp32 partial in the workspace (BM*BN*4 bytes written) and
            # counts itself in; the one that arrives last reads the others' partials
            # ((SPLIT_K - 1)*BM*BN*4 bytes, from L2), adds them to its own and stores the tile.
            # Nobody waits for anybody, so no launch can deadlock, whatever runs where.
            tile_slots = partials_ptr + tile_id.to(tl.int64) * (SPLIT_K * BM * BN)
            in_tile = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
            tl.store(tile_slots + split * (BM * BN) + in_tile, acc)
            tl.debug_barrier()  # all threads' partials are written before the count says so
            # acq_rel: releases this partial to the last split, acquires the others' for it
            arrived = tl.atomic_add(arrivals_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                for other in tl.static_range(SPLIT_K):
                    if other != split:
                        acc += tl.load(
                            tile_slots + other * (BM * BN) + in_tile, cache_modifier=".cg"
                        )
                # back to zero for the next launch (every split of this tile has counted)
                tl.atomic_xchg(arrivals_ptr + tile_id, 0, sem="relaxed", scope="gpu")
                c_desc.store([off_m, off_n], acc.to(out_dtype))
        # write BM*BN elements; the TMA store clips rows >= M and columns >= N
        elif EPILOGUE_SPLIT:
            # two half-width stores: half the shared-memory staging, one more pipeline stage
            halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([off_m, off_n], left.to(out_dtype))
            c_desc.store([off_m, off_n + BN // 2], right.to(out_dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(out_dtype))


_plain_tuned = triton.autotune(
    configs=_plain_configs(), key=["M", "N", "K"], do_bench=autotuner_bench
)(_matmul_kernel)


# One autotuner per candidate set: each keeps its own cache of choices.
_TMA_TUNERS: dict[tuple[int, bool | None, bool], object] = {}


def _tma_autotuner(itemsize: int, warp_specialize: bool | None, small_tiles: bool = True):
    key = (itemsize, warp_specialize, small_tiles)
    if key not in _TMA_TUNERS:
        configs = [
            _triton_config(c, pre_hook=_set_descriptor_blocks)
            for c in tma_candidates(
                itemsize, warp_specialize=warp_specialize, small_tiles=small_tiles
            )
        ]
        _TMA_TUNERS[key] = triton.autotune(
            configs=configs,
            key=["M", "N", "K", "B_KMAJOR"],
            prune_configs_by={"early_config_prune": _prune_tma},
            do_bench=autotuner_bench,
        )(_matmul_tma_persistent_kernel)
    return _TMA_TUNERS[key]


# Itemsizes whose default set (small tiles, warp specialization) failed to
# compile or run here: they fall back to the large tiles without ws, with a warning.
_DEFAULT_SET_FAILED: set[int] = set()

# Under the CPU interpreter: small tiles, one warp, and DOT_FP32 because Triton 3.9's
# interpreter multiplies bf16 tiles as raw 16-bit integers; the exact fp32 product of the same
# rounded inputs is what the tensor cores compute. Never set on a GPU.
INTERPRETER_TILE = {"BM": 16, "BN": 16, "BK": 16}
_INTERPRETER_LAUNCH = {"DOT_FP32": True, "num_warps": 1, "num_stages": 1}


def tuned_choices() -> list[dict]:
    """What the autotuners chose so far in this process: kernel, candidate set, key, config.

    The key is (M, N, K) and then the rest of the tuner's key (B_KMAJOR, argument dtypes).
    """
    tuners = [("plain", None, None, None, _plain_tuned)]
    tuners += [("tma", *set_key, tuner) for set_key, tuner in _TMA_TUNERS.items()]
    return [
        {
            "kernel": kernel,
            "itemsize": itemsize,
            "warp_specialize": ws,
            "small_tiles": small_tiles,
            "mnk": list(key[:3]),
            "rest_of_key": [str(k) for k in key[3:]],
            "config": config_as_dict(config),
        }
        for kernel, itemsize, ws, small_tiles, tuner in tuners
        for key, config in tuner.cache.items()
    ]


def _output_dtype(dtype):
    return torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype


def _tma_usable(a, b, c) -> bool:
    """TMA needs cc >= 9.0, a unit inner stride and 16-byte aligned bases and row strides."""
    if a.device.type == "cuda" and torch.cuda.get_device_capability(a.device)[0] < 9:
        return False
    b_rows = b.T if b.stride(0) == 1 and b.stride(1) != 1 else b
    for t in (a, b_rows, c):
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    return True


def _fixed_launch(config: dict | None) -> dict | None:
    """The meta-parameters of a launch that skips the autotuner, or None to tune."""
    if interpreting():
        return {**(config or INTERPRETER_TILE), **_INTERPRETER_LAUNCH}
    return None if config is None else dict(config)


# Split-K arrival counters, one buffer per (device, stream). Every launch leaves them at zero
# (the last split of a tile resets its counter), so one buffer serves every call on a stream,
# and launches on different streams, which may overlap, never share one.
_ARRIVALS: dict[tuple, object] = {}
MIN_ARRIVAL_COUNTERS = 1024


def _split_k_workspace(device, candidates: list[dict], m: int, n: int):
    """(partials, arrivals) for the split-K candidates among `candidates`: fp32 room for the
    largest one's partials (one BM x BN slot per split of every tile) and a zeroed counter
    per tile. Without split-K candidates the partials are a one-element placeholder."""
    split = [c for c in candidates if c.get("SPLIT_K", 1) > 1]
    slots = [
        triton.cdiv(m, c["BM"]) * triton.cdiv(n, c["BN"]) * c["BM"] * c["BN"] * c["SPLIT_K"]
        for c in split
    ]
    tiles = [triton.cdiv(m, c["BM"]) * triton.cdiv(n, c["BN"]) for c in split]
    partials = torch.empty(max(slots, default=1), dtype=torch.float32, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    key = (str(device), stream)
    arrivals = _ARRIVALS.get(key)
    if arrivals is None or arrivals.numel() < max(tiles, default=0):
        size = max(MIN_ARRIVAL_COUNTERS, *tiles) if tiles else MIN_ARRIVAL_COUNTERS
        arrivals = torch.zeros(size, dtype=torch.int32, device=device)
        _ARRIVALS[key] = arrivals
    # a plan may hold both: the partials are written before they are read, the counters are
    # left at zero by every launch
    keep(partials, arrivals)
    return partials, arrivals


def _launch_tma(a, b, c, *, warp_specialize: bool | None, config: dict | None) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, K = a.shape
    N = b.shape[1]
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1
    # Placeholder boxes; the autotuner's pre-hook (or the fixed config below) sets the real ones.
    a_desc = TensorDescriptor.from_tensor(a, [16, 16])
    b_desc = TensorDescriptor.from_tensor(b.T if b_kmajor else b, [16, 16])
    c_desc = TensorDescriptor.from_tensor(c, [16, 16])
    descriptors = (a_desc, b_desc, c_desc)
    programs = sm_count(a.device)
    common = {"NUM_PROGRAMS": programs, "GROUP_M": GROUP_M, "B_KMAJOR": b_kmajor}
    fixed = _fixed_launch(config)
    if fixed is not None:
        meta = {"EPILOGUE_SPLIT": False, "WARP_SPECIALIZE": bool(warp_specialize), **fixed}
        if meta.get("SPLIT_K", 1) & (meta.get("SPLIT_K", 1) - 1):
            raise ValueError(f"SPLIT_K must be a power of two, not {meta['SPLIT_K']}")
        _launch_fixed(descriptors, (M, N, K), common, meta, launch)
        return

    def grid(meta):
        tiles = triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"])
        return (min(programs, tiles * meta.get("SPLIT_K", 1)),)

    itemsize = a.element_size()
    tuned = candidates_for(
        M, N, programs, tma_candidates(itemsize, warp_specialize=warp_specialize)
    )
    partials, arrivals = _split_k_workspace(a.device, tuned, M, N)
    args = (*descriptors, partials, arrivals, M, N, K)
    fallback = _tma_autotuner(itemsize, False, small_tiles=False)
    if warp_specialize is None and itemsize in _DEFAULT_SET_FAILED:
        launch(fallback, grid, *args, **common)
        return
    tuner = _tma_autotuner(itemsize, warp_specialize)
    before = _runtime.tuner_state(tuner)
    try:
        launch(tuner, grid, *args, **common)
    except Exception as exc:  # Triton raises compiler errors of many types
        if warp_specialize is not None:
            raise
        _DEFAULT_SET_FAILED.add(itemsize)
        first_line = (str(exc).splitlines() or [""])[0][:200]
        warnings.warn(
            f"triton matmul: the default candidate set failed ({type(exc).__name__}: "
            f"{first_line}); using the large tiles without warp specialization",
            RuntimeWarning,
            stacklevel=3,
        )
        launch(fallback, grid, *args, **common)
        return
    _runtime.settle_close_choices(
        tuner,
        before,
        functools.partial(_launch_candidate, descriptors, (M, N, K), common),
        op="triton.matmul",
    )


def _launch_candidate(descriptors, mnk, common: dict, meta: dict) -> None:
    """One candidate of the final round, launched at Triton's front door (unrecorded)."""
    _launch_fixed(descriptors, mnk, common, meta, _raw_launch)


def _launch_fixed(descriptors, mnk, common: dict, meta: dict, launcher) -> None:
    """One launch of the TMA kernel with the launch configuration `meta` (a candidate dict)."""
    a_desc, b_desc, c_desc = descriptors
    M, N, K = mnk
    _set_descriptor_blocks({"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc, **meta, **common})
    partials, arrivals = _split_k_workspace(a_desc.base.device, [meta], M, N)
    work = triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]) * meta.get("SPLIT_K", 1)
    args = (a_desc, b_desc, c_desc, partials, arrivals, M, N, K)
    launcher(_matmul_tma_persistent_kernel, (min(common["NUM_PROGRAMS"], work),), *args,
             **common, **meta)  # fmt: skip


def _raw_launch(kernel, grid, *args, **kwargs) -> None:
    """Triton's front door, never recorded into a launch plan (the tuner's final round)."""
    kernel[grid](*args, **kwargs)


def _launch_plain(a, b, c, *, config: dict | None) -> None:
    M, K = a.shape
    N = b.shape[1]
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1))
    args += (c.stride(0), c.stride(1))
    fixed = _fixed_launch(config)
    if fixed is not None:
        grid = (triton.cdiv(M, fixed["BM"]) * triton.cdiv(N, fixed["BN"]),)
        launch(_matmul_kernel, grid, *args, **fixed, GROUP_M=GROUP_M)
        return

    def grid(meta):
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    launch(_plain_tuned, grid, *args, GROUP_M=GROUP_M)


def matmul(
    a,
    b,
    *,
    path: str = "auto",
    warp_specialize: bool | None = None,
    config: dict | None = None,
):
    """a[M, K] @ b[K, N] in fp32 accumulation; output in a's dtype (bf16 for fp8 inputs).

    path: "auto" (TMA persistent where usable, else plain), "tma" or "plain".
    warp_specialize: None lets the autotuner choose (bf16/fp16 large tiles are tried both
    ways); True or False forces it in the TMA kernel's tile loop (Hopper/Blackwell).
    config: one launch configuration instead of autotuning, e.g. an entry of
    `tma_candidates(...)` (keys BM, BN, BK, num_warps, num_stages; TMA also EPILOGUE_SPLIT,
    WARP_SPECIALIZE). Under the CPU interpreter only its tile shape is used.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"matmul needs a[M, K] and b[K, N], got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise ValueError(f"matmul needs equal dtypes, got {a.dtype} and {b.dtype}")
    if a.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"matmul supports bf16, fp16 and fp8 e4m3, not {a.dtype}")
    if path not in ("auto", "tma", "plain"):
        raise ValueError(f"path must be 'auto', 'tma' or 'plain', not {path!r}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=_output_dtype(a.dtype))
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    # planned (runtime.launch_plans.planned): the tuned choice keyed by the tensors alone; a
    # forced one by its options as well, since through Triton's front door a forced config cost
    # 28-116 us of host time a call at 1024^3 on an H100, so do_bench timed the launch
    _dispatch(a, b, c, path, warp_specialize, config)
    return c


@planned("triton.matmul", tensors=3, untuned=("auto", None, None))
def _dispatch(a, b, c, path: str, warp_specialize: bool | None, config: dict | None) -> None:
    use_tma = path == "tma" or (path == "auto" and not interpreting() and _tma_usable(a, b, c))
    if use_tma:
        if not _tma_usable(a, b, c):
            raise ValueError("the TMA path needs cc >= 9.0 and 16-byte aligned, unit-stride rows")
        _launch_tma(a, b, c, warp_specialize=warp_specialize, config=config)
    else:
        plain = None if config is None else _plain_part(config)
        _launch_plain(a, b, c, config=plain)


def _plain_part(config: dict) -> dict:
    """The keys of a launch configuration that the plain kernel understands."""
    return {k: v for k, v in config.items() if k in ("BM", "BN", "BK", "num_warps", "num_stages")}


PLANS = _dispatch.plans  # the launch plans (tests read and reset them)
