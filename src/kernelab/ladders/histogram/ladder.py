"""Run the histogram ladder: the compile report (no GPU), exact checks of every step, timing
beside torch.bincount, CUB (cuda.compute.histogram_even from `kernelab[cub]`, else CuPy's
CUB-backed bincount) and a copy of the values' bytes in the same run, for uniform ids, the
skewed case (every value in one bin) and MoE top-k routing ids; the proof metrics under
Nsight Compute. The engine is the primitives' (ladders/engine.py).

The ceilings, two columns of each row: a histogram reads n x itemsize bytes and writes a few
counts, so its roof is a pure read. "% of read" is the row's bytes per second over the
measured read-only ceiling (engine.read_ceiling: the ceilings cache, else hbm_read measured
now), the roof the issue's target names. "% of copy" is the same rate over dst.copy_(src) of
the values timed in the same run, counted as read + write (2 x n x itemsize); a pure read may
run a few percent above that copy rate, so "% of copy" reads higher than "% of read".

The data kinds (DISTRIBUTIONS): "uniform" ids over the bins; "skewed", every value in one
bin; "moe", the expert ids of top-k routing (moe_routing_ids): each token's k distinct
experts drawn from the softmax of its router logits, a per-expert popularity plus per-token
noise, so the experts' loads are uneven as behind a real router.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kernelab.errors import KernelabError
from kernelab.ladders.engine import compile_report, read_ceiling, timed_rows, to_record
from kernelab.ladders.histogram.launch import build_step, histogram
from kernelab.ladders.histogram.steps import DTYPES, LOAD_CANDIDATES, LOADS, Step, parse_steps
from kernelab.spec.reference import get_op

__all__ = [
    "DISTRIBUTIONS", "TIMED_DISTRIBUTIONS", "check_steps", "compile_histogram", "cub_anchor",
    "cub_anchors", "make_values", "moe_routing_ids", "moe_top_k", "parse_steps", "time_ladder",
]  # fmt: skip

ANCHOR = "torch.bincount"
CUB = "cub"  # the CUB anchor's row: cuda.compute.histogram_even or CuPy's bincount
DISTRIBUTIONS = ("uniform", "skewed", "moe")  # every data kind: each is checked exactly
# The kinds time_ladder times unless told: the two reported cases. The MoE kind is
# timed where a caller asks for it (distributions=DISTRIBUTIONS), so the command's output and
# the lab's cases keep their shape until their callers take it up.
TIMED_DISTRIBUTIONS = ("uniform", "skewed")
CHECK_N = (1, 7, 31, 33, 100003, 1 << 20)
CHECK_BINS = (8, 64, 256, 4096)

# MoE routing (moe_routing_ids): experts' popularity is a N(0, MOE_EXPERT_SKEW) bias on the
# router logits, each token adds N(0, MOE_TOKEN_NOISE). At these values (seeds 1-3, 25,000
# tokens) the busiest of 64 experts, top-8, gets 2.3-2.8x the mean load and the idlest
# 0.2-0.4x; of 8 experts, top-2, 1.3-1.4x and 0.5-0.6x: uneven as behind a real router, not
# degenerate (no expert empty, none taking every token). Chunks bound the logits' memory
# (MOE_CHUNK_LOGITS floats a tensor) at any token count.
MOE_EXPERT_SKEW = 0.5
MOE_TOKEN_NOISE = 1.0
MOE_CHUNK_LOGITS = 1 << 24


def compile_histogram(steps, progress=lambda _: None) -> list[dict]:
    return compile_report(steps, DTYPES, build_step, progress)


def moe_top_k(experts: int) -> int:
    """k of the top-k routing the "moe" data uses for `experts` experts: 2 up to 16 experts
    (Mixtral: 8 experts, top-2), 8 above (OLMoE: 64 experts, top-8; DeepSeek-V3: 256 routed
    experts, top-8); never more than the experts."""
    return min(experts, 2 if experts <= 16 else 8)


def moe_routing_ids(
    tokens: int,
    experts: int,
    top_k: int,
    *,
    seed: int = 1,
    device="cuda",
    expert_skew: float = MOE_EXPERT_SKEW,
    token_noise: float = MOE_TOKEN_NOISE,
    bias=None,
):
    """The expert ids of top-k routing, int32 [tokens x top_k] flattened token by token.

    Token t's router logits are bias[e] + token_noise x N(0, 1): `bias`, one popularity per
    expert, is N(0, expert_skew) drawn from `seed` unless given. Its k experts are k distinct
    draws, without replacement, from softmax(logits) by the Gumbel-top-k trick (the top k of
    logits + Gumbel noise are such a draw), so every token has k different ids in
    [0, experts) and the experts' counts are uneven, following the bias. Reproducible from
    `seed`; the logits are made in chunks of MOE_CHUNK_LOGITS floats."""
    import torch

    if tokens < 0 or experts < 1 or not 1 <= top_k <= experts:
        raise KernelabError(
            f"moe routing: need tokens >= 0 and 1 <= top_k <= experts, got tokens={tokens}, "
            f"experts={experts}, top_k={top_k}"
        )
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    if bias is None:
        bias = torch.randn(experts, generator=generator, device=device) * expert_skew
    bias = torch.as_tensor(bias, dtype=torch.float32, device=device).reshape(1, experts)
    ids = torch.empty((tokens, top_k), dtype=torch.int32, device=device)
    chunk = max(1, MOE_CHUNK_LOGITS // experts)
    tiny = torch.finfo(torch.float32).tiny
    for start in range(0, tokens, chunk):
        rows = min(chunk, tokens - start)
        logits = torch.randn((rows, experts), generator=generator, device=device)
        logits.mul_(token_noise).add_(bias)
        uniform = torch.rand((rows, experts), generator=generator, device=device)
        logits.sub_(uniform.clamp_(min=tiny).log_().neg_().log_())  # + Gumbel(0, 1)
        ids[start : start + rows] = torch.topk(logits, top_k, dim=1).indices.to(torch.int32)
    return ids.reshape(-1)


def make_values(n: int, bins: int, dtype: str, distribution: str, *, device="cuda", seed=1):
    """n values of `dtype` for `bins` bins; `top` is bins, or for uint8 at most 256 (a byte's
    values: with 256 bins, every one of them).
      uniform  ids drawn uniformly from [0, top)
      skewed   every value in bin top // 2
      moe      the expert ids of top-k routing over `top` experts (moe_routing_ids, k =
               moe_top_k(top)): ceil(n / k) tokens' ids, token by token, cut to n
    Out-of-range ids come from the op's inputs (spec.reference)."""
    import torch

    torch_dtype = torch.int32 if dtype == "int32" else torch.uint8
    top = min(bins, 256) if dtype == "uint8" else bins
    if distribution == "skewed":
        return torch.full((n,), top // 2, dtype=torch_dtype, device=device)
    if distribution == "moe":
        k = moe_top_k(top)
        ids = moe_routing_ids(-(-n // k), top, k, seed=seed, device=device)
        return ids[:n].to(torch_dtype)
    if distribution != "uniform":
        raise KernelabError(
            f"unknown distribution '{distribution}'; use {', '.join(DISTRIBUTIONS)}"
        )
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(0, top, (n,), generator=generator, device=device).to(torch_dtype)


def check_steps(
    steps: list[Step], dtypes=DTYPES, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """Every step against the exact counts (overflow slot included) on the GPU, over sizes,
    bin counts, both distributions and the op's inputs with out-of-range ids."""
    import torch

    from kernelab.spec.primitives import histogram_counts

    rows = []
    for step in steps:
        for dtype in dtypes:
            progress(f"checking {step.name} {dtype}")
            bad = []
            for n in CHECK_N:
                for bins in CHECK_BINS:
                    for distribution in DISTRIBUTIONS:
                        values = make_values(n, bins, dtype, distribution, seed=n + bins)
                        got = histogram(step, values, bins)
                        if not torch.equal(got, histogram_counts(values, bins)):
                            bad.append(f"n={n} bins={bins} {distribution}")
                    values, _ = get_op("histogram").make_inputs(
                        {"n": n, "bins": bins}, dtype, seed=n, device="cuda"
                    )
                    if not torch.equal(histogram(step, values, bins),
                                       histogram_counts(values, bins)):  # fmt: skip
                        bad.append(f"n={n} bins={bins} out-of-range ids")
            torch.cuda.synchronize()
            rows.append({"step": step.name, "dtype": dtype, "ok": not bad, "wrong_at": bad})
    return rows


def cub_anchors(bins: int) -> tuple[list[tuple[str, Callable]], list[str]]:
    """The CUB anchors to try, in order: ([(what, fn(values) -> counts[bins])], notes on
    those that do not import). First cuda.compute.histogram_even (cuda-cccl, the extra
    `kernelab[cub]`): CUB's DeviceHistogram::HistogramEven with bins + 1 levels over
    [0, bins), so id b counts in bin b and an id outside [0, bins) is not counted; int32
    counts. Then CuPy's bincount with its CUB accelerator. time_ladder times the first whose
    counts are exact."""
    found, notes = [], []
    try:
        import cuda.compute as cuda_compute  # cuda-cccl's Python algorithms
    except Exception as exc:  # ImportError, or a cuda-cccl built for another CUDA
        cuda_compute = None
        notes.append(f"cuda.compute does not import ({type(exc).__name__})")
    if cuda_compute is not None and hasattr(cuda_compute, "histogram_even"):
        import numpy as np

        def cub_histogram_even(values):
            import torch

            counts = torch.empty(bins, dtype=torch.int32, device=values.device)
            # the levels in int32 for int32 and uint8 samples alike (CUB bins in their common
            # type); keywords, as the names have held across cuda-cccl releases
            cuda_compute.histogram_even(
                d_samples=values, d_histogram=counts, num_output_levels=bins + 1,
                lower_level=np.int32(0), upper_level=np.int32(bins),
                num_samples=values.numel(),
            )  # fmt: skip
            return counts

        found.append(("CUB DeviceHistogram::HistogramEven through cuda.compute.histogram_even",
                      cub_histogram_even))  # fmt: skip
    elif cuda_compute is not None:
        notes.append("cuda.compute has no histogram_even (an older cuda-cccl)")
    os.environ.setdefault("CUPY_ACCELERATORS", "cub")
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        notes.append(f"cupy does not import ({type(exc).__name__})")
    else:

        def cupy_bincount(values):
            return cupy.bincount(cupy.from_dlpack(values), minlength=bins)

        found.append(("CUB through CuPy's bincount (CUPY_ACCELERATORS=cub)", cupy_bincount))
    return found, notes


def _exact_anchor(fn, bins: int, dtype: str, device="cuda") -> str | None:
    """None when fn's counts of in-range values equal the exact ones, else why not (one
    line): an anchor is timed only where it is right, like the steps."""
    import torch

    from kernelab.spec.primitives import histogram_counts

    try:
        values = make_values(100003, bins, dtype, "uniform", seed=7, device=device)
        got = torch.as_tensor(fn(values), device=values.device).to(torch.int64).reshape(-1)
        want = histogram_counts(values, bins)[:bins]
        if got.shape != want.shape or not torch.equal(got, want):
            return "its counts differ from the exact ones"
    except Exception as exc:  # an API it does not support (a dtype, a keyword)
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}"
    return None


def cub_anchor(bins: int, dtype: str, *, device="cuda") -> tuple[Callable | None, str]:
    """(fn(values) through CUB, the line saying which) for the first of cub_anchors that
    counts exactly (checked on 100003 uniform values on `device`), or (None, the line saying
    why none is timed)."""
    found, notes = cub_anchors(bins)
    for what, fn in found:
        wrong = _exact_anchor(fn, bins, dtype, device)
        if wrong is None:
            return fn, "; ".join([f"CUB: {what}", *(f"not timed: {n}" for n in notes)])
        notes.append(f"{what.split(' through ')[-1]} not timed ({wrong})")
    return None, "CUB: not measured (" + "; ".join(notes) + "); pip install 'kernelab[cub]'"


def time_ladder(
    steps: list[Step],
    sizes: list[int],
    bins: int,
    dtype: str,
    *,
    distributions=TIMED_DISTRIBUTIONS,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    read: tuple[float | None, str] | None = None,
    do_bench: Callable | bool | None = None,
    host_cost: Callable | bool | None = None,
    candidates: bool = False,
) -> tuple[list[dict], list, list[str]]:
    """Every step beside torch.bincount (and CUB where cuda.compute or CuPy imports) and the
    copy ceiling at each n and distribution (TIMED_DISTRIBUTIONS unless given: pass
    DISTRIBUTIONS for the MoE case too); (rows, records, notes). torch.bincount runs as users
    call it (in-range ids, minlength=bins); the steps also fill the overflow slot.

    Each row has "% of copy" and "% of read" (pct_of_read: against `read`, the read-only
    ceiling as (bytes/s, source), measured by engine.read_ceiling when not given), the
    do_bench median and the host cost per call (engine.time_call; do_bench, host_cost: None
    for the real ones, False to leave one out). `candidates`: steps 4-5 also at every other
    LOAD_CANDIDATES value, as rows named like "histogram:05 loads=4"."""
    import torch

    spec = get_op("histogram")
    cub, cub_line = cub_anchor(bins, dtype)
    rate, source = read if read is not None else read_ceiling("kernelab ladder histogram",
                                                              progress)  # fmt: skip
    notes = [cub_line]
    notes.append(
        f"% of read: each row's bytes per second over the read-only ceiling, "
        f"{rate / 1e9:,.0f} GB/s ({source}); % of copy: over dst.copy_(src) of the values "
        "(2 x n x itemsize moved) timed beside it"
        if rate
        else f"% of read: absent, no read-only ceiling ({source}); % of copy only"
    )
    rows, records = [], []
    for n in sizes:
        cost = spec.cost({"n": n, "bins": bins}, dtype)
        for distribution in distributions:
            values = make_values(n, bins, dtype, distribution)
            dst = torch.empty_like(values)
            entries = [(ANCHOR, "torch.bincount(values, minlength=bins)",
                        lambda v=values: torch.bincount(v, minlength=bins))]  # fmt: skip
            if cub is not None:
                entries.append((CUB, cub_line.removeprefix("CUB: ").split(";")[0],
                                lambda v=values: cub(v)))  # fmt: skip
            entries += [
                (s.name, s.technique, lambda s=s, v=values: histogram(s, v, bins)) for s in steps
            ]
            if candidates:
                entries += candidate_entries(steps, values, bins)
            found = timed_rows(
                entries, bytes_moved=cost.bytes, copy=lambda d=dst, v=values: d.copy_(v),
                copy_bytes=2.0 * values.numel() * values.element_size(), anchor=ANCHOR,
                mode=mode, max_time_s=max_time_s,
                progress=lambda text, n=n, d=distribution: progress(f"{text} at n={n} {d}"),
                read_bytes_per_s=rate, do_bench=do_bench, host_cost=host_cost,
            )  # fmt: skip
            for row in found:
                row["shape"] = {"n": n, "bins": bins}
                row["distribution"] = distribution
                records.append(to_record("histogram", row, dtype, cost))
            rows += [{k: v for k, v in row.items() if k != "timing"} for row in found]
            del values, dst
    return rows, records, notes


def candidate_entries(steps: list[Step], values, bins: int) -> list[tuple]:
    """(name, technique, fn) for steps 4-5 at every LOAD_CANDIDATES value but the default:
    the loads-in-flight choice, timed beside the ladder."""
    return [
        (f"{s.name} loads={k}", f"{s.technique}; {k} loads in flight",
         lambda s=s, v=values, k=k: histogram(s, v, bins, loads=k))
        for s in steps if s.units for k in LOAD_CANDIDATES if k != LOADS
    ]  # fmt: skip


def time_candidates(n: int, bins: int, dtype: str, steps: list[Step] | None = None) -> list[dict]:
    """Every step and the load candidates at one n, uniform and skewed, each candidate checked
    exactly first (one device call settles HISTOGRAM_LOADS); the rows of time_ladder."""
    import torch

    from kernelab.spec.primitives import histogram_counts

    steps = steps or parse_steps(None)
    for step in (s for s in steps if s.units):
        for loads in LOAD_CANDIDATES:
            for count in (1, 33, 100003):
                values = make_values(count, bins, dtype, "uniform", seed=count)
                for view in (values, values[1:]):  # a 16-byte boundary and one past it
                    got = histogram(step, view, bins, loads=loads)
                    if not torch.equal(got, histogram_counts(view, bins)):
                        wrong = f"{step.name} loads={loads} wrong at n={view.numel()}"
                        raise KernelabError(wrong)
    rows, _, _ = time_ladder(steps, [n], bins, dtype, candidates=True)
    return rows


# --- the launcher ncu runs: each chosen step once --------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.histogram.ladder")
    parser.add_argument("--n", type=int, default=1 << 26)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--dtype", default="int32", choices=DTYPES)
    parser.add_argument("--distribution", default="uniform", choices=DISTRIBUTIONS)
    parser.add_argument("--steps", default=None)
    parser.add_argument("--time-candidates", action="store_true",
                        help="time every step and the loads-in-flight candidates (no launcher run)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        import torch

        if args.time_candidates:
            for row in time_candidates(args.n, args.bins, args.dtype, parse_steps(args.steps)):
                read = row.get("pct_of_read")
                print(f"{row['step']:<24} {row['distribution']:<8} {row['median_ms']:.4f} ms  "
                      f"{'' if read is None else f'{read:5.1f} % of read'}")  # fmt: skip
            return 0

        values = make_values(args.n, args.bins, args.dtype, args.distribution)
        for step in parse_steps(args.steps):
            histogram(step, values, args.bins)
        torch.cuda.synchronize()
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
