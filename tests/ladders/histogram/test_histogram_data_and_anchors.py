"""The histogram ladder's data and anchors without a GPU: the MoE routing ids (k distinct
experts per token, ids in range, T x k of them, drawn from the softmax of the router logits,
uneven counts), the data kinds make_values gives, the CUB anchor's order (cuda.compute's
histogram_even first, checked exact before it is timed, CuPy after) with stand-ins for the
packages, and the timing's columns (% of read beside % of copy, the do_bench median and the
host cost per call) from stand-in timers on the CPU."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.ladders.histogram import ladder  # noqa: E402
from kernelab.ladders.histogram.ladder import (  # noqa: E402
    DISTRIBUTIONS,
    make_values,
    moe_routing_ids,
    moe_top_k,
)

# ---- MoE routing data ------------------------------------------------------------------------


@pytest.mark.parametrize("experts, top_k", [(8, 2), (64, 8), (256, 8), (4096, 8), (1, 1), (5, 5)])
def test_moe_routing_gives_k_distinct_experts_per_token_in_range(experts, top_k):
    tokens = 3001
    ids = moe_routing_ids(tokens, experts, top_k, seed=3, device="cpu")
    assert ids.dtype == torch.int32 and ids.shape == (tokens * top_k,)
    per_token = ids.reshape(tokens, top_k)
    assert int(ids.min()) >= 0 and int(ids.max()) < experts
    ordered = per_token.sort(dim=1).values
    assert bool((ordered[:, 1:] != ordered[:, :-1]).all())  # k distinct experts, every token
    counts = torch.bincount(ids.long(), minlength=experts)
    assert counts.shape == (experts,) and int(counts.sum()) == tokens * top_k
    assert int(counts.max()) <= tokens  # an expert at most once per token


def test_moe_routing_loads_are_uneven_as_behind_a_router():
    """64 experts, top-8, 20,000 tokens: the counts are far from uniform (a chi-square against
    equal loads dozens of times its degrees of freedom, where multinomial noise alone would
    give about 1x), the busiest expert well above the mean and the idlest well below."""
    tokens, experts, top_k = 20_000, 64, 8
    counts = torch.bincount(
        moe_routing_ids(tokens, experts, top_k, seed=1, device="cpu").long(), minlength=experts
    ).double()
    mean = tokens * top_k / experts
    chi2 = float(((counts - mean) ** 2 / mean).sum())
    assert chi2 > 20 * (experts - 1), chi2
    assert float(counts.max()) > 1.4 * mean and float(counts.min()) < 0.7 * mean
    # uniform ids at the same size stay near equal loads: the test can tell them apart
    uniform = torch.bincount(torch.randint(0, experts, (tokens * top_k,)), minlength=experts)
    assert float(((uniform.double() - mean) ** 2 / mean).sum()) < 3 * (experts - 1)


def test_moe_routing_draws_from_the_softmax_of_the_logits():
    """With no per-token noise, every token's logits are the bias: its first expert is a draw
    from softmax(bias) (the Gumbel-top-k trick), checked by a chi-square goodness of fit."""
    bias = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, -3.0])
    tokens = 100_000
    first = moe_routing_ids(tokens, 8, 2, seed=5, device="cpu", bias=bias, token_noise=0.0)
    first = first.reshape(tokens, 2)[:, 0].long()
    observed = torch.bincount(first, minlength=8).double()
    expected = torch.softmax(bias.double(), 0) * tokens
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 7 + 5 * (2 * 7) ** 0.5, (observed, expected)  # dof 7: mean 7, sd ~3.7


def test_moe_routing_is_reproducible_and_bounded():
    a = moe_routing_ids(500, 64, 8, seed=11, device="cpu")
    assert torch.equal(a, moe_routing_ids(500, 64, 8, seed=11, device="cpu"))
    assert not torch.equal(a, moe_routing_ids(500, 64, 8, seed=12, device="cpu"))
    assert moe_routing_ids(0, 8, 2, device="cpu").numel() == 0
    for bad in ((10, 8, 9), (10, 8, 0), (-1, 8, 2), (10, 0, 1)):
        with pytest.raises(KernelabError, match="top_k"):
            moe_routing_ids(*bad, device="cpu")


def test_moe_top_k_follows_the_routers_it_names():
    assert [moe_top_k(e) for e in (1, 2, 8, 16, 64, 128, 256, 4096)] == [1, 2, 2, 2, 8, 8, 8, 8]


# ---- the data kinds ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
@pytest.mark.parametrize("bins", [1, 8, 64, 256, 4096])
@pytest.mark.parametrize("n", [1, 7, 1001])
def test_every_data_kind_gives_n_values_inside_the_bins(dtype, bins, n):
    assert DISTRIBUTIONS == ("uniform", "skewed", "moe")
    top = min(bins, 256) if dtype == "uint8" else bins
    for distribution in DISTRIBUTIONS:
        values = make_values(n, bins, dtype, distribution, device="cpu")
        assert values.shape == (n,) and values.dtype == getattr(torch, dtype)
        assert 0 <= int(values.min()) and int(values.max()) < top, distribution
    # the moe kind is whole tokens, token by token: the first k values are one token's
    k = moe_top_k(top)
    moe = make_values(1001, bins, dtype, "moe", device="cpu", seed=4).long()
    tokens = moe_routing_ids(-(-1001 // k), top, k, seed=4, device="cpu")
    assert torch.equal(moe, tokens[:1001].long())
    with pytest.raises(KernelabError, match="moe"):
        make_values(8, bins, dtype, "zipf", device="cpu")


# ---- the CUB anchor: cuda.compute first, CuPy after, each checked exact --------------------------


def _install_cuda_compute(monkeypatch, histogram_even):
    """A stand-in cuda.compute module with `histogram_even` (or none, when None)."""
    fake = ModuleType("cuda.compute")
    if histogram_even is not None:
        fake.histogram_even = histogram_even
    monkeypatch.setitem(sys.modules, "cuda.compute", fake)
    try:
        import cuda

        monkeypatch.setattr(cuda, "compute", fake, raising=False)
    except ImportError:
        parent = ModuleType("cuda")
        parent.compute = fake
        monkeypatch.setitem(sys.modules, "cuda", parent)
    monkeypatch.setitem(sys.modules, "cupy", None)  # CuPy absent: `import cupy` fails


def _cub_histogram_even(calls):
    """CUB's HistogramEven as cuda.compute documents it: num_output_levels - 1 equal bins over
    [lower_level, upper_level), samples outside not counted, into d_histogram."""

    def histogram_even(*, d_samples, d_histogram, num_output_levels, lower_level, upper_level,
                       num_samples, stream=None):  # fmt: skip
        calls.append((type(lower_level), type(upper_level), int(num_output_levels)))
        bins = num_output_levels - 1
        samples = d_samples[:num_samples].long()
        width = (int(upper_level) - int(lower_level)) / bins
        inside = (samples >= int(lower_level)) & (samples < int(upper_level))
        index = ((samples[inside] - int(lower_level)) / width).long()
        d_histogram.copy_(torch.bincount(index, minlength=bins).to(d_histogram.dtype))

    return histogram_even


@pytest.mark.parametrize("dtype, bins", [("int32", 64), ("uint8", 256), ("uint8", 100)])
def test_cub_anchor_takes_cuda_compute_histogram_even_first(monkeypatch, dtype, bins):
    calls = []
    _install_cuda_compute(monkeypatch, _cub_histogram_even(calls))
    fn, line = ladder.cub_anchor(bins, dtype, device="cpu")
    assert fn is not None and "cuda.compute.histogram_even" in line
    assert "cupy does not import" in line  # what is not timed is said, in the same line
    assert calls == [(np.int32, np.int32, bins + 1)]  # the exactness check ran it once
    values = make_values(5000, bins, dtype, "uniform", device="cpu", seed=2)
    counts = fn(values)
    assert counts.dtype == torch.int32 and counts.shape == (bins,)
    assert torch.equal(counts.long(), torch.bincount(values.long(), minlength=bins)[:bins])


def test_a_wrong_or_missing_cub_anchor_is_not_timed_and_says_why(monkeypatch):
    def off_by_one(*, d_samples, d_histogram, **_):
        d_histogram.fill_(1)

    _install_cuda_compute(monkeypatch, off_by_one)
    fn, line = ladder.cub_anchor(64, "int32", device="cpu")
    assert fn is None and line.startswith("CUB: not measured (")
    assert "histogram_even not timed (its counts differ from the exact ones)" in line
    assert "pip install 'kernelab[cub]'" in line and "\n" not in line

    _install_cuda_compute(monkeypatch, None)  # an older cuda-cccl
    fn, line = ladder.cub_anchor(64, "int32", device="cpu")
    assert fn is None and "no histogram_even" in line

    def raises(**_):
        raise TypeError("histogram_even() got an unexpected keyword argument 'd_samples'")

    _install_cuda_compute(monkeypatch, raises)
    fn, line = ladder.cub_anchor(64, "int32", device="cpu")
    assert fn is None and "TypeError: histogram_even() got an unexpected keyword" in line


# ---- the timing's columns, on the CPU with stand-ins ---------------------------------------------


def test_time_ladder_reports_read_and_copy_and_the_timing_extras(monkeypatch):
    from kernelab.harness import ceilings
    from kernelab.harness.ceilings import DeviceIdentity

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    monkeypatch.setattr(ladder, "cub_anchor", lambda bins, dtype: (None, "CUB: not measured (x)"))
    monkeypatch.setattr(ladder, "make_values",
                        lambda n, bins, dtype, distribution: make_values(
                            n, bins, dtype, distribution, device="cpu"))  # fmt: skip
    times = iter([0.02, 0.04] * 10)  # copy, torch.bincount; per case

    def timer(fn):
        fn()  # the copy and torch.bincount really run, on the CPU
        return SimpleNamespace(median_ms=next(times), rel_noise=0.0, mode="cold",
                               samples_ms=[0.0], summary=SimpleNamespace(to_dict=dict))  # fmt: skip

    monkeypatch.setattr(ladder, "timed_rows", _with_timer(ladder.timed_rows, timer))
    n, bins = 1 << 20, 256
    rows, records, notes = ladder.time_ladder(
        [], [n], bins, "int32", read=(4.0e12, "fixture"), distributions=DISTRIBUTIONS,
        do_bench=lambda fn: [0.05], host_cost=lambda fn, ms: {"wall_us": 30.0},
    )  # fmt: skip
    assert [(r["distribution"], r["step"]) for r in rows] == [
        (d, s) for d in DISTRIBUTIONS for s in ("copy", "torch.bincount")
    ]
    anchor = rows[1]
    gbps = (n * 4 + (bins + 1) * 8) / 0.04e-3 / 1e9
    assert anchor["gbps"] == pytest.approx(gbps)
    assert anchor["pct_of_read"] == pytest.approx(100 * gbps / 4000)
    assert anchor["pct_of_copy"] == pytest.approx(100 * gbps / (2 * n * 4 / 0.02e-3 / 1e9))
    assert anchor["do_bench_median_ms"] == 0.05 and anchor["host_cost"] == {"wall_us": 30.0}
    assert notes[0] == "CUB: not measured (x)"
    assert "4,000 GB/s (fixture)" in notes[1] and "% of copy" in notes[1]
    assert records[1].extra["pct_of_read"] == pytest.approx(anchor["pct_of_read"])
    assert records[1].extra["distribution"] == "uniform"
    # unless asked, the MoE case is checked but not timed (the command's cases keep their shape)
    assert ladder.TIMED_DISTRIBUTIONS == ("uniform", "skewed")
    rows, _, _ = ladder.time_ladder([], [1000], 8, "uint8", read=(None, "no ceiling"),
                                    do_bench=False, host_cost=False)  # fmt: skip
    assert {r["distribution"] for r in rows} == {"uniform", "skewed"}
    assert all(r["pct_of_read"] is None for r in rows)


def _with_timer(timed_rows, timer):
    def wrapped(*args, **kwargs):
        return timed_rows(*args, **kwargs, timer=timer)

    return wrapped


def test_the_timing_table_shows_the_read_ceiling_column_where_it_was_measured():
    from rich.console import Console

    from kernelab.commands.ladder_primitives import _render_primitive_timing

    row = {"shape": {"n": 1 << 26, "bins": 256}, "distribution": "uniform",
           "step": "histogram:03", "median_ms": 0.1, "gbps": 2700.0, "pct_of_copy": 63.5,
           "pct_of_read": 81.2, "speedup_vs_prev": 1.4, "speedup_vs_anchor": 6.0}  # fmt: skip
    result = {"checks": [], "rows": [row], "ladder": "histogram", "dtype": "uint8",
              "mode": "cold", "gpu": "a stand-in", "notes": []}  # fmt: skip
    console = Console(record=True, width=200)
    _render_primitive_timing(result, console)
    text = console.export_text()
    assert "% of read" in text and "81.2" in text and "63.5" in text
    console = Console(record=True, width=200)
    _render_primitive_timing({**result, "rows": [{**row, "pct_of_read": None}]}, console)
    assert "% of read" not in console.export_text()  # no read ceiling, no column
