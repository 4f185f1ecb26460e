"""The late-summed m = 1 forms (ops/quant_gemv/late.py, the gate/up GEMV's gate_up_late_kernel):
every form against the float64 reference on the CPU interpreter at awkward shapes (K not a
multiple of the step, n odd, group sizes 32/64/128, zero points, split and unsplit, x as a
tile or as a row), NaN propagating; the launch tables (launches.json, gate_up_tiles.json);
the sweep's candidates, each run once at a tiny shape; the launch plans' keys. On a GPU
(marked gpu): planned calls replay and stay right."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402


@pytest.fixture(scope="module")
def quant():
    return kernel_module("quant_gemv")


@pytest.fixture(scope="module")
def swiglu():
    return kernel_module("swiglu")


def _late(block_n, block_k, x_as_tile, split, stages=1, warps=4):
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "X_AS_TILE": x_as_tile,
            "num_warps": warps, "num_stages": stages, "split": split}  # fmt: skip


# (BLOCK_N, BLOCK_K, X_AS_TILE, split): a K not a multiple of the step, split or not
FORMS = [(4, 32, True, 1), (4, 32, False, 1), (8, 16, True, 3), (2, 64, False, 2)]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("form", FORMS, ids=str)
@pytest.mark.parametrize("op", ["quant_gemv_int8", "quant_gemv_fp8"])
def test_per_channel_late_forms_match_the_reference(quant, op, form, dtype):
    if op == "quant_gemv_fp8" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    fn = functools.partial(getattr(quant, op), launch=_late(*form))
    assert_matches_reference(fn, op, {"m": 1, "n": 37, "k": 97}, dtype)


# (BLOCK_N, BLOCK_K in weights: whole groups, at least one, X_AS_TILE, split)
INT4_FORMS = [(4, 64, True, 1), (4, 128, False, 1), (8, 256, True, 2), (2, 64, True, 3)]


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("form", INT4_FORMS, ids=str)
@pytest.mark.parametrize("op", ["quant_gemv_int4", "quant_gemv_int4_zp"])
def test_int4_late_forms_match_the_reference(quant, op, form, group):
    # K = 3 groups: never a multiple of a two-group step; n odd
    fn = functools.partial(quant.quant_gemv_int4, launch=_late(*form))
    assert_matches_reference(fn, op, {"m": 1, "n": 19, "k": 3 * group, "group": group}, "bf16")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["quant_gemv_int4", "quant_gemv_int4_zp"])
def test_int4_table_launch_at_m1_in_both_dtypes(quant, op, dtype):
    assert_matches_reference(quant.quant_gemv_int4, op, {"m": 1, "n": 21, "k": 192, "group": 64},
                             dtype)  # fmt: skip


def test_int4_late_form_reads_a_misaligned_or_strided_row(quant):
    from kernelab.ops.quant_gemv import packing

    generator = torch.Generator().manual_seed(1)
    w = torch.randn(9, 128, generator=generator).to(torch.bfloat16)
    packed, scales, zeros = packing.pack_int4(w, 32, zero_points=True)
    wide = torch.randn(1, 129, generator=generator).to(torch.bfloat16)
    want = wide[:, 1:].double() @ packing.dequantize_int4(packed, scales, zeros, 32).t()
    for x in (wide[:, 1:], wide[:, 1:].contiguous()):  # 2 bytes off a 4-byte word, aligned
        got = quant.quant_gemv_int4(*(t.to(DEVICE) for t in (x, packed, scales, zeros)), 32)
        torch.testing.assert_close(got.double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_nan_in_x_reaches_every_column_at_m1(quant):
    from kernelab.ops.quant_gemv import packing

    w = torch.randn(7, 64).to(torch.bfloat16)
    x = torch.randn(1, 64).to(torch.bfloat16)
    x[0, 33] = float("nan")
    packed, scales, zeros = (t.to(DEVICE) for t in packing.pack_int4(w, 32, zero_points=True))
    q, scale = (t.to(DEVICE) for t in packing.pack_int8(w))
    x = x.to(DEVICE)
    assert quant.quant_gemv_int4(x, packed, scales, zeros, 32).isnan().all()
    assert quant.quant_gemv_int4(x, packed, scales, None, 32).isnan().all()
    assert quant.quant_gemv_int8(x, q, scale).isnan().all()
    assert quant.quant_gemv_int8(x, q, scale, launch=_late(4, 16, False, 2)).isnan().all()


# ---- the fused gate/up GEMV's late form ------------------------------------------------------


def _gate_up_late(block_n, block_k, x_as_tile, split):
    launch = {"BLOCK_M": 1, "BLOCK_N": block_n, "USE_DOT": False, "LATE_SUM": True,
              **_late(block_n, block_k, x_as_tile, split)}  # fmt: skip
    return launch


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("form", FORMS, ids=str)
def test_gate_up_late_forms_match_the_reference(swiglu, form, dtype):
    from kernelab.ops.quant_gemv.sweep import gate_up_launch

    n, k = 19, 97
    launch = gate_up_launch(_gate_up_late(*form), n, k, None)
    fn = functools.partial(swiglu.gate_up_swiglu, launch=launch)
    assert_matches_reference(fn, "gate_up_swiglu", {"m": 1, "n": n, "k": k}, dtype)


def test_gate_up_late_form_is_refused_above_m1(swiglu):
    from kernelab.ops.quant_gemv.sweep import gate_up_launch

    launch = gate_up_launch(_gate_up_late(4, 32, True, 1), 5, 8, None)
    x, w = torch.zeros(2, 8, device=DEVICE), torch.zeros(5, 8, device=DEVICE)
    with pytest.raises(KernelabError, match="m = 1"):
        swiglu.gate_up_swiglu(x.bfloat16(), w.bfloat16(), w.bfloat16(), launch=launch)


def test_gate_up_plan_takes_the_late_form_at_m1_from_its_table():
    from kernelab.ops.gemv.tiles import check_table
    from kernelab.ops.swiglu.gate_up_gemv import load_table, plan

    check_table(load_table(), "gate_up_tiles.json")
    late = plan(1, 14336, 4096, 132, itemsize=2)
    assert late["LATE_SUM"] and late["X_AS_TILE"] and late["BLOCK_M"] == 1
    assert not plan(4, 14336, 4096, 132, itemsize=2)["LATE_SUM"]  # GPU_TILES above m = 1
    assert not plan(1, 14336, 4096, 132, itemsize=4)["LATE_SUM"]  # no fp32 entry


# ---- the quantized GEMVs' launch table -----------------------------------------------------


def test_the_launch_table_is_well_formed_and_looked_up():
    from kernelab.ops.quant_gemv import late_plan, launches

    table = launches.load_table()
    assert {e["kind"] for e in table["entries"]} == set(launches.KINDS)
    for entry in table["entries"]:
        assert entry["status"] in ("measured", "derived, not measured")
    assert launches.lookup("int4", 1, 4096, 4096)["X_AS_TILE"] is True
    assert launches.lookup("int4", 2, 4096, 4096) is None  # m > 1: the step-summed path
    plan = late_plan("int4", 4096, 4096, group=128, sms=132)
    assert plan["BLOCK_K"] % 128 == 0 and plan["split"] >= 1
    # a step of whole groups, at least one: a group wider than BLOCK_K is one group a step
    small = late_plan("int4", 64, 512, group=256, launch=_late(4, 64, True, 1))
    assert small["BLOCK_K"] == 256


@pytest.mark.parametrize(
    "bad",
    [{"BLOCK_N": 3}, {"num_stages": 0}, {"X_AS_TILE": 1}, {"split": 0}, {"BLOCK_K": None}],
    ids=str,
)
def test_a_bad_launch_is_refused_in_one_line(bad):
    from kernelab.ops.quant_gemv import launches

    with pytest.raises(KernelabError) as raised:
        launches.check_launch({**_late(4, 512, True, "heuristic"), **bad})
    assert "\n" not in str(raised.value)
    with pytest.raises(KernelabError, match="repeats"):
        entry = {"kind": "int8", "m": 1, "launch": _late(4, 512, True, 1), "status": "x"}
        launches.check_table({"entries": [entry, entry]})


# ---- the sweep's candidates ----------------------------------------------------------------


def test_the_sweep_grid_holds_the_tables_launches():
    from kernelab.ops.quant_gemv import launches, sweep

    for entry in launches.load_table()["entries"]:
        assert entry["launch"] in sweep.candidates(entry["kind"]), entry["kind"]
    for kind in sweep.KINDS:
        found = sweep.candidates(kind)
        assert 40 <= len(found) <= 200, (kind, len(found))
        assert len({sweep.name(c) for c in found}) == len(found)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["int8", "fp8", "int4", "int4_zp", "gate_up"])
def test_every_sweep_candidate_runs_right_at_a_tiny_shape(kind):
    """Each candidate through the same call the sweep times (sweep.call_for), at n = 5 and a K
    of one to two steps, against the float64 reference."""
    from kernelab.harness.check import compare
    from kernelab.ops.quant_gemv import sweep
    from kernelab.spec.reference import get_op

    if kind == "fp8" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    _, op, extra = sweep.IMPLEMENTATIONS[kind]
    spec = get_op(op)
    shape = {"m": 1, "n": 5, "k": 2560 if kind.startswith("int4") else 640, **extra}
    inputs = spec.make_inputs(shape, "bf16", seed=0, device=DEVICE)
    reference = spec.reference(*inputs)
    for launch in sweep.candidates(kind):
        result = compare(sweep.call_for(kind, inputs, launch, None)(), reference, dtype="bf16",
                         bf16_truncates=DEVICE == "cpu")  # fmt: skip
        assert result.ok, (sweep.name(launch), result.message)


# ---- launch plans --------------------------------------------------------------------------


def test_plans_key_the_forced_launches_apart(quant, swiglu, monkeypatch):
    """A forced launch is part of the plan key (frozen), the default none; on the
    interpreter the key is asked for and the call goes through Triton's front door."""
    from kernelab.ops import quant_gemv
    from kernelab.ops.quant_gemv import packing
    from kernelab.ops.swiglu import gate_up_gemv

    keys = []

    def key(device, tensors, *scalars, fresh=1):
        keys.append(scalars)
        return None

    monkeypatch.setattr(quant_gemv.PLANS, "key", key)
    monkeypatch.setattr(gate_up_gemv.PLANS, "key", key)
    w = torch.randn(6, 64).to(torch.bfloat16)
    x = torch.randn(1, 64).to(torch.bfloat16).to(DEVICE)
    q, scale = (t.to(DEVICE) for t in packing.pack_int8(w))
    quant.quant_gemv_int8(x, q, scale)
    quant.quant_gemv_int8(x, q, scale, launch=_late(4, 32, True, 1))
    packed, scales, _ = (t for t in packing.pack_int4(w, 32, zero_points=False))
    quant.quant_gemv_int4(x, packed.to(DEVICE), scales.to(DEVICE), None, 32)
    swiglu.gate_up_swiglu(x, w.to(DEVICE), w.to(DEVICE))
    assert keys[0] == ()
    assert keys[1] == (True, tuple(sorted(_late(4, 32, True, 1).items())))
    assert keys[2] == (32, False, True, None)
    assert keys[3] == ()
    assert quant_gemv.PLANS is not gate_up_gemv.PLANS


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["int8", "int4", "int4_zp", "gate_up"])
def test_gpu_planned_calls_replay_and_stay_right(kind):
    from kernelab.harness.check import compare
    from kernelab.ops import quant_gemv
    from kernelab.ops.quant_gemv import sweep
    from kernelab.ops.swiglu import gate_up_gemv
    from kernelab.spec.reference import get_op
    from kernelab.spec.registry import get

    plans = gate_up_gemv.PLANS if kind == "gate_up" else quant_gemv.PLANS
    name, op, extra = sweep.IMPLEMENTATIONS[kind]
    fn, spec = get(name).build(), get_op(op)
    plans.forget()
    replays, calls = plans.replays, 6
    for call in range(calls):
        inputs = spec.make_inputs({"m": 1, "n": 4096, "k": 4096, **extra}, "bf16", seed=call,
                                  device="cuda")  # fmt: skip
        result = compare(fn(*inputs), spec.reference(*inputs), dtype="bf16")
        assert result.ok, f"{kind}, call {call}: {result.message}"
    assert plans.replays - replays >= calls - 3, f"not planned: {plans.last_refusal}"
    plans.forget()
