"""The verdict on one solution: is it correct, how fast is it, and where does it sit.

The Evaluator is the judge: it runs in a process that never imports the solution. Every
reference, comparison and decision below happens here, with the judge's own torch; the
solution runs in its worker (kernelab.evaluate.sandbox, kernelab.evaluate.worker), which
receives inputs and sends back outputs, as tensors.

Correctness, for every case and several seeds (each test case at its own seed and
`seeds - 1` more; each benchmark case at its own):

1. The inputs are generated and the reference runs on a copy of them, twice: as the problem
   writes it (the eager output: its structure and dtypes are the specification) and with
   every floating tensor upcast to float64 (the exact answer). Inputs the reference writes
   into are output buffers (GPU MODE preallocates them): those it changed, and those it
   overwrites when handed them full of NaN (an empty buffer may already hold the answer).
   The candidate may write those, and receives them filled with NaN, so an element it
   forgets cannot hold the right answer. Each such set (an Expected) is made once at set-up,
   before any solution loads, to learn its output buffers and its size and to report a
   problem whose generator or reference fails as the problem's failure; then it is dropped,
   and only its seed is kept (a Check). For each solution the set is made again from that
   seed just before it is checked and dropped after, so the judge holds one correctness set
   at a time (the memory plan: kernelab.evaluate.footprint).
2. The candidate receives its own copy (sent to its worker; on a CPU, in pages the judge
   shares and reads back itself: kernelab.evaluate.arena), with torch's allocator poisoned
   there until timing starts (new tensors hold NaN:
   kernelab.harness.check.poisoned_allocations); the worker sends back the output.
3. It fails when it raises, writes into an input it should only read, returns another
   structure, dtype or shape, or misses the exact answer by more than kernelab's
   scale-aware threshold (kernelab.harness.check.compare: all-zeros and constant outputs
   fail even where a plain allclose passes them). The threshold is the larger of the dtype's
   derived threshold and twice the eager reference's own error, so a problem whose reference
   itself runs in TF32 (a cuDNN convolution) does not reject a kernel as precise as it.
4. On a GPU, the worker copies the output on the caller's stream right after the call, before
   any synchronisation: a candidate whose work runs on another stream that the caller's
   stream never waits for returns an output that is not ready there, and that copy is wrong.
5. The problem's own checker (GPU MODE's check_implementation, KernelBench's allclose) must
   pass too.

Then the candidate runs many times (kernelab.evaluate.timed_calls): timed on a GPU, with the
same loop and mode for eager PyTorch and torch.compile of the reference (reported as
speedups), or called `repeat_calls` times on a CPU, where timing is skipped. Every call's
inputs are copied into the same tensors (new values at the same addresses). A timed call
gets a set of its own, made in the worker by the problem's generator from a seed the judge
draws for it and hands over when the call comes, against the previous output's fingerprint,
so an answer remembered by the inputs' content is never reused and no call can do the work
of later ones. Where making a set is slow (FRESH_MAKE_MAX_MS) or not reproducible from its
seed, and without timing, calls rotate through POOL_SETS sets (fewer where the device's
memory is short: the plan of kernelab.evaluate.footprint, made before any input exists), and
when timed a note says that answers remembered by content go uncaught there. Without timing
every call is checked in full. When timed, every output is kept and fingerprinted inside the judge's clock, and the
outputs of some calls, chosen by the judge after the batch from a secret, come back, must
match their fingerprints (a digest of their bytes: kernelab.evaluate.digest) and are checked
against the reference of their set (made again in the judge from its seed): an answer
remembered from an earlier call, an empty tensor returned when a timer is on the stack, or
an answer made after the batch, fails. The judge bounds the reported time by its own wall
clock around the batch (kernelab.evaluate.observed). Afterwards the output is checked again
on inputs it has never seen, which catches behaviour that changes after N calls.

Roofline: the cost is declared by the problem or recognised from the reference's aten ops
(kernelab.evaluate.recognise); on a catalog GPU the candidate's time is placed on the
datasheet roofline (and the measured one when cached). A time under the floor makes the
verdict "suspect", never a celebrated speedup.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError
from kernelab.evaluate import trees
from kernelab.evaluate.arena import Arena, tree_bytes
from kernelab.evaluate.footprint import (
    GB,
    DoesNotFit,
    LivePeak,
    MemoryPlan,
    SetSize,
    available_bytes,
    fake_set_size,
    is_out_of_memory,
    plan,
    release_cached,
    set_size,
)
from kernelab.evaluate.problem import Case, Problem, describe_exception
from kernelab.evaluate.recognise import Recognition, declared, recognise
from kernelab.evaluate.sandbox import Worker, WorkerGone
from kernelab.evaluate.timed_calls import compatible
from kernelab.evaluate.timed_phase import TimedPhase
from kernelab.evaluate.verdict import (
    DEFAULT_TIMEOUT_S,
    EAGER_ERROR_MARGIN,
    FRESH_MAKE_MAX_MS,
    KEPT_OUTPUT_BYTES,
    POOL_SETS,
    SUSPECT_MARKS,
    CaseResult,
    Expected,
    Options,
    Verdict,
)
from kernelab.harness import blocks
from kernelab.harness.check import compare
from kernelab.harness.tolerances import threshold
from kernelab.spec.op_spec import name_of


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dtype_name(dtype) -> str | None:
    try:
        name = name_of(dtype)
        threshold(name)
    except KernelabError:
        return None
    return name


def _odd_tensor(out, ref) -> str | None:
    """Why an output leaf cannot stand where the reference has tensor `ref`, or None: not a
    tensor, a subclass, not strided (sparse), without values (meta), on another device."""
    import torch

    if not isinstance(out, torch.Tensor):
        return f"is a {type(out).__name__}, not a tensor"
    if type(out) not in (torch.Tensor, torch.nn.Parameter):
        return f"is a tensor subclass ({type(out).__name__}), not a tensor"
    if out.layout != torch.strided:
        return f"is a {str(out.layout).removeprefix('torch.')} tensor; the reference's is dense"
    if out.device.type == "meta":
        return "is a meta tensor: it holds no values"
    if out.device.type != ref.device.type:
        return f"is on {out.device.type}; the reference's is on {ref.device.type}"
    return None


@dataclass(frozen=True)
class Check:
    """A correctness set as the judge keeps it between set-up and checking: its case and
    seed (the set is made from them when it is checked), and what making it at set-up found:
    the output buffers and the inputs' bytes (the CPU arena is sized from them)."""

    case: Case
    seed: int
    buffers: frozenset
    input_bytes: int


class Evaluator(TimedPhase):
    """Everything fixed for one problem: its references, baselines and costs."""

    def __init__(self, problem: Problem, options: Options | None = None):
        self.problem = problem
        self.options = (options or Options()).validate()
        self.device = problem.device
        self.on_gpu = self.device.type == "cuda"
        self.timing = self.options.timing and self.on_gpu
        self.checks: list[Check] = []  # the correctness sets, in the order they are checked
        self.prepared = False
        self.rechecks: dict[str, Expected] = {}  # timing case label -> unseen inputs
        self.pools: dict[str, list[Expected]] = {}  # timing case label -> rotated input sets
        self.fresh: dict[str, bool] = {}  # timing case label -> a new input set per timed call
        self.loop_ms: dict[str, float] = {}  # timing case label -> the timed loop's own ms a call
        self.costs: dict[str, Any] = {}  # timing case label -> Recognition
        self.baselines: dict[str, dict] = {}  # case label -> {"eager": {...}, "compiled": ...}
        self.baseline_records: list[dict] = []
        self.notes: list[str] = list(problem.notes)
        self.protect: list[str] = []  # paths no worker may write besides the problem's own
        self.arena = None  # the inputs' shared pages while a solution is judged (CPU)
        self._timing_started = False  # the worker was told its calls are timed from now on
        self.memory: MemoryPlan | None = None  # how the judge fits the device (prepare)
        self._shelved: set[str] = set()  # timing case labels whose re-check is made when checked

    # --- the references ------------------------------------------------------------------

    def _seeds(self) -> random.Random:
        if self.options.seed is None:
            return random.Random(random.SystemRandom().randrange(2**31))
        return random.Random(self.options.seed)

    def prepare(self) -> None:
        """Generate every input and compute the references (before any solution loads),
        within the memory plan (footprint.DoesNotFit when even one input set is too many).
        The correctness sets are made one at a time and dropped, their seeds kept (Check);
        the sets timing needs (re-checks, pools) are kept, and the baselines timed."""
        self.memory = self._plan_memory()
        self.checks = []
        rng = self._seeds()
        for case in self.problem.tests:
            first = case.seed if case.seed is not None else rng.randrange(2**31)
            seeds = [first] + [rng.randrange(2**31) for _ in range(self.options.seeds - 1)]
            self.checks.extend(self._dry_run(case, seed) for seed in seeds)
        for case in self.problem.benchmarks:
            seed = case.seed if case.seed is not None else rng.randrange(2**31)
            self.checks.append(self._dry_run(case, seed))
        for case in self.problem.timing_cases():
            self.rechecks[case.label] = self._expect(case, rng.randrange(2**31))
            self.costs[case.label] = self._cost(self.rechecks[case.label])
            why = self._why_not_fresh(case, rng) if self.timing else "not timed"
            if why is not None and self.memory.pool_sets == 0:
                # the plan fits only where no set of this case is kept (footprint.plan)
                raise DoesNotFit(
                    f"{self.memory.refusal}; a set per timed call would fit, but {case.label} "
                    f"cannot have one: {why}",
                    {**self.memory.to_dict(), "pool_sets": 1},
                )
            self.fresh[case.label] = why is None
            self.pools[case.label] = [] if why is None else self._pool(case, rng)
            if self.timing and why is not None:
                self.notes.append(
                    f"{case.label}: timed calls rotate through {len(self.pools[case.label])} "
                    f"input set(s), not a new set per call ({why}): an answer remembered by "
                    "the inputs' content is not caught there"
                )
        if any(self.pools.values()):
            self._note_a_short_pool()
        if self.timing and self.options.mode == "graph":
            self.notes.append(
                "graph mode does not apply to eval (every call gets new inputs, loaded outside "
                "the clock): calls are timed one by one, as in hot mode"
            )
        if self.timing:
            # Before any worker exists: nothing a solution starts can slow these down
            self.measure_baselines()
        if self.memory.pool_sets == 0:
            # the loop's cost keeps outputs as a batch does: not beside the re-checks
            self._shelve_rechecks()
            release_cached(self.device)  # the re-checks' memory, for the worker's share
        if self.timing:
            self.measure_loops()
        self.prepared = True

    def _shelve_rechecks(self) -> None:
        """Where the plan keeps no set of a timing case (footprint.plan's pool_sets 0, every
        timed call on a set of its own), keep of each re-check only its seed, its output
        buffers and its tensors' shapes and dtypes (meta tensors): it is made again from its
        seed when it is checked (_recheck), after the timed calls."""
        import torch

        def meta(tensor):
            return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype,
                                       device="meta")  # fmt: skip

        for label, kept in self.rechecks.items():
            self.rechecks[label] = Expected(
                kept.case, kept.seed, trees.map_tensors(meta, kept.data),
                trees.map_tensors(meta, kept.eager), trees.map_tensors(meta, kept.exact),
                kept.buffers, kept.dtype, kept.allowance,
            )  # fmt: skip
            self._shelved.add(label)

    def _recheck(self, label: str) -> Expected:
        """The re-check of a timing case: kept since set-up, or made again from its seed."""
        kept = self.rechecks[label]
        if label not in self._shelved:
            return kept
        return self._expect(kept.case, kept.seed, buffers=set(kept.buffers))

    def _dry_run(self, case: Case, seed: int) -> Check:
        """Make the set of `case` at `seed` as it will be checked, and keep only what making
        it found: a generator or reference that fails, fails here, at set-up (the problem's
        failure, before any solution loads), as does an allocation that does not fit."""
        expected = self._expect(case, seed)
        return Check(case, seed, frozenset(expected.buffers), tree_bytes(expected.data))

    def expectations(self):
        """The correctness sets in the order they are checked, each made from its seed when
        the next is asked for (with the output buffers set-up found for it): hold one, and
        drop it before asking for the next, and one set at a time is alive."""
        for check in self.checks:
            yield self._make(check)

    def _make(self, check: Check) -> Expected:
        return self._expect(check.case, check.seed, buffers=set(check.buffers))

    def _set_sizes(self, cases: list[Case]) -> tuple[list[SetSize], str]:
        """The size of one set of each case: from fake tensors, else from one real set-up."""
        try:
            sizes = [fake_set_size(self.problem, case) for case in cases]
            return sizes, "from the problem run on fake tensors"
        except Exception as exc:
            why = describe_exception(exc)
        sizes = []
        for case in cases:
            where = f"{self.problem.name} {case.label}"
            try:
                with LivePeak() as made:
                    data = self.problem.generate(case, 0)
            except Exception as exc:
                if is_out_of_memory(exc):
                    raise
                raise KernelabError(
                    f"{where}: generating the inputs failed: {describe_exception(exc)}"
                ) from None
            try:
                scratch = trees.clone(data)
                with LivePeak() as ran:
                    output = self.problem.reference(scratch)
            except Exception as exc:
                if is_out_of_memory(exc):
                    raise
                raise KernelabError(
                    f"{where}: the reference failed: {describe_exception(exc)}"
                ) from None
            del scratch
            sizes.append(set_size(data, output, make=made.peak, run=ran.peak,
                                  checker_outputs=self.problem.checker_outputs))  # fmt: skip
            del data, output
        return sizes, f"measured on one real set-up per case (fake tensors failed: {why})"

    def _plan_memory(self) -> MemoryPlan:
        """How many input sets the timed calls rotate through, and how many bytes of a
        batch's outputs the worker keeps, so that everything fits the device."""
        problem = self.problem
        cases = [*problem.tests, *problem.benchmarks]
        timing = problem.timing_cases()
        sizes, how = self._set_sizes(cases)
        size_of = {(c.kind, c.label): s for c, s in zip(cases, sizes, strict=True)}
        # the correctness sets: one at a time, whatever the seeds (footprint.need_bytes)
        checked = [size_of[(c.kind, c.label)] for c in cases]
        # each timing case's re-check on unseen inputs and its pool, kept throughout
        timed = [size_of[(c.kind, c.label)] for c in timing]
        memory = plan(checked, timed, wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                      kept_cap=KEPT_OUTPUT_BYTES, on_gpu=self.on_gpu,
                      available=available_bytes(self.device), how=how,
                      fresh=self.timing)  # fmt: skip
        if memory.available_bytes is None:
            self.notes.append(f"memory not planned: {memory.what}; {POOL_SETS} input sets")
        return memory

    def _note_a_short_pool(self) -> None:
        """Say so when the memory plan cut the pool the calls rotate through."""
        memory = self.memory
        if memory is None or memory.available_bytes is None or memory.pool_sets >= POOL_SETS:
            return
        self.notes.append(
            f"timed calls rotate through {memory.pool_sets} input set(s), not {POOL_SETS}: "
            f"that needs {memory.need_bytes / GB:.1f} GB of the {memory.budget_bytes / GB:.1f}"
            f" GB planned ({memory.share:.0%} of {memory.available_bytes / GB:.1f} GB "
            f"{memory.what}; sizes {memory.how}); every sampled timed output is still checked "
            "against the reference of its set"
        )

    def _pool(self, case: Case, rng: random.Random) -> list[Expected]:
        sets = self.memory.pool_sets if self.memory else POOL_SETS
        pool = [self._expect(case, rng.randrange(2**31)) for _ in range(sets)]
        why = compatible([expected.data for expected in pool])
        if why is None:
            return pool
        self.notes.append(f"{case.label}: timed calls all get one input set ({why})")
        return pool[:1]

    def _why_not_fresh(self, case: Case, rng: random.Random) -> str | None:
        """None when each timed call can get an input set of its own, made in the worker from
        a seed (and again here, from that seed, to check it); else why not. The generator
        must give the same set for the same seed and sets of one structure, shape and dtype
        for any two seeds (every call is loaded into one tree of tensors), fast enough to run
        before every call. Memory is no reason: with a set per call neither side keeps a pool,
        which the plan made room for, and the judge holds one set more at a time."""
        took = []

        def make(seed: int):
            begin = time.perf_counter()
            data = self.problem.generate(case, seed)
            _synchronize(self.device)
            took.append((time.perf_counter() - begin) * 1e3)
            return data

        seed = rng.randrange(2**31)
        first = make(seed)  # two sets at most at a time: within the plan's transient
        if not trees.same_set(first, make(seed)):
            return "the generator gives different inputs for the same seed"
        if compatible([first, make(rng.randrange(2**31))]) is not None:
            return "its input sets differ in structure, shape or dtype from seed to seed"
        del first
        if min(took) > FRESH_MAKE_MAX_MS:
            return f"making one set takes {min(took):.0f} ms (more than {FRESH_MAKE_MAX_MS:g})"
        return None

    def _expect(self, case: Case, seed: int, buffers: set[str] | None = None) -> Expected:
        """The inputs of `case` at `seed` and the references on them. `buffers` (the output
        buffers, when another set of the case has found them) saves the search."""
        problem = self.problem
        where = f"{problem.name} {case.label} seed {seed}"
        try:
            data = problem.generate(case, seed)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise  # the judge's to report as a skip, not the problem's failure
            raise KernelabError(
                f"{where}: generating the inputs failed: {describe_exception(exc)}"
            ) from None
        try:
            scratch = trees.clone(data)
            eager = problem.reference(scratch)
            _synchronize(self.device)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise
            raise KernelabError(
                f"{where}: the reference failed: {describe_exception(exc)}"
            ) from None
        written = set(trees.changed_paths(data, scratch)) if buffers is None else None
        del scratch  # the reference's copy of the inputs: not held from here on
        eager = trees.clone(eager)  # the reference may return a buffer it reuses
        if buffers is None:
            buffers = written | self._written_over_nan(data, skip=written)
        exact = self._exact(data, eager, where)
        input_dtype = trees.first_float_dtype(data)
        dtype = _dtype_name(input_dtype) if input_dtype is not None else None
        eager_error = 0.0
        for (_, out), (_, ref) in zip(trees.tensors(eager), trees.tensors(exact), strict=True):
            if out.is_floating_point():
                eager_error = max(eager_error, blocks.relative_error(out, ref))
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
                if isinstance(o, torch.Tensor) or type(o) is not type(e) or o != e:
                    return False, None, None, f"{name} is {o!r}, the reference's is {e!r}"
                continue
            odd = _odd_tensor(o, e)
            if odd:
                return False, None, None, f"{name} {odd}"
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

    def _given(self, expected: Expected):
        """The candidate's copy of a set's inputs, its output buffers filled with NaN."""
        given = trees.clone(expected.data)
        trees.poison(given, expected.buffers)
        return given

    def _check(self, worker, expected: Expected, kind: str) -> CaseResult:
        """One call of the candidate on a copy of `expected`'s inputs, judged. What the judge
        holds beside the set is one copy of the inputs, the output and its snapshot at most,
        and the comparisons' blocks (footprint.SetSize.transient): the copy sent is dropped
        once sent, the inputs sent back once checked, the snapshot once judged."""
        result = CaseResult(expected.case.label, kind, expected.seed, False, None, None, "")
        if self.arena is not None:
            layout = self.arena.write(self._given(expected))
            reply = worker.ask({"kind": "call", "layout": layout})
            given = self.arena.read(layout)  # the judge's own reading of the shared pages
        else:
            reply = worker.ask_made(lambda: {"kind": "call", "data": self._given(expected)})
            given = reply.pop("given", None)
        if "raised" in reply:
            result.message = f"the solution raised {reply['raised']}"
            return result
        out, snapshot = reply.pop("out", None), reply.pop("snapshot", None)
        if self.on_gpu and snapshot is None:
            snapshot = out  # nothing to compare: the output itself must be right
        if not trees.same_structure(given, expected.data):
            result.message = "the worker did not send back the inputs it was given"
            return result
        mutation = trees.mutation_message(expected.data, given, expected.buffers)
        del given
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
        del snapshot
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

    # --- the verdict ---------------------------------------------------------------------

    def evaluate(self, solution_path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> Verdict:
        """The verdict on one solution, run in a worker of its own for at most `timeout` s.

        Nothing the solution does raises out of here: an output the judge cannot compare, or
        any other exception while judging it, is this solution's "fail"."""
        solution_path = Path(solution_path)
        if not self.prepared:
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
            memory=self.memory.to_dict() if self.memory else {},
        )
        self.arena = self._arena(verdict)
        self._timing_started = False
        worker = Worker(
            self.problem, solution_path, timeout, protect=self.protect,
            pass_fds=() if self.arena is None else (self.arena.fd,),
        )  # fmt: skip
        try:
            with worker:
                verdict.wall = worker.wall
                verdict.notes.extend(f"wall lowered: {line}" for line in worker.wall["refused"])
                self._judge_in(worker, verdict)
        except WorkerGone as gone:
            verdict.status, verdict.message = gone.status, gone.message
            verdict.timings, verdict.records = [], []
        except Exception as exc:
            verdict.status = "fail"
            verdict.message = f"judging it raised {describe_exception(exc)}"
            verdict.timings, verdict.records = [], []
        finally:
            if self.arena is not None:
                self.arena.close()
                self.arena = None
        if not verdict.wall:
            verdict.wall = worker.wall
            verdict.notes.extend(f"wall lowered: {line}" for line in worker.wall["refused"])
        return verdict

    def _arena(self, verdict: Verdict):
        """Shared pages for every call's inputs (on a CPU; kernelab.evaluate.arena), or None:
        then the worker reports what a call left in its inputs."""

        if self.on_gpu:
            return None
        sets = [*self.rechecks.values(), *(e for p in self.pools.values() for e in p)]
        sizes = [check.input_bytes for check in self.checks]
        sizes += [tree_bytes(expected.data) for expected in sets]
        try:
            return Arena(max(sizes))
        except Exception as exc:
            verdict.notes.append(
                f"wall lowered: no shared memory for the inputs ({describe_exception(exc)}): the "
                "worker reports what each call left in them"
            )
            return None

    def _judge_in(self, worker, verdict: Verdict) -> None:
        loaded = worker.ask({"kind": "solution", "path": verdict.solution})
        if "failed" in loaded:
            verdict.message = f"the solution failed to load: {loaded['failed']}"
            return
        for check in self.checks:
            # made now and dropped after its check: one correctness set alive at a time
            try:
                expected = self._make(check)
            except Exception as exc:
                self._making_failed(verdict, check, exc)
                return
            result = self._check(worker, expected, check.case.kind)
            del expected
            verdict.cases.append(result)
            if not result.ok:
                verdict.message = self._where(result) + result.message
                return

        self.measure_baselines()
        for case in self.problem.timing_cases():
            failure = self._exercise(worker, case, verdict)
            if failure:
                verdict.message = failure
                return
            try:
                recheck = self._recheck(case.label)
            except Exception as exc:
                check = Check(case, self.rechecks[case.label].seed, frozenset(), 0)
                self._making_failed(verdict, check, exc)
                return
            result = self._check(worker, recheck, "recheck")
            del recheck
            verdict.cases.append(result)
            if not result.ok:
                calls = "timing" if self.timing else f"{self.options.repeat_calls} calls"
                verdict.message = (
                    f"after {calls}, on new inputs: " + self._where(result) + result.message
                )
                return

        self._conclude(verdict)

    def _making_failed(self, verdict: Verdict, check: Check, exc: Exception) -> None:
        """A correctness set that set-up made could not be made again (a generator or
        reference that is not reproducible, memory the plan did not foresee): the problem's
        failure or a skip, never the solution's fail; the messages set-up would give."""
        if is_out_of_memory(exc):
            memory = self.memory
            free, what = available_bytes(self.device)
            has = f"{free / GB:.1f} GB {what} now" if free is not None else what
            planned = f"more than the {memory.need_bytes / GB:.1f} GB planned" if memory else "more"
            device = "card" if self.on_gpu else "machine"
            verdict.status = "skipped"
            verdict.message = (
                f"skipped: needs {planned}, {device} has {has}: making the references of "
                f"{check.case.label} seed {check.seed} ran out of memory "
                f"({describe_exception(exc)[:120]})"
            )
            return
        verdict.status = "error"
        verdict.message = (
            str(exc) if isinstance(exc, KernelabError)
            else f"setting up the problem raised {describe_exception(exc)}"
        )  # fmt: skip

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
            if any(mark in w for mark in SUSPECT_MARKS)
        ]
        if flagged:
            verdict.status = "suspect"
            case, warning = flagged[0]
            why = "timed under the roofline floor" if "speed of light" in warning else "lied"
            verdict.message += f"; but at {case} it {why}: {warning}"
            return
        speedups = [t.speedup_vs_eager for t in verdict.timings if t.speedup_vs_eager]
        if speedups:
            geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
            verdict.message += (
                f"; {geomean:.2f}x eager PyTorch in per-call latency, launch path included"
                " (geometric mean)"
            )
