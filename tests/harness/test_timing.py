"""The benchmark timer: its pure parts on the CPU (with a fake device timer), the real thing
on a GPU."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from kernelab.errors import KernelabError, NoGPUError, UnknownNameError
from kernelab.harness import timing
from kernelab.harness.gpu_clocks import ClockReading, assess


class FakeDevice:
    """A stand-in for the GPU: each call takes `draw()` ms and advances a fake wall clock by
    the same amount, so the loop's time cap can be exercised without sleeping."""

    def __init__(self, draw):
        self.draw = draw
        self.now = 0.0
        self.chunks: list[int] = []

    def clock(self) -> float:
        return self.now

    def time_chunk(self, k: int) -> list[float]:
        self.chunks.append(k)
        samples = [self.draw() for _ in range(k)]
        self.now += sum(samples) / 1e3
        return samples


def run(device, **overrides):
    options = dict(
        first_sample_ms=1.0,
        min_samples=10,
        max_samples=10_000,
        max_time_s=2.0,
        target_rse=0.005,
        clock=device.clock,
    )
    options.update(overrides)
    return timing._run_loop(device.time_chunk, **options)


def test_loop_stops_soon_after_min_samples_when_quiet():
    device = FakeDevice(lambda: 1.0)
    samples, reason = run(device)
    assert reason == "converged"
    assert len(samples) >= 10
    assert device.now < 0.2  # one chunk of ~50 ms, not the 2 s cap


def test_loop_runs_to_the_time_cap_when_noisy():
    rng = random.Random(0)
    device = FakeDevice(lambda: rng.choice([1.0, 3.0]))
    samples, reason = run(device, target_rse=1e-6)
    assert reason == "time cap"
    assert 2.0 <= device.now < 2.0 + 0.1  # overshoots by at most one ~50 ms chunk
    assert len(samples) == sum(device.chunks)  # every sample kept


def test_loop_never_stops_below_min_samples():
    draws = itertools.cycle([400.0, 600.0])
    device = FakeDevice(draws.__next__)  # each call alone exceeds the whole time cap
    samples, reason = run(device, min_samples=7, max_time_s=0.1, first_sample_ms=500.0)
    assert len(samples) == 7
    assert reason == "time cap"


def test_loop_respects_the_sample_cap_exactly():
    device = FakeDevice(itertools.cycle([0.001, 0.003]).__next__)
    samples, reason = run(device, max_samples=1234, target_rse=0.0, first_sample_ms=0.001)
    assert (len(samples), reason) == (1234, "max_samples")


def test_chunks_hold_about_50_ms_of_work():
    assert timing.chunk_size(1.0, 10_000) == 50
    assert timing.chunk_size(100.0, 10_000) == 1
    assert timing.chunk_size(1e-4, 10_000) == timing.MAX_CHUNK
    assert timing.chunk_size(0.01, 3) == 3
    # A graph sample stands for many calls: the loop sizes chunks by replay time.
    device = FakeDevice(lambda: 0.002)
    run(device, first_sample_ms=0.002, calls_per_sample=500, target_rse=0.0, max_samples=200)
    assert device.chunks[0] == 50
    # A call that takes longer to enqueue than to run: chunks sized by the host time.
    device = FakeDevice(lambda: 0.002)
    run(device, first_sample_ms=0.002, host_ms_per_sample=1.0, target_rse=0.0, max_samples=200)
    assert set(device.chunks) == {50}


def test_flush_is_at_least_twice_the_l2():
    h200_l2 = 60 * 1024**2
    assert timing.flush_size_bytes(h200_l2) >= 2 * h200_l2
    assert timing.flush_size_bytes(0) == timing.flush_size_bytes(None) == 256 * 1024**2


def test_graph_replays_last_at_least_a_millisecond():
    assert timing.calls_per_replay(0.004) == 250
    assert timing.calls_per_replay(0.003) * 0.003 >= timing.GRAPH_REPLAY_TARGET_MS
    assert timing.calls_per_replay(5.0) == 1
    assert timing.calls_per_replay(0.0) == timing.MAX_CALLS_PER_GRAPH


def test_the_spin_covers_the_host_enqueue_time():
    # 20 us to enqueue a call, 100 calls: hold 2.5 ms (25 % margin) at 2 GHz.
    assert timing.hold_cycles(0.02, 100) == int(2.5e-3 * timing.SPIN_HZ)
    assert timing.hold_cycles(10.0, 1000) == int(timing.MAX_HOLD_MS * 1e-3 * timing.SPIN_HZ)


def test_side_stream_rule():
    assert timing.looks_unfenced(event_ms=0.01, wall_ms=2.0)  # work ran past the end event
    assert not timing.looks_unfenced(event_ms=2.0, wall_ms=2.05)  # just the sync latency
    assert not timing.looks_unfenced(event_ms=0.005, wall_ms=0.04)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(UnknownNameError, match="did you mean"):
        timing.benchmark(lambda: None, mode="cool")
    with pytest.raises(KernelabError, match="min_samples"):
        timing.benchmark(lambda: None, min_samples=0)
    with pytest.raises(KernelabError, match="max_samples"):
        timing.benchmark(lambda: None, min_samples=10, max_samples=5)


def test_no_gpu_is_a_one_line_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoGPUError, match="needs a CUDA GPU"):
        timing.benchmark(lambda: None)


def test_out_of_memory_becomes_one_line():
    torch = pytest.importorskip("torch")
    message = "CUDA out of memory. Tried to allocate 80.00 GiB.\nGPU 0 has a total capacity ..."
    with pytest.raises(KernelabError) as caught:
        with timing.device_memory_guard():
            raise torch.cuda.OutOfMemoryError(message)
    text = str(caught.value)
    assert text.startswith("out of device memory for this size: CUDA out of memory")
    assert "\n" not in text


def reading(sm, reasons=0):
    return ClockReading(
        t_s=0.0, sm_mhz=sm, mem_mhz=3201, temperature_c=40, power_w=300, reasons=reasons
    )


def test_steady_clocks_are_not_throttled():
    clocks, throttled, warnings = assess([reading(1980), reading(1965), reading(1980)], 1980)
    assert not throttled and warnings == []
    assert clocks["sm_mhz_min"] == 1965 and clocks["sm_mhz_max_supported"] == 1980


def test_a_clock_drop_over_10_percent_marks_the_run():
    clocks, throttled, warnings = assess([reading(1980), reading(1700)], 1980)
    assert throttled and "1980 to 1700" in warnings[0]


def test_idle_readings_do_not_count_as_a_drop():
    _, throttled, _ = assess([reading(1980), reading(345, reasons=0x1)], 1980)
    assert not throttled


def test_power_cap_reason_marks_the_run():
    clocks, throttled, warnings = assess([reading(1980, reasons=0x4)], 1980)
    assert throttled and clocks["slowdown_reasons"] == ["power cap"]


def test_no_readings_no_clocks():
    assert assess([], None) == ({}, False, [])


# --- on the GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_memory_bound_median_is_reproducible_within_one_percent():
    # A 2 GiB copy holds the card below its power cap, so two runs must agree closely.
    import torch

    src = torch.randn(512 * 1024**2, device="cuda")
    dst = torch.empty_like(src)
    first = timing.benchmark(lambda: dst.copy_(src))
    second = timing.benchmark(lambda: dst.copy_(src))
    assert first.mode == "cold" and first.flush_bytes >= 2 * 50 * 1024**2
    assert abs(first.median_ms - second.median_ms) / first.median_ms < 0.01


@pytest.mark.gpu
def test_large_gemm_median_is_reproducible_or_throttling_is_flagged():
    # An 8192^3 bf16 GEMM draws an H200 to its 700 W cap (1.37 ms then 1.51 ms in two runs,
    # both flagged "power cap"); the timer may not hide that.
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    first = timing.benchmark(lambda: torch.mm(a, b))
    second = timing.benchmark(lambda: torch.mm(a, b))
    agree = abs(first.median_ms - second.median_ms) / first.median_ms < 0.02
    assert agree or first.throttled or second.throttled
    tflops = 2 * 8192**3 / (first.median_ms * 1e-3) / 1e12
    assert 300 < tflops < 989  # a real tensor-core GEMM, not faster than the datasheet


@pytest.mark.gpu
def test_cold_is_not_faster_than_hot_for_an_l2_resident_op():
    import torch

    x = torch.randn(1024 * 1024, device="cuda")  # 4 MiB: fits the L2 many times over
    y = torch.randn_like(x)
    hot = timing.benchmark(lambda: x + y, mode="hot")
    cold = timing.benchmark(lambda: x + y, mode="cold")
    assert cold.median_ms >= hot.median_ms * 0.98


@pytest.mark.gpu
def test_host_time_between_launches_is_not_device_time():
    import torch

    x = torch.randn(1024, device="cuda")

    def slow_host():
        time.sleep(0.001)  # a slow Python wrapper: 1 ms on the host per call
        return x.mul(2.0)

    t = timing.benchmark(slow_host, mode="hot", max_time_s=0.5)
    assert t.median_ms < 0.1  # the spin let the GPU run the queued calls back to back


@pytest.mark.gpu
def test_graph_mode_removes_launch_overhead():
    import torch

    x = torch.randn(1024, device="cuda")
    fn = lambda: x.mul(2.0)  # noqa: E731
    graph = timing.benchmark(fn, mode="graph")
    assert graph.mode == "graph" and graph.calls_per_sample > 100
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    eager_per_call_ms = (time.perf_counter() - start) / 2000 * 1e3
    assert graph.median_ms < 0.5 * eager_per_call_ms


@pytest.mark.gpu
def test_graph_capture_failure_falls_back_to_a_batch():
    import torch

    x = torch.randn(1024, device="cuda")
    t = timing.benchmark(lambda: x.sum().item(), mode="graph")  # .item() cannot be captured
    assert t.mode == "batch"
    assert any("capture failed" in w for w in t.warnings)


@pytest.mark.gpu
def test_work_left_on_a_side_stream_is_counted():
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    plain = timing.benchmark(lambda: torch.mm(a, a), mode="hot")

    def sneaky():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.mm(a, a)

    sneaky_timing = timing.benchmark(sneaky, mode="hot")
    assert sneaky_timing.fenced and sneaky_timing.warnings
    assert sneaky_timing.median_ms > 0.8 * plain.median_ms


@pytest.mark.gpu
def test_clocks_are_recorded_when_nvml_is_there():
    import torch

    from kernelab.harness.gpu_clocks import nvml_available

    if not nvml_available():
        pytest.skip("no NVML on this machine")
    a = torch.randn(4096, 4096, device="cuda")
    t = timing.benchmark(lambda: a @ a, max_time_s=0.3)
    assert t.clocks["readings"] >= 2 and t.clocks["sm_mhz_max"] > 500
