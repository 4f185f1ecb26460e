"""The held softmax with registers only for the chunk in flight: every pass reads shared memory.

The library's held kernel (ops/softmax/held.py) holds the row it will finish as
input values in shared memory, but its step still widens the whole chunk to fp32 in
registers (64 values a thread at bf16 c4096 w2: 168 registers, 6 programs per SM). Session
12 measured what those registers cost: capped at 128 (8 programs per SM) the same kernel ran
bf16 262K 0.9 % faster (softmax_gluon_held_v4).

Here a step stores the arrived chunk to shared memory as it came (bf16 pairs, 32 registers at
64 values a thread) and reads it back in sub-blocks of one 16-byte vector a thread, twice:
the chunk max, then the sum of exps. The finish reads the previous row's buffer the same
way. What stays in registers across the step is the next row's chunk, already requested,
and a vector of running max or sum: more programs per SM, so more bytes in flight, for the
same chunk (and so the same polled words per row).

    step (row r = group + i * n_groups):
      poll r - n_groups's partials (early) -> store r's chunk (arrived) to buffer i % 2
      -> load r + n_groups's chunk -> max, then sum of exps, sub-block by sub-block from the
      buffer -> publish -> once r - n_groups's partials are all there: write it from buffer
      (i + 1) % 2, 2^(x log2 e - c) * 2^(c - C) / S

Bytes per program per row: CHUNK x itemsize read from HBM and written once; shared memory
written once and read three times (max, sum, finish). FLOPs per value: a max, an FFMA, an
ex2 and an add; at the finish an FFMA, an ex2 and a multiply (the exps are taken twice).

The exchange is the held kernel's (four turn slots, the packed word). Checked against the
float64 reference (3 fresh inputs) before it is timed cold beside the library's tuned
softmax:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_streamed.py --out $OUT

Run once in session 12 (softmax_gluon_streamed_v1, beside the held kernel's 3.860 at bf16
262K in the same call): correct everywhere and slower everywhere. bf16 262K: c4096 w2 3.747
(116 registers, 8 programs per SM), capped at 96 registers 3.673 (10 per SM), c2048 w1 at 96
3.651-3.690 (20 per SM), c8192 w4 3.726; 131K 3.43-3.74 against 3.996 for the library; fp32
2.7-3.99 against 4.07-4.15. More programs per SM (more bytes in flight) did not pay for the
shared-memory passes and the loop; what holds the held kernel back is not its registers.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from kernelab.ops.softmax.held import (
    LOG2E,
    MAX_SPINS,
    _last_row_scale,
    _load_chunk,
    _poll,
    _prefetch_to_l2,
    _publish,
    _scale_so_far,
)


@gluon.jit
def _sub_block(buffer, s, chunk_layout: gl.constexpr):
    """Sub-block s of a buffer of SUBS rows as [1, SUB] fp32 (each thread's own 16 bytes).
    s runs to n_subs, a run-time value, so the loop is not unrolled whole: unrolled,
    ptxas hoists the chunk's shared loads and holds it all in registers again (164 registers
    at bf16 c4096 w2, Triton 3.6 for sm_90)."""
    sub_layout: gl.constexpr = gl.SliceLayout(0, chunk_layout)
    return buffer.index(s).load(sub_layout).to(gl.float32)[None, :]


@gluon.jit
def _rows_of(buffer, SUBS: gl.constexpr, SUB: gl.constexpr):
    """The same bytes as SUBS rows that index() takes one at a time (a rank-1 layout)."""
    return buffer._reinterpret(buffer.dtype, [SUBS, SUB], gl.SwizzledSharedLayout(1, 1, 1, [0]))


@gluon.jit
def _chunk_max(buffer, n_subs, chunk_layout: gl.constexpr):
    """The buffer's max times log2 e (c), sub-block by sub-block: one vector of running maxima
    in registers, one reduction at the end."""
    running = _sub_block(buffer, 0, chunk_layout)
    for s in range(1, n_subs):
        running = gl.maximum(running, _sub_block(buffer, s, chunk_layout))
    return gl.max(gl.max(running, axis=1), axis=0) * LOG2E


@gluon.jit
def _chunk_sum(buffer, c_safe, n_subs, chunk_layout: gl.constexpr):
    """The buffer's sum of 2^(x log2 e - c), sub-block by sub-block."""
    running = gl.exp2(_sub_block(buffer, 0, chunk_layout) * LOG2E - c_safe)
    for s in range(1, n_subs):
        running += gl.exp2(_sub_block(buffer, s, chunk_layout) * LOG2E - c_safe)
    return gl.sum(gl.sum(running, axis=1), axis=0)


@gluon.jit
def _finish(buffer, c, scale, out_ptr, row, out_row_stride, first_col,
            n_subs, SUB: gl.constexpr, chunk_layout: gl.constexpr):  # fmt: skip
    """Write the buffer's row: 2^(x log2 e - c) * scale, one 16-byte vector a thread per
    sub-block (the only write of the row: CHUNK x itemsize bytes)."""
    c_safe = gl.where(c == float("-inf"), 0.0, c)
    base = out_ptr + row.to(gl.int64) * out_row_stride + first_col
    cols = gl.arange(0, SUB, layout=gl.SliceLayout(0, chunk_layout))[None, :]
    for s in range(n_subs):
        y = gl.exp2(_sub_block(buffer, s, chunk_layout) * LOG2E - c_safe) * scale
        gl.store(base + s * SUB + cols, y.to(out_ptr.dtype.element_ty))


@gluon.jit(do_not_specialize=["n_rows", "n_groups", "n_subs"])
def _streamed_kernel(
    x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups, n_subs,
    CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, L2_AHEAD: gl.constexpr,
    MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    group = gl.program_id(0) // n_chunks
    chunk = gl.program_id(0) % n_chunks
    # a sub-block is one 16-byte vector per thread; the chunk is SUBS of them
    VEC: gl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth
    SUB: gl.constexpr = VEC * 32 * num_warps
    SUBS: gl.constexpr = CHUNK // SUB
    gl.static_assert(SUBS * SUB == CHUNK, "CHUNK is whole sub-blocks")
    # n_subs == SUBS, passed at run time so that the sub-block loops stay loops
    chunk_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    first_col = chunk * CHUNK
    cols = (
        first_col
        + gl.arange(0, SUBS, layout=gl.SliceLayout(1, chunk_layout))[:, None] * SUB
        + gl.arange(0, SUB, layout=gl.SliceLayout(0, chunk_layout))[None, :]
    )
    peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
    present = peers < n_chunks
    # two buffers by step parity (the row being finished and this row); each thread reads
    # back only the values it wrote (one layout throughout), so no barrier
    held = gl.allocate_shared_memory(
        x_ptr.dtype.element_ty, [2, SUBS, SUB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    )
    upcoming = _load_chunk(x_ptr, group, n_rows, x_row_stride, cols)
    iteration = 0
    healthy = True
    held_c = 0.0
    for row in range(group, n_rows, n_groups):
        if L2_AHEAD > 0:
            _prefetch_to_l2(
                x_ptr, row + (1 + L2_AHEAD) * n_groups, n_rows, x_row_stride, first_col, CHUNK,
                num_warps,
            )  # fmt: skip
        # the previous row's turn is `iteration`, in slot (iteration - 1) % 4 (at iteration 0
        # this reads a slot nobody finishes from: the words go unused)
        previous = words_ptr + (group * 4 + (iteration + 3) % 4) * n_chunks
        first = _poll(previous, peers, present, iteration)
        held.index(iteration % 2).store(upcoming)
        buffer = _rows_of(held.index(iteration % 2), SUBS, SUB)
        upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, x_row_stride, cols)
        c = _chunk_max(buffer, n_subs, chunk_layout)
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        chunk_sum = _chunk_sum(buffer, c_safe, n_subs, chunk_layout)
        _publish(words_ptr, group, iteration, n_chunks, chunk, c, chunk_sum)
        if iteration > 0:
            scale, healthy = _scale_so_far(
                previous, first, peers, present, iteration, held_c, healthy, MAX_SPINS
            )
            _finish(
                _rows_of(held.index((iteration + 1) % 2), SUBS, SUB), held_c, scale, out_ptr,
                row - n_groups, out_row_stride, first_col, n_subs, SUB, chunk_layout,
            )  # fmt: skip
        held_c = c
        iteration += 1
    # the group's last row
    scale = _last_row_scale(
        words_ptr, group, iteration, n_chunks, peers, present, held_c, healthy, MAX_SPINS
    )
    _finish(
        _rows_of(held.index((iteration + 1) % 2), SUBS, SUB), held_c, scale, out_ptr,
        group + (iteration - 1) * n_groups, out_row_stride, first_col, n_subs, SUB, chunk_layout,
    )  # fmt: skip


def launch(x, config: dict):
    """Softmax of a contiguous 2-D x (rows of whole chunks) with this kernel; (out, plan)."""
    from softmax_gluon_rows import launch_split_row  # this folder's script

    chunk = config["CHUNK"]
    n_chunks = x.shape[1] // chunk
    kwargs = dict(
        CHUNK=chunk, BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()),
        L2_AHEAD=config.get("L2_AHEAD", 1), MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
    if "maxnreg" in config:
        kwargs["maxnreg"] = config["maxnreg"]
    n_subs = chunk // (16 // x.element_size() * 32 * config["num_warps"])
    return launch_split_row(_streamed_kernel, x, chunk, kwargs, (n_subs,))


CONFIGS = (
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1},
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 0},
    {"CHUNK": 4096, "num_warps": 4, "L2_AHEAD": 1},
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 1},
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 0},
    {"CHUNK": 8192, "num_warps": 4, "L2_AHEAD": 1},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        cap = f" r{config['maxnreg']}" if config.get("maxnreg") else ""
        knobs = f"c{config['CHUNK']} w{config['num_warps']} l2a{config.get('L2_AHEAD', 1)}"
        return f"streamed {knobs}{cap}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_streamed.json")


if __name__ == "__main__":
    raise SystemExit(main())
