"""Check, time and place one implementation at one shape: the step every benchmark shares.

`kernelab bench`, the lab and the evaluators all go through BenchSession.one, so a number
is only ever produced after the kernel passed its correctness check, and always arrives
with its roofline placement and the speed-of-light guard applied, and with the host's cost
per call beside the device time (harness/launch_cost.py: is the call launch-bound here?).
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.output import note


class BenchSession:
    """What stays fixed across one series of benchmarks: device, ceilings, settings."""

    def __init__(self, identity, op_spec, dtype, mode, min_samples, max_time_s, device="cuda"):
        self.device = device
        import torch

        from kernelab.environment import software_versions
        from kernelab.harness.ceilings import measured_ceilings_for
        from kernelab.roofline.model import Ceilings

        self.identity, self.op_spec, self.dtype, self.mode = identity, op_spec, dtype, mode
        self.min_samples, self.max_time_s = min_samples, max_time_s
        spec = identity.spec
        self.datasheet = Ceilings.from_spec(spec) if spec is not None else None
        self.measured = measured_ceilings_for(spec) if spec is not None else None
        self.versions = {**software_versions(), "cuda_runtime": torch.version.cuda}

    def _synchronize(self) -> None:
        """Wait for the device the inputs live on (CPU work is done when the call returns)."""
        import torch

        if str(self.device).startswith("cuda"):
            torch.cuda.synchronize()

    def _place(self, ceilings, cost, math_mode, time_ms):
        from kernelab.roofline.model import place

        if ceilings is None:
            return None
        try:
            return place(cost, ceilings, math_mode=math_mode, time_ms=time_ms)
        except KernelabError as exc:  # e.g. no measured fp8 peak
            note(f"not placed on the {ceilings.source} roofline: {exc}")
            return None

    def one(self, impl, fn, shape: dict):
        """Check, time and place `fn` at `shape`: a row for the table and a Record (None when
        the check failed)."""
        from kernelab.harness.check import check_implementation
        from kernelab.harness.launch_cost import measure_host_cost
        from kernelab.harness.records import Record
        from kernelab.harness.timing import benchmark, device_memory_guard

        op, dtype = self.op_spec.name, self.dtype
        row = {
            "implementation": impl.name,
            "shape": shape,
            "dtype": dtype,
            "math_mode": impl.math_mode,
        }
        with device_memory_guard():
            report = check_implementation(
                fn, op, shape, dtype, math_mode=impl.math_mode, device=self.device
            )
            row.update(
                check_ok=report.ok, check_error=report.error, check_threshold=report.threshold
            )
            if not report.ok:
                row["check_message"] = report.message
                return row, None
            inputs = self.op_spec.make_inputs(shape, dtype, seed=0, device=self.device)
            timing = benchmark(
                lambda: fn(*inputs),
                mode=self.mode,
                min_samples=self.min_samples,
                max_time_s=self.max_time_s,
            )
            host = measure_host_cost(
                lambda: fn(*inputs), timing.median_ms, synchronize=self._synchronize
            )
        cost = self.op_spec.cost(shape, dtype)
        on_sheet = self._place(self.datasheet, cost, impl.math_mode, timing.median_ms)
        on_measured = self._place(self.measured, cost, impl.math_mode, timing.median_ms)
        seconds = timing.median_ms * 1e-3
        warnings = list(timing.warnings)
        if on_sheet is not None and on_sheet.faster_than_light:
            warnings.insert(0, on_sheet.warning)
        if host.launch_bound:
            warnings.append(
                f"launch-bound at this size: the host needs {host.host_us:.1f} us to issue a "
                f"call the GPU runs in {host.device_us:.1f} us, so back-to-back calls take "
                f"{host.wall_us:.1f} us each"
            )
        row.update(
            median_ms=timing.median_ms,
            tflops=cost.flops / seconds / 1e12,
            gbps=cost.bytes / seconds / 1e9,
            pct_of_datasheet=on_sheet.sol_pct if on_sheet else None,
            pct_of_measured=on_measured.sol_pct if on_measured else None,
            bound=on_sheet.bound if on_sheet else None,
            rel_noise=timing.rel_noise,
            host_us=host.host_us,
            wall_us=host.wall_us,
            launch_bound=host.launch_bound,
            mode=timing.mode,
            throttled=timing.throttled,
            faster_than_light=bool(on_sheet and on_sheet.faster_than_light),
            warnings=warnings,
        )
        record = Record(
            op=op,
            implementation=impl.name,
            shape=dict(shape),
            dtype=dtype,
            math_mode=impl.math_mode,
            mode=timing.mode,
            samples_ms=list(timing.samples_ms),
            stats=timing.summary.to_dict(),
            gpu=self.identity.name,
            gpu_id=self.identity.gpu_id,
            driver=self.identity.driver,
            versions=self.versions,
            clocks=timing.clocks,
            flops=cost.flops,
            bytes=cost.bytes,
            achieved_tflops=row["tflops"],
            achieved_gbps=row["gbps"],
            pct_of_datasheet=row["pct_of_datasheet"],
            pct_of_measured=row["pct_of_measured"],
            check={"ok": report.ok, "error": report.error, "threshold": report.threshold},
            warnings=warnings,
            extra={
                "stop_reason": timing.stop_reason,
                "calls_per_sample": timing.calls_per_sample,
                "flush_bytes": timing.flush_bytes,
                "fenced": timing.fenced,
                "throttled": timing.throttled,
                "bound": row["bound"],
                "floor_ms": on_sheet.floor_ms if on_sheet else None,
                "measured_ceilings": self.measured.source if self.measured else None,
                "host_cost": host.to_dict(),
            },
        )
        return row, record


def build_candidates(impl, others) -> list:
    """(implementation, built callable) for `impl` and each baseline in `others` that builds
    here; a baseline that cannot build is noted and left out, never stops the run."""
    built = [(impl, impl.build())]
    for other in others:
        try:
            built.append((other, other.build()))
        except Exception as exc:
            text = str(exc).strip()
            note(
                f"baseline {other.name} skipped: {text.splitlines()[0] if text else type(exc).__name__}"
            )
    return built


def shape_rows(run: BenchSession, built: list, shape: dict, label: str) -> tuple[list, list]:
    """Every candidate of `built` checked and timed at `shape` in `run`: the table rows (the
    first one carrying its speedup over each other, all timed on this one device) and the
    records."""
    rows, records = [], []
    for candidate, fn in built:
        note(f"{candidate.name} {label} {run.dtype}: checking and timing")
        row, record = run.one(candidate, fn, shape)
        rows.append(row)
        if record is not None:
            records.append(record)
    main_row = rows[0]
    if main_row.get("median_ms"):
        main_row["speedup_vs"] = {
            row["implementation"]: row["median_ms"] / main_row["median_ms"]
            for row in rows[1:]
            if row.get("median_ms")
        }
    return rows, records
