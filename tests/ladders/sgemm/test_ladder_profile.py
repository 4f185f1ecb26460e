"""`kernelab ladder sgemm --profile`: each step's claimed metric against the step before.

On the CPU: the direction rules on constructed metric sets (a ladder whose counters follow
each kernel's arithmetic passes; one broken claim fails exactly that step), the metrics asked
of ncu, and the whole command through --import on a constructed ncu CSV page. The real run
(ncu on the H200, every step once) is the gpu-marked test at the end.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from kernelab.cli import main
from kernelab.errors import KernelabError
from kernelab.harness.records import load_records
from kernelab.ladders.sgemm import verify as v
from kernelab.ladders.sgemm.steps import STEPS, get_step

FFMA = float(4096**3)  # thread-level FFMAs of a 4096^3 GEMM
WARP_FFMA = FFMA / 32


def ladder_metrics() -> dict[int, dict]:
    """Counters a healthy ladder would show at 4096^3, from each kernel's arithmetic (the
    figures in verify.CHECKS' reasons)."""
    base = {v.FFMA_THREAD_INSTRUCTIONS: FFMA}
    w = WARP_FFMA
    steps = {
        1: {v.GLOBAL_LD_REQUESTS: 2 * w, v.GLOBAL_LD_SECTORS: 33 * w, v.DURATION: 275e6},
        2: {v.GLOBAL_LD_REQUESTS: 2 * w, v.GLOBAL_LD_SECTORS: 5 * w, v.DURATION: 21.5e6},
        3: {
            v.GLOBAL_LD_REQUESTS: 2 * w / 32,
            v.GLOBAL_LD_SECTORS: 5 * w / 32,
            v.SHARED_LD_INSTRUCTIONS: 1.25 * w,
            v.L2_READ_SECTORS_FROM_L1: 3.0e9,
            v.DRAM_READ_BYTES: 4.0e9,
            v.DURATION: 15.9e6,
        },
        4: {
            v.SHARED_LD_INSTRUCTIONS: 0.375 * w,
            v.LSU_INSTRUCTIONS: 0.44 * w,
            v.FMA_PIPE_INSTRUCTIONS: 1.0 * w,
            v.INSTRUCTIONS: 2.0 * w,
            v.DURATION: 7.5e6,
        },
        5: {
            v.LSU_INSTRUCTIONS: 0.094 * w,
            v.FMA_PIPE_INSTRUCTIONS: 1.05 * w,
            v.INSTRUCTIONS: 1.2 * w,
            v.GLOBAL_LD_INSTRUCTIONS: w * 8 / 512,
            v.SHARED_LD_INSTRUCTIONS: w * 32 / 512,
            v.DURATION: 8.0e6,
        },
        6: {
            v.GLOBAL_LD_INSTRUCTIONS: w * 2 / 512,
            v.SHARED_LD_INSTRUCTIONS: w * 32 / 512,
            v.SHARED_ST_INSTRUCTIONS: w * 5 / 512,
            v.BANK_CONFLICTS_LD: w * 32 / 512,
            v.BANK_CONFLICTS_ST: w * 5 / 512,
            v.DURATION: 4.2e6,
        },
        7: {
            v.SHARED_LD_INSTRUCTIONS: w * 32 / 512,
            v.SHARED_ST_INSTRUCTIONS: w * 5 / 512,
            v.BANK_CONFLICTS_LD: 0,
            v.BANK_CONFLICTS_ST: 0,
            v.DURATION: 4.0e6,
        },
        8: {v.DURATION: 3.95e6, v.SHARED_LD_INSTRUCTIONS: w / 16, v.SHARED_LD_WAVEFRONTS: w / 8},
        9: {v.SHARED_LD_INSTRUCTIONS: w / 16, v.SHARED_LD_WAVEFRONTS: w / 16, v.DURATION: 3.6e6},
        10: {v.LONG_SCOREBOARD_STALL: 0.4, v.BARRIER_STALL: 0.9, v.INSTRUCTIONS: 1.25 * w},
        11: {v.INSTRUCTIONS: 1.13 * w, v.L2_READ_SECTORS_FROM_L1: 1.0e9, v.DURATION: 3.3e6},
        12: {
            v.SHORT_SCOREBOARD_STALL: 0.2,
            v.FMA_PIPE_INSTRUCTIONS: 1.0 * w,
            v.SM_INSTRUCTIONS: 1.1 * w,
            v.SHARED_LD_INSTRUCTIONS: w / 21,
            v.BANK_CONFLICTS_LD: 0,
            v.DURATION: 3.0e6,
        },
    }
    steps[13] = {v.SHORT_SCOREBOARD_STALL: 0.3, v.DURATION: 2.9e6}
    steps[11] |= {v.SHORT_SCOREBOARD_STALL: 0.6}
    steps[9] |= {v.LONG_SCOREBOARD_STALL: 1.6, v.BARRIER_STALL: 1.1}
    steps[10] |= {v.L2_READ_SECTORS_FROM_L1: 1.0e9, v.DURATION: 3.4e6}
    return {n: base | m for n, m in steps.items()}


SASS = {6: {"ldg_128": 18}, 10: {"ldgsts_128": 18}, 12: {"ldgsts_128": 8}}


def profiles(metrics: dict[int, dict], sass: dict | None = None) -> dict[int, v.StepProfile]:
    sass = SASS if sass is None else sass
    return {
        n: v.StepProfile(
            step=n,
            kernel=get_step(n).kernel,
            metrics=m,
            sass=sass.get(n, {}),
            duration_ns=m.get(v.DURATION),
        )
        for n, m in metrics.items()
    }


def by_step(verdicts) -> dict[int, v.StepVerdict]:
    return {x.step.number: x for x in verdicts}


# ---- the rules ------------------------------------------------------------------------------


def check(expect: str, bound: float) -> v.Check:
    return v.Check(v.KERNEL_TIME, expect, bound, "test")


@pytest.mark.parametrize(
    ("expect", "bound", "value", "previous", "verdict"),
    [
        ("down", 0.5, 4.0, 10.0, "PASS"),
        ("down", 0.5, 6.0, 10.0, "FAIL"),  # down, but not by the claimed factor
        ("down", 1.0, 9.99, 10.0, "PASS"),
        ("down", 1.0, 10.0, 10.0, "FAIL"),  # did not move
        ("down", 1.03, 10.2, 10.0, "PASS"),  # a tolerance: "not slower"
        ("down", 1.03, 10.4, 10.0, "FAIL"),
        ("down", 0.5, 0.0, 0.0, "PASS"),  # nothing left to remove
        ("down", 0.5, 1.0, 0.0, "FAIL"),
        ("up", 1.1, 12.0, 10.0, "PASS"),
        ("up", 1.1, 10.5, 10.0, "FAIL"),
        ("up", 1.0, 10.0, 10.0, "FAIL"),
        ("up", 1.0, 0.5, 0.0, "PASS"),
        ("at_least", 8.0, 16.5, None, "PASS"),
        ("at_least", 8.0, 4.0, 16.5, "FAIL"),
        ("at_most", 1.5, 1.0, None, "PASS"),
        ("at_most", 1.5, 2.0, None, "FAIL"),
        ("present", 0.0, 18.0, None, "PASS"),
        ("present", 0.0, 0.0, 18.0, "FAIL"),
        ("down", 0.5, None, 10.0, "MISSING"),
        ("down", 0.5, 3.0, None, "NO-PREV"),
    ],
)
def test_judge(expect, bound, value, previous, verdict):
    assert v.judge(check(expect, bound), value, previous) == verdict


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError):
        v.Check(v.KERNEL_TIME, "sideways", 1.0, "test")


def test_quantity_reads_ratios_scales_and_sass():
    q = v.SHARED_LD_PER_FFMA
    assert q.value({v.SHARED_LD_INSTRUCTIONS: 64, v.FFMA_THREAD_INSTRUCTIONS: 1024}, {}) == 2.0
    assert q.value({v.SHARED_LD_INSTRUCTIONS: 64}, {}) is None  # no denominator
    assert q.value({v.SHARED_LD_INSTRUCTIONS: 64, v.FFMA_THREAD_INSTRUCTIONS: 0}, {}) is None
    assert q.value({v.SHARED_LD_INSTRUCTIONS: "n/a", v.FFMA_THREAD_INSTRUCTIONS: 5}, {}) is None
    assert v.LDG_128.value({"ldg_128": 99}, {"ldg_128": 18}) == 18.0  # SASS, not metrics
    assert v.LDG_128.metric_names() == ()
    assert v.FFMA_SHARE.value({v.FFMA_THREAD_INSTRUCTIONS: 3200, v.INSTRUCTIONS: 200}, {}) == 0.5
    assert "32" in v.SHARED_LD_PER_FFMA.formula


def test_every_step_has_a_required_check_and_checks_name_real_steps():
    assert set(v.CHECKS) == {s.number for s in STEPS}
    for number, checks in v.CHECKS.items():
        assert any(c.required for c in checks), number
    assert not any(c.needs_previous for c in v.CHECKS[1])  # step 1 has nothing before it


def test_needed_metrics_are_exactly_what_the_chosen_checks_read():
    wanted = v.needed_metrics([get_step(7)])
    assert set(wanted) == {
        v.DURATION,
        v.BANK_CONFLICTS_LD,
        v.BANK_CONFLICTS_ST,
        v.SHARED_LD_INSTRUCTIONS,
        v.SHARED_ST_INSTRUCTIONS,
    }
    every = v.needed_metrics(STEPS)
    assert len(every) == len(set(every))
    assert not any(name.startswith(v.SASS_PREFIX) for name in every)


GH100_METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "ncu" / "query_metrics_gh100.txt.gz"


def test_every_metric_asked_of_ncu_exists_on_gh100():
    """An unknown name makes ncu refuse the whole run: check them against `ncu
    --query-metrics` as the H200 printed it (base name, then a suffix its type allows)."""
    kinds = {}
    for line in gzip.open(GH100_METRICS, "rt"):
        parts = line.split()
        if len(parts) >= 2 and parts[1] in ("Counter", "Ratio", "Throughput"):
            kinds[parts[0].rsplit(".", 1)[-1]] = parts[1]
    suffixes = {"Counter": (".sum",), "Ratio": (".ratio", ".pct"), "Throughput": (".pct",)}
    for name in v.needed_metrics(STEPS):
        base, _, suffix = name.partition(".")
        assert base in kinds, name
        assert "." + suffix in suffixes[kinds[base]], name


def test_predecessors_join_the_profile():
    assert [s.number for s in v.with_predecessors([get_step(7)])] == [6, 7]
    assert [s.number for s in v.with_predecessors([get_step(1)])] == [1]
    assert [s.number for s in v.with_predecessors([get_step(11), get_step(3)])] == [2, 3, 10, 11]


def test_step_for_kernel_reads_ncu_names():
    assert v.step_for_kernel("sgemm_naive").number == 1
    assert v.step_for_kernel("sgemm_hopper_tiles(int, int, int, float)").number == 11
    assert v.step_for_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") is None


def test_launcher_runs_each_step_in_the_profiling_range():
    cmd = v.launcher_command([get_step(1), get_step(6)], 2048)
    assert cmd[1:3] == ["-m", "kernelab.ladders.sgemm.verify"]
    assert cmd[cmd.index("--steps") + 1] == "1,6"
    assert cmd[cmd.index("--size") + 1] == "2048"
    assert v.main(["--size", "0"]) == 2


def test_one_ncu_run_profiles_every_step_inside_the_profiling_range(fake_ncu, tmp_path):  # noqa: F811
    from kernelab.ladders.sgemm.ladder import verify_ladder
    from kernelab.profiling.runner import PROFILE_RANGE

    with pytest.raises(KernelabError, match="no kernel of sgemm:01, sgemm:02"):
        # the stand-in writes the cuBLAS fixture report: no ladder kernel in it
        verify_ladder([get_step(2)], 2048, report_path=tmp_path / "ladder.ncu-rep")
    argv = fake_ncu()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--nvtx-include") + 1] == PROFILE_RANGE + "/"
    assert "--launch-count" not in argv  # every launch in the range: one per step
    sections = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert sections == list(v.VERIFY_SECTIONS)
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert set(v.needed_metrics([get_step(1), get_step(2)])) <= set(metrics)
    assert argv[argv.index("-o") + 2 :] == v.launcher_command([get_step(1), get_step(2)], 2048)


# ---- a whole ladder of constructed metrics ----------------------------------------------------


def test_a_ladder_that_follows_its_arithmetic_passes_every_step():
    verdicts = by_step(v.verify(profiles(ladder_metrics()), STEPS))
    assert set(verdicts) == {s.number for s in STEPS}
    assert {n: x.verdict for n, x in verdicts.items()} == {s.number: "PASS" for s in STEPS}
    assert verdicts[1].previous is None
    assert verdicts[2].previous.number == 1
    assert verdicts[2].speedup_vs_prev == pytest.approx(275 / 21.5)
    sectors = verdicts[2].checks[0]
    assert sectors.previous == pytest.approx(16.5) and sectors.value == pytest.approx(2.5)
    assert sectors.ratio == pytest.approx(2.5 / 16.5)


def test_an_informational_claim_that_fails_does_not_fail_the_step():
    verdicts = by_step(v.verify(profiles(ladder_metrics()), STEPS))
    l2 = next(c for c in verdicts[11].checks if c.quantity == v.L2_READS.name)
    assert not l2.required and l2.verdict == "FAIL"  # equal L2 reads at 128x128 tiles
    assert verdicts[11].verdict == "PASS"


@pytest.mark.parametrize(
    ("step", "metric", "value", "failing_quantity"),
    [
        (2, v.GLOBAL_LD_SECTORS, 33 * WARP_FFMA, v.SECTORS_PER_REQUEST.name),  # not coalesced
        (3, v.GLOBAL_LD_REQUESTS, WARP_FFMA, v.REQUESTS_PER_FFMA.name),  # tiles not reused
        (7, v.BANK_CONFLICTS_LD, WARP_FFMA * 40 / 512, v.LD_CONFLICTS.name),  # more conflicts
        (8, v.DURATION, 4.6e6, v.KERNEL_TIME.name),  # the tuned tile is slower than step 7
        (10, v.LONG_SCOREBOARD_STALL, 2.0, v.LONG_SCOREBOARD.name),  # nothing hidden
        (11, v.INSTRUCTIONS, 1.5 * WARP_FFMA, v.FFMA_SHARE.name),  # the loop got fatter
        (12, v.SHORT_SCOREBOARD_STALL, 0.7, v.SHORT_SCOREBOARD.name),  # LDS latency exposed
        (12, v.SM_INSTRUCTIONS, 1.2 * WARP_FFMA, v.FMA_PIPE_SHARE.name),  # 83 % < 89 %
    ],
)
def test_one_broken_claim_fails_exactly_its_step(step, metric, value, failing_quantity):
    metrics = ladder_metrics()
    metrics[step][metric] = value
    verdicts = by_step(v.verify(profiles(metrics), STEPS))
    failed = {n for n, x in verdicts.items() if x.verdict != "PASS"}
    # a changed counter can also be the *previous* value of the next step's check
    assert step in failed and failed <= {step, step + 1}
    bad = [c for c in verdicts[step].checks if c.required and c.verdict == "FAIL"]
    assert [c.quantity for c in bad] == [failing_quantity]


def test_missing_sass_or_metric_leaves_the_step_incomplete():
    verdicts = by_step(v.verify(profiles(ladder_metrics(), sass={}), STEPS))
    assert verdicts[6].verdict == "INCOMPLETE"  # LDG.128 unknown, the rest passes
    assert next(c for c in verdicts[6].checks if c.quantity == v.LDG_128.name).verdict == "MISSING"
    metrics = ladder_metrics()
    del metrics[4][v.SHARED_LD_INSTRUCTIONS]
    assert by_step(v.verify(profiles(metrics), STEPS))[4].verdict == "INCOMPLETE"


def test_without_the_step_before_relative_checks_cannot_decide():
    metrics = ladder_metrics()
    only = {7: metrics[7]}
    verdict = v.verify(profiles(only), [get_step(7)])[0]
    assert verdict.previous is None
    assert {c.verdict for c in verdict.checks} == {"NO-PREV"}
    assert verdict.verdict == "INCOMPLETE"


def test_steps_not_profiled_are_left_out():
    metrics = ladder_metrics()
    verdicts = v.verify(profiles({1: metrics[1], 2: metrics[2]}), STEPS)
    assert [x.step.number for x in verdicts] == [1, 2]
    assert v.summary(verdicts) == {"PASS": 2}


# ---- the command, from a constructed ncu CSV page ----------------------------------------------


def write_raw_page(path, metrics: dict[int, dict], device: str = "NVIDIA H200") -> None:
    """ncu's `--page raw --csv` layout: header, units row, one row per kernel."""
    names = sorted({name for m in metrics.values() for name in m})
    header = ["ID", "Kernel Name", "device__attribute_display_name", *names]
    units = ["", "", "", *("ns" if n == v.DURATION else "" for n in names)]
    with open(path, "w", newline="") as f:
        out = csv.writer(f, quoting=csv.QUOTE_ALL)
        out.writerow(header)
        out.writerow(units)
        for i, (number, m) in enumerate(sorted(metrics.items())):
            values = ["" if m.get(n) is None else repr(m[n]) for n in names]
            out.writerow([str(i), get_step(number).kernel, device, *values])


def run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


NO_SASS_STEPS = "2-5,7-9"  # their checks read ncu metrics only: no nvcc needed


def test_import_verifies_a_saved_report_and_records_it(tmp_path, capsys):
    page = tmp_path / "ladder_raw.csv"
    metrics = ladder_metrics()
    metrics[8][v.DURATION] = 4.6e6  # as measured on the H200: step 8 slower than step 7
    write_raw_page(page, metrics)
    out = tmp_path / "verify.json"
    args = ["ladder", "sgemm", "--profile", "--import", str(page), "--steps", NO_SASS_STEPS]
    code, stdout, _ = run_cli([*args, "--json", "--out", str(out)], capsys)
    assert code == 0
    result = json.loads(stdout)
    assert result["size"] == 4096 and result["gpu"] == "NVIDIA H200"
    assert [s["step"] for s in result["steps"]] == [f"sgemm:0{n}" for n in (2, 3, 4, 5, 7, 8, 9)]
    verdicts = {s["step"]: s["verdict"] for s in result["steps"]}
    assert verdicts.pop("sgemm:08") == "FAIL"
    assert set(verdicts.values()) == {"PASS"}
    assert result["counts"] == {"PASS": 6, "FAIL": 1} and result["all_passed"] is False
    step2 = result["steps"][0]
    assert step2["previous"] == "sgemm:01" and step2["claim"] == get_step(2).proof
    assert step2["checks"][0]["previous"] == pytest.approx(16.5)

    records = load_records(out)
    assert [r.implementation for r in records] == [s["step"] for s in result["steps"]]
    assert {r.mode for r in records} == {"ncu"}
    assert records[0].median_ms == pytest.approx(21.5)
    assert records[0].gpu_id == "h200"
    assert records[0].extra["verification"]["verdict"] == "PASS"

    code, stdout, _ = run_cli(args, capsys)  # the table for a person
    assert code == 0
    assert "sgemm:08" in stdout and "FAIL" in stdout and "PASS" in stdout
    assert "kernel time" in stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins")
def test_import_reads_the_sass_facts_of_the_built_steps(tmp_path, capsys):
    page = tmp_path / "ladder_raw.csv"
    metrics = ladder_metrics()
    write_raw_page(page, {n: metrics[n] for n in (5, 6)})
    code, stdout, _ = run_cli(
        ["ladder", "sgemm", "--profile", "--import", str(page), "--steps", "6", "--json"], capsys
    )
    assert code == 0
    step6 = json.loads(stdout)["steps"][0]
    ldg = next(c for c in step6["checks"] if c["quantity"] == v.LDG_128.name)
    assert ldg["verdict"] == "PASS" and ldg["value"] > 0
    assert step6["verdict"] == "PASS"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "--sizes", "1024,4096"], "one size"),
        (["--import", "x.csv"], "--import goes with --profile"),
        (["--profile", "--import", "/nonexistent/ladder.csv"], "no such report"),
    ],
)
def test_bad_requests_are_one_line(args, message, capsys):
    code, stdout, err = run_cli(["ladder", "sgemm", *args], capsys)
    assert code == 2 and stdout == ""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_report_without_ladder_kernels_is_refused(capsys):
    page = Path(__file__).parents[2] / "fixtures" / "ncu" / "gemm_focused_raw.csv"
    code, _, err = run_cli(["ladder", "sgemm", "--profile", "--import", str(page)], capsys)
    assert code == 2 and "no kernel of the chosen steps" in err


def test_profile_without_a_gpu_says_so(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_cli(["ladder", "sgemm", "--profile", "--steps", "2"], capsys)
    assert code == 2 and "needs a CUDA GPU" in err and "--import" in err


# ---- on the H200 ----------------------------------------------------------------------------


@pytest.mark.gpu
def test_every_step_profiled_once_and_every_metric_read(tmp_path):
    """The real ncu run at 1024^3 (seconds): one kernel per step, no metric name unknown to
    ncu, and the claims that are physics (coalescing, LDG.128, LDGSTS) hold."""
    import torch

    from kernelab.ladders.sgemm.ladder import verify_ladder

    result, records = verify_ladder(list(STEPS), 1024, report_path=tmp_path / "ladder.ncu-rep")
    steps = {s["step"]: s for s in result["steps"]}
    assert list(steps) == [s.name for s in STEPS]
    assert result["gpu"] == torch.cuda.get_device_name(0)  # the card it ran on, named by ncu
    for name, step in steps.items():
        assert step["duration_ms"] and step["duration_ms"] > 0, name
        for c in step["checks"]:
            assert c["verdict"] not in ("MISSING", "NO-PREV"), (name, c["quantity"])
    assert steps["sgemm:01"]["verdict"] == "PASS"
    assert steps["sgemm:02"]["verdict"] == "PASS"
    for name, quantity in (("sgemm:06", v.LDG_128.name), ("sgemm:10", v.LDGSTS_128.name)):
        assert next(c for c in steps[name]["checks"] if c["quantity"] == quantity)["verdict"] == (
            "PASS"
        )
    assert len(records) == len(STEPS)
