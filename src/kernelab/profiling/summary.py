"""The per-kernel profile report: what ncu measured, put on the roofline and diagnosed.

For each kernel: duration; DRAM, L2 and L1 throughput and hit rates; SM throughput; the
tensor pipe (and wgmma's share); occupancy and its limiter; registers and shared memory; the
top warp stalls; FLOPs counted from instruction counters and DRAM bytes, hence the measured
arithmetic intensity, placed on the roofline of the catalog GPU (beside the cost model's
prediction when the caller gives one); and the diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelab.errors import KernelabError
from kernelab.profiling import metrics as m
from kernelab.profiling.diagnose import Diagnosis, diagnose
from kernelab.profiling.report import KernelProfile

TOP_STALLS = 5


@dataclass
class KernelSummary:
    index: int
    name: str
    device: str | None
    duration_ns: float | None
    grid: tuple | None
    block: tuple | None
    registers_per_thread: int | None
    shared_mem_per_block: float | None  # bytes
    sm_pct: float | None  # SM throughput, % of peak
    memory_pct: float | None  # memory throughput (busiest memory unit), % of peak
    dram_gbps: float | None
    dram_pct: float | None
    l2_pct: float | None
    l2_fabric_pct: float | None  # the fabric between the L2's two partitions, % of peak
    l2_hit_pct: float | None
    l1_pct: float | None
    l1_hit_pct: float | None
    tensor_pct: float | None  # tensor pipe, % of peak over elapsed cycles
    wgmma_instructions: float | None  # HGMMA instructions issued (wgmma in use when > 0)
    wgmma_pct: float | None  # gmma instruction issue, % of peak
    issue_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    occupancy_limiter: str | None
    occupancy_limits: dict
    stalls: list  # [Stall], largest first
    flops: m.FlopCount
    dram_bytes: float | None
    intensity: float | None  # measured FLOP per DRAM byte
    achieved_tflops: float | None
    roofline: dict | None  # Placement.to_dict() of the measured cost, or None
    roofline_note: str | None  # why there is no placement, when there is none
    predicted: dict | None  # the cost model's flops, bytes, intensity and its placement
    diagnosis: Diagnosis
    ncu_rules: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "device": self.device,
            "duration_ns": self.duration_ns,
            "grid": list(self.grid) if self.grid else None,
            "block": list(self.block) if self.block else None,
            "registers_per_thread": self.registers_per_thread,
            "shared_mem_per_block": self.shared_mem_per_block,
            "sm_pct": self.sm_pct,
            "memory_pct": self.memory_pct,
            "dram_gbps": self.dram_gbps,
            "dram_pct": self.dram_pct,
            "l2_pct": self.l2_pct,
            "l2_fabric_pct": self.l2_fabric_pct,
            "l2_hit_pct": self.l2_hit_pct,
            "l1_pct": self.l1_pct,
            "l1_hit_pct": self.l1_hit_pct,
            "tensor_pct": self.tensor_pct,
            "wgmma_instructions": self.wgmma_instructions,
            "wgmma_pct": self.wgmma_pct,
            "issue_pct": self.issue_pct,
            "achieved_occupancy_pct": self.achieved_occupancy_pct,
            "theoretical_occupancy_pct": self.theoretical_occupancy_pct,
            "occupancy_limiter": self.occupancy_limiter,
            "occupancy_limits": dict(self.occupancy_limits),
            "stalls": [s.to_dict() for s in self.stalls],
            "flops": self.flops.to_dict(),
            "dram_bytes": self.dram_bytes,
            "intensity": self.intensity,
            "achieved_tflops": self.achieved_tflops,
            "roofline": self.roofline,
            "roofline_note": self.roofline_note,
            "predicted": self.predicted,
            "diagnosis": self.diagnosis.to_dict(),
            "bottleneck": self.diagnosis.bottleneck,
            "unit": self.diagnosis.unit,
            "evidence": [e.to_dict() for e in self.diagnosis.evidence],
            "advice": list(self.diagnosis.advice),
            "ncu_rules": list(self.ncu_rules),
        }


# --- the roofline ---------------------------------------------------------------------------


def catalog_gpu_for(device_name: str | None, sm_count: float | None = None):
    """The catalog GPUSpec matching ncu's device name (and SM count), or None."""
    if not device_name:
        return None
    from kernelab.hardware.detect import match_catalog

    return match_catalog(device_name, int(sm_count) if sm_count else None)


def _resolve_gpu(gpu, profile):
    if gpu is None:
        return catalog_gpu_for(profile.device, profile.metric(m.SM_COUNT, m.LAUNCH_SM_COUNT))
    if isinstance(gpu, str):
        from kernelab.hardware import get_gpu

        return get_gpu(gpu)
    return gpu


def _place(cost, spec, time_ms):
    from kernelab.roofline.model import Ceilings, place

    return place(cost, Ceilings.from_spec(spec), time_ms=time_ms).to_dict()


def _measured_cost(flops: float, dram_bytes: float, dtype: str, method: str):
    from kernelab.roofline.costs import OpCost

    return OpCost(
        op="measured",
        shape={},
        dtype=dtype,
        flops=flops,
        bytes=dram_bytes,
        explanation=f"counted by ncu: FLOPs from {method}; bytes = DRAM read + write",
    )


def _roofline(profile, flops, dram_bytes, gpu, dtype, predicted):
    """(measured placement, note, predicted block) for one kernel."""
    time_ms = profile.duration_ns / 1e6 if profile.duration_ns else None
    try:
        spec = _resolve_gpu(gpu, profile)
    except KernelabError as exc:
        return None, str(exc), None
    if spec is None:
        note = (
            f"no catalog GPU matches device '{profile.device}'"
            if profile.device
            else "the report does not name its device"
        ) + "; pass --gpu to place it on a roofline"
        return None, note, _predicted(predicted, None, time_ms, dram_bytes)
    placement, note = None, None
    ran_on = _resolve_gpu(None, profile) if gpu is not None else None
    if ran_on is not None and ran_on.id != spec.id:
        # The time was measured on another GPU: it says nothing about this one's roof, so the
        # kernel is placed by its intensity alone (a share of the roof would be nonsense).
        time_ms = None
        note = (
            f"placed by intensity only: the report ran on {profile.device} ({ran_on.id}), "
            f"so its time is no measure of {spec.id}'s roof"
        )
    dtype = dtype or flops.dominant
    if flops.flops is None:
        note = f"FLOPs {flops.method}"
    elif not dram_bytes:
        note = "no DRAM byte counters in the report"
    elif dtype is None:
        note = "no FLOPs counted, so no precision to pick a compute roof"
    else:
        try:
            placement = _place(
                _measured_cost(flops.flops, dram_bytes, dtype, flops.method), spec, time_ms
            )
        except (KernelabError, ImportError) as exc:
            note = f"cannot place on the roofline: {exc}"
    return placement, note, _predicted(predicted, spec, time_ms, dram_bytes)


def _predicted(cost, spec, time_ms, dram_bytes) -> dict | None:
    """The cost model's view beside the measurement: its FLOPs, minimum bytes, placement."""
    if cost is None:
        return None
    data = {
        "op": cost.op,
        "shape": dict(cost.shape),
        "dtype": cost.dtype,
        "flops": cost.flops,
        "bytes": cost.bytes,
        "intensity": cost.flops / cost.bytes if cost.bytes else None,
        "explanation": cost.explanation,
        # > 1 means the kernel moved more DRAM traffic than the op's minimum (re-reads).
        "dram_bytes_over_minimum": dram_bytes / cost.bytes if dram_bytes and cost.bytes else None,
        "placement": None,
    }
    if spec is not None:
        try:
            data["placement"] = _place(cost, spec, time_ms)
        except (KernelabError, ImportError) as exc:
            data["placement_note"] = str(exc)
    return data


def measured_copy_gbps(profile: KernelProfile, gpu=None) -> float | None:
    """The measured copy ceiling (GB/s) of the profile's GPU from `kernelab ceilings`' cache
    (or $KERNELAB_CEILINGS); None when it was never measured there or the GPU is unknown."""
    try:
        spec = _resolve_gpu(gpu, profile)
        if spec is None:
            return None
        from kernelab.harness.ceilings import measured_ceilings_for

        measured = measured_ceilings_for(spec)
    except (KernelabError, ImportError):
        return None
    return measured.bandwidth / 1e9 if measured is not None else None


# --- the summary ----------------------------------------------------------------------------


def summarize(
    profile: KernelProfile,
    *,
    gpu=None,
    dtype: str | None = None,
    predicted=None,
    copy_ceiling_gbps: float | None = None,
) -> KernelSummary:
    """One kernel's report. `gpu`: a GPUSpec or catalog id (default: match ncu's device
    name); `dtype`: the precision whose roof applies (default: the one with most FLOPs);
    `predicted`: the cost model's OpCost for the op the kernel implements;
    `copy_ceiling_gbps`: the GPU's measured copy bandwidth, to name a kernel at the DRAM roof."""
    metrics = profile.metrics
    number = profile.metric
    flops = m.count_flops(metrics)
    dram_bytes = m.dram_bytes(metrics)
    seconds = profile.duration_ns * 1e-9 if profile.duration_ns else None
    limiter, limits = m.occupancy_limiter(metrics)
    dram_rate = number(m.DRAM_BYTES_PER_SECOND)
    if dram_rate is None and dram_bytes is not None and seconds:
        dram_rate = dram_bytes / seconds
    placement, note, predicted_block = _roofline(profile, flops, dram_bytes, gpu, dtype, predicted)
    return KernelSummary(
        index=profile.index,
        name=profile.name,
        device=profile.device,
        duration_ns=profile.duration_ns,
        grid=profile.grid,
        block=profile.block,
        registers_per_thread=profile.registers_per_thread,
        shared_mem_per_block=profile.shared_mem_per_block,
        sm_pct=number(m.SM_THROUGHPUT),
        memory_pct=number(m.MEMORY_THROUGHPUT),
        dram_gbps=dram_rate / 1e9 if dram_rate is not None else None,
        dram_pct=number(m.DRAM_THROUGHPUT),
        l2_pct=number(m.L2_THROUGHPUT),
        l2_fabric_pct=number(m.L2_FABRIC),
        l2_hit_pct=number(m.L2_HIT_RATE),
        l1_pct=number(*m.L1_THROUGHPUT),
        l1_hit_pct=number(m.L1_HIT_RATE),
        tensor_pct=number(m.TENSOR_PIPE),
        wgmma_instructions=number(m.GMMA_INSTRUCTIONS),
        wgmma_pct=number(m.GMMA_INSTRUCTIONS_PCT),
        issue_pct=number(m.ISSUE_ACTIVE),
        achieved_occupancy_pct=number(m.ACHIEVED_OCCUPANCY),
        theoretical_occupancy_pct=number(m.THEORETICAL_OCCUPANCY),
        occupancy_limiter=limiter,
        occupancy_limits=limits,
        stalls=m.stalls(metrics, top=TOP_STALLS),
        flops=flops,
        dram_bytes=dram_bytes,
        intensity=flops.flops / dram_bytes if flops.flops is not None and dram_bytes else None,
        achieved_tflops=flops.flops / seconds / 1e12
        if flops.flops is not None and seconds
        else None,
        roofline=placement,
        roofline_note=note,
        predicted=predicted_block,
        diagnosis=diagnose(
            metrics, copy_ceiling_gbps, minimum_bytes=predicted.bytes if predicted else None
        ),
        ncu_rules=[r for r in profile.rules if r.get("type") in ("OPT", "WRN", "ERR")],
    )


# --- rendering ------------------------------------------------------------------------------


def _fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _bytes(value) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _roofline_text(r: dict, note: str | None) -> str:
    ridge = "no FLOPs" if r["ridge"] is None else f"ridge {r['ridge']:.0f}"
    where = f"{r['bound']}-bound on {r['gpu']} {r['math_dtype']} ({ridge})"
    if r.get("faster_than_light"):
        return f"{where}; faster than this roof allows ({r['sol_pct']:.0f} %): {r['warning']}"
    if r.get("sol_pct") is None:
        return f"{where}; {note}" if note else where
    return f"{where}; {r['sol_pct']:.0f} % of attainable"


def _dims(dims) -> str:
    return "x".join(str(d) for d in dims) if dims else "-"


def render(summaries: list[KernelSummary], console) -> None:
    """Draw each kernel's report for a person."""
    from kernelab.output import Table

    for s in summaries:
        d = s.diagnosis
        table = Table(title=f"[{s.index}] {s.name}", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value")
        rows = [
            ("device", s.device or "-"),
            ("duration", _fmt(s.duration_ns / 1e3 if s.duration_ns else None, ".2f", " us")),
            ("launch", f"grid {_dims(s.grid)}, block {_dims(s.block)}"),
            ("registers / thread", _fmt(s.registers_per_thread, "d")),
            ("shared memory / block", _bytes(s.shared_mem_per_block)),
            ("SM throughput", _fmt(s.sm_pct, ".1f", " % of peak")),
            ("memory throughput", _fmt(s.memory_pct, ".1f", " % of peak")),
            (
                "DRAM",
                f"{_fmt(s.dram_gbps, '.0f', ' GB/s')}  ({_fmt(s.dram_pct, '.1f', ' % of peak')})",
            ),
            (
                "L2",
                f"{_fmt(s.l2_pct, '.1f', ' % of peak')}, hit rate {_fmt(s.l2_hit_pct, '.1f', ' %')}"
                + (
                    f", fabric {_fmt(s.l2_fabric_pct, '.1f', ' % of peak')}"
                    if s.l2_fabric_pct is not None
                    else ""
                ),
            ),
            (
                "L1",
                f"{_fmt(s.l1_pct, '.1f', ' % of peak')}, hit rate {_fmt(s.l1_hit_pct, '.1f', ' %')}",
            ),
            ("tensor pipe", _fmt(s.tensor_pct, ".1f", " % of peak")),
            ("wgmma instructions", _fmt(s.wgmma_instructions, ",.0f")),
            ("issue slots busy", _fmt(s.issue_pct, ".1f", " %")),
            (
                "occupancy",
                f"achieved {_fmt(s.achieved_occupancy_pct, '.1f', ' %')}, theoretical "
                f"{_fmt(s.theoretical_occupancy_pct, '.1f', ' %')}"
                + (f", limited by {s.occupancy_limiter}" if s.occupancy_limiter else ""),
            ),
            ("FLOPs", f"{_fmt(s.flops.flops, ',.0f')}  ({s.flops.method})"),
            ("DRAM bytes", _bytes(s.dram_bytes)),
            ("intensity", _fmt(s.intensity, ".1f", " FLOP/byte")),
            ("achieved", _fmt(s.achieved_tflops, ".1f", " TFLOP/s")),
        ]
        if s.roofline:
            rows.append(("roofline", _roofline_text(s.roofline, s.roofline_note)))
        elif s.roofline_note:
            rows.append(("roofline", s.roofline_note))
        if s.predicted:
            p = s.predicted
            rows.append(
                (
                    "cost model",
                    f"{p['flops']:,.0f} FLOPs, {_bytes(p['bytes'])} minimum, "
                    f"DRAM moved {_fmt(p['dram_bytes_over_minimum'], '.2f', 'x')} the minimum",
                )
            )
        for i, stall in enumerate(s.stalls[:3]):
            value = (
                _fmt(stall.cycles_per_issue, ".2f", " cycles/issue")
                if stall.cycles_per_issue is not None
                else _fmt(stall.share_pct, ".0f", " % of samples")
            )
            rows.append((f"stall #{i + 1}", f"{stall.reason}: {value} ({stall.meaning})"))
        for what, value in rows:
            table.add_row(what, str(value))
        console.print(table)
        unit = f" / {d.unit}" if d.unit else ""
        console.print(f"[bold]diagnosis:[/bold] {d.bottleneck}{unit}: {d.summary}")
        for line in d.advice:
            console.print(f"  - {line}")
        console.print()
