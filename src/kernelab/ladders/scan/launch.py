"""One scan ladder step called from Python: validate, compile (cached), bind the step's plan
(steps.plan) to this call's pointers and launch it on the current stream. Nothing here
touches CUDA at import time.

`scan(step, x, exclusive=False)` returns the prefix sums of a 1-D fp32 or int32 CUDA tensor
in a new tensor of x's dtype: fp32 adds in fp32, int32 wraps modulo 2^32 (the int64 prefix
sums cast to int32). A non-contiguous x is copied dense first; an empty x gives an empty
answer. Indices are 64-bit, so n past 2^31 works (up to 2^38). `items` builds a tunable
step (step 5) with that many elements a thread (steps.ITEM_CANDIDATES), for timing them.
"""

from __future__ import annotations

import ctypes

from kernelab.errors import KernelabError
from kernelab.ladders.provider import StepBuilds
from kernelab.ladders.scan.steps import ITEMSIZE, MAX_N, Step, get_step, plan
from kernelab.runtime.cuda.prepared import PlanCache, current_stream_handle, prepare

SOURCE_DIR = "ladders/scan"  # relative to the kernelab package

_builds = StepBuilds(SOURCE_DIR)


def build_step(step: Step, *, arch: str | None = None, items: int | None = None):
    """Compile one step (every kernel, both element types, in one cubin); cached."""
    return _builds.get(step, step.defines(items), arch)


def checked_input(x, exclusive, who: str = "scan"):
    """(x as a dense 1-D tensor, dtype name) or a one-line KernelabError, before any compile."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise KernelabError(f"{who}: expected a torch.Tensor, got {type(x).__name__}")
    names = {torch.float32: "fp32", torch.int32: "int32"}
    if x.dtype not in names:
        raise KernelabError(f"{who}: x must be float32 or int32, got {x.dtype}")
    if x.dim() != 1:
        raise KernelabError(f"{who}: x must be 1-D, got shape {tuple(x.shape)}")
    if not isinstance(exclusive, bool):
        raise KernelabError(f"{who}: exclusive must be True or False, got {exclusive!r}")
    if not x.is_cuda:
        raise KernelabError(f"{who}: x must be a CUDA tensor")
    if x.numel() >= MAX_N:
        raise KernelabError(f"{who}: at most 2^38 - 1 elements, got {x.numel()}")
    return (x if x.is_contiguous() else x.contiguous()), names[x.dtype]


class _Scratch:
    """Tile sums and step 4's counter + descriptors for one stream and dtype, grown on
    demand; the descriptors are zeroed before every step-4 launch."""

    def __init__(self):
        self.sums = None
        self.state = None

    def ensure(self, elements: int, words: int, torch_dtype, device):
        import torch

        if self.sums is None or self.sums.numel() < elements:
            self.sums = torch.empty(max(elements, 1), dtype=torch_dtype, device=device)
        if self.state is None or self.state.numel() < words:
            self.state = torch.zeros(max(words, 1), dtype=torch.int64, device=device)
        return self.sums, self.state


_scratch: dict[tuple, _Scratch] = {}
_plans = PlanCache()


def scan(step: Step | int | str, x, exclusive: bool = False, *, items: int | None = None):
    """Inclusive (or exclusive) prefix sums of x with one ladder step, x's dtype and length."""
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    step.tile_for(items)  # a bad `items` is one line before anything else
    x, dtype = checked_input(x, exclusive)
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    device_index = x.device.index if x.device.index is not None else 0
    stream = current_stream_handle(device_index)
    launches = plan(step, n, exclusive, items)
    scratch = _scratch.setdefault((device_index, stream, dtype), _Scratch())
    sums, state = scratch.ensure(launches.scratch_elements, launches.state_words, x.dtype,
                                 x.device)  # fmt: skip
    if launches.state_words:
        state[: launches.state_words].zero_()  # counter and descriptors start empty
    key = (step.number, items, dtype, exclusive, device_index, n, x.data_ptr(), out.data_ptr(),
           sums.data_ptr(), state.data_ptr())  # fmt: skip
    prepared = _plans.get(key)
    if prepared is None:
        pointers = {"x": x.data_ptr(), "out": out.data_ptr(), "scratch": sums.data_ptr(),
                    "state": state.data_ptr()}  # fmt: skip
        prepared = _plans.put(key, _prepare(step, dtype, launches, pointers, items))
    for launch in prepared:
        launch(stream)
    return out


def _prepare(step: Step, dtype: str, launches, pointers: dict, items: int | None = None) -> list:
    from kernelab.runtime.cuda.launch import Launch

    built = build_step(step, items=items)
    width = {"x": ITEMSIZE[dtype], "out": ITEMSIZE[dtype], "scratch": ITEMSIZE[dtype],
             "state": 8}  # fmt: skip
    prepared = []
    for call in launches.calls:
        params = []
        for arg in call.args:
            if arg[0] == "ptr":
                params.append(ctypes.c_uint64(pointers[arg[1]] + arg[2] * width[arg[1]]))
            elif arg[0] == "i64":
                params.append(ctypes.c_int64(arg[1]))
            else:
                params.append(ctypes.c_int32(arg[1]))
        config = Launch(grid=(call.grid, 1, 1), block=(256, 1, 1))
        kernel = step.kernel_for(dtype, call.kernel)
        prepared.append(prepare(built.cubin, kernel, built.arch, config, params))
    return prepared
