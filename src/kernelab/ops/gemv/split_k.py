"""The decode GEMV's fast path: every row of x in one program, and K split across programs
when N / BLOCK_N programs cannot fill the GPU.

Why all rows in one program: the teaching kernel re-reads each W tile once per row of x (from
L2 after the first); here a program loads its [BLOCK_N, BLOCK_K] tile of W once and uses it
for all BLOCK_M rows, so DRAM and L2 see N*K*itemsize of W whatever M is (M <= 64).

Why split K: at N = 4096 and BLOCK_N = 64 there are 64 programs for 132 SMs, and a program
streams a 64 x 4096 slab alone: half the GPU idles and the memory system sees too few bytes in
flight. SPLIT programs per column block each reduce K / SPLIT of it into fp32 partials.

Why a second kernel, not tl.atomic_add: the partials go to an fp32 workspace [SPLIT, M, N]
and a small reduction kernel sums them in a fixed order and casts to the output dtype. The
answer is then bitwise the same on every run (float atomics add in arrival order), no
memset launch is needed to zero an accumulator, and the cast to bf16 needs a pass after the
last partial anyway. Its cost: SPLIT*M*N*4 bytes written and read again, against N*K*itemsize
of W: at M = 1, SPLIT = 4, K = 4096, bf16 that is 16/8192 = 0.2 % more traffic.

The product: BLOCK_M < 16 multiplies by broadcasting ([BLOCK_M, BLOCK_N, BLOCK_K] products
summed along K on the CUDA cores: at M <= 8 tensor cores would waste most of a 16-row MMA);
BLOCK_M >= 16 uses tl.dot (tensor cores, fp32 accumulation; fp32 inputs in ieee precision,
not tf32). The CPU interpreter multiplies bf16 dot operands as raw 16-bit integers (Triton
3.9), so there the operands are widened to fp32 first (IEEE): the interpreter checks the tiling
and masks of the dot path, and the GPU tests check its bf16 tensor-core form.

Where the broadcast product is summed (LATE_SUM): False sums each step's products along K
at once, so every step ends in a reduction across the lanes that share a row of W (shuffles,
and a layout change through shared memory for the 3-d product). True keeps the products
elementwise in an fp32 accumulator of the W tile's own layout and sums along K once, after
the loop: each thread then owns contiguous 16-byte runs of K and the loop body is loads and
FMAs only. At BLOCK_M = 1 the accumulator is the [BLOCK_N, BLOCK_K] tile itself and x is
loaded as a [1, BLOCK_K] row of that layout; above it is [BLOCK_M, BLOCK_N, BLOCK_K], which
costs BLOCK_M times the registers.

X_AS_TILE (LATE_SUM at BLOCK_M = 1 only): x's row is loaded as a [BLOCK_N, BLOCK_K] tile, its
pointers broadcast down the rows, so it arrives in the W tile's own layout: each thread loads
the x values of its own W vectors (the repeats are L1 hits) and the K loop has no shared-memory
exchange and no barrier. Off, x's [1, BLOCK_K] row is loaded once a program and brought into
that layout through shared memory, two barriers a step (the SASS for sm_90: test_gemv_compile).

STAGES: the K loop's software pipeline (tl.range num_stages). Above 1, Triton stages the x
and W tiles through shared memory with asynchronous copies, STAGES - 1 steps ahead, in every
form (a plain range pipelines only the loads that feed tl.dot: the broadcast forms' loads
stayed synchronous, Triton 3.9); 1: no pipeline. The launch's num_warps and num_stages come
with the tile (ops/gemv.plan); the launch's num_stages is STAGES.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gemv_split_kernel(x_ptr, w_ptr, out_ptr, M, N, K, k_per_split,
                      sxm, sxk, swn, swk, s_split, som,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      USE_DOT: tl.constexpr, IEEE: tl.constexpr, LATE_SUM: tl.constexpr,
                      STAGES: tl.constexpr, X_AS_TILE: tl.constexpr = False):  # fmt: skip
    pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split  # k_per_split is a multiple of BLOCK_K
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if LATE_SUM and BLOCK_M == 1:
        wide = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)  # the products, summed at the end
    elif LATE_SUM:
        wide = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in tl.range(k_start, k_end, BLOCK_K, num_stages=STAGES):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < k_end
        if X_AS_TILE:  # x's row (BLOCK_M = 1) as a [BLOCK_N, BLOCK_K] tile
            x = tl.load(x_ptr + rows[:, None] * sxm + cols[:, None] * 0 + ks[None, :] * sxk,
                        mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
        else:
            x = tl.load(x_ptr + rows[:, None] * sxm + ks[None, :] * sxk,
                        mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)  # BLOCK_M*BLOCK_K
        w = tl.load(w_ptr + cols[:, None] * swn + ks[None, :] * swk,
                    mask=(cols[:, None] < N) & k_ok[None, :], other=0.0)  # BLOCK_N*BLOCK_K
        if USE_DOT:
            if IEEE:  # fp32 inputs, or any input on the interpreter (its bf16 dot is wrong)
                x, w = x.to(tl.float32), w.to(tl.float32)
                acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
            else:
                acc = tl.dot(x, tl.trans(w), acc)
        elif LATE_SUM and BLOCK_M == 1:
            # x's [1, BLOCK_K] row broadcasts down the tile (X_AS_TILE: it is a tile already):
            # no reduction inside the loop
            wide += w.to(tl.float32) * x.to(tl.float32)
        elif LATE_SUM:
            wide += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
        else:
            # fp32 before the multiply: exact products, and right under the interpreter,
            # whose bf16 arithmetic works on raw 16-bit integers
            prod = x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
            acc += tl.sum(prod, axis=2)
    if LATE_SUM and BLOCK_M == 1:
        acc = tl.sum(wide, axis=1)[None, :]
    elif LATE_SUM:
        acc = tl.sum(wide, axis=2)
    out = out_ptr + split.to(tl.int64) * s_split + rows[:, None] * som + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def sum_splits_kernel(part_ptr, y_ptr, count, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # reads SPLIT * BLOCK * 4 bytes of fp32 partials, writes BLOCK * itemsize of y
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < count
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):  # a fixed order: the same bits on every run
        total += tl.load(part_ptr + s * count + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, total.to(y_ptr.dtype.element_ty), mask=mask)
