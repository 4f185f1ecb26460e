"""cute.softmax_backward: its plan (half the forward's values a thread: y and dy both held),
the registration and its one-line refusal on the CPU; the sm_90a lowering when the package is
here (no GPU needed); the kernel against the float64 reference on a Hopper GPU."""

from __future__ import annotations

import pytest
from cute_dsl_support import has_opcode, needs_package, sass_opcodes, usable_or_skip

from kernelab.errors import KernelabError
from kernelab.ops import cute_rows
from kernelab.ops.softmax import cute_dsl_backward
from kernelab.runtime import cute_dsl
from kernelab.spec import registry

TARGET_COLS = [1024, 4096, 16384, 32768, 65536, 131072]  # 1K .. the longest a cluster holds


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("cols", [1, 1009, *TARGET_COLS])
def test_plan_holds_both_tensors_in_the_forwards_registers(cols, itemsize):
    plan = cute_dsl_backward.backward_plan(cols, itemsize)
    assert plan.tile_cols * plan.cluster >= cols
    assert plan.held <= cute_dsl_backward.BACKWARD_HELD or plan.held == plan.vec
    assert 2 * plan.held <= cute_rows.MAX_HELD or plan.held == plan.vec
    assert cute_rows.fits(plan, "h100-sxm")


def test_rows_past_half_a_portable_cluster_are_refused_in_one_line():
    longest = cute_rows.max_cols() // 2
    assert cute_dsl_backward.backward_plan(longest, 4).cluster == cute_rows.MAX_CLUSTER
    with pytest.raises(KernelabError, match="portable cluster") as raised:
        cute_dsl_backward.backward_plan(longest + 1, 4)
    assert "\n" not in str(raised.value)


def test_registered_beside_triton():
    impl = registry.get("cute.softmax_backward")
    assert impl.op == registry.get("triton.softmax_backward").op == "softmax_backward"
    assert set(impl.dtypes) == {"fp32", "bf16", "fp16"}
    assert impl.metadata["language"] == "cute-dsl"


def test_build_says_why_in_one_line_when_unusable():
    reason = cute_dsl.unusable_reason()
    if reason is None:
        pytest.skip("CuTe-DSL is usable here")
    with pytest.raises(KernelabError) as raised:
        registry.get("cute.softmax_backward").build()
    assert "\n" not in str(raised.value) and str(raised.value) == reason


def _lower(cols: int, dtype, tmp_path):
    import cuda.bindings.driver as cuda
    import torch

    from kernelab.ops.softmax import cute_dsl_backward_kernel

    y = torch.empty(3, cols, dtype=dtype)
    plan = cute_dsl_backward.backward_plan(cols, y.element_size())
    tensors = cute_rows.row_tensors(plan, y, torch.empty_like(y), torch.empty_like(y))
    path = tmp_path / f"softmax_backward_{cols}.cubin"
    cute_dsl.lower_to_cubin(cute_dsl_backward_kernel.softmax_backward_launch, *tensors,
                            cuda.CUstream(0), plan.vec, plan.threads, plan.tile_cols,
                            plan.cluster, path=path)  # fmt: skip
    return plan, sass_opcodes(path)


@needs_package
@pytest.mark.parametrize(
    "cols, dtype", [(4096, "float32"), (1009, "bfloat16"), (16384, "bfloat16")]
)
def test_lowers_for_sm90a_without_a_gpu(cols, dtype, tmp_path):
    import torch

    plan, ops = _lower(cols, getattr(torch, dtype), tmp_path)
    assert has_opcode(ops, "SHFL.BFLY")  # the warp's part of the dot product
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")  # y and dy stay in registers
    if plan.vec * plan.itemsize == 16:
        assert has_opcode(ops, "LDG.E.128") and has_opcode(ops, "STG.E.128")


@needs_package
def test_a_long_rows_dot_products_land_on_an_mbarrier(tmp_path):
    import torch

    plan, ops = _lower(131072, torch.float32, tmp_path)
    assert plan.cluster == 8
    # the partial dot products land on each CTA's mbarrier (st.async), after the one cluster
    # barrier that makes every CTA's shared memory and mbarrier live
    assert ops["UCGABAR_ARV"] == 1 and ops["UCGABAR_WAIT"] == 1
    assert has_opcode(ops, "STAS") and has_opcode(ops, "SYNCS.PHASECHK")
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [*TARGET_COLS, 1009, 70001])
def test_gpu_matches_float64_reference(cols, dtype):
    usable_or_skip()
    from kernelab.harness.check import check_implementation

    fn = registry.get("cute.softmax_backward").build()
    for shape in ({"rows": 1, "cols": cols}, {"rows": 37, "cols": cols, "stride": cols + 8}):
        report = check_implementation(fn, "softmax_backward", shape, dtype, trials=2,
                                      device="cuda")  # fmt: skip
        assert report.ok, report.message
