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
    top-p and, where flashinfer imports, FlashInfer's sampling kernels (these two measured,
    judged and drawn in lab/decode_step.py).

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
from kernelab.lab.decode_step import (
    sampling_flashinfer_target,
    sampling_section,
    sampling_torch_target,
    step_section,
    step_target,
)

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
    step_section(report, results, figures, on_gpu,
                 lambda records: step_copy_gbps(results, records))
    sampling_section(report, results, on_gpu)


def step_copy_gbps(results, records: list[Record]) -> tuple[float | None, str]:
    """The copy ceiling for the step's floor: the decode suite's own copy timed on the same
    GPU as the step's records, else the measured ceilings of that card; (None, "") without."""
    gpus = {r.gpu for r in records}
    if len(gpus) != 1:
        return None, ""
    own = [r for r in suite_records(results.records) if r.gpu in gpus]
    card = next((r.gpu_id for r in records if r.gpu_id), None)
    return copy_ceiling(own, results.ceilings_on(card) if card else None)
