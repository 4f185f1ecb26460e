"""`kernelab lab`: the whole phase on the machine it runs on, resumable, then the report.

The run is a list of stages. Each stage writes its results into DIR/records/ and is marked
done in DIR/records/stages.json, so an interrupted lab keeps what it measured and a second
`kernelab lab --out DIR` starts where the first stopped (`--fresh` starts over).

On a GPU: the ceilings, the SGEMM ladder (checked, then timed against cuBLAS), the Triton
kernels (checked, then timed against torch eager and torch.compile), on a Hopper GPU the
bf16 tensor-core ladder (checked, then timed against cuBLAS in alternating pairs of calls),
the PMPP ladders (reduction, histogram, transpose: checked, then timed beside torch and their
ceilings, lab.pmpp), the decode kernels (GEMV, quantized GEMV, fused small ops: lab.decode) and Nsight Compute's diagnosis of the key kernels. Without a GPU: the
roofline of every built-in kernel on a catalog GPU, the compile reports of the CUDA ladders
(nvcc), the Triton kernels checked
under the interpreter, and the committed GPU records with the machine and day they were
measured on. Either way: the charts, report.md, report.html and the exit-criteria gate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.lab.paths import DEFAULT_CARD, committed_results_dir, repo_root

Progress = Callable[[str], None]

# Shapes of the built-in kernels for the analytic roofline: one representative each.
BUILT_IN = [
    ("sgemm ladder (best step)", "gemm", {"m": 4096, "n": 4096, "k": 4096}, "fp32"),
    ("triton.matmul", "gemm", {"m": 4096, "n": 4096, "k": 4096}, "bf16"),
    ("triton.softmax", "softmax", {"rows": 8192, "cols": 8192}, "bf16"),
    ("triton.layernorm", "layernorm", {"rows": 16384, "cols": 4096}, "bf16"),
    ("triton.rmsnorm", "rmsnorm", {"rows": 16384, "cols": 4096}, "bf16"),
    ("triton.vector_add", "vector_add", {"n": 2**28}, "fp32"),
]

SOFTMAX_COLUMNS = [512, 1024, 4096, 16384, 65536, 262144]
SOFTMAX_COLUMNS_QUICK = [1024, 4096, 32768, 262144]
NORM_HIDDEN = [1024, 4096, 16384]
INPUT_BYTES = 1 << 30  # Triton kernels are timed on >= 1 GiB inputs (issue 5)


@dataclass
class LabState:
    out: Path
    quick: bool
    gpu_id: str  # catalog id of the GPU the report is about
    on_gpu: bool
    done: dict = field(default_factory=dict)  # stage -> summary line
    failed: dict = field(default_factory=dict)  # stage -> the error (not saved: runs again)
    gpu_from: str = ""  # how gpu_id was chosen, in words (report_gpu)

    @property
    def records_dir(self) -> Path:
        return self.out / "records"

    def save(self) -> None:
        (self.records_dir / "stages.json").write_text(json.dumps(self.done, indent=1))


def _write(path: Path, data) -> Path:
    from kernelab.harness.records import write_atomically
    from kernelab.output import to_jsonable

    write_atomically(path, json.dumps(to_jsonable(data), indent=1) + "\n")
    return path


# --- stages that run anywhere ----------------------------------------------------------


def stage_rooflines(state: LabState, progress: Progress) -> str:
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline.model import Ceilings, place
    from kernelab.spec.reference import get_op

    spec = get_gpu(state.gpu_id)
    rows = []
    for label, op, shape, dtype in BUILT_IN:
        progress(f"placing {label} on the {spec.id} roofline")
        placement = place(get_op(op).cost(shape, dtype), Ceilings.from_spec(spec))
        rows.append({"kernel": label, **placement.to_dict(), "input_shape": shape})
    _write(state.records_dir / "rooflines.json", {"gpu": spec.id, "rooflines": rows})
    return f"{len(rows)} kernels placed on {spec.id}"


def stage_compile_report(state: LabState, progress: Progress) -> str:
    from kernelab.ladders.sgemm.ladder import compile_report, parse_steps
    from kernelab.runtime.cuda.build import find_nvcc

    if find_nvcc() is None:
        why = "nvcc not found: the CUDA ladder's compile report needs the CUDA toolkit"
        _write(state.records_dir / "compile.json", {"compile": [], "skipped": why})
        return f"skipped: {why}"
    rows = compile_report(parse_steps(None), progress)
    _write(state.records_dir / "compile.json", {"compile": rows})
    spills = sum(r["spill_store_bytes"] + r["spill_load_bytes"] for r in rows)
    return f"{len(rows)} steps compiled, {spills} spill bytes"


def stage_interpreter(state: LabState, progress: Progress) -> str:
    progress("checking the Triton kernels under TRITON_INTERPRET=1")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.lab.interpret"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        results = [{"implementation": "all", "ok": False, "message": done.stderr.strip()[-400:]}]
    else:
        results = json.loads(done.stdout)
    _write(state.records_dir / "interpreter.json", {"interpreter_checks": results})
    return f"{sum(r['ok'] for r in results)}/{len(results)} Triton checks passed on the CPU"


# --- stages that need a GPU -------------------------------------------------------------


def stage_ceilings(state: LabState, progress: Progress) -> str:
    from kernelab.harness.ceilings import measure_ceilings, save_measured

    progress("measuring copy bandwidth and cuBLAS peaks")
    measured = measure_ceilings(quick=state.quick)
    save_measured(measured, state.records_dir / "ceilings.json")
    copy = measured.ceilings.get("copy")
    return f"copy {copy.rate / 1e12:.2f} TB/s" if copy else "measured"


def stage_sgemm(state: LabState, progress: Progress) -> str:
    from kernelab.harness.records import save_records
    from kernelab.ladders.sgemm.ladder import check_steps, parse_steps, time_ladder

    steps = parse_steps(None)
    shapes = [
        {"m": 127, "n": 257, "k": 31},
        {"m": 1, "n": 1, "k": 1},
        {"m": 1000, "n": 1000, "k": 1000},
    ]
    checks = check_steps(steps, shapes, progress)
    good = [s for s in steps if all(c["ok"] for c in checks if c["step"] == s.name)]
    sizes = [2048, 4096] if state.quick else [1024, 2048, 4096, 8192]
    rows, records = time_ladder(good, sizes, progress=progress, skip_slow_above=2048)
    save_records(records, state.records_dir / "sgemm_ladder_records.json")
    _write(
        state.records_dir / "sgemm_ladder_summary.json",
        {"checks": checks, "timing": {"rows": rows}},
    )
    best = max(
        (r for r in rows if r["step"] != "cuBLAS"), key=lambda r: r["pct_of_cublas"], default=None
    )
    wrong = len(steps) - len(good)
    head = f"{wrong} steps failed their check; " if wrong else ""
    return head + (
        f"best {best['step']} at {best['pct_of_cublas']:.1f} % of cuBLAS ({best['size']}^3)"
        if best
        else "nothing timed"
    )


# The Hopper ladder in the lab: the best step (and, in a full run, the ones it grew from)
# checked at the awkward shapes, then timed against cuBLAS in alternating pairs of calls, the
# measure the gate judges (ladders/hgemm/ladder.time_paired).
HGEMM_LAB_SIZES = (2048, 4096, 8192)


def hgemm_plan(capability: tuple[int, int], nvcc: str | None, quick: bool) -> dict:
    """What the lab's hgemm stage runs on this machine: {"skip": why} where it cannot (the
    steps are sm_90a binaries: wgmma, TMA multicast and setmaxnreg exist only on Hopper),
    else the steps, sizes and pairs per step and size."""
    if capability != (9, 0):
        major, minor = capability
        return {"skip": f"the Hopper ladder needs an sm_90 GPU; this one is sm_{major}{minor}"}
    if nvcc is None:
        return {
            "skip": "nvcc not found: the Hopper ladder compiles its steps with the CUDA toolkit"
        }
    return {"steps": "19" if quick else "10,12,15,16,17,18,19", "sizes": list(HGEMM_LAB_SIZES),
            "pairs": 200 if quick else 400}  # fmt: skip


def stage_hgemm(state: LabState, progress: Progress) -> str:
    import torch

    from kernelab.ladders.hgemm import ladder
    from kernelab.runtime.cuda.build import find_nvcc

    plan = hgemm_plan(torch.cuda.get_device_capability(), find_nvcc(), state.quick)
    if "skip" in plan:
        return "skipped: " + plan["skip"]
    steps = ladder.parse_steps(plan["steps"])
    checks = ladder.check_steps(steps, progress)
    good = ladder.correct_steps(steps, checks)
    paired = [row for size in plan["sizes"]
              for row in ladder.time_paired(good, size, plan["pairs"], progress=progress)]  # fmt: skip
    _write(
        state.records_dir / "hgemm" / "summary.json",
        {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
         "sizes": plan["sizes"], "steps": [s.name for s in steps], "checks": checks,
         "paired": paired},
    )  # fmt: skip
    wrong = len(steps) - len(good)
    head = f"{wrong} steps failed their check; " if wrong else ""
    if not paired:
        return head + "nothing timed"
    best = max(good, key=lambda s: min(r["pct_median"] for r in paired if r["impl"] == s.name))
    rates = " / ".join(f"{r['pct_median']:.1f}" for r in paired if r["impl"] == best.name)
    return head + f"{best.name} at {rates} % of cuBLAS ({'/'.join(map(str, plan['sizes']))}^3)"


def _triton_plan(quick: bool) -> list[tuple[str, dict, str]]:
    plan = [("triton.vector_add", {"n": INPUT_BYTES // 4}, "fp32")]
    for dtype, size in (("fp32", 4), ("bf16", 2)):
        for cols in SOFTMAX_COLUMNS_QUICK if quick else SOFTMAX_COLUMNS:
            plan.append(
                (
                    "triton.softmax",
                    {"rows": max(1, INPUT_BYTES // (cols * size)), "cols": cols},
                    dtype,
                )
            )
        for hidden in [4096] if quick else NORM_HIDDEN:
            rows = max(1, INPUT_BYTES // (hidden * size))
            plan.append(("triton.layernorm", {"rows": rows, "cols": hidden}, dtype))
            plan.append(("triton.rmsnorm", {"rows": rows, "cols": hidden}, dtype))
    for n in [4096] if quick else [2048, 4096, 8192]:
        plan.append(("triton.matmul", {"m": n, "n": n, "k": n}, "bf16"))
    return plan


def stage_triton(state: LabState, progress: Progress) -> str:
    from kernelab.harness.bench import BenchSession
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import save_records
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    identity = this_gpu("kernelab lab")
    baselines = {"vector_add": ["torch.add"], "softmax": ["torch.softmax", "torch.compile.softmax"],
                 "layernorm": ["torch.layer_norm", "torch.compile.layer_norm"],
                 "rmsnorm": ["torch.rms_norm", "torch.compile.rms_norm"], "gemm": ["torch.mm"]}  # fmt: skip
    if state.quick:
        baselines = {op: names[:1] for op, names in baselines.items()}
    records, failed = [], []
    for name, shape, dtype in _triton_plan(state.quick):
        impl = registry.get(name)
        op_spec = get_op(impl.op)
        session = BenchSession(identity, op_spec, dtype, "cold", 10, 1.0)
        for candidate in [name, *baselines[impl.op]]:
            progress(f"{candidate} {shape} {dtype}")
            other = registry.get(candidate)
            row, record = session.one(other, other.build(), shape)
            if record is None:
                failed.append(f"{candidate} {shape} {dtype}: {row.get('check_message', '')[:120]}")
            else:
                records.append(record)
        save_records(records, state.records_dir / "triton_records.json")  # keep what is measured
    return f"{len(records)} timings" + (
        f"; {len(failed)} FAILED their check: {failed}" if failed else ""
    )


def _best_ladder_step(state: LabState) -> str:
    """The fastest SGEMM step this run timed at its largest size; the last step if none."""
    from kernelab.lab.results import load_results
    from kernelab.ladders.sgemm.ladder import parse_steps

    ladder = [
        r for r in load_results(state.records_dir).ladder() if r.implementation.startswith("sgemm:")
    ]
    if not ladder:
        return parse_steps(None)[-1].name
    largest = max(r.shape["m"] for r in ladder)
    return max(
        (r for r in ladder if r.shape["m"] == largest), key=lambda r: r.achieved_tflops
    ).implementation


def _profile_in_child(name: str, shape: dict, dtype: str, report: Path) -> dict:
    """`kernelab profile NAME ... --json` in a child process: ncu and its report reader run
    apart from this process's CUDA context and libraries, and a crash there is one failed
    profile in the report, not the end of the lab (on an H200 a lab process that read its
    first report in-process died without a word)."""
    options = [f"--{key}={value}" for key, value in shape.items()]
    argv = [sys.executable, "-m", "kernelab.cli", "profile", name, *options,
            f"--dtype={dtype}", f"--out={report}", "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"implementation": name, "shape": shape, "dtype": dtype, "error": why[:300]}
    kernels = json.loads(done.stdout)["kernels"]
    main = max(kernels, key=lambda k: k.get("duration_ns") or 0)
    return {"implementation": name, "shape": shape, "dtype": dtype, **main}


def stage_profiles(state: LabState, progress: Progress) -> str:
    if shutil.which("ncu") is None and not os.environ.get("KERNELAB_NCU"):
        _write(state.records_dir / "profiles.json", {"profiles": [], "skipped": "ncu not found"})
        return "skipped: ncu not found"
    size = {"m": 4096, "n": 4096, "k": 4096}
    targets = [("torch.mm", size, "bf16"), (_best_ladder_step(state), size, "fp32"),
               ("triton.softmax", {"rows": 8192, "cols": 8192}, "bf16")]  # fmt: skip
    profiles = []
    (state.out / "profiles").mkdir(parents=True, exist_ok=True)
    for name, shape, dtype in targets:
        progress(f"profiling {name} {shape} {dtype} with Nsight Compute")
        report = state.out / "profiles" / f"{name.replace(':', '_')}.ncu-rep"
        profiles.append(_profile_in_child(name, shape, dtype, report))
        _write(state.records_dir / "profiles.json", {"profiles": profiles})
    return "; ".join(
        f"{p['implementation']}: "
        + (f"{p['bottleneck']}/{p['unit']}" if "bottleneck" in p else f"FAILED ({p['error']})")
        for p in profiles
    )


def stage_pmpp_compile(state: LabState, progress: Progress) -> str:
    """The PMPP ladders (lab.pmpp.LADDERS) without a GPU: every step's compile report."""
    from kernelab.lab.pmpp import compile_all

    return compile_all(state.records_dir, progress)


def stage_pmpp(state: LabState, progress: Progress) -> str:
    """The PMPP ladders on a GPU: the compile reports, then each ladder checked and timed
    beside its anchors and its ceiling at the lab's sizes (lab.pmpp)."""
    from kernelab.lab.pmpp import compile_all, time_all

    compiled = compile_all(state.records_dir, progress)
    return f"{compiled}; {time_all(state.records_dir, state.quick, progress)}"


def stage_decode(state: LabState, progress: Progress) -> str:
    """The decode kernels (lab.decode): GEMV at decode batches, the int8 / int4 GEMVs and the
    fused small ops, each checked, then timed beside torch (cuBLAS for the GEMVs); then one
    decode step of a Llama-3-8B block four ways (eager, torch.compile, graphed eager, graphed
    kernelab) per token, and top-p sampling over a 128K vocabulary beside torch's and
    FlashInfer's. Each part writes its own record file; a part that breaks does not stop the
    others, and the stage then fails, naming it, so the next run measures it again."""
    from kernelab.errors import KernelabError
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import save_records
    from kernelab.lab.decode import measure, plan
    from kernelab.lab.decode_step import measure_sampling, measure_step

    identity = this_gpu("kernelab lab")
    max_time_s = 0.5 if state.quick else 1.0
    lines, failed, broke = [], [], []
    parts = (
        ("decode_records.json", "kernel timings",
         lambda: measure(identity, plan(state.quick), progress, max_time_s=max_time_s)),
        ("decode_step_records.json", "decode-step timings",
         lambda: measure_step(identity, state.quick, progress, max_time_s=max_time_s)),
        ("sampling_records.json", "sampling timings",
         lambda: measure_sampling(identity, state.quick, progress, max_time_s=max_time_s)),
    )  # fmt: skip
    for name, words, run_part in parts:
        try:
            records, wrong, *said = run_part()
        except Exception as exc:  # noqa: BLE001 - the other parts still run; the stage fails
            progress(traceback.format_exc(limit=4))
            broke.append(f"{words}: {failure_text(exc)}")
            continue
        save_records(records, state.records_dir / name)
        lines.append(f"{len(records)} {words}" + (f" ({said[0]})" if said else ""))
        failed += wrong
    line = "; ".join(lines) + (f"; {len(failed)} FAILED: {failed}" if failed else "")
    if broke:
        raise KernelabError(f"{'; '.join(broke)} (kept: {line or 'nothing'})")
    return line


def stage_pmpp_counters(state: LabState, progress: Progress) -> str:
    """The PMPP ladders' proving counters under Nsight Compute (lab.counters), where ncu is."""
    from kernelab.lab.counters import profile_all

    return profile_all(state.records_dir, progress)


def _stale(name: str, state: LabState) -> str | None:
    """Why a stage kept from an earlier run in the same folder no longer holds for this one,
    or None when it does. Only the rooflines depend on the GPU the report is about (--gpu);
    the measuring stages measure this machine's GPU whatever the report is about."""
    if name == "rooflines":
        try:
            placed_on = json.loads((state.records_dir / "rooflines.json").read_text())["gpu"]
        except (OSError, ValueError, KeyError, TypeError):  # missing or damaged: place again
            placed_on = None
        if placed_on != state.gpu_id:
            earlier = (f"the earlier run placed them on the {placed_on}" if placed_on
                       else "the earlier run's rooflines.json is missing or damaged")  # fmt: skip
            return f"{earlier}; this report is about the {state.gpu_id}"
    return None


GPU_STAGES = [("ceilings", stage_ceilings), ("sgemm", stage_sgemm), ("triton", stage_triton),
              ("hgemm", stage_hgemm), ("pmpp", stage_pmpp), ("pmpp-counters", stage_pmpp_counters),
              ("decode", stage_decode), ("profiles", stage_profiles)]  # fmt: skip
CPU_STAGES = [("rooflines", stage_rooflines), ("compile", stage_compile_report),
              ("pmpp-compile", stage_pmpp_compile), ("interpreter", stage_interpreter)]  # fmt: skip


def failure_text(exc: BaseException) -> str:
    """A failed stage's error in one line of words: a KernelabError's own message, another
    exception's type and first line; never a Python repr."""
    from kernelab.errors import KernelabError

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = (
        first
        if isinstance(exc, KernelabError) and first
        else (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
    )
    return text[:300]


def report_gpu(gpu: str | None, detected=None) -> tuple[str, str]:
    """(catalog id, how it was chosen) of the GPU the report is about: --gpu when given, else
    the detected GPU when the catalog knows it, else DEFAULT_CARD, said so."""
    from kernelab.hardware import resolve_gpu

    if gpu is not None:
        return resolve_gpu(gpu).id, "named with --gpu"
    if detected is not None and detected.spec is not None:
        return detected.spec.id, "this machine's GPU"
    return DEFAULT_CARD, "the default (no GPU detected here; --gpu NAME picks another)"


def run_lab(
    out: Path, *, quick: bool, gpu: str | None, fresh: bool, progress: Progress
) -> LabState:
    from kernelab.hardware.detect import detect_gpu

    detected = detect_gpu()
    on_gpu = detected is not None
    gpu_id, gpu_from = report_gpu(gpu, detected)
    state = LabState(out=out, quick=quick, gpu_id=gpu_id, on_gpu=on_gpu, gpu_from=gpu_from)
    state.records_dir.mkdir(parents=True, exist_ok=True)
    stages_file = state.records_dir / "stages.json"
    if stages_file.exists() and not fresh:
        state.done = json.loads(stages_file.read_text())
    stages = CPU_STAGES[:1] + (GPU_STAGES if on_gpu else CPU_STAGES[1:])
    for name, stage in stages:
        if name in state.done and (why := _stale(name, state)) is not None:
            progress(f"{name}: run again ({why})")
            del state.done[name]
            state.save()
        if name in state.done:
            progress(f"{name}: kept from the earlier run ({state.done[name]})")
            continue
        start = time.perf_counter()
        progress(f"{name}: started")
        try:
            line = stage(state, progress)
        except Exception as exc:
            # A stage that fails (a kernel that faults, a tool the machine lacks) is reported
            # and the others still run; it is not marked done, so the next run tries it again.
            progress(traceback.format_exc(limit=4))
            state.failed[name] = failure_text(exc)
            progress(f"{name}: failed ({state.failed[name]})")
            continue
        state.done[name] = line
        state.save()
        progress(f"{name}: {state.done[name]} ({time.perf_counter() - start:.0f} s)")
    return state


def docs_dir() -> Path | None:
    root = repo_root()
    return root / "docs" if root else None


__all__ = ["run_lab", "committed_results_dir", "docs_dir"]
