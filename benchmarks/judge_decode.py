"""The decode kernels' targets, in the words they were set in, judged on the records of one
run of benchmarks/decode_kernels.py: once on the harness's timings (mode "cold") and once on
triton.testing.do_bench's (mode "do_bench"), each against the copy ceiling its own timer
measured in the same run. Pure functions of the records: tested without a GPU.
"""

from __future__ import annotations

from decode_anchors import INT4_ANCHORS

SUITE = "decode"
GEMV = ("bf16 GEMV at m = 1: >= 90 % of the measured copy ceiling in bytes of W per second, "
        "and >= torch (cuBLAS) at every listed shape; at m <= 16 >= cuBLAS")  # fmt: skip
QUANT = ("int4 weight-only GEMV at m = 1: >= 3.0x the bf16 GEMV's speed; int8 >= 1.8x; at "
         "least as fast as the best of torchao's int4 weight-only path and gemlite measured "
         "side by side where they install")  # fmt: skip
FUSED = ("Fused add+RMSNorm, RoPE, SwiGLU: >= 90 % of the copy ceiling at decode and prefill "
         "shapes; >= torch.compile's fusion of the same code; Liger-Kernel's versions "
         "measured beside them where it installs")  # fmt: skip
GATE_UP = ("fused gate/up GEMV + SwiGLU (stated: no target of its own): against the same work "
           "unfused, in eager torch and under torch.compile")  # fmt: skip
TARGETS = (GEMV, QUANT, FUSED)
COPY_FRACTION = 0.90
INT4_SPEEDUP, INT8_SPEEDUP = 3.0, 1.8
TIMERS = {"cold": "harness (kernelab cold timer)", "do_bench": "triton.testing.do_bench"}
FUSED_OPS = ("add_rmsnorm", "rope", "swiglu")


def _key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


class Index:
    """A run's records of one timer, by (implementation, shape, dtype); the last one wins."""

    def __init__(self, records, mode: str):
        self.records = [r for r in records if r.extra.get("suite") == SUITE and r.mode == mode]
        self._by = {(r.implementation, _key(r.shape), r.dtype): r for r in self.records}

    def get(self, implementation: str, shape: dict, dtype: str = "bf16"):
        return self._by.get((implementation, _key(shape), dtype))

    def copy_gbps(self) -> float | None:
        copy = next((r for r in self.records if r.implementation == "copy"), None)
        return copy.achieved_gbps if copy is not None else None


def _span(values, fmt: str) -> str:
    return (f"{min(values):{fmt}}-{max(values):{fmt}}" if len(values) > 1
            else f"{values[0]:{fmt}}")  # fmt: skip


def _mnk(shape: dict) -> str:
    return f"{shape['n']}x{shape['k']} m={shape['m']}"


def judge_gemv(index: Index) -> tuple[bool | None, str]:
    ours = sorted((r for r in index.records if r.implementation == "triton.gemv"
                   and r.dtype == "bf16" and r.shape["m"] <= 16),
                  key=lambda r: (r.shape["n"], r.shape["k"], r.shape["m"]))  # fmt: skip
    if not ours:
        return None, "no bf16 triton.gemv records in this run"
    copy = index.copy_gbps()
    missed, pcts, ratios = [], [], []
    for r in ours:
        cublas = index.get("torch.gemv", r.shape)
        ratio = cublas.median_ms / r.median_ms if cublas else None
        ok = ratio is not None and ratio >= 1.0
        if ratio is not None:
            ratios.append(ratio)
        words = f"{_mnk(r.shape)} {r.median_ms * 1e3:.1f} us, " + (
            f"{ratio:.2f}x cuBLAS" if ratio else "no cuBLAS timing"
        )
        if r.shape["m"] == 1:
            w_gbps = r.shape["n"] * r.shape["k"] * 2 / (r.median_ms * 1e-3) / 1e9
            pct = 100 * w_gbps / copy if copy else None
            ok = ok and pct is not None and pct >= 100 * COPY_FRACTION
            if pct is not None:
                pcts.append(pct)
            words += f", {pct:.0f} % of copy" if pct is not None else ", no copy ceiling"
        if not ok:
            missed.append(words)
    parts = [f"{len(ours) - len(missed)} of {len(ours)} cases meet it"]
    if pcts:
        parts.append(f"m = 1: {_span(pcts, '.0f')} % of copy ({copy:,.0f} GB/s) in W bytes/s")
    if ratios:
        parts.append(f"vs cuBLAS at m <= 16: {_span(ratios, '.2f')}x")
    if missed:
        parts.append("missed: " + "; ".join(missed[:4]) + (" ..." if len(missed) > 4 else ""))
    return not missed, "; ".join(parts)


def judge_quant(index: Index) -> tuple[bool | None, str]:
    bf16s = [r for r in index.records if r.implementation == "triton.gemv" and r.dtype == "bf16"
             and r.shape["m"] == 1]  # fmt: skip
    parts, met, judged, anchored = [], True, 0, False
    for bf16 in sorted(bf16s, key=lambda r: (r.shape["n"], r.shape["k"])):
        n, k = bf16.shape["n"], bf16.shape["k"]
        int4 = next((r for r in index.records if r.implementation == "triton.quant_gemv.int4"
                     and (r.shape["m"], r.shape["n"], r.shape["k"]) == (1, n, k)), None)  # fmt: skip
        int8 = index.get("triton.quant_gemv.int8", {"m": 1, "n": n, "k": k})
        if int4 is None and int8 is None:
            continue
        judged += 1
        words = [f"{n}x{k}"]
        for r, need, name in ((int4, INT4_SPEEDUP, "int4"), (int8, INT8_SPEEDUP, "int8")):
            if r is None:
                met = False
                words.append(f"no {name} timing")
                continue
            speedup = bf16.median_ms / r.median_ms
            met &= speedup >= need
            words.append(f"{name} {speedup:.2f}x (needs {need:g}x)")
        if int4 is not None:
            others = [a for a in (index.get(name, int4.shape) for name in INT4_ANCHORS) if a]
            if others:
                anchored = True
                best = min(others, key=lambda r: r.median_ms)
                met &= int4.median_ms <= best.median_ms
                words.append(f"{best.median_ms / int4.median_ms:.2f}x {best.implementation}")
        parts.append(" ".join(words))
    if not judged:
        return None, "no quantized GEMV records at m = 1 beside a bf16 triton.gemv in this run"
    if not anchored:
        parts.append("torchao and gemlite not measured in this run (absent): that clause "
                     "is not judged")  # fmt: skip
    return met, "; ".join(parts)


def _rows(shape: dict) -> int:
    return shape.get("rows", shape.get("tokens", 0))


def judge_fused(index: Index) -> tuple[bool | None, str]:
    ours = [r for r in index.records if r.implementation in {f"triton.{op}" for op in FUSED_OPS}]
    if not ours:
        return None, "no fused-op records in this run"
    copy = index.copy_gbps()
    missed, pct_by_kind, vs_compile, beside = [], {"decode": [], "prefill": []}, [], []
    for r in sorted(ours, key=lambda r: (r.op, _rows(r.shape))):
        op, rows = r.op, _rows(r.shape)
        pct = 100 * r.achieved_gbps / copy if copy and r.achieved_gbps else None
        kind = "prefill" if rows >= 8192 else "decode"
        if pct is not None:
            pct_by_kind[kind].append(pct)
        compiled = index.get(f"torch.compile.{op}", r.shape)
        ratio = compiled.median_ms / r.median_ms if compiled else None
        if ratio is not None:
            vs_compile.append(ratio)
        ok = pct is not None and pct >= 100 * COPY_FRACTION and ratio is not None and ratio >= 1
        if not ok:
            missed.append(f"{op} rows={rows}: " + (f"{pct:.0f} % of copy" if pct is not None
                          else "no copy ceiling") + (f", {ratio:.2f}x torch.compile" if ratio
                          else ", no torch.compile timing"))  # fmt: skip
        for name in (f"liger.{op}", f"flashinfer.{op}"):
            other = index.get(name, r.shape)
            if other is not None:
                beside.append(f"{name} rows={rows}: {other.median_ms / r.median_ms:.2f}x")
    parts = [f"{len(ours) - len(missed)} of {len(ours)} cases meet it"]
    for kind, values in pct_by_kind.items():
        if values:
            parts.append(f"{kind} rows: {_span(values, '.0f')} % of copy")
    if vs_compile:
        parts.append(f"vs torch.compile: {_span(vs_compile, '.2f')}x")
    parts.append("beside (their time / ours): " + ", ".join(beside[:6]) if beside
                 else "Liger-Kernel and FlashInfer not measured in this run (absent)")  # fmt: skip
    if missed:
        parts.append("missed: " + "; ".join(missed[:4]) + (" ..." if len(missed) > 4 else ""))
    return not missed, "; ".join(parts)


def state_gate_up(index: Index) -> tuple[None, str]:
    ours = sorted((r for r in index.records if r.implementation == "triton.gate_up_swiglu"),
                  key=lambda r: r.shape["m"])  # fmt: skip
    if not ours:
        return None, "no triton.gate_up_swiglu records in this run"
    copy, parts = index.copy_gbps(), []
    for r in ours:
        words = [f"{_mnk(r.shape)} {r.median_ms * 1e3:.1f} us"]
        for name in ("kernelab.gemv+swiglu", "torch.gate_up_swiglu",
                     "torch.gate_up_swiglu.one_gemm", "torch.compile.gate_up_swiglu"):  # fmt: skip
            other = index.get(name, r.shape)
            if other is not None:
                words.append(f"{other.median_ms / r.median_ms:.2f}x {name}")
        if r.shape["m"] == 1 and copy:
            w_gbps = 2 * r.shape["n"] * r.shape["k"] * 2 / (r.median_ms * 1e-3) / 1e9
            words.append(f"{100 * w_gbps / copy:.0f} % of copy in W bytes/s")
        parts.append(", ".join(words))
    return None, "; ".join(parts)


def judge(records, gpu: str) -> list[dict]:
    """Every target on each timer: {"target", "timer", "gpu", "met" (None: stated or no
    records), "evidence"}."""
    verdicts = []
    for mode, timer in TIMERS.items():
        index = Index(records, mode)
        for target, judged in ((GEMV, judge_gemv), (QUANT, judge_quant), (FUSED, judge_fused),
                               (GATE_UP, state_gate_up)):  # fmt: skip
            met, evidence = judged(index)
            verdicts.append({"target": target, "timer": timer, "gpu": gpu, "met": met,
                             "evidence": evidence})  # fmt: skip
    return verdicts


def print_verdicts(verdicts: list[dict], run=None) -> None:
    gpu = verdicts[0]["gpu"] if verdicts else "?"
    print(f"\n== the targets on {gpu}, judged on this run's records")
    for v in verdicts:
        word = {True: "MET", False: "MISSED", None: "stated"}[v["met"]]
        print(f"[{word}] ({v['timer']}) {v['target']}\n    {v['evidence']}")
    if run is not None:
        for name, why in sorted(run.anchors.items()):
            if why:
                print(f"anchor {name}: absent here ({why})")
        if run.failures:
            print(f"{len(run.failures)} failed: " + "; ".join(run.failures[:5]))
        judged = [v for v in verdicts if v["met"] is not None]
        print(f"targets met: {sum(v['met'] for v in judged)} of {len(judged)}; written to "
              f"{run.path}")  # fmt: skip
