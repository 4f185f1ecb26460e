"""What the judge's timed loop spends outside the clock, per call, measured on this machine
and written as one JSON document:

    PYTHONPATH=src python3 benchmarks/judge_overhead.py [--out DIR] [--device cuda]

- The fingerprint's digest (kernelab.evaluate.digest) of an output, its fold first checked
  against its Python arithmetic on a GPU, against one read of the same bytes (a sum), at sizes from 256 KiB to 256 MiB on a GPU (to 16 MiB on a CPU): the
  digest is meant to cost about one read on a GPU, so that the judge's floor on a faked time
  (kernelab.evaluate.observed), which subtracts the loop's cost, stays tight.
- The loop's own cost per call (observed.loop_cost_ms: the judge's null call) for the
  KernelBench fixture problems, with a new input set made per call (timed_calls.Fresh) and
  with the pool rotated (timed_calls.Rotation), and the time to make one set.

Every figure is the median of --reps repetitions after a warm-up. Nothing is asserted: the
document and one line per measurement are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

EVAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "eval" / "kernelbench"
PROBLEMS = ("relu.py", "softmax.py", "matmul.py")
GPU_SIZES_MIB = (0.25, 4, 64, 256)
CPU_SIZES_MIB = (0.25, 4, 16)
CALLS = 50


def parse(argv):
    parser = argparse.ArgumentParser(description="Measure the judge's per-call loop overhead.")
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/judge in a source checkout, else "
                        "./kernelab-results/<gpu or cpu>/judge)")  # fmt: skip
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if any)")
    parser.add_argument("--reps", type=int, default=9, help="repetitions per figure (default 9)")
    parser.add_argument("--scale", type=float, default=None,
                        help="problem sizes (default 1 on a GPU, 0.0625 on a CPU)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    return args


def _median_ms(fn, reps: int, sync) -> float:
    fn()
    sync()
    samples = []
    for _ in range(reps):
        begin = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(samples)


def check_the_fold(torch, device) -> None:
    """The device's fold against its arithmetic in Python integers, before anything is timed
    (on a GPU only: a CPU digest is hashlib's BLAKE2b)."""
    from kernelab.evaluate import digest

    if device.type != "cuda":
        return
    words = torch.randint(-(2**63), 2**63 - 1, (digest.W * 40 + 3,), dtype=torch.int64)
    if digest.fold(words.to(device)).cpu().tolist() != digest.fold_reference(words.tolist()):
        raise SystemExit("judge_overhead: the device's fold differs from its reference")


def digest_rows(torch, device, reps: int, sync) -> list[dict]:
    from kernelab.evaluate.digest import digest

    check_the_fold(torch, device)
    rows = []
    sizes = GPU_SIZES_MIB if device.type == "cuda" else CPU_SIZES_MIB
    for mib in sizes:
        values = torch.randn(int(mib * 2**20) // 4, device=device)
        read_ms = _median_ms(lambda: values.sum(), reps, sync)  # noqa: B023
        digest_ms = _median_ms(lambda: digest(values), reps, sync)  # noqa: B023
        rows.append({"mib": mib, "digest_ms": digest_ms, "read_ms": read_ms,
                     "digest_over_read": digest_ms / read_ms,
                     "digest_gbps": values.numel() * 4 / digest_ms / 1e6})  # fmt: skip
        print(f"digest of {mib:g} MiB: {digest_ms:.3f} ms, one read {read_ms:.3f} ms "
              f"({digest_ms / read_ms:.1f}x)")  # fmt: skip
    return rows


def loop_rows(device, scale: float, reps: int, sync) -> list[dict]:
    from kernelab.evaluate import observed
    from kernelab.evaluate.formats import load_problem
    from kernelab.evaluate.timed_calls import Fresh, Rotation

    rows = []
    draw = random.Random(7)
    for name in PROBLEMS:
        problem = load_problem(EVAL / name, device=device, scale=scale)
        case = problem.timing_cases()[0]
        pool = [problem.generate(case, draw.randrange(2**31)) for _ in range(3)]
        output = problem.reference(pool[0])
        make_ms = _median_ms(lambda: problem.generate(case, draw.randrange(2**31)),  # noqa: B023
                             reps, sync)  # fmt: skip

        def per_call(sets) -> float:
            return observed.loop_cost_ms(sets, buffers=set(), calls=CALLS, mode="cold",
                                         output=output) / CALLS  # noqa: B023  # fmt: skip

        def fresh():
            return Fresh(lambda seed: problem.generate(case, seed),  # noqa: B023
                         [draw.randrange(2**31) for _ in range(CALLS)])  # fmt: skip

        rotated = statistics.median(per_call(Rotation(pool)) for _ in range(reps))
        made = statistics.median(per_call(fresh()) for _ in range(reps))
        rows.append({"problem": name, "scale": scale, "make_set_ms": make_ms,
                     "loop_ms_per_call_rotation": rotated, "loop_ms_per_call_fresh": made})  # fmt: skip
        print(f"{name}: a set made in {make_ms:.3f} ms; loop per call {rotated:.3f} ms rotated, "
              f"{made:.3f} ms with a set made per call")  # fmt: skip
    return rows


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    from kernelab.environment import software_versions

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"

    def sync():
        if on_gpu:
            torch.cuda.synchronize(device)

    scale = args.scale if args.scale is not None else (1.0 if on_gpu else 0.0625)
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    document = {
        "benchmark": "judge_overhead", "host": os.uname().nodename, "device": name,
        "versions": software_versions(), "reps": args.reps,
        "digest": digest_rows(torch, device, args.reps, sync),
        "loop": loop_rows(device, scale, args.reps, sync),
    }  # fmt: skip
    if args.out:
        out = Path(args.out)
    else:
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir

        # the card the figures were measured on; a --device cpu run has none
        out = default_results_dir(this_gpu("judge_overhead.py").key if on_gpu else None, "judge")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"judge_overhead_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(document, indent=1, default=str))
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
