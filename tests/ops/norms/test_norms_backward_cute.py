"""cute.rmsnorm_backward: its plan (x, dy and the dweight partial held: rows up to MAX_COLS
in one CTA), the registration and its one-line refusal on the CPU; the sm_90a lowering when
the package is here (no GPU needed), bulk=True (x and dy by the TMA unit) beside the default;
the kernel against the float64 reference on a Hopper GPU, dweight included (the last row of
the stacked output)."""

from __future__ import annotations

import pytest
from cute_dsl_support import has_opcode, needs_package, sass_opcodes, usable_or_skip

from kernelab.errors import KernelabError
from kernelab.ops import cute_rows
from kernelab.ops.norms import cute_dsl_backward
from kernelab.runtime import cute_dsl
from kernelab.spec import registry

TARGET_COLS = [1024, 2048, 4096, 8192]


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("cols", [1, 1009, 4097, *TARGET_COLS])
def test_plan_holds_the_row_in_one_cta_without_spilling(cols, itemsize):
    plan = cute_dsl_backward.backward_plan(cols, itemsize)
    assert plan.cluster == 1 and plan.tile_cols >= cols
    # 64 registers a thread at 1,024 threads spill x, dy and the partial (lowered, sm_90a)
    assert plan.threads <= cute_rows.MAX_THREADS // 2
    assert 3 * plan.held <= 48


def test_rows_past_one_cta_are_refused_in_one_line():
    with pytest.raises(KernelabError, match="at most 8192 columns") as raised:
        cute_dsl_backward.backward_plan(cute_dsl_backward.MAX_COLS + 1, 2)
    assert "\n" not in str(raised.value)


def test_registered_beside_triton():
    impl = registry.get("cute.rmsnorm_backward")
    assert impl.op == registry.get("triton.rmsnorm_backward").op == "rmsnorm_backward"
    assert set(impl.dtypes) == {"fp32", "bf16", "fp16"}
    assert impl.metadata["language"] == "cute-dsl"


def test_build_says_why_in_one_line_when_unusable():
    reason = cute_dsl.unusable_reason()
    if reason is None:
        pytest.skip("CuTe-DSL is usable here")
    with pytest.raises(KernelabError) as raised:
        registry.get("cute.rmsnorm_backward").build()
    assert "\n" not in str(raised.value) and str(raised.value) == reason


def _lower(cols: int, dtype, tmp_path, bulk: bool = False):
    import cuda.bindings.driver as cuda
    import torch
    from cutlass import Float32
    from cutlass.cute.runtime import from_dlpack

    from kernelab.ops.norms import cute_dsl_backward_kernel

    x = torch.empty(3, cols, dtype=dtype)
    plan = cute_dsl_backward.backward_plan(cols, x.element_size())
    mx, mdy, mdx = cute_rows.row_tensors(plan, x, torch.empty_like(x), torch.empty_like(x))
    mw = cute_rows.row_tensors(plan, torch.empty(1, cols, dtype=dtype))[0]
    partial = torch.empty(2, cols, dtype=torch.float32)
    mp = from_dlpack(partial, assumed_align=16).mark_compact_shape_dynamic(
        mode=0, stride_order=(0, 1)
    )
    path = tmp_path / f"rmsnorm_backward_{cols}_{bulk}.cubin"
    cute_dsl.lower_to_cubin(cute_dsl_backward_kernel.rmsnorm_backward_launch, mx, mw, mdy, mdx,
                            mp, Float32(1e-6), cuda.CUstream(0), plan.vec, plan.threads,
                            plan.tile_cols, bulk, path=path)  # fmt: skip
    return plan, sass_opcodes(path)


@needs_package
@pytest.mark.parametrize(
    "cols, dtype", [(4096, "float32"), (1009, "bfloat16"), (8192, "float32"), (8192, "bfloat16")]
)
def test_lowers_for_sm90a_without_a_gpu(cols, dtype, tmp_path):
    import torch

    plan, ops = _lower(cols, getattr(torch, dtype), tmp_path)
    assert has_opcode(ops, "MUFU.RSQ") and has_opcode(ops, "SHFL.BFLY")
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")  # x, dy, dw in registers
    if plan.vec * plan.itemsize == 16:
        assert has_opcode(ops, "LDG.E.128") and has_opcode(ops, "STG.E.128")


@needs_package
@pytest.mark.parametrize("cols, dtype", [(4096, "float32"), (8192, "bfloat16"),
                                         (8192, "float32")])  # fmt: skip
def test_bulk_loads_bring_x_and_dy_in_by_the_tma_unit(cols, dtype, tmp_path):
    """bulk=True: x and dy by UBLKCP (cp.async.bulk) on one mbarrier, two for the first row
    before the loop and two for the next row inside it; the thread's x and dy vectors come
    from shared memory (LDS.128, two per vector more than the plain kernel's), their LDG.128
    are gone, w's (twice a row) stay; the wait's parity flips each row."""
    import torch

    plan, ops = _lower(cols, getattr(torch, dtype), tmp_path, bulk=True)
    _, plain = _lower(cols, getattr(torch, dtype), tmp_path)
    vectors = plan.held // plan.vec
    assert ops["UBLKCP.S.G"] == 4 and not has_opcode(plain, "UBLKCP")
    assert ops["LDS.128"] - plain.get("LDS.128", 0) == 2 * vectors
    assert plain["LDG.E.128"] - ops["LDG.E.128"] == 2 * vectors
    assert ops["LDG.E.128"] == 2 * vectors  # w, for the sums and for dx
    assert has_opcode(ops, "SYNCS.PHASECHK") and not has_opcode(plain, "SYNCS")
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")


def test_bulk_loads_refuse_rows_of_partial_vectors_in_one_line():
    plan = cute_dsl_backward.backward_plan(1009, 2)
    with pytest.raises(KernelabError, match="cute rmsnorm_backward: bulk loads need rows"):
        cute_rows.refuse_partial_vectors("cute rmsnorm_backward", plan, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [*TARGET_COLS, 1009, 4097])
def test_gpu_matches_float64_reference(cols, dtype):
    usable_or_skip()
    from kernelab.harness.check import check_implementation

    fn = registry.get("cute.rmsnorm_backward").build()
    shapes = ({"rows": 1, "cols": cols}, {"rows": 37, "cols": cols, "stride": cols + 8},
              {"rows": 4099, "cols": cols})  # fmt: skip
    for shape in shapes:
        report = check_implementation(fn, "rmsnorm_backward", shape, dtype, trials=2,
                                      device="cuda")  # fmt: skip
        assert report.ok, report.message


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", TARGET_COLS)
def test_gpu_bulk_loads_match_float64_reference(cols, dtype):
    """4,099 rows: every CTA of the persistent grid walks several, so the next row's copies
    and the wait's flipping parity are exercised."""
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation
    from kernelab.ops.norms import cute_dsl_backward as backward

    fn = functools.partial(backward.rmsnorm_backward, bulk=True)
    for rows in (1, 37, 4099):
        report = check_implementation(fn, "rmsnorm_backward", {"rows": rows, "cols": cols},
                                      dtype, trials=2, device="cuda")  # fmt: skip
        assert report.ok, report.message
