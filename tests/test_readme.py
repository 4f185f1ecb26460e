"""The README and docs/results.md: a user's page whose results are generated from the
committed records of every card, and never stale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_committed_pages_are_what_the_records_give():
    figures = sorted((ROOT / "docs" / "figures").rglob("*.png"))
    before = {p: p.stat().st_mtime_ns for p in figures}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "kernelab", "readme", "--check", "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # stale: run `kernelab readme`
    assert {p: p.stat().st_mtime_ns for p in figures} == before  # a check writes nothing


def test_the_readme_is_a_users_page_with_every_cards_headline():
    assert len(README.encode()) < 20_000  # the full tables live in docs/results.md
    for heading in ("## Two commands", "## Commands", "## Results", "### H200", "### H100 SXM"):
        assert heading in README, heading
    assert "[docs/results.md](docs/results.md)" in README and (ROOT / "docs/results.md").exists()
    # torch first, pinned (the CPU build here), and where to get a CPU build elsewhere
    assert 'pip install torch==2.13.0 && pip install -e ".[dev]"' in README
    assert "CPU build" in README and "--index-url" in README
    assert not re.search(r"session \d", README, re.I)


def test_every_figure_the_results_page_links_exists():
    page = (ROOT / "docs" / "results.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert linked and all((ROOT / "docs" / link).is_file() for link in linked)
    assert all(re.search(r"on NVIDIA H\d00", line) or "datasheet roofline" in line
               for line in page.splitlines() if line.startswith("!["))  # each names its GPU
