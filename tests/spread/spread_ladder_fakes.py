"""A stand-in for the reduce ladder's GPU half on the CPU, importable by the Ray workers (the
tests put this folder on their PYTHONPATH): the checks, the read ceiling and the timer
replaced by deterministic functions of (step, n, dtype), so the ladder spread over fake
GPUs and the ladder run here give numbers that must agree exactly."""

from __future__ import annotations

from types import SimpleNamespace

from kernelab.spread.ladders import LadderRunner

CEILING = (3.2e12, "the stand-in's read ceiling")
CUB_LINE = "CUB anchor absent in the stand-in"


def identity():
    from kernelab.harness.ceilings import DeviceIdentity

    return DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))


def fake_check_steps(steps, sizes, dtypes, progress=lambda _: None):
    from kernelab.ladders.reduce.ladder import CHECK_SIZES

    return [{"step": s.name, "n": n, "dtype": d, "ok": True, "error": 0.0, "message": ""}
            for s in steps for d in dtypes for n in sorted(set(CHECK_SIZES) | set(sizes))]  # fmt: skip


def fake_read_ceiling(progress=lambda _: None):
    return CEILING


def fake_median_ms(name: str, n: int, dtype: str) -> float:
    """Steps get faster down the ladder; bf16 moves half the bytes of fp32."""
    rank = 0 if not name.startswith("reduce:") else int(name.split(":")[1][:2])
    return (n * (2 if dtype == "fp32" else 1)) / (1e6 * (1 + rank)) + 1e-3 * (1 + rank)


def fake_time_ladder(steps, sizes, dtypes, *, mode="cold", max_time_s=2.0, progress=None):
    from kernelab.ladders.reduce.ladder import TORCH_ANCHOR, to_record
    from kernelab.spec.reference import get_op

    names = [TORCH_ANCHOR, *(s.name for s in steps)]
    measurements, records = [], []
    for dtype in dtypes:
        for n in sizes:
            cost = get_op("reduce_sum").cost({"n": n}, dtype)
            for name in names:
                ms = fake_median_ms(name, n, dtype)
                timing = SimpleNamespace(median_ms=ms, rel_noise=0.01, samples_ms=[ms] * 3,
                                         mode=mode)  # fmt: skip
                measurements.append({"step": name, "n": n, "dtype": dtype, "median_ms": ms})
                records.append(to_record(name, n, dtype, timing, cost, identity(), {}))
    return measurements, records, CUB_LINE


def install() -> None:
    """The stand-ins in place of the reduce engine's GPU functions, in this process."""
    import kernelab.ladders.reduce.ladder as reduce_ladder

    reduce_ladder.check_steps = fake_check_steps
    reduce_ladder.read_ceiling = fake_read_ceiling
    reduce_ladder.time_ladder = fake_time_ladder


class CpuLadderRunner(LadderRunner):
    """The ladder's runner with the stand-in engine and an H200 named as its card."""

    def __init__(self, **kwargs):
        install()
        super().__init__(**kwargs)

    def identity(self):
        return identity()

    def device_name(self) -> str:
        return identity().name


class FailingLadderRunner(CpuLadderRunner):
    """The stand-in, except that n = 3000 raises on every card."""

    def run(self, payload: dict) -> dict:
        if payload["size"] == 3000:
            raise RuntimeError("the stand-in fails at n=3000")
        return super().run(payload)
