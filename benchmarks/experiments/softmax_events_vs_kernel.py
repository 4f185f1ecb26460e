"""The same cold calls timed two ways: CUDA events around the call (what the sweeps report)
and the kernels' own durations from CUPTI (torch.profiler's device records, what Nsight
Compute's gpu__time_duration also counts), for the long-row softmax of both dtypes.

Session 17's question: under Nsight Compute the bf16 and fp32 262K winners ran 0.6 % apart
at 512 MiB (264.3 against 262.8 us), where the events put them 2.1 % apart at 1 GiB and
2.9 % at 512 MiB (softmax_flush_kind_v1). If the kernels' durations agree with ncu here, the
bf16 call spends the difference outside its kernel (between the start event and the
kernel's first program, or after its last); if they agree with the events, the difference
is in the kernel and ncu's replay hid it.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_events_vs_kernel.py --out $OUT

Each call: the timer's flush (a buffer of twice the L2 zeroed), then the call between two
events; calls queued behind a spin, as kernelab.harness.timing does. Per shape: the median
event time, the median summed kernel time per call, and what the events hold beyond it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from kernelab.harness.check import check_implementation
from kernelab.ops import softmax

GIB = 1 << 30
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# (dtype, cols, bytes read): both 262K winners at the sweep's size and at ncu's, bf16 65K
SHAPES = (
    ("bf16", 262144, GIB),
    ("fp32", 262144, GIB),
    ("bf16", 262144, GIB // 2),
    ("fp32", 262144, GIB // 2),
    ("bf16", 65536, GIB),
)


def per_call(profile, calls: int, folder: Path) -> list[dict]:
    """Per call, from the profiler's trace (read by kernelab.timeline.trace): the device time
    of its kernels (ms; every activity between one flush and the next) and the idle time
    between the flush's end and its first kernel (us), which the start event sits in."""
    from kernelab.timeline.trace import load_trace

    path = folder / "softmax_events_vs_kernel_trace.json"
    profile.export_chrome_trace(str(path))
    activities = load_trace(path).activities
    path.unlink()
    # the flush: torch's fill kernel; the spin before the calls: torch.cuda._sleep's kernel
    flushes = [
        i for i, a in enumerate(activities) if "fill" in a.name.lower() or a.kind == "memset"
    ]
    if len(flushes) != calls:
        raise SystemExit(f"{len(flushes)} flushes for {calls} calls")
    calls_out = []
    for n, first in enumerate(flushes):
        last = flushes[n + 1] if n + 1 < len(flushes) else len(activities)
        work = activities[first + 1 : last]
        if not work:
            raise SystemExit(f"call {n}: no kernel after its flush")
        calls_out.append(
            {
                "kernels": sorted({a.name for a in work}),
                "kernel_ms": sum(a.duration_us for a in work) / 1e3,
                "span_ms": (work[-1].end_us - work[0].start_us) / 1e3,
                "idle_after_flush_us": work[0].start_us - activities[first].end_us,
            }
        )
    return calls_out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--calls", type=int, default=24)
    args = parser.parse_args(argv)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for dtype_name, cols, nbytes in SHAPES:
        dtype = DTYPES[dtype_name]
        itemsize = torch.empty((), dtype=dtype).element_size()
        x = torch.randn(nbytes // (cols * itemsize), cols, device="cuda", dtype=dtype)
        softmax.softmax(x)  # the library tunes here, outside the timed calls
        # the tuned call checked on fresh data of this shape before it is timed
        shape = {"rows": x.shape[0], "cols": cols}
        report = check_implementation(softmax.softmax, "softmax", shape, dtype_name, trials=1)
        if not report.ok:
            raise SystemExit(f"softmax {dtype_name} {shape}: {report.message}")
        for _ in range(3):
            softmax.softmax(x)
        torch.cuda.synchronize()
        events = []
        activities = [torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as profile:
            torch.cuda._sleep(int(2e9 * 0.05))  # 50 ms: the host queues every call meanwhile
            for _ in range(args.calls):
                flush.zero_()
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                softmax.softmax(x)
                end.record()
                events.append((start, end))
            torch.cuda.synchronize()
        event_ms = [start.elapsed_time(end) for start, end in events]
        traced = per_call(profile, args.calls, args.out)
        moved = 2 * x.numel() * itemsize
        row = {
            "dtype": dtype_name, "rows": x.shape[0], "cols": cols,
            "config": softmax.config_for(x), "event_ms": event_ms, "calls": traced,
            "event_median_ms": statistics.median(event_ms),
            "kernel_median_ms": statistics.median(c["kernel_ms"] for c in traced),
            "idle_after_flush_median_us": statistics.median(
                c["idle_after_flush_us"] for c in traced
            ),
        }  # fmt: skip
        row["outside_kernel_us"] = 1e3 * (row["event_median_ms"] - row["kernel_median_ms"])
        rows.append(row)
        print(
            f"{dtype_name} {x.shape[0]:>5}x{cols:<7} events {row['event_median_ms']:.4f} ms "
            f"({moved / row['event_median_ms'] / 1e9:.3f} TB/s)  kernels "
            f"{row['kernel_median_ms']:.4f} ms ({moved / row['kernel_median_ms'] / 1e9:.3f} "
            f"TB/s)  outside {row['outside_kernel_us']:+.1f} us, idle after the flush "
            f"{row['idle_after_flush_median_us']:.1f} us",
            flush=True,
        )
        del x
        torch.cuda.empty_cache()
    record = {"gpu": torch.cuda.get_device_name(0), "rows": rows}
    (args.out / "softmax_events_vs_kernel.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
