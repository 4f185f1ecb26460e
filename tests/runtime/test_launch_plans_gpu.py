"""Launch plans on the GPU (marked gpu): each Triton op called repeatedly on fresh random data
takes the front door twice, then replays its plan, and every call, replayed or not, matches
the float64 reference. Also right: calls on a misaligned view, on a side stream, and with a
changed eps or bias (each keyed apart; test_launch_plans.py checks the keys on the CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernelab.harness.check import compare  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402
from kernelab.spec.registry import get  # noqa: E402

CALLS = 5

# (implementation, shape, dtype, whether its untuned default path must be planned)
CASES = [
    ("triton.vector_add", {"n": 1_000_003}, "fp32", True),
    ("triton.vector_add", {"n": 4096}, "bf16", True),
    ("triton.softmax", {"rows": 64, "cols": 4096}, "bf16", True),
    ("triton.softmax", {"rows": 37, "cols": 1031}, "fp32", True),
    ("triton.softmax", {"rows": 129, "cols": 4097, "stride": 4099}, "fp32", True),
    ("triton.softmax", {"rows": 8, "cols": 65536}, "fp32", False),  # long rows: either
    ("triton.softmax", {"rows": 8, "cols": 70_001}, "bf16", False),
    ("triton.softmax", {"rows": 4, "cols": 262_144}, "bf16", False),
    ("triton.rmsnorm", {"rows": 64, "cols": 4096}, "bf16", True),
    ("triton.layernorm", {"rows": 129, "cols": 4097}, "fp32", True),
    ("triton.layernorm", {"rows": 3, "cols": 40_000}, "bf16", True),  # the looped kernel
    ("triton.matmul", {"m": 256, "n": 256, "k": 256}, "bf16", True),
    ("triton.matmul", {"m": 300, "n": 520, "k": 777}, "fp16", True),
]


def _module_of(name: str):
    import importlib

    module = {"vector_add": "vector_add", "softmax": "softmax", "rmsnorm": "norms",
              "layernorm": "norms", "matmul": "matmul"}[name.split(".")[1]]  # fmt: skip
    return importlib.import_module(f"kernelab.ops.{module}")


def _calls_match_the_reference(name, shape, dtype, *, seed0=0, stream=None) -> None:
    impl = get(name)
    spec = get_op(impl.op)
    fn = impl.build()
    for call in range(CALLS):
        inputs = spec.make_inputs(shape, dtype, seed=seed0 + call, device="cuda")
        if stream is None:
            out = fn(*inputs)
        else:
            # the inputs were drawn on the current stream: the side stream must wait for them,
            # or it reads whatever the freed blocks held (under 8 workers: a vector_add of
            # softmax outputs left behind by an earlier test)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = fn(*inputs)
            stream.synchronize()
        result = compare(out, spec.reference(*inputs), dtype=dtype, math_mode=impl.math_mode)
        assert result.ok, f"{name} {shape} {dtype}, call {call}: {result.message}"


def _id(case) -> str:
    name, shape, dtype, _ = case
    return f"{name}-{'x'.join(str(v) for v in shape.values())}-{dtype}"


@pytest.mark.gpu
@pytest.mark.parametrize("lean", [False, True], ids=["default", "lean"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gpu_planned_calls_match_the_reference(case, lean, monkeypatch):
    """lean: KERNELAB_DIRECT_LAUNCH=1's replay path (direct launches where built, Triton's
    launcher called without its hook arguments elsewhere)."""
    from kernelab.runtime import launch_plans

    name, shape, dtype, must_plan = case
    plans = _module_of(name).PLANS
    monkeypatch.setattr(launch_plans, "DIRECT", lean)
    plans.forget()
    replays = plans.replays
    try:
        _calls_match_the_reference(name, shape, dtype)
    finally:
        plans.forget()  # plans built under one setting are not replayed under the other
    if must_plan:
        # two calls record and agree, the rest replay; the first call may also make one-time
        # probes of its own (softmax_shared.works_here launches on a tensor of its own), so
        # the plan may start at the fourth call
        assert plans.replays - replays >= CALLS - 3, f"not planned: {plans.last_refusal}"


@pytest.mark.gpu
@pytest.mark.parametrize("forced", ["tile", "split-k", "plain"])
def test_gpu_forced_matmul_calls_are_planned_and_right(forced):
    """A forced config (matmul(config=...)) or path replays its own plan after two calls
    (not Triton's front door every call), and every answer matches
    the float64 reference; the two configs on the same shapes never share a plan."""
    import functools

    from kernelab.ops import matmul

    if torch.cuda.get_device_capability()[0] < 9 and forced != "plain":
        pytest.skip("TMA needs cc >= 9.0")
    if forced == "plain":
        kwargs = {"path": "plain"}
    elif forced == "split-k":
        kwargs = {"config": matmul.split_k_candidates(2)[0]}
    else:
        kwargs = {"config": matmul.tma_candidates(2)[-1]}
    spec = get_op("gemm")
    fn = functools.partial(matmul.matmul, **kwargs)
    matmul.PLANS.forget()
    replays = matmul.PLANS.replays
    for call in range(CALLS):
        inputs = spec.make_inputs({"m": 300, "n": 520, "k": 777}, "bf16", seed=call, device="cuda")
        result = compare(fn(*inputs), spec.reference(*inputs), dtype="bf16")
        assert result.ok, f"{forced}, call {call}: {result.message}"
    assert matmul.PLANS.replays - replays >= CALLS - 2, f"not planned: {matmul.PLANS.last_refusal}"
    matmul.PLANS.forget()


# (what softmax() is told, shape, dtype, whether it must replay a plan after two calls)
FORCED_SOFTMAX = [
    ("row-tile", {"rows": 64, "cols": 4096}, "bf16", True),
    ("two-pass", {"rows": 37, "cols": 4099}, "fp32", True),
    ("cooperative", {"rows": 8, "cols": 65536}, "bf16", False),  # right, planned or not
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", FORCED_SOFTMAX, ids=lambda case: case[0])
def test_gpu_forced_softmax_calls_are_planned_and_right(case):
    """A forced row-tile config or long-row path replays its own plan after two calls
    (not Triton's front door every call), every answer right. The
    forced cooperative path, refused for its zeroed per-call workspace, is given up instead:
    no longer recorded after MOST_FAILED_RECORDINGS calls."""
    import functools

    from kernelab.ops import softmax
    from kernelab.runtime.launch_plans import MOST_FAILED_RECORDINGS

    forced, shape, dtype, must_plan = case
    if forced == "row-tile":
        kwargs = {"config": softmax.row_tile_candidates(4096)[1]}  # not the default guess
    elif forced == "two-pass":
        kwargs = {"single_pass_max_cols": 1024, "long_rows": "two-pass"}
    else:
        kwargs = {"single_pass_max_cols": 1024, "long_rows": "cooperative"}
    spec = get_op("softmax")
    fn = functools.partial(softmax.softmax, **kwargs)
    softmax.PLANS.forget()
    replays = softmax.PLANS.replays
    calls = CALLS + MOST_FAILED_RECORDINGS
    for call in range(calls):
        inputs = spec.make_inputs(shape, dtype, seed=call, device="cuda")
        result = compare(fn(*inputs), spec.reference(*inputs), dtype=dtype)
        assert result.ok, f"{forced}, call {call}: {result.message}"
    planned = softmax.PLANS.replays - replays >= calls - 2
    # a forced path that cannot be planned stops being recorded (recording costs host time)
    given_up = max(softmax.PLANS._failed.values(), default=0) >= MOST_FAILED_RECORDINGS
    assert planned or (given_up and not must_plan), f"not planned: {softmax.PLANS.last_refusal}"
    softmax.PLANS.forget()


@pytest.mark.gpu
def test_gpu_misaligned_views_and_side_streams_get_their_own_right_answers():
    from kernelab.ops.vector_add import PLANS, vector_add

    PLANS.forget()
    base = torch.randn(4097, device="cuda")
    other = torch.randn(4097, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(
            vector_add(base[:4096], other[:4096]), base[:4096] + other[:4096]
        )
    # 4 bytes off 16-byte alignment: Triton specialized the planned binary on aligned pointers
    for _ in range(3):
        got = vector_add(base[1:], other[1:])
        torch.testing.assert_close(got, base[1:] + other[1:], rtol=0, atol=0)
    side = torch.cuda.Stream()
    _calls_match_the_reference("triton.vector_add", {"n": 4096}, "fp32", stream=side)
    _calls_match_the_reference("triton.softmax", {"rows": 64, "cols": 4096}, "bf16", stream=side)


@pytest.mark.gpu
def test_gpu_norm_eps_and_bias_are_part_of_the_plan():
    import torch.nn.functional as F

    from kernelab.ops.norms import PLANS, layernorm, rmsnorm

    PLANS.forget()
    x = torch.randn(16, 1024, device="cuda")
    w = torch.rand(1024, device="cuda") + 0.5
    b = torch.randn(1024, device="cuda")
    for _ in range(3):
        rmsnorm(x, w, 1e-6)
    # a large eps changes the answer: a replay of the first plan would not
    for eps in (1e-6, 10.0, 1e-6, 10.0):
        want = F.rms_norm(x.double(), (1024,), w.double(), eps).float()
        torch.testing.assert_close(rmsnorm(x, w, eps), want, rtol=1e-5, atol=1e-5)
    for _ in range(3):
        got = layernorm(x, w, b, 1e-5)
        want = F.layer_norm(x.double(), (1024,), w.double(), b.double(), 1e-5).float()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got = layernorm(x, w, None, 1e-5)
    want = F.layer_norm(x.double(), (1024,), w.double(), None, 1e-5).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        ("triton.vector_add", {"n": 1_000_003}, "fp32", False),
        ("triton.rmsnorm", {"rows": 64, "cols": 4096}, "bf16", False),
        # TMA descriptors: the tensor map kept per address (tensor_maps.py)
        ("triton.softmax", {"rows": 64, "cols": 4096}, "bf16", True),
        ("triton.matmul", {"m": 256, "n": 256, "k": 256}, "bf16", True),
        ("triton.matmul", {"m": 1024, "n": 1024, "k": 1024}, "bf16", True),
    ],
    ids=lambda case: f"{case[0]}-{'x'.join(str(v) for v in case[1].values())}",
)
@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
def test_gpu_planned_launches_replay_through_cuLaunchKernel(case, compiled, monkeypatch):
    """Plain and TMA launches (no cluster or scratch) replay through direct_launch.py, and
    those calls still match the reference: fresh inputs each call, so the tensor maps are
    looked up for addresses the caching allocator hands out again with new data in them.
    compiled: keys and launches from compiled_replay.c (the default where it builds)."""
    from kernelab.runtime import compiled_replay, direct_launch, launch_plans

    name, shape, dtype, tma = case
    plans = _module_of(name).PLANS
    monkeypatch.setattr(launch_plans, "DIRECT", True)  # whatever KERNELAB_DIRECT_LAUNCH says
    monkeypatch.setattr(compiled_replay, "ENABLED", compiled)
    built = compiled_replay.module() if compiled else None
    if compiled:
        assert built is not None, compiled_replay.last_failure
    monkeypatch.setattr(launch_plans, "_compiled_key", built and built.plan_key)
    plans.forget()
    replays = plans.replays
    try:
        _calls_match_the_reference(name, shape, dtype)
        steps = [step for plan in plans._plans.values() for step in plan]
        assert steps and all(step.direct is not None for step in steps), direct_launch.last_refusal
        maps = sum(step.direct.tensor_map_parameters for step in steps)
        assert (maps > 0) == tma, f"{maps} tensor map parameters"
        assert all(step.direct.compiled == compiled for step in steps)
        # and replays took it: Triton's default hooks (empty chains) count as none
        assert sum(step.direct.launches for step in steps) >= plans.replays - replays > 0
    finally:
        plans.forget()  # no direct launch outlives the monkeypatch
