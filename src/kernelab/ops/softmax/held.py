"""Softmax of very long rows, each program's chunk held in shared memory for a step (Gluon).

The deferred cooperative kernel (cooperative._softmax_coop_deferred_kernel) cuts a row into
chunks, one per program of a persistent group, and finishes each row one step late: a
program publishes row r's partials, then writes row r - 1, whose peers published a step
ago. It keeps row r - 1's exps in registers for that step, and in bf16 those fp32 exps cost
twice the registers per byte they do in fp32: 1,024-value chunks at one warp, so 256
programs per 262K row, each polling 256 partials a row.

Here the row to finish waits in shared memory as its input values (2 bytes a value in
bf16), and its exps are taken again when it is written. That fits 4,096-value chunks in
two warps (64 programs per 262K row, a quarter of the polled words per byte):

    step i (row r = group + i * n_groups):
      poll row r - n_groups's partials (early) -> store row r's chunk, loaded a step ago,
      to buffer i % 2 -> load row r + n_groups's chunk -> its max and sum of exps ->
      publish -> once row r - n_groups's partials are all there: write it from buffer
      (i + 1) % 2 as 2^(x log2 e - c) * 2^(c - C) / S

Bytes per program per row: CHUNK x itemsize read from HBM (an L2 prefetch of the row after
next asks for the same lines early) and written once; 8 bytes published and n_chunks x 8
polled (L2). Shared memory: written and read back once, by the thread that wrote it (one
layout throughout, so no barrier). FLOPs per value: a max, an FFMA, an ex2 and an add for
the partials; an FFMA, an ex2 and a multiply at the finish.

The exchange is the deferred kernel's: one packed 64-bit word per chunk, four turn slots
per group, the turn's tag bit (exchange._packed, _turn_bit; primitives._combine_stats);
its words may be kept between calls, the turns continuing (turn_words, CONTINUE).
Every program of the grid must be resident at once (the grid is what fits, from the
compiled kernel's registers and shared memory); a wait that outlasts MAX_SPINS polls turns
the program's rows to NaN rather than hang. Rows must be whole chunks.

Measured on the H200, bf16 262K: c4096 w2 with the L2 prefetch 3.851-3.866 TB/s against
3.762-3.798 for the tuned library beside it (benchmarks/results/h200/experiments/ (at f7bfe57)
softmax_gluon_held_v2..v6); c8192 w4 3.899-3.911 with c4096 w2 at 3.869-3.880 beside it
(softmax_gluon_held_v11..v13). It lost at 131K (3.902-3.928 against 3.989-4.006) and in fp32
(262K: 4.012-4.023 against 4.142-4.154), so it is offered on 2-byte rows of 262K values or
more only. The cooperative and flat kernels holding the row to finish as its input words
(RECOMPUTE) beat it at bf16 262K by 3.6 % in alternating pairs (softmax_paired_configs_v1):
it stays a candidate, not the default. Fewer programs per SM than fit lost 10-13 %
(softmax_gluon_held_v9_per_sm); one cp.async.bulk.prefetch.L2 per chunk tied with the
evict_last prefetch (softmax_gluon_held_v15_bulk).
"""

from __future__ import annotations

import functools

import torch

from kernelab.ops.softmax.exchange import _packed, _turn_bit
from kernelab.ops.softmax.primitives import _chunk_scale, _combine_stats
from kernelab.ops.softmax.shared import works_or_warn
from kernelab.runtime import turn_words
from kernelab.runtime.tuner import (
    compiled_occupancy,
    interpreting,
    resident_programs,
    sm_count,
)

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except ImportError:  # a Triton without Gluon: the path is never offered
    gluon = None

# (CHUNK, warps, L2 prefetch, register cap): the three measured best at bf16 262K
# (module doc)
CONFIGS = (
    # 8,192-value chunks in four warps: the same values per thread as c4096 w2 and the same
    # warps per SM (3 programs of 4 against 6 of 2), half the partial words polled per row
    {"path": "held", "CHUNK": 8192, "num_warps": 4, "L2_AHEAD": 1},
    {"path": "held", "CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1},
    {"path": "held", "CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1, "maxnreg": 128},
)
# Offered on rows of at least this many values, of whole chunks, at most MOST_CHUNKS of them
# (one block of polled words).
LEAST_COLS = 262_144
MOST_CHUNKS = 256
ITEMSIZES = (2,)
# A poll is an L2 round trip (~1 us): 2^22 of them is seconds, then the rows come out NaN.
MAX_SPINS = 1 << 22


if gluon is not None:
    LOG2E = gl.constexpr(1.4426950408889634)
    MINUS_INF_BITS = gl.constexpr(-8388608)  # float32 -inf as a signed int32 (0xFF800000)
    TURN_PERIOD = gl.constexpr(turn_words.TURN_PERIOD)  # slot and tag repeat every 8 turns

    @gluon.jit
    def _load_chunk(x_ptr, row, n_rows, x_row_stride, cols):
        """One program's chunk of `row` (a row past the last reads the last again, never
        used): CHUNK x itemsize bytes from HBM, evict_first (read once)."""
        last = gl.minimum(row, n_rows - 1)
        return gl.load(
            x_ptr + last.to(gl.int64) * x_row_stride + cols, eviction_policy="evict_first"
        )

    @gluon.jit
    def _prefetch_to_l2(x_ptr, row, n_rows, x_row_stride, first_col, CHUNK: gl.constexpr,
                        num_warps: gl.constexpr):  # fmt: skip
        """Ask the L2 for the 128-byte lines of row's chunk, no register waiting for them;
        nothing past the last row."""
        LINE_VALUES: gl.constexpr = 1024 // x_ptr.dtype.element_ty.primitive_bitwidth
        LINES: gl.constexpr = CHUNK // LINE_VALUES
        line_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        lines = first_col + gl.arange(0, LINES, layout=line_layout) * LINE_VALUES
        inside = (gl.full([LINES], 0, gl.int32, line_layout) + row < n_rows).to(gl.int32)
        gl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; "
            "mov.b32 $0, 0; }",
            "=r,l,r",
            [x_ptr + row.to(gl.int64) * x_row_stride + lines, inside],
            dtype=gl.int32,
            is_pure=False,
            pack=1,
        )

    @gluon.jit
    def _poll(slot, peers, present, turn):
        """One volatile read of the group's packed words (8 bytes a chunk) for `turn`;
        padding past n_chunks reads as a published (-inf, 0) of this turn."""
        absent = (gl.full(peers.shape, MINUS_INF_BITS, gl.int64, peers.type.layout) << 32) | (
            _turn_bit(turn).to(gl.int64) << 31
        )
        return gl.load(slot + peers, mask=present, other=absent, volatile=True)

    @gluon.jit
    def _late(words, turn):
        return gl.sum((((words >> 31) & 1) != _turn_bit(turn)).to(gl.int32), axis=0)

    @gluon.jit
    def _scale_after_wait(slot, words, peers, present, turn, held_c, MAX_SPINS: gl.constexpr):
        """Poll until every peer's word is this turn's, then 2^(c - C) / S for the held chunk
        (c = held_c): (scale, whether every peer came within MAX_SPINS polls)."""
        late = _late(words, turn)
        spins = 0
        while (late > 0) & (spins < MAX_SPINS):
            words = _poll(slot, peers, present, turn)
            late = _late(words, turn)
            spins += 1
        maxes = gl.where(
            present, (words >> 32).to(gl.int32).to(gl.float32, bitcast=True), -float("inf")
        )
        sums = gl.where(
            present, (words & 0x7FFFFFFF).to(gl.int32).to(gl.float32, bitcast=True), 0.0
        )
        row_c, row_sum = _combine_stats(maxes, sums, True)
        return _chunk_scale(held_c, row_c, row_sum, False), late == 0

    @gluon.jit
    def _publish(words_ptr, group, turn, n_chunks, chunk, c, chunk_sum):
        """This chunk's partials for the step's row: turn + 1 (turn is the previous row's)
        in slot turn % 4 of the group, one packed word (8 bytes), no fence (the turn tag is
        the signal)."""
        word = _packed(turn + 1, c, chunk_sum)
        gl.atomic_xchg(
            words_ptr + (group * 4 + turn % 4) * n_chunks + chunk, word, sem="relaxed",
            scope="gpu",
        )  # fmt: skip

    @gluon.jit
    def _scale_so_far(slot, words, peers, present, turn, held_c, healthy,
                      MAX_SPINS: gl.constexpr):  # fmt: skip
        """_scale_after_wait, NaN from the first wait that gave up on (a wait that gave up
        poisons every later row of the program): (scale, healthy)."""
        scale, met = _scale_after_wait(slot, words, peers, present, turn, held_c, MAX_SPINS)
        healthy = healthy & met
        return gl.where(healthy, scale, float("nan")), healthy

    @gluon.jit
    def _last_row_scale(words_ptr, group, turn, n_chunks, peers, present, held_c,
                        healthy, MAX_SPINS: gl.constexpr):  # fmt: skip
        """The scale of the group's last row, which a program finishes after its loop (its
        turn is `turn`, in slot (turn - 1) % 4)."""
        last = words_ptr + (group * 4 + (turn - 1) % 4) * n_chunks
        first = _poll(last, peers, present, turn)
        return _scale_so_far(last, first, peers, present, turn, held_c, healthy, MAX_SPINS)[0]

    @gluon.jit
    def _finish(held, c, scale, out_ptr, row, out_row_stride, cols, layout: gl.constexpr):
        """Write the held chunk of `row` from shared memory: 2^(x log2 e - c) * scale (the
        row's only write, CHUNK x itemsize bytes)."""
        x = held.load(layout).to(gl.float32)
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        y = gl.exp2(x * LOG2E - c_safe) * scale
        gl.store(out_ptr + row.to(gl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty))

    @gluon.jit(do_not_specialize=["n_rows", "n_groups"])
    def _softmax_held_kernel(
        x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups,
        CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, L2_AHEAD: gl.constexpr,
        L2_PART: gl.constexpr, MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
        bases_ptr=None, CONTINUE: gl.constexpr = False,
    ):  # fmt: skip
        # L2_PART: the L2 prefetch asks for the first 1 / L2_PART of the chunk only (each
        # prefetched line crosses the L2 fabric twice); at bf16 262K: -2.5 % at c4096 w2,
        # -4.4 % at c8192 w4 (softmax_gluon_held_v8_l2part, v13_c8192_l2)
        group = gl.program_id(0) // n_chunks
        chunk = gl.program_id(0) % n_chunks
        # CONTINUE: the words were kept from the last call on them (turn_words); this group's
        # turns go on from bases_ptr[group], advanced at the end. Off, they start at 0.
        turn0 = 0
        if CONTINUE:
            turn0 = gl.load(bases_ptr + group).to(gl.int32)
        VEC: gl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth  # 16 B a lane
        layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
        cols = chunk * CHUNK + gl.arange(0, CHUNK, layout=layout)
        peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
        present = peers < n_chunks
        # two buffers by step parity: the row being finished and this row (2 x CHUNK x
        # itemsize bytes); the next row's chunk travels in registers
        held = gl.allocate_shared_memory(
            x_ptr.dtype.element_ty, [2, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0])
        )
        upcoming = _load_chunk(x_ptr, group, n_rows, x_row_stride, cols)
        iteration = 0
        healthy = True
        held_c = 0.0
        for row in range(group, n_rows, n_groups):
            if L2_AHEAD > 0:
                _prefetch_to_l2(
                    x_ptr, row + (1 + L2_AHEAD) * n_groups, n_rows, x_row_stride,
                    chunk * CHUNK, CHUNK // L2_PART, num_warps,
                )  # fmt: skip
            # the previous row's turn is `turn`, in slot (turn - 1) % 4 (at iteration 0 this
            # reads a slot nobody finishes from: the words go unused)
            turn = turn0 + iteration
            previous = words_ptr + (group * 4 + (turn + 3) % 4) * n_chunks
            first = _poll(previous, peers, present, turn)
            current = upcoming
            held.index(iteration % 2).store(current)
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, x_row_stride, cols)
            x = current.to(gl.float32)
            c = gl.max(x, axis=0) * LOG2E  # the chunk max in log2 units
            c_safe = gl.where(c == float("-inf"), 0.0, c)  # a chunk of only -inf: exps 0
            chunk_sum = gl.sum(gl.exp2(x * LOG2E - c_safe), axis=0)
            _publish(words_ptr, group, turn, n_chunks, chunk, c, chunk_sum)
            if iteration > 0:
                scale, healthy = _scale_so_far(
                    previous, first, peers, present, turn, held_c, healthy, MAX_SPINS
                )
                _finish(
                    held.index((iteration + 1) % 2), held_c, scale, out_ptr, row - n_groups,
                    out_row_stride, cols, layout,
                )  # fmt: skip
            held_c = c
            iteration += 1
        # the group's last row
        scale = _last_row_scale(
            words_ptr, group, turn0 + iteration, n_chunks, peers, present, held_c, healthy,
            MAX_SPINS,
        )  # fmt: skip
        _finish(
            held.index((iteration + 1) % 2), held_c, scale, out_ptr,
            group + (iteration - 1) * n_groups, out_row_stride, cols, layout,
        )  # fmt: skip
        if CONTINUE:
            if chunk == 0:
                # after the last finish, which needed every peer's words of this call, so
                # every peer has read the old base (turn_words has the argument)
                gl.store(bases_ptr + group, ((turn0 + iteration) % TURN_PERIOD).to(gl.int64))


def offered(n_cols: int, itemsize: int) -> list[dict]:
    """The configurations of CONFIGS for rows of n_cols values of itemsize bytes: at least
    LEAST_COLS values, whole chunks, at most MOST_CHUNKS of them, in the dtypes measured to
    gain."""
    if itemsize not in ITEMSIZES or n_cols < LEAST_COLS:
        return []
    return [
        dict(c) for c in CONFIGS if n_cols % c["CHUNK"] == 0 and n_cols // c["CHUNK"] <= MOST_CHUNKS
    ]


def candidates_for(x2d) -> list[dict]:
    """What the long-row tuner may time for this tensor: `offered`, on a GPU of compute
    capability 9.0 or more (where it was measured) where the kernel works; rows of unit
    column stride, 16-byte aligned. None elsewhere, and never under the interpreter."""
    if gluon is None or interpreting() or x2d.device.type != "cuda" or x2d.dim() != 2:
        return []
    itemsize = x2d.element_size()
    if x2d.stride(1) != 1 or x2d.data_ptr() % 16 or (x2d.stride(0) * itemsize) % 16:
        return []
    configs = offered(x2d.shape[1], itemsize)
    if not configs:
        return []
    index = x2d.device.index if x2d.device.index is not None else 0
    if torch.cuda.get_device_capability(index) < (9, 0) or not works_here(index, x2d.dtype):
        return []
    return configs


def works_here(device_index: int, dtype) -> bool:
    """Whether the kernel compiles and runs right on this GPU in this dtype: one launch on
    a few rows, checked against torch, the first time it is offered. Gluon is experimental
    (its API moves between Triton releases), so where it fails the register kernels serve
    and a warning says so. Not asked while a CUDA graph is being captured (it synchronizes)."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    return _works_here(device_index, dtype)


@functools.cache
def _works_here(device_index: int, dtype) -> bool:
    config = CONFIGS[0]

    def attempt() -> bool:
        n_cols = LEAST_COLS
        x = torch.randn(3, n_cols, device=f"cuda:{device_index}", dtype=dtype)
        out = torch.empty_like(x)
        ran = _launch(x, out, config)
        expected = torch.softmax(x.float(), dim=-1)
        return ran and bool(torch.allclose(out.float(), expected, rtol=2e-2, atol=1e-7))

    return works_or_warn("the held-row (Gluon) kernel is", attempt)


def _setup(x2d, out, config: dict) -> tuple[tuple, dict, int]:
    """(the occupancy probe's arguments, launch kwargs, chunks per row). The probe is the
    launch's arguments with a one-word workspace (never launched on: uninitialized, so no
    memset per call) and one group: n_rows and n_groups are not specialized on, so it
    compiles the very binary the launch runs."""
    n_rows, n_cols = x2d.shape
    n_chunks = n_cols // config["CHUNK"]
    kwargs = {
        "CHUNK": config["CHUNK"],
        "BLOCK_CHUNKS": max(2, 1 << (n_chunks - 1).bit_length()),
        "L2_AHEAD": config.get("L2_AHEAD", 1),
        "L2_PART": config.get("L2_PART", 1),
        "MAX_SPINS": MAX_SPINS,
        "num_warps": config["num_warps"],
    }
    if config.get("maxnreg"):
        kwargs["maxnreg"] = config["maxnreg"]
    workspace = torch.empty(1, device=x2d.device, dtype=torch.int64)
    if turn_words.continues(x2d.device):
        # the launch passes the kept bases here: same dtype and alignment, same binary
        kwargs.update(bases_ptr=workspace, CONTINUE=True)
    probe = (x2d, out, workspace, n_rows, x2d.stride(0), out.stride(0), n_chunks, 1)
    return probe, kwargs, n_chunks


def plan(x2d, config: dict) -> dict:
    """How this config launches on x2d: registers, spills, shared bytes and programs per SM
    (formula and driver) of the compiled kernel, chunks per row and resident row groups."""
    probe, kwargs, n_chunks = _setup(x2d, torch.empty_like(x2d), config)
    per_sm, info = compiled_occupancy(_softmax_held_kernel, x2d.device, probe, kwargs)
    n_groups = min(x2d.shape[0], per_sm * sm_count(x2d.device) // n_chunks)
    return {**info, "per_sm": per_sm, "chunks_per_row": n_chunks, "groups": n_groups}


def _launch(x2d, out, config: dict) -> bool:
    """Run the kernel; False when not one row group's programs can be resident."""
    probe, kwargs, n_chunks = _setup(x2d, out, config)
    n_groups = min(x2d.shape[0], resident_programs(_softmax_held_kernel, probe, kwargs) // n_chunks)
    if n_groups < 1:
        return False
    # four turn slots per chunk per group (8 bytes a word), zeroed: no word carries a turn's
    # tag yet; or kept from the last call where turn_words.REUSE (the turns continue)
    words, bases, continued = turn_words.exchange_words(
        x2d.device, "softmax.held", (n_groups * 4 * n_chunks,), n_groups
    )
    if continued:
        kwargs = {**kwargs, "bases_ptr": bases}
    x, out, _, n_rows, x_stride, out_stride, _, _ = probe
    _softmax_held_kernel[(n_groups * n_chunks,)](
        x,
        out,
        words,
        n_rows,
        x_stride,
        out_stride,
        n_chunks,
        n_groups,
        **kwargs,
    )
    return True


def launch(x2d, out, config: dict) -> bool:
    """Softmax of the rows of x2d into out (same shape and dtype); False when the programs
    cannot be resident (the caller runs another kernel)."""
    if config not in candidates_for(x2d):
        raise ValueError("softmax_held.launch: this tensor does not fit the config")
    return _launch(x2d, out, config)
