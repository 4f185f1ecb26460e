"""The committed records (benchmarks/results/<card>/) and the commands that read them: every
file there is one the README, the report or the gate reads, in the one record schema, each
card's records read by every command, and bad folders refused in one line before any work."""

from __future__ import annotations

import json
import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.harness.records import (
    Record,
    card_folder,
    committed_card_dir,
    committed_cards,
    load_records,
    read_json,
    save_records,
)
from kernelab.lab.results import load_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CARDS = ("h200", "h100")


def kernelab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kernelab", *args], capture_output=True,
                          text=True, env=env, cwd=cwd or ROOT, timeout=300)  # fmt: skip


def test_every_committed_file_is_read_and_the_folder_stays_small():
    on_disk = {p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file()}
    read = set()
    for card in CARDS:
        results = load_results(RESULTS / card)
        assert results.unreadable == [] and results.not_understood == [], card
        assert results.disagreements == [], card
        read |= {f"{card}/{name}" for name in results.files}
    assert on_disk == read  # nothing kept that no reader reads
    assert sum((RESULTS / name).stat().st_size for name in on_disk) < 10 * 2**20
    assert not [name for name in on_disk if "session" in name.lower()]
    big = [n for n in on_disk if not n.endswith(".xz") and (RESULTS / n).stat().st_size > 2**17]
    assert big == []  # large record files are kept compressed


def test_every_record_list_is_in_the_one_record_schema():
    """Each file that holds records holds them as Records (schema_version and all), so
    `kernelab compare` reads every one; the other files are documents (ceilings, summaries)."""
    lists = 0
    for path in sorted(RESULTS.rglob("*.json*")):
        data = read_json(path, "record file")
        items = data.get("records") if isinstance(data, dict) else data
        if not isinstance(items, list):
            continue
        lists += 1
        assert all("schema_version" in item for item in items), path
        assert len(load_records(path)) == len(items), path
    assert lists >= 38


def test_benchmark_rows_read_as_records_with_the_provenance_they_carry():
    from kernelab.harness.records import record_from_row

    row = {"op": "softmax", "implementation": "triton.softmax", "shape": {"rows": 2, "cols": 8},
           "dtype": "bf16", "samples_ms": [1.0, 1.2], "median_ms": 1.1, "rel_noise": 0.02,
           "achieved_tbps": 4.1, "timer": "cold", "throttled": False}  # fmt: skip
    record = record_from_row(row, versions={"torch": "2.11.0"})
    assert record.achieved_gbps == pytest.approx(4100.0) and record.stats["rel_noise"] == 0.02
    assert record.versions == {"torch": "2.11.0"} and record.git_commit is None
    assert record.extra == {"timer": "cold", "throttled": False}
    with pytest.raises(Exception, match="neither samples nor a median"):
        record_from_row({"op": "copy", "implementation": "torch.copy_"})


def test_each_card_is_found_by_folder_name_and_catalog_id():
    assert committed_cards()[:2] == ["h200", "h100"]
    assert card_folder("h100-sxm") == "h100" and card_folder("H200") == "h200"
    assert card_folder("b200") is None and committed_card_dir("b200") is None
    assert committed_card_dir("h100-sxm") == RESULTS / "h100"


def test_the_h100_card_reads_its_newest_targets_run_and_hgemm_ladder():
    results = load_results(RESULTS / "h100")
    assert results.pytorch_file == "pytorch/pytorch_targets_20261206.json.xz"
    assert len(results.pytorch_records) == 24 and results.hgemm_records
    assert "NVIDIA H100" in results.machine() and "2026-12-06" in results.machine()


def test_compressed_records_read_like_plain_ones(tmp_path):
    record = Record(op="gemm", implementation="x", shape={"m": 8}, dtype="bf16", mode="cold",
                    samples_ms=[1.0, 1.1], stats={"median": 1.05, "rel_noise": 0.01})  # fmt: skip
    plain = save_records([record], tmp_path / "r.json")
    packed = tmp_path / "r.json.xz"
    with lzma.open(packed, "wt") as handle:
        handle.write(plain.read_text())
    assert load_records(packed)[0].key() == load_records(plain)[0].key()
    assert read_json(packed, "x") == json.loads(plain.read_text())
    (tmp_path / "bad.json.xz").write_bytes(b"not xz")
    with pytest.raises(Exception, match="is not JSON") as info:
        load_records(tmp_path / "bad.json.xz")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("committed, pairs", [
    ("h100/pytorch/pytorch_targets_20261206.json.xz", 24),
    ("h200/triton/triton_kernels_sweep_20261130-134619.json.xz", 41),
])  # fmt: skip
def test_compare_reads_committed_xz_records_in_a_subprocess(committed, pairs):
    done = kernelab("compare", str(RESULTS / committed), str(RESULTS / committed), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["counts"]["SAME"] == pairs and result["counts"]["SLOW"] == 0


@pytest.mark.parametrize("card", CARDS)
def test_exit_check_judges_each_card_from_its_newest_records(card):
    done = kernelab("exit-check", "--results", f"benchmarks/results/{card}", "--json")
    data = json.loads(done.stdout)
    gate = {c["name"]: c for c in data["gate"]}
    softmax = gate["softmax >= 4.0 TB/s at every row length"]
    hgemm = next(c for name, c in gate.items() if name.startswith("Hopper bf16 GEMM"))
    newest = load_results(RESULTS / card).pytorch_file
    # the do_bench run is each card's newest measure of these targets: judged from it, named
    for criterion in (softmax, hgemm):
        assert newest in criterion["evidence"] and criterion["status"] == "FAIL"
    assert {c["status"] for c in data["gate"]} <= {"PASS", "FAIL"}
    assert done.returncode == (0 if data["phase_passed"] else 1)
    assert data["unreadable"] == [] and len(data["files"]) >= 3
    text = kernelab("exit-check", "--results", f"benchmarks/results/{card}").stdout
    assert "{'" not in text and "rows=" in text  # shapes in words, never a Python dict


def test_the_h100_softmax_verdict_says_its_card_cannot_reach_the_goal():
    done = kernelab("exit-check", "--results", "benchmarks/results/h100", "--json")
    gate = {c["name"]: c for c in json.loads(done.stdout)["gate"]}
    evidence = gate["softmax >= 4.0 TB/s at every row length"]["evidence"]
    assert "12 of 12 shapes below" in evidence and "3.35 TB/s, is below" in evidence


@pytest.mark.parametrize("argument, says", [("", "--results is empty"),
                                            ("no/such/folder", "no such folder")])  # fmt: skip
def test_exit_check_refuses_a_bad_results_folder_in_one_line(argument, says):
    done = kernelab("exit-check", "--results", argument)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_exit_check_refuses_a_folder_without_measurements(tmp_path):
    (tmp_path / "rooflines.json").write_text(json.dumps({"gpu": "h200", "rooflines": []}))
    done = kernelab("exit-check", "--results", str(tmp_path))
    assert done.returncode == 2 and "holds no measured records" in done.stderr
    assert "--results benchmarks/results/h200" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("out, says", [("", "--out is empty"),
                                       ("/proc/kernelab-x/report", "cannot create --out")])  # fmt: skip
def test_lab_refuses_an_unwritable_out_before_any_work(tmp_path, out, says):
    done = kernelab("lab", "--quick", "--out", out, cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, here or anywhere
    assert not Path("/proc/kernelab-x").exists()


def test_lab_refuses_a_file_as_out_and_an_unknown_gpu(tmp_path):
    (tmp_path / "a-file").write_text("x")
    done = kernelab("lab", "--out", "a-file", cwd=tmp_path)
    assert done.returncode == 2 and "is a file" in done.stderr
    done = kernelab("lab", "--out", "out", "--gpu", "no-such-gpu", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before the folder was made


def test_committed_ceilings_are_found_after_the_cache(tmp_path, monkeypatch):
    from kernelab.hardware.catalog import get_gpu
    from kernelab.harness.ceilings import (
        committed_measured,
        measured_ceilings_for,
        measured_or_committed,
        save_measured,
    )

    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNELAB_CEILINGS", raising=False)
    h200, h100 = get_gpu("h200"), get_gpu("h100-sxm")
    assert measured_ceilings_for(h200) is None  # the cache alone: nothing measured here
    ceilings, where = measured_or_committed(h200)
    committed = read_json(RESULTS / "h200" / "ceilings.json", "ceilings")
    assert ceilings.bandwidth == pytest.approx(committed["ceilings"]["copy"]["rate"])
    assert where == "the committed records (h200/ceilings.json)"
    assert measured_or_committed(h100) is None and committed_measured(h100) is None
    # a file named explicitly (or the cache) comes first
    measured, _ = committed_measured(h200)
    measured.ceilings["copy"].rate = 1e12
    path = save_measured(measured, tmp_path / "mine.json")
    monkeypatch.setenv("KERNELAB_CEILINGS", str(path))
    ceilings, where = measured_or_committed(h200)
    assert ceilings.bandwidth == pytest.approx(1e12) and where == str(path)


CITED = re.compile(r"benchmarks/(?:results|experiments)/[A-Za-z0-9_./-]*[A-Za-z0-9_]")
HISTORY_COMMIT = "f7bfe57"  # the last tree with the per-run folders and the experiment scripts


def _cited_paths() -> list[tuple[str, str, bool]]:
    """(file, cited path, cited at HISTORY_COMMIT) for every record or experiment path named in
    the docs, the sources and the tests."""
    cited = []
    for top in ("docs", "src", "tests"):
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in {".md", ".py", ".cu", ".cuh", ".json"}:
                continue
            name = path.relative_to(ROOT).as_posix()
            if path.suffix == ".json":  # an object's "record_commit" names where its record is
                cited.extend((name, *found) for found in _cited_in_json(json.loads(path.read_text())))
                continue
            for line in path.read_text(errors="replace").splitlines():
                for found in CITED.findall(line):
                    cited.append((name, found, HISTORY_COMMIT in line))
    return cited


def _cited_in_json(data, at_commit: bool = False):
    if isinstance(data, dict):
        at_commit = at_commit or data.get("record_commit") == HISTORY_COMMIT
        for value in data.values():
            yield from _cited_in_json(value, at_commit)
    elif isinstance(data, list):
        for value in data:
            yield from _cited_in_json(value, at_commit)
    elif isinstance(data, str):
        for found in CITED.findall(data):
            yield found, at_commit or HISTORY_COMMIT in data


def test_every_cited_record_is_here_or_at_the_commit_that_holds_it():
    """A figure's record is either committed under benchmarks/ or named with the commit whose
    tree holds it (git history keeps the per-run folders that results/ no longer does)."""
    import shutil

    cited = _cited_paths()
    assert len(cited) > 20
    missing = [(f, p) for f, p, at_commit in cited if not at_commit and not (ROOT / p).exists()]
    assert missing == []
    historic = sorted({p for _, p, at_commit in cited if at_commit and not (ROOT / p).exists()})
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history to look the older records up in")
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if shallow == "true":
        pytest.skip("a shallow clone lacks the commit that holds the older records")
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", HISTORY_COMMIT, "--", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    # a file, a folder, or the stem a citation completes (steps06-09_{records,summary}.json)
    absent = [p for p in historic if not any(name.startswith(p) for name in listed)]
    assert absent == []
