"""The decode-time kernels in the lab: batch-1 decode, where a served model spends most of its
time, as memory-bound matrix-vector products and small fused kernels.

Three views, each from this run's records where it has them:
  - the batch walk: a decode GEMV's intensity is about m FLOP per byte of bf16 weights, so it
    stays memory-bound until m nears the ridge (roofline arithmetic on the catalog GPU, no
    GPU needed), with triton.gemv and cuBLAS measured at m = 1 and 16 beside it;
  - quantization's bandwidth win: the weight bytes per token of a Llama-3-8B-shaped model in
    bf16, int8 and int4 and their floors, and the int8 / int4 GEMVs against the bf16 one;
  - the fused small ops (residual add + RMSNorm, RoPE, SwiGLU) against the copy ceiling;
  - one decode step of a Llama-3-8B block four ways (torch eager, torch.compile with
    mode="reduce-overhead", eager in a CUDA graph, the graphed kernelab block; ops/decode_step)
    as a waterfall of the per-token time, against the floor of its bytes over the copy;
  - top-p sampling over Llama 3's 128K vocabulary (ops/sampling) beside torch's sort-based
    top-p and, where flashinfer imports, FlashInfer's sampling kernels.

Records of the stage carry extra["suite"] = SUITE (STEP_SUITE, SAMPLING_SUITE for the step and
the sampler). The targets (kernelab's bar) are judged on
the newest of them: bf16 GEMV at m = 1 >= 90 % of the measured copy ceiling and at m <= 16 no
slower than cuBLAS; int4 >= 3.0x and int8 >= 1.8x the bf16 GEMV at m = 1; the fused ops
>= 90 % of copy at prefill rows. At one decode row a fused op moves ~50 KB: a few
microseconds whatever its bandwidth, so there it is stated, not judged. The step: the graphed
kernelab block (torch's or kernelab's split-KV attention, the faster) no slower per token than
torch.compile's at batch 1, KV 1K and 8K. Sampling: kernelab's top-p >= 3x torch's sort-based
top-p and <= 1.2x FlashInfer's time (softmax + top_p_sampling_from_probs, the same work from
logits) at every batch measured, batch 1 and 64 among them. Each is judged on the median of
the samples kernelab's cold timer recorded; records without samples (the medians
benchmarks/decode_step.py and benchmarks/sampling.py keep) are shown, never judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelab.harness.records import Record

Progress = Callable[[str], None]

SUITE = "decode"
GEMV_COPY_TARGET = 0.90
INT4_SPEEDUP_TARGET = 3.0
INT8_SPEEDUP_TARGET = 1.8
FUSED_COPY_TARGET = 0.90
FUSED_JUDGED_ROWS = 8192  # a prefill's rows: enough bytes that bandwidth, not launch, decides

# (label, n, k): a square weight and the widest and deepest Llama-3-8B projections
WEIGHTS = (("4096x4096", 4096, 4096), ("llama3-8b.gate_up", 28672, 4096),
           ("llama3-8b.down", 4096, 14336))  # fmt: skip
QUICK_WEIGHTS = WEIGHTS[:2]
BATCHES = {True: (1, 16), False: (1, 4, 16, 64)}
CHART_BATCHES = tuple(2**i for i in range(10))  # 1 .. 512
INT4_GROUP = 128

# Llama-3-8B's projections per layer (n, k) and its layer count: the weights a decode step
# streams per token (the embedding table is gathered one row per token, so it is left out;
# the output head, 128256 x 4096, is read whole).
LLAMA3_8B_LAYER = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
LLAMA3_8B_LAYERS = 32
LLAMA3_8B_HEAD = (128256, 4096)


@dataclass(frozen=True)
class Case:
    role: str  # "gemv", "quant" or "fused"
    implementation: str
    baselines: tuple[str, ...]
    op: str
    shape: dict
    dtype: str = "bf16"


def plan(quick: bool) -> list[Case]:
    cases = []
    for _, n, k in QUICK_WEIGHTS if quick else WEIGHTS:
        for m in BATCHES[quick]:
            cases.append(Case("gemv", "triton.gemv", ("torch.gemv",), "gemv",
                              {"m": m, "n": n, "k": k}))  # fmt: skip
        one = {"m": 1, "n": n, "k": k}
        cases.append(Case("quant", "triton.quant_gemv.int8", ("torch.quant_gemv.int8",),
                          "quant_gemv_int8", one))  # fmt: skip
        cases.append(Case("quant", "triton.quant_gemv.int4", ("torch.quant_gemv.int4",),
                          "quant_gemv_int4", {**one, "group": INT4_GROUP}))  # fmt: skip
    for rows in (1, FUSED_JUDGED_ROWS):
        cases.append(Case("fused", "triton.add_rmsnorm", ("torch.add_rmsnorm",), "add_rmsnorm",
                          {"rows": rows, "cols": 4096}))  # fmt: skip
        cases.append(Case("fused", "triton.rope", ("torch.rope",), "rope",
                          {"tokens": rows, "heads": 32, "head_dim": 128}))  # fmt: skip
        cases.append(Case("fused", "triton.swiglu", ("torch.swiglu",), "swiglu",
                          {"rows": rows, "cols": 14336}))  # fmt: skip
    return cases


COPY_BYTES = 1 << 30  # each buffer of the run's own copy ceiling


def copy_record(identity, max_time_s: float) -> Record:
    """The copy ceiling of this run: dst.copy_(src) of COPY_BYTES (read once, written once),
    timed cold beside the kernels it judges."""
    import torch

    from kernelab.harness.timing import benchmark

    src = torch.empty(COPY_BYTES // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    timing = benchmark(lambda: dst.copy_(src), mode="cold", max_time_s=max_time_s)
    moved = 2 * COPY_BYTES
    return Record(op="copy", implementation="copy", shape={"bytes_per_buffer": COPY_BYTES},
                  dtype="int32", mode=timing.mode, samples_ms=list(timing.samples_ms),
                  stats=timing.summary.to_dict(), gpu=identity.name, gpu_id=identity.gpu_id,
                  driver=identity.driver, bytes=moved,
                  achieved_gbps=moved / timing.median_ms / 1e6,
                  extra={"suite": SUITE, "role": "ceiling"})  # fmt: skip


def measure(identity, cases: list[Case], progress: Progress, *, max_time_s: float = 0.5):
    """The run's copy ceiling, then each case and its baselines checked and timed (cold: L2
    flushed, so W comes from HBM as it does in a model): (records, failures)."""
    from kernelab.harness.bench import BenchSession
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    progress("copy ceiling")
    records, failed = [copy_record(identity, max_time_s)], []
    for case in cases:
        session = BenchSession(identity, get_op(case.op), case.dtype, "cold", 10, max_time_s)
        for name in (case.implementation, *case.baselines):
            progress(f"{name} {shape_words(case.shape)} {case.dtype}")
            impl = registry.get(name)
            row, record = session.one(impl, impl.build(), case.shape)
            if record is None:
                failed.append(
                    f"{name} {shape_words(case.shape)}: {row.get('check_message', '')[:120]}"
                )
                continue
            record.extra.update(suite=SUITE, role=case.role)
            records.append(record)
    return records, failed


# ---- arithmetic: no GPU needed -----------------------------------------------------------


def walk_rows(gpu_id: str) -> list[list]:
    """The batch walk of each weight on the catalog GPU: intensity, bound and floor per m."""
    from kernelab.ops.gemv.roofline_walk import walk

    rows = []
    for label, n, k in WEIGHTS:
        result = walk(n, k, gpu=gpu_id, dtype="bf16")
        crossing = result["crossover_m"]
        for point in result["points"]:
            rows.append([label, point.m, f"{point.intensity:.1f}", f"{result['ridge']:.0f}",
                         point.bound, f"{point.floor_us:.1f}",
                         crossing if crossing is not None else "never"])  # fmt: skip
    return rows


def model_bytes(weight: str) -> float:
    """Bytes of Llama-3-8B's projections and output head per decoded token in `weight` format
    (bf16, int8 with fp32 per-channel scales, int4 with fp16 scales per INT4_GROUP), at m = 1:
    the weights dominate; x and y are a few KB."""
    from kernelab.roofline import costs

    def one(n, k):
        if weight == "bf16":
            return costs.gemv_batched(1, n, k, dtype="bf16").bytes
        return costs.quant_gemv(1, n, k, weight=weight, group=INT4_GROUP if weight == "int4" else 0,
                                zero_points=False, dtype="bf16").bytes  # fmt: skip

    layer = sum(one(n, k) for n, k in LLAMA3_8B_LAYER)
    return LLAMA3_8B_LAYERS * layer + one(*LLAMA3_8B_HEAD)


def model_rows(gpu_id: str, copy_gbps: float | None) -> list[list]:
    """Per weight format: GB per token and the floor ms per token at the datasheet bandwidth
    and, where measured, at the copy ceiling."""
    from kernelab.hardware.catalog import get_gpu

    bandwidth = get_gpu(gpu_id).bandwidth_bytes_per_s
    rows = []
    for weight in ("bf16", "int8", "int4"):
        total = model_bytes(weight)
        measured = f"{total / (copy_gbps * 1e9) * 1e3:.2f}" if copy_gbps else "-"
        rows.append([weight, f"{total / 1e9:.2f}", f"{total / bandwidth * 1e3:.2f}", measured,
                     f"{model_bytes('bf16') / total:.2f}x"])  # fmt: skip
    return rows


# ---- the targets, judged on the newest records of the suite ------------------------------


def suite_records(records: list[Record]) -> list[Record]:
    """The suite's records, the newest per case (a re-measured case replaces the older one).
    The harness's timings only: benchmarks/decode_kernels.py writes a triton.testing.do_bench
    twin of each (mode "do_bench"), the figure a PyTorch user's timer gives, kept beside."""
    from kernelab.lab.derive import from_samples

    newest: dict[tuple, Record] = {}
    for r in records:
        if r.extra.get("suite") != SUITE or not from_samples(r) or r.mode == "do_bench":
            continue
        key = (r.implementation, tuple(sorted(r.shape.items())), r.dtype)
        if key not in newest or r.timestamp > newest[key].timestamp:
            newest[key] = r
    return list(newest.values())


def _find(records, implementation, **shape) -> Record | None:
    return next((r for r in records if r.implementation == implementation
                 and all(r.shape.get(key) == value for key, value in shape.items())), None)  # fmt: skip


def shape_words(shape: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in shape.items())


def _mnk(r: Record) -> str:
    return f"m={r.shape['m']} {r.shape['n']}x{r.shape['k']}"


def gemv_target(records, copy_gbps) -> tuple[bool, str]:
    ours = [r for r in records if r.implementation == "triton.gemv" and r.shape["m"] <= 16]
    if not ours:
        return False, "not measured (no triton.gemv records of the decode suite on this card yet)"
    missed, shown = [], []
    for r in sorted(ours, key=lambda r: (r.shape["n"], r.shape["k"], r.shape["m"])):
        cublas = _find(records, "torch.gemv", **r.shape)
        words = [f"{_mnk(r)}: {r.median_ms * 1e3:.1f} us"]
        ok = cublas is not None and r.median_ms <= cublas.median_ms
        words.append(
            f"{cublas.median_ms / r.median_ms:.2f}x cuBLAS" if cublas else "no cuBLAS timing"
        )
        if r.shape["m"] == 1:
            pct = 100 * r.achieved_gbps / copy_gbps if copy_gbps else None
            ok = ok and pct is not None and pct >= 100 * GEMV_COPY_TARGET
            words.append(f"{pct:.0f} % of copy" if pct is not None else "no copy ceiling")
        (shown if ok else missed).append(", ".join(words))
    evidence = f"{len(ours) - len(missed)} of {len(ours)} cases meet it; " + "; ".join(
        (missed or shown)[:3]
    )
    return not missed, evidence


def quant_target(records) -> tuple[bool, str]:
    parts, met, judged = [], True, 0
    for implementation, target in (("triton.quant_gemv.int4", INT4_SPEEDUP_TARGET),
                                   ("triton.quant_gemv.int8", INT8_SPEEDUP_TARGET)):  # fmt: skip
        for r in [r for r in records if r.implementation == implementation and r.shape["m"] == 1]:
            bf16 = _find(records, "triton.gemv", m=1, n=r.shape["n"], k=r.shape["k"])
            judged += 1
            if bf16 is None:
                met = False
                parts.append(f"{implementation} {_mnk(r)}: no bf16 triton.gemv timing")
                continue
            speedup = bf16.median_ms / r.median_ms
            met &= speedup >= target
            parts.append(f"{implementation.rsplit('.', 1)[1]} {_mnk(r)}: {speedup:.2f}x the bf16 "
                         f"GEMV (needs {target:g}x)")  # fmt: skip
    if not judged:
        return False, "not measured (no quantized GEMV records of the decode suite on this card yet)"
    return met, "; ".join(parts[:4])


def fused_target(records, copy_gbps) -> tuple[bool, str]:
    ours = [
        r
        for r in records
        if r.extra.get("role") == "fused" and r.implementation.startswith("triton.")
    ]
    judged = [
        r
        for r in ours
        if max(r.shape.get("rows", 0), r.shape.get("tokens", 0)) >= FUSED_JUDGED_ROWS
    ]
    if not judged:
        return False, ("not measured (no fused-op records of the decode suite at prefill rows "
                       "on this card yet)")
    if not copy_gbps:
        return False, "no measured copy ceiling to judge the fused ops against"
    parts, met = [], True
    for r in judged:
        pct = 100 * r.achieved_gbps / copy_gbps
        met &= pct >= 100 * FUSED_COPY_TARGET
        parts.append(f"{r.implementation} {shape_words(r.shape)}: {pct:.0f} % of copy")
    stated = [r for r in ours if r not in judged]
    if stated:
        parts.append("stated, not judged (one decode row is latency-bound): " + ", ".join(
            f"{r.implementation} {r.median_ms * 1e3:.1f} us" for r in stated[:3]))  # fmt: skip
    return met, "; ".join(parts)


TARGETS = (
    ("decode: bf16 GEMV >= 90 % of copy at m = 1, no slower than cuBLAS at m <= 16", "gemv"),
    ("decode: int4 GEMV >= 3.0x and int8 >= 1.8x the bf16 GEMV at m = 1", "quant"),
    ("decode: fused add+RMSNorm, RoPE, SwiGLU >= 90 % of copy at prefill rows", "fused"),
    ("decode step: the graphed kernelab block <= torch.compile (reduce-overhead) per token at "
     "batch 1, KV 1K and 8K", "step"),
    ("sampling: top-p over a 128K vocab at batch 1-64 >= 3x torch's sort-based top-p",
     "sampling_torch"),
    ("sampling: top-p over a 128K vocab at batch 1-64 within 1.2x FlashInfer's sampling kernels",
     "sampling_flashinfer"),
)  # fmt: skip


def copy_ceiling(records: list[Record], ceilings: dict | None) -> tuple[float | None, str]:
    """(GB/s, where from): the suite's own copy record (timed in the same run) first, else the
    measured ceilings document's copy."""
    own = next((r for r in records if r.implementation == "copy" and r.achieved_gbps), None)
    if own is not None:
        return own.achieved_gbps, "the run's own copy"
    rate = ((ceilings or {}).get("ceilings") or {}).get("copy", {}).get("rate")
    return (float(rate) / 1e9, "the measured ceilings' copy") if rate else (None, "")


def targets(all_records: list[Record], ceilings: dict | None) -> list[tuple[str, bool, str]]:
    """(name, met, evidence) of each target, judged on the newest records of the suite."""
    records = suite_records(all_records)
    copy_gbps, source = copy_ceiling(records, ceilings)
    judged = {"gemv": lambda: gemv_target(records, copy_gbps), "quant": lambda: quant_target(records),
              "fused": lambda: fused_target(records, copy_gbps),
              "step": lambda: step_target(all_records),
              "sampling_torch": lambda: sampling_torch_target(all_records),
              "sampling_flashinfer": lambda: sampling_flashinfer_target(all_records)}  # fmt: skip
    verdicts = [(name, kind, *judged[kind]()) for name, kind in TARGETS]
    with_copy = ("gemv", "quant", "fused")  # the kernels judged against the suite's copy
    return [(name, met, f"{evidence} (copy ceiling {copy_gbps:,.0f} GB/s, {source})"
             if copy_gbps and kind in with_copy and not evidence.startswith("not measured")
             else evidence)
            for name, kind, met, evidence in verdicts]  # fmt: skip


def measured_rows(all_records: list[Record], ceilings: dict | None) -> list[list]:
    """The suite's records as a table: case, implementation, us, GB/s, % of copy."""
    copy_gbps, _ = copy_ceiling(suite_records(all_records), ceilings)
    rows = []
    for r in sorted(suite_records(all_records), key=lambda r: (r.extra.get("role", ""), r.op,
                                                                 sorted(r.shape.items()), r.implementation)):  # fmt: skip
        pct = f"{100 * r.achieved_gbps / copy_gbps:.0f}" if copy_gbps and r.achieved_gbps else "-"
        rows.append([r.extra.get("role", ""), r.op, shape_words(r.shape),
                     r.implementation, f"{r.median_ms * 1e3:.1f}", f"{(r.achieved_gbps or 0):,.0f}",
                     pct])  # fmt: skip
    return rows


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


def section(report, gpu_id: str, on_gpu: bool, results, figures) -> None:
    """The decode section: the batch walk (chart and table), the weight bytes per token of an
    8B model per format, this run's measured table, the decode step's waterfall and the
    sampling table, or a line on each saying what needs a GPU."""
    from kernelab.hardware.catalog import get_gpu
    from kernelab.lab import charts
    from kernelab.lab.report import Heading, Image, Paragraph, Table
    from kernelab.ops.gemv.roofline_walk import walk

    records = suite_records(results.records)
    # the floor at the measured copy is the report's card's: a copy measured on another card
    # (the committed records of the default card, say) says nothing of this one's floor
    own = [r for r in records if r.gpu_id == gpu_id]
    copy_gbps, _ = copy_ceiling(own, results.ceilings_on(gpu_id))
    # No bf16 rate in the catalog, no compute roof: the walk has no ridge to reach, so it is
    # left out with a line saying why. The weight bytes per token need only the bandwidth.
    walkable = "bf16" in get_gpu(gpu_id).peak_tflops
    walk_words = (f"The walk below is catalog arithmetic on the {gpu_id}; m* is the batch where "
                  "it turns compute-bound." if walkable else
                  f"No batch walk here: the catalog lists no dense bf16 rate for the {gpu_id}, "
                  "so there is no compute roof for a bf16 GEMV to turn against.")  # fmt: skip
    report.add(
        Heading("Decode: GEMV, quantized GEMV and the fused small ops"),
        Paragraph("At batch 1 a decode GEMV does 2 FLOPs per weight element and reads it once: "
                  "about 1 FLOP per byte in bf16, hundreds of times below the ridge, so its "
                  "floor is the weight bytes over the bandwidth and the only lever is fewer "
                  f"bytes (quantization) or more rows per read (batching). {walk_words}"),
    )  # fmt: skip
    if walkable:
        # the chart walks past the decode batches to 512, so the turn to compute-bound shows
        walks = [{**walk(n, k, gpu=gpu_id, dtype="bf16", batches=CHART_BATCHES), "label": label}
                 for label, n, k in WEIGHTS]  # fmt: skip
        measured = [(label, r.shape["m"], r.achieved_tflops or 0.0) for r in records
                    for label, n, k in WEIGHTS
                    if r.implementation == "triton.gemv" and (r.shape["n"], r.shape["k"]) == (n, k)]  # fmt: skip
        chart = charts.decode_walk_chart(walks, measured, figures / "decode_walk.png", gpu_id)
        if chart:
            report.add(Image(chart, "decode GEMV roofline walk"))
        report.add(Table(["weight", "m", "FLOP/byte", "ridge", "bound", "floor us", "m*"],
                         [row for row in walk_rows(gpu_id) if row[1] in (1, 4, 16, 64)]))  # fmt: skip
    report.add(
        Heading("Weight bytes per token: a Llama-3-8B-shaped model", 3),
        Table(["weights", "GB per token", f"floor ms ({gpu_id} datasheet)",
               f"floor ms ({gpu_id} measured copy)", "fewer bytes than bf16"],
              model_rows(gpu_id, copy_gbps)),
    )  # fmt: skip
    report.add(Heading("Decode kernels: checks and timings", 3))
    if records:
        report.add(Table(["part", "op", "shape", "implementation", "us", "GB/s", "% of copy"],
                         measured_rows(results.records, results.ceilings)))  # fmt: skip
    else:
        report.add(Paragraph(
            "this run has no timing of them (see the decode stage's line)" if on_gpu else
            "timing needs a GPU (kernelab lab on a machine with one checks and times each "
            "kernel beside torch and cuBLAS); no committed records of them either."))  # fmt: skip
    step_section(report, results, figures, on_gpu)
    sampling_section(report, results, on_gpu)


def _step_copy_gbps(results, records: list[Record]) -> tuple[float | None, str]:
    """The copy ceiling for the step's floor: the decode suite's own copy timed on the same
    GPU as the step's records, else the measured ceilings of that card; (None, "") without."""
    gpus = {r.gpu for r in records}
    if len(gpus) != 1:
        return None, ""
    own = [r for r in suite_records(results.records) if r.gpu in gpus]
    card = next((r.gpu_id for r in records if r.gpu_id), None)
    return copy_ceiling(own, results.ceilings_on(card) if card else None)


def step_section(report, results, figures, on_gpu: bool) -> None:
    """The decode step's waterfall (chart and table) from the newest step records, or one
    line saying why there is none."""
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
    copy_gbps, copy_source = _step_copy_gbps(results, records)
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
