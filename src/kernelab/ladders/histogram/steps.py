"""The histogram ladder as data: one row per step, from global atomics to warp-aggregated.

Each step names its source file and kernel (one extern "C" entry per value type:
<kernel>_i32 for int32 bin ids, <kernel>_u8 for bytes), the technique it adds, what that
fixes, and the Nsight Compute metric that proves it with the direction it must move against
the step before. Every step launches 256 threads per block over a grid-stride loop.
Bytes: read n x itemsize, write (bins + 1) x 8 (64-bit counts, one overflow slot).
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
DTYPES = ("int32", "uint8")
KERNEL_SUFFIX = {"int32": "i32", "uint8": "u8"}
ITEMSIZE = {"int32": 4, "uint8": 1}

L2_REDUCTIONS = "lts__t_sectors_op_red.sum"
SHARED_ATOMICS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum"


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

    @property
    def name(self) -> str:
        return f"histogram:{self.number:02d}"

    def kernel_for(self, dtype: str) -> str:
        if dtype not in KERNEL_SUFFIX:
            raise unknown("dtype for the histogram ladder", dtype, DTYPES)
        return f"{self.kernel}_{KERNEL_SUFFIX[dtype]}"

    def launch(self, n: int) -> Launch:
        return geometry(n)

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


def geometry(n: int) -> Launch:
    """256 threads a block, one block per 256 values up to MAX_BLOCKS (grid-stride beyond)."""
    if n <= 0:
        raise KernelabError(f"histogram: no launch for {n} values")
    return Launch(grid=(min(cdiv(n, THREADS), MAX_BLOCKS), 1, 1), block=(THREADS, 1, 1))


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
