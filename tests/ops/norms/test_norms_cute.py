"""cute.rmsnorm: the registration and its one-line refusal on the CPU, the sm_90a lowering
when the package is here (bulk=True, x's slices by the TMA unit, beside the default), the
kernel against the float64 reference on a Hopper GPU. The row plan it shares with cute.softmax
is checked in tests/ops/softmax/test_softmax_cute.py."""

from __future__ import annotations

import pytest
from cute_dsl_support import has_opcode, needs_package, sass_opcodes, usable_or_skip

from kernelab.errors import KernelabError
from kernelab.ops import cute_rows
from kernelab.runtime import cute_dsl
from kernelab.spec import registry


def test_registered_beside_triton():
    impl = registry.get("cute.rmsnorm")
    assert impl.op == registry.get("triton.rmsnorm").op == "rmsnorm"
    assert impl.metadata["language"] == "cute-dsl"


def test_build_says_why_in_one_line_when_unusable():
    reason = cute_dsl.unusable_reason()
    if reason is None:
        pytest.skip("CuTe-DSL is usable here")
    with pytest.raises(KernelabError, match="CuTe-DSL"):
        registry.get("cute.rmsnorm").build()


def _lower_rmsnorm(cols: int, dtype: str, tmp_path, mbarrier: bool = True, bulk: bool = False):
    import cuda.bindings.driver as cuda
    import torch
    from cutlass import Float32

    from kernelab.ops.norms import cute_dsl_kernel

    x = torch.empty(3, cols, dtype=getattr(torch, dtype))
    plan = cute_rows.row_plan(cols, x.element_size())
    tensors = cute_rows.row_tensors(plan, x, torch.empty(1, cols, dtype=x.dtype), x.clone())
    path = tmp_path / f"rmsnorm_{cols}_{mbarrier}_{bulk}.cubin"
    cute_dsl.lower_to_cubin(cute_dsl_kernel.rmsnorm_launch, *tensors, Float32(1e-6),
                            cuda.CUstream(0), plan.vec, plan.threads, plan.tile_cols,
                            plan.cluster, mbarrier, bulk, path=path)  # fmt: skip
    return plan, sass_opcodes(path)


def _count(ops, prefix: str) -> int:
    return sum(n for op, n in ops.items() if op.startswith(prefix))


@needs_package
@pytest.mark.parametrize("mbarrier", [True, False], ids=["mbarrier", "barrier"])
@pytest.mark.parametrize(
    "cols, dtype", [(4096, "bfloat16"), (1009, "float32"), (262144, "float32")]
)
def test_lowers_for_sm90a_without_a_gpu(cols, dtype, mbarrier, tmp_path):
    plan, ops = _lower_rmsnorm(cols, dtype, tmp_path, mbarrier)
    assert has_opcode(ops, "MUFU.RSQ") and not has_opcode(ops, "LDL")
    split = plan.cluster > 1
    # the mbarrier exchange: one st.async a CTA and one cluster barrier (the start's); the
    # barrier exchange: a second cluster barrier instead
    assert ops.get("UCGABAR_WAIT", 0) == (0 if not split else 1 if mbarrier else 2)
    assert has_opcode(ops, "STAS") == (split and mbarrier)


@needs_package
@pytest.mark.parametrize("cols, dtype", [(262144, "float32"), (70000, "bfloat16"),
                                         (4096, "bfloat16")])  # fmt: skip
def test_bulk_loads_bring_each_slice_of_x_in_by_the_tma_unit(cols, dtype, tmp_path):
    """bulk=True: one UBLKCP (cp.async.bulk) a CTA on an mbarrier of its own, then the
    thread's x vectors from shared memory (LDS.128, one per vector more than the plain
    kernel's); x's LDG.128 are gone, w's stay. 70,000 bf16 leaves the cluster's last CTA no
    values (the plan's rounding): it arms for no bytes and copies nothing."""
    plan, ops = _lower_rmsnorm(cols, dtype, tmp_path, bulk=True)
    _, plain = _lower_rmsnorm(cols, dtype, tmp_path)
    vectors = plan.held // plan.vec
    assert ops["UBLKCP.S.G"] == 1
    assert ops["LDS.128"] - plain.get("LDS.128", 0) == vectors
    assert _count(plain, "LDG") - _count(ops, "LDG") == vectors == _count(ops, "LDG.E.128")
    waits = "SYNCS.PHASECHK.TRANS64.TRYWAIT"
    assert ops[waits] == plain.get(waits, 0) + 1  # the loads' own wait beside the exchange's
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")
    if cols == 70000:
        assert (plan.cluster - 1) * plan.tile_cols >= cols  # the empty last slice


def test_bulk_loads_refuse_rows_of_partial_vectors_in_one_line():
    with pytest.raises(KernelabError, match="16-byte vectors") as raised:
        cute_rows.refuse_partial_vectors("cute rmsnorm", cute_rows.row_plan(1009, 4), True)
    assert "\n" not in str(raised.value)
    cute_rows.refuse_partial_vectors("cute rmsnorm", cute_rows.row_plan(1009, 4), False)
    cute_rows.refuse_partial_vectors("cute rmsnorm", cute_rows.row_plan(70000, 2), True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [1024, 1009, 4096, 8192, 32768, 65536, 262144])
def test_gpu_matches_float64_reference(cols, dtype):
    usable_or_skip()
    from kernelab.harness.check import check_implementation

    fn = registry.get("cute.rmsnorm").build()
    for rows in (1, 37):
        report = check_implementation(fn, "rmsnorm", {"rows": rows, "cols": cols}, dtype,
                                      trials=2, device="cuda")  # fmt: skip
        assert report.ok, report.message


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [65536, 262144])
def test_gpu_the_barrier_exchange_matches_float64_reference(cols, dtype):
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation
    from kernelab.ops.norms import cute_dsl as cute_norms

    fn = functools.partial(cute_norms.rmsnorm, mbarrier=False)
    report = check_implementation(fn, "rmsnorm", {"rows": 37, "cols": cols}, dtype, trials=2,
                                  device="cuda")  # fmt: skip
    assert report.ok, report.message


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [4096, 65536, 262144, 70000])
def test_gpu_bulk_loads_match_float64_reference(cols, dtype):
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation
    from kernelab.ops.norms import cute_dsl as cute_norms

    fn = functools.partial(cute_norms.rmsnorm, bulk=True)
    for rows in (1, 37):
        report = check_implementation(fn, "rmsnorm", {"rows": rows, "cols": cols}, dtype,
                                      trials=2, device="cuda")  # fmt: skip
        assert report.ok, report.message
