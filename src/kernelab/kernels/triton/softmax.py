"""Fused softmax over the last dimension of a 2-D tensor, for any row length.

softmax(x)[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), computed in fp32
whatever the input dtype (fp32, bf16, fp16); the output has the input's dtype and shape.
The ideal traffic is one read and one write of the tensor (2 * rows * cols * itemsize
bytes); every path below is judged by how close it stays to that at HBM bandwidth.

Three paths, chosen by row length:

1. Rows that fit in registers (cols <= SINGLE_PASS_MAX_COLS): one pass over tiles of
   ROWS x BLOCK_N. Autotuned per (padded row length, dtype) over _runtime.row_tile_candidates:
   first what Inductor generates for a persistent reduction (rows of <= 1,024 values packed
   1024 / BLOCK_N to a program of one warp, whose reductions are warp shuffles with no shared
   memory; longer rows one per program), then 8-32 values per thread and a persistent grid.
   Read once, write once.
2. Long rows on a GPU: a cooperative split-row kernel. Each row is cut into chunks of CHUNK
   columns, one per program; the programs of a row each keep their chunk in registers,
   publish the chunk's (max, sum of exp), wait until all their peers have, combine the
   partials and write. Still one read and one write, with all of a row's chunks in flight
   on different SMs, so even one long row streams at full bandwidth. Two knobs attack the
   wait, which the first version (2.5-2.6 TB/s at 262K columns on the H200, 61 % of copy)
   spent with no load in flight: PREFETCH issues the loads of the next row's chunk before
   waiting, and TAGGED replaces the arrival counter (a release, i.e. a MEMBAR that drains
   the program's earlier stores) by partials that carry their turn number in the same
   64-bit word, exchanged without any fence. It needs every program resident at once, so
   its grid is never larger than what the occupancy of the compiled kernel allows (and a
   bounded wait turns a deadlock into NaN output rather than a hang). CHUNK, warps,
   PREFETCH and TAGGED are autotuned per (padded row length, dtype).
3. Long rows anywhere else (the CPU interpreter, which runs programs one after another, or
   more chunks per row than can be resident): the same chunk statistics in two launches,
   stats then normalize; two reads and one write.

Numerics: the max is subtracted before exp, so huge inputs (1e4) are safe. A row whose
entries are all -inf has no defined softmax: this module returns NaN for every entry of such
a row (exp(-inf - -inf) = NaN), exactly as torch.softmax does. A row with some -inf entries
gives them probability 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.kernels.triton._runtime import (
    compiled_occupancy,
    interpreter_row_tile,
    interpreting,
    launch_row_tiles,
    resident_programs,
    row_tile_candidates,
    sm_count,
    tuned,
)

SINGLE_PASS_MAX_COLS = 16384
# The partials of a row are read as one block of this many slots (masked past n_chunks), so
# one binary serves every row length up to MAX_CHUNKS_BLOCK * CHUNK columns.
MAX_CHUNKS_BLOCK = 256
# The cooperative kernel before PREFETCH: 16 KiB chunks at 4 warps (measured on the H200).
LEGACY_CHUNK_BYTES = 16384
# A poll of the arrival counter is one L2 round trip (~1 us), so ~2^22 polls is seconds:
# long enough for any real wait, short enough that a broken residency assumption ends.
MAX_SPINS = 1 << 22
# The interpreter runs programs one after another, so a peer that has not arrived never
# will: give up at once (the row's chunks before the last come out NaN).
INTERPRETER_MAX_SPINS = 4
INTERPRETER_CHUNK = 32


@triton.jit
def _softmax_tile(
    x_ptr,
    out_ptr,
    tile,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # read ROWS * cols * itemsize, used once: evict_first keeps it from displacing anything;
    # padding is -inf so it adds exp(-inf) = 0 to the sum
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :],
        mask=mask,
        other=-float("inf"),
        eviction_policy="evict_first",
    ).to(tl.float32)
    row_max = tl.max(x, axis=1)
    numerator = tl.exp(x - row_max[:, None])
    denominator = tl.sum(numerator, axis=1)
    y = numerator * (1.0 / denominator)[:, None]
    # write ROWS * cols * itemsize; ~4 FLOPs and one exp per element
    tl.store(
        out_ptr + rows[:, None] * out_row_stride + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _softmax_rows_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    # persistent: programs stride over the tiles; otherwise one tile per program
    if PERSISTENT:
        first, last, step = tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)
    else:
        first, last, step = tl.program_id(0), tl.program_id(0) + 1, 1
    for tile in tl.range(first, last, step):
        _softmax_tile(
            x_ptr, out_ptr, tile, n_rows, n_cols, x_row_stride, out_row_stride, BLOCK_N, ROWS
        )


@triton.jit
def _chunk_stats(x):
    """(max, sum of exp(x - max)) of one fp32 chunk; (-inf, 0) for a chunk of only -inf."""
    chunk_max = tl.max(x, axis=0)
    shift = tl.where(chunk_max == -float("inf"), 0.0, chunk_max)
    return chunk_max, tl.sum(tl.exp(x - shift), axis=0)


@triton.jit
def _combine_stats(maxes, sums):
    """The row's max and sum of exp from its chunks' partials (padding: -inf, 0)."""
    row_max = tl.max(maxes, axis=0)
    # all -inf row: exp(-inf - -inf) = NaN here, and NaN is the documented output
    return row_max, tl.sum(sums * tl.exp(maxes - row_max), axis=0)


@triton.jit
def _softmax_chunk_stats_kernel(
    x_ptr, stats_ptr, n_cols, x_row_stride, n_chunks, CHUNK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    # read CHUNK * itemsize
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(
        tl.float32
    )
    chunk_max, chunk_sum = _chunk_stats(x)
    slot = stats_ptr + (row * n_chunks + chunk) * 2  # write 8 bytes
    tl.store(slot, chunk_max)
    tl.store(slot + 1, chunk_sum)


@triton.jit
def _softmax_chunk_normalize_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    peers = tl.arange(0, BLOCK_CHUNKS)
    peer_slots = stats_ptr + (row * n_chunks + peers) * 2  # read 8 * n_chunks bytes
    maxes = tl.load(peer_slots, mask=peers < n_chunks, other=-float("inf"))
    sums = tl.load(peer_slots + 1, mask=peers < n_chunks, other=0.0)
    row_max, row_sum = _combine_stats(maxes, sums)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # the second read of the row: CHUNK * itemsize, from L2 only if it is still there
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    y = tl.exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols):
    """One program's chunk of `row` in the input dtype; nothing is read past the last row."""
    cols_in_row = tl.where(row < n_rows, n_cols, 0)
    # read CHUNK * itemsize, used once
    return tl.load(
        x_ptr + tl.cast(row, tl.int64) * x_row_stride + cols,
        mask=cols < cols_in_row,
        other=-float("inf"),
        eviction_policy="evict_first",
    )


@triton.jit
def _exchange_counted(
    buffer, arrivals, chunk, n_chunks, turn, chunk_max, chunk_sum, BLOCK_CHUNKS, MAX_SPINS
):
    """Publish this chunk's partials, wait until all n_chunks peers have, combine them.

    Counter protocol: plain stores, a release add on the group's arrival counter, volatile
    polls until it reaches turn * n_chunks, one acquire, then the partials. Returns
    (row max, row sum of exp, whether every peer arrived before the spin budget ran out).
    The release is a MEMBAR: it waits until this program's earlier stores (the previous
    row's output) are visible, and maybe its outstanding loads.
    """
    tl.store(buffer + chunk * 2, chunk_max)
    tl.store(buffer + chunk * 2 + 1, chunk_sum)
    tl.debug_barrier()  # every thread's stores happen before the release below
    tl.atomic_add(arrivals, 1, sem="release", scope="gpu")
    target = turn * n_chunks
    # Poll with plain volatile loads (an L2 read each, no read-modify-write queued behind
    # the peers' arrivals, no L1 invalidation per poll), then acquire once.
    arrived = tl.load(arrivals, volatile=True)
    spins = 0
    while (arrived < target) & (spins < MAX_SPINS):
        arrived = tl.load(arrivals, volatile=True)
        spins += 1
    # This acquire reads the counter after every arrival the poll saw, so it synchronizes
    # with each peer's release: their partials are visible from here on.
    tl.atomic_add(arrivals, 0, sem="acquire", scope="gpu")
    peers = tl.arange(0, BLOCK_CHUNKS)
    # .cg: read the peers' partials from L2, never from a stale L1 line of 2 rows ago
    maxes = tl.load(
        buffer + peers * 2, mask=peers < n_chunks, other=-float("inf"), cache_modifier=".cg"
    )
    sums = tl.load(buffer + peers * 2 + 1, mask=peers < n_chunks, other=0.0, cache_modifier=".cg")
    row_max, row_sum = _combine_stats(maxes, sums)
    return row_max, row_sum, arrived >= target


@triton.jit
def _tagged(turn, value):
    """One 64-bit word: the turn in the high half, the fp32 bits of value in the low half."""
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (tl.cast(turn, tl.int64) << 32) | bits


@triton.jit
def _untagged(word):
    return (word & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _late_peers(max_words, sum_words, turn):
    """How many peers have not yet published this turn's partials."""
    stale = ((max_words >> 32) != turn) | ((sum_words >> 32) != turn)
    return tl.sum(stale.to(tl.int32), axis=0)


@triton.jit
def _exchange_tagged(buffer, chunk, n_chunks, turn, chunk_max, chunk_sum, BLOCK_CHUNKS, MAX_SPINS):
    """Publish this chunk's partials, wait until all n_chunks peers have, combine them.

    Tagged protocol (NCCL's "LL" idea): each partial travels with its turn number in one
    64-bit word, written by a relaxed atomic exchange, so a reader sees the old word or the
    whole new one and the word is its own flag. No counter, no fence: nothing waits for
    this program's earlier stores or loads to drain. Readers poll the peers' words (volatile
    loads from L2) until every tag equals `turn`. Same return as _exchange_counted.
    """
    tl.atomic_xchg(buffer + chunk * 2, _tagged(turn, chunk_max), sem="relaxed", scope="gpu")
    tl.atomic_xchg(buffer + chunk * 2 + 1, _tagged(turn, chunk_sum), sem="relaxed", scope="gpu")
    peers = tl.arange(0, BLOCK_CHUNKS)
    present = peers < n_chunks
    # absent peers read as words already tagged with this turn
    absent = (tl.cast(turn, tl.int64) << 32) | 0
    max_words = tl.load(buffer + peers * 2, mask=present, other=absent, volatile=True)
    sum_words = tl.load(buffer + peers * 2 + 1, mask=present, other=absent, volatile=True)
    late = _late_peers(max_words, sum_words, turn)
    spins = 0
    while (late > 0) & (spins < MAX_SPINS):
        max_words = tl.load(buffer + peers * 2, mask=present, other=absent, volatile=True)
        sum_words = tl.load(buffer + peers * 2 + 1, mask=present, other=absent, volatile=True)
        late = _late_peers(max_words, sum_words, turn)
        spins += 1
    maxes = tl.where(present, _untagged(max_words), -float("inf"))
    sums = tl.where(present, _untagged(sum_words), 0.0)
    row_max, row_sum = _combine_stats(maxes, sums)
    return row_max, row_sum, late == 0


@triton.jit(do_not_specialize=["n_groups"])
def _softmax_coop_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    arrivals_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    PREFETCH: tl.constexpr,
    TAGGED: tl.constexpr,
    MAX_SPINS: tl.constexpr,
):
    # Programs g*n_chunks .. g*n_chunks + n_chunks-1 form group g; together they own one row
    # at a time (rows g, g + n_groups, ...), program `chunk` holding columns of its chunk.
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    if PREFETCH:
        upcoming = _load_chunk(x_ptr, group, n_rows, n_cols, x_row_stride, cols)
    iteration = 0
    for row in tl.range(group, n_rows, n_groups):
        # the only read of the row: CHUNK * itemsize per program, kept in registers
        if PREFETCH:
            x = upcoming.to(tl.float32)
            # the next row's chunk (kept in the input dtype: half the registers for bf16)
            # is in flight while this program waits for its peers below
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols)
        else:
            x = _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols).to(tl.float32)
        chunk_max, chunk_sum = _chunk_stats(x)
        # Partials are double-buffered by iteration parity: a program can only be one row
        # ahead of its slowest peer, because it passed the barrier that peer also arrives at.
        # 8 or 16 bytes per chunk per row: nothing next to the row's CHUNK * itemsize.
        buffer = stats_ptr + ((group * 2 + iteration % 2) * n_chunks) * 2
        if TAGGED:
            row_max, row_sum, met = _exchange_tagged(
                buffer,
                chunk,
                n_chunks,
                iteration + 1,
                chunk_max,
                chunk_sum,
                BLOCK_CHUNKS,
                MAX_SPINS,
            )
        else:
            row_max, row_sum, met = _exchange_counted(
                buffer,
                arrivals_ptr + group,
                chunk,
                n_chunks,
                iteration + 1,
                chunk_max,
                chunk_sum,
                BLOCK_CHUNKS,
                MAX_SPINS,
            )
        y = tl.exp(x - row_max) * (1.0 / row_sum)
        y = tl.where(met, y, float("nan"))  # a wait that gave up poisons the row
        # the only write: CHUNK * itemsize per program
        tl.store(
            out_ptr + tl.cast(row, tl.int64) * out_row_stride + cols,
            y.to(out_ptr.dtype.element_ty),
            mask=mask,
        )
        iteration += 1


def cooperative_candidates(dtype) -> list[dict]:
    """Configurations of the cooperative kernel to try, the untuned default first.

    A program holds CHUNK values: 16 or 32 per thread at 4 or 8 warps (8-32 KiB of fp32,
    4-16 KiB of bf16), twice that with PREFETCH (the next row's chunk, in the input dtype).
    Smaller chunks mean more programs per SM to switch between while one waits, and more
    programs per exchange. TAGGED picks the fence-free exchange; the counter protocol stays
    as a candidate, and the last entry is the design the H200 measured first (counter, 16 KiB
    of input per program, 4 warps, no prefetch: 2.5-2.6 TB/s), so tuning can only improve.
    """
    legacy_chunk = LEGACY_CHUNK_BYTES // torch.empty((), dtype=dtype).element_size()
    return [
        {"CHUNK": 4096, "num_warps": 4, "PREFETCH": True, "TAGGED": True},
        {"CHUNK": 2048, "num_warps": 4, "PREFETCH": True, "TAGGED": True},
        {"CHUNK": 8192, "num_warps": 8, "PREFETCH": True, "TAGGED": True},
        {"CHUNK": 4096, "num_warps": 4, "PREFETCH": False, "TAGGED": True},
        {"CHUNK": legacy_chunk, "num_warps": 4, "PREFETCH": False, "TAGGED": False},
    ]


_tuned_rows: dict[tuple, dict] = {}
_tuned_cooperative: dict[tuple, dict] = {}


def _nbytes(x2d) -> int:
    return x2d.numel() * x2d.element_size()


def _launch_rows(x2d, out, config: dict | None) -> None:
    n_rows, n_cols = x2d.shape
    block_n = triton.next_power_of_2(n_cols)
    args = (x2d, out, n_rows, n_cols, x2d.stride(0), out.stride(0))
    kwargs = {"BLOCK_N": block_n}

    def run(c: dict) -> None:
        launch_row_tiles(_softmax_rows_kernel, args, kwargs, n_rows, c)

    if config is None:
        if interpreting():
            config = interpreter_row_tile(block_n)
        else:
            key = ("softmax.rows", block_n, x2d.dtype, x2d.device.index)
            candidates = row_tile_candidates(block_n)
            config = tuned(_tuned_rows, key, run, candidates, nbytes=_nbytes(x2d))
    run(config)


def _launch_two_pass(x2d, out, chunk: int) -> None:
    n_rows, n_cols = x2d.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    # workspace: (max, sum) per chunk, 8 bytes x rows x chunks, tiny next to the row itself
    stats = torch.empty((n_rows, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    warps = 1 if interpreting() else 4
    _softmax_chunk_stats_kernel[(n_rows, n_chunks)](
        x2d, stats, n_cols, x2d.stride(0), n_chunks, CHUNK=chunk, num_warps=warps
    )
    _softmax_chunk_normalize_kernel[(n_rows, n_chunks)](
        x2d,
        out,
        stats,
        n_cols,
        x2d.stride(0),
        out.stride(0),
        n_chunks,
        CHUNK=chunk,
        BLOCK_CHUNKS=triton.next_power_of_2(n_chunks),
        num_warps=warps,
    )


def _cooperative_setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
    """(launch kwargs, launch arguments but n_groups, chunks per row) of the cooperative kernel.

    The workspace is sized for the most groups that could ever be resident (32 programs per
    SM), so the same tensors serve the occupancy probe and the launch: n_groups is not
    specialized on, and the probe compiles the very binary the launch runs.
    """
    n_rows, n_cols = x2d.shape
    chunk = config["CHUNK"]
    n_chunks = triton.cdiv(n_cols, chunk)
    # num_stages=1: no software pipelining, so no load is ever hoisted above the barrier
    kwargs = {
        "CHUNK": chunk,
        "BLOCK_CHUNKS": max(MAX_CHUNKS_BLOCK, triton.next_power_of_2(n_chunks)),
        "PREFETCH": config["PREFETCH"],
        "TAGGED": config["TAGGED"],
        "MAX_SPINS": INTERPRETER_MAX_SPINS if interpreting() else MAX_SPINS,
        "num_warps": 1 if interpreting() else config["num_warps"],
        "num_stages": 1,
    }
    max_groups = max(1, min(n_rows, sm_count(x2d.device) * 32 // n_chunks))
    # workspace: 2 partials x 2 parities x chunks per group (fp32 values, or int64 tagged words
    # that start at tag 0, which no turn matches), and one arrival counter per group
    shape = (max_groups, 2, n_chunks, 2)
    if config["TAGGED"]:
        stats = torch.zeros(shape, device=x2d.device, dtype=torch.int64)
        arrivals = stats  # not used by the tagged exchange
    else:
        stats = torch.empty(shape, device=x2d.device, dtype=torch.float32)
        arrivals = torch.zeros(max_groups, device=x2d.device, dtype=torch.int32)
    args = (x2d, out, stats, arrivals, n_rows, n_cols, x2d.stride(0), out.stride(0), n_chunks)
    return kwargs, args, n_chunks


def cooperative_occupancy(x, config: dict) -> dict:
    """Registers, spills, shared bytes and programs per SM (formula and driver) of the
    cooperative kernel compiled for x and config; benchmarks record it, tests check it."""
    x2d = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty_like(x2d)
    kwargs, args, n_chunks = _cooperative_setup(x2d, out, config)
    probe = (*args, 2)
    per_sm, info = compiled_occupancy(_softmax_coop_kernel, x2d.device, probe, kwargs)
    return {**info, "per_sm": per_sm, "chunks_per_row": n_chunks}


def _run_cooperative(x2d, out, config: dict) -> bool:
    """Run the one-pass split-row kernel; False when its programs cannot all be resident."""
    if config.get("PREFETCH") and not config.get("TAGGED"):
        # On the H200 (2026-11-29) this pairing gave NaN rows for bf16 at 64x262144 and
        # 301x40000 with CHUNK 4096 (several programs per row), while every other pairing
        # passed: a prefetched next row racing the counter exchange. Refused until found.
        raise ValueError("PREFETCH with the counter exchange (TAGGED=False) is not allowed")
    kwargs, args, n_chunks = _cooperative_setup(x2d, out, config)
    resident = resident_programs(_softmax_coop_kernel, (*args, 2), kwargs)
    n_groups = min(x2d.shape[0], resident // n_chunks)
    if n_groups < 1:
        return False
    _softmax_coop_kernel[(n_groups * n_chunks,)](*args, n_groups, **kwargs)
    return True


def _launch_cooperative(x2d, out, config: dict | None) -> bool:
    if config is None:
        key = (
            "softmax.cooperative",
            triton.next_power_of_2(x2d.shape[1]),
            x2d.dtype,
            x2d.device.index,
        )

        def run(c: dict) -> None:
            if not _run_cooperative(x2d, out, c):
                _launch_two_pass(x2d, out, c["CHUNK"])

        candidates = cooperative_candidates(x2d.dtype)
        config = tuned(_tuned_cooperative, key, run, candidates, nbytes=_nbytes(x2d))
    return _run_cooperative(x2d, out, config)


def choose_path(n_cols: int, *, single_pass_max_cols: int | None = None) -> str:
    """ "single-pass", "cooperative" or "two-pass": which kernel softmax() will run."""
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    if n_cols <= limit:
        return "single-pass"
    return "two-pass" if interpreting() else "cooperative"


def config_for(x, *, single_pass_max_cols: int | None = None) -> dict:
    """The path and the tuned configuration softmax(x) uses (the default if not tuned yet)."""
    n_cols = x.shape[-1]
    path = choose_path(n_cols, single_pass_max_cols=single_pass_max_cols)
    if path == "single-pass":
        block_n = triton.next_power_of_2(n_cols)
        config = _tuned_rows.get(("softmax.rows", block_n, x.dtype, x.device.index))
        return {"path": path, **(config or row_tile_candidates(block_n)[0])}
    if path == "cooperative":
        key = ("softmax.cooperative", triton.next_power_of_2(n_cols), x.dtype, x.device.index)
        config = _tuned_cooperative.get(key)
        return {"path": path, **(config or cooperative_candidates(x.dtype)[0])}
    return {"path": path, "CHUNK": INTERPRETER_CHUNK if interpreting() else None}


def softmax(
    x,
    *,
    single_pass_max_cols: int | None = None,
    chunk_cols: int | None = None,
    long_rows: str | None = None,
    config: dict | None = None,
):
    """Softmax over the last dimension of x (2-D, any row stride); a new tensor, x untouched.

    single_pass_max_cols, chunk_cols and long_rows ("cooperative" | "two-pass") override the
    path choice; tests use them to drive the long-row paths at small sizes. config launches
    one candidate (from row_tile_candidates or cooperative_candidates) instead of the tuned
    one. A forced "cooperative" also runs under the interpreter, where it is only correct
    with one chunk per row (programs run one after another there, so peers never meet).
    """
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"softmax supports fp32, bf16 and fp16, not {x.dtype}")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    n_rows, n_cols = x2d.shape
    out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    if n_rows == 0 or n_cols == 0:
        return out
    path = choose_path(n_cols, single_pass_max_cols=single_pass_max_cols)
    if path == "single-pass":
        _launch_rows(x2d, out, config)
        return out
    path = long_rows or path
    if chunk_cols is not None:
        chunk = triton.next_power_of_2(chunk_cols)
        config = {**(config or cooperative_candidates(x.dtype)[0]), "CHUNK": chunk}
    if path == "cooperative" and _launch_cooperative(x2d, out, config):
        return out
    if config is not None:
        chunk = config["CHUNK"]
    else:
        chunk = INTERPRETER_CHUNK if interpreting() else cooperative_candidates(x.dtype)[0]["CHUNK"]
    _launch_two_pass(x2d, out, chunk)
    return out
