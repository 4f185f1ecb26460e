"""The benchmark timer: CUDA events, a cold or hot L2, CUDA-graph batches, adaptive stopping.

What one sample is, by mode:
  cold   one call, with the L2 flushed before it (outside the timed region) by writing a
         buffer twice the size of the L2: the kernel reads its inputs from HBM, as it does
         in a model where other layers ran in between. The default.
  hot    one call right after the previous one: inputs may still sit in L2. Faster for
         small operands; the figure a hot loop (KernelBench's timer) reports.
  graph  N back-to-back calls captured in one CUDA graph (N chosen so a replay lasts
         >= ~1 ms), replay time / N: launch overhead mostly gone, for kernels of a few us.
         If capture fails the same N calls are timed from a plain loop ("batch").

Each sample is bracketed by CUDA events on the current stream. Before any event is read the
whole device is synchronised. Samples measure device time: a chunk of calls is queued behind
a short spin kernel (torch.cuda._sleep, nvbench's "blocking kernel" idea) that holds the
stream while the host enqueues them, so the GPU runs them back to back and the time Python
takes to launch a call never shows up as idle time between its events. Launch overhead is
what graph mode removes and what a hot loop without the spin would add. Before timing, the warm-up checks whether a call returns while
work it started is still running elsewhere (a side stream the current stream never waits
on): the events would then miss that work, so every sample is instead closed by a
device-wide synchronise before its end event, and the Timing says so in a warning.

The warm-up runs for `warmup_ms` of wall time (at least one call): compilation, autotuning
and lazy allocation happen there, outside the timed region. Sampling stops through
kernelab.harness.stats.should_stop: at least `min_samples`, then at a small relative
standard error of the mean, the sample cap, or the time cap. Every sample is kept.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelab.errors import KernelabError, NoGPUError, unknown
from kernelab.harness import stats
from kernelab.output import note

MODES = ("cold", "hot", "graph")
FALLBACK_FLUSH_BYTES = 256 * 1024**2  # triton.testing.do_bench's flush size
GRAPH_REPLAY_TARGET_MS = 1.0  # one replay at least this long: event resolution ~0.5 us
MAX_CALLS_PER_GRAPH = 10_000
CHUNK_TARGET_MS = 50.0  # queue this much work between device synchronisations
SPIN_HZ = 2.0e9  # cycles per second assumed for the pre-roll spin: above any boost clock
MAX_HOLD_MS = 200.0
REPLAY_ENQUEUE_MS = 0.05  # host time to enqueue one graph replay and its two events, generously
# Calls queued behind one spin. The driver's launch queue holds on the order of a thousand
# entries and each sample takes up to four (flush, two events, the call): a longer chunk
# blocks the host in the launch call until the spin ends, and the GPU then waits for the
# host (on an H200 a 5 us add read 16 us in hot mode with 1000 calls per chunk).
MAX_CHUNK = 200
PROBE_CALLS = 5


@dataclass
class Timing:
    samples_ms: list[float]  # per call (graph/batch: one replay divided by calls_per_sample)
    mode: str  # "cold", "hot", "graph" or "batch" (graph capture failed)
    summary: stats.Summary
    stop_reason: str  # "converged", "time cap", "max_samples"
    clocks: dict = field(default_factory=dict)
    throttled: bool = False
    warnings: list[str] = field(default_factory=list)
    calls_per_sample: int = 1
    flush_bytes: int | None = None  # cold mode: bytes written between calls
    warmup_calls: int = 0
    fenced: bool = False  # samples closed by a device-wide synchronise (side-stream work)

    @property
    def median_ms(self) -> float:
        return self.summary.median

    @property
    def p20_ms(self) -> float:
        return self.summary.p20

    @property
    def p80_ms(self) -> float:
        return self.summary.p80

    @property
    def iqr_ms(self) -> float:
        return self.summary.iqr

    @property
    def rel_noise(self) -> float:
        return self.summary.rel_noise

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "median_ms": self.median_ms,
            "p20_ms": self.p20_ms,
            "p80_ms": self.p80_ms,
            "iqr_ms": self.iqr_ms,
            "rel_noise": self.rel_noise,
            "stop_reason": self.stop_reason,
            "calls_per_sample": self.calls_per_sample,
            "flush_bytes": self.flush_bytes,
            "warmup_calls": self.warmup_calls,
            "fenced": self.fenced,
            "throttled": self.throttled,
            "warnings": list(self.warnings),
            "clocks": dict(self.clocks),
            "stats": self.summary.to_dict(),
            "samples_ms": list(self.samples_ms),
        }


def flush_size_bytes(l2_bytes: int | None) -> int:
    """Bytes to write between cold calls: twice the L2, so nothing the last call touched can
    survive in it; 256 MiB when the L2 size is unknown."""
    if not l2_bytes or l2_bytes <= 0:
        return FALLBACK_FLUSH_BYTES
    return 2 * int(l2_bytes)


def calls_per_replay(per_call_ms: float) -> int:
    """How many calls one graph replay holds so that it lasts >= GRAPH_REPLAY_TARGET_MS."""
    if per_call_ms <= 0 or not math.isfinite(per_call_ms):
        return MAX_CALLS_PER_GRAPH
    return max(1, min(MAX_CALLS_PER_GRAPH, math.ceil(GRAPH_REPLAY_TARGET_MS / per_call_ms)))


def chunk_size(sample_ms: float, remaining: int) -> int:
    """Samples to queue before the next synchronise: ~CHUNK_TARGET_MS of work."""
    if sample_ms <= 0 or not math.isfinite(sample_ms):
        wanted = MAX_CHUNK
    else:
        wanted = int(CHUNK_TARGET_MS / sample_ms)
    return max(1, min(remaining, MAX_CHUNK, wanted))


def looks_unfenced(event_ms: float, wall_ms: float) -> bool:
    """Whether a call seems to leave work running that its events do not cover: the host
    waited (call + device synchronise) much longer than the events measured. Host launch
    overhead does not trigger it, since the events include the idle time it causes."""
    return wall_ms - event_ms > max(0.25 * event_ms, 0.1)


def _run_loop(
    time_chunk: Callable[[int], list[float]],
    *,
    first_sample_ms: float,
    calls_per_sample: int = 1,
    host_ms_per_sample: float = 0.0,
    min_samples: int,
    max_samples: int,
    max_time_s: float,
    target_rse: float,
    clock: Callable[[], float] = time.perf_counter,
    between_chunks: Callable[[], None] | None = None,
) -> tuple[list[float], str]:
    """Collect samples in chunks until stats.should_stop says so; return them and why.

    `time_chunk(k)` takes exactly k samples and returns them in ms; `first_sample_ms` (from the
    warm-up) sizes the first chunk, later chunks are sized from the samples themselves; a
    sample that stands for `calls_per_sample` calls costs that many times its value, and
    never less than the host time to enqueue it (`host_ms_per_sample`), so that the spin
    holding the stream can cover the enqueueing of a whole chunk.
    """
    samples: list[float] = []
    sample_ms = first_sample_ms
    start = clock()
    while True:
        stop, reason = stats.should_stop(
            samples,
            min_samples=min_samples,
            target_rse=target_rse,
            elapsed_s=clock() - start,
            max_time_s=max_time_s,
            max_samples=max_samples,
        )
        if stop:
            return samples, reason
        cost_ms = max(sample_ms * calls_per_sample, host_ms_per_sample)
        chunk = time_chunk(chunk_size(cost_ms, max_samples - len(samples)))
        samples.extend(chunk)
        sample_ms = sum(chunk) / len(chunk)
        if between_chunks is not None:
            between_chunks()


@contextlib.contextmanager
def device_memory_guard():
    """Turn torch's CUDA out-of-memory error into one KernelabError line."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "allocation failed"
        raise KernelabError(f"out of device memory for this size: {first[:200]}") from None


def _validate(
    mode: str,
    min_samples: int,
    max_samples: int,
    max_time_s: float,
    target_rse: float,
    warmup_ms: float,
) -> None:
    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if min_samples < 1:
        raise KernelabError(f"min_samples must be at least 1, got {min_samples}")
    if max_samples < min_samples:
        raise KernelabError(f"max_samples ({max_samples}) is below min_samples ({min_samples})")
    if max_time_s <= 0:
        raise KernelabError(f"max_time_s must be positive, got {max_time_s}")
    if target_rse < 0 or warmup_ms < 0:
        raise KernelabError("target_rse and warmup_ms cannot be negative")


def benchmark(
    fn: Callable[[], object],
    *,
    mode: str = "cold",
    min_samples: int = 10,
    max_samples: int = 10_000,
    max_time_s: float = 2.0,
    target_rse: float = 0.005,
    warmup_ms: float = 25.0,
    flush_bytes: int | None = None,
    device: int | None = None,
) -> Timing:
    """Time `fn` (a zero-argument callable that launches the work) on the current CUDA device.

    Raises NoGPUError without CUDA and a one-line KernelabError when the device runs out of
    memory. See the module docstring for what a sample is in each mode.
    """
    _validate(mode, min_samples, max_samples, max_time_s, target_rse, warmup_ms)
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError("benchmark() needs a CUDA GPU; none found")
    index = torch.cuda.current_device() if device is None else int(device)
    with torch.cuda.device(index), device_memory_guard():
        return _benchmark_on_device(
            fn,
            torch,
            index,
            mode,
            min_samples,
            max_samples,
            max_time_s,
            target_rse,
            warmup_ms,
            flush_bytes,
        )


def _benchmark_on_device(
    fn, torch, index, mode, min_samples, max_samples, max_time_s, target_rse, warmup_ms, flush_bytes
) -> Timing:
    from kernelab.harness.gpu_clocks import ClockWatcher

    warnings: list[str] = []
    warmup_calls = _warm_up(fn, torch, warmup_ms)
    probe_event_ms, enqueue_ms, fenced = _probe(fn, torch)
    if fenced:
        warnings.append(
            "the call returned while work it started was still running (a side stream?): "
            "each sample is closed by a device-wide synchronise, which adds its latency"
        )

    flush = None
    calls = 1
    result_mode = mode
    if mode == "cold":
        if flush_bytes is None:
            l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0)
            flush_bytes = flush_size_bytes(l2)
        # int32 so zero_() writes with full-width stores; the content never matters.
        flush = torch.empty(max(1, flush_bytes // 4), dtype=torch.int32, device=f"cuda:{index}")
        time_chunk = _event_chunks(fn, torch, flush, fenced, enqueue_ms)
    elif mode == "hot":
        time_chunk = _event_chunks(fn, torch, None, fenced, enqueue_ms)
    else:
        calls = calls_per_replay(probe_event_ms)
        time_chunk, result_mode, why, calls = _graph_chunks(fn, torch, calls, enqueue_ms)
        if why:
            warnings.append(
                f"CUDA graph capture failed ({why}); timed {calls} calls in a plain loop"
            )
        flush_bytes = None

    watcher = ClockWatcher(index)
    if not watcher.available:
        note("NVML not available: clocks not recorded for this timing")
    watcher.poll(force=True)
    nvtx = torch.cuda.nvtx
    nvtx.range_push("kernelab.benchmark")  # lets ncu --nvtx-include select the timed calls
    try:
        samples, reason = _run_loop(
            time_chunk,
            first_sample_ms=probe_event_ms,
            calls_per_sample=calls,
            host_ms_per_sample=REPLAY_ENQUEUE_MS if result_mode == "graph" else calls * enqueue_ms,
            min_samples=min_samples,
            max_samples=max_samples,
            max_time_s=max_time_s,
            target_rse=target_rse,
            between_chunks=watcher.poll,
        )
    finally:
        nvtx.range_pop()
    watcher.poll(force=True)
    clocks, throttled, clock_warnings = watcher.result()
    del flush
    return Timing(
        samples_ms=samples,
        mode=result_mode,
        summary=stats.summarize(samples),
        stop_reason=reason,
        clocks=clocks,
        throttled=throttled,
        warnings=warnings + clock_warnings,
        calls_per_sample=calls,
        flush_bytes=flush_bytes if mode == "cold" else None,
        warmup_calls=warmup_calls,
        fenced=fenced,
    )


def _warm_up(fn, torch, warmup_ms: float) -> int:
    """Call fn until warmup_ms of wall time has passed (at least once); return the count."""
    start = time.perf_counter()
    calls = 0
    while True:
        fn()
        torch.cuda.synchronize()  # so wall time tracks the device, not the launch queue
        calls += 1
        if (time.perf_counter() - start) * 1e3 >= warmup_ms:
            return calls


def _probe(fn, torch) -> tuple[float, float, bool]:
    """A few single calls timed by events and by the host clock: the per-call device time that
    sizes chunks and graphs, the host time to enqueue one call, and whether the call leaves
    work its events miss."""
    events, walls, enqueues = [], [], []
    for _ in range(PROBE_CALLS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        enqueues.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
        events.append(start.elapsed_time(end))
    event_ms = stats.quantile(sorted(events), 0.5)
    wall_ms = stats.quantile(sorted(walls), 0.5)
    enqueue_ms = stats.quantile(sorted(enqueues), 0.5)
    return event_ms, enqueue_ms, looks_unfenced(event_ms, wall_ms)


def hold_cycles(enqueue_ms: float, calls: int) -> int:
    """Spin cycles that keep the stream busy while the host enqueues `calls` calls (with a
    25 % margin), capped at MAX_HOLD_MS."""
    hold_ms = min(MAX_HOLD_MS, 1.25 * enqueue_ms * calls)
    return int(hold_ms * 1e-3 * SPIN_HZ)


def _hold_stream(torch, cycles: int) -> None:
    spin = getattr(torch.cuda, "_sleep", None)
    if spin is not None and cycles > 0:
        spin(cycles)


class _Hold:
    """The spin that holds the stream while the host enqueues a chunk, sized from the measured
    enqueue time and grown whenever the host turns out slower than the spin: then the GPU may
    have idled between calls, so that chunk is thrown away and taken again."""

    MAX_RETRIES = 4

    def __init__(self, torch, enqueue_ms: float):
        self.torch = torch
        self.enqueue_ms = enqueue_ms
        self.factor = 1.0

    def run(self, k: int, enqueue: Callable[[], list[tuple]]) -> list[tuple]:
        for _ in range(self.MAX_RETRIES):
            cycles = hold_cycles(self.enqueue_ms * self.factor, k)
            hold_ms = cycles / SPIN_HZ * 1e3  # a lower bound: the clock is <= SPIN_HZ
            _hold_stream(self.torch, cycles)
            t0 = time.perf_counter()
            pairs = enqueue()
            host_ms = (time.perf_counter() - t0) * 1e3
            self.torch.cuda.synchronize()  # all streams, before any event is read
            if host_ms <= hold_ms or hold_ms >= MAX_HOLD_MS:
                return pairs
            self.factor *= 2 * host_ms / max(hold_ms, 1e-6)
        return pairs


def _event_chunks(
    fn, torch, flush, fenced: bool, enqueue_ms: float
) -> Callable[[int], list[float]]:
    """time_chunk for cold and hot modes: k calls queued behind a spin, then one synchronise."""
    hold = _Hold(torch, enqueue_ms)

    def enqueue(k: int) -> list[tuple]:
        pairs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(k)
        ]
        for start, end in pairs:
            if flush is not None:
                flush.zero_()  # outside the timed region: before the start event
            start.record()
            fn()
            if fenced:
                torch.cuda.synchronize()
            end.record()
        return pairs

    def time_chunk(k: int) -> list[float]:
        if fenced:  # fenced calls synchronise one by one: nothing can queue up
            pairs = enqueue(k)
            torch.cuda.synchronize()
        else:
            pairs = hold.run(k, lambda: enqueue(k))
        return [start.elapsed_time(end) for start, end in pairs]

    return time_chunk


def _graph_chunks(
    fn, torch, calls: int, enqueue_ms: float
) -> tuple[Callable[[int], list[float]], str, str | None, int]:
    """time_chunk for graph mode (or its plain-loop fallback), the mode used, why the capture
    failed (None when it worked) and the calls one replay holds."""
    try:
        _refuse_host_syncs(fn, torch)
        graph = capture_graph(fn, torch, calls)
        replay_ms = _time_one_replay(graph, torch)
        if replay_ms < GRAPH_REPLAY_TARGET_MS:  # the eager probe overstated a call's time
            calls = min(MAX_CALLS_PER_GRAPH, math.ceil(calls * GRAPH_REPLAY_TARGET_MS / replay_ms))
            del graph
            graph = capture_graph(fn, torch, calls)
    except Exception as exc:  # capture refuses syncs, host reads, unjoined side streams, ...
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()

        def replay():
            for _ in range(calls):
                fn()

        return _replay_chunks(replay, torch, calls, calls * enqueue_ms), "batch", reason, calls
    graph.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    return _replay_chunks(graph.replay, torch, calls, REPLAY_ENQUEUE_MS), "graph", None, calls


def _refuse_host_syncs(fn, torch) -> None:
    """Run fn once with torch's sync debug mode set to error: a call that waits on the device
    (.item(), .cpu(), a synchronize) raises here instead of inside a capture. A capture that
    fails midway leaves torch's CUDA generator marked as capturing, and every later random
    draw in the process then fails; this check keeps the common case away from that."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()


def _time_one_replay(graph, torch) -> float:
    graph.replay()  # the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def capture_graph(fn, torch, calls: int):
    """A CUDA graph of `calls` back-to-back calls of fn, after the side-stream warm-up that
    torch requires."""
    # torch requires a warm-up on a side stream before capture (lazy cuBLAS handles and
    # workspaces are created per stream).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def _replay_chunks(
    replay: Callable[[], None], torch, calls: int, enqueue_ms: float
) -> Callable[[int], list[float]]:
    """time_chunk for graph and batch modes; `enqueue_ms` is the host time of one replay."""
    hold = _Hold(torch, enqueue_ms)

    def enqueue(k: int) -> list[tuple]:
        pairs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(k)
        ]
        for start, end in pairs:
            start.record()
            replay()
            end.record()
        return pairs

    def time_chunk(k: int) -> list[float]:
        pairs = hold.run(k, lambda: enqueue(k))
        return [start.elapsed_time(end) / calls for start, end in pairs]

    return time_chunk
