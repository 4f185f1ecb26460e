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
from kernelab.harness.tolerances import threshold, threshold_explanation, tolerance
from kernelab.spec.op_spec import name_of
from kernelab.spec.reference import get_op

__all__ = [
    "CheckReport",
    "CheckResult",
    "check_implementation",
    "compare",
    "copy_with_layout",
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


def _listing(positions, out64, ref64) -> str:
    out_flat, ref_flat = out64.reshape(-1), ref64.reshape(-1)
    return "; ".join(
        f"{_index(int(p), ref64.shape)} got {_fmt(float(out_flat[p]))} "
        f"expected {_fmt(float(ref_flat[p]))}"
        for p in positions
    )


def _non_finite_mismatch(out64, ref64) -> str | None:
    """A sentence describing where out and ref disagree on NaN/+inf/-inf, or None."""
    import torch

    inf = float("inf")
    bad = (
        (out64.isnan() != ref64.isnan())
        | ((out64 == inf) != (ref64 == inf))
        | ((out64 == -inf) != (ref64 == -inf))
    )
    if not bool(bad.any()):
        return None
    ref_finite = torch.isfinite(ref64)
    nan_count = int((out64.isnan() & ref_finite).sum())
    inf_count = int((out64.isinf() & ref_finite).sum())
    parts = []
    if nan_count:
        parts.append(f"{nan_count} NaN")
    if inf_count:
        parts.append(f"{inf_count} Inf")
    if parts:
        head = f"output has {' and '.join(parts)} where the reference is finite"
    else:
        head = "output's NaN/Inf pattern differs from the reference's"
    positions = torch.nonzero(bad.reshape(-1)).reshape(-1)[:WORST_SHOWN].tolist()
    return (
        f"{head} ({int(bad.sum())} of {bad.numel()} elements disagree); first: "
        f"{_listing(positions, out64, ref64)}"
    )


def _fail(message: str, limit: float, error: float = math.inf) -> CheckResult:
    return CheckResult(ok=False, error=error, threshold=limit, message=message)


def compare(
    out, ref, *, dtype: str, math_mode: str | None = None, bf16_truncates: bool = False
) -> CheckResult:
    """Judge `out` against the float64 reference `ref` for inputs of `dtype`.

    The output's own dtype sets the rounding allowance (an fp32 result of bf16 inputs is
    held to fp32's threshold); see kernelab.harness.tolerances. bf16_truncates: the output
    was made where fp32 -> bf16 rounds toward zero (Triton's CPU interpreter).
    """
    import torch

    limit = threshold(dtype, math_mode, bf16_truncates=bf16_truncates)
    if not isinstance(out, torch.Tensor):
        return _fail(f"the implementation returned {type(out).__name__}, not a tensor", limit)
    ref = ref.to(torch.float64)
    if tuple(out.shape) != tuple(ref.shape):
        return _fail(
            f"output shape {tuple(out.shape)} but the reference's is {tuple(ref.shape)}", limit
        )
    try:
        out_name = name_of(out.dtype)
        limit = threshold(dtype, math_mode, out_name, bf16_truncates=bf16_truncates)
    except KernelabError:
        return _fail(f"output dtype {out.dtype} is not a floating type kernelab checks", limit)
    out64 = out.detach().to(device=ref.device, dtype=torch.float64)

    mismatch = _non_finite_mismatch(out64, ref)
    if mismatch:
        return _fail(mismatch, limit)

    finite = torch.isfinite(ref)
    out_finite, ref_finite = out64[finite], ref[finite]
    if out_finite.numel() == 0:
        return CheckResult(True, 0.0, limit, "every element is non-finite, as in the reference")

    ref_spread = float(ref_finite.max() - ref_finite.min())
    ref_scale = float(ref_finite.abs().max())
    if out_finite.numel() > 1 and bool((out_finite == out_finite[0]).all()):
        if ref_spread > limit * ref_scale:
            return _fail(
                f"output is constant (all {_fmt(float(out_finite[0]))}) but the reference is "
                f"not (it ranges from {_fmt(float(ref_finite.min()))} to "
                f"{_fmt(float(ref_finite.max()))})",
                limit,
                error=_relative_error(out_finite, ref_finite),
            )

    error = _relative_error(out_finite, ref_finite)
    explanation = threshold_explanation(dtype, math_mode, out_name)
    if error <= limit:
        return CheckResult(
            True, error, limit, f"relative norm error {error:.3g} <= threshold {limit:.3g}"
        )
    difference = float((out_finite - ref_finite).norm())
    allowance = _subnormal_allowance(out.dtype, out_finite.numel())
    if difference <= limit * float(ref_finite.norm()) + allowance:
        return CheckResult(
            True, error, limit,
            f"relative norm error {error:.3g} over {limit:.3g}, but the difference "
            f"{difference:.3g} is within the threshold plus what rounding to "
            f"{out_name}'s subnormals alone makes ({allowance:.3g})",
        )  # fmt: skip

    diff = (out64 - ref).abs()
    diff[~finite] = 0.0
    worst = torch.topk(diff.reshape(-1), min(WORST_SHOWN, diff.numel())).indices.tolist()
    return _fail(
        f"relative norm error {error:.3g} exceeds the threshold {limit:.3g} ({explanation}); "
        f"worst elements: {_listing(worst, out64, ref)}",
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


def _relative_error(out64, ref64) -> float:
    """||out - ref|| / ||ref||; the absolute norm when the reference is all zeros."""
    difference = float((out64 - ref64).norm())
    scale = float(ref64.norm())
    return difference / scale if scale > 0 else difference


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


def _storage_bytes(tensor):
    """Every byte of the tensor's storage, padding included, as a flat uint8 tensor."""
    import torch

    flat = torch.empty(0, dtype=torch.uint8, device=tensor.device)
    return flat.set_(tensor.untyped_storage())


def copy_with_layout(tensor):
    """A copy with the same sizes, strides, storage offset and padding bytes.

    tensor.clone() makes a non-dense view (rows with a stride above cols) contiguous, which
    would hide from the candidate the very layout it is being tested with.
    """
    import torch

    storage = _storage_bytes(tensor).clone().untyped_storage()
    copy = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return copy.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())


def _mutation(originals, given) -> str | None:
    """How the candidate changed its inputs, or None when every byte is as it was."""
    import torch

    for position, (original, copy) in enumerate(zip(originals, given, strict=True)):
        if not isinstance(original, torch.Tensor):
            continue
        if torch.equal(_storage_bytes(original), _storage_bytes(copy)):
            continue
        before = original.to(torch.float64)
        after = copy.to(torch.float64)
        same = (before == after) | (before.isnan() & after.isnan())
        changed = int((~same).sum())
        label = f"input {position} ({name_of(original.dtype)}{list(original.shape)})"
        if changed == 0:
            return f"the implementation wrote into {label} outside its elements (its padding)"
        return (
            f"the implementation wrote into {label}: {changed} of {original.numel()} "
            "elements changed"
        )
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
        mutation = _mutation(inputs, given)
        if mutation:
            result = _fail(mutation, limit)
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
