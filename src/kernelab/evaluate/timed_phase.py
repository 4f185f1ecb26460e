"""The timed half of judging a solution (kernelab.evaluate.evaluator's Evaluator inherits it):
the eager and compiled baselines, the batches of timed calls on rotated inputs, the outputs
checked after each batch at calls the judge chooses, and the records and roofline placements
of the times."""

from __future__ import annotations

import math
import random
import statistics
import time
from pathlib import Path

from kernelab.environment import software_versions
from kernelab.errors import KernelabError
from kernelab.evaluate import observed, trees
from kernelab.evaluate.footprint import release_cached
from kernelab.evaluate.problem import Case, describe_exception
from kernelab.evaluate.timed_calls import UNREADABLE, Fresh, Rotation, fingerprint, run_calls
from kernelab.evaluate.verdict import (
    CHECKED_EXTRA,
    CHECKED_MAX,
    CHECKED_SHARE,
    KEPT_OUTPUT_BYTES,
    MAX_TIMED_CALLS,
    POOL_SETS,
    PROBE_CALLS,
    WARMUP_CALLS,
    CaseResult,
    Expected,
    Timed,
    Verdict,
)
from kernelab.harness import ceilings as gpu_ceilings
from kernelab.harness.records import Record
from kernelab.harness.stats import summarize
from kernelab.harness.timing import Timing
from kernelab.output import note
from kernelab.roofline.model import Ceilings, place


def _is_fingerprint(value) -> bool:
    return isinstance(value, list) and all(isinstance(part, str) for part in value)


def _per_call_ms(timing) -> float:
    """The time a verdict reports for a batch: the mean of its calls, so that every call's
    work counts wherever it is done (a median would report only the calls a solution left
    light); the judge's wall-clock floor (kernelab.evaluate.observed) bounds the same mean."""
    return timing.summary.mean


LOOP_RUNS = 3  # runs of the null loop whose median is the loop's cost per call


class TimedPhase:
    """Timing, for the Evaluator: it holds the problem, the options and the references."""

    def _calls_for(self, per_call_ms: float) -> int:
        """Timed calls in one batch: --max-time's worth, at least --min-samples."""
        fit = int(self.options.max_time_s * 1e3 / max(per_call_ms, 1e-6))
        return max(self.options.min_samples, min(MAX_TIMED_CALLS, fit))

    def _timing(self, samples: list[float], warnings: list[str]):
        mode = "cold" if self.options.mode == "cold" else "hot"
        return Timing(samples, mode, summarize(samples), "fixed calls", warnings=warnings)

    def _sets(self, label: str, seeds: list[int] | None) -> Fresh | Rotation:
        """The input sets of a batch at `label`, as the judge makes them: a set per call from
        `seeds`, or (None) the pool in turn."""
        if seeds is None:
            return Rotation([expected.data for expected in self.pools[label]])
        case = self.rechecks[label].case
        return Fresh(lambda seed: self.problem.generate(case, seed), seeds)

    def _call_seeds(self, label: str, calls: int) -> list[int] | None:
        """A seed for each of `calls` calls, drawn from the operating system's randomness
        (never from --seed, which the worker might learn), or None where the calls at
        `label` rotate through a pool."""
        if not self.fresh.get(label):
            return None
        draw = random.SystemRandom()
        return [draw.randrange(2**31) for _ in range(calls)]

    def _time_here(self, call, label: str):
        """Time a trusted callable (a baseline) with the solution's loop, in the judge."""

        buffers = self.rechecks[label].buffers
        mode = self.options.mode

        def batch(calls: int) -> list[float]:
            sets = self._sets(label, self._call_seeds(label, calls))
            return run_calls(call, sets, buffers=buffers, calls=calls, mode=mode, keep=False)[0]

        batch(WARMUP_CALLS)
        begin = time.perf_counter()
        batch(PROBE_CALLS)
        per_call = (time.perf_counter() - begin) * 1e3 / PROBE_CALLS
        return self._timing(batch(self._calls_for(per_call)), [])

    def measure_baselines(self) -> dict[str, dict]:
        """Eager PyTorch and torch.compile of the reference at each timing case (when timing)."""
        if not self.timing or self.baselines:
            return self.baselines

        compiled = None
        if self.options.compile:
            try:
                compiled = self.problem.compile_reference()
            except Exception as exc:
                self.notes.append(
                    f"torch.compile of the reference failed: {describe_exception(exc)}"
                )
        for case in self.problem.timing_cases():
            entry: dict = {}
            found = self.costs.get(case.label)
            note(f"{self.problem.name} {case.label}: timing eager PyTorch")
            timing = self._time_here(self.problem.reference, case.label)
            entry["eager"] = {"mean_ms": _per_call_ms(timing), "rel_noise": timing.rel_noise}
            self.baseline_records.append(self._record(case, "eager", timing, found))
            if compiled is not None:
                note(f"{self.problem.name} {case.label}: timing torch.compile")
                try:
                    timing = self._time_here(compiled, case.label)
                    entry["compiled"] = {
                        "mean_ms": _per_call_ms(timing),
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

    def measure_loops(self) -> dict[str, float]:
        """The timed loop's own cost per call at each timing case (a call that does nothing:
        observed.loop_cost_ms), the median of LOOP_RUNS runs, measured before any worker
        exists so that nothing a solution leaves running can inflate it (which would lower the
        floor on its faked times)."""
        if not self.timing or self.loop_ms:
            return self.loop_ms
        for case in self.problem.timing_cases():
            label, template = case.label, self.rechecks[case.label]
            # a shelved re-check (no pool: footprint.need_bytes) has meta tensors; the null
            # call returns a stand-in of the output's shape, dtype and strides instead
            output = trees.map_tensors(self._stand_in, template.eager)
            runs = [
                observed.loop_cost_ms(
                    self._sets(label, self._call_seeds(label, observed.NULL_CALLS_MAX)),
                    buffers=template.buffers,
                    calls=observed.NULL_CALLS_MAX,
                    mode=self.options.mode,
                    output=output,
                    kept_calls=self._kept_calls(template),
                )
                / observed.NULL_CALLS_MAX
                for _ in range(LOOP_RUNS)
            ]
            self.loop_ms[label] = statistics.median(runs)
            if self.fresh.get(label):  # each call's seed is a round trip to the worker
                self.loop_ms[label] += observed.round_trip_ms(output)
            del output
        return self.loop_ms

    def _stand_in(self, tensor):
        """A real tensor for a meta one (zeros, its shape, strides and dtype on the device)."""
        import torch

        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "meta":
            return tensor
        return torch.empty_strided(
            tensor.shape, tensor.stride(), dtype=tensor.dtype, device=self.device
        ).zero_()

    def _placements(self, cost, time_ms: float) -> tuple[dict | None, list[str]]:
        spec = gpu_ceilings.this_gpu("timing").spec
        if spec is None or cost is None:
            return None, []
        placed, warnings = {}, []
        for ceilings in (Ceilings.from_spec(spec), gpu_ceilings.measured_ceilings_for(spec)):
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

    def _where(self, result: CaseResult) -> str:
        return f"{result.case}, seed {result.seed}: "

    def _chosen(self, calls: int, last: int) -> list[int]:
        """The timed calls whose outputs the judge checks, drawn after the batch from the
        operating system's randomness (never from --seed, which the worker might learn): the
        `last` ones (with a rotated pool, every input set, after any warm-up a cache needs)
        and CHECKED_EXTRA, or CHECKED_SHARE of the batch, more (at most CHECKED_MAX)."""
        first_of_last = max(0, calls - last)
        extra = max(CHECKED_EXTRA, min(CHECKED_MAX, int(calls * CHECKED_SHARE)))
        drawn = random.SystemRandom().sample(range(first_of_last), min(extra, first_of_last))
        return sorted({*range(first_of_last, calls), *drawn})

    def _calls(self, worker, label: str, calls: int, seeds: list[int] | None):
        """Ask the worker for `calls` calls, each on a set of its own made from `seeds` (or on
        the rotated pool when None); its reply and the judge's own wall time (ms).

        The seeds are handed over one at a time: the worker asks for call i's when the call
        comes, sending the fingerprint of call i - 1's output, and gets it only then. So it
        never holds two calls' inputs before the first's answer is fixed, and cannot do the
        work of later calls in an earlier one (batched, that costs less than the calls). The
        fingerprints that came with the requests must be those of the batch's reply."""
        request = {"kind": "calls", "label": label, "calls": calls, "mode": self.options.mode}
        sent: list = []  # the fingerprints the worker sent with its requests for seeds

        def hand_over(message: dict) -> dict:
            index, printed = message.get("need"), message.get("print")
            if seeds is None or index != len(sent) or not isinstance(index, int):
                raise ValueError(f"it asked for seed {index!r} out of turn")
            if index >= calls:
                raise ValueError(f"it asked for a seed past its {calls} calls")
            if (printed is None) != (index == 0) or (index and not _is_fingerprint(printed)):
                raise ValueError(f"it asked for seed {index} without the previous fingerprint")
            sent.append(printed)
            return {"seed": seeds[index]}

        if seeds is not None:
            request["stream"] = True
        begin = time.perf_counter()
        reply = worker.converse(request, hand_over)
        wall_ms = (time.perf_counter() - begin) * 1e3
        if seeds is not None and "raised" not in reply:
            prints = reply.get("fingerprints")
            if (
                len(sent) != calls
                or not isinstance(prints, list)
                or prints[: calls - 1] != sent[1:]
            ):
                reply = {
                    "raised": "its batch's reply does not carry the fingerprints it sent with "
                    "its requests for seeds (or it asked for fewer seeds than calls)"
                }
        return reply, wall_ms

    def _check_batch(
        self, worker, reply: dict, label: str, calls: int, seeds: list[int] | None, during: str
    ):
        """Choose the calls to check now that the batch is over, fetch their outputs, and
        return the failure message for the first that differs from its fingerprint or from
        the reference, or None. With `seeds` call i's set is made again here from seeds[i];
        without, it is pool set i % K."""
        pool, template = self.pools[label], self.rechecks[label]

        prints = reply.get("fingerprints")
        if (
            not isinstance(prints, list)
            or len(prints) != calls
            or not all(isinstance(p, list) and all(isinstance(x, str) for x in p) for p in prints)
        ):
            return f"{during}: the worker did not fingerprint the outputs of its {calls} calls"
        chosen = self._chosen(calls, last=1 if seeds is not None else len(pool))
        for index in chosen:  # one at a time: one output on the judge's side, however large
            # the set first, then the output: the previous call's output and set are gone
            # before this set is made, and the output is not held while it is made
            outputs = expected = None
            if seeds is not None:
                expected = self._expect(template.case, seeds[index], buffers=template.buffers)
                where = f"{during}, call {index + 1} (its own input set, seed {seeds[index]})"
            else:
                expected = pool[index % len(pool)]
                where = (
                    f"{during}, call {index + 1} (input set {index % len(pool)}, "
                    f"seed {expected.seed})"
                )
            outputs = worker.ask({"kind": "outputs", "indices": [index]}).get("outputs")
            if not isinstance(outputs, dict) or set(outputs) != {index}:
                return f"{during}: the worker did not send back the output of call {index + 1}"
            judged = fingerprint(outputs[index])
            if any(UNREADABLE in part for part in [*judged, *prints[index]]):
                return (
                    f"{where}: the output's bytes could not be digested, so it cannot be told "
                    f"from another ({'; '.join(judged)[:300]})"
                )
            if judged != prints[index]:
                return (
                    f"{where}: the output sent back is not the one the call returned (its "
                    "fingerprint, sent at the end of the batch, differs)"
                )
            ok, _, _, message = self._judge(outputs[index], expected)
            if not ok:
                return f"{where}: {message}"
        return None

    def _repeat(self, worker, case: Case, pool: list[Expected]) -> str | None:
        """Without timing: repeat_calls calls, each checked in full (output and inputs)."""
        calls = self.options.repeat_calls
        for index in range(calls):
            expected = pool[index % len(pool)]
            result = self._check(worker, expected, "repeat")
            if not result.ok:
                return (
                    f"during {calls} calls, call {index + 1} (input set {index % len(pool)}, "
                    f"seed {expected.seed}): {result.message}"
                )
        return None

    def _output_bytes(self, template: Expected) -> int:
        return sum(t.numel() * t.element_size() for _, t in trees.tensors(template.eager))

    def _kept_calls(self, template: Expected) -> int:
        """The most outputs a batch keeps: the kept bytes the memory plan allows
        (KEPT_OUTPUT_BYTES at most), never fewer than POOL_SETS outputs (the plan's least)."""
        allowed = self.memory.kept_output_bytes if self.memory else KEPT_OUTPUT_BYTES
        return max(POOL_SETS, allowed // max(1, self._output_bytes(template)))

    def _exercise(self, worker, case: Case, verdict: Verdict) -> str | None:
        """Time the candidate at `case` (GPU) or call it repeat_calls times (CPU), each call on
        new inputs, checking outputs; the failure message, or None."""

        label = case.label
        pool, template = self.pools[label], self.rechecks[label]
        buffers = template.buffers
        if not self.timing:
            return self._repeat(worker, case, pool)

        if not self._timing_started:
            worker.ask({"kind": "timing"})
            self._timing_started = True
        worker.ask(
            {"kind": "pool", "label": label, "pool": [e.data for e in pool],
             "buffers": sorted(buffers)}
        )  # fmt: skip
        note(f"{self.problem.name} {label}: timing {Path(verdict.solution).name}")
        # the judge holds nothing of a case with a set per call while its batches run: what
        # its checks held goes back to the device, the batch's to have (footprint.need_bytes)
        release_cached(self.device)
        # The seeds travel with each request: the worker learns a set only when it must
        # make it, inside the judge's clock around the batch.
        warm, _ = self._calls(worker, label, WARMUP_CALLS, self._call_seeds(label, WARMUP_CALLS))
        probe, probe_ms = self._calls(
            worker, label, PROBE_CALLS, self._call_seeds(label, PROBE_CALLS)
        )
        for reply in (warm, probe):
            if "raised" in reply:
                return f"{case.label}: the solution raised while timed: {reply['raised']}"
        calls = self._calls_for(probe_ms / PROBE_CALLS)
        # Every output of the batch is kept until the judge chooses: outputs too large for
        # the kept bytes the memory plan allows (KEPT_OUTPUT_BYTES at most) shorten the
        # batch, below --min-samples if they must.
        calls = max(POOL_SETS, min(calls, self._kept_calls(template)))
        seeds = self._call_seeds(label, calls)
        reply, wall_ms = self._calls(worker, label, calls, seeds)
        if "raised" in reply:
            return f"{label}: the solution raised while timed: {reply['raised']}"
        failure = self._check_batch(worker, reply, label, calls, seeds, f"{label}: during timing")
        if failure:
            return failure
        samples = reply.get("samples_ms")
        if (
            not isinstance(samples, list)
            or len(samples) != calls
            or not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in samples)
        ):
            return f"{case.label}: the worker did not report {calls} times"
        floor = observed.floor_ms(wall_ms, calls, self.measure_loops()[label] * calls)
        samples, bounded = observed.bound(samples, floor)
        timing = self._timing(samples, [bounded] if bounded else [])
        base = self.baselines.get(case.label, {})
        eager = base.get("eager", {}).get("mean_ms")
        compiled = base.get("compiled", {}).get("mean_ms")
        per_call = _per_call_ms(timing)
        found = self.costs.get(case.label)
        placement, warnings = self._placements(found.cost if found else None, per_call)
        verdict.timings.append(
            Timed(
                case=case.label,
                solution_ms=per_call,
                eager_ms=eager,
                compiled_ms=compiled,
                speedup_vs_eager=eager / per_call if eager else None,
                speedup_vs_compiled=compiled / per_call if compiled else None,
                rel_noise=timing.rel_noise,
                mode=timing.mode,
                placement=placement,
                warnings=warnings + list(timing.warnings),
            )
        )
        verdict.records.append(self._record(case, Path(verdict.solution).stem, timing, found))
        return None

    def _record(self, case: Case, implementation: str, timing, found) -> dict:
        identity = gpu_ceilings.this_gpu("timing")
        cost = found.cost if found else None
        seconds = _per_call_ms(timing) * 1e-3
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
