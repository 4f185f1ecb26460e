"""Long softmax rows without a persistent walk: one short-lived program per chunk, by ticket.

Every split-row kernel that reached 3.8+ TB/s at bf16 262K walks: a persistent group of
programs per row, each looping over the rows n_groups apart (softmax's deferred kernel,
softmax_held.py). Session 7's skeleton copy of that walk (its loads and stores with the
softmax taken out) copied at 4.05-4.09 TB/s at c1024 one warp and at 3.43-3.995 at c4096 two
warps, while torch's copy does 4.21-4.25; the same skeleton with one block per program
instead of a loop copied at 4.08-4.12. The question here: does a softmax whose programs
live for one chunk each, in launch order like a copy's blocks, beat the walk?

Each program takes a ticket (an atomic counter): ticket t is chunk t % n_chunks of row
t // n_chunks. It loads its chunk into registers, publishes the chunk's (max, sum of exps)
as one tagged 64-bit word, polls its row's words until all are there, and writes its
exps times 2^(c - C) / S. No deferral: the wait is on the program's own critical path, and
is hidden, if at all, by the other programs resident on the SM (up to 16 per SM at four
warps).

Why tickets: the hardware may start programs in any order. Ticket order is start order,
so when a program waits, every chunk of its row with a lower ticket has started; one with
a higher ticket starts as soon as any program ends. All resident programs could only wait
forever if one row's chunks could not be resident at once (n_chunks programs): never
here. (The same argument as softmax_shared_split.py, whose chunks sit in shared memory.)
A wait that outlasts MAX_SPINS polls writes NaN rather than hang.

Bytes: one read and one write of the tensor (CHUNK x itemsize each per program); 8 bytes
published and n_chunks x 8 polled per poll (L2); a workspace of 1 + rows x chunks words,
zeroed per call (a memset of 1 MiB at bf16 262K, c4096). FLOPs per value: a max, an FFMA,
an ex2 and an add for the partials, one multiply for the output (the exps stay in
registers through the wait).

Checked against the float64 reference (3 fresh inputs) before it is timed cold beside the
library's tuned softmax:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_ticketed.py --out $OUT

Written in session 12 after its last GPU call: compiled here for sm_90 with Triton 3.6 and
checked under the interpreter at one chunk per row (the interpreter runs programs one after
another, so peers never meet there). Run on the H200 in session 13
(experiments/softmax_ticketed_v1): correct everywhere, and slower everywhere. Best at bf16
262K 3.425 TB/s (c4096 w2) against 3.860 for the library beside it, 131K 3.530 against
4.004, 65K 3.518 against 3.996; fp32 65K-262K at best 3.86-3.90 against 4.07-4.17. The
program-id order and a 256 ns sleep between polls moved c4096 w4 by -0.5 to +3 %. The
exposed exchange costs more than the walk; the walk stays.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops import softmax as _softmax

LOG2E = tl.constexpr(1.4426950408889634)
VALID = tl.constexpr(1 << 31)  # the tag bit of softmax._packed's word of turn 1
MAX_SPINS = 1 << 22


@triton.jit
def _poll_row(row_words, present):
    """One volatile read of the row's packed words (8 bytes each) and how many lack the tag;
    padding past n_chunks reads as tagged."""
    got = tl.load(row_words, mask=present, other=VALID, volatile=True)
    return got, tl.sum(((got & VALID) == 0).to(tl.int32), axis=0)


@triton.jit
def _ticketed_kernel(
    x_ptr, out_ptr, words_ptr, x_row_stride, out_row_stride, n_chunks,
    CHUNK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr, MAX_SPINS: tl.constexpr,
    TICKETS: tl.constexpr = True, SLEEP_NS: tl.constexpr = 0,
):  # fmt: skip
    # words_ptr (int64): [0] the ticket counter, then one word per (row, chunk), zeroed.
    # TICKETS=False takes the program id instead: no atomic on one address per program, but
    # correct only if the GPU starts programs in id order (not promised; a wrong guess shows
    # as NaN rows after MAX_SPINS, not a hang): measured beside the tickets, never offered.
    if TICKETS:
        ticket = tl.atomic_add(words_ptr, 1, sem="relaxed", scope="gpu")
    else:
        ticket = tl.program_id(0)
    row = ticket // n_chunks
    chunk = ticket % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    # rows of whole chunks: no masks; CHUNK x itemsize read once
    x = tl.load(x_ptr + row.to(tl.int64) * x_row_stride + cols, eviction_policy="evict_first").to(
        tl.float32
    )
    c = tl.max(x, axis=0) * LOG2E  # the chunk max in log2 units
    c_safe = tl.where(c == -float("inf"), 0.0, c)  # a chunk of only -inf: exps of 0
    exps = tl.exp2(x * LOG2E - c_safe)
    # publish (c, sum) as the packed word of turn 1 (its tag bit, VALID, set): 8 bytes
    word = _softmax._packed(1, c, tl.sum(exps, axis=0))
    tl.atomic_xchg(words_ptr + 1 + ticket, word, sem="relaxed", scope="gpu")
    peers = tl.arange(0, BLOCK_CHUNKS)
    present = peers < n_chunks
    row_words = words_ptr + 1 + row * n_chunks + peers
    got, late = _poll_row(row_words, present)
    spins = 0
    while (late > 0) & (spins < MAX_SPINS):
        if SLEEP_NS > 0:
            # a pause between polls: fewer L2 reads while the peers' loads are in flight
            tl.inline_asm_elementwise(
                f"nanosleep.u32 {SLEEP_NS}; mov.b32 $0, 0;", "=r", [], dtype=tl.int32,
                is_pure=False, pack=1,
            )  # fmt: skip
        got, late = _poll_row(row_words, present)
        spins += 1
    maxes = tl.where(present, (got >> 32).to(tl.int32).to(tl.float32, bitcast=True), -float("inf"))
    sums = tl.where(present, (got & 0x7FFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    # combined in base 2 (a row of only -inf: NaN, the documented output); a wait that gave
    # up writes NaN
    row_c, row_sum = _softmax._combine_stats(maxes, sums, True)
    scale = _softmax._chunk_scale(c, row_c, row_sum, False)
    scale = tl.where(late == 0, scale, float("nan"))
    # CHUNK x itemsize written once
    tl.store(
        out_ptr + row.to(tl.int64) * out_row_stride + cols,
        (exps * scale).to(out_ptr.dtype.element_ty),
    )


def launch(x, config: dict, max_spins: int = MAX_SPINS):
    """Softmax of a 2-D x of whole chunks (unit column stride) with this kernel; (out, plan)."""
    n_rows, n_cols = x.shape
    chunk = config["CHUNK"]
    n_chunks = n_cols // chunk
    assert x.stride(1) == 1 and n_cols % chunk == 0
    out = torch.empty_like(x)
    # the ticket counter and one word per chunk, zeroed: no word carries the tag yet
    words = torch.zeros(1 + n_rows * n_chunks, device=x.device, dtype=torch.int64)
    args = (x, out, words, x.stride(0), out.stride(0), n_chunks)
    kwargs = dict(
        CHUNK=chunk, BLOCK_CHUNKS=max(2, triton.next_power_of_2(n_chunks)), MAX_SPINS=max_spins,
        TICKETS=config.get("TICKETS", True), SLEEP_NS=config.get("SLEEP_NS", 0),
        num_warps=config["num_warps"],
    )  # fmt: skip
    if config.get("maxnreg"):
        kwargs["maxnreg"] = config["maxnreg"]
    _ticketed_kernel[(n_rows * n_chunks,)](*args, **kwargs)
    plan = {"chunks_per_row": n_chunks}
    if x.device.type == "cuda":
        from kernelab.runtime.tuner import compiled_occupancy

        per_sm, info = compiled_occupancy(_ticketed_kernel, x.device, args, kwargs)
        plan.update(info, per_sm=per_sm)
    return out, plan


# Registers (Triton 3.6 for sm_90, bf16, compiled here): c4096 w4 48 (10 programs per SM,
# 80 KiB in flight), c4096 w2 80, c8192 w4 83, c8192 w8 48, c2048 w2 55.
CONFIGS = (
    {"CHUNK": 4096, "num_warps": 4},
    {"CHUNK": 4096, "num_warps": 4, "TICKETS": False},
    {"CHUNK": 4096, "num_warps": 4, "SLEEP_NS": 256},
    {"CHUNK": 4096, "num_warps": 2},
    {"CHUNK": 8192, "num_warps": 8},
    {"CHUNK": 2048, "num_warps": 2},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        cap = f" r{config['maxnreg']}" if config.get("maxnreg") else ""
        order = "" if config.get("TICKETS", True) else " by-pid"
        sleep = f" sleep{config['SLEEP_NS']}" if config.get("SLEEP_NS") else ""
        return f"ticketed c{config['CHUNK']} w{config['num_warps']}{order}{sleep}{cap}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_ticketed.json")


if __name__ == "__main__":
    raise SystemExit(main())
