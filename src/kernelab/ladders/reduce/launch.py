"""One reduction ladder step called from Python: validate the input, compile the step for its
dtype (cached), prepare every pass's launch and run them on the current stream.

`reduce_sum(step, x)` returns sum(x) as a 0-d fp32 tensor for fp32, bf16 or fp16 x of any
shape and layout (a non-contiguous x is made contiguous first: the kernels read one dense
run). Passes: the first reads x and writes one fp32 partial per block; steps 1-9 then
reduce the partials with the same step's `_partials` kernel until one value is left;
step 10 finishes in its first launch. Indices are 64-bit throughout, so n past 2^31 works.
Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import ctypes

from kernelab.errors import KernelabError
from kernelab.ladders.provider import StepBuilds
from kernelab.ladders.reduce.steps import DTYPE_DEFINES, MAX_GRID, Step, get_step
from kernelab.runtime.cuda.prepared import PlanCache, current_stream_handle, prepare

SOURCE_DIR = "ladders/reduce"  # relative to the kernelab package, where build.source_path looks

_builds = StepBuilds(SOURCE_DIR)


def build_step(step: Step, dtype: str = "fp32", *, arch: str | None = None):
    """Compile one step for inputs of `dtype`; cached on disk and for the process."""
    if dtype not in DTYPE_DEFINES:
        raise KernelabError(
            f"reduce: dtype must be one of {', '.join(DTYPE_DEFINES)}, got {dtype!r}"
        )
    return _builds.get(step, {"REDUCE_DTYPE": DTYPE_DEFINES[dtype]}, arch)


def _dtype_name(x) -> str:
    import torch

    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    if not isinstance(x, torch.Tensor):
        raise KernelabError(f"reduce: x must be a torch tensor, got {type(x).__name__}")
    if x.dtype not in names:
        raise KernelabError(f"reduce: x must be float32, bfloat16 or float16, got {x.dtype}")
    if not x.is_cuda:
        raise KernelabError("reduce: x must be a CUDA tensor")
    return names[x.dtype]


class _Scratch:
    """Partial sums (and step 10's ticket counter) for one stream, grown on demand. The
    counter starts at zero and every step-10 launch leaves it at zero."""

    def __init__(self):
        self.partials = None
        self.counter = None

    def ensure(self, floats: int, device):
        import torch

        if self.partials is None or self.partials.numel() < floats:
            self.partials = torch.empty(max(floats, MAX_GRID), dtype=torch.float32, device=device)
        if self.counter is None:
            self.counter = torch.zeros(1, dtype=torch.int32, device=device)
        return self.partials, self.counter


_scratch: dict[tuple[int, int], _Scratch] = {}
_plans = PlanCache()


def reduce_sum(step: Step | int | str, x):
    """sum(x) in fp32 (fp32 accumulation whatever x's dtype) with one ladder step, as a
    0-d float32 tensor on x's device. An empty x sums to 0."""
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    dtype = _dtype_name(x)
    x = x.reshape(-1)
    if not x.is_contiguous():
        x = x.contiguous()
    n = x.numel()
    out = torch.empty((), dtype=torch.float32, device=x.device)
    if n == 0:
        return out.zero_()
    device_index = x.device.index if x.device.index is not None else 0
    stream = current_stream_handle(device_index)
    passes = step.passes(n)
    scratch = _scratch.setdefault((device_index, stream), _Scratch())
    partial_floats = sum(launch.grid[0] for _, launch in passes)
    partials, counter = scratch.ensure(partial_floats, x.device)
    key = (step.number, dtype, device_index, n, x.data_ptr(), out.data_ptr(),
           partials.data_ptr(), counter.data_ptr())  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        plan = _plans.put(key, _prepare(step, dtype, passes, x, out, partials, counter))
    for launch in plan:
        launch(stream)
    return out


def _prepare(step: Step, dtype: str, passes, x, out, partials, counter) -> list:
    """The launches of every pass, reading x and the partials at fixed addresses: pass i
    writes its partials after those of the passes before it; the last pass writes out."""
    built = build_step(step, dtype)
    if step.one_pass:
        ((count, launch),) = passes
        params = [ctypes.c_uint64(x.data_ptr()), ctypes.c_int64(count),
                  ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(partials.data_ptr()),
                  ctypes.c_uint64(counter.data_ptr())]  # fmt: skip
        return [prepare(built.cubin, step.kernel, built.arch, launch, params)]
    plans = []
    source, offset = x.data_ptr(), 0
    for index, (count, launch) in enumerate(passes):
        last = index == len(passes) - 1
        target = out.data_ptr() if last else partials.data_ptr() + 4 * offset
        kernel = step.kernel if index == 0 else step.partials_kernel
        params = [ctypes.c_uint64(source), ctypes.c_int64(count), ctypes.c_uint64(target)]
        plans.append(prepare(built.cubin, kernel, built.arch, launch, params))
        source, offset = target, offset + launch.grid[0]
    return plans
