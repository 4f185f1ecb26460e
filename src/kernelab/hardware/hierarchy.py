"""Where the data lives: a GPU's memory hierarchy, outermost level first, with sizes and rates.

Rates come from a source where one exists (DRAM bandwidth from the datasheet) or are
derived and say so (NVIDIA shared memory: 32 banks x 4 bytes per SM per clock). A level
with no sourced or derivable rate carries None, never a guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernelab.hardware.specs import GPUSpec

# Every NVIDIA SM since Maxwell serves 32 banks x 4 bytes = 128 bytes of shared memory per clock.
_SMEM_BANKS = 32
_SMEM_BANK_BYTES = 4


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    size_bytes: int  # the whole chip's capacity at this level
    per_unit_bytes: int | None  # per SM / CU / core where the level is private to one
    bandwidth_gbps: float | None  # whole-chip rate, GB/s (1e9 bytes/s)
    source: str  # where size and rate come from

    def to_dict(self) -> dict:
        return asdict(self)


def shared_memory_bandwidth_gbps(spec: GPUSpec) -> float | None:
    """Aggregate shared-memory bandwidth for NVIDIA: 32 banks x 4 B x SMs x boost clock."""
    if spec.vendor != "nvidia":
        return None
    bytes_per_clock = _SMEM_BANKS * _SMEM_BANK_BYTES * spec.sm_count
    return bytes_per_clock * spec.boost_clock_mhz * 1e6 / 1e9


def memory_hierarchy(spec: GPUSpec) -> list[MemoryLevel]:
    """The levels a kernel's data moves through: DRAM, (Infinity Cache), L2, shared, registers."""
    unit = {"nvidia": "SM", "amd": "CU"}.get(spec.vendor, "core")
    dram_name = f"DRAM ({spec.memory_type})" if spec.memory_type else "DRAM"
    levels = [
        MemoryLevel(
            name=dram_name,
            size_bytes=int(spec.memory_gb * 1e9),
            per_unit_bytes=None,
            bandwidth_gbps=spec.memory_bandwidth_gbps,
            source=f"size: {spec.source_of('memory_gb')}; rate: {spec.source_of('memory_bandwidth_gbps')}",
        )
    ]
    if "infinity_cache_mib" in spec.extra:
        levels.append(
            MemoryLevel(
                name="Infinity Cache",
                size_bytes=int(spec.extra["infinity_cache_mib"] * 2**20),
                per_unit_bytes=None,
                bandwidth_gbps=spec.extra.get("infinity_cache_bandwidth_gbps"),
                source=spec.source_of("extra.infinity_cache_mib"),
            )
        )
    levels.append(
        MemoryLevel(
            name="L2" if spec.vendor != "apple" else "system level cache",
            size_bytes=spec.l2_kib * 1024,
            per_unit_bytes=None,
            bandwidth_gbps=spec.l2_bandwidth_gbps,
            source=spec.source_of("l2_kib")
            + ("" if spec.l2_bandwidth_gbps else "; no published bandwidth"),
        )
    )
    smem_rate = shared_memory_bandwidth_gbps(spec)
    smem_name = {"amd": "LDS", "apple": "threadgroup memory"}.get(spec.vendor, "shared memory")
    levels.append(
        MemoryLevel(
            name=f"{smem_name} (per {unit} x {spec.sm_count})",
            size_bytes=spec.smem_per_sm_kib * 1024 * spec.sm_count,
            per_unit_bytes=spec.smem_per_sm_kib * 1024,
            bandwidth_gbps=smem_rate,
            source=spec.source_of("smem_per_sm_kib")
            + (
                f"; rate derived: {_SMEM_BANKS} banks x {_SMEM_BANK_BYTES} B x {spec.sm_count} "
                f"{unit}s x {spec.boost_clock_mhz:g} MHz"
                if smem_rate is not None
                else "; no published bandwidth"
            ),
        )
    )
    register_bytes = spec.registers_per_sm * 4
    levels.append(
        MemoryLevel(
            name=f"registers (per {unit} x {spec.sm_count})",
            size_bytes=register_bytes * spec.sm_count,
            per_unit_bytes=register_bytes,
            bandwidth_gbps=None,
            source=f"{spec.source_of('registers_per_sm')}; {spec.registers_per_sm} x 4 bytes per {unit}",
        )
    )
    return levels
