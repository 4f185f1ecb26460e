"""The fused softmax against the float64 reference on every path it can take on the CPU
interpreter (row tiles, the split-row kernels with one chunk per row, two-pass, L2), its
numerics (rows sum to one, huge logits, -inf rows), its launch plans and the long-row
tuner's candidates. Compiled on a GPU, the same tests run there.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import (  # noqa: E402  (sets TRITON_INTERPRET without a GPU)
    DEVICE,
    FLOAT_DTYPES,
    HAS_CUDA,
    assert_matches_reference,
    kernel_fixture,
)

pytest.importorskip("triton")
import triton  # noqa: E402

from kernelab.harness.check import check_implementation  # noqa: E402

softmax = kernel_fixture("softmax")


SOFTMAX_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 5, "cols": 127},
    {"rows": 2, "cols": 1031},
    {"rows": 3, "cols": 127, "stride": 131},  # rows are not cols apart; padding is NaN
]


# The L2 kernels at a small size: 32 values per loop step, 64-value slices (so rows of more
# than 64 columns are split over several programs: GPU only, where peers are resident).
SMALL_L2_CONFIGS = {
    "l2-rows": {"path": "l2-rows", "BLOCK": 32, "num_warps": 4, "PER_SM": 2},
    "l2-split": {"path": "l2-split", "SLICE": 64, "BLOCK": 32, "num_warps": 4, "PER_SM": 4},
}


def _forced_long_rows(softmax_module, long_rows):
    """softmax with a long-row path forced at a small size: 32-column chunks or loop steps."""
    if long_rows in SMALL_L2_CONFIGS:
        config = SMALL_L2_CONFIGS[long_rows]
        return functools.partial(softmax_module.softmax, single_pass_max_cols=16, config=config)
    return functools.partial(
        softmax_module.softmax, single_pass_max_cols=16, chunk_cols=32, long_rows=long_rows
    )


LONG_ROW_PATHS = ["two-pass", "l2-rows"] + (["cooperative", "l2-split"] if HAS_CUDA else [])


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_single_pass(softmax, shape, dtype):
    assert softmax.choose_path(shape["cols"]) == "single-pass"
    assert_matches_reference(softmax.softmax, "softmax", shape, dtype)


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES[2:], ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("long_rows", LONG_ROW_PATHS)
def test_softmax_long_row_paths_at_small_size(softmax, shape, dtype, long_rows):
    assert softmax.choose_path(shape["cols"], single_pass_max_cols=16) != "single-pass"
    assert_matches_reference(_forced_long_rows(softmax, long_rows), "softmax", shape, dtype)


def test_softmax_forced_calls_are_planned_under_their_options(softmax, monkeypatch):
    """A forced call goes through the launch plans keyed by its options (frozen), so two
    forced paths on the same tensors never share a plan; the tuned call keys by tensors alone;
    options the key cannot hold go unplanned, still right."""
    keys = []

    def key(device, tensors, *scalars, fresh=0):
        keys.append(scalars)
        return None  # no plan: the call launches through Triton's front door

    monkeypatch.setattr(softmax.PLANS, "key", key)
    x = torch.randn(5, 97, device=DEVICE)
    expected = torch.softmax(x.double(), dim=-1).float()
    two_pass = {"single_pass_max_cols": 16, "chunk_cols": 32, "long_rows": "two-pass"}
    l2_rows = {"single_pass_max_cols": 16, "config": SMALL_L2_CONFIGS["l2-rows"]}
    for kwargs in ({}, two_pass, {**two_pass, "chunk_cols": 64}, l2_rows):
        torch.testing.assert_close(softmax.softmax(x, **kwargs), expected, rtol=1e-5, atol=1e-6)
    assert keys[0] == ()
    assert keys[1] == (16, 32, "two-pass", None)
    assert keys[2] != keys[1]
    assert keys[3] == (16, None, None, tuple(sorted(SMALL_L2_CONFIGS["l2-rows"].items())))
    # two-pass reads CHUNK alone, so the set rides along harmlessly on any device
    unhashable = {"path": "two-pass", "CHUNK": 32, "note": {"a set"}}
    result = softmax.softmax(x, single_pass_max_cols=16, config=unhashable)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-6)
    assert len(keys) == 4  # the unhashable config never reached the plans


def _all_paths(softmax_module):
    return [softmax_module.softmax] + [
        _forced_long_rows(softmax_module, path) for path in LONG_ROW_PATHS
    ]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_rows_sum_to_one_and_survive_huge_logits(softmax, dtype):
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    x = (torch.randn(4, 97, device=DEVICE) * 1e4).to(torch_dtype)
    expected = torch.softmax(x.double(), dim=-1)
    for fn in _all_paths(softmax):
        y = fn(x)
        assert y.dtype == torch_dtype and y.shape == x.shape
        assert torch.isfinite(y).all()
        sums = y.double().sum(dim=-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=2e-2 if dtype == "bf16" else 1e-5)
        assert torch.allclose(y.double(), expected, atol=1e-2 if dtype == "bf16" else 1e-6)


def test_softmax_all_minus_inf_row_is_nan_and_partial_minus_inf_is_zero(softmax):
    x = torch.randn(3, 45, device=DEVICE)
    x[0] = float("-inf")  # no finite entry: the documented output is NaN everywhere
    x[1, :20] = float("-inf")  # some -inf entries: those get probability 0
    for fn in _all_paths(softmax):
        y = fn(x)
        assert torch.isnan(y[0]).all()
        assert (y[1, :20] == 0).all()
        assert torch.isfinite(y[1:]).all()
        assert torch.allclose(y[1:].double(), torch.softmax(x[1:].double(), -1), atol=1e-6)


def test_softmax_does_not_write_its_input_and_keeps_dtype(softmax):
    x = torch.randn(2, 33, device=DEVICE, dtype=torch.float16)
    before = x.clone()
    y = softmax.softmax(x)
    assert torch.equal(x, before) and y.dtype == torch.float16


@pytest.mark.parametrize("shape", [{"rows": 5, "cols": 127}, {"rows": 3, "cols": 1031}], ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_every_row_tile_candidate(softmax, shape, dtype):
    from kernelab.runtime.tuner import row_tile_candidates

    for config in row_tile_candidates(triton.next_power_of_2(shape["cols"])):
        fn = functools.partial(softmax.softmax, config=config)
        report = check_implementation(fn, "softmax", shape, dtype, trials=1, device=DEVICE)
        assert report.ok, f"{config}: {report.message}"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_wide_thread_candidates_run_one_row_per_program(softmax, dtype):
    from kernelab.runtime.tuner import row_tile_candidates, shared_bytes_per_program

    # rows of 2K-8K values also get 64 values per thread: 1, 2 and 4 warps
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    for cols, warps in [(2000, 1), (4096, 2), (8192, 4)]:
        probe = torch.empty(1, cols, dtype=torch_dtype, device=DEVICE)
        wide = softmax.row_candidates_for(probe)[-1]
        assert (wide["ROWS"], wide["num_warps"], wide["PERSISTENT"]) == (1, warps, False)
    # longer rows would need 8+ warps at 64 values each: only the shared candidates there
    long_row = torch.empty(1, 16384, device=DEVICE)
    assert softmax.row_candidates_for(long_row) == row_tile_candidates(
        16384, loaded_bytes_per_column=4, shared_bytes=shared_bytes_per_program(long_row.device)
    )
    fn = functools.partial(softmax.softmax, config=wide)
    assert_matches_reference(fn, "softmax", {"rows": 3, "cols": 2000}, dtype)
    assert_matches_reference(fn, "softmax", {"rows": 2, "cols": 8192, "stride": 8200}, dtype)


@pytest.mark.parametrize(
    "prefetch", [2, True, False], ids=["prefetch-2", "prefetch", "no-prefetch"]
)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_cooperative_with_one_chunk_per_row(softmax, prefetch, dtype):
    # One chunk per row: every group is a single program, so the kernel runs under the
    # interpreter too. 9 rows over at most 4 groups: each group walks several rows, which
    # exercises the prefetch of the next row (or two, reaching past the last row), both
    # parities of the partials buffer and the turn tags (a stale tag would hang until the
    # spin budget and poison the row with NaN).
    # The output is exp(x - chunk max), kept from the statistics, times one rescale.
    config = {"CHUNK": 256, "num_warps": 4, "PREFETCH": prefetch}
    fn = functools.partial(
        softmax.softmax, single_pass_max_cols=16, long_rows="cooperative", config=config
    )
    for shape in ({"rows": 9, "cols": 200}, {"rows": 7, "cols": 129, "stride": 131}):
        assert_matches_reference(fn, "softmax", shape, dtype)
    x = torch.randn(6, 45, device=DEVICE)
    x[2] = float("-inf")
    x[4, :40] = float("-inf")  # a row with some -inf: those entries are exactly 0
    y = fn(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3, 4, 5]]).all()
    assert (y[4, :40] == 0).all() and torch.allclose(y[4, 40:], torch.softmax(x[4, 40:], -1))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "knobs",
    [
        {"PREFETCH": 1},
        {"PREFETCH": 2},
        {"L2_AHEAD": 1},  # inline PTX: dropped under the interpreter, runs on the GPU
        {"L2_AHEAD": 1, "L2_PART": 2},  # half of each chunk prefetched (GPU only, as above)
        {"PACKED": True},  # one word per chunk: 23 rows in one group wrap the tag bit
        {"EARLY_POLL": True},
        {"PACKED": True, "EARLY_POLL": True},
        {"PACKED": True, "EARLY_POLL": True, "MASKED": True},
        {"PACKED": True, "EARLY_POLL": True, "STREAM_STORE": True},
        {"PACKED": True, "EARLY_POLL": True, "MASKED": True, "STREAM_STORE": True},
        {"UNROLL": 2},  # two steps per loop iteration: odd and even rows per group
        # bf16 pairs in words, on whole chunks (elsewhere, and in fp32, the plain loads)
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True},
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "UNROLL": 2},
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "PREFETCH": 2},
        # the row to finish held as its input pairs, its exps taken again at the finish
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "RECOMPUTE": True},
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "RECOMPUTE": True, "UNROLL": 2},
        # two later rows in flight
        {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "RECOMPUTE": True, "PREFETCH": 2},
    ],
    ids=str,
)
def test_softmax_deferred_cooperative_with_one_chunk_per_row(softmax, dtype, knobs):
    # DEFER: each row is finished one step after its partials were published, from exps held
    # in registers since then. 1 to 23 rows over at most 4 groups: groups of one row (finished
    # only after the loop), groups whose turns wrap the four slots, and a strided input.
    config = {"CHUNK": 256, "num_warps": 4, "DEFER": True, **knobs}
    fn = functools.partial(
        softmax.softmax, single_pass_max_cols=16, long_rows="cooperative", config=config
    )
    _assert_right_on_rows_of_one_chunk(fn, dtype)


def _assert_right_on_rows_of_one_chunk(fn, dtype) -> None:
    """A split-row softmax in 256-value chunks, under the interpreter too: 1 to 23 rows of
    one chunk each (a strided input, whole and partial chunks), then rows of -inf (NaN) and
    a row whose first 40 values are -inf (zeros there)."""
    for shape in (
        {"rows": 1, "cols": 200},
        {"rows": 9, "cols": 200},
        {"rows": 23, "cols": 64},
        {"rows": 7, "cols": 129, "stride": 131},
        # whole chunks (EVEN: no masks; the prefetch past the last row re-reads that row)
        {"rows": 11, "cols": 256},
        {"rows": 5, "cols": 256, "stride": 272},
    ):
        assert_matches_reference(fn, "softmax", shape, dtype)
    x = torch.randn(6, 45, device=DEVICE)
    x[2] = float("-inf")
    x[4, :40] = float("-inf")
    y = fn(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3, 4, 5]]).all()
    assert (y[4, :40] == 0).all() and torch.allclose(y[4, 40:], torch.softmax(x[4, 40:], -1))


@pytest.mark.parametrize(
    "dtype,knobs",
    [
        ("fp32", {}),  # two tagged words a chunk: whole turn numbers
        ("fp32", {"PACKED": True, "EARLY_POLL": True}),  # one word, a one-bit tag
        ("bf16", {"PACKED": True, "EARLY_POLL": True, "PAIRS": True, "UNROLL": 2}),
    ],
    ids=str,
)
def test_softmax_deferred_continues_its_turns_on_kept_words(softmax, monkeypatch, dtype, knobs):
    # turn_words.REUSE: the exchange words are kept between calls and each group's turns go
    # on from the base the kernel stored. 9 rows over 4 groups: group 0 finishes 3 rows a
    # call, groups 1-3 two. Under the interpreter a program is its row's only chunk, so a
    # publish and a poll that disagree on the slot spin out and write NaN.
    from kernelab.runtime import turn_words

    monkeypatch.setattr(turn_words, "REUSE", True)
    turn_words.forget()
    config = {"CHUNK": 256, "num_warps": 4, "DEFER": True, **knobs}
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    calls = 5
    for _ in range(calls):
        x = torch.randn(9, 256, device=DEVICE, dtype=torch_dtype)
        y = softmax.softmax(x, single_pass_max_cols=16, long_rows="cooperative", config=config)
        expected = torch.softmax(x.float(), dim=-1)
        assert torch.isfinite(y.float()).all()
        torch.testing.assert_close(y.float(), expected, rtol=2e-2, atol=1e-6)
    # one workspace for all five calls, its bases advanced by the rows each group finished
    (kept,) = turn_words._kept.values()
    bases = kept[-9:].tolist()  # max_groups = 9 here (min(rows, 32 x 4 SMs))
    assert bases == [(3 * calls) % 8] + [(2 * calls) % 8] * 3 + [0] * 5
    turn_words.forget()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"STREAM_STORE": True},
        # bf16 pairs in words, the row to finish held as them and its exps taken again
        {"PAIRS": True, "RECOMPUTE": True},
    ],
    ids=str,
)
def test_softmax_flat_kernel_with_one_chunk_per_row(softmax, dtype, knobs):
    # path "flat": every resident program takes units p, p + P, ... of one flat sequence of
    # chunks, each unit's partials in a word of its own. 1 to 23 rows over the interpreter's
    # few programs (so programs run 1 to 6 units), a strided input, whole chunks.
    config = {"path": "flat", "CHUNK": 256, "num_warps": 4, **knobs}
    fn = functools.partial(softmax.softmax, single_pass_max_cols=16, config=config)
    _assert_right_on_rows_of_one_chunk(fn, dtype)


def test_softmax_flat_kernel_flips_its_tag_every_call_on_kept_words(softmax, monkeypatch):
    # The kept words carry one call's tag bit; the last program to end advances the epoch, so
    # the next call's waits cannot take the last call's words for its own. Two shapes of the
    # same unit count share one workspace (9 rows of 256 or of 200 values, one 256-value chunk
    # each: under the interpreter a row of more chunks would wait for peers that run later).
    from kernelab.runtime import turn_words

    monkeypatch.setattr(turn_words, "REUSE", True)
    turn_words.forget()
    config = {"path": "flat", "CHUNK": 256, "num_warps": 4}
    calls = 5
    for call in range(calls):
        shape = (9, 256) if call % 2 == 0 else (9, 200)
        x = torch.randn(*shape, device=DEVICE)
        y = softmax.softmax(x, single_pass_max_cols=16, config=config)
        assert torch.isfinite(y).all()
        torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=1e-4, atol=1e-6)
    (kept,) = turn_words._kept.values()
    words, epoch, ended = kept[:9], int(kept[9]), int(kept[10])
    assert epoch == calls and ended == 0
    # every word carries the last call's tag: bit 31, 1 for even epochs (turn 1), 0 for odd
    assert (((words >> 31) & 1) == (1 if (calls - 1) % 2 == 0 else 0)).all()
    turn_words.forget()


@pytest.mark.skipif(HAS_CUDA, reason="on a GPU every peer is resident and the wait succeeds")
@pytest.mark.parametrize(
    "prefetch",
    ["defer", "defer-packed", 2, True, False],
    ids=["deferred", "deferred-packed", "prefetch-2", "prefetch", "no-prefetch"],
)
def test_softmax_cooperative_wait_that_gives_up_yields_nan_not_a_hang(softmax, prefetch):
    # Under the interpreter the programs of a row run one after another, so the first chunk's
    # program waits for peers that have not started: its bounded wait must end, and the
    # rows it gave up on must come out NaN rather than silently wrong. 9 rows in one group:
    # the packed word's one-bit tag reads the never-written slots as turns 5-8's, so only
    # the poison carried from the first failed wait keeps those rows NaN.
    x = torch.randn(9, 127, device=DEVICE)
    config = {"CHUNK": 32, "num_warps": 4, "PREFETCH": prefetch}
    if prefetch.__class__ is str:
        config = {"CHUNK": 32, "num_warps": 4, "DEFER": True, "PACKED": prefetch.endswith("packed")}
    y = softmax.softmax(x, single_pass_max_cols=16, long_rows="cooperative", config=config)
    assert torch.isnan(y[:, :32]).all()


@pytest.mark.parametrize("knobs", [{"PREFETCH": True}, {"PREFETCH": False}], ids=str)
@pytest.mark.parametrize("path", ["l2-rows", "l2-split"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_l2_kernels_mask_the_block_past_each_rows_end(softmax, knobs, path, dtype):
    # Rows of 1 to 9 loop steps of 32 values (one slice per row for l2-split, so it runs
    # under the interpreter): the prefetched block past the end of a row must be masked off.
    config = {**SMALL_L2_CONFIGS[path], "SLICE": 512, **knobs}
    fn = functools.partial(softmax.softmax, config=config)
    for shape in (
        {"rows": 5, "cols": 31},
        {"rows": 9, "cols": 288},
        {"rows": 3, "cols": 127, "stride": 131},
    ):
        assert_matches_reference(fn, "softmax", shape, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softmax_l2_split_pipelined_exchange_with_one_slice_per_row(softmax, dtype):
    # One slice per row: every group is one program, so it runs under the interpreter too.
    # 23 rows over at most 4 groups: each group walks 5-6 rows plus the extra turn that
    # normalizes its last row, so all 4 turn slots are reused (a stale or overwritten tag
    # would end the wait at the spin budget and poison the row with NaN).
    config = {"path": "l2-split", "SLICE": 256, "BLOCK": 32, "num_warps": 4, "PER_SM": 4}
    fn = functools.partial(softmax.softmax, config=config)
    for shape in ({"rows": 23, "cols": 200}, {"rows": 7, "cols": 129, "stride": 131}):
        assert_matches_reference(fn, "softmax", shape, dtype)
    x = torch.randn(6, 45, device=DEVICE)
    x[2] = float("-inf")
    y = fn(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3, 4, 5]]).all()


@pytest.mark.skipif(HAS_CUDA, reason="on a GPU every peer is resident and the wait succeeds")
def test_softmax_l2_split_wait_that_gives_up_yields_nan_not_a_hang(softmax):
    # Four slices per row under the interpreter: the programs of a row run one after another,
    # so the first slice's program waits for peers that have not started.
    x = torch.randn(5, 127, device=DEVICE)
    config = {"path": "l2-split", "SLICE": 32, "BLOCK": 16, "num_warps": 4, "PER_SM": 4}
    y = softmax.softmax(x, config=config)
    assert torch.isnan(y[:, :32]).all()


def test_softmax_long_row_candidates_name_their_path_and_size_bf16_in_bytes(softmax):
    for cols in (16_385, 32_768, 65_536, 131_072, 262_144):
        fp32 = softmax.long_row_candidates(cols, torch.float32)
        bf16 = softmax.long_row_candidates(cols, torch.bfloat16)
        for candidates in (fp32, bf16):
            assert {c["path"] for c in candidates} <= {
                "cooperative",
                "single-pass",
                "l2-rows",
                "l2-split",
                "flat",
            }
            assert len({str(sorted(c.items())) for c in candidates}) == len(candidates)
            # a split row has at least two slices
            assert all(cols > c["SLICE"] for c in candidates if c["path"] == "l2-split")
            # nothing the H200 showed broken or slow everywhere: no counter exchange, every
            # cooperative candidate prefetches or defers its wait
            cooperative = [c for c in candidates if c["path"] == "cooperative"]
            assert all(c.get("PREFETCH") or c.get("DEFER") for c in cooperative)
        single = [c for c in fp32 if c["path"] == "single-pass"]
        assert bool(single) == (cols <= softmax.long_rows.SINGLE_PASS_LONG_MAX_COLS)
        assert any(c["path"] == "l2-rows" for c in fp32) == (cols * 4 <= 256 << 10)
        # bf16 slices and loop steps hold as many bytes as the fp32 ones, not as many values
        for a, b in zip(
            softmax.l2.split_candidates(torch.float32),
            softmax.l2.split_candidates(torch.bfloat16),
            strict=True,
        ):
            assert b["SLICE"] == 2 * a["SLICE"] and b["BLOCK"] == 2 * a["BLOCK"]


@pytest.mark.parametrize(
    "cols, dtype, winner",
    [
        (32_768, torch.float32, ("single-pass", None, False, 0, False)),
        (20_000, torch.float32, ("single-pass", None, False, 0, False)),  # pads to 32K
        # the flat kernel's two-warp c2048, also on rows of partial chunks
        (65_536, torch.float32, ("flat", 2048, False, 1, False)),
        (131_072, torch.float32, ("flat", 2048, False, 1, False)),
        (40_000, torch.float32, ("flat", 2048, False, 1, False)),  # pads to 65K
        # two warps of 1024 values each: half the polled words of c1024
        (262_144, torch.float32, ("cooperative", 2048, True, 1, True)),
        # longer rows look up the 262K winner; past 256 chunks per row no deferred config is
        # offered, so the first cooperative candidate leads
        (1_000_000, torch.float32, ("cooperative", 4096, False, 0, False)),
        (32_768, torch.bfloat16, ("cooperative", 1024, True, 1, True)),
        # bf16 pairs read as words: the flat kernel's c2048 holding the row to finish as its
        # pairs, its output evict_first. On rows of partial chunks (100,000 pads
        # to 131K, 60,000 to 65K, 200,000 to 262K) PARTIAL_CHUNK_WINNERS: plain loads, and at
        # 262K under a 128-register cap
        (65_536, torch.bfloat16, ("flat", 2048, False, 1, False, "pairs", "rc", "st")),
        (131_072, torch.bfloat16, ("flat", 2048, False, 1, False, "pairs", "rc", "st")),
        (262_144, torch.bfloat16, ("flat", 2048, False, 1, False, "pairs", "rc", "st")),
        (100_000, torch.bfloat16, ("cooperative", 1024, True, 1, True)),
        (60_000, torch.bfloat16, ("cooperative", 1024, True, 1, True)),  # pads to 65K
        (200_000, torch.bfloat16, ("cooperative", 1024, True, 1, True, "r128")),
        # past 262K the 262K winner, but past 128 chunks neither it nor (past 256) the capped
        # c1024 is offered
        (400_000, torch.bfloat16, ("cooperative", 4096, False, 0, False)),
    ],
)
def test_softmax_untuned_long_row_default_is_the_measured_winner(softmax, cols, dtype, winner):
    assert softmax.long_rows.identity(softmax.long_row_candidates(cols, dtype)[0]) == winner
    # every measured winner is among the candidates it is looked up in
    assert all(
        any(softmax.long_rows.identity(c) == w for c in softmax.long_row_candidates(n, d))
        for (size, n), w in softmax.long_rows.MEASURED_WINNERS.items()
        for d in [torch.float32 if size == 4 else torch.bfloat16]
    )


def test_softmax_deferred_kernel_drops_its_masks_only_for_whole_chunks(softmax):
    def even(cols, **config):
        x = torch.empty(3, cols, device=DEVICE)
        config = {"CHUNK": 256, "num_warps": 1, "DEFER": True, **config}
        kwargs, _, _ = softmax.cooperative.setup(x, torch.empty_like(x), config)
        return kwargs["EVEN"]

    assert even(512) and even(256)
    assert not even(500) and not even(257)
    assert not even(512, MASKED=True)


def test_softmax_deferred_kernel_reads_bf16_pairs_only_where_words_fit(softmax):
    def pairs(cols, dtype=torch.bfloat16, stride=None, offset=0, **config):
        storage = torch.empty(3 * (stride or cols) + offset, device=DEVICE, dtype=dtype)
        x = storage[offset:].as_strided((3, cols), (stride or cols, 1))
        config = {"CHUNK": 256, "num_warps": 1, "DEFER": True, "PAIRS": True, **config}
        kwargs, _, _ = softmax.cooperative.setup(x, torch.empty(3, cols, dtype=dtype), config)
        return kwargs["PAIRS"]

    assert pairs(512) and pairs(256, stride=258)
    assert not pairs(512, dtype=torch.float32) and not pairs(512, dtype=torch.float16)
    assert not pairs(500)  # a partial chunk: the masked loads
    assert not pairs(512, MASKED=True)
    assert not pairs(256, stride=257)  # a row would start mid-word
    assert not pairs(256, offset=1)  # words 2 bytes off their alignment
    assert not pairs(512, PAIRS=False)


def test_softmax_one_warp_cooperative_candidates_stop_at_256_chunks_per_row(softmax):
    def one_warp_chunks(cols, dtype):
        return sorted(
            c["CHUNK"]
            for c in softmax.long_row_candidates(cols, dtype)
            if c["path"] == "cooperative" and c["num_warps"] == 1
        )

    # 1024 values with and without the L2 prefetch, and 2048 for bf16 (with and without
    # its masks); past 128 chunks bf16 also gets 1024 with the prefetch under a register cap
    # (and for bf16 rows of whole chunks, up to 128 of them, 1024 read as pairs in words;
    # up to 64 chunks in bf16 and 128 in fp32, 1024 with half of each chunk prefetched; and
    # up to 128 chunks 2048 holding the row to finish as its pairs, with the half prefetch
    # up to 64)
    assert one_warp_chunks(65_536, torch.float32) == [1024, 1024, 1024]
    assert one_warp_chunks(65_536, torch.bfloat16) == [1024] * 4 + [2048] * 5
    assert one_warp_chunks(131_072, torch.bfloat16) == [1024] * 3 + [2048] * 5
    assert one_warp_chunks(262_144, torch.float32) == [1024, 1024]  # 256 chunks
    assert one_warp_chunks(262_144, torch.bfloat16) == [1024] * 3 + [2048] * 4
    capped = [c for c in softmax.long_row_candidates(262_144, torch.bfloat16) if "maxnreg" in c]
    assert [(c["CHUNK"], c["L2_AHEAD"], c["maxnreg"]) for c in capped] == [(1024, 1, 128)]
    # 524K columns: 512 chunks of 1024 are past the limit, 256 of 2048 (bf16) are not
    assert one_warp_chunks(524_288, torch.float32) == []
    assert one_warp_chunks(524_288, torch.bfloat16) == [2048, 2048]

    # the two-warp deferred c2048 is an fp32 candidate only, and also stops at 256 chunks
    def two_warp_chunks(cols, dtype):
        return [
            c["CHUNK"]
            for c in softmax.long_row_candidates(cols, dtype)
            if c["path"] == "cooperative" and c["num_warps"] == 2 and c.get("DEFER")
        ]

    assert two_warp_chunks(65_536, torch.float32) == [2048]
    assert two_warp_chunks(524_288, torch.float32) == [2048]  # 256 chunks
    assert two_warp_chunks(1_000_000, torch.float32) == []  # 489
    assert two_warp_chunks(262_144, torch.bfloat16) == []
    # every one-warp candidate runs the packed early-poll exchange
    for cols, dtype in [(65_536, torch.float32), (131_072, torch.bfloat16)]:
        one_warp = [
            c
            for c in softmax.long_row_candidates(cols, dtype)
            if c.get("num_warps") == 1 and c["path"] == "cooperative"
        ]
        assert all(c["PACKED"] and c["EARLY_POLL"] and c["DEFER"] for c in one_warp)


def test_softmax_pair_reading_configs_are_bf16_candidates_on_whole_chunks_up_to_128(softmax):
    def paired(cols, dtype=torch.bfloat16):
        return sorted(
            (c["CHUNK"], c["L2_AHEAD"], c.get("UNROLL", 1), c.get("RECOMPUTE", False))
            for c in softmax.long_row_candidates(cols, dtype)
            if c.get("PAIRS") and c["path"] == "cooperative"
        )

    # the paired steps (c1024, two steps per iteration) and the held input pairs (c2048),
    # each with and without L2_PART=2 up to 64 chunks (see the test below)
    steps, held = (1024, 1, 2, False), (2048, 1, 1, True)
    # (the held input pairs also with the output stored evict_first)
    assert paired(32_768) == paired(65_536) == [steps, steps, held, held, held]
    assert paired(131_072) == [steps, held, held, held]
    # 256 chunks of 1024: 143 registers, 12 programs per SM; 128 of 2048 run
    assert paired(262_144) == [held, held]
    assert paired(524_288) == []  # 256 chunks of 2048: never compiled or timed
    assert paired(100_000) == []  # a partial chunk: it would run the plain loads
    assert paired(65_536, torch.float32) == paired(65_536, torch.float16) == []


def test_softmax_flat_candidates_are_offered_where_they_were_measured(softmax):
    def flat(cols, dtype=torch.bfloat16):
        return sorted(
            (c["CHUNK"], c["num_warps"], bool(c.get("PAIRS")), bool(c.get("STREAM_STORE")))
            for c in softmax.long_row_candidates(cols, dtype)
            if c["path"] == "flat"
        )

    # bf16: c2048 reading pairs, with and without the evict_first store, on whole chunks of
    # rows that pad to 65K and more, up to 128 chunks; fp32: c2048 at two warps and c1024 at
    # one, on any row that pads to 65K and more, up to 256 chunks; fp16 none
    held = [(2048, 1, True, False), (2048, 1, True, True)]
    assert flat(65_536) == flat(131_072) == flat(262_144) == held
    assert flat(32_768) == flat(100_000) == flat(524_288) == []
    fp32 = [(1024, 1, False, False), (2048, 2, False, False)]
    assert flat(40_000, torch.float32) == flat(262_144, torch.float32) == fp32
    assert flat(32_768, torch.float32) == flat(65_536, torch.float16) == []
    assert flat(524_288, torch.float32) == [(2048, 2, False, False)]  # 512 chunks of 1024


def test_softmax_half_l2_prefetch_is_offered_where_it_won(softmax):
    # L2_PART=2: a bf16 candidate up to 64 chunks per row (it won at 65K and
    # lost at 131K in c1024; c2048 holding its input pairs won at 65K and tied at 131K, 32 and
    # 64 chunks), an fp32 one up to 128 (it won at 131K); everything else prefetches whole
    # chunks
    def halves(cols, dtype):
        return sorted(
            (c["CHUNK"], c["num_warps"], bool(c.get("PAIRS")))
            for c in softmax.long_row_candidates(cols, dtype)
            if c.get("L2_PART", 1) == 2
        )

    assert halves(65_536, torch.bfloat16) == [(1024, 1, True), (2048, 1, True)]
    assert halves(131_072, torch.bfloat16) == [(2048, 1, True)]
    assert halves(262_144, torch.bfloat16) == []
    assert halves(131_072, torch.float32) == halves(65_536, torch.float32) == [(1024, 1, False)]
    assert halves(262_144, torch.float32) == []


def test_softmax_split_winner_goes_first_where_it_was_measured(softmax):
    split = [
        {"path": "shared-split", "CHUNK_BYTES": 64 << 10, "SUB": 8, "num_warps": 8},
        {"path": "shared-split", "CHUNK_BYTES": 64 << 10, "SUB": 16, "num_warps": 4},
    ]
    others = [{"path": "single-pass"}, {"path": "cooperative", "CHUNK": 1024}]
    # fp32 32K (and rows that pad to it): the measured split config leads
    for cols in (32_768, 20_000):
        ordered = softmax.long_rows.gluon_winner_first(others + split, 4, cols)
        assert ordered[0] == split[1] and sorted(map(str, ordered)) == sorted(
            map(str, others + split)
        )
    # elsewhere, or where it is not offered, nothing moves
    assert softmax.long_rows.gluon_winner_first(others + split, 2, 65_536) == others + split
    assert softmax.long_rows.gluon_winner_first(others + split, 4, 131_072) == others + split
    # fp32 65K: the flat kernel's c2048 w2 beat it (winners.json leads there)
    assert softmax.long_rows.gluon_winner_first(others + split, 4, 65_536) == others + split
    assert softmax.long_rows.gluon_winner_first(others + split[:1], 4, 32_768) == others + split[:1]


def test_softmax_unknown_long_row_path_is_refused(softmax):
    x = torch.randn(2, 40, device=DEVICE)
    with pytest.raises(ValueError, match="unknown long-row path"):
        softmax.softmax(x, single_pass_max_cols=16, long_rows="no-such-path")


def test_softmax_config_for_names_the_path_and_default_config(softmax):
    from kernelab.runtime.tuner import row_tile_candidates

    x = torch.randn(4, 1000, device=DEVICE)
    assert softmax.config_for(x) == {
        "path": "single-pass",
        **row_tile_candidates(1024)[0],
        "tuner": "softmax.rows",
    }
    long_config = softmax.config_for(x, single_pass_max_cols=512)
    if HAS_CUDA:  # untuned: the first long-row candidate, chosen by the long-row tuner
        assert softmax.choose_path(1000, single_pass_max_cols=512) == "long-rows"
        assert long_config == {
            **softmax.long_row_candidates(1000, x.dtype)[0],
            "tuner": "softmax.long_rows",
        }
    else:
        assert (
            long_config["path"] == "two-pass" == softmax.choose_path(1000, single_pass_max_cols=512)
        )


# Compiles the row-tile softmax for sm_90 with Triton's own toolchain (no GPU) in a process
# without TRITON_INTERPRET, and prints whether each configuration's SASS has cp.async.
_PIPELINE_PROBE = """
import json, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelab.runtime.cuda.sass import disassemble
from kernelab.ops.softmax.rows import _softmax_rows_kernel as kernel

out = []
for config in json.loads(sys.argv[1]):
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
                 "x_row_stride": "i32", "out_row_stride": "i32"}
    aligned = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in signature}
    constexprs = {"BLOCK_N": 4096, "ROWS": config["ROWS"], "PERSISTENT": True, "FTZ": True,
                  "PIPELINE": config.get("PIPELINE", 1)}
    signature.update({name: "constexpr" for name in constexprs})
    source = ASTSource(fn=kernel, signature=signature, attrs=aligned,
                       constexprs={(kernel.arg_names.index(n),): v for n, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config["num_warps"],
                                       "num_stages": config["num_stages"]})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        out.append("LDGSTS" in disassemble(cubin.name))
print(json.dumps(out))
"""


def test_pipelined_row_tiles_copy_the_next_rows_through_shared_memory():
    # PIPELINE puts num_stages on the persistent loop itself: the next rows' loads become
    # cp.async into shared memory (LDGSTS). The older persistent candidate's kernel-wide
    # num_stages=2 alone never did.
    import json

    from kernelab.runtime.cuda.sass import find_tool
    from kernelab.runtime.tuner import row_tile_candidates

    if find_tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    candidates = row_tile_candidates(4096)
    pipelined = [c for c in candidates if c.get("PIPELINE", 1) > 1]
    assert [c["PIPELINE"] for c in pipelined] == [2, 3]
    older = next(c for c in candidates if c["PERSISTENT"] and "PIPELINE" not in c)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    probe = subprocess.run(
        [sys.executable, "-c", _PIPELINE_PROBE, json.dumps([pipelined[0], older])],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert json.loads(probe.stdout.strip().splitlines()[-1]) == [True, False]
    # rows shorter than 2,048 values keep their old candidates
    assert not any(c.get("PIPELINE") for c in row_tile_candidates(1024))
