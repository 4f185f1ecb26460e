"""Where a decode GEMV sits on the roofline as the batch m grows: a pure function of the shape,
the dtype and a catalog GPU (no torch, no GPU).

y[m, n] = x[m, k] W[n, k]^T does 2*m*n*k FLOPs and moves at least (n*k + m*k + m*n) elements:
W dominates while m << n, k, so the intensity is about 2*m*n*k / (n*k*itemsize) = m FLOP per
byte at bf16 and grows linearly with m until the x and y terms matter. It crosses the ridge
(peak FLOP/s / bandwidth) at

    m* = ridge * b * n*k / (2*n*k - ridge * b * (n + k))      (b = bytes per element)

and never when the denominator is <= 0 (the x and y traffic alone keeps it memory-bound).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class WalkPoint:
    m: int
    flops: float
    bytes: float
    intensity: float  # FLOP/byte
    attainable_tflops: float  # min(peak, intensity * bandwidth)
    floor_us: float  # max(flops / peak, bytes / bandwidth)
    bound: str  # "memory" or "compute"

    def to_dict(self) -> dict:
        return asdict(self)


def crossover_m(n: int, k: int, ridge: float, itemsize: float) -> int | None:
    """The smallest integer m at which the GEMV's intensity reaches the ridge; None if never."""
    denominator = 2.0 * n * k - ridge * itemsize * (n + k)
    if denominator <= 0:
        return None
    return max(1, math.ceil(ridge * itemsize * n * k / denominator))


def walk(n: int, k: int, *, gpu: str = "h100-sxm", dtype: str = "bf16",
         batches=DECODE_BATCHES) -> dict:  # fmt: skip
    """The roofline walk of W[n, k] over `batches`: one WalkPoint each, the ridge, and m*.
    KernelabError when the catalog has no dense `dtype` rate for the GPU (the walk needs its
    compute roof; a GPU without the dtype has no ridge to walk to)."""
    from kernelab.errors import KernelabError
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline.costs import gemv_batched

    spec = get_gpu(gpu)
    if dtype not in spec.peak_tflops:
        raise KernelabError(
            f"the catalog has no dense {dtype} rate for the {spec.id} "
            f"(it lists {', '.join(spec.peak_tflops)}): no {dtype} roofline walk"
        )
    peak, bandwidth = spec.peak_flops(dtype), spec.bandwidth_bytes_per_s
    points = []
    for m in batches:
        cost = gemv_batched(m, n, k, dtype=dtype)
        attainable = min(peak, cost.intensity * bandwidth)
        points.append(WalkPoint(
            m=m, flops=cost.flops, bytes=cost.bytes, intensity=cost.intensity,
            attainable_tflops=attainable / 1e12,
            floor_us=max(cost.flops / peak, cost.bytes / bandwidth) * 1e6,
            bound="memory" if cost.intensity < peak / bandwidth else "compute",
        ))  # fmt: skip
    ridge = peak / bandwidth
    itemsize = cost.bytes / (n * k + m * k + m * n)
    return {"gpu": spec.id, "dtype": dtype, "n": n, "k": k, "ridge": ridge,
            "crossover_m": crossover_m(n, k, ridge, itemsize), "points": points}  # fmt: skip
