"""The opinion page judged on substance: long enough to argue, covering the three options,
and tied to the records, not merely worded.

The tie is checked where the page makes it: each sentence that names a record file of the
results (`triton_kernels_sweep_20261130-134619`, say) states figures, and at least one of
the figures in that sentence or the one before must be a rate the file's samples give
(TB/s for memory-bound ops, TFLOP/s for GEMMs: bytes or FLOPs over the median), at the
precision the page wrote it. A page whose cited runs do not say what it says, because the
page is wrong or the records changed, no longer passes.

That check reads the committed records the page cites: it is the fallback for a run without
a GPU. A run that measured judges the page on its own measurements instead: the page's table
"Claims a run re-measures" states its argument as checks (this language's kernel reaches at
least this % of that baseline, at this shape and dtype), and each is confirmed or refuted by
the medians of the run's own samples (`judge_claims`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelab.lab.derive import from_samples
from kernelab.lab.results import ResultSet

MIN_WORDS = 500  # room for a reasoned choice among three options, with numbers
MIN_MENTIONS = 3  # each option is discussed, not just listed
OPTIONS = {"Triton": ("triton",), "CUTLASS/CuTe": ("cutlass", "cute"), "CUDA C++": ("cuda",)}
MIN_VERIFIED = 3  # record files whose figures the page states correctly
RATE_OPS = {"gemm"}  # read in TFLOP/s; the other ops are memory-bound, read in TB/s

_FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w.])")
_SENTENCE_END = re.compile(r"(?<=[.;:])\s+")


def record_stem(source_file: str) -> str:
    """The name a page cites a record file by: its path in the results folder without
    .json(.xz), e.g. `triton/triton_kernels_sweep_20261130-134619` or `hgemm/records`."""
    return source_file.removesuffix(".xz").removesuffix(".json")


def _cited(stem: str, sentence: str) -> bool:
    """Whether `sentence` names the record file: by its path, or by its file name where that is
    a file's name (an underscore or a digit in it) rather than a word like "records"."""
    base = stem.rsplit("/", 1)[-1]
    distinctive = "_" in base or any(ch.isdigit() for ch in base)
    return stem in sentence or (distinctive and base in sentence)


def rates_by_file(results: ResultSet) -> dict[str, list[float]]:
    """Per record file (its stem), the natural rate of each record from samples."""
    rates: dict[str, list[float]] = {}
    for r in [*results.records, *results.hgemm_records]:
        if not from_samples(r):
            continue
        rate = r.achieved_tflops if r.op in RATE_OPS else (r.achieved_gbps or 0) / 1000
        if rate:
            rates.setdefault(record_stem(r.extra.get("source_file", "")), []).append(rate)
    return rates


def _matches(figure: str, rates: list[float]) -> bool:
    """Whether some rate, rounded to the figure's decimals, reads as the figure."""
    decimals = len(figure.split(".")[1])
    return any(abs(rate - float(figure)) <= 0.5 * 10**-decimals + 1e-9 for rate in rates)


def citations(text: str, rates: dict[str, list[float]]) -> tuple[list[str], list[str]]:
    """(verified, unverified) record files the page cites (by name without .json), once each."""
    sentences = _SENTENCE_END.split(text)
    verified, cited = set(), set()
    for i, sentence in enumerate(sentences):
        for stem in rates:
            if stem and _cited(stem, sentence):
                cited.add(stem)
                window = " ".join(sentences[max(0, i - 1) : i + 1])
                if any(_matches(f, rates[stem]) for f in _FIGURE.findall(window)):
                    verified.add(stem)
    # each named as a page names it: its file name
    return (sorted(s.rsplit("/", 1)[-1] for s in verified),
            sorted(s.rsplit("/", 1)[-1] for s in cited - verified))  # fmt: skip


def _page_problems(text: str) -> list[str]:
    """What makes the page thin whatever the records say: too short, an option barely
    discussed, TODO slots left."""
    words = len(text.split())
    lower = text.lower()
    thin = [name for name, keys in OPTIONS.items()
            if sum(lower.count(k) for k in keys) < MIN_MENTIONS]  # fmt: skip
    unfilled = text.count("TODO")
    problems = []
    if words < MIN_WORDS:
        problems.append(f"{words} words, under {MIN_WORDS}")
    if thin:
        problems.append(f"barely discusses {', '.join(thin)}")
    if unfilled:
        problems.append(f"{unfilled} TODO slots unfilled")
    return problems


def judge_page(text: str, results: ResultSet) -> tuple[bool, str, int]:
    """(passed, evidence, how many cited record files the samples confirm) for the opinion
    page's text against the results."""
    words = len(text.split())
    verified, unverified = citations(text, rates_by_file(results))
    problems = _page_problems(text)
    if len(verified) < MIN_VERIFIED:
        problems.append(f"only {len(verified)} cited record files state figures their samples "
                        f"give (needs {MIN_VERIFIED})")  # fmt: skip
    evidence = (f"{words} words on {', '.join(OPTIONS)}; {len(verified)} cited record files "
                f"whose figures the samples confirm ({', '.join(verified) or 'none'})")  # fmt: skip
    if unverified:
        evidence += f"; cited without a figure the samples give: {', '.join(unverified)}"
    if problems:
        evidence = "; ".join(problems) + "; " + evidence
    return not problems, evidence, len(verified)


# --- the page's claims, judged on the run that measured ------------------------------------

CLAIMS_HEADER = ("claim", "kernel", "baseline", "dtype", "shape", "at least")
COPY = "copy"  # the baseline that is the run's measured copy bandwidth (ceilings.json)
BEST_STEP = ":*"  # `sgemm:*`: the fastest step of a ladder at the shape


@dataclass(frozen=True)
class Claim:
    """One row of the page's claims: `kernel` reaches at least `at_least` % of `baseline`
    (an implementation timed in the same run file, or the run's copy bandwidth) at `shape`."""

    text: str
    kernel: str
    baseline: str
    dtype: str
    shape: dict
    at_least: float

    def words(self) -> str:
        shape = " ".join(f"{k}={v}" for k, v in self.shape.items())
        return (f"{self.kernel} >= {self.at_least:g} % of {self.baseline} ({self.dtype}, "
                f"{shape})")  # fmt: skip


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]


def _claim(cells: list[str]) -> Claim:
    """A table row as a Claim; ValueError with what is wrong in it."""
    if len(cells) != len(CLAIMS_HEADER):
        raise ValueError(f"{len(cells)} cells, not {len(CLAIMS_HEADER)}")
    text, kernel, baseline, dtype, shape_text, at_least = cells
    shape = {}
    for part in shape_text.split():
        key, _, value = part.partition("=")
        if not key or not value.isdigit():
            raise ValueError(f"shape {shape_text!r} is not `name=integer ...`")
        shape[key] = int(value)
    bound = at_least.removesuffix("%").strip()
    try:
        number = float(bound)
    except ValueError:
        raise ValueError(f"`at least` {at_least!r} is not a percentage") from None
    if not (kernel and baseline and dtype and shape):
        raise ValueError("an empty cell")
    return Claim(text, kernel, baseline, dtype, shape, number)


def page_claims(text: str) -> tuple[list[Claim], list[str]]:
    """(claims, rows not understood with why) of the page's claims table: the markdown table
    whose header is CLAIMS_HEADER."""
    lines = text.splitlines()
    claims, bad = [], []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        if tuple(c.lower() for c in _cells(line)) != CLAIMS_HEADER:
            continue
        for row in lines[i + 2 :]:  # past the header and its |---| line
            if not row.lstrip().startswith("|"):
                break
            try:
                claims.append(_claim(_cells(row)))
            except ValueError as why:
                bad.append(f"claim row `{row.strip()[:60]}` not understood: {why}")
        break
    return claims, bad


def _at(record, claim: Claim) -> bool:
    return (record.dtype == claim.dtype and from_samples(record)
            and all(record.shape.get(k) == v for k, v in claim.shape.items()))  # fmt: skip


def _kernel_matches(implementation: str, kernel: str) -> bool:
    if kernel.endswith(BEST_STEP):
        return implementation.startswith(kernel[: -len(BEST_STEP) + 1])
    return implementation == kernel


def measured_pct(claim: Claim, results: ResultSet) -> tuple[float | None, str]:
    """(the % of the baseline the run measured for the claim's kernel, how it was measured),
    or (None, why the run cannot say). Medians of the samples only (kernelab.lab.derive)."""
    if claim.kernel.startswith("hgemm:"):  # the Hopper ladder: cuBLAS in alternating pairs
        rows = [r for r in (results.hgemm_summary or {}).get("paired") or []
                if r.get("mode", "cold") == "cold" and r.get("from_samples")
                and _kernel_matches(str(r.get("impl")), claim.kernel)
                and all(r.get("size") == v for v in claim.shape.values())]  # fmt: skip
        if not rows:
            return None, "no hgemm pairs with samples at that size in this run"
        best = max(rows, key=lambda r: r["pct_median"])
        return best["pct_median"], f"{best['impl']}, median over pairs of cuBLAS / step time"
    ours = [r for r in [*results.records, *results.hgemm_records]
            if _at(r, claim) and _kernel_matches(r.implementation, claim.kernel)]  # fmt: skip
    if not ours:
        return None, f"no {claim.kernel} timing with samples at that shape in this run"
    if claim.baseline == COPY:
        try:
            copy_gbps = float(results.ceilings["ceilings"]["copy"]["rate"]) / 1e9
        except (TypeError, KeyError, ValueError):
            return None, "no measured copy bandwidth (ceilings.json) in this run"
        best = max(ours, key=lambda r: r.achieved_gbps or 0)
        return (100 * (best.achieved_gbps or 0) / copy_gbps,
                f"{best.implementation} {(best.achieved_gbps or 0) / 1000:.2f} TB/s over the "
                f"run's copy {copy_gbps / 1000:.2f} TB/s")  # fmt: skip
    found = []
    for kernel in ours:
        source = kernel.extra.get("source_file")
        base = [r for r in [*results.records, *results.hgemm_records]
                if r.implementation == claim.baseline and _at(r, claim)
                and r.shape == kernel.shape and r.extra.get("source_file") == source]  # fmt: skip
        if base:  # the baseline of the same run file: the same card, state and day
            found.append((100 * base[0].stats["median"] / kernel.stats["median"], kernel))
    if not found:
        return None, f"no {claim.baseline} timing beside {claim.kernel} in the same run file"
    pct, best = max(found, key=lambda f: f[0])
    return pct, (f"{best.implementation}, {claim.baseline} median / kernel median "
                 f"({best.extra.get('source_file', '?')})")  # fmt: skip


def judge_claims(text: str, results: ResultSet) -> tuple[bool, str, int]:
    """(passed, evidence, how many claims the run confirmed) for the page against a run's
    own measurements: every claim the run measured must hold, at least MIN_VERIFIED of them
    measured; a claim the run did not measure is named, with why, and judged on nothing."""
    problems = _page_problems(text)
    claims, bad = page_claims(text)
    problems += bad
    confirmed, refuted, unmeasured = [], [], []
    for claim in claims:
        pct, how = measured_pct(claim, results)
        if pct is None:
            unmeasured.append(f"{claim.words()}: {how}")
        elif pct >= claim.at_least:
            confirmed.append(f"{claim.words()}: {pct:.1f} % ({how})")
        else:
            refuted.append(f"{claim.words()}: this run measured {pct:.1f} % ({how})")
    if not claims and not bad:
        problems.append("the page has no claims table a run can re-measure "
                        f"(header: | {' | '.join(CLAIMS_HEADER)} |)")  # fmt: skip
    if refuted:
        problems.append(f"{len(refuted)} claims refuted by this run: " + "; ".join(refuted))
    if claims and len(confirmed) < MIN_VERIFIED:
        problems.append(f"only {len(confirmed)} claims confirmed by this run's measurements "
                        f"(needs {MIN_VERIFIED})")  # fmt: skip
    evidence = (f"{len(text.split())} words on {', '.join(OPTIONS)}; {len(confirmed)} of "
                f"{len(claims)} claims confirmed by this run's samples: "
                f"{'; '.join(confirmed) or 'none'}")  # fmt: skip
    if unmeasured:
        evidence += f"; not measured by this run, not judged: {'; '.join(unmeasured)}"
    if problems:
        evidence = "; ".join(problems) + "; " + evidence
    return not problems, evidence, len(confirmed)
