"""The reduction ladder on a GPU (marked gpu): every step correct over sizes and dtypes
through the registry and the checker, views and misaligned starts, n past 2^31 with 64-bit
indexing, the one-pass step's counter reset between calls, and the anchors. The targets are
measured by benchmarks/reduce_ladder.py, not here (a timed test would be a flaky test)."""

from __future__ import annotations

import pytest

from kernelab.ladders.reduce import STEPS, reduce_sum

pytestmark = pytest.mark.gpu

SIZES = (1, 2, 3, 31, 33, 255, 256, 257, 511, 513, 1023, 100003, 1 << 20, (1 << 24) + 7)
DTYPES = ("fp32", "bf16", "fp16")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_over_sizes(step, dtype):
    from kernelab.harness.check import check_implementation
    from kernelab.spec.registry import get

    fn = get(step.name).build()
    for n in SIZES:
        report = check_implementation(fn, "reduce_sum", {"n": n}, dtype, trials=2)
        assert report.ok, report.message


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_views_and_misaligned_starts(step):
    import torch

    base = torch.randn(100003 + 8, device="cuda") + 1.0
    for offset in range(1, 8):  # every start that is not 16-byte aligned, and more
        x = base[offset : offset + 100003]
        assert torch.allclose(reduce_sum(step, x).double(), x.double().sum(), rtol=2e-5)
    strided = base[::3]
    assert torch.allclose(reduce_sum(step, strided).double(), strided.double().sum(), rtol=2e-5)
    matrix = base[:100000].view(100, 1000).t()  # any shape: the sum of all elements
    assert torch.allclose(reduce_sum(step, matrix).double(), matrix.double().sum(), rtol=2e-5)
    empty = base[:0]
    assert reduce_sum(step, empty).item() == 0.0


def test_one_pass_step_resets_its_counter_between_calls():
    import torch

    step = STEPS[-1]
    for n in (5, 1 << 22, 7, 1 << 22):  # grids of different sizes, one after the other
        x = torch.ones(n, device="cuda")
        assert reduce_sum(step, x).item() == n


@pytest.mark.parametrize(
    "step", [s for s in STEPS if s.elements_per_block == 0], ids=lambda s: s.name
)
@pytest.mark.whole_card  # GiBs past 2^31 elements: alone, or it skips for want of memory
def test_past_2_to_the_31_elements(step):
    """2^31 + 17 fp16 elements (4 GiB): indices past the 32-bit range. Ones sum exactly in
    fp32 only up to 2^24 per chain; each thread's chain here is ~2^13, the tree adds exactly."""
    import torch

    n = 2**31 + 17
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * n * 2:
        pytest.skip(f"needs {3 * n * 2 / 2**30:.0f} GiB free on the GPU")
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    x[-1] = 5.0  # the last element, past 2^31, must be read
    assert reduce_sum(step, x).item() == pytest.approx(n + 4, rel=1e-6)
    del x
    torch.cuda.empty_cache()


def test_the_steps_match_torch_sum_and_cub_where_present():
    import torch

    from kernelab.errors import KernelabError
    from kernelab.ladders.reduce import ladder

    cub, line = ladder.cub_anchor()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = (torch.randn(1 << 20, device="cuda") + 1).to(dtype)
        expected = x.double().sum()
        assert torch.allclose(torch.sum(x, dtype=torch.float32).double(), expected, rtol=2e-5)
        if cub is None:
            continue
        if dtype == torch.bfloat16 and "CuPy" in line:
            # the ladder's check of the anchor leaves bf16 out of CUB's timings, not fp32's
            with pytest.raises(KernelabError, match="bfloat16"):
                cub(x)
            continue
        assert torch.allclose(cub(x).double(), expected, rtol=2e-5), dtype
    if cub is None:
        pytest.skip(line)


def test_ladder_cli_times_a_short_run(capsys):
    import json

    from kernelab.cli import main

    assert main(["ladder", "reduce", "--steps", "8-10", "--sizes", "2^20", "--max-time", "0.2",
                 "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["timed"] and all(c["ok"] for c in data["checks"])
    steps = [r["step"] for r in data["rows"]]
    assert steps[0] == "torch.sum" and steps[-3:] == ["reduce:08", "reduce:09", "reduce:10"]
    assert all(r["gb_per_s"] > 0 for r in data["rows"])


def test_an_anchor_wrong_for_one_dtype_is_still_timed_for_the_others(monkeypatch):
    import torch

    from kernelab.errors import KernelabError
    from kernelab.ladders.reduce import ladder

    def fp32_only(x):
        if x.dtype != torch.float32:
            raise KernelabError("this anchor sums fp32 only")
        return torch.sum(x, dtype=torch.float32)

    monkeypatch.setattr(ladder, "cub_anchor", lambda: (fp32_only, "a stand-in CUB"))
    steps = [s for s in ladder.STEPS if s.name == "reduce:10"]
    measurements, _, line = ladder.time_ladder(steps, [1 << 20], ["fp32", "bf16"], max_time_s=0.05)
    timed = {(m["step"], m["dtype"]) for m in measurements}
    assert ("cub", "fp32") in timed and ("cub", "bf16") not in timed
    assert {("reduce:10", "fp32"), ("reduce:10", "bf16")} <= timed
    assert "not timed for bf16 (KernelabError: this anchor sums fp32 only)" in line


def test_measurements_carry_do_bench_and_the_host_cost_per_call():
    """On a GPU the real extras: triton.testing.do_bench's median (where Triton imports) and
    the launch-cost loop's host and wall time per call, beside the harness's median."""
    from kernelab.ladders.reduce import ladder

    steps = [s for s in ladder.STEPS if s.name == "reduce:10"]
    measurements, records, _ = ladder.time_ladder(steps, [1 << 20], ["fp32"], max_time_s=0.05)
    try:
        import triton.testing  # noqa: F401

        has_triton = True
    except ImportError:
        has_triton = False
    for m, record in zip(measurements, records, strict=True):
        assert m["median_ms"] > 0
        host = m["host_cost"]
        assert host["calls"] >= 10 and host["wall_us"] > 0 and host["host_us"] > 0
        assert host["device_us"] == pytest.approx(m["median_ms"] * 1e3)
        if has_triton:
            assert m["do_bench_median_ms"] > 0 and m["do_bench_samples"] >= 1
        assert record.extra["host_cost"] == host
