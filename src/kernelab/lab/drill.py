"""The drill: ridge points, bounds, the numbers an inference engineer must know cold, and the
PMPP primitives' bytes, bank conflicts, passes and atomics.

Every question is computed from the catalog, the cost models and (for the banks) the bank
rule itself at the moment it is asked,
so the drill can never disagree with the rest of kernelab. Answers are judged by a relative
tolerance for numbers (10 %: the point is the order of magnitude and the first digit, not a
calculator race), with or without a unit ("5.3", "5.3 TB/s" and "5300 GB/s" are one answer),
and exactly for words ("memory" / "compute").

The all-time tally counts only answers typed at a terminal: a scripted run (answers given
with --answers, or piped in) measures the script, not the person.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelab.hardware.catalog import CATALOG, get_gpu

NUMBER_TOLERANCE = 0.10
TIME_LIMIT_S = 30.0
RULES = (
    f"numbers count within {NUMBER_TOLERANCE:.0%} of the answer, with or without their unit; "
    f"{TIME_LIMIT_S:.0f} s per question"
)

# The units a reply may carry, per question unit, as the factor to that unit. A reply with no
# unit is taken in the question's unit.
UNITS: dict[str, dict[str, float]] = {
    "TB/s": {"tb/s": 1.0, "tbps": 1.0, "gb/s": 1e-3, "gbps": 1e-3},
    "TFLOP/s": {
        "tflop/s": 1.0, "tflops": 1.0, "pflop/s": 1e3, "pflops": 1e3,
        "gflop/s": 1e-3, "gflops": 1e-3,
    },
    "FLOP/byte": {"flop/byte": 1.0, "flop/b": 1.0, "flops/byte": 1.0, "flop/bytes": 1.0},
    "GB": {"gb": 1.0, "tb": 1e3},
    "SMs": {"sms": 1.0, "sm": 1.0},
    "x": {"x": 1.0, "×": 1.0, "times": 1.0},
    "MB": {"mb": 1.0, "gb": 1e3, "kb": 1e-3, "mib": 1.048576, "gib": 1073.741824},
    "way": {"way": 1.0, "-way": 1.0, "ways": 1.0, "x": 1.0},
    "atomics": {"atomics": 1.0, "atomic": 1.0},
    "x n elements": {"xn": 1.0, "n": 1.0, "xnelements": 1.0},
}  # fmt: skip
_REPLY = re.compile(r"^\s*([-+]?(?:\d[\d,_]*)?\.?\d+(?:e[-+]?\d+)?)\s*(.*?)\s*$", re.IGNORECASE)


def parse_number(reply: str, unit: str) -> float | None:
    """The number in `reply`, converted to `unit` when the reply names a known unit for it;
    None when it is no number or its unit is not one for this question."""
    found = _REPLY.match(reply)
    if not found:
        return None
    try:
        value = float(found.group(1).replace(",", "").replace("_", ""))
    except ValueError:
        return None
    given = found.group(2).lower().replace(" ", "")
    if not given:
        return value
    factors = UNITS.get(unit, {unit.lower().replace(" ", ""): 1.0})
    factor = factors.get(given)
    return value * factor if factor is not None else None


def figure(x: float) -> float:
    """A number as the drill states it, to three significant figures (12.5, 591, 0.139): the
    answer and its explanation both show this one value."""
    return float(f"{x:.3g}")


# Shapes a drill question may use: small, skinny and large, so both sides of the ridge occur.
_GEMM_SHAPES = [
    (1, 4096, 4096),
    (16, 4096, 4096),
    (128, 8192, 8192),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (512, 512, 512),
    (32, 14336, 4096),
    (2048, 2048, 128),
]
_ROW_SHAPES = [(8192, 1024), (4096, 4096), (1, 262144), (65536, 8192)]


@dataclass
class Question:
    kind: str  # "ridge", "bound", "card", "pmpp", "decode"
    prompt: str
    answer: float | str  # an int for counts (banks, passes, atomics)
    unit: str = ""
    explanation: str = ""

    def __post_init__(self) -> None:
        # A number's explanation ends with the replies it accepts, so the tolerance is stated
        # wherever the answer is shown.
        if not isinstance(self.answer, str):
            low, high = self.accepted_range()
            accepted = f"accepted: {low:.4g} to {high:.4g} {self.unit}".rstrip()
            self.explanation = f"{self.explanation}; {accepted}" if self.explanation else accepted

    def accepted_range(self) -> tuple[float, float]:
        """The replies judged right: the answer within NUMBER_TOLERANCE either way."""
        spread = NUMBER_TOLERANCE * abs(self.answer)
        return self.answer - spread, self.answer + spread

    def judge(self, reply: str | None) -> bool:
        if reply is None:
            return False
        reply = reply.strip().lower()
        if isinstance(self.answer, str):
            return reply in (self.answer, self.answer[0])  # "memory" or "m"
        value = parse_number(reply, self.unit)
        if value is None:
            return False
        return abs(value - self.answer) <= NUMBER_TOLERANCE * abs(self.answer)


@dataclass
class Outcome:
    question: Question
    reply: str | None
    correct: bool
    seconds: float
    too_slow: bool


@dataclass
class Score:
    asked: int = 0
    correct: int = 0
    history: list[dict] = field(default_factory=list)


def _nvidia_and_amd() -> list[str]:
    return [gpu_id for gpu_id, spec in CATALOG.items() if "bf16" in spec.peak_tflops]


def ridge_question(rng: random.Random) -> Question:
    spec = get_gpu(rng.choice(_nvidia_and_amd()))
    dtype = rng.choice([d for d in ("bf16", "fp32", "fp8") if d in spec.peak_tflops])
    ridge = figure(spec.ridge(dtype))
    return Question(
        kind="ridge",
        prompt=f"Ridge point of {spec.id} in {dtype} (dense), in FLOP/byte?",
        answer=ridge,
        unit="FLOP/byte",
        explanation=(
            f"{spec.peak_tflops[dtype]:g} TFLOP/s / {spec.memory_bandwidth_gbps / 1000:g} TB/s"
            f" = {ridge:g} FLOP/byte"
        ),
    )


def bound_question(rng: random.Random) -> Question:
    from kernelab.roofline import costs
    from kernelab.roofline.model import Ceilings, place

    spec = get_gpu(rng.choice(_nvidia_and_amd()))
    if rng.random() < 0.6:
        m, n, k = rng.choice(_GEMM_SHAPES)
        cost = costs.gemm(m, n, k, dtype="bf16")
        what = f"a bf16 GEMM {m}x{n}x{k}"
    else:
        rows, cols = rng.choice(_ROW_SHAPES)
        op = rng.choice(["softmax", "layernorm", "rmsnorm"])
        cost = getattr(costs, op)(rows, cols, dtype="bf16")
        what = f"a bf16 {op} over {rows}x{cols}"
    placement = place(cost, Ceilings.from_spec(spec))
    return Question(
        kind="bound",
        prompt=f"On {spec.id}, is {what} memory- or compute-bound? (m/c)",
        answer=placement.bound,
        explanation=(
            f"intensity {figure(placement.intensity):g} FLOP/byte vs ridge "
            f"{figure(placement.ridge):g}: {placement.bound}-bound"
        ),
    )


def flashcards() -> list[Question]:
    """The numbers the phase says to know cold, read from the catalog."""
    h100, b200, mi300x = get_gpu("h100-sxm"), get_gpu("b200"), get_gpu("mi300x")
    return [
        Question("card", "H100 SXM dense bf16 TFLOP/s?", h100.peak_tflops["bf16"], "TFLOP/s"),
        Question(
            "card", "H100 SXM HBM bandwidth in TB/s?", h100.memory_bandwidth_gbps / 1000, "TB/s"
        ),
        Question("card", "H100 SXM SM count?", h100.sm_count, "SMs"),
        Question(
            "card",
            "H100 SXM bf16 ridge point in FLOP/byte?",
            round(h100.ridge("bf16")),
            "FLOP/byte",
        ),
        Question(
            "card",
            "B200 dense bf16 over H100 SXM dense bf16 (ratio)?",
            round(b200.peak_tflops["bf16"] / h100.peak_tflops["bf16"], 2),
            "x",
        ),
        Question(
            "card",
            "B200 HBM bandwidth over H100 SXM (ratio)?",
            round(b200.memory_bandwidth_gbps / h100.memory_bandwidth_gbps, 2),
            "x",
        ),
        Question("card", "MI300X HBM capacity in GB?", mi300x.memory_gb, "GB"),
        Question(
            "card", "MI300X HBM bandwidth in TB/s?", mi300x.memory_bandwidth_gbps / 1000, "TB/s"
        ),
    ]


# --- the PMPP primitives: bytes, banks, passes and atomics, computed from the same models ----

SHARED_BANKS = 32  # shared memory: 32 banks of 4 bytes; a warp's 32 lanes ask at once
WARP = 32


def bank_conflict_ways(word_of_lane: Callable[[int], int]) -> int:
    """How many-way a warp's shared-memory access is: the most distinct 4-byte words its 32
    lanes ask of any one bank (lanes asking for the same word are one broadcast, not a
    conflict). 1 is conflict-free; 32 serializes the warp."""
    words_per_bank: dict[int, set[int]] = {}
    for lane in range(WARP):
        word = word_of_lane(lane)
        words_per_bank.setdefault(word % SHARED_BANKS, set()).add(word)
    return max(len(words) for words in words_per_bank.values())


def reduction_bytes_question(rng: random.Random) -> Question:
    from kernelab.roofline import costs

    power = rng.choice([20, 24, 26, 28, 30])
    n = 2**power
    cost = costs.reduce_sum(n, dtype="fp32")
    megabytes = figure(cost.bytes / 1e6)
    return Question(
        kind="pmpp",
        prompt=f"Minimal bytes a sum-reduction of n = 2^{power} fp32 must move, in MB?",
        answer=megabytes,
        unit="MB",
        explanation=(f"read n x 4 B = {n * 4:,} B once, write one fp32 (4 B): {cost.bytes:,.0f} B "
                     f"= {megabytes:g} MB; no FLOP rate bounds it (intensity "
                     f"{cost.flops / cost.bytes:.2f} FLOP/byte), only the read bandwidth"),
    )  # fmt: skip


def sequential_addressing_question(rng: random.Random) -> Question:
    """The reduction ladder's step 2 (strided index: lane t works on word 2*s*t) against step 3
    (sequential addressing: lane t works on word t, the partner s words away)."""
    stride = rng.choice([1, 2, 4, 8])
    strided = bank_conflict_ways(lambda lane: 2 * stride * lane)
    sequential = bank_conflict_ways(lambda lane: lane)
    return Question(
        kind="pmpp",
        prompt=(f"Reduction in shared memory, strided index: at stride s = {stride}, lane t "
                f"reads float sdata[2*s*t]. How many-way is the bank conflict?"),
        answer=strided,
        unit="way",
        explanation=(f"word 2*{stride}*t falls in bank (2*{stride}*t) mod 32: the 32 lanes meet "
                     f"in {SHARED_BANKS // strided} banks, {strided} words each: {strided}-way. "
                     f"Sequential addressing (lane t reads sdata[t] and sdata[t + s]) puts 32 "
                     f"lanes on 32 consecutive words, one per bank: {sequential}-way, none"),
    )  # fmt: skip


def padded_tile_question(rng: random.Random) -> Question:
    """The transpose ladder's step 3: a 32 x 32 fp32 tile read down a column."""
    pitch = rng.choice([32, 33])
    ways = bank_conflict_ways(lambda lane: lane * pitch)
    unpadded = bank_conflict_ways(lambda lane: lane * 32)
    return Question(
        kind="pmpp",
        prompt=(f"Transpose tile float tile[32][{pitch}] in shared memory: a warp reads one "
                f"column (lane t reads tile[t][c]). How many-way is the bank conflict?"),
        answer=ways,
        unit="way",
        explanation=(f"lane t reads word {pitch}*t + c, bank ({pitch}*t + c) mod 32: "
                     f"{ways}-way. Unpadded (pitch 32) every lane of a column is in one bank, "
                     f"{unpadded}-way; one spare word per row (32x33) shifts each row by a bank, "
                     f"so a column spans all 32 banks for 4 B of padding per row"),
    )  # fmt: skip


def scan_passes_question(rng: random.Random) -> Question:
    """Element moves of a device-wide scan, in units of n: each pass's reads and writes."""
    passes = {
        "reduce-then-scan": [("reduce each tile to its sum", 1, 0),
                             ("scan the tile sums", 0, 0),
                             ("re-read each tile, scan it with its offset, write", 1, 1)],
        "single-pass decoupled look-back": [("read each tile once, look back for its offset, "
                                             "write", 1, 1)],
    }  # fmt: skip
    kind = rng.choice(sorted(passes))
    moves = sum(reads + writes for _, reads, writes in passes[kind])
    other = next(k for k in passes if k != kind)
    other_moves = sum(reads + writes for _, reads, writes in passes[other])
    steps = "; ".join(f"{what}: {r} read + {w} write" for what, r, w in passes[kind])
    return Question(
        kind="pmpp",
        prompt=(f"A device-wide inclusive scan of n elements, {kind}: how many element moves "
                "to and from DRAM, in units of n (reads + writes; the tile sums are negligible)?"),
        answer=moves,
        unit="x n elements",
        explanation=(f"{steps}: {moves}n; the {other} makes {other_moves}n. The single pass "
                     "reads n and writes n, a copy's bytes, so the copy is its ceiling"),
    )  # fmt: skip


def skewed_histogram_question(rng: random.Random) -> Question:
    """All n values in one bin: the atomics that reach the one hot address."""
    power = rng.choice([20, 24, 26])
    n = 2**power
    ways = {"global atomics": (n, "every value is one atomicAdd on the same global counter"),
            "warp-aggregated atomics": (n // WARP, "a warp's 32 equal values become one "
                                                    "atomicAdd of 32")}  # fmt: skip
    kind = rng.choice(sorted(ways))
    count, how = ways[kind]
    return Question(
        kind="pmpp",
        prompt=(f"Histogram of n = 2^{power} values, every one in the same bin, with {kind}: "
                "how many atomic updates hit that one counter?"),
        answer=count,
        unit="atomics",
        explanation=(f"{how}: {count:,}. Updates to one address serialize at its L2 slice, so "
                     "the skewed case is bound by atomic throughput on one address, not by "
                     "bandwidth; uniform values spread the same updates over every bin"),
    )  # fmt: skip


PMPP_QUESTIONS: list[Callable[[random.Random], Question]] = [
    reduction_bytes_question,
    sequential_addressing_question,
    padded_tile_question,
    scan_passes_question,
    skewed_histogram_question,
]


def decode_bytes_question(rng: random.Random) -> Question:
    """The weight bytes a decode step streams per token (lab.decode's Llama-3-8B shapes)."""
    from kernelab.hardware.catalog import get_gpu
    from kernelab.lab.decode import model_bytes

    tbps = get_gpu("h100-sxm").bandwidth_bytes_per_s / 1e12
    weight = rng.choice(["bf16", "int8", "int4"])
    gigabytes = figure(model_bytes(weight) / 1e9)
    words = {"bf16": "2 B per weight", "int8": "1 B per weight plus an fp32 scale per row",
             "int4": "half a byte per weight plus an fp16 scale per 128"}[weight]  # fmt: skip
    return Question(
        kind="decode",
        prompt=(f"Batch-1 decode of a Llama-3-8B-shaped model (7.5 G weights in its projections "
                f"and output head) with {weight} weights: GB of weights read per token?"),
        answer=gigabytes,
        unit="GB",
        explanation=(f"every projection and the output head is read once per token, {words}: "
                     f"{gigabytes:g} GB; at an H100 SXM's {tbps:.2f} TB/s that is "
                     f"{gigabytes / tbps:.2f} ms per token "
                     "before any FLOP matters"),
    )  # fmt: skip


def decode_bound_question(rng: random.Random) -> Question:
    """Why batch-1 decode is memory-bound: the GEMV's intensity against the ridge."""
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline import costs

    h100 = get_gpu("h100-sxm")
    ridge = h100.peak_flops("bf16") / h100.bandwidth_bytes_per_s
    m = rng.choice([1, 2, 4, 8])
    cost = costs.gemv_batched(m, 4096, 4096, dtype="bf16")
    intensity = figure(cost.flops / cost.bytes)
    return Question(
        kind="decode",
        prompt=(f"y = x W^T with W bf16 4096 x 4096 and a batch of m = {m} rows of x: "
                "arithmetic intensity in FLOP/byte?"),
        answer=intensity,
        unit="FLOP/byte",
        explanation=(f"2 x {m} x 4096^2 FLOPs over about 2 x 4096^2 bytes of W (x and y add "
                     f"little): {intensity:g} FLOP/byte, far below an H100 SXM's bf16 ridge of "
                     f"{ridge:.0f}, so the weights' bytes bound it: memory-bound until m nears the "
                     "ridge"),
    )  # fmt: skip


DECODE_QUESTIONS: list[Callable[[random.Random], Question]] = [
    decode_bytes_question,
    decode_bound_question,
]


def make_questions(rounds: int, seed: int | None = None) -> list[Question]:
    rng = random.Random(seed)
    cards = flashcards()
    makers: list[Callable[[], Question]] = [
        lambda: ridge_question(rng),
        lambda: bound_question(rng),
        lambda: rng.choice(cards),
        lambda: rng.choice(PMPP_QUESTIONS)(rng),
        lambda: rng.choice(DECODE_QUESTIONS)(rng),
    ]
    return [makers[i % len(makers)]() for i in range(rounds)]


def run_drill(
    questions: list[Question],
    ask: Callable[[Question], str | None],
    *,
    clock: Callable[[], float] = time.monotonic,
    time_limit_s: float = TIME_LIMIT_S,
) -> list[Outcome]:
    """Ask each question through `ask` (a prompt, a script or a test); a late answer is wrong."""
    outcomes = []
    for question in questions:
        start = clock()
        reply = ask(question)
        seconds = clock() - start
        too_slow = seconds > time_limit_s
        correct = question.judge(reply) and not too_slow
        outcomes.append(Outcome(question, reply, correct, seconds, too_slow))
    return outcomes


def score_path() -> Path:
    from kernelab.harness.cache import cache_dir

    return cache_dir() / "drill_score.json"


def load_score(path: Path) -> Score:
    if not path.exists():
        return Score()
    data = json.loads(path.read_text())
    return Score(asked=data["asked"], correct=data["correct"], history=data.get("history", []))


def typed_at_a_terminal() -> bool:
    """Whether answers come from a person at a terminal (stdin is one), the only runs the
    all-time tally counts."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stdin
        return False


def save_score(
    path: Path, score: Score, outcomes: list[Outcome], *, counted: bool | None = None
) -> Score:
    """Add a run to the all-time tally at `path` and return the tally. `counted`: whether the
    run counts (default: its answers were typed at a terminal); a run that does not count
    leaves the tally and its file as they were."""
    if counted is None:
        counted = typed_at_a_terminal()
    if not counted:
        return score
    score.asked += len(outcomes)
    score.correct += sum(o.correct for o in outcomes)
    score.history.append(
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "asked": len(outcomes),
            "correct": sum(o.correct for o in outcomes),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(score), indent=1))
    return score
