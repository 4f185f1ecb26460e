"""The product speaks of the product: no run diary in the sources, tests, docs or README (no
session numbers, no paths of the machine the project was built on, no steering files), and
every earlier record cited by name is in benchmarks/earlier-records.md with a path that the
commit holding it has."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("src", "tests", "docs")
SUFFIXES = {".py", ".md", ".cu", ".cuh", ".json", ".sh", ".toml", ".txt", ".c", ".h", ".hpp", ".cpp"}
EARLIER = ROOT / "benchmarks" / "earlier-records.md"

HISTORY = {
    "a session number": re.compile(r"\bsession ?[-_]?\d", re.I),
    "the build machine's shared folder": re.compile(r"/work/shared"),
    "a steering file": re.compile(r"\bANCHORS\.md\b"),
    "a lent machine": re.compile(r"\b(?:the|a|an) lent\b", re.I),
}
CITED_NAME = re.compile(r"earlier records? `([a-z0-9-]+)`")


def _product_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in TOPS:
        files += [p for p in sorted((ROOT / top).rglob("*")) if p.is_file() and p.suffix in SUFFIXES]
    # this file names what it looks for
    return [p for p in files if p != Path(__file__).resolve()]


def test_no_run_diary_in_the_product():
    found = []
    for path in _product_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for what, pattern in HISTORY.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert found == [], "\n".join(found[:40])


def _earlier_table() -> dict[str, str]:
    """name -> path at the commit, from the table of benchmarks/earlier-records.md."""
    rows = {}
    for line in EARLIER.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[2].startswith("`"):
            rows[cells[0].strip("`")] = cells[2].strip("`")
    return rows


def test_every_earlier_record_cited_by_name_is_in_the_table():
    table = _earlier_table()
    assert len(table) >= 5
    cited = {}
    for path in _product_files():
        for name in CITED_NAME.findall(path.read_text(errors="replace")):
            cited.setdefault(name, path.relative_to(ROOT).as_posix())
    assert cited, "nothing cites an earlier record by name"
    unknown = {name: where for name, where in cited.items() if name not in table}
    assert unknown == {}


def test_the_earlier_records_table_names_paths_the_commit_holds():
    commit = re.search(r"commit `([0-9a-f]{7,40})`", EARLIER.read_text()).group(1)
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history to look the records up in")
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if shallow == "true":
        pytest.skip("a shallow clone lacks the commit that holds the records")
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit, "--", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip

    def held(path: str) -> bool:
        # a file, a folder, a glob's stem or a {a,b} stem
        stem = re.split(r"[*{]", path)[0]
        return any(name.startswith(stem) for name in listed)

    absent = [path for path in _earlier_table().values() if not held(path)]
    assert absent == []
