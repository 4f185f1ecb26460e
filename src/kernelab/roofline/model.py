"""The roofline model: where an op's cost sits against a GPU's two ceilings.

A kernel cannot run faster than its FLOPs at the peak math rate, nor than its bytes at the
memory bandwidth. The slower of the two is the floor time; the intensity (FLOP/byte) at
which they are equal is the ridge. Left of the ridge the op is memory-bound, right of it
compute-bound. A measured time is judged against the floor: sol_pct is the share of
speed-of-light it reached, and a time under the floor means the kernel or its cost model
is wrong, never that it won.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kernelab.errors import KernelabError, unknown
from kernelab.roofline.costs import OpCost, canonical_dtype

# A time this much under the floor still counts as rounding, not as faster than light.
LIGHT_SPEED_TOLERANCE = 0.01
FASTER_THAN_LIGHT = "faster than speed of light: check the kernel or its cost model"

# Math modes a dtype may be asked to use instead of its default: fp32 inputs default to the
# SIMT fp32 rate and may use tf32 tensor cores.
_MATH_MODES = {"fp32": ("fp32", "tf32"), "tf32": ("tf32",)}

# Float math that an fp32 unit can do after an exact conversion to fp32: however fast a GPU
# runs these natively, it reaches at least its fp32 rate on them.
RUNS_AS_FP32 = frozenset({"tf32", "bf16", "fp16", "fp8", "fp4"})


def ceilings_phrase(source: str) -> str:
    """How a ceilings source reads in a sentence: "datasheet ceilings", or "measured ceilings
    (measured on NVIDIA H200, 2026-11-29)" for a source that carries its own detail."""
    kind, _, _ = source.partition(" ")
    return f"{kind} ceilings" if kind == source else f"{kind} ceilings ({source})"


def math_dtype(dtype: str, math_mode: str | None = None) -> str:
    """The dtype whose peak rate bounds an op on `dtype` inputs computed in `math_mode`.

    fp32 uses the SIMT "fp32" peak unless math_mode="tf32"; bf16, fp16, fp8, int8 and fp4
    use their tensor-core peaks; fp64 its best dense rate.
    """
    dtype = canonical_dtype(dtype)
    if math_mode is None:
        return dtype
    try:
        mode = canonical_dtype(math_mode)
    except KernelabError:
        raise unknown("math mode", str(math_mode), ("fp32", "tf32")) from None
    allowed = _MATH_MODES.get(dtype, (dtype,))
    if mode not in allowed:
        raise KernelabError(
            f"math mode '{math_mode}' does not apply to {dtype} inputs "
            f"(allowed: {', '.join(allowed)})"
        )
    return mode


@dataclass(frozen=True)
class Ceilings:
    gpu_id: str
    peak_flops: dict  # FLOP/s (OP/s for int8) by dtype, dense
    bandwidth: float  # bytes/s from device memory
    source: str  # "datasheet" (the catalog) or "measured ..." (the harness)

    @classmethod
    def from_spec(cls, spec) -> Ceilings:
        """The datasheet ceilings of a catalog GPUSpec."""
        peaks = {dtype: spec.peak_flops(dtype) for dtype in spec.peak_tflops}
        return cls(spec.id, peaks, spec.bandwidth_bytes_per_s, "datasheet")

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`; a KernelabError naming the GPU when it has none."""
        dtype = canonical_dtype(dtype)
        rate = self.peak_flops.get(dtype)
        if not rate:
            have = ", ".join(d for d, r in self.peak_flops.items() if r) or "none"
            kind, _, _ = self.source.partition(" ")
            where = f"{self.source}; " if kind != self.source else ""
            raise KernelabError(
                f"{self.gpu_id} has no {dtype} peak in its {kind} ceilings ({where}has: {have})"
            )
        return rate

    def fp32_bound_rate(self, dtype: str, intensity: float) -> float | None:
        """The fp32 rate (FLOP/s) that proves an op memory-bound when `dtype` has no rate of
        its own, or None: `dtype` must run as fp32 (RUNS_AS_FP32), the GPU must list fp32,
        and the memory roof at `intensity` must lie below that rate."""
        fp32 = self.peak_flops.get("fp32")
        if dtype not in RUNS_AS_FP32 or not fp32 or intensity * self.bandwidth >= fp32:
            return None
        return fp32

    def ridge(self, dtype: str) -> float:
        """The intensity (FLOP/byte) where the `dtype` compute roof meets the memory roof."""
        return self.peak(dtype) / self.bandwidth

    def to_dict(self) -> dict:
        return {
            "gpu_id": self.gpu_id,
            "peak_flops": dict(self.peak_flops),
            "bandwidth": self.bandwidth,
            "source": self.source,
        }


@dataclass(frozen=True)
class Placement:
    op: str
    shape: dict
    gpu: str
    dtype: str  # input dtype
    math_dtype: str  # the dtype whose peak applies (tf32 for fp32 with math_mode="tf32")
    flops: float
    bytes: float
    intensity: float  # FLOP/byte
    # FLOP/byte, for math_dtype; None where the dtype has no rate (no FLOPs, or a memory
    # roof below the fp32 rate: see place)
    ridge: float | None
    bound: str  # "memory" (intensity < ridge) or "compute" (at the ridge or right of it)
    peak_tflops: float | None  # None with ridge
    bandwidth_gbps: float
    attainable_tflops: float  # min(peak, intensity * bandwidth)
    floor_ms: float  # the speed-of-light time: max(flops / peak, bytes / bandwidth)
    explanation: str
    ceilings_source: str
    time_ms: float | None = None
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    sol_pct: float | None = None  # 100 * floor_ms / time_ms: share of the attainable rate
    faster_than_light: bool = False
    warning: str | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["shape"] = dict(self.shape)
        return data


def place(
    cost: OpCost,
    ceilings: Ceilings,
    *,
    math_mode: str | None = None,
    time_ms: float | None = None,
    unlisted_rate_by_fp32: bool = False,
) -> Placement:
    """Put `cost` on the roofline of `ceilings`; judge `time_ms` against the floor if given.

    An op with no FLOPs (a transpose, a histogram's counting, an integer scan) needs no
    compute roof: where the GPU lists no rate for its dtype (int32, uint8), ridge and peak
    are None and the floor is its bytes over the bandwidth.

    With unlisted_rate_by_fp32, an op whose float math dtype has no listed rate (bf16 on a
    GeForce part) is placed when Ceilings.fp32_bound_rate proves it memory-bound: its math
    runs at least at the fp32 rate, which already outpaces the bytes, so the floor is its
    bytes over the bandwidth whatever the unlisted rate; ridge and peak stay None (unknown).
    Otherwise a missing rate is a KernelabError naming it."""
    compute_dtype = math_dtype(cost.dtype, math_mode)
    bandwidth = ceilings.bandwidth
    intensity = cost.intensity
    listed = ceilings.peak_flops.get(compute_dtype)
    if not listed and (
        cost.flops == 0
        or (unlisted_rate_by_fp32 and ceilings.fp32_bound_rate(compute_dtype, intensity))
    ):
        peak = ridge = None
        floor_s = cost.bytes / bandwidth
    else:
        peak = ceilings.peak(compute_dtype)
        ridge = peak / bandwidth
        floor_s = max(cost.flops / peak, cost.bytes / bandwidth)

    timed: dict = {}
    if time_ms is not None:
        if not isinstance(time_ms, (int, float)) or not math.isfinite(time_ms) or time_ms <= 0:
            raise KernelabError(f"time must be a positive number of milliseconds, got {time_ms}")
        seconds = time_ms * 1e-3
        faster = time_ms < floor_s * 1e3 * (1 - LIGHT_SPEED_TOLERANCE)
        timed = {
            "time_ms": float(time_ms),
            "achieved_tflops": cost.flops / seconds / 1e12,
            "achieved_gbps": cost.bytes / seconds / 1e9,
            "sol_pct": 100.0 * floor_s * 1e3 / time_ms,
            "faster_than_light": faster,
            "warning": FASTER_THAN_LIGHT if faster else None,
        }

    return Placement(
        op=cost.op,
        shape=dict(cost.shape),
        gpu=ceilings.gpu_id,
        dtype=cost.dtype,
        math_dtype=compute_dtype,
        flops=cost.flops,
        bytes=cost.bytes,
        intensity=intensity,
        ridge=ridge,
        bound="memory" if ridge is None or intensity < ridge else "compute",
        peak_tflops=None if peak is None else peak / 1e12,
        bandwidth_gbps=bandwidth / 1e9,
        attainable_tflops=(
            intensity * bandwidth if peak is None else min(peak, intensity * bandwidth)
        )
        / 1e12,
        floor_ms=floor_s * 1e3,
        explanation=cost.explanation,
        ceilings_source=ceilings.source,
        **timed,
    )
