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
on the H100 (earlier record `matmul-small`, benchmarks/earlier-records.md). Candidates that close are
ranked in a final round of alternating pairs after Triton's autotuner has timed them one by one (_runtime.settle_close_choices).
Split-K (SPLIT_K programs share a large tile, each takes a share of K; the last to finish adds
the others' fp32 partials) measured slower everywhere and is a forced option only
(docs/ops/matmul.md).

fp8 inputs produce a bf16 output (kernelab.spec.reference says so). Hopper's fp8 wgmma
wants both operands K-major, so pass b as the transpose of an [N, K] tensor (column-major
b, b.stride(0) == 1) for full speed; a row-major fp8 b is correct but slower.
"""

from __future__ import annotations

import torch

from kernelab.ops.matmul import plain, tma
from kernelab.ops.matmul.tiles import (
    LARGE_TILES,
    SMALL_PROBLEM_TILES,
    SMALL_TILES,
    SPLIT_K_TILES,
    candidates_for,
    fills_machine,
    for_small_problems,
    split_k_candidates,
    tma_candidates,
)
from kernelab.runtime import tuner as _runtime  # noqa: F401  (tests patch the tuner's state)
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import config_as_dict, interpreting

__all__ = [  # what benchmarks and tests read besides matmul()
    "LARGE_TILES", "SMALL_PROBLEM_TILES", "SMALL_TILES", "SPLIT_K_TILES", "candidates_for",
    "fills_machine", "for_small_problems", "matmul", "split_k_candidates", "tma_candidates",
    "tuned_choices",
]  # fmt: skip

# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def tuned_choices() -> list[dict]:
    """What the autotuners chose so far in this process: kernel, candidate set, key, config.

    The key is (M, N, K) and then the rest of the tuner's key (B_KMAJOR, argument dtypes).
    """
    tuners = [("plain", None, None, None, plain._plain_tuned)]
    tuners += [("tma", *set_key, tuner) for set_key, tuner in tma._TMA_TUNERS.items()]
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
    use_tma = path == "tma" or (path == "auto" and not interpreting() and tma._tma_usable(a, b, c))
    if use_tma:
        if not tma._tma_usable(a, b, c):
            raise ValueError("the TMA path needs cc >= 9.0 and 16-byte aligned, unit-stride rows")
        tma._launch_tma(a, b, c, warp_specialize=warp_specialize, config=config)
    else:
        plain_config = None if config is None else plain._plain_part(config)
        plain._launch_plain(a, b, c, config=plain_config)


PLANS = _dispatch.plans  # the launch plans (tests read and reset them)
