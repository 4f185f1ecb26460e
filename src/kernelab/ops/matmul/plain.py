"""The plain autotuned matmul: pointer loads, one program per output tile in grouped order.

The path where TMA is not usable: GPUs before Hopper, unaligned or strided rows, and the CPU
interpreter (small tiles, one warp, DOT_FP32: Triton 3.9's interpreter multiplies bf16 tiles
as raw 16-bit integers).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.runtime.tuner import autotuner_bench, interpreting

GROUP_M = 8


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


_plain_tuned = triton.autotune(
    configs=_plain_configs(), key=["M", "N", "K"], do_bench=autotuner_bench
)(_matmul_kernel)


# Under the CPU interpreter: small tiles, one warp, and DOT_FP32 because Triton 3.9's
# interpreter multiplies bf16 tiles as raw 16-bit integers; the exact fp32 product of the same
# rounded inputs is what the tensor cores compute. Never set on a GPU.
INTERPRETER_TILE = {"BM": 16, "BN": 16, "BK": 16}
_INTERPRETER_LAUNCH = {"DOT_FP32": True, "num_warps": 1, "num_stages": 1}


def _fixed_launch(config: dict | None) -> dict | None:
    """The meta-parameters of a launch that skips the autotuner, or None to tune."""
    if interpreting():
        return {**(config or INTERPRETER_TILE), **_INTERPRETER_LAUNCH}
    return None if config is None else dict(config)


def _launch_plain(a, b, c, *, config: dict | None) -> None:
    M, K = a.shape
    N = b.shape[1]
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1))
    args += (c.stride(0), c.stride(1))
    fixed = _fixed_launch(config)
    if fixed is not None:
        grid = (triton.cdiv(M, fixed["BM"]) * triton.cdiv(N, fixed["BN"]),)
        _matmul_kernel[grid](*args, **fixed, GROUP_M=GROUP_M)
        return

    def grid(meta):
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    _plain_tuned[grid](*args, GROUP_M=GROUP_M)


def _plain_part(config: dict) -> dict:
    """The keys of a launch configuration that the plain kernel understands."""
    return {k: v for k, v in config.items() if k in ("BM", "BN", "BK", "num_warps", "num_stages")}
