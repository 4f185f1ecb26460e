"""The decode ops on launch plans (kernelab.runtime.launch_plans): gemv, rope, swiglu,
add_rmsnorm, decode_attention and sampling_probs. On the CPU (the Triton interpreter, where
no plan installs since its launches return no compiled kernel) each planned call still matches
its float64 reference, keys its plan by the scalars a replay passes as recorded (eps,
interleaved, n, a pinned gemv launch, the sampling parameters), and hands its kernels only
tensors a plan can hold: the call's own or workspaces declared with keep() (what a recording
refuses otherwise). sample() stays on Triton's front door. On a GPU (marked gpu) the calls of
one signature replay a plan after the first two, and every call matches the reference."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.spec.reference import OPS  # noqa: E402

# (op folder, entry, spec op, shape, the kernels its module launches)
CASES = [
    ("gemv", "gemv", "gemv", {"m": 3, "n": 33, "k": 129},
     ("gemv_split_kernel", "sum_splits_kernel")),
    ("rope", "rope", "rope", {"tokens": 3, "heads": 5, "head_dim": 12}, ("rope_kernel",)),
    ("rope", "rope_interleaved", "rope_interleaved", {"tokens": 2, "heads": 9, "head_dim": 16},
     ("rope_kernel",)),
    ("swiglu", "swiglu", "swiglu", {"rows": 7, "cols": 33}, ("swiglu_kernel",)),
    ("fused_norm", "add_rmsnorm_stacked", "add_rmsnorm", {"rows": 7, "cols": 127},
     ("add_rmsnorm_kernel",)),
    ("decode_attention", "decode_attention", "decode_attention",
     {"batch": 1, "heads": 4, "kv_heads": 2, "tokens": 37, "head_dim": 16},
     ("attend_split_kernel", "combine_kernel")),
    ("sampling", "sampling_probs", "sampling_probs", {"batch": 3, "vocab": 1031},
     ("probs_kernel",)),
]  # fmt: skip


def _id(case) -> str:
    return case[1]


class _Spy:
    """A kernel that notes the tensors of each launch, then launches as the kernel would."""

    def __init__(self, kernel, launched: list):
        self.kernel, self.launched = kernel, launched

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            values = (*args, *kwargs.values())
            self.launched.append([v for v in values if isinstance(v, torch.Tensor)])
            return self.kernel[grid](*args, **kwargs)

        return launch


def _watched(monkeypatch, module, kernels) -> dict:
    """Every plan key the module's calls ask for (tensors, scalars, fresh), every workspace
    they declare and every kernel launch's tensors."""
    seen = {"keys": [], "kept": [], "launched": []}

    def key(device, tensors, *scalars, fresh=0):
        seen["keys"].append((tensors, scalars, fresh))
        return None  # no plan: the call launches through Triton's front door

    monkeypatch.setattr(module.PLANS, "key", key)
    if hasattr(module, "keep"):
        monkeypatch.setattr(module, "keep", lambda *workspaces: seen["kept"].extend(workspaces))
    for name in kernels:
        monkeypatch.setattr(module, name, _Spy(getattr(module, name), seen["launched"]))
    return seen


def _inside(tensor, workspace) -> bool:
    start = workspace.data_ptr()
    return start <= tensor.data_ptr() < start + workspace.numel() * workspace.element_size()


def _assert_plannable(seen) -> tuple:
    """One planned call whose launches received only its keyed tensors and declared
    workspaces (launch_plans' _Recording refuses anything else); its scalars."""
    [(tensors, scalars, fresh)] = seen["keys"]
    assert seen["launched"], "the planned call launched nothing"
    ours = {(t.data_ptr(), t.dtype) for t in tensors}
    for launched in seen["launched"]:
        for t in launched:
            if (t.data_ptr(), t.dtype) in ours:
                continue
            assert any(_inside(t, w) for w in seen["kept"]), (
                f"a {tuple(t.shape)} {t.dtype} tensor neither the call's nor declared with keep()"
            )
    for t in tensors[len(tensors) - fresh :]:  # outputs left out of the key: new, contiguous
        assert t.is_contiguous() and t.data_ptr() not in {u.data_ptr() for u in tensors[:-fresh]}
    return scalars


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_planned_calls_match_the_reference_and_launch_only_plannable_tensors(case, monkeypatch):
    folder, entry, op, shape, kernels = case
    module = kernel_module(folder)
    seen = _watched(monkeypatch, module, kernels)
    assert_matches_reference(getattr(module, entry), op, shape, "fp32", trials=1)
    assert seen["keys"], "the call never reached its launch plans"
    seen["keys"].clear(), seen["kept"].clear(), seen["launched"].clear()
    inputs = OPS[op].make_inputs(shape, "fp32", 0, device=DEVICE)
    getattr(module, entry)(*inputs)
    expected = {"rope": (False,), "rope_interleaved": (True,), "add_rmsnorm": (inputs[-1],),
                "decode_attention": (inputs[-1],)}  # fmt: skip
    assert _assert_plannable(seen) == expected.get(op, ())


def test_gemv_declares_its_split_workspace_and_keys_a_pinned_launch_by_its_dict(monkeypatch):
    """The K split's fp32 [split, m, n] workspace is scratch written before it is read:
    declared with keep(), so the plan holds it. A pinned launch (launch=, the tile sweep's
    and the tests' override) is keyed by its dict; the table's launch by the tensors alone."""
    gemv = kernel_module("gemv")
    seen = _watched(monkeypatch, gemv, ("gemv_split_kernel", "sum_splits_kernel"))
    m, n, k = 3, 33, 129
    x, w = OPS["gemv"].make_inputs({"m": m, "n": n, "k": k}, "fp32", 1, device=DEVICE)
    expected = (x.double() @ w.double().T).float()
    torch.testing.assert_close(gemv.gemv(x, w), expected, rtol=1e-5, atol=1e-5)
    split = gemv.plan(m, n, k, None, interpreter=True, itemsize=4)["split"]
    assert split > 1 and len(seen["launched"]) == 2  # the split kernel and the sum
    [workspace] = seen["kept"]
    assert workspace.shape == (split, m, n) and workspace.dtype == torch.float32
    assert _assert_plannable(seen) == ()

    pinned = gemv.plan(m, n, k, None, interpreter=True)
    pinned.update(split=1, k_per_split=144)
    seen["keys"].clear(), seen["kept"].clear(), seen["launched"].clear()
    torch.testing.assert_close(gemv.gemv(x, w, launch=pinned), expected, rtol=1e-5, atol=1e-5)
    assert not seen["kept"] and len(seen["launched"]) == 1  # no split: no workspace, no sum
    assert _assert_plannable(seen) == (tuple(sorted(pinned.items())),)


def test_gemv_still_reads_the_tile_table_through_load_table(monkeypatch):
    """The table's launch comes from tiles.load_table() on every unplanned call (a recorded
    one included), so a replaced tiles.json is what the next recording plans from."""
    gemv = kernel_module("gemv")
    loads = []
    real = gemv.tiles.load_table
    monkeypatch.setattr(gemv.tiles, "load_table", lambda *a: loads.append(a) or real(*a))
    x, w = OPS["gemv"].make_inputs({"m": 1, "n": 37, "k": 100}, "bf16", 0, device=DEVICE)
    gemv.gemv(x, w)
    assert loads == [()]
    gemv.gemv(x, w, launch=gemv.plan(1, 37, 100, None, interpreter=True))
    assert loads == [()]  # a pinned launch never looks the table up


def test_a_bad_pinned_form_is_refused_before_any_plan_is_keyed(monkeypatch):
    from kernelab.errors import KernelabError

    gemv = kernel_module("gemv")
    seen = _watched(monkeypatch, gemv, ())
    x, w = OPS["gemv"].make_inputs({"m": 1, "n": 37, "k": 100}, "fp32", 0, device=DEVICE)
    launch = gemv.plan(1, 37, 100, None, interpreter=True)
    with pytest.raises(KernelabError, match="LATE_SUM is a form of the broadcast"):
        gemv.gemv(x, w, launch={**launch, "USE_DOT": True, "LATE_SUM": True})
    with pytest.raises(KernelabError, match="X_AS_TILE is a form of LATE_SUM"):
        gemv.gemv(x, w, launch={**launch, "X_AS_TILE": True, "LATE_SUM": False})
    assert not seen["keys"]


def test_rope_in_place_keys_x_once_and_out_of_place_leaves_out_out(monkeypatch):
    rope = kernel_module("rope")
    seen = _watched(monkeypatch, rope, ("rope_kernel",))
    x, cos, sin, positions = OPS["rope"].make_inputs({"tokens": 3, "heads": 5, "head_dim": 12},
                                                     "fp32", 0, device=DEVICE)  # fmt: skip
    rope.rope(x, cos, sin, positions)
    rope.rope_(x, cos, sin, positions.to(torch.int32), interleaved=True)
    rope.rope_(x, cos, sin, positions, interleaved=False)
    (_, _, fresh_out), (in_place, flag, fresh_in), (_, no_flag, _) = seen["keys"]
    assert fresh_out == 1 and fresh_in == 0 and flag == (True,) and no_flag == (False,)
    assert in_place[0] is x and len(in_place) == 4  # x once: the kernel's out is x's pointer


def test_sampling_probs_keys_its_number_parameters_and_sample_takes_the_front_door(monkeypatch):
    """Python-number parameters are replayed as recorded, so they are the key; tensors per
    row are slots of the plan; a mix goes unplanned. sample() never asks for a plan: its
    Philox key changes every call."""
    sampling = kernel_module("sampling")
    seen = _watched(monkeypatch, sampling, ("probs_kernel", "sample_kernel"))
    logits = torch.randn(3, 300, device=DEVICE)
    sampling.sampling_probs(logits, 0.7, 20, 0.9, 0.0)
    [(tensors, scalars, fresh)] = seen["keys"]
    assert len(tensors) == 2 and fresh == 1 and scalars == (0.7, 20, 0.9, 0.0)
    per_row = torch.full((3,), 0.7, device=DEVICE)
    one = sampling.sampling_probs(logits, per_row, 20, 0.9, 0.0)  # a mix: unplanned
    assert len(seen["keys"]) == 1
    rows = [torch.full((3,), v, device=DEVICE) for v in (0.9, 0.0)]
    every = sampling.sampling_probs(logits, per_row, torch.full((3,), 20, device=DEVICE), *rows)
    assert len(seen["keys"]) == 2 and len(seen["keys"][1][0]) == 6 and seen["keys"][1][1] == ()
    torch.testing.assert_close(one, every)
    sampling.sample(logits, 0.7, 20, 0.9, 0.0, seed=1, offset=3)
    assert len(seen["keys"]) == 2


# on a GPU: the registry's entries, as the checker and the benchmarks call them
GPU_CASES = [
    ("triton.gemv", "gemv", {"m": 1, "n": 4096, "k": 4096}, "bf16"),
    ("triton.gemv", "gemv", {"m": 16, "n": 1031, "k": 4099}, "fp16"),
    ("triton.rope", "rope", {"tokens": 4, "heads": 32, "head_dim": 128}, "bf16"),
    ("triton.rope_interleaved", "rope", {"tokens": 3, "heads": 5, "head_dim": 12}, "fp32"),
    ("triton.swiglu", "swiglu", {"rows": 16, "cols": 14336}, "bf16"),
    ("triton.add_rmsnorm", "fused_norm", {"rows": 1, "cols": 4096}, "bf16"),
    ("triton.decode_attention", "decode_attention",
     {"batch": 1, "heads": 32, "kv_heads": 8, "tokens": 1025, "head_dim": 128}, "bf16"),
    ("triton.sampling_probs", "sampling", {"batch": 4, "vocab": 32000}, "fp32"),
]  # fmt: skip
CALLS = 5


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0]}-{c[3]}")
def test_gpu_second_signature_calls_replay_and_match_the_reference(case):
    """Fresh random data of one signature each call: two recordings, then replays."""
    import importlib

    from kernelab.harness.check import compare
    from kernelab.spec.reference import get_op
    from kernelab.spec.registry import get

    name, folder, shape, dtype = case
    plans = importlib.import_module(f"kernelab.ops.{folder}").PLANS
    plans.forget()
    impl = get(name)
    spec, fn = get_op(impl.op), impl.build()
    replays = plans.replays
    for call in range(CALLS):
        inputs = spec.make_inputs(shape, dtype, seed=call, device="cuda")
        result = compare(fn(*inputs), spec.reference(*inputs), dtype=dtype,
                         math_mode=impl.math_mode)  # fmt: skip
        assert result.ok, f"{name} {shape} {dtype}, call {call}: {result.message}"
    assert plans.replays - replays >= CALLS - 2, f"not planned: {plans.last_refusal}"
    plans.forget()
