"""The opinion page judged on substance: long enough to argue, covering the three options,
and tied to the records, not merely worded.

The tie is checked where the page makes it: each sentence that names a record file of the
results (`triton_kernels_sweep_20261130-134619`, say) states figures, and at least one of
the figures in that sentence or the one before must be a rate the file's samples give
(TB/s for memory-bound ops, TFLOP/s for GEMMs: bytes or FLOPs over the median), at the
precision the page wrote it. A page whose cited runs do not say what it says, because the
page is wrong or the records changed, no longer passes.
"""

from __future__ import annotations

import re

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


def judge_page(text: str, results: ResultSet) -> tuple[bool, str, int]:
    """(passed, evidence, how many cited record files the samples confirm) for the opinion
    page's text against the results."""
    words = len(text.split())
    lower = text.lower()
    thin = [name for name, keys in OPTIONS.items()
            if sum(lower.count(k) for k in keys) < MIN_MENTIONS]  # fmt: skip
    unfilled = text.count("TODO")
    verified, unverified = citations(text, rates_by_file(results))
    problems = []
    if words < MIN_WORDS:
        problems.append(f"{words} words, under {MIN_WORDS}")
    if thin:
        problems.append(f"barely discusses {', '.join(thin)}")
    if unfilled:
        problems.append(f"{unfilled} TODO slots unfilled")
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
