"""Where kernelab keeps things on this machine and in the repository."""

from __future__ import annotations

from pathlib import Path

from kernelab.harness.records import (
    DEFAULT_CARD,
    card_folder,
    committed_card_dir,
    committed_cards,
    results_root,
)


def repo_root() -> Path | None:
    """The source checkout this kernelab runs from, when it runs from one (editable install)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "benchmarks").exists():
            return parent
    return None


def committed_results_dir(gpu: str = DEFAULT_CARD) -> Path | None:
    """benchmarks/results/<card>/ of a card (folder name or catalog id), or None."""
    return committed_card_dir(gpu)


__all__ = ["DEFAULT_CARD", "card_folder", "committed_cards", "committed_results_dir",
           "repo_root", "results_root"]  # fmt: skip
