"""The decode step and top-p sampling in the lab (the decode section's second half,
lab/decode.py holding the kernels'): measured on a GPU through the library code the
benchmarks use, judged from their records, drawn as the step's waterfall and the sampling
table.

One decode step of a Llama-3-8B block four ways (torch eager, torch.compile with
mode="reduce-overhead", eager in a CUDA graph, the graphed kernelab block; ops/decode_step),
against the floor of its bytes over the copy; top-p sampling over Llama 3's 128K vocabulary
(ops/sampling) beside torch's sort-based top-p and, where flashinfer imports, FlashInfer's.
Records carry extra["suite"] = STEP_SUITE or SAMPLING_SUITE. The step's target: the graphed
kernelab block no slower per token than torch.compile's at batch 1, KV 1K and 8K. Sampling:
kernelab's top-p >= 3x torch's sort-based top-p and <= 1.2x FlashInfer's time at every batch
measured, batch 1 and 64 among them. Each is judged on the median of the samples kernelab's
cold timer recorded; records without samples are shown, never judged.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelab.harness.records import Record

Progress = Callable[[str], None]

# ---- the decode step and top-p sampling: measured on a GPU, judged from their records ------

STEP_SUITE = "decode_step"
SAMPLING_SUITE = "sampling"
STEP_OP = "decode_step"  # benchmarks/decode_step.py's op name, so its records read alike
SAMPLING_OP = "top_p_sampling"  # benchmarks/sampling.py's
STEP_CONFIG = "llama3-8b"
# The waterfall's paths, in the order the per-token time falls, with their words.
STEP_PATHS = (
    ("eager", "torch eager"),
    ("compiled", "torch.compile (reduce-overhead)"),
    ("graphed-eager", "eager in a CUDA graph"),
    ("kernelab-graphed", "kernelab graphed"),
    ("kernelab-splitkv-graphed", "kernelab graphed, split-KV attention"),
)
KERNELAB_GRAPHED = ("kernelab-graphed", "kernelab-splitkv-graphed")
STEP_TARGET_LENGTHS = (1024, 8192)  # the target's KV lengths, at batch 1
STEP_BATCHES = {True: (1,), False: (1, 16)}
SAMPLING_VOCAB = 128256  # Llama 3's vocabulary: the target's "128K"
SAMPLING_TOP_P = 0.9
SAMPLING_BATCHES = {True: (1, 16, 64), False: (1, 2, 4, 8, 16, 32, 64)}
SAMPLING_TARGET_BATCHES = (1, 64)  # the ends of the target's "batch 1-64": both must be measured
SAMPLING_SEEDS = 4  # draws per sampler checked against the float64 reference's support
TORCH_SPEEDUP_TARGET = 3.0  # torch's time / kernelab's, at least
FLASHINFER_RATIO_TARGET = 1.2  # kernelab's time / FlashInfer's, at most
KERNELAB_SAMPLER = "kernelab.sample"
TORCH_SAMPLER = "torch.sort_top_p"
FLASHINFER_SAMPLER = "flashinfer.softmax+top_p_sampling_from_probs"  # the same work from logits
FLASHINFER_PROBS_ONLY = "flashinfer.top_p_sampling_from_probs"  # from probs: shown beside
HARNESS_TIMER = "kernelab.harness.timing.benchmark, cold L2"


def timed_record(identity, op: str, implementation: str, shape: dict, dtype: str, timing, *,
                 flops: float, nbytes: float, check: dict, extra: dict) -> Record:  # fmt: skip
    """A timing as a Record with its samples; its median and rates what the samples give
    (kernelab.lab.derive recomputes them the same way)."""
    from kernelab.environment import software_versions
    from kernelab.harness.stats import summarize

    samples = [float(s) for s in timing.samples_ms]
    stats = summarize([s for s in samples if s > 0]).to_dict()
    median = stats["median"]
    return Record(op=op, implementation=implementation, shape=dict(shape), dtype=dtype,
                  mode=timing.mode, samples_ms=samples, stats=stats, gpu=identity.name,
                  gpu_id=identity.gpu_id, driver=identity.driver, versions=software_versions(),
                  clocks=dict(getattr(timing, "clocks", {}) or {}), flops=float(flops),
                  bytes=float(nbytes), achieved_tflops=flops / median / 1e9 if flops else None,
                  achieved_gbps=nbytes / median / 1e6 if nbytes else None, check=dict(check),
                  warnings=list(getattr(timing, "warnings", []) or []), extra=dict(extra))  # fmt: skip


def _cold_timer(max_time_s: float):
    from kernelab.harness.timing import benchmark

    return lambda fn: benchmark(fn, mode="cold", min_samples=10, max_time_s=max_time_s)


def _host_cost(fn, median_ms: float):
    from kernelab.harness.launch_cost import measure_host_cost

    return measure_host_cost(fn, median_ms)


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reset_compiler() -> None:
    """A fresh torch.compile for the next path: each compiled block compiles afresh, far from
    the recompile limit."""
    try:
        import torch._dynamo
    except ImportError:  # a torch without dynamo: nothing compiled to reset
        return
    torch._dynamo.reset()


def _cudagraph_skips() -> int:
    """Inductor's count of steps it ran without their CUDA graph, so far."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["inductor"]["cudagraph_skips"])


def measure_step(identity, quick: bool, progress: Progress, *, max_time_s: float = 0.5,
                 config_name: str = STEP_CONFIG, device: str = "cuda", dtype: str = "bf16",
                 paths=tuple(p for p, _ in STEP_PATHS), lengths=STEP_TARGET_LENGTHS,
                 batches=None, timer=None, host_cost=None) -> tuple[list[Record], list[str]]:  # fmt: skip
    """One decode step of the block per path, batch and KV length: checked against the float64
    reference step (within the eager block's own error, ops/decode_step/accuracy.py), then
    timed per token with kernelab's cold timer, and its host cost per call. A path that cannot
    build or run, or misses the budget, is a line in the failures, never a record.
    timer(fn) -> a Timing and host_cost(fn, median_ms) -> (host_us, wall_us) stand in for the
    GPU's in a test."""
    from kernelab.ops import decode_step as ds

    config = {"llama3-8b": ds.LLAMA3_8B, "tiny": ds.TINY}[config_name]
    timer = timer or _cold_timer(max_time_s)
    host_cost = host_cost or _host_cost
    records, failed = [], []
    for length in lengths:
        for batch in batches or STEP_BATCHES[quick]:
            progress(f"decode step batch {batch} KV {length}: the block and its float64 reference")
            block = ds.build(config, batch=batch, capacity=length + 1, dtype=dtype, device=device)
            found, wrong = _step_case(identity, block, config_name, length, paths, timer,
                                      host_cost, progress)  # fmt: skip
            records += found
            failed += wrong
            del block
            _free_cache(device)
    return records, failed


def _step_case(identity, block, config_name: str, length: int, paths, timer, host_cost,
               progress: Progress) -> tuple[list[Record], list[str]]:  # fmt: skip
    """Every path at one block (batch) and KV length: checked, then timed."""
    from kernelab.ops import decode_step as ds

    x = ds.make_input(block)
    ref, _, _ = ds.reference_step(block, x, length)
    budget = ds.error_budget(block.dtype, ds.step_error(ds.make_step("eager", block, length, x)(x),
                                                        ref))  # fmt: skip
    cost = ds.step_cost(block.config, block.batch, length, block.dtype)
    shape = {"batch": block.batch, "length": length, "config": config_name}
    case = f"decode step {{}} batch={block.batch} length={length}"
    records, failed = [], []
    for path in paths:
        progress(case.format(path))
        _reset_compiler()
        skips = _cudagraph_skips()
        try:  # a path that cannot build or run on this machine is a line, not a crash
            step = ds.make_step(path, block, length, x)
            error = ds.step_error(step(x).clone(), ref)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{case.format(path)}: {_first_line(exc)}")
            continue
        if not error <= budget:
            failed.append(f"{case.format(path)}: error {error:.3g} over the budget "
                          f"{budget:.3g}, not timed")  # fmt: skip
            continue

        def call(step=step):
            return step(x)

        timing = timer(call)
        host = host_cost(call, timing.median_ms)
        extra = {"suite": STEP_SUITE, "timer": HARNESS_TIMER, "host_us": host.host_us,
                 "wall_us": host.wall_us, "weight_bytes": cost.weight_bytes,
                 "kv_bytes": cost.kv_read_bytes + cost.kv_write_bytes}  # fmt: skip
        if path == "compiled":  # > 0: Inductor ran the step without its CUDA graph
            extra["cudagraph_skips"] = _cudagraph_skips() - skips
        records.append(timed_record(identity, STEP_OP, path, shape, block.dtype, timing,
                                    flops=cost.flops, nbytes=cost.bytes,
                                    check={"ok": True, "error": error, "threshold": budget},
                                    extra=extra))  # fmt: skip
        del step, call
    return records, failed


def _free_cache(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def torch_top_p(logits, top_p: float):
    """The eager sort-based nucleus sampler (Hugging Face's and vLLM's fallback form): softmax,
    sort, cumulative sum, mask the tail past top_p, multinomial."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p  # mass before it exceeds p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    choice = torch.multinomial(sorted_probs, 1)
    return order.gather(-1, choice).squeeze(-1)


def flashinfer_status() -> tuple[object | None, str]:
    """(flashinfer.sampling or None, one line saying which): where flashinfer-python installs
    (Linux and a CUDA GPU), its sampling kernels are timed beside kernelab's."""
    try:
        import flashinfer.sampling as sampling
    except Exception as exc:  # noqa: BLE001 - absent, or present without a usable build
        return None, f"flashinfer not importable here ({_first_line(exc)})"
    import flashinfer

    return sampling, f"flashinfer {getattr(flashinfer, '__version__', '(no version)')}"


def in_support(draw, logits, top_p: float, seeds: int = SAMPLING_SEEDS) -> bool:
    """Whether every token `draw(logits, seed)` returns lies in the float64 reference's top-p
    set, over `seeds` draws: nothing is timed that drew outside the nucleus."""
    from kernelab.spec.sampling import sampling_reference

    ref = sampling_reference(logits, 1.0, 0, top_p, 0.0)
    for seed in range(seeds):
        tokens = draw(logits, seed)
        if not bool((ref.gather(1, tokens.reshape(-1, 1).long()) > 0).all()):
            return False
    return True


_STATUS = object()  # measure_sampling: ask flashinfer_status


def _samplers(logits, top_p: float, sampler, flashinfer) -> list[tuple]:
    """(name, draw(logits, seed) for the check, the call timed) of each sampler at one batch.
    kernelab's is timed as a decode loop calls it: one seed, the step as the offset."""
    import torch

    steps = iter(range(1 << 62))
    found = [
        (KERNELAB_SAMPLER, lambda x, seed: sampler(x, top_p, seed),
         lambda: sampler(logits, top_p, 7, next(steps))),
        (TORCH_SAMPLER, lambda x, seed: torch_top_p(x, top_p), lambda: torch_top_p(logits, top_p)),
    ]  # fmt: skip
    if flashinfer is None:
        return found

    def from_logits(x, seed=None):
        return flashinfer.top_p_sampling_from_probs(torch.softmax(x, dim=-1), top_p)

    probs = torch.softmax(logits, dim=-1)
    return found + [
        (FLASHINFER_SAMPLER, from_logits, lambda: from_logits(logits)),
        (FLASHINFER_PROBS_ONLY, from_logits,
         lambda: flashinfer.top_p_sampling_from_probs(probs, top_p)),
    ]  # fmt: skip


def measure_sampling(identity, quick: bool, progress: Progress, *, max_time_s: float = 0.5,
                     vocab: int = SAMPLING_VOCAB, top_p: float = SAMPLING_TOP_P, batches=None,
                     device: str = "cuda", sampler=None, flashinfer=_STATUS, timer=None,
                     host_cost=None) -> tuple[list[Record], list[str], str]:  # fmt: skip
    """fp32 logits[batch, vocab], temperature 1, top_p: kernelab's sampler, torch's sort-based
    top-p and FlashInfer's (from logits: softmax + top_p_sampling_from_probs; and the probs-only
    kernel beside it), each checked to draw inside the nucleus, then timed cold with its host
    cost. (records, failures, the FlashInfer line). `sampler(logits, top_p, seed, offset)`,
    `flashinfer` (a module or None), `timer` and `host_cost` stand in for the GPU's in a test."""
    import torch

    if sampler is None:
        from kernelab.ops.sampling import sample

        def sampler(x, p, seed, offset=0):
            return sample(x, 1.0, top_p=p, seed=seed, offset=offset)

    if flashinfer is _STATUS:
        flashinfer, line = flashinfer_status()
    else:
        line = "flashinfer given" if flashinfer is not None else "flashinfer not given"
    timer = timer or _cold_timer(max_time_s)
    host_cost = host_cost or _host_cost
    records, failed = [], []
    for batch in batches or SAMPLING_BATCHES[quick]:
        generator = torch.Generator(device=device).manual_seed(batch)
        logits = torch.randn(batch, vocab, device=device, generator=generator) * 3.0
        shape = {"batch": batch, "vocab": vocab}
        candidates = _samplers(logits, top_p, sampler, flashinfer)
        for name, draw, call in candidates:
            progress(f"top-p sampling {name} batch={batch} vocab={vocab}")
            try:
                ok = in_support(draw, logits, top_p)
            except Exception as exc:  # noqa: BLE001 - a sampler that cannot run here is a line
                failed.append(f"{name} batch={batch}: {_first_line(exc)}")
                continue
            if not ok:
                failed.append(f"{name} batch={batch}: drew a token outside the nucleus, not timed")
                continue
            timing = timer(call)
            host = host_cost(call, timing.median_ms)
            records.append(timed_record(
                identity, SAMPLING_OP, name, shape, "fp32", timing, flops=0.0,
                nbytes=batch * vocab * 4, check={"ok": True, "seeds": SAMPLING_SEEDS},
                extra={"suite": SAMPLING_SUITE, "top_p": top_p, "timer": HARNESS_TIMER,
                       "host_us": host.host_us, "wall_us": host.wall_us, "flashinfer": line}))  # fmt: skip
    return records, failed, line


# ---- the decode step and sampling judged: newest records with samples ------------------------


def _newest_of(records: list[Record], op: str) -> tuple[list[Record], list[Record]]:
    """(the newest record per case of `op` with samples under kernelab's cold timer, the
    newest per case without samples): a re-measured case replaces the older one."""
    from kernelab.lab.derive import from_samples

    def newest(chosen):
        found: dict[tuple, Record] = {}
        for r in chosen:
            key = (r.implementation, tuple(sorted(r.shape.items())), r.dtype)
            if key not in found or r.timestamp > found[key].timestamp:
                found[key] = r
        return list(found.values())

    mine = [r for r in records if r.op == op and r.mode not in ("do_bench", "hot")
            and not str(r.extra.get("timer", "")).startswith("triton.testing.do_bench")]  # fmt: skip
    judged = newest([r for r in mine if from_samples(r)])
    seen = {(r.implementation, tuple(sorted(r.shape.items())), r.dtype) for r in judged}
    shown = [r for r in newest([r for r in mine if not from_samples(r)])
             if (r.implementation, tuple(sorted(r.shape.items())), r.dtype) not in seen]  # fmt: skip
    return judged, shown


def _where(records: list[Record]) -> str:
    """The record files and day behind a verdict, in words."""
    files = sorted({str(r.extra.get("source_file", "")) for r in records} - {""})
    day = max((r.timestamp for r in records if r.timestamp), default="")[:10]
    return f"{', '.join(files) or 'records of unknown origin'}" + (f", {day}" if day else "")


def _unjudged(shown: list[Record], what: str) -> str:
    """A note on the records that have no samples: named, not judged."""
    if not shown:
        return ""
    return (f"; not judged, no samples: {len(shown)} {what} timings in {_where(shown)} (stored "
            "medians only)")  # fmt: skip


def _us(r: Record) -> str:
    return f"{r.median_ms * 1e3:,.1f} us"


def step_target(all_records: list[Record]) -> tuple[bool, str]:
    """At batch 1 and each target KV length: the faster graphed kernelab block (torch's or
    the split-KV attention) against torch.compile's per-token time, medians of the samples."""
    records, shown = _newest_of(all_records, STEP_OP)
    unjudged = _unjudged(shown, "decode-step")
    if not records:
        return False, ("not measured (no decode-step timings with samples on this card; the "
                       "lab's decode stage times them on a GPU)" + unjudged)  # fmt: skip
    parts, met = [], True
    for length in STEP_TARGET_LENGTHS:
        at = {r.implementation: r for r in records
              if r.shape.get("batch") == 1 and r.shape.get("length") == length}  # fmt: skip
        ours = [at[p] for p in KERNELAB_GRAPHED if p in at]
        theirs = at.get("compiled")
        if not ours or theirs is None:
            met = False
            missing = [name for name, have in (("a graphed kernelab block", ours),
                                               ("torch.compile", theirs)) if not have]  # fmt: skip
            parts.append(f"KV {length}: not measured ({' and '.join(missing)} not timed at "
                         "batch 1)")  # fmt: skip
            continue
        best = min(ours, key=lambda r: r.median_ms)
        ratio = best.median_ms / theirs.median_ms
        met &= ratio <= 1.0
        parts.append(f"KV {length}: {best.implementation} {_us(best)} per token against "
                     f"torch.compile {_us(theirs)} ({ratio:.2f}x its time)")  # fmt: skip
    used = [r for r in records if r.shape.get("batch") == 1]
    return met, "; ".join(parts) + f" ({_where(used or records)}){unjudged}"


def _sampling_cases(all_records: list[Record]):
    """(kernelab's records at the target vocabulary by batch, every sampling record there,
    the ones without samples, a note on other vocabularies)."""
    records, shown = _newest_of(all_records, SAMPLING_OP)
    at_vocab = [r for r in records if r.shape.get("vocab") == SAMPLING_VOCAB]
    others = sorted({r.shape.get("vocab") for r in records} - {SAMPLING_VOCAB}, key=str)
    note = (f"; other vocabularies not judged: {', '.join(map(str, others))}" if others else "")
    ours = {r.shape["batch"]: r for r in at_vocab if r.implementation == KERNELAB_SAMPLER}
    return ours, at_vocab, shown, note


def _batches_missing(ours: dict) -> list[int]:
    return [b for b in SAMPLING_TARGET_BATCHES if b not in ours]


def _against(ours: dict, records: list[Record], anchor: str, judge) -> tuple[list, list[str]]:
    """Each batch of ours against the anchor's timing of the same batch: ([(met, words)] in
    batch order, the batches without the anchor's timing)."""
    verdicts, absent = [], []
    for batch, r in sorted(ours.items()):
        other = next((o for o in records if o.implementation == anchor
                      and o.shape.get("batch") == batch), None)  # fmt: skip
        if other is None:
            absent.append(str(batch))
            continue
        met, words = judge(r, other)
        verdicts.append((met, f"batch {batch}: {words}"))
    return verdicts, absent


def _sampling_verdict(verdicts, absent, ours, where, anchor_words) -> tuple[bool, str]:
    """Met when every batch measured meets it, batch 1 and 64 among them, each beside the
    anchor; the evidence shows the batches that miss, else the first and the last."""
    missing = _batches_missing(ours)
    missed = [words for met, words in verdicts if not met]
    met = not missed and not missing and not absent
    parts = missed or [words for _, words in verdicts[:1] + verdicts[1:][-1:]]
    if missing:
        parts.insert(0, f"not measured at batch {', '.join(map(str, missing))} (the target "
                        "spans batch 1-64)")  # fmt: skip
    if absent:
        parts.append(f"no {anchor_words} timing at batch {', '.join(absent)}")
    judged = ", ".join(str(b) for b in sorted(ours))
    return met, (f"{len(verdicts) - len(missed)} of {len(ours)} batches meet it ({judged}); "
                 + "; ".join(parts) + f" ({where})")  # fmt: skip


def sampling_torch_target(all_records: list[Record]) -> tuple[bool, str]:
    """kernelab's top-p at least TORCH_SPEEDUP_TARGET x faster than torch's sort-based top-p
    at every batch measured (batch 1 and 64 among them), medians of the samples."""
    ours, records, shown, note = _sampling_cases(all_records)
    unjudged = _unjudged(shown, "sampling") + note
    if not ours:
        return False, ("not measured (no kernelab top-p timings with samples at a "
                       f"{SAMPLING_VOCAB}-token vocabulary on this card; the lab's decode stage "
                       "times them on a GPU)" + unjudged)  # fmt: skip

    def judge(r, torch_record):
        speedup = torch_record.median_ms / r.median_ms
        return speedup >= TORCH_SPEEDUP_TARGET, (f"{speedup:.2f}x torch ({_us(r)} against "
                                                 f"{_us(torch_record)})")  # fmt: skip

    verdicts, absent = _against(ours, records, TORCH_SAMPLER, judge)
    met, evidence = _sampling_verdict(verdicts, absent, ours, _where(records), "torch")
    return met, f"needs {TORCH_SPEEDUP_TARGET:g}x; " + evidence + unjudged


def sampling_flashinfer_target(all_records: list[Record]) -> tuple[bool, str]:
    """kernelab's top-p time at most FLASHINFER_RATIO_TARGET x FlashInfer's (softmax +
    top_p_sampling_from_probs: the same work from logits) at every batch measured."""
    ours, records, shown, note = _sampling_cases(all_records)
    unjudged = _unjudged(shown, "sampling") + note
    if not ours:
        return False, ("not measured (no kernelab top-p timings with samples at a "
                       f"{SAMPLING_VOCAB}-token vocabulary on this card; the lab's decode stage "
                       "times them on a GPU)" + unjudged)  # fmt: skip
    if not any(r.implementation == FLASHINFER_SAMPLER for r in records):
        why = next((str(r.extra["flashinfer"]) for r in ours.values() if r.extra.get("flashinfer")),
                   "no FlashInfer timing in the records")  # fmt: skip
        batches = ", ".join(map(str, sorted(ours)))
        return False, (f"not measured ({why}; kernelab's sampler timed at batch {batches}, "
                       f"{_where(records)}){unjudged}")  # fmt: skip

    def judge(r, flashinfer):
        ratio = r.median_ms / flashinfer.median_ms
        probs_only = next((o for o in records if o.implementation == FLASHINFER_PROBS_ONLY
                           and o.shape.get("batch") == r.shape["batch"]), None)  # fmt: skip
        beside = f"; its probs-only kernel {_us(probs_only)}" if probs_only else ""
        return ratio <= FLASHINFER_RATIO_TARGET, (f"{ratio:.2f}x FlashInfer's time ({_us(r)} "
                                                  f"against {_us(flashinfer)}{beside})")  # fmt: skip

    verdicts, absent = _against(ours, records, FLASHINFER_SAMPLER, judge)
    met, evidence = _sampling_verdict(verdicts, absent, ours, _where(records), "FlashInfer")
    return met, f"needs <= {FLASHINFER_RATIO_TARGET:g}x; " + evidence + unjudged


# ---- the decode step's waterfall and the sampling table, for the report ---------------------


def step_floor_us(r: Record, copy_gbps: float | None) -> float | None:
    """The step's floor per token: its bytes (weights + KV, ops/decode_step's step_cost at the
    record's shape) over the copy ceiling measured beside it; None without one."""
    from kernelab.ops.decode_step.config import LLAMA3_8B, TINY, step_cost

    config = {"llama3-8b": LLAMA3_8B, "tiny": TINY}.get(str(r.shape.get("config", STEP_CONFIG)))
    if not copy_gbps or config is None:
        return None
    cost = step_cost(config, int(r.shape["batch"]), int(r.shape["length"]), r.dtype or "bf16")
    return cost.bytes / (copy_gbps * 1e9) * 1e6


def waterfall_cases(all_records: list[Record]) -> tuple[list[dict], str]:
    """Per (batch, KV length): each path's per-token time in waterfall order, from samples
    where they exist (else the stored median, marked). ([case], where from)."""
    judged, shown = _newest_of(all_records, STEP_OP)
    use_stored = not judged
    records = judged or shown
    cases: dict[tuple, dict] = {}
    order = [p for p, _ in STEP_PATHS]
    for r in records:
        key = (r.shape.get("batch"), r.shape.get("length"))
        if r.implementation not in order:
            continue
        case = cases.setdefault(key, {"batch": key[0], "length": key[1], "paths": {}})
        case["paths"][r.implementation] = r
    found = [cases[k] for k in sorted(cases, key=lambda k: (int(k[0] or 0), int(k[1] or 0)))]
    for case in found:
        case["paths"] = {p: case["paths"][p] for p in order if p in case["paths"]}
    where = _where(records) if records else ""
    if use_stored and records:
        where += " (stored medians: the records keep no samples, so they are shown, not judged)"
    return found, where


def step_rows(cases: list[dict], copy_gbps: float | None) -> list[list]:
    """The waterfall as a table: per case and path, us per token (device), host and wall us,
    the floor and % of it, and the time against torch.compile's."""
    words = dict(STEP_PATHS)
    rows = []
    for case in cases:
        compiled = case["paths"].get("compiled")
        for path, r in case["paths"].items():
            floor = step_floor_us(r, copy_gbps)
            device_us = r.median_ms * 1e3
            host, wall = r.extra.get("host_us"), r.extra.get("wall_us")
            rows.append([case["batch"], case["length"], words.get(path, path), f"{device_us:,.1f}",
                         f"{host:,.1f}" if isinstance(host, (int, float)) else "-",
                         f"{wall:,.1f}" if isinstance(wall, (int, float)) else "-",
                         f"{floor:,.1f}" if floor else "-",
                         f"{100 * floor / device_us:.0f}" if floor else "-",
                         f"{r.median_ms / compiled.median_ms:.2f}" if compiled else "-"])  # fmt: skip
    return rows


def sampling_rows(all_records: list[Record]) -> tuple[list[list], str]:
    """Per batch and sampler: us per call, host us, x torch's time; where from."""
    judged, shown = _newest_of(all_records, SAMPLING_OP)
    records = judged or shown
    order = [KERNELAB_SAMPLER, TORCH_SAMPLER, FLASHINFER_SAMPLER, FLASHINFER_PROBS_ONLY]
    rows = []
    for r in sorted(records, key=lambda r: (r.shape.get("vocab", 0), r.shape.get("batch", 0),
                                            order.index(r.implementation)
                                            if r.implementation in order else len(order),
                                            r.implementation)):  # fmt: skip
        torch_record = next((o for o in records if o.implementation == TORCH_SAMPLER
                             and o.shape == r.shape), None)  # fmt: skip
        host = r.extra.get("host_us")
        rows.append([r.shape.get("batch"), r.shape.get("vocab"), r.implementation,
                     f"{r.median_ms * 1e3:,.1f}",
                     f"{host:,.1f}" if isinstance(host, (int, float)) else "-",
                     f"{torch_record.median_ms / r.median_ms:.2f}" if torch_record else "-"])  # fmt: skip
    where = _where(records) if records else ""
    if records and not judged:
        where += " (stored medians: the records keep no samples, so they are shown, not judged)"
    return rows, where



# ---- the report's section ----------------------------------------------------------------


def step_section(report, results, figures, on_gpu: bool,
                 copy_for: Callable[[list[Record]], tuple[float | None, str]]) -> None:
    """The decode step's waterfall (chart and table) from the newest step records, or one
    line saying why there is none. copy_for(records): the copy ceiling for the step's floor
    (GB/s, where from), the decode suite's (lab/decode.py)."""
    from kernelab.lab import charts
    from kernelab.lab.report import Heading, Image, Paragraph, Table

    report.add(Heading("Decode step: where the per-token time goes", 3))
    cases, where = waterfall_cases(results.records)
    if not cases:
        report.add(Paragraph(
            "Not measured (this run has no decode-step timing: see the decode stage's line)."
            if on_gpu else
            "Not measured (timing needs a GPU: kernelab lab on a machine with one checks each "
            "path against the float64 reference step, then times it per token; no committed "
            "records of it either)."))  # fmt: skip
        return
    records = [r for case in cases for r in case["paths"].values()]
    copy_gbps, copy_source = copy_for(records)
    floors = {(c["batch"], c["length"]): step_floor_us(next(iter(c["paths"].values())), copy_gbps)
              for c in cases}  # fmt: skip
    gpu = charts.gpu_of(records)
    floor_words = (f"the floor is the step's bytes (weights + KV) over the copy ceiling "
                   f"({copy_gbps:,.0f} GB/s, {copy_source})" if copy_gbps else
                   "no copy ceiling measured beside it, so no floor")  # fmt: skip
    report.add(Paragraph(
        f"One token through a Llama-3-8B block on {gpu}, path by path: torch eager launches "
        "dozens of small kernels from Python, torch.compile (mode='reduce-overhead') fuses the "
        "elementwise work and replays a CUDA graph, the eager block in a CUDA graph removes the "
        "host between the same kernels, and the graphed kernelab block streams the weights "
        f"through its own GEMVs and fused ops. Device time per token from {where}; wall: a "
        f"loop of calls with one synchronise at the end; {floor_words}."))  # fmt: skip
    chart = charts.decode_step_waterfall(cases, figures / "decode_step_waterfall.png",
                                         words=dict(STEP_PATHS), floors=floors, gpu=gpu,
                                         source=where)  # fmt: skip
    if chart:
        report.add(Image(chart, "decode step waterfall: per-token time by path"))
    report.add(Table(["batch", "KV", "path", "us per token", "host us", "wall us", "floor us",
                      "% of floor", "time / torch.compile's"], step_rows(cases, copy_gbps)))  # fmt: skip


def sampling_section(report, results, on_gpu: bool) -> None:
    """Top-p sampling's timings beside torch's and FlashInfer's, or one line saying why not."""
    from kernelab.lab.report import Heading, Paragraph, Table

    report.add(Heading("Sampling: top-p over a 128K vocabulary", 3))
    rows, where = sampling_rows(results.records)
    if not rows:
        report.add(Paragraph(
            "Not measured (this run has no sampling timing: see the decode stage's line)."
            if on_gpu else
            "Not measured (timing needs a GPU: kernelab lab on a machine with one checks each "
            "sampler draws inside the nucleus, then times it; no committed records of it "
            "either)."))  # fmt: skip
        return
    judged, _ = _newest_of(results.records, SAMPLING_OP)
    lines = sorted({str(r.extra["flashinfer"]) for r in judged if r.extra.get("flashinfer")})
    flashinfer = f" FlashInfer: {'; '.join(lines)}." if lines else ""
    report.add(
        Paragraph(f"fp32 logits, temperature 1, top_p {SAMPLING_TOP_P}; kernelab's sampler draws "
                  "by rejection without a sort (ops/sampling), torch's sorts the row; each is "
                  f"checked to draw inside the float64 reference's nucleus first. From {where}."
                  f"{flashinfer}"),
        Table(["batch", "vocab", "sampler", "us per call", "host us", "speedup over torch"],
              rows),
    )  # fmt: skip
