"""How far a correct kernel may stray from the float64 reference, derived from the formats.

The checker measures one number per output: the relative norm error

    error = ||out - ref||_2 / ||ref||_2        (in float64, ref computed in float64)

and accepts the output when `error <= threshold`. The threshold is not tuned until tests
are green; it is the sum of the two error sources a correct kernel is allowed to have.

1. Rounding to the working format, `2 * u_work`.
   Round-to-nearest moves every element by at most `u` relative (u = 2^-(mantissa bits + 1)),
   so one rounding of the whole output moves the norm by at most `u * ||ref||`. A correct
   kernel may round twice: the result once, and either its inputs (tf32 tensor cores round
   fp32 operands to a 10-bit mantissa) or one intermediate kept in the output dtype. In
   practice a rounding costs 0.4-0.6 u in rms, so two u also covers a few more roundings.
   `u_work` is the coarsest of the output format and the math mode's operand format.
   Inputs already stored in bf16, fp16 or fp8 are exact: the reference uses the same values,
   so they add nothing.

2. Accumulation, `3 * u_acc * sqrt(K_MAX / 6)`.
   A length-K sum of random zero-mean products accumulated in one sequential chain (one
   thread's FMA loop over K in a GEMM) has rms relative error about `u_acc * sqrt(K / 6)`:
   the partial sums grow like sqrt(i), each step adds `u_acc * |partial sum|` of random
   sign, and sum_i i = K^2 / 2 over a result of size sqrt(K). Measured in fp32 with numpy:
   4.4e-6 at K = 65536 against the model's 6.2e-6. We bound chains up to K_MAX = 65536 with
   a factor 3 of margin. Softmax and norm reductions split their rows across threads, so
   their chains are far shorter than the row. Accumulation is fp32 (u_acc = 2^-24) for
   every input dtype except fp8, whose Hopper tensor-core accumulator keeps about 14
   mantissa bits (DeepSeek-V3 technical report, section 3.3.2): u_acc = 2^-14 there.

The resulting table (output in the input's dtype; fp8 GEMMs write bf16):

| inputs | math mode | output | u_work          | 2 u_work | accumulation | threshold |
|--------|-----------|--------|-----------------|----------|--------------|-----------|
| fp64   | ieee      | fp64   | 2^-53 = 1.1e-16 | 2.2e-16  | 3.5e-14      | 3.5e-14   |
| fp32   | ieee      | fp32   | 2^-24 = 6.0e-8  | 1.2e-7   | 1.9e-5       | 1.9e-5    |
| fp32   | tf32      | fp32   | 2^-11 = 4.9e-4  | 9.8e-4   | 1.9e-5       | 1.0e-3    |
| fp16   | ieee      | fp16   | 2^-11 = 4.9e-4  | 9.8e-4   | 1.9e-5       | 1.0e-3    |
| bf16   | ieee      | bf16   | 2^-8  = 3.9e-3  | 7.8e-3   | 1.9e-5       | 7.8e-3    |
| fp8    | ieee      | bf16   | 2^-8  = 3.9e-3  | 7.8e-3   | 1.9e-2       | 2.7e-2    |
| fp8    | ieee      | fp8    | 2^-4  = 6.3e-2  | 1.3e-1   | 1.9e-2       | 1.4e-1    |

What the thresholds catch: any structural bug (zeros, a transpose, a missed tile, a wrong
scale) costs an error of order 1; an element left unwritten is NaN under the checker's
poisoned allocator; computing an fp32 GEMM in bf16 costs about 2e-3, a hundred times the
fp32 threshold; tf32 operands in place of fp32 cost about 3e-4, fifteen times it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown

# Unit roundoff 2^-(stored mantissa bits + 1) of each format a result may pass through.
UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
    "fp8": 2.0**-4,  # e4m3: 3 stored mantissa bits
}

# The longest sequential accumulation chain the bound covers (GEMM K).
K_MAX = 65536
ACCUMULATION_MARGIN = 3.0

# Effective accumulator precision per input dtype; fp8 tensor cores accumulate with ~14 bits.
_ACCUMULATOR_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "fp16": 2.0**-24,
    "bf16": 2.0**-24,
    "fp8": 2.0**-14,
}

# The GEMM output dtype when none is named: the input's own, except fp8 which writes bf16.
_DEFAULT_OUTPUT = {"fp8": "bf16"}

# Math modes: None/"ieee" multiplies the inputs as stored; "tf32" rounds fp32 operands first.
MATH_MODES = ("ieee", "tf32")


@dataclass(frozen=True)
class Tolerance:
    dtype: str  # input dtype
    math_mode: str  # "ieee" or "tf32"
    out_dtype: str
    threshold: float  # on the relative norm error
    explanation: str  # one line: where the number comes from


def _normalize(dtype: str, math_mode: str | None) -> tuple[str, str]:
    dtype = str(dtype).lower()
    if dtype == "tf32":  # a math mode over fp32 storage
        if math_mode not in (None, "tf32"):
            raise KernelabError(f"dtype tf32 implies math mode tf32, not {math_mode!r}")
        return "fp32", "tf32"
    if dtype not in _ACCUMULATOR_ROUNDOFF:
        raise unknown("dtype with a tolerance", dtype, _ACCUMULATOR_ROUNDOFF)
    mode = "ieee" if math_mode is None else str(math_mode).lower()
    if mode not in MATH_MODES:
        raise unknown("math mode", mode, MATH_MODES)
    if mode == "tf32" and dtype != "fp32":
        raise KernelabError(f"math mode tf32 applies to fp32 inputs, not {dtype}")
    return dtype, mode


def tolerance(
    dtype: str,
    math_mode: str | None = None,
    out_dtype: str | None = None,
    *,
    bf16_truncates: bool = False,
) -> Tolerance:
    """The threshold for inputs of `dtype` multiplied in `math_mode`, written as `out_dtype`.

    bf16_truncates: the arithmetic that made the output rounds fp32 to bf16 toward zero, as
    Triton's CPU interpreter does (TRITON_INTERPRET=1 keeps bf16 as 16-bit words and drops
    the low half of the fp32; with Triton 3.9, 496 of 1,024 uniform values came out one ulp
    below round-to-nearest, none above). A rounding then moves an element by up to a whole
    ulp, 2u, so the rounding allowance doubles wherever bf16 sets it; GPUs round to nearest.
    """
    dtype, mode = _normalize(dtype, math_mode)
    out = _DEFAULT_OUTPUT.get(dtype, dtype) if out_dtype is None else str(out_dtype).lower()
    if out not in UNIT_ROUNDOFF or out == "tf32":
        raise unknown(
            "output dtype with a tolerance", out, [d for d in UNIT_ROUNDOFF if d != "tf32"]
        )

    # Operands rounded by the math mode; inputs already in a narrow dtype are exact.
    u_operands = UNIT_ROUNDOFF["tf32"] if mode == "tf32" else 0.0
    u_out = UNIT_ROUNDOFF[out]
    u_work = max(u_operands, u_out)
    truncating = bf16_truncates and u_work == UNIT_ROUNDOFF["bf16"]
    rounding = 2.0 * u_work * (2.0 if truncating else 1.0)

    u_acc = _ACCUMULATOR_ROUNDOFF[dtype]
    accumulation = ACCUMULATION_MARGIN * u_acc * math.sqrt(K_MAX / 6.0)

    value = rounding + accumulation
    work_name = "tf32" if u_operands > u_out else out
    roundings = (
        f"2 roundings toward zero to {work_name} (2 x 2 x {u_work:.2g}, Triton's interpreter)"
        if truncating
        else f"2 roundings to {work_name} (2 x {u_work:.2g})"
    )
    explanation = (
        f"{dtype} inputs, {mode} math, {out} output: {roundings} "
        f"+ accumulation in chains up to K={K_MAX} "
        f"({ACCUMULATION_MARGIN:g} x {u_acc:.2g} x sqrt(K/6) = {accumulation:.2g}) = {value:.2g} "
        "relative norm error"
    )
    return Tolerance(dtype, mode, out, value, explanation)


def threshold(
    dtype: str,
    math_mode: str | None = None,
    out_dtype: str | None = None,
    *,
    bf16_truncates: bool = False,
) -> float:
    """The largest relative norm error a correct kernel may have (see the module's table)."""
    return tolerance(dtype, math_mode, out_dtype, bf16_truncates=bf16_truncates).threshold


def threshold_explanation(
    dtype: str, math_mode: str | None = None, out_dtype: str | None = None
) -> str:
    """One line saying where `threshold(dtype, math_mode, out_dtype)` comes from."""
    return tolerance(dtype, math_mode, out_dtype).explanation
