"""The house's rules, checked: the floors import downward only (the import-linter contracts in
pyproject.toml) and no module takes part in an import cycle, function-local imports included."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    class Graph:
        modules = {"a", "b", "c", "d"}
        imports = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": set()}

        def find_modules_directly_imported_by(self, module):
            return self.imports[module]

    assert _import_cycles(Graph()) == [["a", "b"]]


def test_no_module_is_part_of_an_import_cycle():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("kernelab")
    assert _import_cycles(graph) == []


def test_the_floors_import_downward_only():
    pytest.importorskip("importlinter")
    command = shutil.which("lint-imports")
    assert command, "import-linter is installed but its lint-imports command is not on PATH"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # this checkout's kernelab
    run = subprocess.run(
        [command, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
