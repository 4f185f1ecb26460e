"""The scan ladder on a GPU: every step correct over sizes (awkward ones, past a tile-sum
chunk, past 2^31 elements), fp32 and int32, inclusive and exclusive; the look-back under real
concurrency (many resident blocks, repeated calls reusing the descriptors); torch.cumsum as
the anchor agrees. The targets are measured by benchmarks/scan_ladder.py, not here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelab.ladders.scan import STEPS, get_step, scan  # noqa: E402
from kernelab.ladders.scan.ladder import check_one, integral_fp32  # noqa: E402
from kernelab.ladders.scan.steps import ITEM_CANDIDATES  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402

pytestmark = pytest.mark.gpu

SIZES = (1, 2, 31, 33, 1023, 1025, 2047, 2048, 2049, 100003, 1 << 20, (1 << 22) + 3, 1 << 24)


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("dtype", ["fp32", "int32"])
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_correct_over_sizes(step, dtype, exclusive):
    spec = get_op("scan")
    for n in SIZES:
        (x, _) = spec.make_inputs({"n": n}, dtype, seed=n, device="cuda")
        assert check_one(step, x, exclusive), (n, "drawn inputs")
        if dtype == "fp32" and n <= 1 << 20:  # integer-valued: exact in any order
            assert check_one(step, integral_fp32(n, seed=n), exclusive), (n, "integral")


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_repeated_calls_agree_bit_for_bit(step):
    """int32 at 2^24 (8192 tiles), 20 calls: any look-back race or stale descriptor shows as a
    difference from the exact answer in one of them."""
    (x, _) = get_op("scan").make_inputs({"n": 1 << 24}, "int32", seed=2, device="cuda")
    want = get_op("scan").reference(x, False)
    for _ in range(20):
        assert torch.equal(scan(step, x), want)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_strided_empty_and_cumsum(step):
    x = torch.arange(64, device="cuda", dtype=torch.int32)
    assert torch.equal(scan(step, x[::3]), torch.cumsum(x[::3], 0, dtype=torch.int32))
    assert scan(step, torch.empty(0, device="cuda")).numel() == 0
    (y, _) = get_op("scan").make_inputs({"n": 100003}, "int32", seed=5, device="cuda")
    assert torch.equal(scan(step, y), get_op("scan").torch_eager(y, False))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
@pytest.mark.whole_card  # GiBs past 2^31 elements: alone, or it skips for want of memory
def test_more_than_2_to_the_31_elements(step):
    """64-bit indexing: 2^31 + 5 int32 ones (8 GiB in, 8 GiB out) scan to 1..n, wrapped."""
    free, _ = torch.cuda.mem_get_info()
    if free < (20 << 30):
        pytest.skip("needs 20 GiB of free GPU memory")
    n = (1 << 31) + 5
    x = torch.ones(n, dtype=torch.int32, device="cuda")
    out = scan(step, x)
    tail = torch.arange(n - 6, n + 1, device="cuda", dtype=torch.int64)[1:]  # 1-based prefixes
    assert torch.equal(out[-6:], tail.to(torch.int32))
    assert int(out[(1 << 31) - 2]) == (1 << 31) - 1
    del out, x


@pytest.mark.parametrize("items", [None, *ITEM_CANDIDATES])
def test_wide_tile_candidates_and_unaligned_slices(items):
    """Step 5 at every tile candidate: full 16-byte tiles, the partial last tile, and x[1:]
    (off 16-byte alignment, the scalar path everywhere), int32 exact and fp32 integral exact;
    a NaN poisons every prefix from its index on, never one before it."""
    step = get_step(5)
    spec = get_op("scan")
    tile = step.tile_for(items)
    for n in (1, tile - 1, tile, tile + 1, 7 * tile + 13, 100003):
        (x, _) = spec.make_inputs({"n": n + 1}, "int32", seed=n, device="cuda")
        for view in (x[:n], x[1:]):
            assert torch.equal(scan(step, view, items=items), spec.reference(view, False)), n
        assert check_one(step, integral_fp32(n, seed=n), True, items), n
    y = integral_fp32(3 * tile + 5, seed=3)
    y[tile + 7] = float("nan")
    got = scan(step, y, items=items)
    assert not got[: tile + 7].isnan().any() and got[tile + 7 :].isnan().all()
