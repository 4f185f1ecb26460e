"""The histogram ladder on a GPU: every step's counts exact over sizes, bin counts, value
types, uniform, skewed and MoE routing data and out-of-range ids, and past 2^31 values (64-bit
indexing) and 2^32 in one bin (64-bit counts). The targets are measured by
benchmarks/primitives_ladders.py, not here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelab.ladders.histogram import STEPS, histogram  # noqa: E402
from kernelab.ladders.histogram.ladder import DISTRIBUTIONS, make_values  # noqa: E402
from kernelab.ladders.histogram.steps import LOAD_CANDIDATES  # noqa: E402
from kernelab.spec.primitives import histogram_counts  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_counts_exactly(step, dtype):
    for n in (1, 7, 31, 33, 100003, 1 << 22):
        for bins in (1, 8, 64, 256, 4096):
            for distribution in DISTRIBUTIONS:
                values = make_values(n, bins, dtype, distribution, seed=n)
                got = histogram(step, values, bins)
                assert torch.equal(got, histogram_counts(values, bins)), (n, bins, distribution)
            values, _ = get_op("histogram").make_inputs(
                {"n": n, "bins": bins}, dtype, seed=3, device="cuda"
            )
            assert torch.equal(histogram(step, values, bins), histogram_counts(values, bins))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_strided_multidimensional_and_empty_inputs(step):
    values = torch.randint(0, 8, (64, 9), device="cuda", dtype=torch.int32)
    assert torch.equal(histogram(step, values[:, ::2], 8), histogram_counts(values[:, ::2], 8))
    empty = histogram(step, torch.empty(0, dtype=torch.uint8, device="cuda"), 8)
    assert empty.tolist() == [0] * 9


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
@pytest.mark.whole_card  # GiBs past 2^31 elements: alone, or it skips for want of memory
def test_more_than_2_to_the_32_in_one_bin_does_not_wrap(step):
    """Counts are 64-bit: 2^32 + 5 ones (4 GiB of uint8) land exactly."""
    free, _ = torch.cuda.mem_get_info()
    if free < (5 << 30):
        pytest.skip("needs 5 GiB of free GPU memory")
    n = (1 << 32) + 5
    values = torch.ones(n, dtype=torch.uint8, device="cuda")
    counts = histogram(step, values, 4)
    assert counts.tolist() == [0, n, 0, 0, 0]


@pytest.mark.whole_card  # 2 GiB of uint8 or 8 GiB of int32 values: alone on the card
@pytest.mark.parametrize(
    "dtype, period, bins", [("uint8", 251, 256), ("int32", 4093, 4096)], ids=["uint8", "int32"]
)
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_more_than_2_to_the_31_values_index_right(step, dtype, period, bins):
    """2^31 + 17 values (2 GiB of uint8, 8 GiB of int32): value i is i mod a prime period, so
    no power of two divides the pattern and a read at a wrapped 32-bit index (i - 2^31 or
    i - 2^32) lands in another bin; the last value, past 2^31, is set apart in the top bin.
    The counts are known in closed form (a reference would need 16 GiB of int64)."""
    n = (1 << 31) + 17
    itemsize = 1 if dtype == "uint8" else 4
    free, _ = torch.cuda.mem_get_info()
    if free < 2 * n * itemsize + (1 << 30):  # the values and the repeat they are cut from
        pytest.skip(f"needs {2 * n * itemsize / 2**30 + 1:.0f} GiB of free GPU memory")
    torch_dtype = torch.uint8 if dtype == "uint8" else torch.int32
    pattern = torch.arange(period, dtype=torch_dtype, device="cuda")
    values = pattern.repeat(n // period + 1)[:n]
    values[-1] = bins - 1  # past 2^31, in a bin no other value fills
    counts = histogram(step, values, bins).cpu()
    expected = torch.zeros(bins + 1, dtype=torch.int64)
    full, rest = divmod(n, period)
    expected[:period] = full
    expected[:rest] += 1
    expected[(n - 1) % period] -= 1
    expected[bins - 1] += 1
    assert torch.equal(counts, expected), step.name
    del values
    torch.cuda.empty_cache()


def test_timing_reports_read_and_copy_and_times_the_moe_case_when_asked():
    """A short run over every data kind: each row has % of copy, % of the read ceiling (a
    read ceiling is measured or cached on any GPU), the host cost per call, and the notes
    say which read ceiling and which CUB path."""
    from kernelab.ladders.histogram import ladder

    rows, records, notes = ladder.time_ladder(
        list(STEPS), [1 << 20], 64, "int32", distributions=ladder.DISTRIBUTIONS,
        max_time_s=0.05,
    )  # fmt: skip
    assert {r["distribution"] for r in rows} == {"uniform", "skewed", "moe"}
    for row in rows:
        assert row["pct_of_copy"] > 0 and row["pct_of_read"] > 0
        assert row["host_cost"]["wall_us"] > 0
    assert any(note.startswith("CUB: ") for note in notes)
    assert any("% of read" in note and "GB/s" in note for note in notes)
    assert len(records) == len(rows)


@pytest.mark.parametrize("loads", [None, *LOAD_CANDIDATES])
@pytest.mark.parametrize("dtype", ["int32", "uint8"])
@pytest.mark.parametrize("step", [s for s in STEPS if s.units], ids=lambda s: s.name)
def test_unit_steps_at_every_load_candidate_and_offset(step, dtype, loads):
    """Steps 4-5 at each HISTOGRAM_LOADS candidate: views starting 0-15 values past a 16-byte
    boundary (head, whole units, tail), bins on both sides of step 5's per-lane copies."""
    for bins in (8, 256, 257, 4096):
        values = make_values((1 << 20) + 40, bins, dtype, "uniform", seed=bins)
        for start in range(16):
            for n in (1, 15, 33, 100003, (1 << 20) + 7):
                view = values[start : start + n]
                got = histogram(step, view, bins, loads=loads)
                assert torch.equal(got, histogram_counts(view, bins)), (bins, start, n)
