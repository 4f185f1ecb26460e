"""Capturing a timeline on the CPU: a callable, a script that marks steps, a script that does
not, the command line, the drill's launch picking, the example, the nsys CSV path."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from kernelab.cli import main
from kernelab.errors import KernelabError, MissingToolError, NoGPUError
from kernelab.timeline.capture import parse_target, profile_callable, profile_script
from kernelab.timeline.drill import drill, drill_targets
from kernelab.timeline.nsys import load_nsys
from kernelab.timeline.summary import summarize_trace
from kernelab.timeline.trace import parse_trace

LOOP_SCRIPT = """
import sys
from pathlib import Path

import torch

import kernelab.timeline

counter = Path(sys.argv[2])
x = torch.randn(64, 64)
done = 0
try:
    for _ in range(int(sys.argv[1])):
        y = x @ x
        done += 1
        kernelab.timeline.step()
finally:
    counter.write_text(str(done))
"""

WHOLE_SCRIPT = """
import sys
from pathlib import Path

import torch

with open(sys.argv[1], "a") as runs:
    runs.write("run\\n")
print(float(torch.randn(32, 32).mm(torch.randn(32, 32)).sum()) != 12345.0)
"""


@pytest.fixture
def scripts(tmp_path):
    loop = tmp_path / "loop.py"
    loop.write_text(textwrap.dedent(LOOP_SCRIPT))
    whole = tmp_path / "whole.py"
    whole.write_text(textwrap.dedent(WHOLE_SCRIPT))
    failing = tmp_path / "failing.py"
    failing.write_text("raise RuntimeError('the workload broke')\n")
    return {"loop": loop, "whole": whole, "failing": failing}


def test_profile_callable_records_exactly_the_steps(tmp_path):
    import torch

    calls = []
    x = torch.randn(48, 48)

    def step():
        calls.append(1)
        return x @ x

    timeline = profile_callable(step, warmup=2, steps=3, out_dir=tmp_path)
    assert len(calls) == 5
    assert timeline.trace_path == tmp_path / "trace.json" and timeline.trace_path.is_file()
    assert [s[0] for s in timeline.trace.steps] == [f"kernelab_step#{i}" for i in range(3)]
    rows = {r.name: r for r in timeline.summary.top}
    assert rows["aten::mm"].calls == 3  # the warm-up calls are not in the trace
    assert timeline.summary.unit == "cpu op"
    assert timeline.capture["steps"] == 3 and timeline.capture["cuda"] is False
    assert json.loads(json.dumps(timeline.to_dict()))["capture"]["mode"] == "callable"


def test_profile_callable_refuses_bad_counts():
    with pytest.raises(KernelabError, match="--steps"):
        profile_callable(lambda: None, steps=0)
    with pytest.raises(KernelabError, match="--warmup"):
        profile_callable(lambda: None, warmup=-1)


def test_script_marking_steps_is_stopped_after_the_profiled_ones(scripts, tmp_path):
    counter = tmp_path / "count.txt"
    timeline = profile_script(
        ["python", str(scripts["loop"]), "1000", str(counter)],
        out_dir=tmp_path / "out",
        warmup=2,
        steps=3,
    )
    assert timeline.capture["mode"] == "steps" and timeline.capture["steps"] == 3
    # The loop asked for 1000 iterations; the capture ended it after 2 + 3, and its
    # `finally` still ran.
    assert counter.read_text() == "5"
    assert len(timeline.trace.steps) == 3
    assert {r.name: r for r in timeline.summary.top}["aten::mm"].calls == 3


def test_script_without_steps_is_profiled_one_run_per_step(scripts, tmp_path):
    runs = tmp_path / "runs.txt"
    timeline = profile_script(
        ["python3", str(scripts["whole"]), str(runs)], out_dir=tmp_path / "out", warmup=2, steps=2
    )
    assert timeline.capture["mode"] == "runs" and timeline.capture["steps"] == 2
    assert runs.read_text().count("run") == 4  # 2 warm-up runs + 2 profiled runs
    assert len(timeline.trace.steps) == 2


def test_script_ending_during_warmup_is_an_error(scripts, tmp_path):
    with pytest.raises(KernelabError, match="nothing was profiled"):
        profile_script(
            ["python", str(scripts["loop"]), "2", str(tmp_path / "c")],
            out_dir=tmp_path / "out",
            warmup=3,
            steps=2,
        )


def test_failing_script_is_one_line(scripts, tmp_path):
    with pytest.raises(KernelabError, match="the workload broke"):
        profile_script(["python", str(scripts["failing"])], out_dir=tmp_path / "out")


def test_parse_target(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("")
    assert parse_target(["python", str(script), "a"]).argv() == [str(script), "a"]
    assert parse_target(["/usr/bin/python3.12", "-m", "pkg.mod", "--x"]).argv() == [
        "-m",
        "pkg.mod",
        "--x",
    ]
    for bad in (["ls", "-l"], ["python"], ["python", "-c", "print(1)"], ["python", "nope.py"]):
        with pytest.raises(KernelabError):
            parse_target(bad)


# --- the command line -------------------------------------------------------------------------


def test_cli_import_json(fixtures_dir, capsys):
    code = main(
        ["timeline", "--import", str(fixtures_dir / "timeline" / "gpu_like_trace.json"), "--json"]
    )
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["verdict"]["kind"] == "launch-bound"
    assert data["gpu_id"] == "h200" and data["unit"] == "kernel"
    assert data["top"][0]["cls"] == "gemm"


def test_cli_import_renders_for_a_person(fixtures_dir, capsys):
    assert main(["timeline", "--import", str(fixtures_dir / "timeline" / "cpu_trace.json")]) == 0
    out = capsys.readouterr().out
    assert "CPU ops, not kernels" in out and "aten::mm" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["timeline"], "nothing to profile"),
        (["timeline", "--steps", "0", "--", "python", "x.py"], "--steps"),
        (["timeline", "--top", "-2", "--import", "x.json"], "--top"),
        (["timeline", "--drill", "-1", "--import", "x.json"], "--drill"),
        (["timeline", "--drill", "1", "--import", "x.json"], "--drill reruns"),
        (["timeline", "--gpu", "h2000", "--import", "x.json"], "unknown GPU"),
        (["timeline", "--import", "x.json", "--", "python", "y.py"], "not both"),
        (["timeline", "--import", "missing.json"], "no such file"),
        (["timeline", "--", "ls", "-l"], "runs a Python workload"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelab: ") and message.lower() in err.lower()
    assert "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--out", "/proc/x"], "--out keeps a new capture; with --import there is none"),
        (["--out", "elsewhere"], "--out keeps a new capture"),
        (["--steps", "2"], "--steps and --warmup shape a new capture"),
        (["--warmup", "0"], "--steps and --warmup shape a new capture"),
    ],
)
def test_cli_import_refuses_what_only_shapes_a_capture(fixtures_dir, capsys, tmp_path, extra,
                                                       message, monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    trace = fixtures_dir / "timeline" / "gpu_like_trace.json"
    assert main(["timeline", "--import", str(trace), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert message in captured.err
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "kernelab-timeline").exists()


def test_cli_import_of_a_device_or_an_empty_file_says_so(capsys, tmp_path):
    empty = tmp_path / "trace.json"
    empty.write_text("")
    for path, said in (("/dev/null", "/dev/null is not a regular file"),
                       (str(empty), f"{empty} is empty")):  # fmt: skip
        assert main(["timeline", "--import", path]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert said in captured.err and "no trace file" not in captured.err


def test_cli_import_of_an_ncu_csv_is_a_short_line_naming_what_was_expected(fixtures_dir, capsys):
    page = fixtures_dir / "ncu" / "gemm_focused_raw.csv"
    assert main(["timeline", "--import", str(page)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400, len(err)
    assert "Start, Duration, Name" in err and "Total Time, Instances, Name" in err
    assert "its columns: ID, Process ID" in err and "more" in err


def test_cli_nsys_csv_import_names_no_viewer_and_no_developer_note(fixtures_dir, capsys):
    csv_export = fixtures_dir / "timeline" / "nsys_cuda_gpu_trace.csv"
    assert main(["timeline", "--import", str(csv_export)]) == 0
    out = capsys.readouterr().out
    assert "perfetto" not in out.lower() and "chrome://tracing" not in out
    assert "developed on" not in out and "H200 kernelab" not in out
    assert f"trace: {csv_export}" in out
    trace = fixtures_dir / "timeline" / "gpu_like_trace.json"
    assert main(["timeline", "--import", str(trace)]) == 0
    assert "(open it in ui.perfetto.dev or chrome://tracing)" in capsys.readouterr().out


def test_cli_profiles_a_script_and_keeps_trace_and_summary(scripts, tmp_path, capsys):
    out = tmp_path / "tl"
    argv = ["timeline", "--out", str(out), "--steps", "2", "--warmup", "1", "--json"]
    argv += ["--", "python", str(scripts["loop"]), "50", str(tmp_path / "c")]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capture"]["steps"] == 2 and data["busy"]["steps"] == 2
    assert (out / "trace.json").is_file()
    assert json.loads((out / "summary.json").read_text())["top"] == data["top"]


# --- the drill --------------------------------------------------------------------------------


def _kernel_event(name, ts, corr):
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": ts - 5, "dur": 2, "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 3,
         "args": {"stream": 7, "correlation": corr}},
    ]  # fmt: skip


def test_drill_targets_pick_the_launch_among_same_named_kernels():
    first, second = "void k<1>(float*)", "void k<2>(float*)"
    events = [{"ph": "X", "cat": "user_annotation", "name": "kernelab_step#0", "pid": 1,
               "tid": 1, "ts": 0, "dur": 100}]  # fmt: skip
    events += _kernel_event("void other_kernel<1>()", 10, 1)
    events += _kernel_event(first, 20, 2)
    events += _kernel_event(second, 30, 3)
    events += _kernel_event(first, 40, 4)
    # A launch after the first step: not in the range ncu will look at first.
    events += _kernel_event(second, 140, 5)
    trace = parse_trace({"traceEvents": events})
    targets = {t.kernel: t for t in drill_targets(trace, [first, second, "void other_kernel<1>()"])}
    assert (targets[first].regex, targets[first].launch_skip) == ("^k$", 0)
    assert targets[second].launch_skip == 1  # k<1> runs first under the same function name
    assert targets["void other_kernel<1>()"].regex == "^other_kernel$"


def test_drill_needs_a_gpu_timeline(fixtures_dir, tmp_path):
    from kernelab.timeline.capture import Timeline
    from kernelab.timeline.trace import load_trace

    trace = load_trace(fixtures_dir / "timeline" / "cpu_trace.json")
    timeline = Timeline(None, summarize_trace(trace), {}, trace=trace)
    assert drill(["python", "x.py"], timeline, 0) == []
    with pytest.raises(KernelabError, match="GPU timeline"):
        drill(["python", "x.py"], timeline, 1)


# --- the example ------------------------------------------------------------------------------


def test_example_runs_on_cpu_at_both_shapes():
    import torch

    from kernelab.timeline.example import make_workload

    decode, config = make_workload("decode", device="cpu")
    assert decode().shape == (1, 1, config["d_model"])
    prefill, config = make_workload("prefill", device="cpu", batch=2, seq=8)
    out = prefill()
    assert out.shape == (2, 8, config["d_model"]) and torch.isfinite(out).all()
    with pytest.raises(NoGPUError):
        make_workload("decode-graph", device="cpu")
    with pytest.raises(KernelabError, match="unknown mode"):
        make_workload("train", device="cpu")


def test_example_prefill_is_causal():
    """Changing a later token must not change an earlier token's output."""
    import torch

    from kernelab.timeline.example import build_model, model_config

    config = model_config("cpu")
    model = build_model(config, device="cpu", dtype=torch.float64)
    x = torch.randn(1, 6, config["d_model"], dtype=torch.float64)
    changed = x.clone()
    changed[0, 4:] += 1.0
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.allclose(a[0, :4], b[0, :4])
    assert not torch.allclose(a[0, 4:], b[0, 4:])


# --- Nsight Systems CSV (hand-written files: see nsys.py) ----------------------------------------


def test_nsys_gpu_trace_csv(fixtures_dir):
    trace = load_nsys(fixtures_dir / "timeline" / "nsys_cuda_gpu_trace.csv")
    assert trace.format == "nsys-gpu-trace" and trace.device_name() == "NVIDIA H200"
    summary = summarize_trace(trace)
    # Kernels at 0-20, 30-35, 40-50 (copy), 60-80 and 70-75 on another stream (us).
    assert summary.busy.busy_us == pytest.approx(55.0)
    assert summary.busy.window_us == pytest.approx(80.0)
    assert summary.busy.gap_count == 3 and summary.busy.gap_total_us == pytest.approx(25.0)
    assert [r.cls for r in summary.top] == ["gemm", "copy", "elementwise", "reduction"]
    assert summary.top[0].calls == 2 and summary.top[1].kind == "memcpy"
    assert any("untested" in note for note in summary.notes)


def test_nsys_kern_sum_csv(fixtures_dir):
    summary = summarize_trace(load_nsys(fixtures_dir / "timeline" / "nsys_cuda_gpu_kern_sum.csv"))
    assert summary.format == "nsys-kern-sum"
    assert [(r.cls, r.calls, r.total_us) for r in summary.top] == [
        ("gemm", 2, 40.0),
        ("normalization", 3, 15.0),
        ("elementwise", 1, 10.0),
    ]
    assert summary.busy.busy_pct is None and summary.verdict.kind == "unknown"
    assert summary.classes["normalization"]["calls"] == 3


def test_nsys_bad_csv_and_missing_tool(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(KernelabError, match="nsys"):
        load_nsys(bad)
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\0")
    if shutil.which("nsys") is None:
        with pytest.raises(MissingToolError, match="nsys not found"):
            load_nsys(report)


def test_drill_asks_ncu_for_the_top_kernel_inside_the_step_range(
    fixtures_dir, tmp_path, monkeypatch
):
    """What drill hands to ncu: the workload rerun with --nvtx-only, the kernel's function
    name as an anchored regex, the NVTX range, its launch index; an ncu failure is kept in
    the result, not raised."""
    from kernelab.profiling import ncu
    from kernelab.timeline.capture import Timeline
    from kernelab.timeline.trace import load_trace

    asked = []

    def fake_run_ncu(target_cmd, **options):
        asked.append((list(target_cmd), options))
        raise KernelabError("ncu profiled no kernel")

    monkeypatch.setattr(ncu, "run_ncu", fake_run_ncu)
    trace = load_trace(fixtures_dir / "timeline" / "gpu_like_trace.json")
    timeline = Timeline(None, summarize_trace(trace), {}, trace=trace)
    script = tmp_path / "w.py"
    script.write_text("")
    results = drill(["python", str(script), "--x"], timeline, 2, out_dir=tmp_path, warmup=4)

    assert [r.error for r in results] == ["ncu profiled no kernel"] * 2
    (argv, options), _ = asked
    assert argv[1:3] == ["-m", "kernelab.timeline.capture"]
    assert argv[argv.index("--warmup") + 1] == "4" and argv[argv.index("--steps") + 1] == "1"
    assert "--nvtx-only" in argv and argv[-2:] == [str(script), "--x"]
    top = timeline.summary.top[0].name  # a C-linkage cuBLAS name: its own function name
    assert options["kernel_regex"] == f"^{top}$"
    flash_options = asked[1][1]
    assert flash_options["kernel_regex"] == "^flash_fwd_splitkv_kernel$"
    assert options["nvtx_range"] == "kernelab_timeline/"
    assert (options["launch_skip"], options["launch_count"]) == (0, 1)
    assert "PYTHONPATH" in options["env"]
