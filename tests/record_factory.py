"""Records made to order for the tests of records, compare and the report."""

from __future__ import annotations

from kernelab.harness.records import Record
from kernelab.harness.stats import summarize


def make_record(median_spread=(1.0, 0.0), implementation="torch.softmax", shape=None, **fields):
    """A record whose samples have the given median (ms) and relative half-spread."""
    median, spread = median_spread
    samples = [median * (1 - spread), median, median * (1 + spread)] * 4
    return Record(
        op=fields.pop("op", "softmax"),
        implementation=implementation,
        shape=shape or {"rows": 4096, "cols": 4096},
        dtype=fields.pop("dtype", "bf16"),
        mode=fields.pop("mode", "cold"),
        samples_ms=samples,
        stats=summarize(samples).to_dict(),
        gpu="NVIDIA H200",
        gpu_id="h200",
        driver="580.65.06",
        flops=5 * 4096 * 4096,
        bytes=2 * 2 * 4096 * 4096,
        check={"ok": True, "error": 0.1, "threshold": 1.0},
        **fields,
    )
