"""One histogram ladder step called from Python: validate, compile (cached), launch on the
current stream. Nothing here touches CUDA at import time.

The answer is an int64 tensor of bins + 1 counts: counts[b] for b in [0, bins) and, in the
last slot, how many values fell outside [0, bins) (negative ids, ids >= bins, bytes >= bins).
Out-of-range input thus has a defined answer and is never dropped or written out of bounds;
callers that want torch.bincount's shape take counts[:bins] and may check counts[bins] == 0.
"""

from __future__ import annotations

import ctypes

from kernelab.errors import KernelabError
from kernelab.ladders.histogram.steps import MAX_N, Step, check_bins, get_step, resident_blocks
from kernelab.ladders.provider import StepBuilds
from kernelab.runtime.cuda.prepared import current_stream_handle, prepare

SOURCE_DIR = "ladders/histogram"  # relative to the kernelab package

_builds = StepBuilds(SOURCE_DIR)


def build_step(step: Step, *, arch: str | None = None, loads: int | None = None):
    """Compile one step (both value-type entries live in one cubin); cached."""
    return _builds.get(step, step.defines(loads), arch)


def resident(step: Step, built, dtype: str, device) -> int | None:
    """Blocks of this step's kernel the GPU holds at once (steps 4-5 size their grid by it),
    from its registers and shared memory; None for steps 1-3."""
    if not step.units:
        return None
    from kernelab.runtime.tuner import sm_count

    report = built.report(step.kernel_for(dtype))
    return resident_blocks(report.registers, report.shared_bytes, sm_count(device))


def checked_input(values, bins, who: str = "histogram"):
    """(values as a dense 1-D tensor, dtype name, bins) or a one-line KernelabError."""
    import torch

    if not isinstance(values, torch.Tensor):
        raise KernelabError(f"{who}: expected a torch.Tensor, got {type(values).__name__}")
    names = {torch.int32: "int32", torch.uint8: "uint8"}
    if values.dtype not in names:
        raise KernelabError(f"{who}: values must be int32 bin ids or uint8, got {values.dtype}")
    bins = check_bins(bins)
    if not values.is_cuda:
        raise KernelabError(f"{who}: values must be a CUDA tensor")
    if values.numel() >= MAX_N:
        raise KernelabError(f"{who}: at most 2^40 values, got {values.numel()}")
    return values.reshape(-1).contiguous(), names[values.dtype], bins


def histogram(step: Step | int | str, values, bins: int, *, loads: int | None = None):
    """Counts of each bin in [0, bins) plus the out-of-range count: int64 [bins + 1].

    values: int32 or uint8 CUDA tensor of any shape (flattened; a non-contiguous one is
    copied dense first); bins in 1..4096. `loads`: steps 4-5 built with that many 16-byte
    units in flight a thread (steps.LOAD_CANDIDATES), for timing them.
    """
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    step.defines(loads)  # a bad `loads` is one line before anything else
    values, dtype, bins = checked_input(values, bins)
    counts = torch.zeros(bins + 1, dtype=torch.int64, device=values.device)
    n = values.numel()
    if n == 0:
        return counts
    built = build_step(step, loads=loads)
    device_index = values.device.index if values.device.index is not None else 0
    launch = step.launch(n, dtype, resident(step, built, dtype, values.device))
    params = [
        ctypes.c_int64(n), ctypes.c_uint64(values.data_ptr()), ctypes.c_int32(bins),
        ctypes.c_uint64(counts.data_ptr()),
    ]  # fmt: skip
    plan = prepare(built.cubin, step.kernel_for(dtype), built.arch, launch, params)
    plan(current_stream_handle(device_index))
    return counts
