"""The TMA persistent matmul (Hopper): host-side tensor descriptors, one program per SM,
grouped tile order, the K loop flattened so the epilogue overlaps the next tile's loads, an
optional split epilogue (a fourth stage in the freed shared memory), warp specialization and
split-K as candidates (tiles.py).
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton
import triton.language as tl

from kernelab.ops.matmul.plain import GROUP_M, _fixed_launch, _grouped_tile
from kernelab.ops.matmul.tiles import _prune_tma, _triton_config, candidates_for, tma_candidates
from kernelab.runtime import tuner as _runtime
from kernelab.runtime.launch_plans import keep
from kernelab.runtime.tuner import autotuner_bench, sm_count


def _set_descriptor_blocks(nargs):
    """Autotune pre-hook: the TMA boxes must match the config's tile before each launch."""
    bm, bn, bk = nargs["BM"], nargs["BN"], nargs["BK"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_KMAJOR"] else [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn // 2] if nargs["EPILOGUE_SPLIT"] else [bm, bn]


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


def _tma_usable(a, b, c) -> bool:
    """TMA needs cc >= 9.0, a unit inner stride and 16-byte aligned bases and row strides."""
    if a.device.type == "cuda" and torch.cuda.get_device_capability(a.device)[0] < 9:
        return False
    b_rows = b.T if b.stride(0) == 1 and b.stride(1) != 1 else b
    for t in (a, b_rows, c):
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    return True


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
        _launch_fixed(descriptors, (M, N, K), common, meta)
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
        fallback[grid](*args, **common)
        return
    tuner = _tma_autotuner(itemsize, warp_specialize)
    before = _runtime.tuner_state(tuner)
    try:
        tuner[grid](*args, **common)
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
        fallback[grid](*args, **common)
        return
    _runtime.settle_close_choices(
        tuner,
        before,
        functools.partial(_launch_candidate, descriptors, (M, N, K), common),
        op="triton.matmul",
    )


def _launch_candidate(descriptors, mnk, common: dict, meta: dict) -> None:
    """One candidate of the final round (settle_close_choices launches it unrecorded)."""
    _launch_fixed(descriptors, mnk, common, meta)


def _launch_fixed(descriptors, mnk, common: dict, meta: dict) -> None:
    """One launch of the TMA kernel with the launch configuration `meta` (a candidate dict)."""
    a_desc, b_desc, c_desc = descriptors
    M, N, K = mnk
    _set_descriptor_blocks({"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc, **meta, **common})
    partials, arrivals = _split_k_workspace(a_desc.base.device, [meta], M, N)
    work = triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]) * meta.get("SPLIT_K", 1)
    args = (a_desc, b_desc, c_desc, partials, arrivals, M, N, K)
    grid = (min(common["NUM_PROGRAMS"], work),)
    _matmul_tma_persistent_kernel[grid](*args, **common, **meta)
