"""The report's section on the kernels as PyTorch calls them: every target under
triton.testing.do_bench beside kernelab's own timer, and the host cost per call against
torch's (benchmarks/pytorch_targets.py).

Figures come from the samples the records hold: ours from samples_ms, the baseline from
extra["baseline_samples_ms"], both do_bench's, taken in the same run. The harness column is the
cold median kernelab's timer returned in that run (the run kept its median, not its samples),
and the host figures are loop means (harness/launch_cost.py).
"""

from __future__ import annotations

from statistics import median

from kernelab.lab.report import Heading, Paragraph, Report, Table
from kernelab.lab.results import ResultSet

HOST_GOAL_US = 10.0  # benchmarks/pytorch_targets.py: ours may cost this much more than torch


def _shape(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def _goal(record) -> tuple[str, float] | None:
    """("pct" or "tbps", the goal) from the record's extra["goal"], e.g. "pct >= 90.0"."""
    text = str(record.extra.get("goal", ""))
    kind, _, value = text.partition(" >= ")
    try:
        return (kind, float(value)) if kind in ("pct", "tbps") else None
    except ValueError:
        return None


def target_row(record) -> dict | None:
    """The target's figures recomputed from its samples; None for a record that lacks them."""
    goal = _goal(record)
    base_samples = record.extra.get("baseline_samples_ms") or []
    if goal is None or not record.samples_ms or not base_samples:
        return None
    kind, wanted = goal
    ours_ms, base_ms = median(record.samples_ms), median(base_samples)
    harness = record.extra.get("harness_cold_median_ms") or {}
    host = record.extra.get("host_cost") or {}

    def figure(ours: float, base: float) -> float:
        # TB/s: minimal bytes over the median; %: the baseline's median over ours
        return record.bytes / ours / 1e9 if kind == "tbps" else base / ours * 100.0

    value = figure(ours_ms, base_ms)
    # a rate target's run also timed a copy of the same bytes (benchmarks/pytorch_targets.py):
    # the ceiling at that size, which the timer's fixed costs lower more at 256 MiB than at 1 GiB
    copy_ms = record.extra.get("copy_ms")
    copy_tbps = record.bytes / copy_ms / 1e9 if kind == "tbps" and copy_ms else None
    harness_value = (
        figure(harness["ours"], harness["base"]) if {"ours", "base"} <= set(harness) else None
    )
    return {
        "kernel": record.implementation,
        "shape": _shape(record.shape),
        "dtype": record.dtype,
        "goal": f">= {wanted:g} {'TB/s' if kind == 'tbps' else '% of ' + record.extra.get('baseline', '?')}",
        "value": value,
        "unit": "TB/s" if kind == "tbps" else "%",
        "harness": harness_value,
        "host": (host.get("ours") or {}).get("wall_us"),
        "host_base": (host.get("base") or {}).get("wall_us"),
        "met": value >= wanted,
        "copy_tbps": copy_tbps,
        "pct_of_copy": copy_ms / ours_ms * 100.0 if copy_tbps else None,
    }


def _compiled(row: dict) -> bool:
    """Whether every plan the row's run reported replayed its steps from compiled_replay.c."""
    plans = [plan for plan in (row.get("plans") or {}).values() if isinstance(plan, dict)]
    return bool(plans) and all(plan.get("compiled_steps", 0) >= 1 for plan in plans)


def _launch_path(rows: list[dict]) -> str:
    """Which replay path the run's Triton ops took, as its rows recorded it."""
    triton = [row for row in rows
              if str(row.get("impl", "")).startswith("triton.") and "error" not in row]  # fmt: skip
    paths = {row.get("direct_launch") for row in triton}
    if not triton:
        return ""
    if paths == {True} and all(_compiled(row) for row in triton):
        return (
            "The Triton ops replayed through direct launches made from C "
            "(cuLaunchKernel, runtime/compiled_replay.c)."
        )
    if paths == {True}:
        return "The Triton ops replayed through direct launches (cuLaunchKernel)."
    if paths == {False}:
        return "The Triton ops replayed through Triton's launcher (KERNELAB_DIRECT_LAUNCH=0)."
    if paths == {None}:
        return (
            "The Triton ops replayed through Triton's launcher: the run's code predates "
            "direct launches (launch_plans.DIRECT, now the default)."
        )
    return "The Triton ops' replay path differs between rows (see the run's launch_costs)."


def pytorch_section(
    report: Report, results: ResultSet, *, card: str = "", source: str = "", note: str = ""
) -> None:
    """The do_bench table and the host-cost table of the run in `results`. card: a heading
    suffix for a card other than the report's own; source: the run's path as the reader should
    see it (default: results.pytorch_file); note: a sentence to add to the introduction."""
    rows = [row for r in results.pytorch_records if (row := target_row(r)) is not None]
    if not rows and not results.launch_costs:
        return
    when = sorted({r.timestamp[:10] for r in results.pytorch_records if r.timestamp})
    heading = "As PyTorch calls them: the targets under triton.testing.do_bench"
    report.add(
        Heading(f"{heading}, {card}" if card else heading),
        Paragraph(
            f"From {source or results.pytorch_file} ({', '.join(when) or 'an unknown day'}), made by "
            "benchmarks/pytorch_targets.py: each kernel checked against the float64 reference, "
            "then timed with triton.testing.do_bench (L2 flushed before each call, medians of "
            "its samples, ours and the baseline in alternating rounds of the same run) beside "
            "kernelab's cold timer in the same run. do_bench issues calls back to back, so a "
            "host launch path longer than the kernel shows in it; kernelab's timer reports "
            "device time only. Wall: microseconds per call over back-to-back calls, ending in "
            "one synchronise." + (f" {note}" if note else "")
        ),
    )
    if rows:
        table = []
        for row in rows:
            harness = "-" if row["harness"] is None else f"{row['harness']:.2f} {row['unit']}"
            host = (
                f"{row['host']:.0f} / {row['host_base']:.0f}"
                if row["host"] is not None and row["host_base"] is not None
                else "-"
            )
            copy = (
                f"{row['copy_tbps']:.2f} TB/s ({row['pct_of_copy']:.1f} %)"
                if row["copy_tbps"] is not None
                else "-"
            )
            table.append([row["kernel"], row["shape"], row["dtype"], row["goal"],
                          f"{row['value']:.2f} {row['unit']}", harness, copy, host,
                          "yes" if row["met"] else "NO"])  # fmt: skip
        met = sum(row["met"] for row in rows)
        report.add(
            Table(
                [
                    "kernel",
                    "shape",
                    "dtype",
                    "goal",
                    "do_bench",
                    "kernelab timer",
                    "copy, same bytes (ours %)",
                    "wall us/call (ours / baseline)",
                    "met",
                ],
                table,
            ),  # fmt: skip
            Paragraph(f"{met} of {len(rows)} targets met under do_bench."),
        )
    costs = []
    for row in results.launch_costs:
        ours, base = row.get("ours") or {}, row.get("base") or {}
        if "wall_us" not in ours or "wall_us" not in base:
            continue
        # the goal is on host cost: the CPU time to issue a call. Wall time per call is the
        # longer of that and the GPU's work, so it stays beside (wall above host: device-bound)
        host, host_base = ours.get("host_us", ours["wall_us"]), base.get("host_us", base["wall_us"])
        within = host <= host_base + HOST_GOAL_US
        costs.append([row.get("impl", "?"), _shape(row.get("shape") or {}), row.get("dtype", ""),
                      f"{host:.1f} ({ours['wall_us']:.1f})",
                      f"{host_base:.1f} ({base['wall_us']:.1f}, {row.get('baseline', '?')})",
                      f"{host - host_base:+.1f}", "yes" if within else "NO"])  # fmt: skip
    if costs:
        report.add(
            Paragraph(
                "Host cost per call at sizes where the GPU work is tiny (the launch path is all "
                f"there is): goal, ours within {HOST_GOAL_US:g} us of torch's equivalent. Host: "
                "CPU time to issue a call; in brackets the wall time per call over the same "
                "loop with its final synchronise, which is the GPU's time where that is longer. "
                + _launch_path(results.launch_costs)
            ),
            Table(
                [
                    "kernel",
                    "shape",
                    "dtype",
                    "ours host us/call (wall)",
                    "torch host us/call (wall)",
                    "host difference",
                    f"within +{HOST_GOAL_US:g} us",
                ],
                costs,
            ),  # fmt: skip
        )
