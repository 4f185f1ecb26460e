"""`kernelab bench` and the torch baselines.

On the CPU: size parsing, baseline choice, the one-line errors, the no-GPU path for real,
and the whole check -> time -> place -> record flow with the inputs and the check on the CPU
and a wall-clock stand-in for the CUDA timer (the real timer is tested in test_timing.py).
The real end-to-end run is marked gpu.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from kernelab.commands import bench
from kernelab.errors import KernelabError
from kernelab.harness.ceilings import DeviceIdentity
from kernelab.harness.records import load_records
from kernelab.harness.stats import summarize
from kernelab.harness.timing import Timing
from kernelab.spec import registry
from kernelab.spec.registry import Implementation


def test_sizes_per_op():
    keys = ("m", "n", "k")
    assert bench.parse_sizes("gemm", keys, "4096") == [{"m": 4096, "n": 4096, "k": 4096}]
    assert bench.parse_sizes("gemm", keys, "128x256x64, 1K") == [
        {"m": 128, "n": 256, "k": 64},
        {"m": 1024, "n": 1024, "k": 1024},
    ]
    assert bench.parse_sizes("vector_add", ("n",), "1G,256M") == [{"n": 2**30}, {"n": 256 * 2**20}]
    assert bench.parse_sizes("softmax", ("rows", "cols"), "4096x4096") == [
        {"rows": 4096, "cols": 4096}
    ]
    # the ladders' grammar too: B^E beside K/M/G
    assert bench.parse_sizes("softmax", ("rows", "cols"), "2^10x4K") == [
        {"rows": 1024, "cols": 4096}
    ]
    assert bench.parse_sizes("vector_add", ("n",), "2^28") == [{"n": 256 * 2**20}]


@pytest.mark.parametrize(
    "op, keys, spec, match",
    [
        ("softmax", ("rows", "cols"), "4096", "ROWSxCOLS"),
        ("gemm", ("m", "n", "k"), "4x4", "square"),
        ("vector_add", ("n",), "0", "positive"),
        ("vector_add", ("n",), "-5", "not a size"),
        ("vector_add", ("n",), "12Q", "not a size"),
        ("vector_add", ("n",), " , ", "empty item"),
        ("vector_add", ("n",), "", "not an empty string"),
        ("softmax", ("rows", "cols"), "1024x1024,,2048x2048", "empty item"),
        ("vector_add", ("n",), "2^64", "below 2\\^63"),
        ("vector_add", ("n",), "3^99999999", "below 2\\^63"),  # refused, never evaluated
        ("vector_add", ("n",), "2^y", "not a size"),
        (
            "softmax",
            ("rows", "cols"),
            "8x",
            r"'' is not a size .* in softmax size '8x' \(ROWSxCOLS\)",
        ),
    ],
)
def test_bad_sizes_are_one_line_errors(op, keys, spec, match):
    with pytest.raises(KernelabError, match=match) as caught:
        bench.parse_sizes(op, keys, spec)
    assert "\n" not in str(caught.value)


@pytest.fixture
def torch_only(monkeypatch):
    """A registry holding only the torch baselines (and what a test registers itself)."""
    monkeypatch.setattr(registry, "PROVIDERS", ("kernelab.ops.torch_baselines",))
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_loaded", False)


def test_torch_baselines_are_registered(torch_only):
    names = {impl.name for impl in registry.implementations()}
    assert {
        "torch.mm",
        "torch.mm.tf32",
        "torch.softmax",
        "torch.layer_norm",
        "torch.rms_norm",
        "torch.add",
    } <= names
    assert {
        "torch.compile.softmax",
        "torch.compile.layer_norm",
        "torch.compile.rms_norm",
        "torch.compile.add",
    } <= names
    assert registry.get("torch.mm.tf32").math_mode == "tf32"
    assert registry.get("torch.mm").math_mode is None


def test_default_baselines_share_op_dtype_and_math_mode(torch_only):
    softmax = registry.get("torch.softmax")
    picked = bench.pick_baselines(softmax, "bf16", None, registry.implementations("softmax"))
    assert [b.name for b in picked] == ["torch.compile.softmax"]
    mm = registry.get("torch.mm")
    assert (
        bench.pick_baselines(mm, "fp32", None, registry.implementations("gemm")) == []
    )  # not tf32
    tf32 = registry.get("torch.mm.tf32")
    assert [
        b.name for b in bench.pick_baselines(tf32, "fp32", None, registry.implementations("gemm"))
    ] == []
    with pytest.raises(KernelabError, match="computes softmax"):
        bench.pick_baselines(mm, "fp32", ["torch.softmax"], [])


def test_torch_mm_keeps_tf32_off_and_restores_the_flag(torch_only):
    torch = pytest.importorskip("torch")
    from kernelab.spec.reference import OPS

    seen = {}
    original = torch.mm

    def spy(a, b):
        seen["allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        return original(a, b)

    a, b = OPS["gemm"].make_inputs({"m": 8, "n": 4, "k": 16}, "fp32", seed=1)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.mm = spy
        for name, expected in (("torch.mm", False), ("torch.mm.tf32", True)):
            out = registry.get(name).build()(a, b)
            assert seen["allow_tf32"] is expected
            assert torch.allclose(out, a @ b)
            assert torch.backends.cuda.matmul.allow_tf32 == before
    finally:
        torch.mm = original


def test_eager_baselines_compute_their_op(torch_only):
    torch = pytest.importorskip("torch")
    from kernelab.spec.reference import OPS

    for name, op, shape in (
        ("torch.softmax", "softmax", {"rows": 3, "cols": 17}),
        ("torch.layer_norm", "layernorm", {"rows": 3, "cols": 17}),
        ("torch.rms_norm", "rmsnorm", {"rows": 3, "cols": 17}),
        ("torch.add", "vector_add", {"n": 33}),
    ):
        inputs = OPS[op].make_inputs(shape, "fp32", seed=0)
        out = registry.get(name).build()(*inputs)
        assert torch.allclose(out.double(), OPS[op].reference(*inputs), atol=1e-5), name


def test_no_gpu_is_one_line_and_exit_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "bench", "torch.mm", "--sizes", "256"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "kernelab: kernelab bench needs a CUDA GPU; none found\n"


def test_unknown_kernel_suggests_names(torch_only, capsys):
    from kernelab.cli import main

    assert main(["bench", "torch.sofmax", "--json"]) == 2
    err = capsys.readouterr().err
    assert "did you mean torch.softmax" in err and err.count("\n") == 1


def test_an_unknown_kernel_among_many_is_one_short_line(capsys):
    from kernelab.cli import main

    assert main(["bench", "triton.decode_atention"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean triton.decode_attention" in err
    assert len(err) < 500 and " more)" in err  # the suggestions, then a capped known list


def _refused(capsys, *argv) -> str:
    """`kernelab bench ...` in this process: exit 2 with one line, and never as far as the
    GPU check (this machine may have none: the line must be about the input)."""
    from kernelab.cli import main

    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kernelab: "), err
    assert "needs a CUDA GPU" not in err
    return err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["triton.decode_attention", "--sizes", "1x32x7x4096x128"], "multiple of kv_heads"),
        (["triton.quant_gemv.int4", "--sizes", "1x4096x4096x127"], "group size dividing K"),
        (["triton.rope", "--sizes", "8x32x127"], "even head_dim"),
        (["torch.cumsum", "--sizes", "300G"], "more than any GPU holds"),
        (["histogram:01", "--sizes", "1000x5000"], "bins must be at most 4096"),
    ],
)
def test_a_shape_the_op_cannot_take_is_refused_before_the_gpu_check(capsys, argv, words):
    assert words in _refused(capsys, *argv)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["torch.softmax", "--baseline", "torch.compile.softmax", "--no-baselines"],
         "give one of them"),
        (["torch.softmax", "--out", "r.txt"], "--out writes .json files"),
        (["torch.softmax", "--dtype", ""], "--dtype needs a value"),
        (["torch.softmax", "--timeout", "nan"], "--timeout must be a positive, finite"),
        (["torch.softmax", "--timeout", "0"], "--timeout must be a positive, finite"),
        (["torch.softmax", "--max-time", "inf"], "--max-time must be a positive, finite"),
    ],
)  # fmt: skip
def test_conflicting_or_empty_options_are_refused(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    assert words in _refused(capsys, *argv)
    assert list(tmp_path.iterdir()) == []


# --- the whole flow on the CPU, with a wall-clock stand-in for the CUDA timer ---------------


def wall_clock_benchmark(fn, *, mode, min_samples, max_time_s, **_):
    samples = []
    for _ in range(min_samples):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return Timing(samples_ms=samples, mode=mode, summary=summarize(samples), stop_reason="test")


@pytest.fixture
def cpu_bench(torch_only, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNELAB_CEILINGS", raising=False)
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr("kernelab.harness.timing.benchmark", wall_clock_benchmark)
    identity = DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
    monkeypatch.setattr("kernelab.harness.ceilings.this_gpu", lambda command="": identity)
    return tmp_path


def run_json(capsys, *args):
    from kernelab.cli import main

    code = main(["bench", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_flow_checks_times_places_and_records(cpu_bench, capsys):
    out = cpu_bench / "gemm.json"
    code, result = run_json(
        capsys, "torch.mm", "--sizes", "64x32x48", "--dtype", "fp32", "--baseline", "torch.mm.tf32",
        "--min-samples", "3", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    main_row, base_row = result["rows"]
    assert main_row["check_ok"] and base_row["check_ok"]
    assert main_row["shape"] == {"m": 64, "n": 32, "k": 48}
    # 2 m n k FLOPs over the median time.
    assert main_row["tflops"] == pytest.approx(
        2 * 64 * 32 * 48 / (main_row["median_ms"] * 1e-3) / 1e12
    )
    assert 0 < main_row["pct_of_datasheet"] < 100  # a CPU is far below an H200's roofline
    assert main_row["pct_of_measured"] is None  # no measured ceilings cached
    assert main_row["speedup_vs"]["torch.mm.tf32"] == pytest.approx(
        base_row["median_ms"] / main_row["median_ms"]
    )
    records = load_records(out)
    assert [r.implementation for r in records] == ["torch.mm", "torch.mm.tf32"]
    assert records[1].math_mode == "tf32" and records[0].gpu_id == "h200"
    assert records[0].check["ok"] and len(records[0].samples_ms) == 3
    # the launch lens: host cost per call beside the device time, kept in the record
    host = records[0].extra["host_cost"]
    assert host["calls"] >= 10 and host["host_us"] > 0 and host["wall_us"] >= host["host_us"]
    assert main_row["host_us"] == host["host_us"]
    assert main_row["launch_bound"] == (host["host_us"] > host["device_us"])
    history = cpu_bench / "cache" / "records" / "h200.json"
    assert len(load_records(history)) == 2  # appended to the cache as well
    assert (
        load_records(out)[0].to_dict() == result["records"][0]
    )  # the JSON output is a record file too


def test_plot_draws_the_sweep_with_its_ceiling(cpu_bench, capsys):
    chart = cpu_bench / "softmax.svg"
    code, result = run_json(
        capsys, "torch.softmax", "--sizes", "8x64,8x256", "--dtype", "fp32", "--no-baselines",
        "--min-samples", "3", "--plot", str(chart),
    )  # fmt: skip
    assert code == 0 and result["plot"] == str(chart)
    svg = chart.read_text()
    assert "torch.softmax fp32" in svg and "datasheet bandwidth" in svg


def test_plot_refuses_other_formats_before_running(cpu_bench, capsys):
    from kernelab.cli import main

    assert main(["bench", "torch.softmax", "--sizes", "8x64", "--plot", "x.txt"]) == 2
    assert "png or .svg" in capsys.readouterr().err


def test_a_wrong_kernel_is_reported_and_not_timed(cpu_bench, capsys):
    registry.implementations()  # load the providers before adding to the registry
    registry.register(
        Implementation(
            name="test.wrong_softmax",
            op="softmax",
            build=lambda: lambda x: x * 0.5,
            dtypes=("fp32",),
        )
    )
    code, result = run_json(
        capsys, "test.wrong_softmax", "--sizes", "8x33", "--dtype", "fp32", "--no-baselines"
    )
    assert code == 1
    (row,) = result["rows"]
    assert not row["check_ok"] and "median_ms" not in row and row["check_message"]
    assert result["records"] == []


def test_a_faster_than_light_time_is_flagged_not_celebrated(cpu_bench, capsys, monkeypatch):
    def impossibly_fast(fn, *, mode, **_):
        fn()
        return Timing(
            samples_ms=[1e-9] * 3, mode=mode, summary=summarize([1e-9] * 3), stop_reason="test"
        )

    monkeypatch.setattr("kernelab.harness.timing.benchmark", impossibly_fast)
    code, result = run_json(
        capsys, "torch.softmax", "--sizes", "8x64", "--dtype", "fp32", "--no-baselines"
    )
    (row,) = result["rows"]
    assert row["faster_than_light"] and row["pct_of_datasheet"] > 100
    assert row["warnings"][0].startswith("faster than speed of light")


def test_the_table_names_every_implementation(cpu_bench, capsys):
    from kernelab.cli import main

    assert (
        main(
            ["bench", "torch.mm", "--sizes", "16", "--dtype", "fp32", "--baseline", "torch.mm.tf32"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "torch.mm.tf32" in out and "vs torch.mm.tf32" in out and "records:" in out
    assert "host us" in out


# --- on the GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_bench_softmax_end_to_end(tmp_path):
    env_cache = {"KERNELAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelab.cli",
            "bench",
            "torch.softmax",
            "--sizes",
            "4096x4096",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env_cache},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    names = [row["implementation"] for row in result["rows"]]
    assert names[0] == "torch.softmax" and "torch.compile.softmax" in names
    row = result["rows"][0]
    assert row["check_ok"] and not row["faster_than_light"]
    # 4096 x 4096 bf16, one read and one write: 64 MiB over at least the datasheet time.
    assert 100 < row["gbps"] < 4800
    assert result["records"][0]["clocks"] or any(
        "NVML" in line for line in done.stderr.splitlines()
    )
