"""What a GPU is, as numbers: the frozen GPUSpec and the quantities derived from it.

Units are fixed across the catalog so that no caller has to guess:
  peak rates      TFLOP/s (TOPS for int8), dense: never the 2:4 sparsity figure
  bandwidth       GB/s, decimal (1 GB/s = 1e9 bytes/s), as datasheets quote it
  memory          GB, as marketed (decimal)
  on-chip sizes   KiB (L2, shared memory, L1)
  clock           MHz (boost; peak_clock_mhz holds the lower clock some peaks are quoted at)
Every number carries its source in `sources`, keyed by the field name or, for a peak rate,
by "peak_tflops.<dtype>".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# The dtype keys a peak rate may have. "fp32" is the SIMT (CUDA-core / vector) rate; "tf32"
# is the tensor-core rate with fp32 inputs rounded to tf32; "fp64" the best dense fp64 rate
# (tensor cores where the chip has them for fp64).
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class GPUSpec:
    id: str  # catalog id: lower-case with dashes, e.g. "h100-sxm"
    name: str  # marketing name, e.g. "NVIDIA H100 SXM5 80GB"
    vendor: str  # "nvidia", "amd", "apple"
    architecture: str  # "Hopper", "CDNA 3", ...
    compute_capability: str  # "9.0" for NVIDIA; the ISA target (e.g. "gfx942") elsewhere
    sm_count: int  # SMs (NVIDIA), CUs (AMD), GPU cores (Apple)
    boost_clock_mhz: float
    memory_gb: float
    memory_bandwidth_gbps: float
    l2_kib: int  # last-level on-chip cache the SMs share (AMD: L2; Apple: system level cache)
    smem_per_sm_kib: int  # the most shared memory (LDS) one SM can give its blocks
    smem_per_block_kib: int  # the most one block can opt in to
    l1_per_sm_kib: int  # the combined L1 / shared-memory array per SM
    registers_per_sm: int  # 32-bit registers
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int
    peak_tflops: Mapping[str, float]  # dense rate per dtype (keys from DTYPES)
    tdp_w: float
    sources: Mapping[str, str]
    # Names the device reports through torch / NVML (matched case-insensitively, as substrings).
    device_names: tuple[str, ...] = ()
    notes: str = ""
    # "HBM3", "GDDR6", "LPDDR5 (unified)": names the outermost level of the hierarchy view.
    memory_type: str = ""
    # Optional published figures for the hierarchy view; None when no reliable source exists.
    l2_bandwidth_gbps: float | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    # The clock a dtype's peak rate is quoted at, where that is not boost_clock_mhz: Hopper's
    # tensor-core rates are quoted at a lower boost clock for tensor work than the SIMT rates.
    # Sourced as "peak_clock_mhz.<dtype>".
    peak_clock_mhz: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_tflops", MappingProxyType(dict(self.peak_tflops)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        object.__setattr__(self, "peak_clock_mhz", MappingProxyType(dict(self.peak_clock_mhz)))
        unknown = set(self.peak_tflops) - set(DTYPES)
        if unknown:
            raise ValueError(f"{self.id}: unknown peak dtypes {sorted(unknown)}")
        stray = set(self.peak_clock_mhz) - set(self.peak_tflops)
        if stray:
            raise ValueError(f"{self.id}: a peak clock for dtypes without a peak {sorted(stray)}")

    # --- derived -------------------------------------------------------------------------

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbps * 1e9

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s (OP/s for int8) for `dtype`; KeyError if the chip lacks it."""
        return self.peak_tflops[dtype] * 1e12

    def rate_clock_mhz(self, dtype: str) -> float:
        """The clock `dtype`'s peak rate is quoted at: its own where catalogued, else boost."""
        return self.peak_clock_mhz.get(dtype, self.boost_clock_mhz)

    def flops_per_sm_per_cycle(self, dtype: str) -> float:
        """Dense FLOP (OP for int8) one SM retires per cycle: the peak over SMs and its clock."""
        return self.peak_flops(dtype) / self.sm_count / (self.rate_clock_mhz(dtype) * 1e6)

    def ridge(self, dtype: str) -> float:
        """The ridge point in FLOP/byte: the intensity where the memory and compute roofs meet."""
        return self.peak_flops(dtype) / self.bandwidth_bytes_per_s

    def ridges(self) -> dict[str, float]:
        return {d: self.ridge(d) for d in DTYPES if d in self.peak_tflops}

    @property
    def register_file_kib_per_sm(self) -> float:
        return self.registers_per_sm * 4 / 1024

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def source_of(self, key: str) -> str:
        return self.sources.get(key, "")
