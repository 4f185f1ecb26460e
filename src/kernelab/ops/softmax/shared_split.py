"""Softmax of rows longer than one program's shared memory: chunks in shared memory, partials
exchanged through global memory (Gluon, Hopper TMA).

softmax_shared.py holds a whole row of up to 64 KiB in one program's shared memory. A longer
row (bf16 65K-262K values, fp32 32K-262K) is cut here into chunks of CHUNK_BYTES, one program
each, so a row is a group of n_chunks programs:

1. a program takes a ticket (an atomic counter): ticket t is chunk t % n_chunks of row
   t // n_chunks. Tickets follow the order programs actually start, so every program whose
   peers have not started yet has tickets after its own; they start as soon as a slot frees,
   which it always will while one row's chunks fit on the GPU at once (n_chunks <= 64, three
   programs per SM). No residency assumption about the grid, no persistent loop;
2. it brings its chunk into shared memory by TMA and reduces it there (max in log2 units c,
   sum of 2^(x log2 e - c)), as softmax_shared does for whole rows;
3. it publishes (c, sum) as one tagged 64-bit word in a zeroed workspace, polls its peers'
   words until all are there, combines them in base 2 (C, S), and writes its chunk as
   2^(x log2 e - c) * 2^(c - C) / S from shared memory. A wait that outlasts MAX_SPINS polls
   writes NaN rather than hang.

Bytes: one read and one write of the tensor; 8 bytes per chunk published and n_chunks x 8
polled per program. The workspace (rows x chunks + 1 words) is zeroed per call (a memset,
which measured no slower than a self-cleaning workspace: softmax_workspace_v1).
"""

from __future__ import annotations

import torch

from kernelab.ops.softmax import shared as shared
from kernelab.ops.softmax.exchange import _packed
from kernelab.ops.softmax.primitives import _chunk_scale, _combine_stats
from kernelab.runtime.tuner import interpreting

if shared.gluon is not None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
else:
    gluon = None

# Chunks per row at most: one row's programs must fit the GPU at once (three per SM).
MOST_CHUNKS = 64
# A poll is an L2 round trip (~1 us): 2^22 of them is seconds, then the row comes out NaN.
MAX_SPINS = 1 << 22
# Measured on the H200 in the tuner's first pass of triton_kernels_sweep_20261130-023048
# (one cold median each), TB/s: fp32 at 32K / 65K / 131K / 262K columns, then bf16 at 65K /
# 131K / 262K: c64k sub8 w8 3.99 / 3.98 / 3.95 / 3.81, 3.84 / 3.77 / 3.68; c32k sub8 w8
# 3.97 / 3.94 / 3.79 / 3.52, 3.81 / 3.73 / 3.45; c64k sub16 w4 4.05 / 4.05 / 4.04 / 3.98,
# 3.84 / 3.79 / 3.76. The sweep chose it for fp32 32K, 65K and 262K.
CONFIGS = (
    {"path": "shared-split", "CHUNK_BYTES": 64 << 10, "SUB": 8, "num_warps": 8},
    {"path": "shared-split", "CHUNK_BYTES": 32 << 10, "SUB": 8, "num_warps": 8},
    {"path": "shared-split", "CHUNK_BYTES": 64 << 10, "SUB": 16, "num_warps": 4},
)


if gluon is not None:
    LINE = shared.LINE
    VALID = gl.constexpr(1 << 31)  # the tag bit of exchange._packed's word of turn 1

    @gluon.jit
    def _softmax_shared_split_kernel(
        x_desc,
        out_ptr,
        out_row_stride,
        words_ptr,  # int64: [0] the ticket counter, then one word per (row, chunk)
        n_chunks,
        LINES: gl.constexpr,  # lines of LINE values in a chunk
        SUB: gl.constexpr,
        VEC: gl.constexpr,
        BLOCK_CHUNKS: gl.constexpr,
        MAX_SPINS: gl.constexpr,
        num_warps: gl.constexpr,
    ):
        ticket = gl.atomic_add(words_ptr, 1, sem="relaxed", scope="gpu")
        row = ticket // n_chunks
        chunk = ticket % n_chunks
        steps = gl.allocate_shared_memory(x_desc.dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
        shared._bring_into_shared(
            x_desc, (row * n_chunks + chunk).to(gl.int32) * LINES, steps, LINES, SUB
        )
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
        c = shared._max_log2(steps, LINES, SUB, layout)
        c_safe = gl.where(c == float("-inf"), 0.0, c)  # a chunk of only -inf: exps of 0
        chunk_sum = shared._exp_sum(steps, c_safe, LINES, SUB, layout)

        # publish (c, sum) as the deferred kernel's packed word of turn 1 (exchange._packed:
        # its tag bit, VALID, is set; a zeroed word has none): 8 bytes
        word = _packed(1, c, chunk_sum)
        gl.atomic_xchg(words_ptr + 1 + ticket, word, sem="relaxed", scope="gpu")

        # poll the row's n_chunks words (8 bytes each) until every one carries the tag (not
        # exchange._poll / _settle: their tl.arange has no layout, which Gluon requires)
        peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
        present = peers < n_chunks
        row_words = words_ptr + 1 + row * n_chunks + peers
        got = gl.load(row_words, mask=present, other=0, volatile=True)
        late = gl.sum((((got & VALID) == 0) & present).to(gl.int32), axis=0)
        spins = 0
        while (late > 0) & (spins < MAX_SPINS):
            got = gl.load(row_words, mask=present, other=0, volatile=True)
            late = gl.sum((((got & VALID) == 0) & present).to(gl.int32), axis=0)
            spins += 1
        maxes = (got >> 32).to(gl.int32).to(gl.float32, bitcast=True)
        maxes = gl.where(present, maxes, float("-inf"))
        sums = gl.where(present, (got & 0x7FFFFFFF).to(gl.int32).to(gl.float32, bitcast=True), 0.0)
        # combined in base 2 as the deferred kernel does (a row of only -inf: NaN, the
        # documented output; a chunk of only -inf: 0); a wait that gave up poisons with NaN
        row_c, row_sum = _combine_stats(maxes, sums, True)
        scale = _chunk_scale(c, row_c, row_sum, False)
        scale = gl.where(late == 0, scale, float("nan"))
        target = out_ptr + row * out_row_stride + chunk * (LINES * LINE)
        shared._write_scaled(steps, c_safe, scale, target, LINES, SUB, layout)


def chunk_values(config: dict, itemsize: int) -> int:
    return config["CHUNK_BYTES"] // itemsize


def offered(n_cols: int, itemsize: int) -> list[dict]:
    """The configurations of CONFIGS for contiguous rows of n_cols values of itemsize bytes:
    rows of whole chunks, 2 to MOST_CHUNKS of them, chunks of whole steps of lines."""
    configs = []
    for config in CONFIGS if itemsize in (2, 4) else ():
        chunk = chunk_values(config, itemsize)
        n_chunks, lines = n_cols // chunk, chunk // shared.LINE_VALUES
        if n_cols % chunk == 0 and 2 <= n_chunks <= MOST_CHUNKS and lines % config["SUB"] == 0:
            configs.append(dict(config))
    return configs


def candidates_for(x2d) -> list[dict]:
    """What the long-row tuner may time for this tensor: `offered` where the TMA can address
    it (contiguous, 16-byte aligned, compute capability >= 9); none elsewhere, and never
    under the interpreter."""
    if gluon is None or interpreting() or x2d.device.type != "cuda" or x2d.dim() != 2:
        return []
    if x2d.stride(1) != 1 or x2d.stride(0) != x2d.shape[1] or x2d.data_ptr() % 16:
        return []
    if x2d.numel() // shared.LINE_VALUES >= 1 << 31:
        return []  # TMA coordinates are 32-bit
    if x2d.element_size() not in (2, 4):
        return []
    index = x2d.device.index if x2d.device.index is not None else 0
    if not shared._has_tma(index) or not shared.works_here(index, x2d.dtype):
        return []
    return offered(x2d.shape[1], x2d.element_size())


def launch(x2d, out, config: dict) -> None:
    """Softmax of the rows of x2d into out (same shape and dtype, contiguous rows)."""
    if config not in candidates_for(x2d):
        raise ValueError("softmax_shared_split.launch: this tensor does not fit the config")
    n_rows, n_cols = x2d.shape
    itemsize = x2d.element_size()
    chunk = chunk_values(config, itemsize)
    n_chunks = n_cols // chunk
    lines = chunk // shared.LINE_VALUES
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * itemsize, rank=2)
    view = x2d.view(n_rows * n_cols // shared.LINE_VALUES, shared.LINE_VALUES)
    box = [config["SUB"], shared.LINE_VALUES]
    x_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), box, layout)
    # the ticket counter and one word per chunk, zeroed: no word carries the tag yet
    words = torch.zeros(1 + n_rows * n_chunks, device=x2d.device, dtype=torch.int64)
    _softmax_shared_split_kernel[(n_rows * n_chunks,)](
        x_desc, out, out.stride(0), words, n_chunks, LINES=lines, SUB=config["SUB"],
        VEC=16 // itemsize, BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()),
        MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
