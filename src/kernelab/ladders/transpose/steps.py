"""The 2-D transpose ladder as data: one row per step, from naive to wide.

Each step names its source file and kernel (one extern "C" entry per dtype: <kernel>_f32 and
<kernel>_bf16), the technique it adds, what that fixes, and the Nsight Compute metric that
proves it, with the direction the metric must move against the step before. Every step
launches 32 x 8 threads; steps 1-4 own a 32 x 32 tile a block (common.cuh) and change only
its shared-memory layout, step 5 moves pairs of elements and owns a 64 x 64 tile (`side`).
Bytes: read rows x cols x itemsize, write the same; the ceiling is a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown
from kernelab.ladders.provider import find_step, select_steps
from kernelab.runtime.cuda.launch import Launch, cdiv

TILE = 32  # mirrors common.cuh
BLOCK_ROWS = 8
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: rows may span at most this many tiles
DTYPES = ("fp32", "bf16")
KERNEL_SUFFIX = {"fp32": "f32", "bf16": "bf16"}
ITEMSIZE = {"fp32": 4, "bf16": 2}

BANK_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
# A "zero" proof is read per shared-load instruction (ladders/engine.py): ncu counts a few
# extra wavefronts even on conflict-free loads (on an H100 at 2048x2048: 0.10 per load for
# fp32 step 3, 0.06 and 0.07 for step 4 in fp32 and bf16), while the smallest real conflict,
# 2-way on every other load, adds 0.5 and step 2's 32-way adds 31 (docs/ladders/transpose.md).
BANK_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
STORE_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
# One request per warp-wide global load instruction (ncu's Memory Workload Analysis tables on
# Hopper): step 5 loads pairs, so the same bytes take half the requests (the sectors do not
# move: every byte of a sector was already used, so they cannot prove it).
LOAD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/transpose/
    kernel: str  # extern "C" name without its dtype suffix
    technique: str
    fixes: str  # what was wrong with the step before
    proof: str  # the Nsight Compute metric that shows the technique worked
    # how `proof` must move against the step before: "down", or "zero" (at most
    # ZERO_ALLOWANCE_PER_LOAD per shared-load instruction)
    direction: str
    shared_bytes: tuple[int, int]  # static shared memory per block, (fp32, bf16); ptxas agrees
    side: int = TILE  # a block's tile is side x side elements (32 x 8 threads in every step)

    @property
    def name(self) -> str:
        return f"transpose:{self.number:02d}"

    def kernel_for(self, dtype: str) -> str:
        if dtype not in KERNEL_SUFFIX:
            raise unknown("dtype for the transpose ladder", dtype, DTYPES)
        return f"{self.kernel}_{KERNEL_SUFFIX[dtype]}"

    def launch(self, rows: int, cols: int) -> Launch:
        return geometry(rows, cols, self.side)

    def metadata(self) -> dict:
        return {
            "step": self.number,
            "technique": self.technique,
            "fixes": self.fixes,
            "proof": self.proof,
            "direction": self.direction,
            "file": self.file,
            "kernel": self.kernel,
            "tiles": {"tile": self.side, "block_rows": BLOCK_ROWS, "threads": TILE * BLOCK_ROWS},
        }


def geometry(rows: int, cols: int, side: int = TILE) -> Launch:
    """Block (32, 8), one block per side x side tile: x over columns, y over rows."""
    if rows <= 0 or cols <= 0:
        raise KernelabError(f"transpose: no launch for an empty {rows}x{cols} matrix")
    if cdiv(rows, side) > MAX_GRID_Y:
        raise KernelabError(
            f"transpose: {rows} rows need {cdiv(rows, side)} tiles down gridDim.y, "
            f"above CUDA's {MAX_GRID_Y}; at most {MAX_GRID_Y * side} rows"
        )
    return Launch(grid=(cdiv(cols, side), cdiv(rows, side), 1), block=(TILE, BLOCK_ROWS, 1))


STEPS: tuple[Step, ...] = (
    Step(
        1, "naive", "01_naive.cu", "transpose_naive",
        "one thread per element, in[r, c] straight to out[c, r]",
        "nothing: the teaching step; reads coalesced, writes strided by rows",
        STORE_SECTORS, "reference", (0, 0),
    ),
    Step(
        2, "shared", "02_shared.cu", "transpose_shared",
        "stage a 32 x 32 tile in shared memory; read and write rows, both coalesced",
        "the strided writes: store sectors per request fall from ~32 to 4 (fp32)",
        STORE_SECTORS, "down", (TILE * TILE * 4, TILE * TILE * 2),
    ),
    Step(
        3, "padded", "03_padded.cu", "transpose_padded",
        "pad each tile row by one bank word so a column walk crosses all 32 banks",
        "the 32-way (fp32) or 16-way (bf16) bank conflict of reading the tile down a column",
        BANK_LD, "zero", (TILE * (TILE * 4 + 4), TILE * (TILE * 2 + 4)),  # rows + one word
    ),
    Step(
        4, "swizzled", "04_swizzled.cu", "transpose_swizzled",
        "store tile element (r, c) at column c ^ r: conflict-free with no padding",
        "the padding's wasted shared memory and misaligned tile rows",
        BANK_LD, "zero", (TILE * TILE * 4, TILE * TILE * 2),
    ),
    Step(
        5, "wide", "05_wide.cu", "transpose_wide",
        "each thread moves pairs: a 64 x 64 tile, two rows' pairs transposed 2 x 2 in "
        "registers, one wide load and one wide store per pair (bf16 4 bytes, fp32 8)",
        "bf16's half-line requests: a warp moved 64 bytes per load and per store, and twice "
        "the instructions per byte of fp32",
        LOAD_REQUESTS, "down", (TILE * 2 * TILE * 8, TILE * 2 * TILE * 4), 2 * TILE,
    ),  # shared: 32 pair rows x 64 pairs
)  # fmt: skip


def get_step(name: int | str) -> Step:
    return find_step("transpose", name, STEPS)


def parse_steps(spec: str | None) -> list[Step]:
    return select_steps(spec, STEPS, get_step)
