"""Every figure the gate and the README show, recomputed from the samples the records carry.

A record stores its samples (one time per call, or one pair of calls per sample) beside
figures derived from them when it was written: a median, TFLOP/s, TB/s, % of cuBLAS. Those
stored figures are not read. Each is recomputed here from the samples, so a record whose
samples say 3x slower reads 3x slower, whatever its other fields say. A stored figure that
disagrees with its own samples is named in `ResultSet.disagreements` (a bug in the code that
wrote it); a figure without samples behind it is marked so (`from_samples` False) and the
gate does not judge on it. kernelab.lab.results.derive_all applies these to a whole ResultSet.
"""

from __future__ import annotations

from kernelab.harness import stats
from kernelab.harness.records import Record

# Stored and recomputed agree when they are this close: the same samples through the same
# quantile, differing only by float rounding (or a 1-ulp change in the median's definition).
AGREE_REL = 1e-3


def sample_median(samples: list[float] | None) -> float | None:
    """The median (kernelab's quantile 0.5) of positive finite samples, or None without."""
    good = sorted(float(s) for s in samples or [] if isinstance(s, (int, float)) and s > 0)
    return stats.quantile(good, 0.5) if good else None


def from_samples(record: Record) -> bool:
    return bool(record.extra.get("from_samples"))


def _differs(stored, derived) -> bool:
    if stored is None or derived is None:
        return False  # nothing stored to disagree with
    return abs(stored - derived) > AGREE_REL * max(abs(derived), 1e-12)


def _note(disagreements: list[str], where: str, what: str, stored, derived) -> None:
    if _differs(stored, derived):
        disagreements.append(f"{where}: stored {what} {stored:.6g}, its samples give {derived:.6g}")


def _where(record: Record) -> str:
    shape = "x".join(str(v) for v in record.shape.values())
    return f"{record.extra.get('source_file', '?')}: {record.implementation} {shape} {record.dtype}"


def rederive_record(record: Record, disagreements: list[str]) -> None:
    """Replace the record's median, stats and rates with those of its samples; without
    samples, mark it (the stored figures stay for display, never for a verdict)."""
    if not record.samples_ms or sample_median(record.samples_ms) is None:
        record.extra = {**record.extra, "from_samples": False}
        return
    where = _where(record)
    _rederive_work(record, where, disagreements)
    summary = stats.summarize([s for s in record.samples_ms if s > 0]).to_dict()
    _note(disagreements, where, "median ms", record.stats.get("median"), summary["median"])
    median = summary["median"]
    tflops = record.flops / median / 1e9 if record.flops else None
    gbps = record.bytes / median / 1e6 if record.bytes else None
    _note(disagreements, where, "TFLOP/s", record.achieved_tflops, tflops)
    _note(disagreements, where, "GB/s", record.achieved_gbps, gbps)
    record.stats = summary
    record.achieved_tflops, record.achieved_gbps = tflops, gbps
    record.extra = {**record.extra, "from_samples": True}


def _rederive_work(record: Record, where: str, disagreements: list[str]) -> None:
    """FLOPs and bytes of one call from the cost model at the record's shape and dtype, so a
    record cannot claim more work than its shape does; ops without a model keep theirs."""
    from kernelab.spec.reference import get_op

    try:
        cost = get_op(record.op).cost(record.shape, record.dtype)
    except Exception:  # noqa: BLE001 - an op or shape the cost models do not take
        return
    _note(disagreements, where, "FLOPs", record.flops or None, cost.flops or None)
    _note(disagreements, where, "bytes", record.bytes or None, cost.bytes or None)
    record.flops, record.bytes = float(cost.flops), float(cost.bytes)


def rederive_pct_of_cublas(records: list[Record], disagreements: list[str]) -> None:
    """The SGEMM ladder's % of cuBLAS: cuBLAS's median over the step's, both from samples,
    both from the same file (one run) and shape. Without a cuBLAS record from samples in that
    run, the step has no % (None), whatever it stored."""
    cublas: dict[tuple, float] = {}
    for r in records:
        if r.implementation == "torch.mm" and from_samples(r):  # not "torch.mm (again)"
            cublas[(r.extra.get("source_file"), r.mode, _shape_key(r))] = r.median_ms
    for r in records:
        base = cublas.get((r.extra.get("source_file"), r.mode, _shape_key(r)))
        pct = 100.0 * base / r.median_ms if base and from_samples(r) else None
        _note(disagreements, _where(r), "% of cuBLAS", r.extra.get("pct_of_cublas"), pct)
        r.extra = {**r.extra, "pct_of_cublas": pct}


def _shape_key(record: Record) -> tuple:
    return tuple(sorted(record.shape.items()))


def rederive_paired(row: dict, disagreements: list[str]) -> None:
    """One hgemm paired row: the median, interval and band of the per-pair ratio cuBLAS time
    / step time, from the pairs themselves (kernelab.harness.paired's definitions)."""
    from kernelab.harness.paired import median_rank_interval

    reference, candidate = row.get("reference_ms") or [], row.get("candidate_ms") or []
    pairs = [(r, c) for r, c in zip(reference, candidate, strict=False) if r > 0 and c > 0]
    if not pairs or len(reference) != len(candidate):
        row["from_samples"] = False
        return
    ratios = sorted(100.0 * r / c for r, c in pairs)
    low, high = median_rank_interval(len(ratios))
    derived = {
        "pairs": len(ratios),
        "pct_median": stats.quantile(ratios, 0.5),
        "pct_ci95": [ratios[low], ratios[high]],
        "pct_p20": stats.quantile(ratios, 0.2),
        "pct_p80": stats.quantile(ratios, 0.8),
        "pairs_ahead": sum(x >= 100.0 for x in ratios),
        "cublas_median_ms": sample_median([r for r, _ in pairs]),
        "step_median_ms": sample_median([c for _, c in pairs]),
    }
    where = f"hgemm/summary.json paired: {row.get('impl')} {row.get('size')}^3 {row.get('mode')}"
    _note(disagreements, where, "median %", row.get("pct_median"), derived["pct_median"])
    row.update(derived, from_samples=True)


def rederive_hgemm_timing(rows: list[dict], records: list[Record],
                          disagreements: list[str]) -> None:  # fmt: skip
    """The hgemm ladder's timing rows from the samples of hgemm/records.json (the summary's
    rows carry only medians): median, TFLOP/s, rel_noise and % of the run's first cuBLAS
    timing at the same size and mode. A row with no record behind it is marked."""
    by_case = {(r.implementation, r.shape.get("m"), r.mode): r for r in records if from_samples(r)}
    for row in rows:
        record = by_case.get((row.get("impl"), row.get("size"), row.get("mode")))
        if record is None:
            row["from_samples"] = False
            continue
        where = f"hgemm/summary.json timing: {row['impl']} {row['size']}^3 {row['mode']}"
        _note(disagreements, where, "median ms", row.get("median_ms"), record.median_ms)
        row.update(median_ms=record.median_ms, rel_noise=record.rel_noise, from_samples=True)
        if row.get("tflops") is not None or record.achieved_tflops:
            row["tflops"] = record.achieved_tflops
        if row.get("gbps") is not None:  # the transpose: a copy, not a GEMM
            row["gbps"] = record.achieved_gbps
    for row in rows:
        cublas = next((r for r in rows if r.get("impl") == "torch.mm" and r.get("from_samples")
                       and r["size"] == row.get("size") and r["mode"] == row.get("mode")), None)  # fmt: skip
        pct = (100.0 * cublas["median_ms"] / row["median_ms"]
               if cublas and row.get("from_samples") else None)  # fmt: skip
        where = (
            f"hgemm/summary.json timing: {row.get('impl')} {row.get('size')}^3 {row.get('mode')}"
        )
        _note(disagreements, where, "% of cuBLAS", row.get("pct_of_cublas"), pct)
        row["pct_of_cublas"] = pct


def rederive_rounds(rows: list[dict]) -> None:
    """Interleaved rounds store one % per round, each from two medians whose samples were
    not kept: no samples stand behind them, so they are marked and never judged on."""
    for row in rows:
        row["from_samples"] = False
