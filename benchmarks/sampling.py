"""Top-p sampling over a 128K vocabulary on this GPU: kernelab's sampler against torch's
sort-based top-p and FlashInfer's sampling kernels, each checked first, timed as a PyTorch
user calls them, judged against the targets and written as one JSON document.

    PYTHONPATH=src python3 benchmarks/sampling.py [--out DIR] [--only plan,topp,probs]
        [--quick] [--vocab 128256] [--top-p 0.9]

Parts:
  plan   the byte accounting per batch (pure arithmetic: runs without a GPU): the logits'
         bytes (one read), the expected passes of the rejection sampler at this top_p
         (1 + 1.5 / top_p: the online max and normaliser, then per round half a pass to
         draw and one to check, rounds <= 1 / top_p) and the bytes they read; FlashInfer's
         presence
  topp   fp32 logits[batch, vocab], temperature 1, top_p; batch 1..64:
           kernelab   ops.sampling.sample (from logits)
           torch      softmax, sort, cumsum, mask, multinomial (the eager baseline)
           flashinfer torch.softmax + flashinfer.sampling.top_p_sampling_from_probs (the
                      same work from logits), and the probs-only kernel beside it
         Device time under kernelab.harness.timing.benchmark (cold L2, median) and
         triton.testing.do_bench; host cost per call (kernelab.harness.launch_cost).
         Targets: kernelab <= 1.2x FlashInfer from logits; torch / kernelab >= 3
  probs  ops.sampling.sampling_probs (exact distribution, bisection) against the eager
         sort-based filtering at batch 1, 16, 64: checked, timed, not judged

Before timing, the sampler's tokens must lie in the float64 reference's support (several
seeds) and sampling_probs must pass kernelab's check at the same shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kernelab.lab.decode_step import torch_top_p  # the eager sort-based baseline the lab times

PARTS = ("plan", "topp", "probs")
BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK_BATCHES = (1, 16, 64)
VOCAB = 128256  # Llama 3's vocabulary
TOP_P = 0.9
FLASHINFER_RATIO_TARGET = 1.2  # kernelab time / FlashInfer time, at most
TORCH_SPEEDUP_TARGET = 3.0  # torch time / kernelab time, at least
ITEMSIZE = 4  # fp32 logits, as an LM head's output is usually kept for sampling


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time top-p sampling from logits.",
        epilog=f"parts: {', '.join(PARTS)}. Targets: kernelab <= {FLASHINFER_RATIO_TARGET}x "
        f"FlashInfer's time, >= {TORCH_SPEEDUP_TARGET:g}x torch's sort-based top-p.",
    )
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/sampling in a source checkout, else "
                        "./kernelab-results/<gpu>/sampling)")  # fmt: skip
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help=f"batches {QUICK_BATCHES} only")
    parser.add_argument("--vocab", type=int, default=VOCAB, help=f"vocabulary (default {VOCAB})")
    parser.add_argument("--top-p", type=float, default=TOP_P, help=f"top_p (default {TOP_P})")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    if args.vocab < 1:
        parser.error(f"--vocab must be positive, got {args.vocab}")
    if not 0.0 < args.top_p <= 1.0:
        parser.error(f"--top-p must lie in (0, 1], got {args.top_p}")
    return args


def flashinfer_status() -> tuple[object | None, str]:
    """(the flashinfer.sampling module or None, one line saying which)."""
    try:
        import flashinfer.sampling as sampling
    except Exception as exc:  # absent, or present without a usable build
        return None, f"flashinfer not measured: {type(exc).__name__}: {str(exc)[:120]}"
    import flashinfer

    return sampling, f"flashinfer {getattr(flashinfer, '__version__', '?')}"


def plan_rows(batches, vocab: int, top_p: float) -> list[dict]:
    passes = 1.0 + 1.5 / top_p
    rows = []
    for batch in batches:
        logits_bytes = batch * vocab * ITEMSIZE
        rows.append({"part": "plan", "case": f"batch={batch}", "vocab": vocab, "top_p": top_p,
                     "logits_bytes": logits_bytes, "expected_passes": passes,
                     "bytes_read": passes * logits_bytes,
                     "note": "pass 1 from HBM, the rest mostly from L2 (a row is "
                             f"{vocab * ITEMSIZE / 2**20:.2f} MiB)"})  # fmt: skip
    return rows


class Run:
    def __init__(self, args):
        import torch

        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir

        self.torch, self.args = torch, args
        self.device = torch.cuda.get_device_name()
        self.rows: list[dict] = []
        self.records: list[dict] = []
        out = Path(args.out) if args.out else default_results_dir(this_gpu("sampling.py").key,
                                                                  "sampling")  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / f"sampling_{time.strftime('%Y%m%d-%H%M%S')}.json"

    def time(self, fn) -> dict:
        import triton.testing

        from kernelab.harness.launch_cost import measure_host_cost
        from kernelab.harness.timing import benchmark

        timing = benchmark(fn, mode="cold", min_samples=10, max_time_s=0.5)
        host = measure_host_cost(fn, timing.median_ms)
        # the harness's samples go into the record, so the lab recomputes and judges its median
        return {"harness_us": 1e3 * timing.median_ms, "samples_ms": list(timing.samples_ms),
                "do_bench_us": 1e3 * triton.testing.do_bench(fn), "host_us": host.host_us,
                "wall_us": host.wall_us}  # fmt: skip

    def record(self, impl, shape, timing, **extra):
        self.records.append({"op": "top_p_sampling", "implementation": impl, "shape": shape,
                             "dtype": "fp32", "median_ms": timing["harness_us"] / 1e3,
                             "bytes": shape["batch"] * shape["vocab"] * ITEMSIZE,
                             "gpu": self.device, **timing,
                             "timer": "kernelab.harness.timing.benchmark cold median; "
                                      "triton.testing.do_bench", **extra})  # fmt: skip

    def save(self, flashinfer_line: str):
        from kernelab.environment import software_versions
        from kernelab.harness.records import flat_record, save_records

        versions = software_versions()
        document = {"gpu": self.device, "flashinfer": flashinfer_line, "versions": versions,
                    "rows": self.rows}  # fmt: skip
        records = [flat_record(m, versions, suite="sampling") for m in self.records]
        save_records(records, self.path, document=document)


def sampler_in_support(sample, logits, top_p: float, seeds: int = 4) -> bool:
    from kernelab.spec.sampling import sampling_reference

    ref = sampling_reference(logits, 1.0, 0, top_p, 0.0)
    return all(bool((ref.gather(1, sample(logits, 1.0, top_p=top_p, seed=s)[:, None]) > 0).all())
               for s in range(seeds))  # fmt: skip


def part_topp(run, batches, flashinfer):
    from kernelab.ops import sampling

    torch, vocab, top_p = run.torch, run.args.vocab, run.args.top_p
    for batch in batches:
        generator = torch.Generator(device="cuda").manual_seed(batch)
        logits = torch.randn(batch, vocab, device="cuda", generator=generator) * 3.0
        shape = {"batch": batch, "vocab": vocab}
        ok = sampler_in_support(sampling.sample, logits, top_p)
        baseline_ok = sampler_in_support(lambda x, t, top_p, seed: torch_top_p(x / t, top_p),
                                         logits, top_p)  # fmt: skip
        if not (ok and baseline_ok):  # nothing is timed that drew outside the nucleus
            run.rows.append({"part": "topp", "case": f"batch={batch}", "vocab": vocab,
                             "top_p": top_p, "check": ok, "torch_check": baseline_ok,
                             "met": False})  # fmt: skip
            print(f"  top-p batch {batch}: a token outside the nucleus (kernelab ok: {ok}, "
                  f"torch ok: {baseline_ok}); not timed", file=sys.stderr)  # fmt: skip
            continue
        step = iter(range(1 << 62))  # a decode loop: one seed, the step as offset
        ours = run.time(lambda x=logits, step=step: sampling.sample(x, 1.0, top_p=top_p, seed=7,
                                                                    offset=next(step)))  # fmt: skip
        eager = run.time(lambda x=logits: torch_top_p(x, top_p))
        run.record("kernelab.sample", shape, ours, check=ok)
        run.record("torch.sort_top_p", shape, eager)
        row = {"part": "topp", "case": f"batch={batch}", "vocab": vocab, "top_p": top_p,
               "check": ok, "kernelab_us": ours["harness_us"], "torch_us": eager["harness_us"],
               "torch_speedup": eager["harness_us"] / ours["harness_us"],
               "kernelab_host_us": ours["host_us"]}  # fmt: skip
        met = ok and row["torch_speedup"] >= TORCH_SPEEDUP_TARGET
        flashinfer_ok = flashinfer is not None and sampler_in_support(
            lambda x, t, top_p, seed: flashinfer.top_p_sampling_from_probs(
                torch.softmax(x / t, dim=-1), top_p), logits, top_p)  # fmt: skip
        if flashinfer is not None and not flashinfer_ok:
            row["flashinfer_check"] = False  # drew outside the nucleus: not timed, not judged
            met = False
        elif flashinfer is not None:
            from_logits = run.time(lambda x=logits: flashinfer.top_p_sampling_from_probs(
                torch.softmax(x, dim=-1), top_p))  # fmt: skip
            probs = torch.softmax(logits, dim=-1)
            probs_only = run.time(lambda p=probs: flashinfer.top_p_sampling_from_probs(p, top_p))
            run.record("flashinfer.softmax+top_p_sampling_from_probs", shape, from_logits)
            run.record("flashinfer.top_p_sampling_from_probs", shape, probs_only)
            row.update({"flashinfer_us": from_logits["harness_us"],
                        "flashinfer_probs_only_us": probs_only["harness_us"],
                        "vs_flashinfer": ours["harness_us"] / from_logits["harness_us"]})  # fmt: skip
            met = met and row["vs_flashinfer"] <= FLASHINFER_RATIO_TARGET
        if "flashinfer_us" not in row:
            row["flashinfer_us"] = None
        row["met"] = met
        run.rows.append(row)
        print(
            f"  top-p batch {batch}: kernelab {ours['harness_us']:.1f} us, torch "
            f"{eager['harness_us']:.1f} us, flashinfer {row['flashinfer_us']}",
            file=sys.stderr,
        )


def part_probs(run, batches):
    from kernelab.harness.check import check_implementation
    from kernelab.ops import sampling
    from kernelab.spec.reference import OPS

    spec, vocab = OPS["sampling_probs"], run.args.vocab
    for batch in [b for b in batches if b in QUICK_BATCHES]:
        shape = {"batch": batch, "vocab": vocab}
        report = check_implementation(sampling.sampling_probs, "sampling_probs", shape, "fp32",
                                      trials=1, device="cuda")  # fmt: skip
        inputs = spec.make_inputs(shape, "fp32", seed=0, device="cuda")
        ours = run.time(lambda inputs=inputs: sampling.sampling_probs(*inputs))
        eager = run.time(lambda inputs=inputs: spec.torch_eager(*inputs))
        run.record("triton.sampling_probs", shape, ours, check=report.ok)
        run.record("torch.sampling_probs", shape, eager)
        run.rows.append({"part": "probs", "case": f"batch={batch}", "check": report.ok,
                         "kernelab_us": ours["harness_us"], "torch_us": eager["harness_us"],
                         "met": None})  # fmt: skip


def main(argv=None) -> int:
    args = parse(argv)
    batches = QUICK_BATCHES if args.quick else BATCHES
    flashinfer, flashinfer_line = flashinfer_status()
    plan = plan_rows(batches, args.vocab, args.top_p) if "plan" in args.parts else []
    if args.parts == ["plan"]:  # pure arithmetic: no GPU needed
        print(json.dumps({"flashinfer": flashinfer_line, "rows": plan}, indent=1))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: the measured parts need a CUDA GPU (only --only plan runs without)",
              file=sys.stderr)  # fmt: skip
        return 2
    run = Run(args)
    run.rows.extend(plan)
    print(f"  {flashinfer_line}", file=sys.stderr)
    if "topp" in args.parts:
        part_topp(run, batches, flashinfer)
        run.save(flashinfer_line)
    if "probs" in args.parts:
        part_probs(run, batches)
    run.save(flashinfer_line)
    judged = [row for row in run.rows if row.get("met") is not None]
    print(f"targets met: {sum(bool(r['met']) for r in judged)} of {len(judged)}; "
          f"written to {run.path}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
