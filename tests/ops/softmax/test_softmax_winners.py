"""The softmax's measured winners are data (ops/softmax/winners.json): each entry names a
record that exists and a configuration the tuner offers at its shape, and it goes first."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_every_winner_names_a_committed_record_and_a_figure(entry):
    _, winner = entry
    assert (ROOT / winner["record"]).is_file(), winner["record"]
    assert winner["record"].startswith("benchmarks/results/") and winner["figure"]


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
