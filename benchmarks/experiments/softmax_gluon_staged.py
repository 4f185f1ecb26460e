"""The held-row softmax with its next rows in flight by cp.async, DEPTH rows deep.

The library's held kernel (ops/softmax/held.py) keeps the next row's chunk in
registers and asks the L2 for the row after it (prefetch.global.L2::evict_last). ncu at
bf16 262K (session 13, softmax_ncu/profile_held_c8192w4_bf16_262k.json) has its L2 fabric
93.5 % busy with DRAM at 81 %, where a copy runs its fabric at 91.6 % with DRAM at 86 %:
every prefetched line crosses the fabric twice (25.2 M fabric sectors with the prefetch,
17.0 M without), and without the prefetch the kernel is latency bound (-6.7 %).

Here the chunks travel by cp.async straight into shared memory, DEPTH rows ahead, with no
L2 prefetch: each line crosses the fabric once, and the bytes in flight hold no registers.
Session 12's STAGED (c74f337) was this at DEPTH 1 and lost (c8192 w4 3.813, c4096 w2
3.827 against 3.863 for the held kernel then); DEPTH 2-3 is untried.

Buffers: DEPTH + 2 of CHUNK values each, in turn by step: the row being finished (its input
values, read again at the finish), this row, and DEPTH rows in flight. At step i the copies
of steps i..i+DEPTH are outstanding; wait_group(DEPTH) completes step i's. After the finish
of step i - 1, its buffer takes step i + DEPTH + 1 (one commit group a step, empty past the
last row, so the group count stays exact).

Bytes per program per row: CHUNK x itemsize read once from HBM (evict_first), written once;
8 bytes published and n_chunks x 8 polled (L2). Shared memory: (DEPTH + 2) x CHUNK x
itemsize (c8192 w4 bf16: 64 KiB at DEPTH 2, 3 programs per SM). FLOPs per value as the held
kernel's: a max, an FFMA, an ex2 and an add; an FFMA, an ex2 and a multiply at the finish.

Checked against the float64 reference (3 fresh inputs) before it is timed cold beside the
library's tuned softmax:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_staged.py --out $OUT \\
        --dtypes bf16 --cols 131072,262144

Measured on the H200 in session 13 (experiments/softmax_gluon_staged_v1; copy 4.23):
correct everywhere, slower everywhere. bf16 262K: depth 2 at c8192 w4 (109 registers, 64 KiB,
3 programs per SM) 3.847 and at c4096 w2 3.845, depth 1 3.813, depth 3 3.485, against 3.897
for the library (the held kernel at c8192 w4 with its L2 prefetch); 131K at best 3.826
against 3.987; fp32 262K at best 3.937 against 4.146. One fabric crossing per line does not
buy back what the register load and the L2 prefetch give.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

# the library's held kernel's exchange and finish
from kernelab.ops.softmax.held import (
    LOG2E,
    MAX_SPINS,
    _finish,
    _last_row_scale,
    _poll,
    _publish,
    _scale_so_far,
)


@gluon.jit
def _copy_chunk(buffer, x_ptr, row, n_rows, x_row_stride, cols):
    """cp.async of one program's chunk of `row` into `buffer`, as one commit group (a row past
    the last copies nothing, but still commits its empty group)."""
    last = gl.minimum(row, n_rows - 1)
    inside = (cols >= 0) & (row < n_rows)
    async_copy.async_copy_global_to_shared(
        buffer, x_ptr + last.to(gl.int64) * x_row_stride + cols, mask=inside,
        eviction_policy="evict_first",
    )  # fmt: skip
    async_copy.commit_group()


@gluon.jit(do_not_specialize=["n_rows", "n_groups"])
def _staged_kernel(
    x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups,
    CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, DEPTH: gl.constexpr,
    MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    BUFFERS: gl.constexpr = DEPTH + 2
    group = gl.program_id(0) // n_chunks
    chunk = gl.program_id(0) % n_chunks
    VEC: gl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth  # 16 B a lane
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    cols = chunk * CHUNK + gl.arange(0, CHUNK, layout=layout)
    peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
    present = peers < n_chunks
    held = gl.allocate_shared_memory(
        x_ptr.dtype.element_ty, [BUFFERS, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0])
    )
    for ahead in gl.static_range(DEPTH + 1):
        _copy_chunk(held.index(ahead), x_ptr, group + ahead * n_groups, n_rows, x_row_stride, cols)
    iteration = 0
    healthy = True
    held_c = 0.0
    for row in range(group, n_rows, n_groups):
        previous = words_ptr + (group * 4 + (iteration + 3) % 4) * n_chunks
        first = _poll(previous, peers, present, iteration)
        async_copy.wait_group(DEPTH)  # this step's copy, the oldest in flight
        # each thread reads back what its own cp.async wrote (one layout throughout)
        x = held.index(iteration % BUFFERS).load(layout).to(gl.float32)
        c = gl.max(x, axis=0) * LOG2E
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        chunk_sum = gl.sum(gl.exp2(x * LOG2E - c_safe), axis=0)
        _publish(words_ptr, group, iteration, n_chunks, chunk, c, chunk_sum)
        if iteration > 0:
            scale, healthy = _scale_so_far(
                previous, first, peers, present, iteration, held_c, healthy, MAX_SPINS
            )
            _finish(
                held.index((iteration + BUFFERS - 1) % BUFFERS), held_c, scale, out_ptr,
                row - n_groups, out_row_stride, cols, layout,
            )  # fmt: skip
        # the buffer just finished (at the first step, the one never filled) takes the chunk
        # DEPTH + 1 rows ahead
        _copy_chunk(
            held.index((iteration + DEPTH + 1) % BUFFERS), x_ptr, row + (DEPTH + 1) * n_groups,
            n_rows, x_row_stride, cols,
        )  # fmt: skip
        held_c = c
        iteration += 1
    async_copy.wait_group(0)  # copies past the last row (empty groups) end too
    scale = _last_row_scale(
        words_ptr, group, iteration, n_chunks, peers, present, held_c, healthy, MAX_SPINS
    )
    _finish(
        held.index((iteration + BUFFERS - 1) % BUFFERS), held_c, scale, out_ptr,
        group + (iteration - 1) * n_groups, out_row_stride, cols, layout,
    )  # fmt: skip


def launch(x, config: dict):
    """Softmax of a contiguous 2-D x (rows of whole chunks) with this kernel; (out, plan)."""
    from softmax_gluon_rows import launch_split_row  # this folder's script

    n_chunks = x.shape[1] // config["CHUNK"]
    kwargs = dict(
        CHUNK=config["CHUNK"], BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()),
        DEPTH=config["DEPTH"], MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
    return launch_split_row(_staged_kernel, x, config["CHUNK"], kwargs)


CONFIGS = (
    {"CHUNK": 8192, "num_warps": 4, "DEPTH": 2},
    {"CHUNK": 8192, "num_warps": 4, "DEPTH": 1},
    {"CHUNK": 4096, "num_warps": 2, "DEPTH": 2},
    {"CHUNK": 4096, "num_warps": 2, "DEPTH": 3},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        return f"staged c{config['CHUNK']} w{config['num_warps']} depth{config['DEPTH']}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_staged.json")


if __name__ == "__main__":
    raise SystemExit(main())
