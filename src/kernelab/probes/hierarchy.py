"""The hierarchy measured: pointer chases for latency, streaming kernels for bandwidth,
torch copies for the host link, gathered into the lens's HierarchyRecord
(kernelab.lenses.hierarchy renders it; this module runs the kernels of this folder)."""

from __future__ import annotations

from kernelab.lenses.hierarchy import (
    HOST_LINK_DATASHEET,
    BandwidthMeasurement,
    HierarchyRecord,
    LatencyMeasurement,
    bandwidth_of,
    latency_of,
)
from kernelab.output import note
from kernelab.probes import bandwidth as bw
from kernelab.probes.chase import PLANS, run_chase


def _l2_repeats(working_set: int) -> int:
    return max(1, round(2e9 / working_set))  # ~2 GB per call: long enough to time well


def measure_hierarchy(*, quick: bool = False) -> HierarchyRecord:
    """Measure this GPU's hierarchy (NoGPUError without one); takes tens of seconds."""
    from kernelab.harness.ceilings import this_gpu

    identity = this_gpu("kernelab hierarchy")
    import torch

    from kernelab.environment import software_versions
    from kernelab.hardware.hierarchy import shared_memory_bandwidth_gbps
    from kernelab.harness.ceilings import GIB, _measure_copy
    from kernelab.harness.records import utc_now
    from kernelab.harness.timing import device_memory_guard

    spec = identity.spec
    l2_bytes = torch.cuda.get_device_properties(identity.index).L2_cache_size
    max_time_s = 0.3 if quick else 1.0
    warnings: list[str] = []
    hbm = (spec.memory_bandwidth_gbps, spec.source_of("memory_bandwidth_gbps")) if spec else None
    smem_rate = shared_memory_bandwidth_gbps(spec) if spec else None
    smem = (smem_rate, "derived: 128 B per SM per clock at the boost clock") if smem_rate else None
    l2_sheet = (spec.l2_bandwidth_gbps, spec.source_of("l2_bandwidth_gbps")) if spec else None
    link = HOST_LINK_DATASHEET.get(spec.id) if spec else None

    latencies: dict[str, LatencyMeasurement] = {}
    bandwidths: dict[str, BandwidthMeasurement] = {}
    with device_memory_guard():
        for plan in PLANS:
            note(f"latency: {plan.label}, {plan.working_set_bytes / 1024:,.0f} KiB working set")
            latencies[plan.level] = latency_of(plan, run_chase(plan, l2_bytes=l2_bytes))
            torch.cuda.empty_cache()

        note("bandwidth: shared memory")
        bandwidths["smem"] = bandwidth_of(
            "smem",
            "LDS.128, conflict-free, every SM",
            bw.SMEM_CHUNKS * bw.SMEM_THREADS * 16,
            bw.smem_read(max_time_s=max_time_s),
            smem,
        )
        for name, share in (("l2", 2), ("l2_small", 8)):
            working_set = l2_bytes // share
            note(f"bandwidth: L2, {working_set / 2**20:.1f} MiB read repeatedly")
            bandwidths[name] = bandwidth_of(
                name,
                f"ld.global.cg.v4 over 1/{share} of the L2, warm, every SM",
                working_set,
                bw.l2_read(working_set, repeats=_l2_repeats(working_set), max_time_s=max_time_s),
                l2_sheet if l2_sheet and l2_sheet[0] else None,
            )
            torch.cuda.empty_cache()
        note(f"bandwidth: HBM read, {bw.HBM_READ_BYTES / GIB:g} GiB")
        bandwidths["hbm_read"] = bandwidth_of(
            "hbm_read",
            "one read-only pass (LDG.E.128), cold L2",
            bw.HBM_READ_BYTES,
            bw.hbm_read(bw.HBM_READ_BYTES, max_time_s=max_time_s),
            hbm,
        )
        torch.cuda.empty_cache()
        # The copy ceiling (torch's copy, as `kernelab ceilings` times it) and our copy kernel
        # on buffers of the same size: like with like.
        note("bandwidth: HBM copy, kernelab's copy ceiling and this kernel")
        shape, timing, traffic = _measure_copy(torch, quick, max_time_s, warnings)[0]
        torch.cuda.empty_cache()
        buffer = shape["bytes_per_buffer"]
        bandwidths["copy_ceiling"] = bandwidth_of(
            "copy_ceiling",
            "torch dst.copy_(src), read + write (kernelab.harness.ceilings)",
            buffer,
            (traffic, timing),
            hbm,
        )
        bandwidths["hbm_copy"] = bandwidth_of(
            "hbm_copy",
            "hbm_copy kernel, read + write, cold L2",
            buffer,
            bw.hbm_copy(buffer, max_time_s=max_time_s),
            hbm,
        )
        torch.cuda.empty_cache()
        for direction in ("h2d", "d2h"):
            note(f"bandwidth: host link, {direction}, pinned")
            bandwidths[direction] = bandwidth_of(
                direction,
                f"torch copy, pinned host memory, {bw.HOST_LINK_BYTES // 2**20} MiB",
                bw.HOST_LINK_BYTES,
                bw.host_link(direction, bw.HOST_LINK_BYTES, max_time_s=max_time_s),
                link,
            )
    for name, b in bandwidths.items():
        if b.throttled:
            warnings.append(f"{name}: clocks throttled while timing")
    versions = dict(software_versions())
    return HierarchyRecord(
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        timestamp=utc_now(),
        quick=quick,
        latencies=latencies,
        bandwidths=bandwidths,
        versions=versions,
        warnings=warnings,
    )
