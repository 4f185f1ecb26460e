"""cute.softmax: the row plan's arithmetic, the registration and its one-line refusal on the
CPU; the sm_90a lowering when the package is here (no GPU needed); the kernel against the
float64 reference on a Hopper GPU."""

from __future__ import annotations

import pytest
from cute_dsl_support import has_opcode, needs_package, sass_opcodes, usable_or_skip

from kernelab.errors import KernelabError
from kernelab.ops import cute_rows
from kernelab.runtime import cute_dsl
from kernelab.spec import registry

TARGET_COLS = [1024, 4096, 16384, 32768, 65536, 131072, 262144]  # 1K .. 256K


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("cols", [1, 7, 1000, 1009, *TARGET_COLS, 262143])
def test_plan_covers_the_row_and_fits_an_sm(cols, itemsize):
    plan = cute_rows.row_plan(cols, itemsize)
    assert plan.tile_cols * plan.cluster >= cols  # every column has a thread
    assert (plan.tile_cols * (plan.cluster - 1)) < cols  # no CTA of the cluster is idle
    assert plan.held % plan.vec == 0 and plan.threads % cute_rows.WARP == 0
    assert cols % plan.vec == 0  # 128-bit accesses never straddle a row end
    assert plan.vec * itemsize <= 16
    assert cute_rows.fits(plan, "h100-sxm") and cute_rows.fits(plan, "h200")


@pytest.mark.parametrize(
    "cols, cluster", [(1024, 1), (32768, 1), (32769, 2), (65536, 2), (131072, 4), (262144, 8)]
)
def test_cluster_grows_with_the_row(cols, cluster):
    for itemsize in (4, 2):
        plan = cute_rows.row_plan(cols, itemsize)
        assert plan.cluster == cluster
        # each CTA's slice, held as fp32, fits in half the register file of an H100 SM
        assert plan.held_bytes_per_cta <= 256 * 1024 / 2


def test_awkward_rows_fall_back_to_narrower_vectors():
    assert cute_rows.vector_width(4096, 4) == 4
    assert cute_rows.vector_width(4096, 2) == 8
    assert cute_rows.vector_width(1000, 2) == 8
    assert cute_rows.vector_width(1002, 2) == 2
    assert cute_rows.vector_width(1009, 4) == 1


def test_rows_past_a_portable_cluster_are_refused_in_one_line():
    with pytest.raises(KernelabError, match="portable cluster"):
        cute_rows.row_plan(cute_rows.max_cols() + 1, 4)
    with pytest.raises(KernelabError):
        cute_rows.row_plan(0, 4)


def test_registered_beside_triton():
    impl = registry.get("cute.softmax")
    assert impl.op == registry.get("triton.softmax").op == "softmax"
    assert set(impl.dtypes) == {"fp32", "bf16", "fp16"}
    assert impl.metadata["language"] == "cute-dsl"


def test_build_says_why_in_one_line_when_unusable():
    reason = cute_dsl.unusable_reason()
    if reason is None:
        pytest.skip("CuTe-DSL is usable here")
    with pytest.raises(KernelabError) as raised:
        registry.get("cute.softmax").build()
    assert "\n" not in str(raised.value) and str(raised.value) == reason


def test_unusable_reasons():
    if not cute_dsl.package_available():
        assert "pip install 'kernelab[cute]'" in cute_dsl.unusable_reason()
        return
    assert "none found" in cute_dsl.unusable_reason(capability=None)
    assert "8.0" in cute_dsl.unusable_reason(capability=(8, 0))
    assert cute_dsl.unusable_reason(capability=(9, 0)) is None


def _lower_softmax(cols: int, dtype, tmp_path, mbarrier: bool = True, bulk: bool = False):
    import cuda.bindings.driver as cuda
    import torch

    from kernelab.ops.softmax import cute_dsl_kernel

    x = torch.empty(3, cols, dtype=dtype)
    plan = cute_rows.row_plan(cols, x.element_size())
    tensors = cute_rows.row_tensors(plan, x, torch.empty_like(x))
    path = tmp_path / f"softmax_{cols}_{mbarrier}_{bulk}.cubin"
    cute_dsl.lower_to_cubin(cute_dsl_kernel.softmax_launch, *tensors, cuda.CUstream(0),
                            plan.vec, plan.threads, plan.tile_cols, plan.cluster, mbarrier,
                            bulk, path=path)  # fmt: skip
    return plan, sass_opcodes(path)


@needs_package
@pytest.mark.parametrize("cols, dtype", [(4096, "float32"), (1009, "bfloat16")])
def test_lowers_for_sm90a_without_a_gpu(cols, dtype, tmp_path):
    import torch

    plan, ops = _lower_softmax(cols, getattr(torch, dtype), tmp_path)
    assert has_opcode(ops, "MUFU.EX2") and has_opcode(ops, "SHFL.BFLY")
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")  # the row stays in registers
    if plan.vec * plan.itemsize == 16:
        assert has_opcode(ops, "LDG.E.128") and has_opcode(ops, "STG.E.128")


@needs_package
def test_a_long_rows_pairs_land_on_an_mbarrier_after_one_cluster_barrier(tmp_path):
    """The default exchange: st.async of each (max, sum) pair to its CTA (STAS.64), completing
    bytes on that CTA's mbarrier (SYNCS.*), which each CTA waits on for its own peers; the
    only cluster barrier is the one at the start that makes every mbarrier live."""
    import torch

    plan, ops = _lower_softmax(262144, torch.float32, tmp_path)
    assert plan.cluster == 8
    assert ops["STAS.64"] == 1 and has_opcode(ops, "SYNCS.ARRIVE.TRANS64")
    assert has_opcode(ops, "SYNCS.PHASECHK")
    assert ops["UCGABAR_ARV"] == 1 and ops["UCGABAR_WAIT"] == 1
    assert not has_opcode(ops, "MEMBAR")  # no fence over the whole GPU, as the barrier needs
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")


@needs_package
@pytest.mark.parametrize("cols, dtype", [(262144, "float32"), (70000, "bfloat16"),
                                         (4096, "bfloat16")])  # fmt: skip
def test_bulk_loads_bring_each_slice_in_by_the_tma_unit(cols, dtype, tmp_path):
    """bulk=True: one UBLKCP (cp.async.bulk) a CTA on an mbarrier, then the thread's vectors
    from shared memory (LDS.128, one per vector more than the exchange's own), no LDG."""
    import torch

    plan, ops = _lower_softmax(cols, getattr(torch, dtype), tmp_path, bulk=True)
    _, plain = _lower_softmax(cols, getattr(torch, dtype), tmp_path)
    assert ops["UBLKCP.S.G"] == 1 and not has_opcode(ops, "LDG")
    assert ops["LDS.128"] - plain.get("LDS.128", 0) == plan.held // plan.vec
    assert has_opcode(ops, "SYNCS.PHASECHK") and not has_opcode(ops, "LDL")


@pytest.mark.gpu
def test_gpu_bulk_loads_refuse_rows_of_partial_vectors_in_one_line():
    usable_or_skip()  # the refusal comes after the checks that need the GPU
    import torch

    from kernelab.ops.softmax import cute_dsl as cute_softmax

    with pytest.raises(KernelabError, match="16-byte vectors"):
        cute_softmax.softmax(torch.empty(2, 1009, device="cuda"), bulk=True)


@needs_package
def test_a_long_rows_exchange_can_close_with_a_second_cluster_barrier(tmp_path):
    import torch

    plan, ops = _lower_softmax(262144, torch.float32, tmp_path, mbarrier=False)
    assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2
    assert not has_opcode(ops, "STAS") and not has_opcode(ops, "SYNCS")
    assert not has_opcode(ops, "LDL") and not has_opcode(ops, "STL")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [*TARGET_COLS, 1009, 70001])
def test_gpu_matches_float64_reference(cols, dtype):
    usable_or_skip()
    from kernelab.harness.check import check_implementation

    fn = registry.get("cute.softmax").build()  # the mbarrier exchange
    for rows in (1, 37):
        report = check_implementation(fn, "softmax", {"rows": rows, "cols": cols}, dtype,
                                      trials=2, device="cuda")  # fmt: skip
        assert report.ok, report.message


@pytest.mark.gpu
def test_gpu_rows_sum_to_one_and_extremes():
    usable_or_skip()
    import torch

    fn = registry.get("cute.softmax").build()
    x = torch.randn(5, 131072, device="cuda") * 1e4  # huge logits: the max is subtracted
    y = fn(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(
        y.double().sum(-1), torch.ones(5, dtype=torch.float64, device="cuda")
    )
    x[2] = float("-inf")  # a row of only -inf: NaN, as torch.softmax
    assert torch.isnan(fn(x)[2]).all() and torch.isfinite(fn(x)[1]).all()


def test_importing_kernelab_and_its_registry_never_imports_cutlass():
    import subprocess
    import sys

    code = (
        "import sys, kernelab, kernelab.runtime.cute_dsl, kernelab.ops.cute_rows, "
        "kernelab.ladders.hgemm.cute_dsl\n"
        "from kernelab.spec import registry\n"
        "registry.implementations()\n"
        "print('cutlass' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_records_name_the_dsl_version_where_installed():
    from kernelab.environment import software_versions

    versions = software_versions()
    assert versions.get("nvidia-cutlass-dsl") == cute_dsl.installed_version()
    assert ("nvidia-cutlass-dsl" in versions) == (cute_dsl.installed_version() is not None)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [65536, 262144, 70001])
def test_gpu_the_barrier_exchange_matches_float64_reference(cols, dtype):
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation
    from kernelab.ops.softmax import cute_dsl as cute_softmax

    fn = functools.partial(cute_softmax.softmax, mbarrier=False)
    report = check_implementation(fn, "softmax", {"rows": 37, "cols": cols}, dtype, trials=2,
                                  device="cuda")  # fmt: skip
    assert report.ok, report.message


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("cols", [4096, 65536, 262144, 70000])
def test_gpu_bulk_loads_match_float64_reference(cols, dtype):
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation
    from kernelab.ops.softmax import cute_dsl as cute_softmax

    fn = functools.partial(cute_softmax.softmax, bulk=True)
    for rows in (1, 37):
        report = check_implementation(fn, "softmax", {"rows": rows, "cols": cols}, dtype,
                                      trials=2, device="cuda")  # fmt: skip
        assert report.ok, report.message
