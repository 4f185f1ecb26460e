"""The scan ladder as data: one row per step, from Hillis-Steele in a block to the single pass
with decoupled look-back, and each step's launch sequence as a plan of plain data.

Each step names its source file, the kernels it launches (one extern "C" entry per element
type: <kernel>_f32 and <kernel>_i32), the technique it adds, what that fixes, and the Nsight
Compute metric that proves it with the direction it must move against the step before.
`plan(step, n, exclusive)` lists the launches (kernel, grid, arguments naming buffers by
role) without touching CUDA: launch.py binds them to a GPU's pointers, the CPU tests to host
arrays under emulation, so both run the same sequence.
Bytes: the floor reads n x 4 and writes n x 4; steps 1-2 move about 4n x 4, step 3 3n x 4,
steps 4-5 2n x 4 (each .cu file has its accounting).

Step 5's items a thread (its tile) is an open tuning choice: ITEM_CANDIDATES are the values
of its SCAN05_ITEMS worth timing, and `plan(step, n, exclusive, items)` and launch.scan(...,
items=) build and launch any of them, so one device call can time them all
(ladder.time_ladder(..., candidates=True)).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown
from kernelab.ladders.provider import find_step, select_steps
from kernelab.runtime.cuda.launch import cdiv

THREADS = 256  # mirrors common.cuh
TILE = 2048  # SCAN_TILE in common.cuh: 256 threads x 8 elements, steps 3 and 4
WIDE_ITEMS = 16  # SCAN05_ITEMS's default in 05_wide_lookback.cu: a 4096-element tile
# Step 5's candidates: multiples of 4 (16-byte loads); 8 is step 4's tile. ptxas (sm_90a):
# 39, 48, 40, 68 and 80 registers for 8, 12, 16, 20, 24 (6 blocks an SM at 16, 3 at 24), no
# spills; ladder.compile_scan reports them for a build.
ITEM_CANDIDATES = (8, 12, 16, 20, 24)
# The add-offsets kernel of steps 1-2 is a grid-stride loop over at most this many blocks.
MAX_OFFSET_BLOCKS = 4096
# Step 1 launches one block per 256 elements; CUDA's gridDim.x limit (2^31 - 1) then caps n
# at just under 2^39. 2^38 elements (1 TiB of fp32) is far past any GPU's memory.
MAX_N = 1 << 38
DTYPES = ("fp32", "int32")
KERNEL_SUFFIX = {"fp32": "f32", "int32": "i32"}
ITEMSIZE = {"fp32": 4, "int32": 4}

SHARED_STORES = "smsp__inst_executed_op_shared_st.sum"
DRAM_BYTES = "dram__bytes.sum"
GLOBAL_LOADS = "smsp__inst_executed_op_global_ld.sum"


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    file: str  # under ladders/scan/
    kernels: tuple[str, ...]  # extern "C" names without their dtype suffix, in launch order
    structure: str  # "propagate" (scan tiles, scan the sums, add offsets), "reduce_then_scan",
    # or "lookback" (single pass)
    tile: int  # elements per tile (per block)
    technique: str
    fixes: str
    proof: str
    direction: str  # how `proof` must move against the step before: "down" or "reference"
    items_define: str = ""  # the -D macro that sets items a thread, for a tunable step

    @property
    def name(self) -> str:
        return f"scan:{self.number:02d}"

    def tile_for(self, items: int | None = None) -> int:
        """Elements per tile: the step's own, or THREADS x items for a tunable step."""
        if items is None:
            return self.tile
        if not self.items_define:
            raise KernelabError(f"{self.name} has a fixed tile; items apply to a tunable step")
        if items not in ITEM_CANDIDATES:
            raise KernelabError(
                f"{self.name}: items must be one of {ITEM_CANDIDATES}, got {items!r}"
            )
        return THREADS * items

    def defines(self, items: int | None = None) -> dict | None:
        """The -D defines that build the step with `items` a thread (None: as written)."""
        self.tile_for(items)
        return {self.items_define: items} if items is not None else None

    @property
    def kernel(self) -> str:
        """The kernel that reads x: the one a profile of the step starts from."""
        return self.kernels[0]

    def kernel_for(self, dtype: str, kernel: str | None = None) -> str:
        if dtype not in KERNEL_SUFFIX:
            raise unknown("dtype for the scan ladder", dtype, DTYPES)
        return f"{kernel or self.kernel}_{KERNEL_SUFFIX[dtype]}"

    def metadata(self) -> dict:
        return {
            "step": self.number,
            "technique": self.technique,
            "fixes": self.fixes,
            "proof": self.proof,
            "direction": self.direction,
            "file": self.file,
            "kernels": list(self.kernels),
            "structure": self.structure,
            "tiles": {"threads": THREADS, "tile": self.tile},
        }


STEPS: tuple[Step, ...] = (
    Step(
        1, "hillis_steele", "01_hillis_steele.cu",
        ("scan_hillis_steele", "scan_hillis_steele_offsets"), "propagate", THREADS,
        "Hillis-Steele in a block: 8 rounds, each thread adds the element 2^r to its left",
        "nothing: the teaching step; n log n adds, a barrier a round, tiles of 256 joined by "
        "scanning their sums and adding offsets (about 4n x 4 bytes)",
        SHARED_STORES, "reference",
    ),
    Step(
        2, "blelloch", "02_blelloch.cu",
        ("scan_blelloch", "scan_blelloch_offsets"), "propagate", 2 * THREADS,
        "Blelloch's work-efficient up-sweep / down-sweep tree, 2 elements a thread, padded",
        "step 1's n log n work: O(n) adds; about 5 warp-wide shared stores per 32 elements, "
        "not 9",
        SHARED_STORES, "down",
    ),
    Step(
        3, "reduce_then_scan", "03_reduce_then_scan.cu",
        ("scan_reduce_tiles", "scan_tile_sums", "scan_tiles_seeded"), "reduce_then_scan", TILE,
        "reduce-then-scan in three kernels; 8 elements a thread in registers, warp-shuffle "
        "block scan",
        "the write-back pass of scan-then-propagate: 3n x 4 bytes instead of 4n x 4",
        DRAM_BYTES, "down",
    ),
    Step(
        4, "decoupled_lookback", "04_decoupled_lookback.cu",
        ("scan_lookback",), "lookback", TILE,
        "single pass: tile ids from a counter, each tile publishes its aggregate and "
        "inclusive prefix, decoupled look-back over the predecessors",
        "the second read of x: one pass, 2n x 4 bytes, the copy's traffic",
        DRAM_BYTES, "down",
    ),
    Step(
        5, "wide_lookback", "05_wide_lookback.cu",
        ("scan_wide",), "lookback", THREADS * WIDE_ITEMS,
        "a warp looks back over 32 predecessors a round trip; 16 elements a thread through "
        "16-byte loads and stores (a 4096-element tile)",
        "step 4's serial look-back (one L2 round trip per predecessor, no load in flight "
        "meanwhile) and its 8 scalar loads a thread: the copy's traffic at the copy's pace",
        GLOBAL_LOADS, "down", "SCAN05_ITEMS",
    ),
)  # fmt: skip


def get_step(name: int | str) -> Step:
    return find_step("scan", name, STEPS)


def parse_steps(spec: str | None) -> list[Step]:
    return select_steps(spec, STEPS, get_step)


# ---- the launch plan: what runs, in order, on which buffers --------------------------------
#
# An argument is ("i64", value), ("i32", value) or ("ptr", buffer, offset) with buffer one of
# "x", "out", "scratch" (elements of the scan's dtype) or "state" (64-bit words; step 4's
# counter at word 0, then one descriptor a tile). Offsets count elements or words.


@dataclass(frozen=True)
class Call:
    kernel: str  # without the dtype suffix
    grid: int
    args: tuple


@dataclass(frozen=True)
class Plan:
    calls: tuple[Call, ...]
    scratch_elements: int  # tile sums, every level
    state_words: int  # step 4: 1 + tiles, zeroed before the launch; 0 otherwise


def plan(step: Step, n: int, exclusive: bool, items: int | None = None) -> Plan:
    """The launches that scan n elements (1 <= n < MAX_N) with `step` (a tunable step with
    `items` elements a thread where given)."""
    if not 1 <= n < MAX_N:
        raise KernelabError(f"scan: no launch for {n} elements (1 to 2^38 - 1)")
    flag = ("i32", 1 if exclusive else 0)
    tiles = cdiv(n, step.tile_for(items))
    if step.structure == "lookback":
        (kernel,) = step.kernels
        args = (("i64", n), ("ptr", "x", 0), ("ptr", "out", 0), ("ptr", "state", 1),
                ("ptr", "state", 0), flag)  # fmt: skip
        return Plan((Call(kernel, tiles, args),), 0, 1 + tiles)
    if step.structure == "reduce_then_scan":
        reduce, scan_sums, seeded = step.kernels
        sums = ("ptr", "scratch", 0)
        calls = (
            Call(reduce, tiles, (("i64", n), ("ptr", "x", 0), sums)),
            Call(scan_sums, 1, (("i64", tiles), sums)),
            Call(seeded, tiles, (("i64", n), ("ptr", "x", 0), ("ptr", "out", 0), sums, flag)),
        )
        return Plan(calls, tiles, 0)
    return _propagate(step, n, flag)


def _propagate(step: Step, n: int, flag: tuple) -> Plan:
    """Scan tiles (writing each tile's sum), scan the sums in place the same way (recursively,
    exclusive), then add each tile's offset: log_tile(n) levels, sums of level k after those
    of the levels before it in scratch."""
    tile_kernel, offsets_kernel = step.kernels
    calls: list[Call] = []
    used = 0

    def scan(source: tuple, target: tuple, count: int, flag: tuple) -> None:
        nonlocal used
        tiles = cdiv(count, step.tile)
        sums = ("ptr", "scratch", used)
        used += tiles
        calls.append(Call(tile_kernel, tiles, (("i64", count), source, target, sums, flag)))
        if tiles > 1:
            scan(sums, sums, tiles, ("i32", 1))
            grid = min(cdiv(count - step.tile, THREADS), MAX_OFFSET_BLOCKS)
            calls.append(Call(offsets_kernel, grid, (("i64", count), target, sums)))

    scan(("ptr", "x", 0), ("ptr", "out", 0), n, flag)
    return Plan(tuple(calls), used, 0)
