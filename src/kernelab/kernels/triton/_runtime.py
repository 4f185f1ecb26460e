"""What every Triton launcher here asks of the machine: interpreter or GPU, how many SMs.

Kept apart so the kernels stay one op per file. Nothing here imports torch or Triton at
module import time.
"""

from __future__ import annotations

import functools
import os

# Under the CPU interpreter a grid runs program after program, so a handful of programs is
# plenty and autotuning (timing each config) would only burn minutes.
INTERPRETER_SMS = 4


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


@functools.cache
def _sm_count(device_index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device) -> int:
    """Streaming multiprocessors of the tensor's device (a fixed small number on the CPU)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return _sm_count(device.index if device.index is not None else 0)


@functools.cache
def _sm_limits(device_index: int) -> dict:
    import torch

    props = torch.cuda.get_device_properties(device_index)
    return {
        "threads": props.max_threads_per_multi_processor,
        "registers": props.regs_per_multiprocessor,
        "shared_bytes": props.shared_memory_per_multiprocessor,
        "blocks": getattr(props, "max_blocks_per_multi_processor", 32) or 32,
    }


def programs_per_sm(device, *, num_warps: int, regs_per_thread: int, shared_bytes: int) -> int:
    """How many programs of a compiled kernel fit on one SM at once (the occupancy bound).

    Registers are allocated per warp in granules of 256; the SM also reserves 1 KiB of shared
    memory per resident block. The smallest of the four limits wins.
    """
    if device.type != "cuda":
        return 1
    limits = _sm_limits(device.index if device.index is not None else 0)
    threads = 32 * num_warps
    regs_per_warp = -(-max(regs_per_thread, 1) * 32 // 256) * 256
    by_threads = limits["threads"] // threads
    by_regs = limits["registers"] // (regs_per_warp * num_warps)
    by_shared = limits["shared_bytes"] // (shared_bytes + 1024)
    return max(0, min(by_threads, by_regs, by_shared, limits["blocks"]))


DTYPE_NAMES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8",
}


def dtype_name(torch_dtype) -> str:
    """kernelab's name for a torch dtype: torch.bfloat16 -> "bf16"."""
    return DTYPE_NAMES.get(str(torch_dtype).removeprefix("torch."), str(torch_dtype))


def compiled_occupancy(jit_kernel, device, args: tuple, kwargs: dict) -> tuple[int, dict]:
    """Compile `jit_kernel` for these arguments (no launch) and return (programs per SM, info).

    This is how a persistent grid is sized from occupancy: the register and shared-memory
    use of the actual binary, not a guess. info holds regs, spills and shared bytes.
    """
    compiled = jit_kernel.warmup(*args, grid=(1,), **kwargs)
    try:
        if hasattr(compiled, "_init_handles"):
            compiled._init_handles()
        regs = int(compiled.n_regs)
        spills = int(getattr(compiled, "n_spills", 0) or 0)
        shared = int(compiled.metadata.shared)
    except (AttributeError, TypeError):
        # A Triton without these fields: one program per SM is always resident if the
        # kernel launches at all, so that is the safe answer for a cooperative grid.
        return 1, {"regs": None, "spills": None, "shared_bytes": None}
    per_sm = programs_per_sm(
        device, num_warps=kwargs.get("num_warps", 4), regs_per_thread=regs, shared_bytes=shared
    )
    return per_sm, {"regs": regs, "spills": spills, "shared_bytes": shared}


_occupancy_cache: dict[tuple, int] = {}


def resident_programs(kernel, args: tuple, kwargs: dict) -> int:
    """How many programs of this kernel the whole GPU holds at once (SMs x per-SM occupancy).

    Read once per (kernel, dtypes, constexprs, launch options) from the binary compiled for
    these arguments, so the launch that follows reuses it. Under the interpreter: a few.
    """
    device = args[0].device
    if device.type != "cuda":
        return INTERPRETER_SMS
    dtypes = tuple(str(a.dtype) for a in args if hasattr(a, "dtype"))
    key = (id(kernel), device.index, dtypes, tuple(sorted(kwargs.items())))
    if key not in _occupancy_cache:
        _occupancy_cache[key], _ = compiled_occupancy(kernel, device, args, kwargs)
    return sm_count(device) * _occupancy_cache[key]


def persistent_grid(kernel, args: tuple, kwargs: dict, n_tiles: int) -> tuple[int]:
    """Grid of a persistent kernel: min(tiles, programs the GPU holds at once), at least 1."""
    return (max(1, min(n_tiles, resident_programs(kernel, args, kwargs))),)


def autotune_enabled() -> bool:
    """KERNELAB_TRITON_AUTOTUNE=0 takes the first candidate config instead of timing them."""
    return os.environ.get("KERNELAB_TRITON_AUTOTUNE", "1") != "0"


def fastest(run, candidates: list[dict]) -> dict:
    """The candidate config for which run(config) is fastest (median of a short do_bench).

    L2 is not flushed between calls: this only ranks configs against each other on the same
    input, it is not a measurement to report.
    """
    if len(candidates) == 1 or interpreting() or not autotune_enabled():
        return candidates[0]
    import triton

    best, best_ms = candidates[0], float("inf")
    for config in candidates:
        try:
            ms = triton.testing.do_bench(lambda config=config: run(config), warmup=5, rep=20)
        except triton.runtime.errors.OutOfResources:
            continue
        if ms < best_ms:
            best, best_ms = config, ms
    return best
