"""Theoretical occupancy: how many blocks of a kernel fit on one SM, and what stops more.

The rules follow the CUDA occupancy calculator (cuda_occupancy.h, which Nsight Compute's
launch__occupancy_limit_* metrics agree with) for NVIDIA compute capability 7.0 and newer:

  warps      a block takes ceil(threads / 32) warp slots of the SM's max_threads_per_sm / 32.
  registers  registers are given to warps in units of 256 (regs/thread x 32, rounded up), and
             each of the SM's 4 sub-partitions holds a quarter of the register file, so the
             SM holds 4 x floor((regs/4) / regs_per_warp) warps. A block must also fit the
             64K per-block limit, checked as if its warps were rounded up to a multiple of 4.
  shared     a block's static + dynamic shared memory plus 1 KiB the driver reserves per
             block (cc >= 8.0) is rounded up to 128 bytes (cc >= 8.0; 256 before) and must
             fit the SM's carveout. We assume the driver picks the largest carveout
             (smem_per_sm_kib in the spec, 228 KiB on Hopper), as it does by default for a
             kernel that needs it: both H200 kernels in the ncu fixtures ran with 228 KiB.
  blocks     at most max_blocks_per_sm resident blocks.
  barriers   (optional) each block uses `barriers_per_block` named barriers out of
             2 x max_blocks_per_sm per SM on cc 9.0 (bar.sync 0 counts as one); reported,
             as Nsight Compute does, never above the block-slot limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelab.errors import KernelabError
from kernelab.hardware.specs import GPUSpec

REGISTER_ALLOCATION_UNIT = 256  # registers, per warp, cc 3.0 through 12.x
MAX_REGISTERS_PER_THREAD = 255  # what ptxas can assign
MAX_REGISTERS_PER_BLOCK = 65536
MAX_THREADS_PER_BLOCK = 1024
SUBPARTITIONS_PER_SM = 4  # cc 7.0+: four warp schedulers, each with its own register file slice


class LaunchDoesNotFit(KernelabError):
    """One block alone needs more registers, shared memory or threads than an SM has."""


def _compute_major(spec: GPUSpec) -> int:
    if spec.vendor != "nvidia":
        raise KernelabError(
            f"the occupancy model covers NVIDIA GPUs; {spec.id} is a {spec.vendor} part"
        )
    major = int(spec.compute_capability.split(".")[0])
    if major < 7:
        raise KernelabError(
            f"the occupancy model covers compute capability 7.0 and newer; "
            f"{spec.id} is {spec.compute_capability}"
        )
    return major


def smem_allocation_granularity(spec: GPUSpec) -> int:
    """Bytes: shared memory is handed to blocks in multiples of this."""
    return 128 if _compute_major(spec) >= 8 else 256


def reserved_smem_per_block(spec: GPUSpec) -> int:
    """Bytes the driver keeps in every block's shared memory (cc >= 8.0)."""
    return 1024 if _compute_major(spec) >= 8 else 0


def _barrier_slots_per_block_slot(spec: GPUSpec) -> int:
    """Named-barrier sets per resident-block slot, as in cuda_occupancy.h: one on 8.6/8.9,
    10.1, 11.0 and 12.x, two everywhere else from 7.0 on (Hopper included)."""
    major, _, minor = spec.compute_capability.partition(".")
    single = {
        ("8", "6"),
        ("8", "7"),
        ("8", "9"),
        ("10", "1"),
        ("11", "0"),
        ("12", "0"),
        ("12", "1"),
    }
    return 1 if (major, minor or "0") in single or major == "12" else 2


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    gpu: str
    threads_per_block: int
    registers_per_thread: int
    smem_per_block_bytes: int  # what the kernel asked for: static + dynamic
    warps_per_block: int
    registers_per_block: int  # as allocated: per-warp rounding applied
    smem_per_block_allocated: int  # with the driver's reserve and the granularity
    smem_carveout_bytes: int
    limits: dict[str, int]  # blocks per SM each resource allows
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy_pct: float
    limiter: tuple[str, ...]  # every resource whose limit equals blocks_per_sm
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "threads_per_block": self.threads_per_block,
            "registers_per_thread": self.registers_per_thread,
            "smem_per_block_bytes": self.smem_per_block_bytes,
            "warps_per_block": self.warps_per_block,
            "registers_per_block": self.registers_per_block,
            "smem_per_block_allocated": self.smem_per_block_allocated,
            "smem_carveout_bytes": self.smem_carveout_bytes,
            "limits": dict(self.limits),
            "blocks_per_sm": self.blocks_per_sm,
            "active_warps": self.active_warps,
            "max_warps": self.max_warps,
            "occupancy_pct": self.occupancy_pct,
            "limiter": list(self.limiter),
            "notes": list(self.notes),
        }


def occupancy(
    spec: GPUSpec,
    *,
    threads_per_block: int,
    registers_per_thread: int,
    smem_per_block_bytes: int = 0,
    dynamic_smem_bytes: int = 0,
    barriers_per_block: int | None = None,
    carveout_kib: int | None = None,
) -> Occupancy:
    """Resident blocks per SM and theoretical occupancy of one launch configuration.

    smem_per_block_bytes is the kernel's static shared memory, dynamic_smem_bytes what the
    launch passes; their sum is what the block uses (the 1 KiB driver reserve is added here).
    carveout_kib overrides the shared-memory carveout (default: spec.smem_per_sm_kib).
    Raises LaunchDoesNotFit when not even one block fits.
    """
    _compute_major(spec)
    if threads_per_block <= 0:
        raise KernelabError(f"threads per block must be positive, got {threads_per_block}")
    if threads_per_block > MAX_THREADS_PER_BLOCK:
        raise LaunchDoesNotFit(
            f"{threads_per_block} threads per block exceeds the limit of {MAX_THREADS_PER_BLOCK}"
        )
    if registers_per_thread <= 0:
        raise KernelabError(f"registers per thread must be positive, got {registers_per_thread}")
    if registers_per_thread > MAX_REGISTERS_PER_THREAD:
        raise LaunchDoesNotFit(
            f"{registers_per_thread} registers per thread exceeds the limit of "
            f"{MAX_REGISTERS_PER_THREAD} (ptxas would spill to local memory)"
        )
    if smem_per_block_bytes < 0 or dynamic_smem_bytes < 0:
        raise KernelabError("shared memory per block cannot be negative")

    warp = spec.warp_size
    warps_per_block = -(-threads_per_block // warp)
    max_warps = spec.max_threads_per_sm // warp

    # Registers: per warp, rounded to the allocation unit; warps placed per sub-partition.
    regs_per_warp = _round_up(registers_per_thread * warp, REGISTER_ALLOCATION_UNIT)
    regs_per_block = regs_per_warp * warps_per_block
    regs_checked_by_hw = regs_per_warp * _round_up(warps_per_block, SUBPARTITIONS_PER_SM)
    per_block_limit = min(MAX_REGISTERS_PER_BLOCK, spec.registers_per_sm)
    if max(regs_per_block, regs_checked_by_hw) > per_block_limit:
        raise LaunchDoesNotFit(
            f"{threads_per_block} threads x {registers_per_thread} registers needs "
            f"{max(regs_per_block, regs_checked_by_hw)} registers per block; the limit is "
            f"{per_block_limit}"
        )
    warps_per_subpartition = (spec.registers_per_sm // SUBPARTITIONS_PER_SM) // regs_per_warp
    register_limit = (warps_per_subpartition * SUBPARTITIONS_PER_SM) // warps_per_block

    # Shared memory: the driver's reserve, the granularity, the carveout.
    granularity = smem_allocation_granularity(spec)
    reserve = reserved_smem_per_block(spec)
    smem_used = smem_per_block_bytes + dynamic_smem_bytes
    smem_allocated = _round_up(smem_used + reserve, granularity)
    per_block_smem_limit = spec.smem_per_block_kib * 1024 + reserve
    carveout = (carveout_kib if carveout_kib is not None else spec.smem_per_sm_kib) * 1024
    if smem_allocated > per_block_smem_limit:
        raise LaunchDoesNotFit(
            f"{smem_used} bytes of shared memory per block (+{reserve} reserved) exceeds the "
            f"{spec.smem_per_block_kib} KiB one block can use on {spec.id}"
        )
    if smem_allocated > carveout:
        raise LaunchDoesNotFit(
            f"{smem_allocated} bytes of shared memory per block exceeds the "
            f"{carveout // 1024} KiB carveout"
        )
    smem_limit = carveout // smem_allocated

    limits = {
        "registers": register_limit,
        "shared_memory": smem_limit,
        "warps": max_warps // warps_per_block,
        "blocks": spec.max_blocks_per_sm,
    }
    if barriers_per_block is not None:
        if barriers_per_block < 0:
            raise KernelabError("barriers per block cannot be negative")
        barrier_slots = _barrier_slots_per_block_slot(spec) * spec.max_blocks_per_sm
        limits["barriers"] = (
            min(barrier_slots // barriers_per_block, spec.max_blocks_per_sm)
            if barriers_per_block
            else spec.max_blocks_per_sm
        )

    blocks = min(limits.values())
    limiter = tuple(name for name, value in limits.items() if value == blocks)
    active_warps = blocks * warps_per_block
    notes = []
    if threads_per_block % warp:
        notes.append(
            f"{threads_per_block} threads is not a multiple of {warp}: the last warp of each "
            "block runs partly empty"
        )
    return Occupancy(
        gpu=spec.id,
        threads_per_block=threads_per_block,
        registers_per_thread=registers_per_thread,
        smem_per_block_bytes=smem_used,
        warps_per_block=warps_per_block,
        registers_per_block=regs_per_block,
        smem_per_block_allocated=smem_allocated,
        smem_carveout_bytes=carveout,
        limits=limits,
        blocks_per_sm=blocks,
        active_warps=active_warps,
        max_warps=max_warps,
        occupancy_pct=100.0 * active_warps / max_warps,
        limiter=limiter,
        notes=tuple(notes),
    )
