"""The Nsight Compute metrics kernelab asks for and reads, and what each one means.

Names are those of ncu 2025.x on GH100 (checked against `ncu --query-metrics` on the H200,
kept in tests/fixtures/ncu/query_metrics_gh100.txt.gz). Values are read in ncu's base
units: ns, byte, byte/s, hz, % (0-100), cycles, instructions.

FLOP counting (`count_flops`) follows ncu's own roofline: every predicated-on thread
instruction of a floating-point class is weighted by the FLOPs it does, FFMA/DFMA as 2,
FADD/FMUL/DADD/DMUL as 1, and the packed half-precision HFMA2/HADD2/HMUL2 as 4/2/2 (ncu's
`derived__..._hfma_pred_on_x4` and `_x2` metrics). Tensor-core work is read from the
`sm__ops_path_tensor_src_*` counters, which already count FLOPs: a 4096^3 bf16 GEMM on the
H200 reads 137,438,953,472 = 2 * 4096^3 there. They cover mma.sync (HMMA) and wgmma (HGMMA)
alike; the `sm__ops_path_tensor_op_hgmma_*` counters give the wgmma part. Without those
counters tensor FLOPs cannot be counted (an HGMMA instruction's N is not in the metric), and
`count_flops` says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --- the sections and metrics a profile collects -------------------------------------------

# The focused set: enough for the speed-of-light diagnosis at about a fifth of `--set full`'s
# replay passes.
FOCUSED_SECTIONS = (
    "SpeedOfLight",
    "SpeedOfLight_RooflineChart",
    "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "SchedulerStats",
)

# FLOP-counting SASS instruction classes: metric -> (FLOPs per thread instruction, precision).
SASS_FLOP_COUNTERS = {
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": (2, "fp32"),
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": (1, "fp32"),
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": (1, "fp32"),
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": (2, "fp64"),
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": (1, "fp64"),
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum": (1, "fp64"),
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": (4, "fp16"),  # HFMA2: 2 lanes x FMA
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum": (2, "fp16"),
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum": (2, "fp16"),
}

# Tensor-pipe operation counters (already FLOPs, or OPs for int8), without the ".sum":
# counter -> precision. `--set full` records some only split by sparsity
# ("<counter>_sparsity_off.sum" and "_sparsity_on.sum"); those are added up.
TENSOR_FLOP_COUNTERS = {
    "sm__ops_path_tensor_src_bf16_dst_fp32": "bf16",
    "sm__ops_path_tensor_src_fp16": "fp16",
    "sm__ops_path_tensor_src_tf32_dst_fp32": "tf32",
    "sm__ops_path_tensor_src_fp8": "fp8",
    "sm__ops_path_tensor_src_fp64": "fp64",
    "sm__ops_path_tensor_src_int8": "int8",
}

# The wgmma (HGMMA) share of the tensor counters above, named the same way.
WGMMA_FLOP_COUNTERS = (
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32",
    "sm__ops_path_tensor_op_hgmma_src_fp16",
    "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32",
)


# --- the metrics kernelab reads -------------------------------------------------------------

DURATION = "gpu__time_duration.sum"  # ns
DEVICE_NAME = "device__attribute_display_name"
SM_COUNT = "device__attribute_multiprocessor_count"
SM_CYCLES_PER_SECOND = "smsp__cycles_elapsed.avg.per_second"  # the SM clock during the run

# Speed of light: the busiest sub-unit of the SM, and of the memory system, as % of its peak.
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
L2_THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
# The focused set records L1 against active cycles, the full set against elapsed ones too.
L1_THROUGHPUT = (
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
)
# The link between the L2's two partitions (GH100): an SM's request for a line homed in the
# far partition crosses it. One of the sub-units lts__throughput takes its maximum over, and
# on the H200 the busiest one under streaming kernels: ncu measured a plain bf16 copy (torch.neg,
# 256 MiB) with it 91.5 % busy and DRAM 86 %, the long-row bf16 softmax 93 % and 78 %
# (tests/fixtures/ncu/*_fabric_raw.csv.xz).
L2_FABRIC = "lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed"
L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
# Bytes the L2 served (every sector requested of it, hit or miss): set against DRAM bytes it
# tells reuse from L2 (many times the DRAM bytes) from streaming (about the DRAM bytes).
L2_BYTES = "lts__t_bytes.sum"
L1_HIT_RATE = "l1tex__t_sector_hit_rate.pct"

DRAM_BYTES_READ = "dram__bytes_read.sum"
DRAM_BYTES_WRITE = "dram__bytes_write.sum"
DRAM_BYTES_PER_SECOND = "dram__bytes.sum.per_second"

TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
GMMA_INSTRUCTIONS_PCT = "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"
GMMA_INSTRUCTIONS = "smsp__sass_inst_executed_op_shared_gmma.sum"  # wgmma instructions issued

ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"  # issue-slot utilisation
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"

REGISTERS_PER_THREAD = "launch__registers_per_thread"
SHARED_MEM_PER_BLOCK = "launch__shared_mem_per_block"  # bytes: static + dynamic + driver
GRID_SIZE = "launch__grid_size"  # blocks
BLOCK_SIZE = "launch__block_size"  # threads
WAVES_PER_SM = "launch__waves_per_multiprocessor"
LAUNCH_SM_COUNT = "launch__sm_count"

# Blocks per SM each resource allows; the smallest is what limits occupancy.
OCCUPANCY_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared memory": "launch__occupancy_limit_shared_mem",
    "warps (block size)": "launch__occupancy_limit_warps",
    "blocks per SM": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}

# SM pipelines, % of peak over elapsed cycles: the unit names the diagnosis reports. The
# `_cycles_active` form is what ncu's HighPipeUtilization rule reads where it exists.
PIPES = {
    "Tensor": (TENSOR_PIPE, "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_elapsed"),
    "FMA": (
        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed",
    ),
    "ALU": (
        "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_elapsed",
    ),
    "FP64": (
        "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_elapsed",
    ),
    "LSU": ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",),
    "XU": ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",),
    "Uniform": ("sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_elapsed",),
}

# Memory units, % of peak: which level of the hierarchy is the busy one.
MEMORY_UNITS = {
    "DRAM": (DRAM_THROUGHPUT,),
    "L2": (L2_THROUGHPUT,),
    "L1": L1_THROUGHPUT,
}

# --- warp stalls ---------------------------------------------------------------------------

STALL_RATIO = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"  # cycles / issue
STALL_SAMPLES = "smsp__pcsamp_warps_issue_stalled_{}"  # PC samples (the full set only)
STALL_SAMPLE_COUNT = "smsp__pcsamp_sample_count"

# ncu's stall reasons in plain words. "selected" (issuing) and "not_selected" (eligible but
# another warp issued) are not stalls that cost time, so they are left out of the ranking.
STALL_REASONS = {
    "long_scoreboard": "waiting on global/local memory (L1TEX) results",
    "barrier": "waiting at a block-wide barrier (__syncthreads)",
    "mio_throttle": "memory input/output queue full (shared memory, special math, dynamic branches)",
    "short_scoreboard": "waiting on shared memory or special-function (MUFU) results",
    "math_pipe_throttle": "math pipe busy: the warp's next instruction's pipe is full",
    "wait": "fixed-latency dependency (a wait on the previous instruction)",
    "gmma": "waiting on wgmma (warpgroup MMA) to finish",
    "lg_throttle": "local/global memory instruction queue full",
    "tex_throttle": "texture/L1TEX queue full",
    "dispatch_stall": "dispatcher could not issue (pipeline conflict)",
    "no_instruction": "instruction cache miss or no instruction fetched",
    "imc_miss": "immediate constant cache miss",
    "branch_resolving": "waiting for a branch target to resolve",
    "membar": "waiting at a memory barrier (fence)",
    "drain": "draining memory stores at warp exit",
    "sleeping": "warp asleep (nanosleep or yield)",
    "misc": "miscellaneous",
}
# Older ncu releases spell the sampled counter's name in the plural.
_STALL_SAMPLE_ALIASES = {"no_instruction": "no_instructions"}


@dataclass(frozen=True)
class Stall:
    reason: str  # ncu's name, e.g. "long_scoreboard"
    meaning: str  # plain words
    cycles_per_issue: float | None  # warp cycles spent in this state per issued instruction
    share_pct: float | None  # share of all stall cycles (or samples), in %

    def to_dict(self) -> dict:
        return {
            "reason": self.reason,
            "meaning": self.meaning,
            "cycles_per_issue": self.cycles_per_issue,
            "share_pct": self.share_pct,
        }


def number(metrics: dict, *names: str) -> float | None:
    """The first of `names` present with a numeric value, as a float; None if none is."""
    for name in names:
        value = metrics.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            return float(value)
    return None


def stalls(metrics: dict, top: int | None = None) -> list[Stall]:
    """Warp stall reasons, largest first, from the per-issue ratios (or PC samples if only
    those were collected)."""
    ratios = {r: number(metrics, STALL_RATIO.format(r)) for r in STALL_REASONS}
    found = {r: v for r, v in ratios.items() if v is not None}
    if found:
        total = sum(found.values())
        ranked = [
            Stall(r, STALL_REASONS[r], v, 100.0 * v / total if total > 0 else None)
            for r, v in found.items()
        ]
    else:
        samples = {}
        for r in STALL_REASONS:
            alias = _STALL_SAMPLE_ALIASES.get(r, r)
            v = number(metrics, STALL_SAMPLES.format(r), STALL_SAMPLES.format(alias))
            if v is not None:
                samples[r] = v
        total = sum(samples.values())
        ranked = [
            Stall(r, STALL_REASONS[r], None, 100.0 * v / total if total > 0 else None)
            for r, v in samples.items()
        ]
    ranked.sort(key=lambda s: (s.cycles_per_issue or 0.0, s.share_pct or 0.0), reverse=True)
    ranked = [s for s in ranked if (s.cycles_per_issue or s.share_pct or 0.0) > 0]
    return ranked[:top] if top is not None else ranked


def pct_by_unit(metrics: dict, units: dict) -> dict[str, tuple[float, str]]:
    """Every unit's % of peak that the metrics hold: {unit: (pct, metric read)}."""
    out = {}
    for unit, names in units.items():
        for name in names:
            pct = number(metrics, name)
            if pct is not None:
                out[unit] = (pct, name)
                break
    return out


def hottest(metrics: dict, units: dict) -> tuple[str | None, float | None, str | None]:
    """The unit with the highest % of peak: (unit, pct, metric read); Nones if none known."""
    found = pct_by_unit(metrics, units)
    if not found:
        return None, None, None
    unit = max(found, key=lambda u: found[u][0])
    return unit, found[unit][0], found[unit][1]


def occupancy_limiter(metrics: dict) -> tuple[str | None, dict[str, float]]:
    """What limits resident blocks per SM (the smallest limit), and every limit read."""
    limits = {}
    for what, name in OCCUPANCY_LIMITS.items():
        value = number(metrics, name)
        if value is not None:
            limits[what] = value
    if not limits:
        return None, {}
    return min(limits, key=limits.get), limits


# --- FLOPs ---------------------------------------------------------------------------------

# Tensor pipe busier than this with no tensor counter in the report: FLOPs are uncountable.
TENSOR_ACTIVE_PCT = 1.0


@dataclass(frozen=True)
class FlopCount:
    flops: float | None  # None when the report cannot count them
    by_precision: dict = field(default_factory=dict)  # "fp32" -> FLOPs, "bf16" -> ...
    wgmma_flops: float | None = None  # the part done by wgmma (HGMMA), when counted
    dominant: str | None = None  # the precision with the most FLOPs
    method: str = ""  # how they were counted, or why they could not be

    def to_dict(self) -> dict:
        return {
            "flops": self.flops,
            "by_precision": dict(self.by_precision),
            "wgmma_flops": self.wgmma_flops,
            "dominant": self.dominant,
            "method": self.method,
        }


def _sass_count(metrics: dict, name: str) -> tuple[float | None, bool]:
    """A SASS thread-instruction count, read directly or rebuilt from its per-cycle rate
    (the roofline section records only `.sum.per_cycle_elapsed`) times the elapsed SM
    cycles. Returns (count, was_rebuilt)."""
    direct = number(metrics, name)
    if direct is not None:
        return direct, False
    rate = number(metrics, name + ".per_cycle_elapsed")
    clock = number(metrics, SM_CYCLES_PER_SECOND)
    duration_ns = number(metrics, DURATION)
    if rate is None:
        return None, False
    if rate == 0:
        return 0.0, False
    if clock is None or duration_ns is None:
        return None, False
    return rate * clock * duration_ns * 1e-9, True


def _tensor_count(metrics: dict, counter: str) -> float | None:
    """A tensor-pipe counter's total, whole or split by sparsity; None if not recorded."""
    whole = number(metrics, counter + ".sum")
    if whole is not None:
        return whole
    parts = [number(metrics, f"{counter}_sparsity_{s}.sum") for s in ("off", "on")]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def count_flops(metrics: dict) -> FlopCount:
    """The FLOPs a kernel executed, counted from ncu's SASS and tensor-pipe counters."""
    by_precision: dict[str, float] = {}
    notes = []
    rebuilt = False
    seen_sass = False
    for name, (weight, precision) in SASS_FLOP_COUNTERS.items():
        count, was_rebuilt = _sass_count(metrics, name)
        if count is None:
            continue
        seen_sass = True
        rebuilt |= was_rebuilt
        by_precision[precision] = by_precision.get(precision, 0.0) + weight * count
    if seen_sass:
        notes.append("SASS: FFMA/DFMA x2, FADD/FMUL/DADD/DMUL x1, HFMA2 x4, HADD2/HMUL2 x2")
    if rebuilt:
        notes.append("some counts rebuilt from per-cycle rates x SM clock x duration")

    seen_tensor = False
    for counter, precision in TENSOR_FLOP_COUNTERS.items():
        value = _tensor_count(metrics, counter)
        if value is None:
            continue
        seen_tensor = True
        by_precision[precision] = by_precision.get(precision, 0.0) + value
    wgmma = [_tensor_count(metrics, c) for c in WGMMA_FLOP_COUNTERS]
    known = [v for v in wgmma if v is not None]
    wgmma_flops = sum(known) if known else None
    by_precision = {p: v for p, v in by_precision.items() if v}

    tensor_pct = number(metrics, TENSOR_PIPE) or 0.0
    if not seen_tensor and tensor_pct > TENSOR_ACTIVE_PCT:
        return FlopCount(
            flops=None,
            by_precision=by_precision,
            method=(
                f"not countable: the tensor pipe was {tensor_pct:.0f}% busy but the report has "
                "no sm__ops_path_tensor_src_* counters (profile with kernelab's metrics)"
            ),
        )
    if not seen_sass and not seen_tensor:
        return FlopCount(flops=None, method="not countable: no FLOP counters in the report")
    if seen_tensor:
        notes.append("tensor pipe: sm__ops_path_tensor_src_* (FLOPs, 2 per multiply-add)")
    total = sum(by_precision.values())
    dominant = max(by_precision, key=by_precision.get) if total > 0 else None
    return FlopCount(total, by_precision, wgmma_flops, dominant, "; ".join(notes))


def dram_bytes(metrics: dict) -> float | None:
    """Bytes read from and written to device memory (HBM)."""
    read = number(metrics, DRAM_BYTES_READ)
    write = number(metrics, DRAM_BYTES_WRITE)
    if read is None and write is None:
        return None
    return (read or 0.0) + (write or 0.0)


def extra_metrics() -> tuple[str, ...]:
    """The metrics added to the sections: the tensor pipe, wgmma, DRAM bytes, FLOP counters."""
    return (
        TENSOR_PIPE,
        GMMA_INSTRUCTIONS_PCT,
        GMMA_INSTRUCTIONS,
        DRAM_BYTES_READ,
        DRAM_BYTES_WRITE,
        L2_FABRIC,
        L2_HIT_RATE,
        L2_BYTES,
        L1_HIT_RATE,
        *SASS_FLOP_COUNTERS,
        *(c + ".sum" for c in TENSOR_FLOP_COUNTERS),
        *(c + ".sum" for c in WGMMA_FLOP_COUNTERS),
    )


EXTRA_METRICS = extra_metrics()
