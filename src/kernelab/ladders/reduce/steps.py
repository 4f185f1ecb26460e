"""The sum-reduction ladder as data: one row per step, from the teaching tree to one pass.

Each step names its source file and kernel, how many elements one block covers (which sets
the grid), the technique it adds, what that technique fixes, the Nsight Compute metric that
proves the fix, and the speedup it should give over the step before. Expected speedups are
predictions written before any GPU run, at 2^26 fp32 elements (256 MiB) on an H100/H200
class GPU; the first step's is 1 by definition. The numbers follow the shape of the classic
CUDA reduction ladder (Harris, "Optimizing Parallel Reduction in CUDA"), scaled down where
Hopper's caches and schedulers make the older fixes matter less.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError
from kernelab.ladders.provider import find_step, select_steps
from kernelab.runtime.cuda.launch import Launch, cdiv

BLOCK = 256  # threads per block in every step (REDUCE_BLOCK in common.cuh)
MAX_GRID = 1024  # blocks of the grid-stride steps: fills 132 SMs at 8 blocks of 256 each
MAX_BLOCKS = 2**31 - 1  # CUDA's grid.x limit
# The longest chain a grid-stride thread sums in one register: n / (MAX_GRID * BLOCK)
# elements; kernelab.harness.tolerances bounds fp32 chains up to K_MAX = 65536, which holds
# up to n = 2^34 here.
DTYPE_DEFINES = {"fp32": 0, "bf16": 1, "fp16": 2}  # -DREDUCE_DTYPE=...
DTYPES = tuple(DTYPE_DEFINES)
# The kernels index in 64 bits (common.cuh) and the blocked steps' grids stay within CUDA's
# grid.x up to 2^39 elements, so what bounds n is memory: 2^37 values of the narrowest dtype
# (fp16, bf16) are 256 GiB, more than any GPU of the catalog holds.
MAX_N = 1 << 37
MAX_N_WHY = ("2^37 elements (the kernels index in 64 bits, so memory is the bound: 2^37 "
             "fp16 values are 256 GiB, more than any GPU holds)")  # fmt: skip


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/reduce/
    technique: str
    fixes: str  # what was slow in the step before and this step removes
    metric: str  # the Nsight Compute metric that proves it
    metric_label: str  # what the metric is, in words (the table's column)
    expected_speedup: float  # over the previous step at 2^26 fp32 elements: a prediction
    elements_per_block: int  # 0: a grid-stride step (the grid is min(MAX_GRID, ...))
    one_pass: bool = False  # finishes in the same launch (last-block pattern)
    vector_loads: bool = False  # reads 16 bytes per load (LDG.E.128 in the SASS)

    @property
    def name(self) -> str:
        return f"reduce:{self.number:02d}"

    @property
    def kernel(self) -> str:
        return f"reduce_{self.number:02d}"

    @property
    def partials_kernel(self) -> str:
        """The kernel that reduces the fp32 partial sums of a pass before (two-pass steps)."""
        return f"{self.kernel}_partials"

    def grid(self, n: int) -> int:
        """Blocks of the pass that reads n elements."""
        if n <= 0:
            raise KernelabError(f"{self.name}: a pass needs at least one element, got n={n}")
        if self.elements_per_block == 0:
            return min(MAX_GRID, cdiv(n, BLOCK))
        blocks = cdiv(n, self.elements_per_block)
        if blocks > MAX_BLOCKS:
            raise KernelabError(
                f"{self.name}: n={n} needs {blocks} blocks, past CUDA's {MAX_BLOCKS}; "
                "use a grid-stride step (reduce:07 or later)"
            )
        return blocks

    def passes(self, n: int) -> list[tuple[int, Launch]]:
        """(elements read, launch) of every pass until one value is left; a one-pass step
        has one."""
        plan = []
        count = n
        while True:
            blocks = self.grid(count)
            plan.append((count, Launch((blocks, 1, 1), (BLOCK, 1, 1))))
            if self.one_pass or blocks == 1:
                return plan
            count = blocks

    def metadata(self) -> dict:
        return {
            "ladder": "reduce",
            "step": self.number,
            "technique": self.technique,
            "fixes": self.fixes,
            "proof_metric": self.metric,
            "expected_speedup": self.expected_speedup,
            "block": BLOCK,
            "passes": "one" if self.one_pass else "two or more",
        }


BRANCH = "smsp__sass_average_branch_targets_threads_uniform.pct"
BANK_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
INSTRUCTIONS = "smsp__inst_executed.sum"
LAUNCHES = "launches"  # not an ncu metric: the step's kernels counted in the ncu report

STEPS: tuple[Step, ...] = (
    Step(1, "interleaved", "01_interleaved.cu",
         "tree in shared memory, interleaved addressing (tid % 2s)",
         "the baseline: divergent branches inside every warp and a modulo per level",
         BRANCH, "branch efficiency %", 1.0, BLOCK),
    Step(2, "strided_index", "02_strided_index.cu",
         "strided index: thread t works on 2*s*t",
         "divergence: active threads are contiguous, whole warps retire together",
         BANK_CONFLICTS, "smem bank conflicts (ld)", 1.6, BLOCK),
    Step(3, "sequential", "03_sequential.cu",
         "sequential addressing: stride halves from blockDim/2",
         "the shared-memory bank conflicts step 2 created",
         BANK_CONFLICTS, "smem bank conflicts (ld)", 1.3, BLOCK),
    Step(4, "first_add_during_load", "04_first_add_during_load.cu",
         "first add during the load: two elements per thread",
         "half the threads idle from the first level; half as many blocks run the tree",
         OCCUPANCY, "achieved occupancy %", 1.6, 2 * BLOCK),
    Step(5, "unrolled_last_warp", "05_unrolled_last_warp.cu",
         "last warp unrolled with __syncwarp instead of __syncthreads",
         "block-wide barriers and loop overhead when only one warp still works",
         INSTRUCTIONS, "instructions executed", 1.3, 2 * BLOCK),
    Step(6, "fully_unrolled", "06_fully_unrolled.cu",
         "the whole tree unrolled by a block-size template",
         "the loop counter, compare and branch of every tree level",
         INSTRUCTIONS, "instructions executed", 1.05, 2 * BLOCK),
    Step(7, "grid_stride", "07_grid_stride.cu",
         "many elements per thread: a grid-stride loop over a fixed grid",
         "the tree paid per two elements: now once per thread, and <= 1024 partials",
         DRAM, "DRAM throughput %", 1.5, 0),
    Step(8, "warp_shuffle", "08_warp_shuffle.cu",
         "warp shuffles (__shfl_down_sync) instead of the shared-memory tree",
         "shared-memory traffic and barriers of the tree",
         DRAM, "DRAM throughput %", 1.05, 0),
    Step(9, "vector_loads", "09_vector_loads.cu",
         "128-bit vector loads (LDG.E.128)",
         "one load instruction per element: too few bytes in flight per warp",
         DRAM, "DRAM throughput %", 1.1, 0, vector_loads=True),
    Step(10, "one_pass", "10_one_pass.cu",
         "one pass: the last block to finish sums the partials (atomic ticket)",
         "the second launch and its gap",
         LAUNCHES, "launches", 1.05, 0, one_pass=True, vector_loads=True),
)  # fmt: skip


def get_step(key: int | str) -> Step:
    return find_step("reduce", key, STEPS)


def parse_steps(spec: str | None) -> list[Step]:
    return select_steps(spec, STEPS, get_step)
