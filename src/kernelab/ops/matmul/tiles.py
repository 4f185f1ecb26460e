"""The matmul's candidate tiles as tables, and when each is offered (heuristics as data).

A candidate is one launch configuration of the TMA kernel: BM x BN output tiles, BK values of
K per stage (128 bytes of K per row: one 128-byte-swizzled TMA box, or 256 for the
small-problem tiles), warps, stages, a split epilogue, warp specialization, split-K.
"""

from __future__ import annotations

import triton

from kernelab.runtime.tuner import config_as_dict

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
# (benchmarks/results/h200/experiments/triton_matmul_small.json (at f7bfe57)) 64x128 with 256-byte rows at
# 4 warps took 1024^3 bf16 from 70 % to 92 % of cuBLAS, 128x64 to 88 %. Shared memory per
# stage: (BM + BN) * K bytes. On the H100 (earlier record `matmul-small`, benchmarks/earlier-records.md,
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
