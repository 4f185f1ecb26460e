"""The softmax's measured winners are data (ops/softmax/winners.json): each entry names a
record that exists and a configuration the tuner offers at its shape, and it goes first."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import triton_on_cpu  # noqa: E402, F401  (sets TRITON_INTERPRET without a GPU)

pytest.importorskip("triton")

from kernelab.ops.softmax import long_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
WINNERS = json.loads((ROOT / "src/kernelab/ops/softmax/winners.json").read_text())
ENTRIES = [(table, w) for table in ("long_rows", "partial_chunks", "gluon") for w in WINNERS[table]]


def _entry_id(entry) -> str:
    table, w = entry
    return f"{table}-{w['itemsize']}B-{w['cols']}"


def _record_text(winner) -> str:
    """The record's text: from the tree, or from the commit that holds a tuning sweep."""
    if "record_commit" not in winner:
        from kernelab.harness.records import read_json

        return json.dumps(read_json(ROOT / winner["record"], "record"))
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git history that holds the record")
    shown = subprocess.run(
        ["git", "show", f"{winner['record_commit']}:{winner['record']}"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if shown.returncode != 0 and "shallow" in shown.stderr + _shallow():
        pytest.skip("a shallow clone lacks the commit that holds the record")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _shallow() -> str:
    out = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    return "shallow" if out.strip() == "true" else ""


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_every_winner_names_its_record_and_the_record_holds_its_shape(entry):
    _, winner = entry
    assert winner["record"].startswith("benchmarks/results/") and winner["figure"]
    text = _record_text(winner)
    # The winner's row length appears in its record (as a shape's cols).
    assert str(winner["cols"]) in text


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e[0] == "long_rows"], ids=_entry_id)
def test_every_long_row_winner_is_the_first_candidate_at_its_row_length(entry):
    _, winner = entry
    dtype = torch.float32 if winner["itemsize"] == 4 else torch.bfloat16
    first = long_rows.long_row_candidates(winner["cols"], dtype)[0]
    assert long_rows.identity(first) == long_rows.identity(winner["config"])


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e[0] == "partial_chunks"], ids=_entry_id)
def test_a_partial_chunk_winner_goes_first_where_the_row_is_not_whole_chunks(entry):
    _, winner = entry
    cols = winner["cols"] - 7  # pads to the same length; not a whole number of chunks
    first = long_rows.long_row_candidates(cols, torch.bfloat16)[0]
    assert long_rows.identity(first) == long_rows.identity(winner["config"])


def test_the_winner_tables_are_keyed_by_itemsize_and_padded_length_once_each():
    for table in ("long_rows", "partial_chunks", "gluon"):
        keys = [(w["itemsize"], w["cols"]) for w in WINNERS[table]]
        assert len(keys) == len(set(keys)), table
        assert all(cols & (cols - 1) == 0 for _, cols in keys), table  # powers of two


# --- the cooperative kernel's candidates (ops/softmax/cooperative_candidates.json) ----------

CANDIDATES = json.loads(
    (ROOT / "src/kernelab/ops/softmax/cooperative_candidates.json").read_text()
)["candidates"]


@pytest.mark.parametrize("entry", CANDIDATES, ids=lambda e: json.dumps(e["config"], sort_keys=True))
def test_every_cooperative_candidate_says_why_and_names_a_record_that_holds_its_chunk(entry):
    assert entry["why"] and entry["figure"] and set(entry["itemsizes"]) <= {2, 4}
    assert entry["record"].startswith("benchmarks/results/")
    assert str(entry["config"]["CHUNK"]) in _record_text(entry)


def test_the_cooperative_candidates_follow_the_table_by_itemsize_and_dtype():
    from kernelab.ops.softmax import cooperative

    by_dtype = {d: cooperative.candidates(d) for d in (torch.float32, torch.bfloat16, torch.float16)}
    waiting = [c for c in by_dtype[torch.float32] if not c.get("DEFER")]
    assert all(by_dtype[d][: len(waiting)] == waiting for d in by_dtype)  # the waiting kernel's first
    assert len(waiting) == 2 and all(c.get("DEFER") for c in by_dtype[torch.float32][2:])
    # bf16 pairs in words: bf16 only (an fp16 is not the top half of its fp32)
    assert any(c.get("PAIRS") for c in by_dtype[torch.bfloat16])
    assert not any(c.get("PAIRS") for c in by_dtype[torch.float16] + by_dtype[torch.float32])
    # the two-warp c2048 is fp32's; the one-warp c2048 the 2-byte dtypes'
    two_warp = {"CHUNK": 2048, "num_warps": 2}
    one_warp = {"CHUNK": 2048, "num_warps": 1}
    assert any(two_warp.items() <= c.items() for c in by_dtype[torch.float32])
    assert not any(one_warp.items() <= c.items() for c in by_dtype[torch.float32])
    assert any(one_warp.items() <= c.items() for c in by_dtype[torch.float16])
    expected = [e["config"] for e in CANDIDATES if 2 in e["itemsizes"] and "dtypes" not in e]
    assert by_dtype[torch.float16] == expected
