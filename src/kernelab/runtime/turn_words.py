"""The exchange words of the split-row softmax kernels, kept from one call to the next.

The deferred split-row kernels (softmax's cooperative kernel with DEFER, softmax_held) pass
each chunk's partials to its peers through tagged 64-bit words, and a word must never carry
the tag a turn waits for before that turn's value is in it. A fresh workspace is zeroed for
that: one fill kernel per call, which costs 1.75-2.25 us of GPU time in a sequence of calls
on the H200, 0.3-0.4 % of a bf16 softmax of 1-2 GiB (experiments/softmax_memset_cost_v1,
in alternating pairs).

Kept instead, the words stay right if every call continues the turn numbering where the
last call on them stopped. Turn t lives in slot (t - 1) % 4 with tag bit ((t + 3) // 4) % 2,
so a slot read for turn t holds t or t - 4 (a zeroed workspace reads as turns -3..0), and
that stays true across calls when each group starts at the turn its previous call ended on.
The kernel keeps that base itself, one int64 per group after the words: it reads it first,
and its chunk-0 program stores base + rows finished (mod 8: slot and tag repeat every eight
turns) after its last finish, when every peer of the group has already read the old base
(each peer's published words depend on it, and the last finish needed all of them).

Kept per (device, stream, kernel, workspace shape): launches on one stream run in order, so
no two use the same words at once. Configurations that share a workspace shape share its
words, which is right as long as they share the turn protocol (every deferred kernel here
does: four slots, one tag bit per turn) and index a group's words the same way (by group,
fixed by the shape). Never while a CUDA graph is being captured (the graph gets a zeroed
workspace of its own).

On by default: on the H200, in alternating pairs against the call with its fill, the kept words ran at 100.21-100.40 % at bf16 65K, 100.74-102.01 % at 131K and
100.26-100.57 % at 262K in three runs, every 95 % interval above 100
(experiments/softmax_memset_cost_v2_kept, v3, v4). KERNELAB_SOFTMAX_REUSE_WORDS=0 turns it
off (a fresh zeroed workspace per call).
"""

from __future__ import annotations

import os

REUSE = os.environ.get("KERNELAB_SOFTMAX_REUSE_WORDS", "1") != "0"
# Workspaces kept at once (each a few hundred KiB at most); the oldest goes first.
MOST_KEPT = 32
# Turns are counted modulo this: slot and tag bit repeat every eight turns.
TURN_PERIOD = 8

_kept: dict[tuple, tuple] = {}


def continues(device) -> bool:
    """Whether a launch on this device now gets kept words (REUSE, and no CUDA graph being
    captured): a launcher that sizes its grid from the compiled kernel asks this first, so
    that it probes the binary it will launch (CONTINUE on or off)."""
    import torch

    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    return REUSE and not capturing


def exchange_words(device, kernel: str, shape: tuple[int, ...], n_groups: int):
    """(words, bases, continued): int64 words of `shape`, zeroed the first time, and one
    int64 turn base per group (0 the first time) that the kernel advances; `continued` says
    whether the kernel must read and advance the bases (REUSE and not capturing a graph).
    Without reuse both come zeroed from one allocation, so one fill per call as before."""
    import torch

    n_words = 1
    for size in shape:
        n_words *= size
    if not continues(device):
        fresh = torch.zeros(n_words + n_groups, device=device, dtype=torch.int64)
        return fresh[:n_words].view(shape), fresh[n_words:], False
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    key = (device.type, device.index, stream, kernel, tuple(shape), n_groups)
    if key not in _kept:
        if len(_kept) >= MOST_KEPT:
            _kept.pop(next(iter(_kept)))
        _kept[key] = torch.zeros(n_words + n_groups, device=device, dtype=torch.int64)
    kept = _kept[key]
    # a launch plan may hold and pass these again: the kernel continues the turns itself
    from kernelab.runtime.launch_plans import keep

    keep(kept)
    return kept[:n_words].view(shape), kept[n_words:], True


def forget() -> None:
    """Drop every kept workspace (the next call on each zeroes a new one) and the launch
    plans that hold them."""
    from kernelab.runtime.launch_plans import forget_all

    _kept.clear()
    forget_all()
