"""default_results_dir: where a benchmark script writes without --out ($OUT, else the card's
folder of a source checkout, else ./kernelab-results/<gpu> under the working directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelab.harness import records
from kernelab.harness.records import default_results_dir


@pytest.fixture
def no_out(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)


def test_out_wins_whatever_the_gpu_and_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert default_results_dir("h100-sxm", "decode") == tmp_path
    assert default_results_dir(None) == tmp_path
    monkeypatch.setattr(records, "results_root", lambda: None)
    assert default_results_dir("h200", "hgemm") == tmp_path


def test_a_source_checkout_with_a_gpu_gets_the_cards_folder(no_out, monkeypatch, tmp_path):
    monkeypatch.setattr(records, "results_root", lambda: tmp_path / "results")
    # the folder of a card with committed records, by catalog id or folder name
    assert default_results_dir("h100-sxm", "decode") == tmp_path / "results" / "h100" / "decode"
    assert default_results_dir("h200") == tmp_path / "results" / "h200"
    assert default_results_dir("h200", "a", "b") == tmp_path / "results" / "h200" / "a" / "b"
    # a GPU without committed records: its own id
    assert default_results_dir("b200", "judge") == tmp_path / "results" / "b200" / "judge"
    # no GPU identified: not the checkout's records, the working directory's folder
    assert default_results_dir(None, "judge") == Path("kernelab-results/cpu/judge")


def test_without_a_checkout_it_is_the_working_directorys_folder(no_out, monkeypatch):
    monkeypatch.setattr(records, "results_root", lambda: None)
    assert default_results_dir("h100-sxm", "decode") == Path("kernelab-results/h100-sxm/decode")
    assert default_results_dir(None) == Path("kernelab-results/cpu")
    assert not default_results_dir(None, "x").is_absolute()


def test_an_empty_out_counts_as_unset(monkeypatch):
    monkeypatch.setenv("OUT", "")
    monkeypatch.setattr(records, "results_root", lambda: None)
    assert default_results_dir("h200", "sampling") == Path("kernelab-results/h200/sampling")


def test_this_checkout_resolves_to_its_committed_card_folders(no_out):
    root = records.results_root()
    if root is None:
        pytest.skip("an installed kernelab has no benchmarks/results/")
    assert default_results_dir("h100-sxm", "hgemm") == root / "h100" / "hgemm"
    assert (root / "h100").is_dir()
