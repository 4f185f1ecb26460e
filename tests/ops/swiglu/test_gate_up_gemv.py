"""The fused gate/up GEMV + SwiGLU (ops/swiglu/gate_up_gemv.py): against the float64
reference at awkward shapes in every dtype on the CPU interpreter, both the split-K path
(partials, then the reduction applies SwiGLU) and the unsplit one (SwiGLU in the first
kernel), a known-wrong kernel rejected, bad input in one line; on a GPU (marked gpu)
Llama-3-8B's 14336 x 4096 gate/up pair at the decode batches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

OP = "gate_up_swiglu"
# m = 1, the broadcast path; m = 16 (and 17, one past a tile), the tl.dot path; n and k
# never multiples of the interpreter's 16 x 16 tiles
SHAPES = [{"m": 1, "n": 19, "k": 37}, {"m": 3, "n": 33, "k": 50}, {"m": 17, "n": 7, "k": 40}]


@pytest.fixture(scope="module")
def swiglu():
    return kernel_module("swiglu")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_matches_the_reference(swiglu, shape, dtype):
    assert_matches_reference(swiglu.gate_up_swiglu, OP, shape, dtype)


@pytest.mark.parametrize("split", [1, 3])
def test_split_and_unsplit_paths_agree_with_the_reference(swiglu, split):
    from kernelab.harness.check import compare
    from kernelab.ops.swiglu.gate_up_gemv import plan
    from kernelab.spec.reference import get_op

    shape = {"m": 2, "n": 21, "k": 96}
    spec = get_op(OP)
    inputs = spec.make_inputs(shape, "fp32", seed=3, device=DEVICE)
    launch = plan(2, 21, 96, None, interpreter=True)
    launch.update(split=split, k_per_split=-(-96 // (split * 16)) * 16)
    out = swiglu.gate_up_swiglu(*inputs, launch=launch)
    assert compare(out, spec.reference(*inputs), dtype="fp32").ok


def test_the_heuristic_plan_splits_k_at_the_interpreters_small_shapes():
    from kernelab.ops.gemv import plan as gemv_plan
    from kernelab.ops.swiglu.gate_up_gemv import plan

    assert plan(1, 19, 96, None, interpreter=True)["split"] > 1
    # on a GPU (132 SMs, an H100's) a program reads as many W rows as the plain GEMV's
    assert plan(1, 14336, 4096, 132)["BLOCK_N"] * 2 == gemv_plan(1, 28672, 4096, 132)["BLOCK_N"]


def test_a_kernel_that_forgets_the_gate_is_rejected():
    """The checker must tell silu(g) * u from g * u (no activation): a wrong kernel fails."""
    from kernelab.harness.check import check_implementation

    def no_silu(x, w_gate, w_up):
        return (x @ w_gate.t()) * (x @ w_up.t())

    report = check_implementation(no_silu, OP, {"m": 2, "n": 9, "k": 16}, "fp32", trials=1,
                                  device=DEVICE)  # fmt: skip
    assert not report.ok


# exp(1000) overflows to inf on purpose (sigmoid -> 0); the interpreter's numpy says so
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_extreme_gates_saturate_without_nan(swiglu):
    x = torch.ones(1, 4, device=DEVICE)
    w_gate = torch.tensor([[-250.0] * 4, [0.0] * 4, [250.0] * 4], device=DEVICE)
    w_up = torch.ones(3, 4, device=DEVICE)
    out = swiglu.gate_up_swiglu(x, w_gate, w_up)
    assert out.isfinite().all()
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 4000.0]], device=DEVICE))


@pytest.mark.parametrize("case", ["k", "n", "mixed", "fp64", "rank", "m"])
def test_bad_input_is_refused_in_one_line(swiglu, case):
    x = torch.zeros(2, 8, device=DEVICE)
    w_gate, w_up = torch.zeros(5, 8, device=DEVICE), torch.zeros(5, 8, device=DEVICE)
    if case == "k":
        x = x[:, :7]
    elif case == "n":
        w_up = w_up[:4]
    elif case == "mixed":
        w_up = w_up.half()
    elif case == "fp64":
        x, w_gate, w_up = x.double(), w_gate.double(), w_up.double()
    elif case == "rank":
        x = x[0]
    else:
        x = torch.zeros(65, 8, device=DEVICE)
    with pytest.raises(KernelabError) as raised:
        swiglu.gate_up_swiglu(x, w_gate, w_up)
    assert str(raised.value).strip() and "\n" not in str(raised.value)


def test_empty_sizes_and_registration(swiglu):
    from kernelab.spec.registry import get

    w = torch.zeros(5, 8, device=DEVICE)
    assert swiglu.gate_up_swiglu(torch.zeros(0, 8, device=DEVICE), w, w).shape == (0, 5)
    empty_k = torch.zeros(5, 0, device=DEVICE)
    out = swiglu.gate_up_swiglu(torch.zeros(2, 0, device=DEVICE), empty_k, empty_k)
    assert out.shape == (2, 5) and not out.any()
    assert get("triton.gate_up_swiglu").build() is swiglu.gate_up_swiglu
    assert get("torch.gate_up_swiglu").op == OP


def test_inputs_are_halves_of_one_fused_weight():
    from kernelab.spec.reference import get_op

    x, w_gate, w_up = get_op(OP).make_inputs({"m": 1, "n": 6, "k": 4}, "bf16", seed=0)
    assert w_gate.untyped_storage().data_ptr() == w_up.untyped_storage().data_ptr()
    assert w_up.data_ptr() - w_gate.data_ptr() == 6 * 4 * w_gate.element_size()


def test_cost_counts_both_weights_once():
    from kernelab.spec.reference import get_op

    cost = get_op(OP).cost({"m": 1, "n": 14336, "k": 4096}, "bf16")
    assert cost.bytes == (2 * 14336 * 4096 + 4096 + 14336) * 2
    assert cost.flops == 2 * 2 * 14336 * 4096 + 5 * 14336


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 32, 64])
def test_gpu_at_llama3_8b_gate_up(swiglu, m, dtype):
    assert_matches_reference(swiglu.gate_up_swiglu, OP, {"m": m, "n": 14336, "k": 4096}, dtype,
                             trials=1)  # fmt: skip


@pytest.mark.gpu
def test_gpu_matches_the_unfused_kernels_on_a_fused_weight(swiglu):
    """The same answer as ops/gemv on W_gate_up then ops/swiglu, to the bf16 rounding of the
    unfused path's intermediate gate_up."""
    from kernelab.ops import gemv

    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(2 * 14336, 4096, device="cuda") / 64).to(torch.bfloat16)
    fused = swiglu.gate_up_swiglu(x, w[:14336], w[14336:]).float()
    gate_up = gemv.gemv(x, w)
    unfused = swiglu.swiglu(gate_up[:, :14336], gate_up[:, 14336:]).float()
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)
