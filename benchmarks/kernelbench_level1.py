"""KernelBench level 1, whole, as the judge's real workload: every problem judged with its own
reference as the solution (`ModelNew = Model`), at the published sizes.

    PYTHONPATH=src python3 benchmarks/kernelbench_level1.py --kernelbench PATH [--out DIR]
        [--suite-dir DIR] [--resume] [--only 1,23,95] [--budget-s 540] [--scale 1.0] [--timeout 600]

PATH is a KernelBench checkout (the repository root, its KernelBench/ folder or the level1/
folder itself); `--fetch DEST` clones the public repository there first. The problems are
not committed to kernelab: they are the benchmark's, fetched or pointed at.

What it does:
  1. writes a suite folder (under --out, or --suite-dir: a folder of its own, so that --out
     holds only the verdicts and the summary, two files): each level-1 problem as
     NNN_Name.py and, under solutions/NNN_Name/, the problem's own source with
     `ModelNew = Model` appended;
  2. judges one problem at a time with `kernelab eval PROBLEM SOLUTION --json`, each in a
     process of its own (a problem that kills its process, or the CUDA context, cannot take
     the others with it), and appends its verdict to level1-verdicts.jsonl as it finishes;
  3. with --resume, skips the problems that file already holds; with --budget-s, starts no
     problem after that many seconds, so a run can be split over several device calls;
  4. writes kernelbench-level1.json: the verdicts in problem order, each with its median
     speedup over eager, and the judgement: every verdict pass, within 0.9-1.1x eager (the
     solution IS the reference: any other figure is the harness's error), none crashed, none
     out of memory. A problem the judge skips because it cannot fit the card is listed with
     the judge's reason; it is not counted as a crash.

Runs without a GPU too (correctness only: the judge skips timing on the CPU), which is how
the tests exercise it at --scale 0.01 on two problems.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = "https://github.com/ScalingIntelligence/KernelBench"
VERDICTS = "level1-verdicts.jsonl"
SUMMARY = "kernelbench-level1.json"
PROBLEM_FILE = re.compile(r"^(\d+)_(\w+)\.py$")
SPEEDUP_BAND = (0.9, 1.1)  # the reference timed against itself
OOM_MARKERS = ("OutOfMemoryError", "out of memory", "CUDA error: out of memory")


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Judge every KernelBench level-1 problem with its own reference."
    )
    parser.add_argument("--kernelbench", help="a KernelBench checkout (or its level1/ folder)")
    parser.add_argument("--fetch", metavar="DEST", help=f"git clone {REPOSITORY} into DEST first")
    parser.add_argument("--out", default=None,
                        help="folder for the suite, the verdicts and the summary (default $OUT, "
                        "else benchmarks/results/<card>/kernelbench-level1 in a source "
                        "checkout, else ./kernelab-results/<gpu or cpu>/"
                        "kernelbench-level1)")  # fmt: skip
    parser.add_argument("--suite-dir", default=None,
                        help="folder for the suite's problem and solution files (default "
                        "OUT/suite); --out then holds the verdicts and the summary alone")  # fmt: skip
    parser.add_argument("--resume", action="store_true", help="skip problems already judged")
    parser.add_argument("--only", default="", help="comma list of problem numbers")
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="start no problem after this many seconds (0: no limit)")  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0, help="kernelab eval --scale")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per problem (the judge's own limit is this less 30 s)")  # fmt: skip
    parser.add_argument("--device", default="auto", help="kernelab eval --device")
    parser.add_argument("--eval-args", default="--no-compile",
                        help="extra kernelab eval arguments (default: --no-compile)")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.kernelbench and not args.fetch:
        args.kernelbench = os.environ.get("KERNELBENCH_DIR")
    if not args.kernelbench and not args.fetch:
        parser.error(f"name a KernelBench checkout (--kernelbench PATH or $KERNELBENCH_DIR) "
                     f"or --fetch DEST to clone {REPOSITORY}")  # fmt: skip
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    if args.timeout <= 30:
        parser.error(f"--timeout must exceed 30 s, got {args.timeout}")
    try:
        args.only = {int(n) for n in args.only.split(",") if n.strip()}
    except ValueError:
        parser.error(f"--only takes problem numbers, got {args.only!r}")
    return args


def fetch(dest: Path) -> Path:
    if (dest / ".git").is_dir():
        return dest
    done = subprocess.run(["git", "clone", "--depth", "1", REPOSITORY, str(dest)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"kernelbench_level1: git clone {REPOSITORY} failed: {last}")
    return dest


def level1_folder(path: Path) -> Path:
    """The folder of level-1 problem files inside a checkout, wherever PATH points in it."""
    for candidate in (path / "KernelBench" / "level1", path / "level1", path):
        if candidate.is_dir() and any(PROBLEM_FILE.match(p.name) for p in candidate.iterdir()):
            return candidate
    raise SystemExit(f"kernelbench_level1: no level-1 problems (NN_Name.py) under {path}")


def problems_in(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for path in folder.iterdir():
        match = PROBLEM_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def prepare_suite(folder: Path, suite: Path, only: set[int]) -> list[tuple[int, Path, Path]]:
    """(number, problem, solution) files under `suite`, the solution being the reference."""
    prepared = []
    for number, source in problems_in(folder):
        if only and number not in only:
            continue
        stem = f"{number:03d}_{PROBLEM_FILE.match(source.name).group(2)}"
        problem = suite / f"{stem}.py"
        solution = suite / "solutions" / stem / "reference_as_solution.py"
        solution.parent.mkdir(parents=True, exist_ok=True)
        text = source.read_text()
        problem.write_text(text)
        solution.write_text(
            text.rstrip() + "\n\n\nModelNew = Model  # the reference judged as a solution\n"
        )
        prepared.append((number, problem, solution))
    return prepared


def read_verdicts(path: Path) -> dict[int, dict]:
    """The verdicts already written, by problem number (a torn last line is ignored)."""
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[entry["number"]] = entry
    return done


def median_speedup(row: dict) -> float | None:
    speedups = sorted(t["speedup_vs_eager"] for t in row.get("timings", [])
                      if t.get("speedup_vs_eager"))  # fmt: skip
    if not speedups:
        return None
    middle = len(speedups) // 2
    return speedups[middle] if len(speedups) % 2 else (speedups[middle - 1] + speedups[middle]) / 2


def judge_one(number: int, problem: Path, solution: Path, args) -> dict:
    """One problem's verdict, judged by `kernelab eval` in a process of its own."""
    command = [sys.executable, "-m", "kernelab", "eval", str(problem), str(solution), "--json",
               "--device", args.device, "--scale", str(args.scale),
               "--timeout", str(args.timeout - 30), *args.eval_args.split()]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = None, "", f"no verdict within {args.timeout:g} s ({exc.cmd[3]})"
    entry = {"number": number, "problem": problem.stem, "exit_code": code,
             "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError:
        document = None
    # one solution's verdict is the document itself; a setup failure has no status
    if not isinstance(document, dict) or "status" not in document:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        entry.update(status="crash", message=f"kernelab eval gave no verdict: {tail}")
        return entry
    row = document
    entry.update(status=row.get("status"), message=row.get("message", ""),
                 speedup_vs_eager=median_speedup(row), notes=row.get("notes", []),
                 memory=row.get("memory", {}))  # fmt: skip
    return entry


def judge(entry: dict, timed: bool) -> list[str]:
    """Why this verdict falls short of the level-1 bar ([] when it meets it)."""
    text = f"{entry.get('message', '')} {' '.join(entry.get('notes', []))}"
    if entry["status"] == "skipped":
        return []  # the judge's own "needs N GB, card has M": listed, not a failure
    faults = []
    if entry["status"] == "crash":
        faults.append("crash")
    elif entry["status"] != "pass":
        faults.append(f"status {entry['status']}")
    if any(marker in text for marker in OOM_MARKERS):
        faults.append("out of memory")
    speedup = entry.get("speedup_vs_eager")
    if timed and entry["status"] == "pass":
        if speedup is None:
            faults.append("no timing")
        elif not SPEEDUP_BAND[0] <= speedup <= SPEEDUP_BAND[1]:
            faults.append(f"{speedup:.2f}x eager, outside {SPEEDUP_BAND[0]}-{SPEEDUP_BAND[1]}x")
    return faults


def summarise(verdicts: dict[int, dict], planned: list[int], args) -> dict:
    timed = any(v.get("speedup_vs_eager") for v in verdicts.values())
    rows = []
    for number in planned:
        if number in verdicts:
            entry = dict(verdicts[number])
            entry["faults"] = judge(entry, timed)
            rows.append(entry)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {
        "what": "KernelBench level 1, each problem judged with ModelNew = Model",
        "machine": machine(),
        "scale": args.scale,
        "planned": len(planned),
        "judged": len(rows),
        "statuses": statuses,
        "timed": timed,
        "speedup_band": SPEEDUP_BAND,
        "short_of_bar": [f"{r['problem']}: {', '.join(r['faults'])}" for r in rows if r["faults"]],
        "skipped": [f"{r['problem']}: {r['message']}" for r in rows if r["status"] == "skipped"],
        "complete": len(rows) == len(planned),
        "meets_bar": len(rows) == len(planned) and not any(r["faults"] for r in rows),
        "rows": rows,
    }


def machine() -> dict:
    try:
        import torch

        if torch.cuda.is_available():
            from kernelab.hardware.detect import match_catalog

            name = torch.cuda.get_device_name()
            spec = match_catalog(name)
            return {"gpu": name, "gpu_id": spec.id if spec else None, "torch": torch.__version__}
        return {"gpu": None, "gpu_id": None, "torch": torch.__version__}
    except ImportError:
        return {"gpu": None, "gpu_id": None, "torch": None}


def default_out() -> Path:
    """$OUT, else the kernelbench-level1/ folder of this machine's card (machine())."""
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    found = machine()
    key = found["gpu_id"] or (safe_name(found["gpu"]) if found["gpu"] else None)
    return default_results_dir(key, "kernelbench-level1")


def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.out) if args.out else default_out()
    out.mkdir(parents=True, exist_ok=True)
    source = fetch(Path(args.fetch)) if args.fetch else Path(args.kernelbench)
    suite = Path(args.suite_dir) if args.suite_dir else out / "suite"
    prepared = prepare_suite(level1_folder(source), suite, args.only)
    if not prepared:
        raise SystemExit(f"kernelbench_level1: no problem matches --only {sorted(args.only)}")
    verdict_file = out / VERDICTS
    if not args.resume and verdict_file.exists():
        verdict_file.unlink()
    verdicts = read_verdicts(verdict_file)
    started = time.monotonic()
    todo = [item for item in prepared if item[0] not in verdicts]
    print(f"{len(prepared)} problems, {len(prepared) - len(todo)} already judged", flush=True)
    for index, (number, problem, solution) in enumerate(todo, 1):
        if args.budget_s and time.monotonic() - started > args.budget_s:
            print(f"budget of {args.budget_s:g} s spent: {len(todo) - index + 1} problems left "
                  "for --resume", flush=True)  # fmt: skip
            break
        entry = judge_one(number, problem, solution, args)
        with verdict_file.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        verdicts[number] = entry
        speedup = entry.get("speedup_vs_eager")
        shown = f"{speedup:.2f}x eager" if speedup else "untimed"
        print(f"[{index}/{len(todo)}] {problem.stem}: {entry['status']} ({shown}, "
              f"{entry['seconds']:.0f} s) {entry['message'][:100]}", flush=True)  # fmt: skip
    summary = summarise(verdicts, [number for number, _, _ in prepared], args)
    (out / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    print(f"{summary['judged']}/{summary['planned']} judged: {summary['statuses']}; "
          f"short of the bar: {len(summary['short_of_bar'])}; skipped by the judge: "
          f"{len(summary['skipped'])}")  # fmt: skip
    for line in summary["short_of_bar"]:
        print(f"  {line}")
    return 0 if summary["meets_bar"] or not summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
