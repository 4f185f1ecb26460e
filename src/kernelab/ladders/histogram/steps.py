"""The histogram ladder as data: one row per step, from global atomics to a copy of the bins
per lane.

Each step names its source file and kernel (one extern "C" entry per value type:
<kernel>_i32 for int32 bin ids, <kernel>_u8 for bytes), the technique it adds, what that
fixes, and the Nsight Compute metric that proves it with the direction it must move against
the step before. Every step launches 256 threads per block over a grid-stride loop: steps
1-3 one value a thread a trip, steps 4-5 16-byte units (geometry).
Bytes: read n x itemsize, write (bins + 1) x 8 (64-bit counts, one overflow slot).

How many unit loads steps 4-5 keep in flight a thread (HISTOGRAM_LOADS in common.cuh) is an
open tuning choice: LOAD_CANDIDATES lists the values worth timing; launch.histogram(...,
loads=) builds any of them and ladder.time_ladder(..., candidates=True) times them all in one
device call.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown
from kernelab.ladders.provider import find_step, select_steps
from kernelab.runtime.cuda.launch import Launch, cdiv

THREADS = 256  # mirrors common.cuh
MAX_BINS = 4096  # mirrors common.cuh: the shared copy holds MAX_BINS + 1 32-bit counters
# 132 SMs x 8 resident 256-thread blocks on an H100/H200 is 1056: 1024 blocks fill the GPU,
# and more would only add block flushes (bins + 1 global atomics each).
MAX_BLOCKS = 1024
# Each block's shared counters are 32-bit: below 2^40 values, a block of the grid-stride loop
# sees fewer than 2^40 / 1024 = 2^30 of them, so no shared counter can wrap.
MAX_N = 1 << 40
VECTOR_BYTES = 16  # mirrors common.cuh: steps 4-5 read 16-byte units
LOADS = 2  # HISTOGRAM_LOADS's default in common.cuh
LOAD_CANDIDATES = (1, 2, 4)
# An H100's or H200's SM: 2048 threads, 64 K registers (allocated 8 a thread at a time), 228 KiB
# of shared memory of which each block also reserves 1 KiB.
SM_THREADS, SM_REGISTERS, SM_SHARED, BLOCK_RESERVED = 2048, 65536, 228 * 1024, 1024
DTYPES = ("int32", "uint8")
KERNEL_SUFFIX = {"int32": "i32", "uint8": "u8"}
ITEMSIZE = {"int32": 4, "uint8": 1}

L2_REDUCTIONS = "lts__t_sectors_op_red.sum"
SHARED_ATOMICS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum"
GLOBAL_LOAD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/histogram/
    kernel: str  # extern "C" name without its value-type suffix
    technique: str
    fixes: str
    proof: str
    direction: str  # how `proof` must move against the step before: "down" or "reference"
    units: bool = False  # reads 16-byte units (steps 4-5): geometry sizes its grid by them

    @property
    def name(self) -> str:
        return f"histogram:{self.number:02d}"

    def defines(self, loads: int | None = None) -> dict | None:
        """The -D defines that build the step with `loads` units in flight (None: as written)."""
        if loads is None:
            return None
        if not self.units:
            raise KernelabError(f"{self.name} loads one value at a time; loads apply to steps 4-5")
        if loads not in LOAD_CANDIDATES:
            raise KernelabError(
                f"{self.name}: loads must be one of {LOAD_CANDIDATES}, got {loads!r}"
            )
        return {"HISTOGRAM_LOADS": loads}

    def kernel_for(self, dtype: str) -> str:
        if dtype not in KERNEL_SUFFIX:
            raise unknown("dtype for the histogram ladder", dtype, DTYPES)
        return f"{self.kernel}_{KERNEL_SUFFIX[dtype]}"

    def launch(self, n: int, dtype: str = "int32", resident: int | None = None) -> Launch:
        return geometry(n, dtype, resident) if self.units else geometry(n)

    def metadata(self) -> dict:
        return {
            "step": self.number,
            "technique": self.technique,
            "fixes": self.fixes,
            "proof": self.proof,
            "direction": self.direction,
            "file": self.file,
            "kernel": self.kernel,
            "tiles": {"threads": THREADS, "max_blocks": MAX_BLOCKS, "max_bins": MAX_BINS},
        }


def geometry(n: int, dtype: str | None = None, resident: int | None = None) -> Launch:
    """256 threads a block. Without a dtype (steps 1-3): one block per 256 values up to
    MAX_BLOCKS (grid-stride beyond). With one (steps 4-5): one thread per 16-byte unit, up to
    `resident` blocks (what the GPU holds at once: resident_blocks) or MAX_BLOCKS without it,
    and never so few that a block's 32-bit shared counters could see 2^31 values."""
    if n <= 0:
        raise KernelabError(f"histogram: no launch for {n} values")
    if dtype is None:
        return Launch(grid=(min(cdiv(n, THREADS), MAX_BLOCKS), 1, 1), block=(THREADS, 1, 1))
    if dtype not in ITEMSIZE:
        raise unknown("dtype for the histogram ladder", dtype, DTYPES)
    units = cdiv(n, VECTOR_BYTES // ITEMSIZE[dtype])
    cap = max(resident or MAX_BLOCKS, cdiv(n, 1 << 31))
    return Launch(grid=(min(cdiv(units, THREADS), cap), 1, 1), block=(THREADS, 1, 1))


def resident_blocks(registers: int, shared_bytes: int, sms: int) -> int:
    """Blocks of THREADS the GPU holds at once: sms x the per-SM limit set by threads,
    registers (rounded up to 8 a thread) and shared memory (each block reserving 1 KiB)."""
    by_threads = SM_THREADS // THREADS
    by_registers = SM_REGISTERS // (max(8, -(-registers // 8) * 8) * THREADS)
    by_shared = SM_SHARED // (shared_bytes + BLOCK_RESERVED)
    return sms * max(1, min(by_threads, by_registers, by_shared, 32))


STEPS: tuple[Step, ...] = (
    Step(
        1, "global_atomics", "01_global_atomics.cu", "histogram_global",
        "one global atomicAdd per value",
        "nothing: the teaching step; n atomics meet in L2, serialised per bin",
        L2_REDUCTIONS, "reference",
    ),
    Step(
        2, "shared_privatized", "02_shared_privatized.cu", "histogram_privatized",
        "each block counts into shared-memory bins, then flushes non-zero bins once",
        "the n L2 atomics: at most blocks x (bins + 1) reach L2",
        L2_REDUCTIONS, "down",
    ),
    Step(
        3, "warp_aggregated", "03_warp_aggregated.cu", "histogram_warp_aggregated",
        "__match_any_sync groups lanes by bin; one shared atomic per distinct bin per warp",
        "same-address shared atomics serialised within a warp (32 per warp when skewed)",
        SHARED_ATOMICS, "down",
    ),
    Step(
        4, "vector_loads", "04_vector_loads.cu", "histogram_vector",
        "16-byte loads (4 ids or 16 bytes), 2 in flight a thread before any is counted; the "
        "grid the blocks the GPU holds at once",
        "one value in flight a thread (LDG.E.U8 or LDG.E, then its atomic): a latency bound, "
        "not an atomic one",
        GLOBAL_LOAD_REQUESTS, "down", True,
    ),
    Step(
        5, "lane_bins", "05_lane_bins.cu", "histogram_lane_bins",
        "a copy of the bins per lane (bin b of lane l at word 32b + l, bank l) for bins <= "
        "256; step 4's loads",
        "bank conflicts between different bins of one warp-wide shared atomic",
        SHARED_ATOMICS, "down", True,
    ),
)  # fmt: skip


def get_step(name: int | str) -> Step:
    return find_step("histogram", name, STEPS)


def parse_steps(spec: str | None) -> list[Step]:
    return select_steps(spec, STEPS, get_step)


def check_bins(bins) -> int:
    """`bins` as an int in 1..MAX_BINS; one line otherwise."""
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise KernelabError(f"histogram: bins must be an integer in 1..{MAX_BINS}, got {bins!r}")
    return bins
