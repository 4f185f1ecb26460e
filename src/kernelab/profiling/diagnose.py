"""From Nsight Compute metrics to a bottleneck, the evidence for it, and the next step.

Pure functions of a flat {metric name: value} dict (as KernelProfile.metrics holds), so every
outcome is testable with a handful of constructed numbers.

The first cut follows Nsight Compute's speed-of-light (SOL) logic: compare the SM's
throughput and the memory system's throughput, each the busiest of its sub-units as a % of
its peak.
  - either above HIGH_THROUGHPUT_PCT: that side is the bottleneck (both, and close: balanced)
  - both below LOW_THROUGHPUT_PCT: nothing is busy, so warps are waiting: latency-bound,
    unless the grid cannot even fill the GPU once (small-grid)
  - in between: the busier side, or balanced when the two are close
The second cut names the unit (the hottest pipe; DRAM, L2 or L1), the top warp-stall reason
and the occupancy limiter, and turns them into advice phrased through kernelab's three
lenses: the roofline (which ceiling), the tile (reuse per byte) and the pipeline (bytes and
instructions in flight).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelab.profiling import metrics as m

# "This workload is utilizing greater than 80.0% of the available compute or memory
# performance of the device": the threshold of ncu's SOLBottleneck rule (its text is in the
# H200 fixtures).
HIGH_THROUGHPUT_PCT = 80.0
# ncu's SOLBottleneck rule: compute and memory throughput both under 60% of peak "typically
# indicate latency issues".
LOW_THROUGHPUT_PCT = 60.0
# kernelab's own choice: SM and memory throughput within 10 points of each other, both busy,
# is a balanced kernel rather than a compute- or memory-bound one.
BALANCE_GAP_PCT = 10.0
# Fewer blocks than one full wave (waves per SM < 1, or fewer blocks than SMs) leaves SMs
# idle for the whole kernel: ncu's LaunchConfiguration rule flags it the same way.
FULL_WAVE = 1.0
# Theoretical occupancy under this is worth naming as a cause of exposed latency (Hopper:
# 64 warps per SM; below half, fewer than 8 warps per scheduler hide a memory round trip).
LOW_OCCUPANCY_PCT = 50.0
# Issue slots busier than this: the kernel is bound by instructions issued, not one pipe.
BUSY_ISSUE_PCT = 80.0
# The hottest pipe must account for at least this share of the SM throughput to be named as
# the unit; below it the report lacks the pipe that is really busy (the details page, say).
PIPE_EXPLAINS_SHARE = 0.5
# A stall reason must cost at least this many cycles per issued instruction to be advised on.
NOTABLE_STALL_CYCLES = 0.5
# The L2 fabric is named as the unit when it is this close to the L2's throughput (which is
# the maximum over its sub-units, the fabric among them: within rounding, it is the fabric).
FABRIC_EXPLAINS_PCT = 0.5

# A kernel that moves DRAM bytes at this share of the measured copy ceiling (a plain
# device-to-device copy: the fastest this GPU moves bytes in practice) sits on the DRAM roof,
# whatever unit inside the memory system is busiest on the way: the copy itself runs the L2
# fabric at over 90 % on the H200. At most a tenth is left, within a few times the copy's
# own run-to-run spread, so this level is done and the next step is fewer bytes.
AT_ROOF_PCT = 90.0

# On Hopper every DRAM byte passes through the L2, so a streaming kernel (each byte read once)
# shows the L2 busier, as a share of its peak, than DRAM. Reuse from L2 shows as L2 traffic
# well above DRAM traffic: a tile fetched twice from L2 doubles it. Under this ratio the
# kernel streams, and the L2 is not the thing to tile for. (The H200 copy and softmax in
# tests/fixtures/ncu come out at 1.05x and 1.3x; an L2-reusing GEMM at several times.)
L2_REUSE_RATIO = 2.0
# A streaming kernel at this share of DRAM peak is near the roof: a plain copy reaches 86 %
# on the H200 (tests/fixtures/ncu/copy_bf16_fabric_raw.csv.xz), so at most about a tenth is
# left to bytes in flight, and the step that counts is fewer bytes.
NEAR_DRAM_ROOF_PCT = 75.0
# DRAM bytes within this factor of the op's minimal bytes: the kernel moves its minimum.
MINIMAL_BYTES_FACTOR = 1.1

BOTTLENECKS = ("compute", "memory", "latency", "small-grid", "balanced", "unknown")


def _memory_unit(metrics: dict) -> tuple[str | None, float | None, str | None]:
    """The busiest memory unit, (name, % of peak, metric read): DRAM, L2 or L1, and "L2
    fabric" where the L2 is the busiest and its fabric is what makes it so."""
    unit, pct, metric = m.hottest(metrics, m.MEMORY_UNITS)
    fabric = m.number(metrics, m.L2_FABRIC)
    if unit == "L2" and fabric is not None and fabric >= pct - FABRIC_EXPLAINS_PCT:
        return "L2 fabric", fabric, m.L2_FABRIC
    return unit, pct, metric


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float | str | None
    threshold: float | None  # the number the value was compared with, if any
    meaning: str  # what the value says, in plain words

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "value": self.value,
            "threshold": self.threshold,
            "meaning": self.meaning,
        }


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str  # one of BOTTLENECKS
    unit: str | None  # a pipe ("Tensor", "FMA", "XU", ...), "DRAM", "L2", "L2 fabric", "L1"
    summary: str  # one line
    evidence: list = field(default_factory=list)  # [Evidence]
    advice: list = field(default_factory=list)  # [str], the first is the next thing to try
    top_stall: str | None = None
    occupancy_limiter: str | None = None

    def to_dict(self) -> dict:
        return {
            "bottleneck": self.bottleneck,
            "unit": self.unit,
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "advice": list(self.advice),
            "top_stall": self.top_stall,
            "occupancy_limiter": self.occupancy_limiter,
        }


# --- advice --------------------------------------------------------------------------------

PIPE_ADVICE = {
    "Tensor": (
        "Roofline: the tensor pipe is the ceiling and it is nearly full, so this kernel runs at "
        "its precision's compute roof. What is left: a lower precision (fp8) raises the roof; "
        "tile: larger warpgroup tiles cut overhead per MMA; pipeline: overlap the epilogue "
        "with the next tile's MMAs (a persistent, warp-specialized kernel)."
    ),
    "FMA": (
        "Roofline: the fp32 FMA pipe is the ceiling. The big step is a higher roof: tensor "
        "cores (tf32 or bf16 MMA) if the precision allows. Staying in fp32, tile: larger "
        "per-thread register tiles raise the share of FFMAs among issued instructions (fewer "
        "loads and address math per FFMA); use 128-bit shared-memory loads."
    ),
    "ALU": (
        "The ALU pipe (integer, logic, compares, conversions) is the busiest: trim index "
        "arithmetic in inner loops (hoist it, use 32-bit indices, strength-reduce), and avoid "
        "per-element type conversions."
    ),
    "FP64": (
        "The fp64 pipe is the ceiling: use fp32 or tensor-core fp64 (DMMA) where precision "
        "allows, and keep fp64 out of index math."
    ),
    "LSU": (
        "The load/store pipe is full of memory instructions: issue fewer, wider ones (128-bit "
        "loads), reuse values from registers (register tiling), and move tiles with cp.async "
        "or TMA, which take no LSU slot per element."
    ),
    "XU": (
        "The special-function pipe (exp, rsqrt, sin, conversions) is the busiest: use exp2 on "
        "pre-scaled inputs, fast-math intrinsics, and fewer conversions."
    ),
    "Uniform": (
        "The uniform pipe (warp-wide scalar work) is the busiest: simplify loop control and "
        "per-warp address arithmetic."
    ),
}

MEMORY_ADVICE = {
    "DRAM": (
        "Roofline: the kernel sits on the bandwidth roof (DRAM). Only fewer bytes help: fuse "
        "with its neighbours, store a narrower dtype, and reuse data on-chip; tile: bigger "
        "tiles raise FLOPs per byte."
    ),
    "L2": (
        "L2 bandwidth, not DRAM, is the ceiling: tiles are fetched again and again from L2. "
        "Tile: larger tiles held in shared memory or registers reuse each byte more; an L2-"
        "friendly (grouped or swizzled) tile order keeps neighbours' data resident."
    ),
    "L2 fabric": (
        "The L2's busiest part is the fabric between its two partitions, which a line homed "
        "in the far partition crosses (a plain copy on the H200 sends about half its sectors "
        "through it and runs it at 91.5 % of peak: it binds streaming kernels before DRAM "
        "does). Every extra crossing spends that budget: a line prefetched into L2 and then "
        "loaded crosses twice. Pipeline: count the crossings before adding bytes in flight, "
        "and measure both ways; on the H200 the long-row softmax still gained 6.7 % from its "
        "L2 prefetch, and feeding it by cp.async instead (one crossing) lost 1.3 %."
    ),
    "L1": (
        "L1/shared memory is the ceiling: bank conflicts or scattered accesses multiply the "
        "wavefronts per request. Tile: swizzle or pad the shared-memory layout, use 128-bit "
        "accesses and ldmatrix or TMA; keep reused values in registers."
    ),
}

AT_DRAM_ROOF_ADVICE = (
    "The kernel moves its bytes about as fast as a plain copy "
    "does, so no tile order, prefetch or occupancy change makes it faster. Only fewer bytes "
    "help: fuse it with its neighbours (one read and one write for the pair), or store a "
    "narrower dtype."
)


def streaming_advice(dram_pct: float | None, ratio: float, over_minimum: float | None) -> str:
    """What to do for a streaming kernel: near the roof only fewer bytes help, below it more
    bytes in flight."""
    traffic = f"L2 traffic is {ratio:.2f}x the DRAM traffic, so no tile is fetched again from L2"
    moved = ""
    if over_minimum is not None:
        moved = f"; it moves {over_minimum:.2f}x the op's minimal bytes"
    if dram_pct is not None and dram_pct >= NEAR_DRAM_ROOF_PCT:
        return (
            f"Roofline: a streaming kernel near the DRAM roof ({dram_pct:.0f} % of peak; on "
            f"the H200 a plain copy reaches 86 %): {traffic}{moved}. Tiling or an L2-friendly order "
            "cannot help; only fewer bytes do: fuse it with its neighbours, or store a "
            "narrower dtype."
        )
    where = f" at {dram_pct:.0f} % of DRAM peak" if dram_pct is not None else ""
    return (
        f"A streaming kernel{where}: {traffic}{moved}. Pipeline: keep more bytes in flight per "
        "SM (kernelab pipeline: wider loads, more stages or more resident blocks) to get "
        "nearer the DRAM roof; past that, only fewer bytes help."
    )


def l2_traffic_over_dram(metrics: dict) -> tuple[float | None, str]:
    """L2 bytes over DRAM bytes and how it was found: "measured" (lts__t_bytes), "estimated"
    (DRAM reads / L2 miss rate: the misses are what DRAM served, and the writes, which
    allocate in L2 without a fetch, count as hits), or ("", None) without the counters."""
    dram = m.dram_bytes(metrics)
    if not dram:
        return None, ""
    l2 = m.number(metrics, m.L2_BYTES)
    if l2 is not None:
        return l2 / dram, "measured"
    hit = m.number(metrics, m.L2_HIT_RATE)
    read = m.number(metrics, m.DRAM_BYTES_READ)
    if hit is None or read is None or not 0 <= hit < 100:
        return None, ""
    return read / (1 - hit / 100) / dram, "estimated"


def dram_roof_pct(achieved_gbps: float | None, copy_ceiling_gbps: float | None) -> float | None:
    """The DRAM rate as a % of the measured copy ceiling, when it is at the roof (at least
    AT_ROOF_PCT); None when it is below or either figure is missing."""
    if not achieved_gbps or not copy_ceiling_gbps or copy_ceiling_gbps <= 0:
        return None
    pct = 100.0 * achieved_gbps / copy_ceiling_gbps
    return pct if pct >= AT_ROOF_PCT else None


def at_roof_summary(achieved_gbps: float, copy_ceiling_gbps: float) -> str:
    pct = 100.0 * achieved_gbps / copy_ceiling_gbps
    return (
        f"at the DRAM roof: {achieved_gbps / 1e3:.2f} TB/s, {pct:.0f} % of the measured copy "
        f"ceiling ({copy_ceiling_gbps / 1e3:.2f} TB/s); nothing left at this level"
    )


STALL_ADVICE = {
    "long_scoreboard": (
        "Pipeline: warps wait on global memory, too few bytes are in flight to cover its "
        "latency. Add stages (cp.async or TMA multi-buffering), prefetch the next tile while "
        "computing this one, give each thread more independent loads, or raise occupancy."
    ),
    "barrier": (
        "Pipeline: warps wait at block-wide barriers: the work between barriers is uneven or "
        "barriers are too frequent. Split producers from consumers (warp specialization with "
        "mbarriers) instead of __syncthreads, or use smaller blocks."
    ),
    "mio_throttle": (
        "Shared-memory pressure: too many shared-memory instructions, or bank conflicts. Tile: "
        "reuse values from registers, use 128-bit LDS, swizzle or pad to remove conflicts."
    ),
    "short_scoreboard": (
        "Warps wait on shared-memory (or MUFU) results: remove bank conflicts, load fragments "
        "a step ahead (double-buffer registers), and reuse loaded values longer."
    ),
    "math_pipe_throttle": (
        "A math pipe is saturated for the warps that run: more warps will not help that pipe; "
        "move work to a wider pipe (tensor cores, FMA instead of XU) or cut instructions."
    ),
    "wait": (
        "Fixed-latency dependencies: each instruction waits on the one before. Raise ILP: "
        "unroll, interleave independent accumulators, reorder loads earlier."
    ),
    "gmma": (
        "Warps wait on wgmma: keep several wgmma groups in flight (wait<N> with N > 0) and "
        "overlap their completion with the next tile's loads."
    ),
    "lg_throttle": (
        "The global-memory instruction queue is full: fewer, wider accesses (128-bit, "
        "coalesced), or move tiles with cp.async/TMA."
    ),
    "tex_throttle": "The L1TEX queue is full: fewer, wider memory instructions.",
    "no_instruction": (
        "Instruction fetch stalls: the code is too large (over-unrolled) or the kernel too "
        "short to warm the instruction cache."
    ),
    "dispatch_stall": "Dispatch conflicts: usually transient; look at the next stall reason.",
    "imc_miss": "Constant-cache misses: keep kernel parameters and constants small and uniform.",
    "branch_resolving": "Branches stall issue: make control flow uniform across the warp.",
    "membar": "Memory fences stall warps: drop fences that are not needed, or scope them tighter.",
}

OCCUPANCY_ADVICE = {
    "registers": "cap registers per thread (__launch_bounds__ or maxnreg) or shrink per-thread tiles",
    "shared memory": "use less shared memory per block (fewer stages or smaller tiles)",
    "warps (block size)": "change the block size so more blocks fit",
    "blocks per SM": "use bigger blocks: the SM's block limit is reached first",
    "barriers": "use fewer named barriers per block",
}


# --- the rules -----------------------------------------------------------------------------


def _grid_fill(metrics: dict) -> tuple[bool, list[Evidence], str]:
    """Whether the grid fills the GPU at least once, with the evidence and a phrase."""
    grid = m.number(metrics, m.GRID_SIZE)
    waves = m.number(metrics, m.WAVES_PER_SM)
    sms = m.number(metrics, m.SM_COUNT, m.LAUNCH_SM_COUNT)
    evidence = []
    small = False
    if waves is not None:
        evidence.append(
            Evidence(m.WAVES_PER_SM, waves, FULL_WAVE, "full waves of blocks across all SMs")
        )
        small |= waves < FULL_WAVE
    if grid is not None and sms is not None:
        evidence.append(Evidence(m.GRID_SIZE, grid, sms, f"blocks in the grid, for {sms:.0f} SMs"))
        small |= grid < sms
    phrase = ""
    if grid is not None and sms is not None:
        phrase = f"{grid:.0f} blocks for {sms:.0f} SMs"
        if waves is not None:
            phrase += f" ({waves:.2f} waves)"
    return small, evidence, phrase


def _occupancy(metrics: dict) -> tuple[str | None, list[Evidence], str | None]:
    limiter, limits = m.occupancy_limiter(metrics)
    theoretical = m.number(metrics, m.THEORETICAL_OCCUPANCY)
    achieved = m.number(metrics, m.ACHIEVED_OCCUPANCY)
    evidence = []
    if theoretical is not None:
        evidence.append(
            Evidence(
                m.THEORETICAL_OCCUPANCY,
                theoretical,
                LOW_OCCUPANCY_PCT,
                "theoretical occupancy: % of the SM's warp slots the launch can fill"
                + (f", limited by {limiter}" if limiter else ""),
            )
        )
    if achieved is not None:
        evidence.append(
            Evidence(m.ACHIEVED_OCCUPANCY, achieved, None, "achieved occupancy: warps resident")
        )
    advice = None
    if theoretical is not None and theoretical < LOW_OCCUPANCY_PCT and limiter:
        advice = (
            f"Occupancy: only {theoretical:.0f}% of warp slots can be filled, limited by "
            f"{limiter} ({limits[limiter]:.0f} blocks/SM): {OCCUPANCY_ADVICE[limiter]}."
        )
    return limiter, evidence, advice


def _top_stall(metrics: dict) -> tuple[m.Stall | None, list[Evidence]]:
    ranked = m.stalls(metrics, top=3)
    evidence = []
    for stall in ranked:
        if stall.cycles_per_issue is not None:
            name, value = m.STALL_RATIO.format(stall.reason), stall.cycles_per_issue
            meaning = f"{stall.meaning}: cycles per issued instruction"
        else:
            name, value = m.STALL_SAMPLES.format(stall.reason), stall.share_pct
            meaning = f"{stall.meaning}: % of sampled stalls"
        evidence.append(Evidence(name, value, None, meaning))
    return (ranked[0] if ranked else None), evidence


def _stall_matters(stall: m.Stall | None) -> bool:
    if stall is None:
        return False
    if stall.cycles_per_issue is not None:
        return stall.cycles_per_issue >= NOTABLE_STALL_CYCLES
    return (stall.share_pct or 0.0) >= 20.0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _classify(sm: float, mem: float, small_grid: bool) -> str:
    busiest = max(sm, mem)
    close = abs(sm - mem) <= BALANCE_GAP_PCT
    if busiest >= HIGH_THROUGHPUT_PCT:
        if min(sm, mem) >= HIGH_THROUGHPUT_PCT and close:
            return "balanced"
        return "compute" if sm >= mem else "memory"
    if busiest < LOW_THROUGHPUT_PCT:
        return "small-grid" if small_grid else "latency"
    if close:
        return "balanced"
    return "compute" if sm > mem else "memory"


def diagnose(
    metrics: dict,
    copy_ceiling_gbps: float | None = None,
    minimum_bytes: float | None = None,
) -> Diagnosis:
    """The bottleneck of one kernel, its unit, the evidence and what to try next.

    `copy_ceiling_gbps`: this GPU's measured copy bandwidth (`kernelab ceilings`). With it, a
    kernel whose DRAM rate is at least AT_ROOF_PCT of that ceiling is named for the roof it
    sits on, DRAM, however busy a unit on the way (the L2 fabric) reads; Nsight Compute's
    own memory speed-of-light figure is the DRAM's in that case too.
    `minimum_bytes`: the op's minimal bytes (the cost model's), to say when a streaming kernel
    moves no more than those.
    """
    found = _diagnose(metrics, minimum_bytes)
    rate = m.number(metrics, m.DRAM_BYTES_PER_SECOND)
    roof_pct = dram_roof_pct(rate / 1e9 if rate else None, copy_ceiling_gbps)
    if roof_pct is None:
        return found
    evidence = [
        Evidence(
            m.DRAM_BYTES_PER_SECOND, rate / 1e9, AT_ROOF_PCT / 100 * copy_ceiling_gbps,
            f"DRAM GB/s: {roof_pct:.0f} % of the measured copy ceiling "
            f"({copy_ceiling_gbps:.0f} GB/s); the roof from {AT_ROOF_PCT:.0f} %",
        ),
        *found.evidence,
    ]  # fmt: skip
    return Diagnosis(
        bottleneck="memory",
        unit="DRAM",
        summary=at_roof_summary(rate / 1e9, copy_ceiling_gbps),
        evidence=evidence,
        advice=[AT_DRAM_ROOF_ADVICE],
        top_stall=found.top_stall,
        occupancy_limiter=found.occupancy_limiter,
    )


def _diagnose(metrics: dict, minimum_bytes: float | None = None) -> Diagnosis:
    """The diagnosis from Nsight Compute's metrics alone (no measured ceiling)."""
    sm = m.number(metrics, m.SM_THROUGHPUT)
    mem = m.number(metrics, m.MEMORY_THROUGHPUT)
    if sm is None or mem is None:
        missing = [n for n, v in ((m.SM_THROUGHPUT, sm), (m.MEMORY_THROUGHPUT, mem)) if v is None]
        return Diagnosis(
            bottleneck="unknown",
            unit=None,
            summary="no speed-of-light metrics: profile with the SpeedOfLight section",
            evidence=[Evidence(n, None, None, "missing from the report") for n in missing],
            advice=["Re-profile with kernelab's focused section set (kernelab profile ...)."],
        )

    small_grid, grid_evidence, grid_phrase = _grid_fill(metrics)
    bottleneck = _classify(sm, mem, small_grid)
    evidence = [
        Evidence(m.SM_THROUGHPUT, sm, HIGH_THROUGHPUT_PCT, "SM throughput, % of peak"),
        Evidence(m.MEMORY_THROUGHPUT, mem, HIGH_THROUGHPUT_PCT, "memory throughput, % of peak"),
    ]
    advice: list[str] = []

    pipe, pipe_pct, pipe_metric = m.hottest(metrics, m.PIPES)
    memory_unit, memory_pct, memory_metric = _memory_unit(metrics)
    stall, stall_evidence = _top_stall(metrics)
    limiter, occupancy_evidence, occupancy_advice = _occupancy(metrics)
    issue = m.number(metrics, m.ISSUE_ACTIVE)

    unit = None
    near_streaming_roof = False  # then the advice is fewer bytes only, not more in flight
    if bottleneck == "compute":
        unit = pipe if pipe_pct is not None and pipe_pct >= PIPE_EXPLAINS_SHARE * sm else None
        if unit is not None:
            evidence.append(
                Evidence(pipe_metric, pipe_pct, None, f"{pipe} pipe, % of peak: the hottest pipe")
            )
            advice.append(PIPE_ADVICE.get(pipe, f"The {pipe} pipe is the busiest."))
        else:
            unit = "SM"
            advice.append(
                "The SM is busy but the report does not break it down by pipe: profile with "
                "the ComputeWorkloadAnalysis section."
            )
        if issue is not None and issue >= BUSY_ISSUE_PCT:
            evidence.append(
                Evidence(m.ISSUE_ACTIVE, issue, BUSY_ISSUE_PCT, "issue slots busy, % of cycles")
            )
            advice.append(
                "The schedulers issue an instruction almost every cycle: the kernel is bound by "
                "instruction count, so do the same work in fewer instructions."
            )
        summary = f"compute-bound on the {unit} pipe (SM {sm:.0f}% of peak, memory {mem:.0f}%)"
    elif bottleneck == "memory":
        unit = memory_unit
        ratio, how = l2_traffic_over_dram(metrics)
        streaming = (
            memory_unit in ("L2", "L2 fabric") and ratio is not None and ratio < L2_REUSE_RATIO
        )
        if streaming and memory_unit == "L2":
            unit = "DRAM"  # the L2 is busy only with the bytes DRAM sends through it
        for name, (pct, metric) in m.pct_by_unit(metrics, m.MEMORY_UNITS).items():
            busiest = " (the busiest)" if name == memory_unit else ""
            evidence.append(Evidence(metric, pct, None, f"{name} throughput, % of peak{busiest}"))
        if ratio is not None:
            source = "lts__t_bytes" if how == "measured" else "DRAM reads / L2 miss rate"
            evidence.append(
                Evidence(
                    "l2_bytes_over_dram_bytes", ratio, L2_REUSE_RATIO,
                    f"L2 traffic over DRAM traffic ({how}: {source}); reuse from L2 from "
                    f"{L2_REUSE_RATIO:g}x",
                )
            )  # fmt: skip
        if memory_unit == "L2 fabric":
            evidence.append(
                Evidence(
                    memory_metric, memory_pct, None,
                    "L2 fabric (between the two partitions) busy, % of peak: the L2's busiest part",
                )
            )  # fmt: skip
        hit = m.number(metrics, m.L2_HIT_RATE)
        if hit is not None:
            evidence.append(Evidence(m.L2_HIT_RATE, hit, None, "L2 hit rate, %"))
        dram_pct = m.number(metrics, m.DRAM_THROUGHPUT)
        dram = m.dram_bytes(metrics)
        over_minimum = dram / minimum_bytes if dram and minimum_bytes else None
        if over_minimum is not None:
            evidence.append(
                Evidence(
                    "dram_bytes_over_minimum", over_minimum, MINIMAL_BYTES_FACTOR,
                    "DRAM bytes over the op's minimal bytes (the cost model's)",
                )
            )  # fmt: skip
        near_streaming_roof = streaming and dram_pct is not None and dram_pct >= NEAR_DRAM_ROOF_PCT
        if streaming and memory_unit == "L2":
            advice.append(streaming_advice(dram_pct, ratio, over_minimum))
            summary = (
                f"memory-bound, streaming: DRAM {_pct(dram_pct)} of peak; the L2 reads "
                f"busier ({_pct(m.number(metrics, m.L2_THROUGHPUT))}) only because every DRAM "
                f"byte passes through it (L2 traffic {ratio:.2f}x DRAM's)"
            )
        else:
            advice.append(MEMORY_ADVICE.get(memory_unit, "The memory system is the ceiling."))
            if streaming:  # the fabric: its own advice, and the streaming fact beside it
                advice.append(streaming_advice(dram_pct, ratio, over_minimum))
            summary = (
                f"memory-bound on {unit or 'memory'} (memory {mem:.0f}% of peak, SM {sm:.0f}%)"
            )
            if streaming:
                summary += f"; streaming (L2 traffic {ratio:.2f}x DRAM's)"
    elif bottleneck == "balanced":
        if pipe is not None:
            evidence.append(Evidence(pipe_metric, pipe_pct, None, f"{pipe} pipe: the hottest"))
        if memory_unit is not None:
            evidence.append(
                Evidence(memory_metric, memory_pct, None, f"{memory_unit}: the busiest")
            )
        advice.append(
            f"Roofline: compute ({sm:.0f}%) and memory ({mem:.0f}%) are both busy, near evenly: "
            "the kernel sits at the ridge. To go faster cut both, fewer instructions per FLOP "
            "and fewer bytes per FLOP (more reuse per tile)."
        )
        summary = f"balanced: SM {sm:.0f}% and memory {mem:.0f}% of peak"
    elif bottleneck == "small-grid":
        evidence.extend(grid_evidence)
        advice.append(
            f"The grid cannot fill the GPU once ({grid_phrase}): SMs sit idle for the whole "
            "kernel. Tile: smaller tiles, split-K or stream-K to make at least one block per SM "
            "(better, several waves); or batch independent problems into one launch."
        )
        summary = f"small grid: {grid_phrase}, SM {sm:.0f}% and memory {mem:.0f}% of peak"
    else:  # latency
        summary = f"latency-bound: SM {sm:.0f}% and memory {mem:.0f}% of peak, warps waiting"
        if stall is not None:
            summary += f" ({stall.reason.replace('_', ' ')})"
            advice.append(
                STALL_ADVICE.get(
                    stall.reason,
                    "Raise parallelism: more warps in flight or more independent work per warp.",
                )
            )
        else:
            advice.append(
                "Warps are waiting but the report has no stall breakdown: profile with the "
                "WarpStateStats section. Meanwhile: more bytes and instructions in flight."
            )

    if bottleneck in ("latency", "small-grid", "balanced") or _stall_matters(stall):
        evidence.extend(stall_evidence)
        if (
            bottleneck != "latency"
            and not near_streaming_roof
            and _stall_matters(stall)
            and stall.reason in STALL_ADVICE
        ):
            advice.append(f"Top stall ({stall.meaning}). {STALL_ADVICE[stall.reason]}")
    if bottleneck in ("latency", "small-grid") or occupancy_advice:
        evidence.extend(occupancy_evidence)
        if (
            occupancy_advice
            and bottleneck in ("latency", "memory", "small-grid")
            and not near_streaming_roof
        ):
            advice.append(occupancy_advice)

    return Diagnosis(
        bottleneck=bottleneck,
        unit=unit,
        summary=summary,
        evidence=evidence,
        advice=advice,
        top_stall=stall.reason if stall is not None else None,
        occupancy_limiter=limiter,
    )
