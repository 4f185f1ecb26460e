"""The tuner (runtime/tuner.py), pure Python: the row-tile candidates, the occupancy formula,
when inputs are timed, the paired final round and the autotuners' timer.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import kernel_module  # noqa: E402  (sets TRITON_INTERPRET without a GPU)

pytest.importorskip("triton")


@pytest.mark.parametrize("block_n", [1, 64, 512, 1024, 2048, 4096, 8192, 16384, 32768])
def test_row_tile_candidates_start_with_inductors_choice_and_end_persistent(block_n):
    from kernelab.runtime.tuner import MIN_TILE_ELEMENTS, row_tile_candidates

    candidates = row_tile_candidates(block_n)
    first, last = candidates[0], candidates[-1]
    assert first["ROWS"] * block_n >= min(MIN_TILE_ELEMENTS, block_n)
    if block_n <= 1024:  # short rows: one warp, its reductions stay within the warp
        assert first["num_warps"] == 1 and first["ROWS"] == MIN_TILE_ELEMENTS // block_n
    else:  # long rows: one row per program
        assert first["ROWS"] == 1 and first["num_warps"] > 1
    # one program per tile first, the persistent grids last
    persistent = [c["PERSISTENT"] for c in candidates]
    assert persistent == sorted(persistent) and last["PERSISTENT"]
    assert len({tuple(sorted(c.items())) for c in candidates}) == len(candidates)
    for c in candidates:
        assert 1 <= c["num_warps"] <= 32 and c["num_warps"] & (c["num_warps"] - 1) == 0
        values_per_thread = c["ROWS"] * block_n / (32 * c["num_warps"])
        assert values_per_thread <= 64, c  # more would spill


H100_LIMITS = {"threads": 2048, "registers": 65536, "shared_bytes": 233472, "blocks": 32}


@pytest.mark.parametrize(
    ("warps", "regs", "shared", "expected"),
    [
        (4, 128, 0, 4),  # 4 warps x 4 quarters of 16K registers
        (2, 192, 0, 4),  # 65536 / 6144 = 10 warps, but 2 per quarter: 8 warps = 4 programs
        (1, 32, 0, 32),  # the 32-block limit
        (8, 32, 0, 8),  # the 2048-thread limit
        (4, 64, 100_000, 2),  # shared memory: 2 x (100,000 + 1 KiB reserved)
        (32, 255, 0, 0),  # does not fit at all
    ],
)
def test_occupancy_never_overestimates(warps, regs, shared, expected):
    from kernelab.runtime.tuner import occupancy

    got = occupancy(H100_LIMITS, num_warps=warps, regs_per_thread=regs, shared_bytes=shared)
    assert got == expected


def test_tuned_times_large_inputs_once_and_leaves_small_ones_to_the_heuristic(monkeypatch):
    from kernelab.runtime import tuner as _runtime

    monkeypatch.setattr(_runtime, "interpreting", lambda: False)
    timed = []

    def fake_fastest(run, candidates, ranking):
        timed.append(len(candidates))
        ranking.extend({"config": c, "ms": 1.0 + i} for i, c in enumerate(candidates))
        return candidates[-1]

    monkeypatch.setattr(_runtime, "fastest", fake_fastest)
    monkeypatch.setattr(_runtime, "TUNING_LOG", {})
    cache: dict = {}
    candidates = [{"c": 0}, {"c": 1}]
    small = _runtime.TUNE_MIN_BYTES - 1
    assert _runtime.tuned(cache, "k", None, candidates, nbytes=small) == {"c": 0}
    assert cache == {} and timed == []
    large = _runtime.TUNE_MIN_BYTES
    assert _runtime.tuned(cache, "k", None, candidates, nbytes=large) == {"c": 1}
    assert _runtime.tuned(cache, "k", None, candidates, nbytes=small) == {"c": 1}
    assert timed == [2]
    assert [entry["ms"] for entry in _runtime.TUNING_LOG["k"]] == [1.0, 2.0]


def test_fastest_sends_the_configs_close_to_the_best_to_a_paired_final_round(monkeypatch):
    from kernelab.runtime import tuner as _runtime

    monkeypatch.setattr(_runtime, "interpreting", lambda: False)
    monkeypatch.setenv("KERNELAB_TRITON_AUTOTUNE", "1")
    first_pass_ms = {"a": 1.00, "b": 1.03, "c": 0.99, "d": 1.20, "e": 1.02}
    monkeypatch.setattr(_runtime, "first_pass_ms", lambda fn: first_pass_ms[fn()])
    seen = {}

    def fake_final_round(run, finalists, ranking):
        seen["finalists"] = [c["name"] for c in finalists]
        return finalists[-1]

    monkeypatch.setattr(_runtime, "final_round", fake_final_round)
    candidates = [{"name": n} for n in first_pass_ms]
    ranking: list = []
    winner = _runtime.fastest(lambda c: c["name"], candidates, ranking)
    # within 4 % of the best (c, 0.99 ms): c, a, e, b; three go on: the untuned default (a,
    # the first candidate) as champion, then the best of the others
    assert seen["finalists"] == ["a", "c", "e"]
    assert winner == {"name": "e"}
    assert [r["ms"] for r in ranking] == list(first_pass_ms.values())
    # a default too slow for the final round does not get in
    first_pass_ms["a"] = 1.10
    _runtime.fastest(lambda c: c["name"], candidates, [])
    assert seen["finalists"] == ["c", "e"]


def test_autotuner_bench_answers_with_the_cold_timers_quantiles(monkeypatch):
    from types import SimpleNamespace

    from kernelab.harness import timing
    from kernelab.runtime import tuner as _runtime

    asked = {}

    def fake_benchmark(fn, **kwargs):
        fn()
        asked.update(kwargs)
        return SimpleNamespace(samples_ms=[5.0, 1.0, 4.0, 2.0, 3.0], median_ms=3.0)

    monkeypatch.setattr(timing, "benchmark", fake_benchmark)
    calls = []
    # what triton.autotune asks for: [median, p20, p80], interpolated between sorted samples
    assert _runtime.autotuner_bench(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8)) == [
        3.0,
        pytest.approx(1.8),
        pytest.approx(4.2),
    ]
    assert _runtime.autotuner_bench(lambda: calls.append(1)) == 3.0
    assert calls == [1, 1]
    assert asked["mode"] == "cold"  # the L2 flushed before each call, as do_bench does


def test_every_triton_autotuner_ranks_configs_by_device_time():
    from kernelab.runtime import tuner as _runtime

    matmul, vector_add = kernel_module("matmul"), kernel_module("vector_add")
    tuners = [matmul.plain._plain_tuned, vector_add._vector_add_tuned]
    tuners += [matmul.tma._tma_autotuner(2, None), matmul.tma._tma_autotuner(1, False, small_tiles=False)]
    for tuner in tuners:
        assert tuner.do_bench is _runtime.autotuner_bench


def test_final_round_champion_yields_only_to_a_faster_challenger():
    from types import SimpleNamespace

    from kernelab.runtime import tuner as _runtime

    # pct: the challenger's speed as % of the champion's, per (champion, challenger)
    # (within FINAL_ROUND_EDGE_PCT of the champion is a tie; a tie keeps the champion)
    pct = {("a", "b"): 100.4, ("a", "c"): 101.5, ("c", "d"): 100.0}
    calls = []

    def fake_compare(reference, candidate, **kwargs):
        match = (reference(), candidate())
        calls.append((match, kwargs["mode"]))
        return SimpleNamespace(pct_of_reference=pct[match])

    finalists = [{"name": n} for n in "abcd"]
    ranking: list = []
    winner = _runtime.final_round(lambda c: c["name"], finalists, ranking, compare=fake_compare)
    assert winner == {"name": "c"}  # b only tied, c won, d only tied
    assert calls == [(("a", "b"), "cold"), (("a", "c"), "cold"), (("c", "d"), "cold")]
    assert [(r["against"]["name"], r["config"]["name"], r["pct"]) for r in ranking] == [
        ("a", "b", 100.4),
        ("a", "c", 101.5),
        ("c", "d", 100.0),
    ]
    assert _runtime.final_round(None, [{"name": "x"}]) == {"name": "x"}


def test_occupancy_key_takes_a_keyword_tensor_by_dtype_and_alignment():
    from kernelab.runtime import tuner as _runtime

    words = torch.zeros(8, dtype=torch.int64)
    # two workspaces of one dtype and alignment compile to one binary: one key
    assert _runtime._compile_key(words) == _runtime._compile_key(torch.ones(8, dtype=torch.int64))
    assert _runtime._compile_key(words) == ("tensor", "torch.int64", words.data_ptr() % 16 == 0)
    assert _runtime._compile_key(words[1:])[2] != _runtime._compile_key(words)[2]  # 8 B off
    assert _runtime._compile_key(words.int())[1] == "torch.int32"
    assert _runtime._compile_key(True) is True and _runtime._compile_key(4) == 4


def test_final_round_keeps_the_champion_when_a_match_cannot_be_timed():
    from types import SimpleNamespace

    from kernelab.errors import KernelabError
    from kernelab.runtime import tuner as _runtime

    def compare(reference, candidate, **kwargs):
        if candidate() == "b":
            raise KernelabError("paired timing needs calls whose events cover their work")
        return SimpleNamespace(pct_of_reference=105.0)

    ranking: list = []
    finalists = [{"name": n} for n in "abc"]
    assert _runtime.final_round(lambda c: c["name"], finalists, ranking, compare) == {"name": "c"}
    refused, won = ranking
    assert refused["config"] == {"name": "b"} and refused["pct"] is None
    assert "events cover" in refused["error"] and won["pct"] == 105.0 and "error" not in won
    # anything else the timer raises is a bug, not a refusal: it propagates
    with pytest.raises(ZeroDivisionError):
        _runtime.final_round(lambda c: 1 / 0, finalists, [], compare)
