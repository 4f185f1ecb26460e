"""Is a kernel correct? Its output against the float64 torch reference, on fresh random data.

`compare(out, ref, dtype=...)` judges one output; `check_implementation(fn, op, shape,
dtype)` runs a candidate on several freshly seeded inputs and judges every output. The
rules, in the order they are applied:

1. The output must be a tensor of the reference's shape.
2. Non-finite values must match exactly: NaN where the reference has NaN (softmax of an
   all -inf row), +/-inf where it has +/-inf, and nowhere else. Any NaN or Inf in a place
   where the reference is finite fails, however small the norm error elsewhere.
3. A constant output (all zeros, say) fails when the reference is not constant. Its norm
   error would fail anyway (zeros score exactly 1.0), but the message should say why.
4. The relative norm error ||out - ref|| / ||ref|| over the finite elements, in float64,
   must not exceed the threshold derived in kernelab.harness.tolerances from the input
   dtype, the math mode and the output's dtype.

Only check_implementation can see two more defects, so it also enforces them:

5. The candidate must not write into its inputs. It receives copies (same strides, same
   padding bytes); after it runs, every byte of each copy's storage is compared with the
   original, and any change fails: "the implementation wrote into input 0".
6. Every output element must be written. An element a kernel forgets holds whatever the
   allocator left there, which can be the right answer by luck (a freed buffer from an
   earlier correct run) and pass. So the candidate runs with a poisoned allocator: torch's
   deterministic mode with `torch.utils.deterministic.fill_uninitialized_memory`, which
   makes torch.empty and its relatives fill new memory with NaN (floats) or the largest
   integer, on CPU and CUDA alike. A forgotten element is then NaN and rule 2 rejects it.
   Ops without a deterministic kernel only warn in this mode (warn_only), and those
   warnings are silenced. A kernel that allocates its output outside torch (cudaMalloc
   of its own) is not covered; kernelab's launchers allocate with torch.

A wrong answer never raises: the result has ok=False and a message. Bad input to the
checker itself (unknown op, bad shape, no GPU) raises a KernelabError.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from kernelab.errors import KernelabError, NoGPUError
from kernelab.harness import blocks
from kernelab.harness.tolerances import threshold, threshold_explanation, tolerance
from kernelab.spec.op_spec import name_of
from kernelab.spec.reference import get_op

__all__ = [
    "CheckReport",
    "CheckResult",
    "check_implementation",
    "compare",
    "copy_with_layout",
    "mutation",
    "poisoned_allocations",
    "threshold",
    "threshold_explanation",
]

WORST_SHOWN = 5


@dataclass
class CheckResult:
    ok: bool
    error: float  # relative norm error; inf when the output could not be compared
    threshold: float
    message: str
    seed: int | None = None

    def to_dict(self) -> dict:
        from kernelab.output import to_jsonable

        return to_jsonable(asdict(self))


@dataclass
class CheckReport:
    ok: bool
    op: str
    shape: dict
    dtype: str
    math_mode: str | None
    error: float  # the worst over the trials that ran
    threshold: float
    seeds: list[int]
    message: str
    trials: list[CheckResult] = field(default_factory=list)

    def to_dict(self) -> dict:
        from kernelab.output import to_jsonable

        data = asdict(self)
        data["trials"] = [trial.to_dict() for trial in self.trials]
        return to_jsonable(data)


def _fmt(value: float) -> str:
    text = f"{value:.6g}"
    # "0.0", not "0": a float should read as one.
    return text if any(c in text for c in ".eni") else text + ".0"


def _index(flat_index: int, shape) -> str:
    """Flat position -> "[i, j]" in the tensor's own shape."""
    coords = []
    for size in reversed(tuple(shape)):
        coords.append(flat_index % size)
        flat_index //= size
    return "[" + ", ".join(str(c) for c in reversed(coords)) + "]"


def _listing(found: list[tuple[int, float, float]], shape) -> str:
    """(flat position, got, expected) triples as "[i, j] got x expected y; ..."."""
    return "; ".join(
        f"{_index(position, shape)} got {_fmt(got)} expected {_fmt(want)}"
        for position, got, want in found
    )


def _fail(message: str, limit: float, error: float = math.inf) -> CheckResult:
    return CheckResult(ok=False, error=error, threshold=limit, message=message)


def compare(
    out,
    ref,
    *,
    dtype: str,
    math_mode: str | None = None,
    bf16_truncates: bool = False,
    block: int | None = None,
) -> CheckResult:
    """Judge `out` against the float64 reference `ref` for inputs of `dtype`.

    The output's own dtype sets the rounding allowance (an fp32 result of bf16 inputs is
    held to fp32's threshold); see kernelab.harness.tolerances. bf16_truncates: the output
    was made where fp32 -> bf16 rounds toward zero (Triton's CPU interpreter).

    The tensors are walked a block at a time (kernelab.harness.blocks; `block` elements,
    CHECK_BLOCK unless told), so the float64 copies are a block's: the judge compares outputs
    of many GiB on the card that made them. The verdict and message do not depend on the
    block; the error's last bits can.
    """
    import torch

    limit = threshold(dtype, math_mode, bf16_truncates=bf16_truncates)
    if not isinstance(out, torch.Tensor):
        return _fail(f"the implementation returned {type(out).__name__}, not a tensor", limit)
    if tuple(out.shape) != tuple(ref.shape):
        return _fail(
            f"output shape {tuple(out.shape)} but the reference's is {tuple(ref.shape)}", limit
        )
    try:
        out_name = name_of(out.dtype)
        limit = threshold(dtype, math_mode, out_name, bf16_truncates=bf16_truncates)
    except KernelabError:
        return _fail(f"output dtype {out.dtype} is not a floating type kernelab checks", limit)

    inf = float("inf")
    shape = tuple(ref.shape)
    bad_count = nan_count = inf_count = finite_count = 0
    first_bad: list[tuple[int, float, float]] = []
    low, high = inf, -inf  # the finite reference's range
    first_value, constant = None, True  # the output where the reference is first finite
    difference = scale = 0.0  # sums of squares over the finite elements
    for offset, (o, r) in blocks.pieces(out.detach(), ref.detach(), block=block):
        o64 = o.to(device=r.device, dtype=torch.float64, copy=True)  # its own: changed here
        r64 = r.to(torch.float64)
        # rule 2: NaN, +inf and -inf exactly where the reference has them
        bad = (
            (o64.isnan() != r64.isnan())
            | ((o64 == inf) != (r64 == inf))
            | ((o64 == -inf) != (r64 == -inf))
        )
        finite = torch.isfinite(r64)
        if bool(bad.any()):
            bad_count += int(bad.sum())
            nan_count += int((o64.isnan() & finite).sum())
            inf_count += int((o64.isinf() & finite).sum())
            if len(first_bad) < WORST_SHOWN:
                where = torch.nonzero(bad).reshape(-1)[: WORST_SHOWN - len(first_bad)].tolist()
                first_bad += [(offset + p, float(o64[p]), float(r64[p])) for p in where]
        del bad
        if bad_count:
            continue  # the verdict is the non-finite mismatch; only its counts go on
        count = int(finite.sum())
        if not count:
            continue
        finite_count += count
        everywhere = count == finite.numel()
        if everywhere:
            lo, hi = torch.aminmax(r64)
        else:
            lo = r64.masked_fill(~finite, inf).min()
            hi = r64.masked_fill(~finite, -inf).max()
        low, high = min(low, float(lo)), max(high, float(hi))
        # rule 3's evidence: is the output one value wherever the reference is finite?
        if first_value is None:
            at = 0 if everywhere else int(torch.nonzero(finite).reshape(-1)[0])
            first_value = float(o64[at])
        if constant:
            same = o64 == first_value
            constant = bool(same.all() if everywhere else (same | ~finite).all())
            del same
        kept = r64 if everywhere else r64.masked_fill(~finite, 0.0)
        scale += float(torch.linalg.vector_norm(kept)) ** 2
        del kept
        o64 = o64.sub_(r64)
        if not everywhere:
            o64.masked_fill_(~finite, 0.0)
        difference += float(torch.linalg.vector_norm(o64)) ** 2
        del o64, r64, finite
    if bad_count:
        parts = [f"{n} {what}" for n, what in ((nan_count, "NaN"), (inf_count, "Inf")) if n]
        head = (
            f"output has {' and '.join(parts)} where the reference is finite"
            if parts
            else "output's NaN/Inf pattern differs from the reference's"
        )
        return _fail(
            f"{head} ({bad_count} of {out.numel()} elements disagree); first: "
            f"{_listing(first_bad, shape)}",
            limit,
        )
    if finite_count == 0:
        return CheckResult(True, 0.0, limit, "every element is non-finite, as in the reference")
    difference, scale = math.sqrt(difference), math.sqrt(scale)
    error = difference / scale if scale > 0 else difference
    largest = max(abs(low), abs(high))
    if finite_count > 1 and constant and high - low > limit * largest:
        return _fail(
            f"output is constant (all {_fmt(first_value)}) but the reference is not (it ranges "
            f"from {_fmt(low)} to {_fmt(high)})",
            limit,
            error=error,
        )
    # rule 4
    if error <= limit:
        return CheckResult(
            True, error, limit, f"relative norm error {error:.3g} <= threshold {limit:.3g}"
        )
    allowance = _subnormal_allowance(out.dtype, finite_count)
    if difference <= limit * scale + allowance:
        return CheckResult(
            True, error, limit,
            f"relative norm error {error:.3g} over {limit:.3g}, but the difference "
            f"{difference:.3g} is within the threshold plus what rounding to "
            f"{out_name}'s subnormals alone makes ({allowance:.3g})",
        )  # fmt: skip
    worst: list[tuple[float, int, float, float]] = []  # (|out - ref|, position, out, ref)
    for offset, (o, r) in blocks.pieces(out.detach(), ref.detach(), block=block):
        o64 = o.to(device=r.device, dtype=torch.float64)
        r64 = r.to(torch.float64)
        gap = (o64 - r64).abs_().masked_fill_(~torch.isfinite(r64), 0.0)
        top = torch.topk(gap, min(WORST_SHOWN, gap.numel()))
        worst += [
            (float(v), offset + int(p), float(o64[p]), float(r64[p]))
            for v, p in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        ]
        worst = sorted(worst, key=lambda item: -item[0])[:WORST_SHOWN]
    explanation = threshold_explanation(dtype, math_mode, out_name)
    return _fail(
        f"relative norm error {error:.3g} exceeds the threshold {limit:.3g} ({explanation}); "
        f"worst elements: {_listing([(p, g, w) for _, p, g, w in worst], shape)}",
        limit,
        error=error,
    )


def _subnormal_allowance(out_dtype, count: int) -> float:
    """The norm of the error that rounding each of `count` outputs to the spacing of
    out_dtype's subnormals can make (two roundings of half a quantum each). Outputs that
    small carry fewer significant bits than the relative threshold assumes: an fp16 value of
    2e-5 is a multiple of 2^-24 = 6e-8, so one rounding is up to 0.15 % of it. Only outputs
    within a few quanta of zero gain from it (fp16: 6e-8; bf16 and fp32: below 1e-38)."""
    import torch

    finfo = torch.finfo(out_dtype)
    quantum = finfo.tiny * finfo.eps  # the spacing of subnormals
    return quantum * math.sqrt(count)


@contextmanager
def poisoned_allocations():
    """Inside, torch.empty (and empty_like, new_empty, ...) fill new memory with NaN."""
    import torch
    import torch.utils.deterministic as deterministic

    was_enabled = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_filling = deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            # Ops lacking a deterministic kernel (and cuBLAS's workspace note) only warn here.
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.use_deterministic_algorithms(was_enabled, warn_only=was_warn_only)
        deterministic.fill_uninitialized_memory = was_filling


def copy_with_layout(tensor):
    """A copy with the same sizes, strides, storage offset and padding bytes.

    tensor.clone() makes a non-dense view (rows with a stride above cols) contiguous, which
    would hide from the candidate the very layout it is being tested with.
    """
    import torch

    storage = blocks.storage_bytes(tensor).clone().untyped_storage()
    copy = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return copy.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())


def mutation(
    originals, given, *, who: str = "the implementation", block: int | None = None
) -> str | None:
    """How `who` changed its inputs (`given`, copies of `originals`), or None when every
    byte is as it was; a leaf that is not a tensor (None: one not checked) is skipped. The
    storages are compared a block of bytes at a time, the elements a block at a time."""
    import torch

    for position, (original, copy) in enumerate(zip(originals, given, strict=True)):
        if not isinstance(original, torch.Tensor) or blocks.same_bytes(
            original, copy, block=8 * blocks.block_size(block)
        ):
            continue
        changed = 0
        if tuple(original.shape) == tuple(copy.shape):
            for _, (before, after) in blocks.pieces(original.detach(), copy.detach(), block=block):
                before, after = before.to(torch.float64), after.to(torch.float64)
                same = (before == after) | (before.isnan() & after.isnan())
                changed += int((~same).sum())
        else:
            changed = original.numel()
        label = f"input {position} ({name_of(original.dtype)}{list(original.shape)})"
        if changed == 0:
            return f"{who} wrote into {label} outside its elements (its padding)"
        return f"{who} wrote into {label}: {changed} of {original.numel()} elements changed"
    return None


def _resolve_device(device):
    import torch

    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NoGPUError("checking on 'cuda' needs a CUDA GPU; pass device='cpu' to check here")
    return device


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_trial(
    fn, spec, shape, dtype, math_mode, seed, device, bf16_truncates=False
) -> CheckResult:
    import torch

    inputs = spec.make_inputs(shape, dtype, seed, device)
    reference = spec.reference(*inputs)
    given = tuple(copy_with_layout(x) if isinstance(x, torch.Tensor) else x for x in inputs)
    limit = threshold(dtype, math_mode, spec.out_dtype(dtype), bf16_truncates=bf16_truncates)
    _synchronize(device)
    try:
        with poisoned_allocations():
            out = fn(*given)
            _synchronize(device)
    except KernelabError:
        raise  # a missing tool or GPU is the environment's problem, not a wrong answer
    except Exception as exc:  # a crashing candidate is a failing candidate
        result = _fail(f"the implementation raised {type(exc).__name__}: {exc}", limit)
    else:
        written = mutation(inputs, given)
        if written:
            result = _fail(written, limit)
        else:
            result = compare(out, reference, dtype=dtype, math_mode=math_mode,
                             bf16_truncates=bf16_truncates)  # fmt: skip
    result.seed = seed
    return result


def check_implementation(
    fn: Callable,
    op: str,
    shape: dict,
    dtype: str,
    *,
    math_mode: str | None = None,
    trials: int = 3,
    device="cuda",
    seed: int | None = None,
    bf16_truncates: bool = False,
) -> CheckReport:
    """Run `fn` on `trials` freshly seeded inputs of `op` and judge every output.

    bf16_truncates: `fn` rounds fp32 to bf16 toward zero (a Triton kernel on the CPU
    interpreter); the bf16 rounding allowance doubles (kernelab.harness.tolerances).

    `fn` takes the inputs OPS[op].make_inputs returns, in order, and returns the output.
    Seeds are random unless `seed` is given (then seed, seed + 1, ...); the report lists them
    so a failure can be replayed. Stops at the first failing trial.
    """
    spec = get_op(op)
    shape = spec.validate(shape)
    if str(dtype).lower() == "tf32":
        dtype, math_mode = "fp32", math_mode or "tf32"
    dtype = spec.check_dtype(dtype)
    allowed = tolerance(dtype, math_mode, spec.out_dtype(dtype), bf16_truncates=bf16_truncates)
    limit = allowed.threshold  # (and math_mode validated)
    if not isinstance(trials, int) or trials < 1:
        raise KernelabError(f"trials must be a positive integer, got {trials!r}")
    device = _resolve_device(device)

    if seed is None:
        rng = random.SystemRandom()
        seeds = [rng.randrange(2**31) for _ in range(trials)]
    else:
        seeds = [int(seed) + i for i in range(trials)]

    results: list[CheckResult] = []
    for trial_seed in seeds:
        result = _run_trial(fn, spec, shape, dtype, math_mode, trial_seed, device, bf16_truncates)
        results.append(result)
        if not result.ok:
            break

    failed = next((r for r in results if not r.ok), None)
    worst = max(r.error for r in results)
    limit = (failed or results[-1]).threshold  # set by the output's dtype
    sizes = " ".join(f"{key}={value}" for key, value in shape.items())
    label = f"{op} {sizes} {dtype}" + (f" ({math_mode})" if math_mode else "")
    if failed is None:
        message = f"{label}: correct on {len(results)} trials, worst relative norm error {worst:.3g} <= {limit:.3g}"
    else:
        message = f"{label}: wrong on seed {failed.seed}: {failed.message}"
    return CheckReport(
        ok=failed is None,
        op=op,
        shape=shape,
        dtype=dtype,
        math_mode=math_mode,
        error=worst,
        threshold=limit,
        seeds=[r.seed for r in results],
        message=message,
        trials=results,
    )
