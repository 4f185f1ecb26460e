"""What every Triton launcher here asks of the machine, and how the row kernels are tuned.

Kept apart so the kernels stay one op per file: interpreter or GPU, SMs and occupancy, the
launch configurations of a kernel that keeps whole rows in registers (softmax and the norms
share them) and the small autotuner that picks among candidate configurations. Nothing here
imports torch or Triton at module import time.
"""

from __future__ import annotations

import functools
import math
import os

from kernelab.errors import KernelabError

# Under the CPU interpreter a grid runs program after program, so a handful of programs is
# plenty and autotuning (timing each config) would only burn minutes.
INTERPRETER_SMS = 4
# sm_90's opt-in shared memory per block, 227 KiB: the limit Triton's OutOfResources names
# on the H200 ("Hardware limit: 232448")
SM90_SHARED_BYTES_PER_PROGRAM = 232_448

# Volta and later split an SM into 4 sub-partitions, each with its own quarter of the
# register file; a warp takes all its registers from one of them.
SM_SUBPARTITIONS = 4

# A tile of whole rows holds at least this many elements: one warp then keeps 32 values per
# thread in registers, four 16-byte fp32 loads (two for bf16) in flight per thread.
MIN_TILE_ELEMENTS = 1024

# Inputs smaller than this finish in tens of microseconds, where launch overhead and noise
# would decide the ranking: they take the first (heuristic) candidate and are not cached.
TUNE_MIN_BYTES = 64 << 20


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
        "shared_bytes_per_program": getattr(props, "shared_memory_per_block_optin", 0)
        or SM90_SHARED_BYTES_PER_PROGRAM,
    }


def shared_bytes_per_program(device) -> int:
    """The most shared memory one program may ask for on the tensor's device (opt-in limit);
    the H100/H200 figure on the CPU, where nothing launches."""
    if device.type != "cuda":
        return SM90_SHARED_BYTES_PER_PROGRAM
    return _sm_limits(device.index if device.index is not None else 0)["shared_bytes_per_program"]


def occupancy(limits: dict, *, num_warps: int, regs_per_thread: int, shared_bytes: int) -> int:
    """Programs of num_warps warps that fit on one SM with these limits (the occupancy bound).

    Registers go per warp in granules of 256, and each warp draws them from one of the four
    sub-partitions' quarter of the register file, so the warp count is counted per quarter:
    at 192 registers a thread, 65,536 / 6,144 says 10 warps but each quarter holds only 2,
    8 in all. The SM also reserves 1 KiB of shared memory per resident block. The smallest
    limit wins; a cooperative grid relies on this never overestimating.
    """
    regs_per_warp = -(-max(regs_per_thread, 1) * 32 // 256) * 256
    warps_by_regs = SM_SUBPARTITIONS * (limits["registers"] // SM_SUBPARTITIONS // regs_per_warp)
    by_threads = limits["threads"] // (32 * num_warps)
    by_regs = warps_by_regs // num_warps
    by_shared = limits["shared_bytes"] // (shared_bytes + 1024)
    return max(0, min(by_threads, by_regs, by_shared, limits["blocks"]))


def programs_per_sm(device, *, num_warps: int, regs_per_thread: int, shared_bytes: int) -> int:
    """occupancy() with the limits of the tensor's device; 1 on the CPU."""
    if device.type != "cuda":
        return 1
    limits = _sm_limits(device.index if device.index is not None else 0)
    return occupancy(
        limits, num_warps=num_warps, regs_per_thread=regs_per_thread, shared_bytes=shared_bytes
    )


# What the interpreter pretends the L2 holds (only the L2 softmax's grid cap reads it).
INTERPRETER_L2_BYTES = 1 << 20


@functools.cache
def _l2_bytes(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).L2_cache_size)


def l2_cache_bytes(device) -> int:
    """Bytes of L2 on the tensor's device (a fixed small number on the CPU)."""
    if device.type != "cuda":
        return INTERPRETER_L2_BYTES
    return _l2_bytes(device.index if device.index is not None else 0)


DTYPE_NAMES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8",
}


def dtype_name(torch_dtype) -> str:
    """kernelab's name for a torch dtype: torch.bfloat16 -> "bf16"."""
    return DTYPE_NAMES.get(str(torch_dtype).removeprefix("torch."), str(torch_dtype))


def driver_occupancy(compiled, num_warps: int) -> int | None:
    """Programs per SM as the CUDA driver computes it for a loaded Triton binary, or None.

    cuOccupancyMaxActiveBlocksPerMultiprocessor knows the hardware's allocation rules
    exactly; None where cuda.bindings or the handle is missing (then occupancy() decides).
    """
    try:
        from cuda.bindings import driver

        err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            driver.CUfunction(int(compiled.function)),
            32 * num_warps,
            int(compiled.metadata.shared),
        )
    except Exception:  # no cuda.bindings, no handle, a binding of another shape
        return None
    return int(blocks) if err == driver.CUresult.CUDA_SUCCESS else None


def compiled_occupancy(jit_kernel, device, args: tuple, kwargs: dict) -> tuple[int, dict]:
    """Compile `jit_kernel` for these arguments (no launch) and return (programs per SM, info).

    This is how a persistent grid is sized from occupancy: the register and shared-memory
    use of the actual binary, not a guess. The smaller of occupancy() and the driver's own
    answer wins, so a cooperative grid never counts on a program that cannot be resident.
    info holds regs, spills, shared bytes and both estimates.
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
    num_warps = kwargs.get("num_warps", 4)
    by_formula = programs_per_sm(
        device, num_warps=num_warps, regs_per_thread=regs, shared_bytes=shared
    )
    by_driver = driver_occupancy(compiled, num_warps)
    per_sm = by_formula if by_driver is None else min(by_formula, by_driver)
    info = {
        "regs": regs,
        "spills": spills,
        "shared_bytes": shared,
        "per_sm_formula": by_formula,
        "per_sm_driver": by_driver,
    }
    return per_sm, info


_occupancy_cache: dict[tuple, int] = {}


def _compile_key(value):
    """What of a launch keyword decides the binary: a tensor's dtype and 16-byte alignment
    (Triton specializes pointers on it), any other value itself."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    return value


def resident_programs(kernel, args: tuple, kwargs: dict) -> int:
    """How many programs of this kernel the whole GPU holds at once (SMs x per-SM occupancy).

    Read once per (kernel, dtypes, constexprs, launch options) from the binary compiled for
    these arguments, so the launch that follows reuses it. Under the interpreter: a few.
    """
    device = args[0].device
    if device.type != "cuda":
        return INTERPRETER_SMS
    dtypes = tuple(str(a.dtype) for a in args if hasattr(a, "dtype"))
    # Triton compiles a separate binary (maybe other registers) for integers that are 1 or
    # multiples of 16, so those properties are part of the key.
    ints = tuple((a == 1, a % 16 == 0) for a in args if isinstance(a, int))
    # a tensor passed by keyword (a workspace) matters by its dtype and 16-byte alignment
    options = tuple(sorted((name, _compile_key(value)) for name, value in kwargs.items()))
    key = (id(kernel), device.index, dtypes, ints, options)
    if key not in _occupancy_cache:
        _occupancy_cache[key], _ = compiled_occupancy(kernel, device, args, kwargs)
    return sm_count(device) * _occupancy_cache[key]


def persistent_grid(kernel, args: tuple, kwargs: dict, n_tiles: int) -> tuple[int]:
    """Grid of a persistent kernel: min(tiles, programs the GPU holds at once), at least 1."""
    return (max(1, min(n_tiles, resident_programs(kernel, args, kwargs))),)


# --- kernels that keep whole rows in registers (softmax, layernorm, rmsnorm) ---------------


def _row_tile(
    rows: int, warps: int, *, persistent: bool = False, stages: int = 1, pipeline: int = 1
) -> dict:
    config = {"ROWS": rows, "num_warps": warps, "num_stages": stages, "PERSISTENT": persistent}
    if pipeline > 1:
        config.update(PIPELINE=pipeline, num_stages=pipeline)
    return config


# Rows at least this long also get the pipelined persistent candidates (the short rows'
# misses of the 4.0 TB/s target were at 2,048-16,384 columns).
PIPELINED_MIN_COLS = 2048
# Room kept beside the staged tiles for the reductions' scratch and barriers (the 16K fp32
# LayerNorm asked for 64 bytes more than its staged tiles).
PIPELINE_SHARED_SLACK_BYTES = 4096


def row_tile_candidates(
    block_n: int,
    *,
    loaded_bytes_per_column: int = 4,
    shared_bytes: int = SM90_SHARED_BYTES_PER_PROGRAM,
) -> list[dict]:
    """Launch configurations for a kernel holding ROWS rows of BLOCK_N values in registers.

    Each is a dict of the kernel's ROWS and PERSISTENT constexprs and its num_warps and
    num_stages. The first is the guess used without tuning, what Inductor picks for a
    persistent reduction on CUDA: rows of up to 1,024 values go 1024 / BLOCK_N to a program
    of ONE warp (its reductions are warp shuffles, no shared memory, no block barrier), longer
    rows one per program with 16 values per thread (32 at 16K). Then the neighbours: 8, 16 or
    32 values per thread, one or two tiles' worth of rows (for the norms, fewer weight reads
    per row), and last the persistent grid (SMs x occupancy programs looping over tiles).
    Every non-persistent config launches one program per tile and lets the hardware overlap
    a finishing program's stores with the next program's loads.

    The pipelined candidates keep PIPELINE - 1 tiles of every array the loop loads in shared
    memory: (PIPELINE - 1) x BLOCK_N x loaded_bytes_per_column bytes (the row's itemsize for
    the softmax; x, weight and bias for the norms), and a depth that does not fit in
    `shared_bytes` is not offered (LayerNorm at 16K fp32 with 3 stages asked for 384 KiB).
    """
    base_rows = max(1, MIN_TILE_ELEMENTS // block_n)
    per_thread = 32 if block_n <= MIN_TILE_ELEMENTS or block_n >= 16384 else 16
    candidates = [_row_tile(base_rows, max(1, min(16, base_rows * block_n // (32 * per_thread))))]
    for rows in (base_rows, 2 * base_rows) if block_n <= 4096 else (base_rows,):
        for per_thread in (32, 16, 8):
            warps = rows * block_n // (32 * per_thread)
            if 1 <= warps <= 32 and _row_tile(rows, warps) not in candidates:
                candidates.append(_row_tile(rows, warps))
    # the earlier design, kept as a candidate: 8K values per tile, 32 per thread, loop (its
    # num_stages=2 never pipelined the loop: no cp.async in its SASS)
    rows = max(1, 8192 // block_n)
    warps = max(1, min(16, rows * block_n // (32 * 32)))
    candidates.append(_row_tile(rows, warps, persistent=True, stages=2))
    if block_n >= PIPELINED_MIN_COLS:
        # The Triton tutorial's fused softmax (the anchor's 4.12-4.15 TB/s fp32 at 4K-16K
        # columns): one row per iteration of a persistent loop whose next rows' loads are
        # pipelined through shared memory, 2 or 3 stages. The tuner has timed them in every
        # sweep and never chose one (H200, 2K-16K columns: 3.80-3.90
        # fp32 and 3.64-3.86 bf16 against 3.97-4.16 for the best plain tile, first pass of
        # triton_kernels_sweep_20261130-004334.json).
        warps = 8 if block_n <= 4096 else 16
        for pipeline in (2, 3):
            staged = (pipeline - 1) * block_n * loaded_bytes_per_column
            if staged + PIPELINE_SHARED_SLACK_BYTES <= shared_bytes:
                candidates.append(_row_tile(1, warps, persistent=True, pipeline=pipeline))
    return candidates


def interpreter_row_tile(block_n: int) -> dict:
    """A small persistent tile for the CPU interpreter: the loop over tiles gets exercised."""
    return _row_tile(max(1, min(4, 64 // block_n)), 1, persistent=True)


def launch_row_tiles(kernel, args: tuple, kwargs: dict, n_rows: int, config: dict) -> None:
    """Launch a row-tile kernel: one program per tile, or a persistent grid looping over them."""
    import triton

    kwargs = {**kwargs, **config}
    n_tiles = triton.cdiv(n_rows, config["ROWS"])
    if config["PERSISTENT"]:
        grid = persistent_grid(kernel, args, kwargs, n_tiles)
    else:
        grid = (n_tiles,)
    kernel[grid](*args, **kwargs)


# --- autotuning ----------------------------------------------------------------------------


def autotune_enabled() -> bool:
    """KERNELAB_TRITON_AUTOTUNE=0 takes the first candidate config instead of timing them."""
    return os.environ.get("KERNELAB_TRITON_AUTOTUNE", "1") != "0"


# Candidates whose first-pass median is within this fraction of the best go on to a final
# round in alternating pairs. One short median per config, taken seconds apart while a
# power-capped card's clocks drift, misranks configs a few percent apart: on the H200 the
# softmax tuner took a 3.92 TB/s config at 32K fp32 columns over a single pass that measured
# 3.97-4.02 in every experiment (triton_kernels_sweep_20261129-222625.json).
FINAL_ROUND_MARGIN = 0.04
FINAL_ROUND_SIZE = 3
FINAL_ROUND_PAIRS = 40
# A challenger takes the final round only if it is this many percent faster than the
# champion, and the untuned default (candidates[0], a measured winner where there is one)
# is the champion whenever it reaches the final. A match within the spread of repeated runs
# is a tie, and a tie keeps what dedicated experiments chose: at 262K fp32 columns the tuner
# swapped the measured winner (3.97-3.99 TB/s in softmax_long_rows_v16-v20) for its sibling
# without the L2 prefetch (3.92-3.94 there) on a match of 100.02 % (sweep 20261130-011101).
# The same config measured 0.5-1.5 % apart between those runs.
FINAL_ROUND_EDGE_PCT = 0.5


def first_pass_ms(fn) -> float:
    """One candidate's cold median (ms) for the tuner's first pass: the benchmarks' own timer
    (kernelab.harness.timing, L2 flushed before each call), briefly. triton.testing.do_bench
    ranked the softmax configs differently from the timer the results
    are reported with: at 32K fp32 columns it gave 0.582 ms for the single pass against 0.551
    for the cooperative kernel (H200, triton_kernels_sweep_20261129-224224.json), where our
    cold timer measured 0.534-0.541 ms for the single pass (softmax_long_rows_v8..v11) and
    0.552 for the cooperative kernel (that sweep); a tuner must rank by what is reported."""
    return _brief_cold_timing(fn).median_ms


def _brief_cold_timing(fn):
    """The tuners' timing of one candidate: kernelab's cold timer, briefly. Its launches are
    unrecorded: a call that tunes records only the launches it makes with its choice."""
    from kernelab.harness.timing import benchmark

    with unrecorded():
        return benchmark(fn, mode="cold", max_time_s=0.2, warmup_ms=5.0)


def unrecorded():
    """launch_plans.unrecorded(), imported when first asked for (this module imports no
    Triton or torch at import time)."""
    from kernelab.runtime.launch_plans import unrecorded

    return unrecorded()


def autotuner_bench(kernel_call, quantiles=None, **_ignored):
    """triton.autotune's `do_bench`: first_pass_ms's cold timer, so Triton's autotuners rank
    configs by device time as the softmax tuner does. Triton's default (do_bench: flush, then
    one call between two events) counts the host's launch time whenever that outlasts the
    flush on the GPU. On an H100 host a planned matmul call at 1024^3 bf16 cost
    ~58 us of host time on Triton's launcher against ~10 us of kernel (the tuner's own calls
    take Triton's front door, not timed alone), and the tuner's choice changed from process to
    process: 10 us in one, 17 us in another (torch.mm 10 us); with this bench four processes
    chose alike (93-95 % of cuBLAS under do_bench). Returns the median,
    or [median, p20, p80] for `quantiles` (what triton.autotune asks for)."""
    from kernelab.harness.stats import quantile

    timing = _brief_cold_timing(kernel_call)
    if quantiles is None:
        return timing.median_ms
    ordered = sorted(timing.samples_ms)
    return [quantile(ordered, q) for q in quantiles]


def fastest(run, candidates: list[dict], ranking: list | None = None) -> dict:
    """The candidate config for which run(config) is fastest: a short cold median of each
    (first_pass_ms), then a final round in alternating pairs among those close to the best
    (final_round).

    L2 is flushed before every timed call, so on inputs larger than the L2 the ranking is
    the cold one the benchmarks report; it only ranks configs against each other on the same
    input and is not a measurement to report. A config that cannot launch (out of shared
    memory) is skipped. If `ranking` is a list, (config, ms or None) pairs are appended to it
    in the order tried, then the final round's matches.
    """
    if len(candidates) == 1 or interpreting() or not autotune_enabled():
        return candidates[0]
    import triton

    timed = []
    for config in candidates:
        try:
            ms = first_pass_ms(lambda config=config: run(config))
        except triton.runtime.errors.OutOfResources:
            ms = None
        if ranking is not None:
            ranking.append({"config": dict(config), "ms": ms})
        if ms is not None:
            timed.append((ms, len(timed), config))
    if not timed:
        return candidates[0]
    timed.sort(key=lambda t: t[:2])
    best_ms = timed[0][0]
    finalists = [c for ms, _, c in timed if ms <= best_ms * (1 + FINAL_ROUND_MARGIN)]
    # the untuned default defends its place (FINAL_ROUND_EDGE_PCT) when it is close enough
    finalists = [c for c in finalists if c is candidates[0]] + [
        c for c in finalists if c is not candidates[0]
    ]
    with unrecorded():
        return final_round(run, finalists[:FINAL_ROUND_SIZE], ranking)


def final_round(run, finalists: list[dict], ranking: list | None = None, compare=None) -> dict:
    """The winner of matches in alternating pairs of calls (kernelab.harness.paired, cold):
    the first finalist is the champion, each other one challenges it in turn and takes its
    place if its median per-pair speed is more than FINAL_ROUND_EDGE_PCT above the
    champion's. `compare` is the paired timer (a stand-in in tests). Each match is logged in
    `ranking`. A match the paired timer refuses (its probe saw a call whose events missed
    part of the host's wait, once in a sweep of 19 shapes on the H200) is logged
    with its error and leaves the champion in place: the first pass already ranked them."""
    if len(finalists) < 2:
        return finalists[0]
    if compare is None:
        from kernelab.harness.paired import compare
    champion = finalists[0]
    for challenger in finalists[1:]:
        try:
            match = compare(
                lambda c=champion: run(c),
                lambda c=challenger: run(c),
                mode="cold",
                pairs=FINAL_ROUND_PAIRS,
                max_time_s=2.0,
            )
        except KernelabError as error:
            if ranking is not None:
                match_of = {"config": dict(challenger), "against": dict(champion)}
                ranking.append({**match_of, "pct": None, "error": str(error)})
            continue
        pct = match.pct_of_reference
        if ranking is not None:
            ranking.append({"config": dict(challenger), "against": dict(champion), "pct": pct})
        if pct > 100.0 + FINAL_ROUND_EDGE_PCT:
            champion = challenger
    return champion


# key -> the ranking fastest() produced for it: what benchmarks record next to a result
TUNING_LOG: dict = {}


def tuned(cache: dict, key, run, candidates: list[dict], *, nbytes: int) -> dict:
    """The config to launch for `key`: cached, else the fastest candidate on this input.

    Small inputs and the interpreter take candidates[0] without timing or caching, so the
    first large call still tunes. Keys start with the kernel's name so that rankings of
    different kernels never mix in TUNING_LOG.
    """
    if key in cache:
        return cache[key]
    if interpreting() or nbytes < TUNE_MIN_BYTES:
        return candidates[0]
    ranking: list = []
    cache[key] = fastest(run, candidates, ranking)
    TUNING_LOG[key] = ranking
    return cache[key]


def config_as_dict(config) -> dict:
    """A triton.Config as a candidate dict: its meta-parameters, num_warps and num_stages."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def tuner_state(tuner) -> tuple:
    """What settle_close_choices needs from before a tuned launch: the autotuner's cache keys
    and its configs_timings object (Triton replaces it when it times a new key)."""
    return set(getattr(tuner, "cache", ())), getattr(tuner, "configs_timings", None)


def settle_close_choices(tuner, before: tuple, run, *, op: str) -> None:
    """Let the candidates Triton's autotuner timed close to its choice meet in a final round.

    Triton's autotuner times its candidates one after another and keeps the fastest median.
    At 1024^3 bf16 (a 10 us kernel) the clocks drift between those timings by as much as the
    candidates differ: on an H100 five fresh processes ranked 64x128x128 s4
    first four times and 128x64x128 s4 once, with first-pass medians 0.5-10 % apart, while
    paired against torch.mm they measured 97.1 and 93.4 %
    (earlier record `matmul-small`, benchmarks/earlier-records.md). So for every key this call tuned, the candidates within
    FINAL_ROUND_MARGIN of the best median go through final_round (alternating
    pairs, cold), `run(candidate)` launching one, and the winner replaces Triton's choice.
    The ranking goes to TUNING_LOG under (op, key).

    before: tuner_state(tuner) taken before the call. A key that Triton
    settled without timing (one candidate left after pruning) leaves configs_timings as the
    previous key's, which must not be read as this one's.
    """
    known_keys, timings_before = before
    cache = getattr(tuner, "cache", None)
    timings = getattr(tuner, "configs_timings", None)
    if cache is None or not timings or timings is timings_before:
        return
    if not autotune_enabled():
        return
    for key in [k for k in cache if k not in known_keys]:
        ranked = sorted(timings.items(), key=lambda item: _median_of(item[1]))
        best_ms = _median_of(ranked[0][1])
        if not math.isfinite(best_ms):  # nothing ran: Triton's own error stands
            continue
        close = [c for c, t in ranked if _median_of(t) <= best_ms * (1 + FINAL_ROUND_MARGIN)]
        finalists = [config_as_dict(c) for c in close[:FINAL_ROUND_SIZE]]
        ranking = [{"config": config_as_dict(c), "ms": _median_of(t)} for c, t in ranked]
        with unrecorded():  # the candidates' launches are no part of the call's plan
            winner = final_round(run, finalists, ranking)
        cache[key] = close[finalists.index(winner)]
        TUNING_LOG[(op, key)] = ranking


def _median_of(timing) -> float:
    """A timing as Triton's autotuner keeps it: a float, or [median, p20, p80]."""
    return timing[0] if isinstance(timing, (list, tuple)) else timing
