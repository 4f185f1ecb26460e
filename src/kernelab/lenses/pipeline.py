"""The pipeline lens: Little's law for memory and for tensor-core work.

Little's law says the bytes that must be in flight equal bandwidth x latency. To stream HBM
at full rate every SM must keep (bandwidth / SMs) x latency bytes requested and not yet
arrived; a kernel keeps (bytes per pipeline stage) x (stages loading ahead) x (resident
blocks), so the bandwidth it can reach is that in-flight amount x SMs / latency.

The tensor-core analogue: to keep the MMA units busy across one load latency, an SM must
have (its MMA rate x latency) FLOPs of work whose operands are already on the way, which a
pipeline provides in stages of 2*BM*BN*BK FLOPs each.

Latency defaults are unloaded pointer-chase figures (one dependent load at a time), in
cycles, converted to time at the spec's boost clock. Under load, queueing makes latency
longer, so the bytes in flight derived from them are a lower bound: a kernel that keeps
less cannot saturate the bandwidth, one that keeps this much may still fall short.
Latencies that `kernelab hierarchy` measured on the same GPU model replace them (see
`load_measured_latencies`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kernelab.errors import KernelabError
from kernelab.hardware.specs import GPUSpec
from kernelab.roofline.costs import INTEGER_DTYPES, MAX_COUNT, count_text

LATENCY_SOURCE = (
    "pointer-chase latency in cycles, clocks not locked: github.com/markdewing/AI_kernels "
    "latency/README.md ({board})"
)

# (level -> cycles, board measured) by compute capability.
_POINTER_CHASE_CYCLES: dict[str, tuple[dict[str, float], str]] = {
    "8.0": ({"hbm": 550, "l2": 210}, "A100 SXM"),
    "8.9": ({"hbm": 636, "l2": 296}, "RTX 4090"),
    "9.0": ({"hbm": 700, "l2": 291}, "H100 SXM"),
    "10.0": ({"hbm": 860, "l2": 295}, "B200"),
    "12.0": ({"hbm": 936, "l2": 360}, "RTX 5090"),
}

LEVELS = ("hbm", "l2")


@dataclass(frozen=True)
class Latency:
    level: str  # "hbm" (a DRAM access) or "l2" (an L2 hit)
    ns: float
    cycles: float | None
    source: str
    measured: bool  # True when measured on this GPU rather than taken from the table

    def to_dict(self) -> dict:
        return asdict(self)


def load_measured_latencies(spec: GPUSpec) -> dict[str, float] | None:
    """Latencies in ns ({"hbm": ..., "l2": ...}) measured on this GPU model by `kernelab
    hierarchy` (its newest cached record, or $KERNELAB_HIERARCHY), or None."""
    from kernelab.lenses.hierarchy import load_measured_latencies as from_record

    return from_record(spec)


def default_latencies(spec: GPUSpec) -> dict[str, Latency]:
    """The sourced pointer-chase latencies for the spec's architecture ({} if none known)."""
    entry = _POINTER_CHASE_CYCLES.get(spec.compute_capability) if spec.vendor == "nvidia" else None
    if entry is None:
        return {}
    cycles, board = entry
    ghz = spec.boost_clock_mhz / 1000
    source = LATENCY_SOURCE.format(board=board) + f", at {spec.boost_clock_mhz:.0f} MHz"
    return {
        level: Latency(level=level, ns=count / ghz, cycles=count, source=source, measured=False)
        for level, count in cycles.items()
    }


def memory_latency(
    spec: GPUSpec,
    level: str = "hbm",
    *,
    latency_ns: float | None = None,
    latencies: dict[str, float] | None = None,
) -> Latency:
    """The latency to use, first found of: latency_ns, latencies[level] (an override, in
    ns), this GPU's measured record, the sourced default for its architecture."""
    if level not in LEVELS:
        raise KernelabError(f"unknown memory level '{level}' (known: {', '.join(LEVELS)})")
    if latency_ns is not None:
        return _positive(
            Latency(level, latency_ns, None, "given on the command line", measured=False)
        )
    if latencies and level in latencies:
        return _positive(Latency(level, latencies[level], None, "given", measured=False))
    measured = load_measured_latencies(spec)
    if measured and level in measured:
        return _positive(
            Latency(level, measured[level], None, f"measured on {spec.id}", measured=True)
        )
    defaults = default_latencies(spec)
    if level not in defaults:
        raise KernelabError(
            f"no {level} latency known for {spec.id} ({spec.architecture}); pass --latency-ns"
        )
    return defaults[level]


def figure(value: float, places: int = 0) -> str:
    """A figure for a sentence: fixed-point while it is short, three significant digits in
    exponent form once it would run past seven digits."""
    return f"{value:.{places}f}" if abs(value) < 1e7 else f"{value:.3g}"


def _positive(latency: Latency) -> Latency:
    if not (math.isfinite(latency.ns) and latency.ns > 0):
        raise KernelabError(f"latency must be positive, got {latency.ns} ns")
    return latency


def _bandwidth(spec: GPUSpec, bandwidth_gbps: float | None) -> float:
    value = spec.memory_bandwidth_gbps if bandwidth_gbps is None else bandwidth_gbps
    if not (math.isfinite(value) and value > 0):
        raise KernelabError(f"bandwidth must be positive, got {value} GB/s")
    return value


def bytes_in_flight_needed(
    spec: GPUSpec,
    *,
    bandwidth_gbps: float | None = None,
    latency_ns: float | None = None,
    latencies: dict[str, float] | None = None,
) -> float:
    """Bytes each SM must keep in flight to sustain `bandwidth_gbps` (default: the datasheet
    HBM rate) across the HBM latency: bandwidth x latency / SMs."""
    bandwidth = _bandwidth(spec, bandwidth_gbps) * 1e9
    latency = memory_latency(spec, "hbm", latency_ns=latency_ns, latencies=latencies)
    return bandwidth * latency.ns * 1e-9 / spec.sm_count


def kernel_in_flight(bytes_per_stage: float, stages: int, resident_blocks_per_sm: int) -> float:
    """Bytes one SM keeps in flight: while a block computes on one stage it has the others
    loading (a single-stage kernel has its one stage in flight while it waits for it)."""
    if not (math.isfinite(bytes_per_stage) and bytes_per_stage > 0):
        raise KernelabError(f"bytes per stage must be positive, got {bytes_per_stage}")
    _whole_count("stages", stages)
    _whole_count("blocks per SM", resident_blocks_per_sm)
    return bytes_per_stage * max(stages - 1, 1) * resident_blocks_per_sm


def bandwidth_from_in_flight(
    spec: GPUSpec, bytes_in_flight_per_sm: float, latency_ns: float
) -> float:
    """Bytes/s that `bytes_in_flight_per_sm` on every SM sustains at `latency_ns` (Little's
    law read the other way; the memory's own peak is a separate cap)."""
    if not (math.isfinite(latency_ns) and latency_ns > 0):
        raise KernelabError(f"latency must be positive, got {latency_ns} ns")
    return bytes_in_flight_per_sm * spec.sm_count / (latency_ns * 1e-9)


def stages_to_hide_latency(latency_ns: float, compute_ns_per_stage: float) -> int:
    """Pipeline stages so that loads issued stages-1 steps ahead arrive before they are
    needed: ceil(latency / compute time per stage) + the one being computed."""
    if latency_ns <= 0 or compute_ns_per_stage <= 0:
        raise KernelabError("latency and compute time per stage must be positive")
    return math.ceil(latency_ns / compute_ns_per_stage) + 1


def _kib(value: float) -> str:
    return f"{figure(value / 1024, 1)} KiB"


def _whole_count(name: str, value: int, *, most: int = MAX_COUNT, why: str = "") -> int:
    """`value` if 1 <= value <= most; a KernelabError naming it otherwise."""
    if value <= 0:
        raise KernelabError(f"{name} must be positive, got {count_text(value)}")
    if value > most:
        limit = why or f"2**53 = {MAX_COUNT}"
        raise KernelabError(f"{name} must be at most {limit}, got {count_text(value)}")
    return value


def _blocks_per_sm(spec: GPUSpec, blocks: int) -> int:
    """Resident blocks per SM, within the most the GPU holds (max_blocks_per_sm)."""
    return _whole_count("blocks per SM", blocks, most=spec.max_blocks_per_sm,
                        why=f"{spec.max_blocks_per_sm}, the most one SM of {spec.id} holds")  # fmt: skip


def _check_fits_shared_memory(spec: GPUSpec, bytes_per_stage: float, stages: int,
                              blocks_per_sm: int) -> None:  # fmt: skip
    """A pipeline's stages are shared-memory buffers: one block's must fit the most a block
    may opt in to, and every resident block's together the SM's shared memory."""
    per_block = bytes_per_stage * stages
    per_sm = per_block * blocks_per_sm
    block_limit, sm_limit = spec.smem_per_block_kib * 1024, spec.smem_per_sm_kib * 1024
    if per_block > block_limit:
        raise KernelabError(
            f"{stages} stage(s) x {_kib(bytes_per_stage)} is {_kib(per_block)} of shared memory "
            f"per block; one block on {spec.id} can have at most {spec.smem_per_block_kib} KiB"
        )
    if per_sm > sm_limit:
        raise KernelabError(
            f"{blocks_per_sm} block(s) x {stages} stage(s) x {_kib(bytes_per_stage)} is "
            f"{_kib(per_sm)} of shared memory per SM; one SM of {spec.id} has "
            f"{spec.smem_per_sm_kib} KiB"
        )


@dataclass(frozen=True)
class KernelInFlight:
    bytes_per_stage: float
    stages: int
    blocks_per_sm: int
    in_flight_per_sm: float
    reachable_gbps: float  # min(Little's-law bandwidth, the memory's bandwidth)
    pct_of_bandwidth: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MemoryPipeline:
    gpu: str
    bandwidth_gbps: float
    latency: Latency
    in_flight_total_bytes: float
    in_flight_per_sm_bytes: float
    kernel: KernelInFlight | None
    summary: str

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "bandwidth_gbps": self.bandwidth_gbps,
            "latency": self.latency.to_dict(),
            "in_flight_total_bytes": self.in_flight_total_bytes,
            "in_flight_per_sm_bytes": self.in_flight_per_sm_bytes,
            "kernel": self.kernel.to_dict() if self.kernel else None,
            "summary": self.summary,
        }


def memory_pipeline(
    spec: GPUSpec,
    *,
    bandwidth_gbps: float | None = None,
    latency_ns: float | None = None,
    latencies: dict[str, float] | None = None,
    bytes_per_stage: float | None = None,
    stages: int | None = None,
    blocks_per_sm: int | None = None,
) -> MemoryPipeline:
    """Little's law for HBM on `spec`, and, given a kernel's pipeline (bytes per stage,
    stages, resident blocks per SM), the share of the bandwidth it can keep busy."""
    bandwidth = _bandwidth(spec, bandwidth_gbps)
    latency = memory_latency(spec, "hbm", latency_ns=latency_ns, latencies=latencies)
    per_sm = bytes_in_flight_needed(spec, bandwidth_gbps=bandwidth, latency_ns=latency.ns)
    if not math.isfinite(per_sm * spec.sm_count):
        raise KernelabError(
            f"{figure(bandwidth)} GB/s across {figure(latency.ns)} ns is more bytes in flight "
            "than a float holds"
        )
    summary = (
        f"to saturate {figure(bandwidth)} GB/s on the {spec.id} across a "
        f"{figure(latency.ns)} ns latency, each SM needs at least {_kib(per_sm)} in flight "
        f"({figure(per_sm * spec.sm_count / 1e6, 2)} MB over {spec.sm_count} SMs)"
    )
    kernel = None
    if bytes_per_stage is not None or stages is not None or blocks_per_sm is not None:
        if bytes_per_stage is None:
            raise KernelabError("give --bytes-per-stage to place a kernel's pipeline")
        stages = 1 if stages is None else _whole_count("stages", stages)
        blocks_per_sm = 1 if blocks_per_sm is None else _blocks_per_sm(spec, blocks_per_sm)
        in_flight = kernel_in_flight(bytes_per_stage, stages, blocks_per_sm)
        _check_fits_shared_memory(spec, bytes_per_stage, stages, blocks_per_sm)
        reachable = min(bandwidth_from_in_flight(spec, in_flight, latency.ns) / 1e9, bandwidth)
        pct = 100.0 * reachable / bandwidth
        kernel = KernelInFlight(
            bytes_per_stage=bytes_per_stage,
            stages=stages,
            blocks_per_sm=blocks_per_sm,
            in_flight_per_sm=in_flight,
            reachable_gbps=reachable,
            pct_of_bandwidth=pct,
        )
        # N stages keep N - 1 loading while one is computed on; a single stage is not
        # pipelined: its one load is in flight while the block waits for it.
        ahead = (
            "its one stage (not pipelined: in flight while the block waits)"
            if stages == 1
            else f"{stages - 1} of {stages} stages loading ahead"
        )
        summary += (
            f"; {blocks_per_sm} block(s) x {ahead} x {_kib(bytes_per_stage)} keep "
            f"{_kib(in_flight)} ({pct:.0f}% of the bandwidth)"
        )
    return MemoryPipeline(
        gpu=spec.id,
        bandwidth_gbps=bandwidth,
        latency=latency,
        in_flight_total_bytes=per_sm * spec.sm_count,
        in_flight_per_sm_bytes=per_sm,
        kernel=kernel,
        summary=summary,
    )


@dataclass(frozen=True)
class TensorCorePipeline:
    gpu: str
    dtype: str
    flops_per_sm_per_s: float  # dense peak / SMs
    flops_per_sm_per_cycle: float  # at the clock the peak is quoted at (spec.rate_clock_mhz)
    latency: Latency
    flops_in_flight_per_sm: float  # MMA work whose operands must already be on the way
    tile: dict | None  # bm, bn, bk, blocks_per_sm
    flops_per_stage: float | None
    bytes_per_stage: float | None
    compute_ns_per_stage: float | None
    stages_needed: int | None
    load_tbps_demanded: float | None  # all SMs together, to feed the tiles at the MMA rate
    summary: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["latency"] = self.latency.to_dict()
        return data


def tensor_core_pipeline(
    spec: GPUSpec,
    *,
    dtype: str = "bf16",
    level: str = "hbm",
    latency_ns: float | None = None,
    latencies: dict[str, float] | None = None,
    bm: int | None = None,
    bn: int | None = None,
    bk: int | None = None,
    blocks_per_sm: int = 1,
) -> TensorCorePipeline:
    """The MMA work an SM must have queued to cover a load latency (from HBM by default,
    level="l2" for operands that hit in L2), and, given a BM x BN x BK stage, the pipeline
    depth that covers it."""
    from kernelab.roofline.costs import canonical_dtype, dtype_bytes

    dtype = canonical_dtype(dtype)
    if dtype not in spec.peak_tflops:
        raise KernelabError(f"{spec.id} has no {dtype} peak rate in the catalog")
    blocks_per_sm = _blocks_per_sm(spec, blocks_per_sm)
    # An integer MMA's multiply-adds are operations, not floating-point ones.
    unit = "OP" if dtype in INTEGER_DTYPES else "FLOP"
    rate = spec.peak_flops(dtype) / spec.sm_count
    # Per cycle at the clock the peak is quoted at (Hopper's tensor rates: 1,830 MHz on the
    # SXM, not the 1,980 MHz boost), so an H100 SM comes out at its 4,096 bf16 FLOP/clk.
    per_cycle = spec.flops_per_sm_per_cycle(dtype)
    latency = memory_latency(spec, level, latency_ns=latency_ns, latencies=latencies)
    queued = rate * latency.ns * 1e-9
    summary = (
        f"each {spec.id} SM retires {per_cycle:.0f} {dtype} {unit}/cycle; covering a "
        f"{figure(latency.ns)} ns {level} load takes {figure(queued / 1e6, 2)} M{unit} of MMA "
        "work queued per SM"
    )
    tile = flops = nbytes = compute_ns = stages = demand = None
    given = [v is not None for v in (bm, bn, bk)]
    if any(given):
        if not all(given):
            raise KernelabError("give all of BM, BN and BK for the stage count, or none")
        for name, value in (("BM", bm), ("BN", bn), ("BK", bk)):
            _whole_count(name, value)  # type: ignore[arg-type]
        tile = {"bm": bm, "bn": bn, "bk": bk, "blocks_per_sm": blocks_per_sm}
        flops = 2.0 * bm * bn * bk  # type: ignore[operator]
        nbytes = (bm + bn) * bk * dtype_bytes(dtype)  # type: ignore[operator]
        # Resident blocks share the SM's MMA units, so each block's stage takes this long.
        compute_ns = flops * blocks_per_sm / rate * 1e9
        stages = stages_to_hide_latency(latency.ns, compute_ns)
        demand = nbytes * rate / flops * spec.sm_count / 1e12
        ratio = demand * 1e3 / spec.memory_bandwidth_gbps
        where = (
            f"{ratio:.1f}x the HBM bandwidth: L2 reuse across blocks must serve the rest"
            if ratio > 1
            else f"{100 * ratio:.0f}% of the HBM bandwidth"
        )
        summary += (
            f"; a {bm}x{bn}x{bk} stage is {figure(flops / 1e6, 2)} M{unit} "
            f"({figure(compute_ns)} ns with {blocks_per_sm} block(s) per SM), so {stages} stages "
            f"hide it; at the MMA rate the tiles load {figure(demand, 1)} TB/s, {where}"
        )
    return TensorCorePipeline(
        gpu=spec.id,
        dtype=dtype,
        flops_per_sm_per_s=rate,
        flops_per_sm_per_cycle=per_cycle,
        latency=latency,
        flops_in_flight_per_sm=queued,
        tile=tile,
        flops_per_stage=flops,
        bytes_per_stage=nbytes,
        compute_ns_per_stage=compute_ns,
        stages_needed=stages,
        load_tbps_demanded=demand,
        summary=summary,
    )
