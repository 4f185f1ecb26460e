"""The timeline on CPU: parsing traces, busy time and gaps, the verdict, the roofline of ops.

gpu_like_trace.json is hand-built in torch.profiler's format with round numbers (see
make_fixtures.py for its layout), so every figure below is worked out by hand here.
cpu_trace.json is a real torch.profiler trace of a CPU workload.
"""

from __future__ import annotations

import json

import pytest

from kernelab.errors import KernelabError
from kernelab.hardware import get_gpu
from kernelab.roofline.costs import attention, gemm
from kernelab.timeline.summary import (
    GPU_BOUND,
    HOST_BOUND,
    LAUNCH_BOUND,
    Busy,
    busy_time,
    merge_intervals,
    summarize_trace,
    verdict_for,
)
from kernelab.timeline.trace import load_trace, parse_trace


@pytest.fixture
def gpu_trace(fixtures_dir):
    return load_trace(fixtures_dir / "timeline" / "gpu_like_trace.json")


@pytest.fixture
def cpu_trace(fixtures_dir):
    return load_trace(fixtures_dir / "timeline" / "cpu_trace.json")


def _row(summary, prefix):
    (row,) = [r for r in summary.top if r.label.startswith(prefix)]
    return row


# --- parsing --------------------------------------------------------------------------------


def test_gpu_trace_activities_launches_and_steps(gpu_trace):
    assert len(gpu_trace.activities) == 20
    assert [a.kind for a in gpu_trace.activities].count("memcpy") == 2
    # 9 launch calls per step; cudaStreamSynchronize launches nothing and is left out.
    assert len(gpu_trace.launches) == 18
    assert [s[0] for s in gpu_trace.steps] == ["kernelab_step#0", "kernelab_step#1"]
    # Times count from the first event, so they keep their sub-microsecond digits.
    assert gpu_trace.window() == (0.0, 700.0)
    first = gpu_trace.activities[0]
    assert (first.start_us, first.duration_us, first.stream) == (40.0, 20.0, 7)
    assert first.grid == (132, 1, 1) and first.block == (256, 1, 1)
    assert gpu_trace.device_name() == "NVIDIA H200"


def test_kernels_join_their_launch_and_innermost_op(gpu_trace):
    by_prefix = {}
    for activity in gpu_trace.activities[:10]:
        by_prefix[activity.name[:12]] = activity
    gemm_kernel = by_prefix["sm90_xmma_ge"]
    assert gemm_kernel.launch.name == "cudaLaunchKernel"
    assert gemm_kernel.op.name == "aten::addmm"
    assert gemm_kernel.op.input_dims[1] == [1, 2048]
    flash = by_prefix["void pytorch"]
    assert flash.op.name == "aten::_flash_attention_forward"  # the innermost op
    assert flash.op.parent.name == "aten::_scaled_dot_product_flash_attention"
    softmax = by_prefix["void (anonym"]
    assert softmax.op.name == "aten::_softmax" and softmax.op.parent.name == "aten::softmax"
    memcpy = by_prefix["Memcpy DtoD "]
    assert memcpy.launch.name == "cudaMemcpyAsync" and memcpy.op.name == "aten::copy_"
    graph = [a for a in gpu_trace.activities[:10] if a.from_graph]
    assert [a.name[:10] for a in graph] == ["triton_red", "triton_poi"]
    assert all(a.op is None for a in graph)


def test_cpu_ops_self_time_partitions_their_callers(cpu_trace):
    """Self times add up to exactly the time inside top-level ops: nothing counted twice."""
    top_level = sum(op.duration_us for op in cpu_trace.ops if op.parent is None)
    assert sum(op.self_us for op in cpu_trace.ops) == pytest.approx(top_level, rel=1e-6)
    assert all(op.self_us >= 0 for op in cpu_trace.ops)
    assert not cpu_trace.on_gpu
    assert len(cpu_trace.steps) == 2


def test_not_a_trace_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(KernelabError, match="not a JSON trace"):
        load_trace(bad)
    with pytest.raises(KernelabError, match="traceEvents"):
        parse_trace({"events": []})
    with pytest.raises(KernelabError, match="no trace file"):
        load_trace(tmp_path / "missing.json")


def test_gzipped_trace_reads_the_same(gpu_trace, fixtures_dir, tmp_path):
    import gzip

    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(
        gzip.compress((fixtures_dir / "timeline" / "gpu_like_trace.json").read_bytes())
    )
    assert len(load_trace(packed).activities) == len(gpu_trace.activities)


# --- busy time, gaps, verdict -----------------------------------------------------------------


def test_merge_intervals_counts_overlaps_once():
    assert merge_intervals([(5, 8), (0, 2), (1, 3), (8, 9)]) == [(0, 3), (5, 9)]


def test_busy_time_clips_to_the_window_and_finds_gaps():
    spans = [(-10, 5), (10, 20), (12, 15), (21, 22), (40, 60), (90, 200)]
    got = busy_time(spans, (0, 100))
    assert got["busy_us"] == 5 + 10 + 1 + 20 + 10
    assert got["busy_pct"] == pytest.approx(46.0)
    # Holes: 5 (5->10), 1 (20->21, not over 2 us), 18 (22->40), 30 (60->90).
    assert got["gap_count"] == 3
    assert got["gap_total_us"] == 53
    assert got["gap_largest_us"] == 30
    assert got["idle_us"] == 54


def test_gpu_like_trace_busy_figures(gpu_trace):
    busy = summarize_trace(gpu_trace).busy
    # Per step the union of GPU activity is 20+10+3+8+2+2+4+3+(5+5 back to back) = 62 us.
    assert busy.busy_us == pytest.approx(124.0)
    assert busy.window_us == pytest.approx(700.0)
    assert busy.busy_pct == pytest.approx(100 * 124 / 700)
    # Holes per step: 40, 20, 17, 12, 28, 28, 26, 12 = 183; between steps 440 - 285 = 155.
    assert busy.gap_count == 17
    assert busy.gap_total_us == pytest.approx(2 * 183 + 155)
    assert busy.gap_largest_us == pytest.approx(155.0)
    # Idle also counts the 40 us before the first kernel and the 15 us after the last.
    assert busy.idle_us == pytest.approx(2 * 183 + 155 + 40 + 15)
    assert busy.median_us == pytest.approx(4.5)
    assert busy.launches == 18 and busy.launch_mean_us == pytest.approx(5.0)
    assert busy.steps == 2


def test_gpu_like_trace_is_launch_bound_with_graphs_first(gpu_trace):
    verdict = summarize_trace(gpu_trace).verdict
    assert verdict.kind == LAUNCH_BOUND
    assert "CUDA graph" in verdict.next_steps[0]
    assert any("fuse" in step for step in verdict.next_steps)
    assert any("batch" in step for step in verdict.next_steps)


def _busy(**changes) -> Busy:
    base = dict(
        window_us=1000.0,
        steps=1,
        activity_us=500.0,
        busy_us=500.0,
        busy_pct=50.0,
        idle_us=500.0,
        gap_count=40,
        gap_total_us=450.0,
        gap_largest_us=30.0,
        median_us=5.0,
        launches=40,
        launch_mean_us=6.0,
    )
    return Busy(**{**base, **changes})


def test_verdict_rules():
    assert verdict_for(_busy(), "kernel").kind == LAUNCH_BOUND
    assert verdict_for(_busy(busy_pct=90.0), "kernel").kind == GPU_BOUND
    assert verdict_for(_busy(median_us=400.0), "kernel").kind == HOST_BOUND
    assert verdict_for(_busy(), "cpu op").kind == "cpu-only"
    assert verdict_for(_busy(busy_pct=None), "kernel").kind == "unknown"


# --- top kernels and classes ----------------------------------------------------------------


def test_top_kernels_ordered_with_shares(gpu_trace):
    summary = summarize_trace(gpu_trace, top=3)
    assert len(summary.top) == 3 and summary.distinct == 10
    assert [r.cls for r in summary.top] == ["gemm", "attention", "gemm"]
    first = summary.top[0]
    assert (first.calls, first.total_us, first.mean_us) == (2, 40.0, 20.0)
    assert first.share_pct == pytest.approx(100 * 40 / 124)
    assert first.ops == {"aten::addmm": 2}
    everything = summarize_trace(gpu_trace, top=0)
    assert len(everything.top) == 10
    assert sum(r.share_pct for r in everything.top) == pytest.approx(100.0)
    assert _row(everything, "triton_poi").graph_calls == 2


def test_time_by_class(gpu_trace):
    classes = summarize_trace(gpu_trace).classes
    # gemm: xmma 40 + nvjet 16 + splitK reduce 4; normalization: layer norm 6 + Inductor 10.
    expected = {
        "gemm": 60.0,
        "attention": 20.0,
        "normalization": 16.0,
        "elementwise": 14.0,
        "reduction": 6.0,
        "copy": 8.0,
    }
    assert {cls: v["time_us"] for cls, v in classes.items()} == pytest.approx(expected)
    assert sum(v["calls"] for v in classes.values()) == 20


def test_negative_top_is_refused(gpu_trace):
    with pytest.raises(KernelabError, match="--top"):
        summarize_trace(gpu_trace, top=-1)


# --- the roofline -----------------------------------------------------------------------------


def test_gemm_placed_with_its_own_time(gpu_trace):
    summary = summarize_trace(gpu_trace)
    assert summary.gpu_id == "h200"
    (addmm,) = [p for p in summary.placements if p.op == "aten::addmm"]
    assert (addmm.cost_op, addmm.calls, addmm.gpu_us_per_call) == ("gemm", 2, 20.0)
    assert (addmm.shape["m"], addmm.shape["n"], addmm.shape["k"]) == (1, 6144, 2048)
    # Bytes by hand: A 1x2048 + B 2048x6144 read, C 1x6144 written, 2 bytes each.
    moved = (2048 + 2048 * 6144 + 6144) * 2
    assert addmm.placement["bytes"] == moved
    assert addmm.placement["achieved_gbps"] == pytest.approx(moved / 20e-6 / 1e9)
    assert addmm.placement["bound"] == "memory"  # M = 1: 2 FLOPs per weight element
    spec = get_gpu("h200")
    floor_s = moved / spec.bandwidth_bytes_per_s
    assert addmm.placement["sol_pct"] == pytest.approx(100 * floor_s / 20e-6)


def test_split_k_gemm_is_placed_as_one_op(gpu_trace):
    """cuBLAS's split-K GEMM and its reduce kernel are one aten::mm: 8 + 2 us per call."""
    summary = summarize_trace(gpu_trace)
    (mm,) = [p for p in summary.placements if p.op == "aten::mm"]
    assert mm.gpu_us_per_call == pytest.approx(10.0)
    assert len(mm.kernels) == 2
    reduce_row = _row(summary, "cublasLt::splitKreduce")
    assert reduce_row.roofline["op"] == "aten::mm"
    expected = gemm(1, 2048, 2048, dtype="bf16")
    assert reduce_row.roofline["achieved_gbps"] == pytest.approx(expected.bytes / 10e-6 / 1e9)


def test_attention_placement_walks_up_to_the_sdpa_op(gpu_trace):
    summary = summarize_trace(gpu_trace)
    (sdpa,) = [p for p in summary.placements if p.cost_op == "attention"]
    assert sdpa.op == "aten::_scaled_dot_product_flash_attention"
    expected = attention(1, 16, 1, 1024, 128, causal=False, dtype="bf16")
    assert sdpa.shape == expected.shape
    assert sdpa.placement["flops"] == expected.flops


def test_norm_softmax_and_add_have_cost_models_copy_and_graphs_do_not(gpu_trace):
    summary = summarize_trace(gpu_trace)
    cost_ops = {p.cost_op for p in summary.placements}
    assert cost_ops == {"gemm", "attention", "rmsnorm", "softmax", "elementwise"}
    assert _row(summary, "Memcpy").roofline is None
    assert _row(summary, "triton_red").roofline is None
    (softmax,) = [p for p in summary.placements if p.cost_op == "softmax"]
    assert (softmax.shape["rows"], softmax.shape["cols"]) == (16, 1024)


def test_gpu_override_and_unknown_device(gpu_trace, fixtures_dir):
    assert summarize_trace(gpu_trace, gpu="a100-sxm").gpu_id == "a100-sxm"
    data = json.loads((fixtures_dir / "timeline" / "gpu_like_trace.json").read_text())
    data["deviceProperties"][0]["name"] = "Imaginary GPU 9000"
    unknown = summarize_trace(parse_trace(data))
    assert unknown.gpu_id is None and unknown.placements == []
    assert any("--gpu" in line for line in unknown.notes)


# --- the CPU trace ------------------------------------------------------------------------------


def test_cpu_trace_summarised_as_cpu_ops(cpu_trace):
    summary = summarize_trace(cpu_trace, top=0)
    assert summary.unit == "cpu op"
    assert summary.verdict.kind == "cpu-only"
    assert summary.placements == []
    names = {r.name: r for r in summary.top}
    assert names["aten::mm"].cls == "gemm" and names["aten::mm"].calls == 2
    assert names["aten::_scaled_dot_product_flash_attention_for_cpu"].cls == "attention"
    assert names["aten::_softmax"].cls == "reduction"
    assert summary.busy.steps == 2
    assert 0 < summary.busy.busy_pct <= 100


def test_summary_is_plain_json(gpu_trace):
    data = summarize_trace(gpu_trace).to_dict()
    text = json.dumps(data)
    assert json.loads(text)["verdict"]["kind"] == LAUNCH_BOUND


def test_torch_type_spellings():
    from kernelab.timeline.trace import dtype_of

    spelled = ["c10::BFloat16", "float", "double", "c10::Half", "c10::Float8_e4m3fn", "Scalar", ""]
    assert [dtype_of(t) for t in spelled] == ["bf16", "fp32", "fp64", "fp16", "fp8", None, None]
