"""The verdict on one solution: is it correct, how fast is it, and where does it sit.

Correctness, for every case and several seeds (each test case at its own seed and
`seeds - 1` more; each benchmark case at its own):

1. The inputs are generated and the reference runs on a copy of them, twice: as the problem
   writes it (the eager output: its structure and dtypes are the specification) and with
   every floating tensor upcast to float64 (the exact answer). Inputs the reference writes
   into are output buffers (GPU MODE preallocates them): those it changed, and those it
   overwrites when handed them full of NaN (an empty buffer may already hold the answer).
   The candidate may write those, and receives them filled with NaN, so an element it
   forgets cannot hold the right answer.
2. The candidate receives its own copy, with torch's allocator poisoned (new tensors hold
   NaN: kernelab.harness.check.poisoned_allocations).
3. It fails when it raises, writes into an input it should only read, returns another
   structure, dtype or shape, or misses the exact answer by more than kernelab's
   scale-aware threshold (kernelab.harness.check.compare: all-zeros and constant outputs
   fail even where a plain allclose passes them). The threshold is the larger of the dtype's
   derived threshold and twice the eager reference's own error, so a problem whose reference
   itself runs in TF32 (a cuDNN convolution) does not reject a kernel as precise as it.
4. On a GPU, a copy of the output is taken on the caller's stream right after the call, before
   any synchronisation: a candidate whose work runs on another stream that the caller's
   stream never waits for returns an output that is not ready there, and that copy is wrong.
5. The problem's own checker (GPU MODE's check_implementation, KernelBench's allclose) must
   pass too.

Then the candidate runs many times: timed on a GPU (kernelab.harness.timing.benchmark, the
same timer and mode for eager PyTorch and torch.compile of the reference, reported as
speedups), or called `repeat_calls` times on a CPU, where timing is skipped. Afterwards its
output is checked again on inputs it has never seen, which catches a result cached from the
correctness pass and behaviour that changes after N calls. A timed call that returns while
its work still runs elsewhere (the timer's fenced flag) fails as well.

Roofline: the cost is declared by the problem or recognised from the reference's aten ops
(kernelab.evaluate.recognise); on a catalog GPU the candidate's time is placed on the
datasheet roofline (and the measured one when cached). A time under the floor makes the
verdict "suspect", never a celebrated speedup.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError
from kernelab.evaluate import trees
from kernelab.evaluate.formats import Case, Problem, describe_exception

STATUSES = ("pass", "fail", "suspect", "crash", "timeout", "error")
EAGER_ERROR_MARGIN = 2.0


@dataclass
class Options:
    seeds: int = 3  # seeds per test case
    seed: int | None = None  # base of the extra seeds; random when None
    timing: bool = True  # time on a GPU (never on a CPU)
    mode: str = "cold"
    max_time_s: float = 1.0
    min_samples: int = 10
    compile: bool = True  # time torch.compile of the reference as a baseline
    repeat_calls: int = 20  # calls before the re-check where there is no timing

    def validate(self) -> Options:
        from kernelab.harness.timing import MODES

        if self.seeds < 1:
            raise KernelabError(f"--seeds must be at least 1, got {self.seeds}")
        if self.mode not in MODES:
            raise KernelabError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.max_time_s <= 0 or self.min_samples < 1 or self.repeat_calls < 0:
            raise KernelabError("--max-time must be positive and --min-samples at least 1")
        return self


@dataclass
class CaseResult:
    case: str
    kind: str  # "test", "benchmark" or "recheck"
    seed: int
    ok: bool
    error: float | None  # worst relative norm error over the output's tensors
    threshold: float | None
    message: str
    format_check: str | None = None  # the problem's own checker: its message


@dataclass
class Timed:
    case: str
    solution_ms: float
    eager_ms: float | None
    compiled_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    rel_noise: float
    mode: str
    placement: dict | None
    warnings: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    problem: str
    format: str
    solution: str
    status: str  # one of STATUSES
    message: str  # one line: why
    device: str = "cpu"
    cases: list[CaseResult] = field(default_factory=list)
    timings: list[Timed] = field(default_factory=list)
    roofline: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        from kernelab.output import to_jsonable

        return to_jsonable(asdict(self))


@dataclass
class Expected:
    """The reference's answer for one (case, seed), computed before any solution loads."""

    case: Case
    seed: int
    data: Any  # the pristine inputs
    eager: Any  # the reference's output as the problem computes it
    exact: Any  # the same in float64 (or the eager output when float64 failed)
    buffers: set  # paths of inputs the reference writes: output buffers
    dtype: str | None  # kernelab name of the input dtype that sets the threshold
    allowance: float  # extra threshold: EAGER_ERROR_MARGIN x the eager output's own error


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dtype_name(dtype) -> str | None:
    from kernelab.harness.tolerances import threshold
    from kernelab.kernels.reference import name_of

    try:
        name = name_of(dtype)
        threshold(name)
    except KernelabError:
        return None
    return name


def _relative_error(out, ref) -> float:
    import torch

    out64, ref64 = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    finite = torch.isfinite(ref64) & torch.isfinite(out64)
    difference = float((out64[finite] - ref64[finite]).norm())
    scale = float(ref64[finite].norm())
    return difference / scale if scale > 0 else difference


class Evaluator:
    """Everything fixed for one problem: its references, baselines and costs."""

    def __init__(self, problem: Problem, options: Options | None = None):
        self.problem = problem
        self.options = (options or Options()).validate()
        self.device = problem.device
        self.on_gpu = self.device.type == "cuda"
        self.timing = self.options.timing and self.on_gpu
        self.expected: list[Expected] = []
        self.rechecks: dict[str, Expected] = {}  # timing case label -> unseen inputs
        self.costs: dict[str, Any] = {}  # timing case label -> Recognition
        self.baselines: dict[str, dict] = {}  # case label -> {"eager": {...}, "compiled": ...}
        self.baseline_records: list[dict] = []
        self.notes: list[str] = list(problem.notes)

    # --- the references ------------------------------------------------------------------

    def _seeds(self) -> random.Random:
        if self.options.seed is None:
            return random.Random(random.SystemRandom().randrange(2**31))
        return random.Random(self.options.seed)

    def prepare(self) -> None:
        """Generate every input and compute the references (before any solution loads)."""
        rng = self._seeds()
        for case in self.problem.tests:
            first = case.seed if case.seed is not None else rng.randrange(2**31)
            seeds = [first] + [rng.randrange(2**31) for _ in range(self.options.seeds - 1)]
            self.expected.extend(self._expect(case, seed) for seed in seeds)
        for case in self.problem.benchmarks:
            seed = case.seed if case.seed is not None else rng.randrange(2**31)
            self.expected.append(self._expect(case, seed))
        for case in self.problem.timing_cases():
            self.rechecks[case.label] = self._expect(case, rng.randrange(2**31))
            self.costs[case.label] = self._cost(self.rechecks[case.label])

    def _expect(self, case: Case, seed: int) -> Expected:
        problem = self.problem
        where = f"{problem.name} {case.label} seed {seed}"
        try:
            data = problem.generate(case, seed)
        except Exception as exc:
            raise KernelabError(
                f"{where}: generating the inputs failed: {describe_exception(exc)}"
            ) from None
        try:
            scratch = trees.clone(data)
            eager = problem.reference(scratch)
            _synchronize(self.device)
        except Exception as exc:
            raise KernelabError(
                f"{where}: the reference failed: {describe_exception(exc)}"
            ) from None
        buffers = set(trees.changed_paths(data, scratch))
        buffers |= self._written_over_nan(data, skip=buffers)
        eager = trees.clone(eager)  # the reference may return a buffer it reuses
        exact = self._exact(data, eager, where)
        input_dtype = trees.first_float_dtype(data)
        dtype = _dtype_name(input_dtype) if input_dtype is not None else None
        eager_error = 0.0
        for (_, out), (_, ref) in zip(trees.tensors(eager), trees.tensors(exact), strict=True):
            if out.is_floating_point():
                eager_error = max(eager_error, _relative_error(out, ref))
        return Expected(
            case, seed, data, eager, exact, buffers, dtype, EAGER_ERROR_MARGIN * eager_error
        )

    def _written_over_nan(self, data, skip: set[str]) -> set[str]:
        """Floating leaves the reference overwrites although they looked unchanged.

        A buffer from torch.empty may already hold the answer (the allocator hands back the
        block a previous call wrote for the same seed), so a before/after comparison misses
        it. Each such leaf is filled with NaN in a fresh copy, the reference runs, and a leaf
        holding no NaN afterwards was written: it is an output buffer. An input the reference
        only reads stays NaN.
        """
        written = set()
        for path, tensor in trees.tensors(data):
            if path in skip or not tensor.is_floating_point() or tensor.numel() == 0:
                continue
            probe = trees.clone(data)
            trees.poison(probe, {path})
            try:
                self.problem.reference(probe)
                _synchronize(self.device)
            except Exception:  # a reference that rejects NaN inputs: this leaf is an input
                continue
            leaf = dict(trees.tensors(probe))[path]
            if not leaf.isnan().any():
                written.add(path)
        return written

    def _exact(self, data, eager, where: str):
        """The reference run in float64; the eager output when that is impossible."""
        import torch

        try:
            exact = self.problem.reference64(trees.upcast(data))
            _synchronize(self.device)
            ours, theirs = trees.leaves(exact), trees.leaves(eager)
            same = len(ours) == len(theirs) and all(
                type(a) is type(b) and getattr(a, "shape", None) == getattr(b, "shape", None)
                for (_, a), (_, b) in zip(ours, theirs, strict=True)
            )
            if same:
                return trees.map_tensors(lambda t: t.detach().clone(), exact)
            reason = "its structure or shapes differ from the eager output's"
        except Exception as exc:
            reason = describe_exception(exc)
        note = f"{where}: reference compared in its own dtype (float64 run failed: {reason})"
        if note not in self.notes:
            self.notes.append(note)

        def up(tensor):
            return tensor.to(torch.float64) if tensor.is_floating_point() else tensor.clone()

        return trees.map_tensors(up, eager)

    def _cost(self, expected: Expected):
        from kernelab.evaluate.recognise import Recognition, declared, recognise

        problem = self.problem
        try:
            if problem.declared_cost is not None:
                return declared(
                    problem.declared_cost,
                    trees.clone(expected.data),
                    expected.dtype or "fp32",
                    problem.name,
                )
            return recognise(problem.reference, trees.clone(expected.data))
        except Exception as exc:
            return Recognition(None, f"cost unknown: {describe_exception(exc)}")

    # --- correctness ---------------------------------------------------------------------

    def _judge(self, out, expected: Expected) -> tuple[bool, float | None, float | None, str]:
        """(ok, worst error, threshold, message) for an output against the references."""
        import torch

        from kernelab.harness.check import compare

        got = trees.leaves(out)
        want = trees.leaves(expected.eager)
        exact = trees.leaves(expected.exact)
        if len(got) != len(want) or (
            isinstance(out, torch.Tensor) != isinstance(expected.eager, torch.Tensor)
        ):
            return (
                False, None, None,
                f"the solution returned {trees.describe(out)}; the reference returns "
                f"{trees.describe(expected.eager)}",
            )  # fmt: skip
        worst, limit = 0.0, None
        for (path, o), (_, e), (_, x) in zip(got, want, exact, strict=True):
            name = f"output{path}"
            if not isinstance(e, torch.Tensor):
                if o != e:
                    return False, None, None, f"{name} is {o!r}, the reference's is {e!r}"
                continue
            if not isinstance(o, torch.Tensor):
                return False, None, None, f"{name} is a {type(o).__name__}, not a tensor"
            if o.dtype != e.dtype:
                return (
                    False, None, None,
                    f"{name} has dtype {str(o.dtype).removeprefix('torch.')}; the reference "
                    f"returns {str(e.dtype).removeprefix('torch.')}",
                )  # fmt: skip
            if tuple(o.shape) != tuple(e.shape):
                return (
                    False, None, None,
                    f"{name} has shape {tuple(o.shape)}; the reference's is {tuple(e.shape)}",
                )  # fmt: skip
            if not e.is_floating_point():
                differ = int((o.detach().cpu() != e.detach().cpu()).sum())
                if differ:
                    return False, None, None, f"{name}: {differ} of {e.numel()} elements differ"
                continue
            dtype = expected.dtype or _dtype_name(e.dtype) or "fp32"
            result = compare(o, x, dtype=dtype)
            allowance = max(result.threshold, expected.allowance)
            relaxed = (
                not result.ok
                and math.isfinite(result.error)
                and result.error <= allowance
                and not result.message.startswith("output is constant")
            )
            if not result.ok and not relaxed:
                where = f"{name}: " if path else ""
                return False, result.error, result.threshold, where + result.message
            worst = max(worst, result.error)
            limit = allowance if relaxed else result.threshold
        return True, worst, limit, f"relative norm error {worst:.3g} <= {limit or 0:.3g}"

    def _check(self, run, expected: Expected, kind: str) -> CaseResult:
        from kernelab.harness.check import poisoned_allocations

        given = trees.clone(expected.data)
        trees.poison(given, expected.buffers)
        result = CaseResult(expected.case.label, kind, expected.seed, False, None, None, "")
        _synchronize(self.device)
        try:
            with poisoned_allocations():
                out = run(given)
                # Taken on the caller's stream before any synchronisation (rule 4).
                snapshot = trees.clone(out) if self.on_gpu else None
            _synchronize(self.device)
        except KernelabError:
            raise
        except Exception as exc:
            result.message = f"the solution raised {describe_exception(exc)}"
            return result
        mutation = trees.mutation_message(expected.data, given, expected.buffers)
        if mutation:
            result.message = mutation
            return result
        ok, error, limit, message = self._judge(out, expected)
        result.error, result.threshold = error, limit
        if ok and snapshot is not None:
            ready, _, _, late = self._judge(snapshot, expected)
            if not ready:
                result.message = (
                    "the output was not ready on the caller's stream when the call returned "
                    f"(work on another stream not synchronised with it): {late}"
                )
                return result
        if self.problem.checker is not None:
            try:
                own_ok, own_message = self.problem.checker(trees.clone(expected.data), out)
            except Exception as exc:
                own_ok, own_message = False, f"raised {describe_exception(exc)}"
            result.format_check = "passes" if own_ok else (own_message or "fails")
            if ok and not own_ok:
                result.message = f"{self.problem.checker_name} rejects it: {result.format_check}"
                return result
        result.ok, result.message = ok, message
        if not ok and result.format_check == "passes":
            result.message += f" ({self.problem.checker_name} alone would have passed it)"
        return result

    # --- timing --------------------------------------------------------------------------

    def _time(self, fn):
        from kernelab.harness.timing import benchmark

        return benchmark(
            fn,
            mode=self.options.mode,
            min_samples=self.options.min_samples,
            max_time_s=self.options.max_time_s,
        )

    def measure_baselines(self) -> dict[str, dict]:
        """Eager PyTorch and torch.compile of the reference at each timing case (GPU only)."""
        if not self.timing or self.baselines:
            return self.baselines
        from kernelab.output import note

        compiled = None
        if self.options.compile:
            try:
                compiled = self.problem.compile_reference()
            except Exception as exc:
                self.notes.append(
                    f"torch.compile of the reference failed: {describe_exception(exc)}"
                )
        for case in self.problem.timing_cases():
            expected = self.rechecks[case.label]
            entry: dict = {}
            found = self.costs.get(case.label)
            note(f"{self.problem.name} {case.label}: timing eager PyTorch")
            eager_data = trees.clone(expected.data)
            timing = self._time(lambda d=eager_data: self.problem.reference(d))
            entry["eager"] = {"median_ms": timing.median_ms, "rel_noise": timing.rel_noise}
            self.baseline_records.append(self._record(case, "eager", timing, found))
            if compiled is not None:
                note(f"{self.problem.name} {case.label}: timing torch.compile")
                compiled_data = trees.clone(expected.data)
                try:
                    timing = self._time(lambda d=compiled_data, c=compiled: c(d))
                    entry["compiled"] = {
                        "median_ms": timing.median_ms,
                        "rel_noise": timing.rel_noise,
                    }
                    self.baseline_records.append(self._record(case, "torch.compile", timing, found))
                except Exception as exc:
                    self.notes.append(
                        f"torch.compile of the reference failed at {case.label}: "
                        f"{describe_exception(exc)}"
                    )
                    compiled = None
            self.baselines[case.label] = entry
        return self.baselines

    def _placements(self, cost, time_ms: float) -> tuple[dict | None, list[str]]:
        from kernelab.harness.ceilings import measured_ceilings_for, this_gpu
        from kernelab.roofline.model import Ceilings, place

        spec = this_gpu("timing").spec
        if spec is None or cost is None:
            return None, []
        placed, warnings = {}, []
        for ceilings in (Ceilings.from_spec(spec), measured_ceilings_for(spec)):
            if ceilings is None:
                continue
            try:
                placement = place(cost, ceilings, time_ms=time_ms)
            except KernelabError as exc:
                warnings.append(f"not placed on the {ceilings.source} roofline: {exc}")
                continue
            placed[ceilings.source] = placement.to_dict()
            if placement.faster_than_light and placement.warning not in warnings:
                warnings.append(placement.warning)
        return placed or None, warnings

    # --- the verdict ---------------------------------------------------------------------

    def evaluate(self, solution_path: str | Path) -> Verdict:
        solution_path = Path(solution_path)
        if not self.expected:
            self.prepare()
        verdict = Verdict(
            problem=self.problem.name,
            format=self.problem.format,
            solution=str(solution_path),
            status="fail",
            message="",
            device=str(self.device),
            notes=list(self.notes),
            roofline=[
                {"case": label, "reason": found.reason, "cost": found.cost and found.cost.to_dict()}
                for label, found in self.costs.items()
            ],
        )
        try:
            run = self.problem.load_solution(solution_path)
        except Exception as exc:
            verdict.message = f"the solution failed to load: {describe_exception(exc)}"
            return verdict

        for expected in self.expected:
            result = self._check(run, expected, expected.case.kind)
            verdict.cases.append(result)
            if not result.ok:
                verdict.message = self._where(result) + result.message
                return verdict

        self.measure_baselines()
        for case in self.problem.timing_cases():
            recheck = self.rechecks[case.label]
            failure = self._exercise(run, case, verdict)
            if failure:
                verdict.message = failure
                return verdict
            result = self._check(run, recheck, "recheck")
            verdict.cases.append(result)
            if not result.ok:
                calls = "timing" if self.timing else f"{self.options.repeat_calls} calls"
                verdict.message = (
                    f"after {calls}, on new inputs: " + self._where(result) + result.message
                )
                return verdict

        self._conclude(verdict)
        return verdict

    def _where(self, result: CaseResult) -> str:
        return f"{result.case}, seed {result.seed}: "

    def _exercise(self, run, case: Case, verdict: Verdict) -> str | None:
        """Time the candidate at `case` (GPU) or call it repeat_calls times (CPU); the
        failure message, or None."""
        first = next(e for e in self.expected if e.case.label == case.label)
        given = trees.clone(first.data)
        if not self.timing:
            try:
                for _ in range(self.options.repeat_calls):
                    run(given)
            except Exception as exc:
                return f"{case.label}: a repeated call raised {describe_exception(exc)}"
            return None
        from kernelab.output import note

        note(f"{self.problem.name} {case.label}: timing {Path(verdict.solution).name}")
        try:
            timing = self._time(lambda: run(given))
        except KernelabError:
            raise
        except Exception as exc:
            return f"{case.label}: the solution raised while timed: {describe_exception(exc)}"
        if timing.fenced:
            return (
                f"{case.label}: the call returns while work it started is still running "
                "(on a stream the caller's stream does not wait for): its result is not "
                "ordered with the caller's work"
            )
        base = self.baselines.get(case.label, {})
        eager = base.get("eager", {}).get("median_ms")
        compiled = base.get("compiled", {}).get("median_ms")
        found = self.costs.get(case.label)
        placement, warnings = self._placements(found.cost if found else None, timing.median_ms)
        verdict.timings.append(
            Timed(
                case=case.label,
                solution_ms=timing.median_ms,
                eager_ms=eager,
                compiled_ms=compiled,
                speedup_vs_eager=eager / timing.median_ms if eager else None,
                speedup_vs_compiled=compiled / timing.median_ms if compiled else None,
                rel_noise=timing.rel_noise,
                mode=timing.mode,
                placement=placement,
                warnings=warnings + list(timing.warnings),
            )
        )
        verdict.records.append(self._record(case, Path(verdict.solution).stem, timing, found))
        return None

    def _record(self, case: Case, implementation: str, timing, found) -> dict:
        from kernelab.environment import software_versions
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import Record

        identity = this_gpu("timing")
        cost = found.cost if found else None
        seconds = timing.median_ms * 1e-3
        return Record(
            op=f"{self.problem.format}:{self.problem.name}",
            implementation=implementation,
            shape={"case": case.label},
            dtype=cost.dtype if cost else "",
            mode=timing.mode,
            samples_ms=list(timing.samples_ms),
            stats=timing.summary.to_dict(),
            gpu=identity.name,
            gpu_id=identity.gpu_id,
            driver=identity.driver,
            versions=software_versions(),
            clocks=timing.clocks,
            flops=cost.flops if cost else 0.0,
            bytes=cost.bytes if cost else 0.0,
            achieved_tflops=cost.flops / seconds / 1e12 if cost else None,
            achieved_gbps=cost.bytes / seconds / 1e9 if cost else None,
            warnings=list(timing.warnings),
        ).to_dict()

    def _conclude(self, verdict: Verdict) -> None:
        checked = [c for c in verdict.cases if c.error is not None]
        worst = max((c.error for c in checked), default=0.0)
        runs = len(verdict.cases)
        verdict.status = "pass"
        verdict.message = (
            f"correct on {runs} runs (cases x seeds), worst relative error {worst:.3g}"
        )
        if not self.timing:
            why = "no GPU" if not self.on_gpu else "timing off"
            verdict.notes.append(f"timing skipped ({why}); correctness only")
            return
        flagged = [
            (timed.case, w)
            for timed in verdict.timings
            for w in timed.warnings
            if "speed of light" in w
        ]
        if flagged:
            verdict.status = "suspect"
            case, warning = flagged[0]
            verdict.message += f"; but at {case} it timed under the roofline floor: {warning}"
            return
        speedups = [t.speedup_vs_eager for t in verdict.timings if t.speedup_vs_eager]
        if speedups:
            geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
            verdict.message += f"; {geomean:.2f}x eager PyTorch (geometric mean)"
