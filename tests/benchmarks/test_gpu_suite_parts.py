"""benchmarks/gpu_suite.sh: its parts together hold every gpu-marked test exactly once, so a
note that says "every part passed" means the whole gpu suite ran. Proved by listing the tests
(pytest --collect-only), which needs no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = "a b c d e f g h l p t".split()


def _node_ids(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "::" in line and " " not in line.strip()]


def _collected_by_parts(logs: Path) -> dict[str, list[str]]:
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), *PARTS],
        env={**os.environ, "OUT": str(logs), "GPU_SUITE_COLLECT": "1"},
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {part: _node_ids((logs / f"gpu-suite-part-{part}.log").read_text()) for part in PARTS}


def _gpu_marked() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "-m", "gpu", "tests"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return set(_node_ids(done.stdout))


def test_the_parts_hold_every_gpu_marked_test_once(tmp_path):
    by_part = _collected_by_parts(tmp_path)
    gpu_marked = _gpu_marked()
    assert len(gpu_marked) > 1000  # the listing really listed the suite

    seen: dict[str, str] = {}
    twice = []
    for part, tests in by_part.items():
        assert tests, f"part {part} lists no test"
        for test in tests:
            if test in seen:
                twice.append(f"{test} in parts {seen[test]} and {part}")
            seen[test] = part
    assert not twice, "\n".join(twice[:20])

    missing = sorted(gpu_marked - seen.keys())
    assert not missing, f"{len(missing)} gpu-marked tests in no part:\n" + "\n".join(missing[:20])
    # Only part t runs tests that are not gpu-marked: the teaching kernels, on the GPU.
    unmarked = {test: part for test, part in seen.items() if test not in gpu_marked}
    assert set(unmarked.values()) <= {"t"}, sorted(unmarked.items())[:20]
    assert all("teaching" in test for test in unmarked)


def test_groups_run_at_once_one_card_each_and_a_bad_part_fails_before_any_runs(tmp_path):
    """GPU_SUITE_CARDS=N: each group (parts joined by commas) on a card of its own, at once;
    a group more than cards, or an unknown part, refused before anything runs."""
    env = {**os.environ, "OUT": str(tmp_path), "GPU_SUITE_COLLECT": "1", "GPU_SUITE_CARDS": "2"}
    script = str(ROOT / "benchmarks" / "gpu_suite.sh")
    done = subprocess.run(["bash", script, "d,t", "e"], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    heads = {part: (tmp_path / f"gpu-suite-part-{part}.log").read_text().splitlines()[0]
             for part in "dte"}  # fmt: skip
    assert "on card 0" in heads["d"] and "on card 0" in heads["t"] and "on card 1" in heads["e"]
    assert _node_ids((tmp_path / "gpu-suite-part-e.log").read_text())
    for argv, why in ((["a", "b", "c"], "3 groups for 2 cards"), (["a,x"], "unknown part 'x'")):
        refused = subprocess.run(["bash", script, *argv], env=env, capture_output=True,
                                 text=True, timeout=60, cwd=ROOT)  # fmt: skip
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
        assert not (tmp_path / "gpu-suite-part-a.log").exists()
