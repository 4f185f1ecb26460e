"""The held-row softmax with each chunk's (max, sum) reduced warp by warp, then once across.

The library's held kernel (ops/softmax/held.py) takes a chunk's max and its sum
of exps as two block reductions. At c8192 w4 each crosses the four warps through shared
memory, and the SASS of one step has 7 BAR.SYNC (Triton 3.6, sm_90): about four for each
reduction's scratch, one before the chunk is held. ncu at bf16 262K
(softmax_ncu/profile_held_c8192w4_bf16_262k.json) puts barrier stalls at 17 % of the
cycles, against 11 % at c4096 w2.

Here the chunk is a [num_warps, CHUNK / num_warps] tile, one row per warp: each warp takes
its max and its sum of exps with shuffles only, and the (max, sum) pairs of the warps meet
in one tuple reduction (2^(m_w - c) rescales each warp's sum). Same bytes and exchange as
the library kernel; per value the same max, FFMA, ex2 and add; per warp one more ex2.

Checked against the float64 reference (3 fresh inputs) before it is timed cold beside the
library's tuned softmax:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_warp_stats.py --out $OUT \\
        --dtypes bf16,fp32 --cols 262144

Written at the end of session 13 with no GPU time left; never run on a GPU. Compiled here
for sm_90 with Triton 3.6, bf16 262K: c8192 w4 128 registers (the library's 168: 4
programs per SM instead of 3) and 4 BAR.SYNC (7); c16384 w8 128 registers, 4 BAR.SYNC;
c4096 w2 128 registers (168) but 28 BAR.SYNC (the library's has 31: its 64 polled words
spread over two warps, so the poll's reductions cross warps too; at c8192 w4 the 32 words
sit whole in every warp).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# the library's held kernel: its loads, L2 prefetch, exchange and finish
from kernelab.ops.softmax.held import (
    LOG2E,
    MAX_SPINS,
    _finish,
    _last_row_scale,
    _load_chunk,
    _poll,
    _prefetch_to_l2,
    _publish,
    _scale_so_far,
)


@gluon.jit
def _combine_max_sum(m1, s1, m2, s2):
    """Two (max, sum of 2^(x - max)) pairs, maxima in log2 units, as one; (-inf, 0) is the
    pair of no values."""
    m = gl.maximum(m1, m2)
    m_safe = gl.where(m == float("-inf"), 0.0, m)
    return m, s1 * gl.exp2(m1 - m_safe) + s2 * gl.exp2(m2 - m_safe)


@gluon.jit
def _chunk_stats(x):
    """(c, sum of 2^(x log2 e - c)) of a [warps, values] tile, c its max in log2 units:
    each warp reduces its row with shuffles, the warps' pairs meet once."""
    m_w = gl.max(x, axis=1) * LOG2E
    m_safe = gl.where(m_w == float("-inf"), 0.0, m_w)
    s_w = gl.sum(gl.exp2(x * LOG2E - gl.expand_dims(m_safe, 1)), axis=1)
    return gl.reduce((m_w, s_w), 0, _combine_max_sum)


@gluon.jit(do_not_specialize=["n_rows", "n_groups"])
def _warp_stats_kernel(
    x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups,
    CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, L2_AHEAD: gl.constexpr,
    MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    group = gl.program_id(0) // n_chunks
    chunk = gl.program_id(0) % n_chunks
    VEC: gl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth  # 16 B a lane
    PER_WARP: gl.constexpr = CHUNK // num_warps
    # one row of the tile per warp: a warp's reductions never leave it
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
    warp_rows = gl.arange(0, num_warps, layout=gl.SliceLayout(1, layout))
    warp_cols = gl.arange(0, PER_WARP, layout=gl.SliceLayout(0, layout))
    cols = chunk * CHUNK + gl.expand_dims(warp_rows, 1) * PER_WARP + gl.expand_dims(warp_cols, 0)
    peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
    present = peers < n_chunks
    held = gl.allocate_shared_memory(
        x_ptr.dtype.element_ty,
        [2, num_warps, PER_WARP],
        gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
    )
    upcoming = _load_chunk(x_ptr, group, n_rows, x_row_stride, cols)
    iteration = 0
    healthy = True
    held_c = 0.0
    for row in range(group, n_rows, n_groups):
        if L2_AHEAD > 0:
            _prefetch_to_l2(
                x_ptr, row + (1 + L2_AHEAD) * n_groups, n_rows, x_row_stride, chunk * CHUNK,
                CHUNK, num_warps,
            )  # fmt: skip
        turn = iteration
        previous = words_ptr + (group * 4 + (turn + 3) % 4) * n_chunks
        first = _poll(previous, peers, present, turn)
        current = upcoming
        held.index(iteration % 2).store(current)
        upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, x_row_stride, cols)
        c, chunk_sum = _chunk_stats(current.to(gl.float32))
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
    scale = _last_row_scale(
        words_ptr, group, iteration, n_chunks, peers, present, held_c, healthy, MAX_SPINS
    )
    _finish(
        held.index((iteration + 1) % 2), held_c, scale, out_ptr,
        group + (iteration - 1) * n_groups, out_row_stride, cols, layout,
    )  # fmt: skip


def launch(x, config: dict):
    """Softmax of a contiguous 2-D x (rows of whole chunks) with this kernel; (out, plan)."""
    from softmax_gluon_rows import launch_split_row  # this folder's script

    n_chunks = x.shape[1] // config["CHUNK"]
    kwargs = dict(
        CHUNK=config["CHUNK"], BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()),
        L2_AHEAD=config.get("L2_AHEAD", 1), MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
    return launch_split_row(_warp_stats_kernel, x, config["CHUNK"], kwargs)


CONFIGS = (
    {"CHUNK": 8192, "num_warps": 4, "L2_AHEAD": 1},
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1},
    {"CHUNK": 16384, "num_warps": 8, "L2_AHEAD": 1},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        return f"warp-stats c{config['CHUNK']} w{config['num_warps']} l2a{config['L2_AHEAD']}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_warp_stats.json")


if __name__ == "__main__":
    raise SystemExit(main())
