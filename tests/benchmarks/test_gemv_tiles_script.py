"""benchmarks/gemv_tiles.py without a GPU: it explains itself, --dry-run prints the grid and a
budget within the run's, --propose turns a record into a table plan() accepts, the sweep's
passes run end to end on the interpreter with a stand-in timer and write a record the loader
reads, bad options are one-line refusals, and the timed run refuses a machine without CUDA."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
import triton_on_cpu  # noqa: E402  (before Triton: the interpreter on a machine without CUDA)
from benchmark_scripts import BENCHMARKS, load_script  # noqa: E402

FIXTURE = BENCHMARKS.parent / "tests" / "ops" / "gemv" / "gemv_tiles_record.json"


@pytest.fixture(scope="module")
def script():
    return load_script("gemv_tiles")


def test_help_names_every_option(script, capsys):
    with pytest.raises(SystemExit) as raised:
        script.parse(["-h"])
    assert raised.value.code == 0
    out = capsys.readouterr().out
    for word in ("--out", "--table", "--m", "--weights", "--budget-s", "--jobs", "--dry-run",
                 "--propose"):  # fmt: skip
        assert word in out


def test_dry_run_prints_every_batchs_grid_and_a_budget_within_the_run(script, capsys):
    assert script.main(["--dry-run", "--jobs", "12"]) == 0
    out = capsys.readouterr().out
    for m in (1, 4, 16, 64):
        assert re.search(rf"^m = {m}: \d+ tiles", out, re.M)
    assert out.count("splits [1") == 24  # six weights, four batches
    seconds = int(re.search(r"about (\d+) s", out).group(1))
    assert seconds <= script.DEFAULT_BUDGET_S


@pytest.mark.parametrize(
    "argv",
    [["--m", "0"], ["--m", "65"], ["--m", "x"], ["--weights", "llama3-8b.qk"]],
    ids=["m-0", "m-65", "m-text", "unknown-weight"],
)
def test_bad_options_are_refused(script, argv, capsys):
    with pytest.raises(SystemExit) as raised:
        script.parse(argv)
    assert raised.value.code == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if "error" in line]) == 1


def test_propose_turns_a_record_into_a_table_plan_accepts(script, tmp_path, capsys):
    from kernelab.ops.gemv import plan
    from kernelab.ops.gemv.tiles import check_table

    target = tmp_path / "tiles.json"
    assert script.main(["--propose", str(FIXTURE), "--table", str(target)]) == 0
    out = capsys.readouterr().out
    assert "late-m1n16k512-w4s1.split2" in out and "91 % of copy" in out
    assert "114 % of torch" in out  # 14.0 us of cuBLAS against 12.3
    table = check_table(json.loads(target.read_text()))
    measured = [e for e in table["entries"] if e["status"] == "measured"]
    # the fixture sits under tests/: named where it is to go (a path, not a citation); the
    # buckets it swept (m = 1 and 16) are its entries alone, the others keep tiles.json's
    named = str(Path("benchmarks", "results", "h100", "gemv_tiles", "gemv_tiles_record.json"))
    assert {e["m"] for e in measured if e["record"] == named} == {1, 16}
    assert all(e["record"] == named for e in measured if e["m"] in (1, 16))
    assert plan(1, 4096, 4096, 132, itemsize=2, table=table)["split"] == 2


def test_propose_refuses_a_file_that_is_no_record(script, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"records": 3}')
    assert script.main(["--propose", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


def test_the_record_is_named_where_it_is_to_be_committed(script, tmp_path):
    inside = BENCHMARKS / "results" / "h100" / "gemv_tiles" / "run.json"
    for card, path in (("h100-sxm", inside), ("h200", tmp_path / "run.json")):
        folder = "h200" if card == "h200" else "h100"
        expected = Path("benchmarks", "results", folder, "gemv_tiles", "run.json")
        assert script.committed_path(path, card) == str(expected)


def test_the_timed_run_needs_a_gpu(script, capsys):
    if triton_on_cpu.HAS_CUDA:
        pytest.skip("a GPU is present: the sweep would run")
    assert script.main(["--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: the sweep needs a CUDA GPU (--dry-run and --propose run without)"
    )


def test_the_passes_run_on_the_cpu_with_a_stand_in_timer(script, tmp_path, monkeypatch):
    """measure_point end to end on the interpreter: torch and today's launch, then the coarse,
    refine and confirm passes, each candidate checked before it is timed (one that fails the
    check is a failure line, not a record), the document saved and read back, the table
    proposed from it."""
    if triton_on_cpu.HAS_CUDA:
        pytest.skip("a GPU is present: benchmarks/gemv_tiles.py runs for real")
    triton_on_cpu.kernel_module("gemv")
    from kernelab.harness import timing
    from kernelab.harness.ceilings import DeviceIdentity
    from kernelab.harness.records import load_records
    from kernelab.harness.stats import summarize
    from kernelab.ops.gemv import tile_sweep
    from kernelab.ops.gemv.tiles import check_table

    grid = tile_sweep.tile_grid(2)
    small = [grid[0], grid[1], tile_sweep.tile_of({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64,
                                                   "USE_DOT": True})]  # fmt: skip
    monkeypatch.setattr(tile_sweep, "tile_grid", lambda m: small)
    times = iter(range(1, 1000))

    def stand_in(fn, **_):
        fn()
        samples = [0.010 + 0.001 * next(times)] * 3
        return timing.Timing(samples, "cold", summarize(samples), "converged")

    monkeypatch.setattr(timing, "benchmark", stand_in)
    identity = DeviceIdentity(0, "stand-in", "h100-sxm", None, (9, 0))
    sweep = script.Sweep(identity, tmp_path / "run.json", 132, device="cpu")
    sweep.copy_gbps = 3000.0
    broken = tile_sweep.Tile("step", 2, 8, 64, 4, 1)
    real_launch = tile_sweep.Tile.launch

    def launch(self, m, n, k, split):  # one candidate covers only half of K: its check fails
        found = real_launch(self, m, n, k, split)
        return {**found, "k_per_split": found["k_per_split"] // 2} if self == broken else found

    monkeypatch.setattr(tile_sweep.Tile, "launch", launch)
    small[1] = broken
    point = tile_sweep.Point("tiny", 2, 19, 200)
    script.measure_point(sweep, point)
    sweep.save()
    records = load_records(sweep.path)
    passes = {(r.implementation, r.extra["pass"]) for r in records}
    assert {("torch.gemv", "confirm"), ("triton.gemv", "confirm")} <= passes
    assert {p for _, p in passes} == {"coarse", "refine", "confirm"}
    assert not any(broken.name in r.implementation for r in records)
    assert len(sweep.failures) == 1 and broken.name in sweep.failures[0]
    assert "check failed" in sweep.failures[0] and "\n" not in sweep.failures[0]
    for r in records:
        assert r.extra["suite"] == "gemv_tiles" and r.check["ok"]
        assert r.extra["pct_of_copy"] > 0 and r.extra["pct_of_torch"] > 0
    winners = tile_sweep.point_winners(records)
    assert set(winners) == {(2, 19, 200)}
    table = check_table(script.proposal(records, {"gpu_id": "h100-sxm", "sms": 132}, sweep.path))
    assert any(e["status"] == "measured" and e["m"] == 2 for e in table["entries"])
    assert script.precompile([point], 132, 0)["workers"] == 0  # --jobs 0: compiled inline


def test_the_compile_workers_run_every_launch_in_their_own_processes(script, monkeypatch):
    """precompile's plumbing (spawned processes, the launches shared out, their errors
    gathered) on the interpreter; on a GPU the same runs leave the kernels in Triton's cache."""
    if triton_on_cpu.HAS_CUDA:
        pytest.skip("a GPU is present: the workers would compile for it")
    from kernelab.ops.gemv import tile_sweep

    small = tile_sweep.tile_grid(1)[:3]
    monkeypatch.setattr(tile_sweep, "tile_grid", lambda m: small)
    points = [tile_sweep.Point("tiny", 1, 24, 300), tile_sweep.Point("tiny", 3, 24, 300)]
    jobs = tile_sweep.compile_jobs(points, 132)
    result = script.precompile(points, 132, 2, device="cpu")
    assert result["workers"] == 2 and result["jobs"] == len(jobs)
    assert result["compiled"] == len(jobs) and result["errors"] == []
    done, errors = tile_sweep.compile_worker([(1, 24, 300, {"BLOCK_N": 16})], "cpu")
    assert done == 0 and len(errors) == 1 and "KeyError" in errors[0]
