"""What the SGEMM and the Hopper ladders share: their registry entries, their per-process
cache of compiled steps, and how a step list is read from the command line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.runtime.cuda.build import build
from kernelab.spec.registry import Implementation


class StepBuilds:
    """The compiled steps of one ladder, kept for the life of the process (a timed call must
    not re-hash the sources); nvcc's disk cache sits behind it."""

    def __init__(self, source_dir: str, arch: str | None = None):
        self.source_dir = source_dir  # relative to the kernelab package (build.source_path)
        self.arch = arch  # None: the GPU's own, or sm_90 without one
        self._built: dict[tuple, object] = {}

    def get(self, step, defines: dict | None = None, arch: str | None = None):
        """The build of `step` with these -D defines (none: its sources as written)."""
        arch = arch or self.arch
        key = (step.number, tuple(sorted((defines or {}).items())), arch)
        if key not in self._built:
            self._built[key] = build(
                f"{self.source_dir}/{step.file}", arch=arch, defines=defines or None
            )
        return self._built[key]


def find_step(ladder: str, key: int | str, steps: Sequence):
    """The step of `ladder` named by `key`: its number (5), zero-padded number ("05"), name
    ("scan:05") or slug ("decoupled_lookback"); one line naming the steps otherwise."""
    text = str(key).strip().lower().removeprefix(f"{ladder}:")
    for step in steps:
        if (text.isdigit() and int(text) == step.number) or text == getattr(step, "slug", None):
            return step
    raise UnknownNameError(f"unknown {ladder} step '{key}'{_step_hint(text, steps)} "
                           f"(known: {_known_steps(steps)})")  # fmt: skip


def _known_steps(steps: Sequence) -> str:
    """ "reduce:01 interleaved, reduce:02 strided_index, ...": each name a step accepts."""
    return ", ".join(f"{s.name} {s.slug}" if getattr(s, "slug", None) else s.name for s in steps)


def _step_hint(text: str, steps: Sequence) -> str:
    """A 'did you mean' for a misspelt slug only: a close number or name says nothing useful
    (reduce:13 is no nearer reduce:03 than reduce:09 is)."""
    import difflib

    slugs = [s.slug for s in steps if getattr(s, "slug", None)]
    if not text or text.isdigit():
        return ""
    hits = difflib.get_close_matches(text, slugs, n=2, cutoff=0.7)
    return f"; did you mean {', '.join(hits)}?" if hits else ""


def select_steps(spec: str | None, steps: Sequence, lookup: Callable) -> list:
    """None or "all" -> every step; else "6", "3,4,sgemm:05" or "5-9" -> those steps in
    ladder order. `lookup` turns one name or number into its step (an unknown one raises).
    An empty list or item ("", "1,,3") and a range missing an end ("-1", "3-") are one
    KernelabError line: a typo, never quietly every step."""
    if spec is None or spec.strip().lower() == "all":
        return list(steps)
    parts = [p.strip() for p in spec.split(",")]
    example = "e.g. --steps 6, --steps 1,3 or --steps 5-9 (leave it out for every step)"
    if not any(parts):
        raise KernelabError(f"no steps in '{spec}'; {example}")
    if not all(parts):
        raise KernelabError(f"an empty step in '{spec}'; {example}")
    chosen: set[int] = set()
    for part in parts:
        if "-" in part:
            ends = [x.strip() for x in part.split("-", 1)]
            if not all(ends) or "-" in ends[1]:
                raise KernelabError(f"step range '{part}' is malformed; write it low-high, "
                                    "e.g. 5-9")  # fmt: skip
            lo, hi = (lookup(x).number for x in ends)
            if lo > hi:
                raise KernelabError(f"step range '{part}' runs backwards; write it low-high")
            chosen.update(range(lo, hi + 1))
        else:
            chosen.add(lookup(part).number)
    return [s for s in steps if s.number in chosen]


def ladder_implementations(
    steps,
    *,
    run_step: Callable,  # run_step(step, a, b) -> a @ b
    build_step: Callable,  # build_step(step): compile (cached) ahead of the first call
    prefix: str,  # "sgemm" / "hgemm": the function name seen by profilers
    dtypes: tuple[str, ...],
    label: str,  # "SGEMM" / "Hopper bf16 GEMM"
    metadata: Callable | None = None,  # metadata(step) -> dict; default step.metadata()
) -> list:
    def callable_for(step):
        def build():
            build_step(step)  # compile now, so the first timed call does not pay for nvcc

            def run(a, b):
                return run_step(step, a, b)

            run.__name__ = f"{prefix}_{step.number:02d}_{step.slug}"
            return run

        return build

    return [
        Implementation(
            name=step.name,
            op="gemm",
            build=callable_for(step),
            dtypes=dtypes,
            description=f"{label} step {step.number}: {step.technique}",
            metadata=metadata(step) if metadata is not None else step.metadata(),
        )
        for step in steps
    ]
