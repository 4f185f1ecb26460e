"""The PMPP primitives' specifications: reduce_sum, transpose, histogram and scan (the ops of
the primitives ladders)."""

from __future__ import annotations

from kernelab.spec.op_spec import FLOAT_DTYPES, OpSpec, as_float64, canonical_name, normals

# reduce_sum draws N(0, 1) + 1: a sum near n, far from zero, so its relative error is
# well defined (a zero-mean draw sums to about sqrt(n), sometimes to almost nothing, and a
# scalar's relative error would then blow up for a correct kernel). The output is fp32 for
# every input dtype (fp32 accumulation), so the checker holds it to fp32's threshold
# (kernelab.harness.tolerances): its accumulation term covers sequential fp32 chains up to
# K_MAX = 65536 terms, and every kernel of the reduction ladder keeps its chains below that
# (a thread sums at most n / 2^18 elements before the tree; see ladders/reduce/steps.py).
REDUCE_SUM_INPUT_OFFSET = 1.0


def _make_reduce_sum(shape, torch_dtype, generator, device):
    return (
        normals((shape["n"],), generator, device, 1.0, REDUCE_SUM_INPUT_OFFSET).to(torch_dtype),
    )


def _reference_reduce_sum(x):
    return as_float64(x).sum()


def _eager_reduce_sum(x):
    import torch

    return torch.sum(x, dtype=torch.float32)


def _cost_reduce_sum(shape, dtype):
    from kernelab.roofline import costs

    return costs.reduce_sum(shape["n"], dtype=dtype)


# ---- transpose and histogram (the primitives ladders) -------------------------------------

# Every HISTOGRAM_OUT_OF_RANGE_EVERY-th int32 id is out of range (alternately -1 and bins), so
# every check exercises the overflow slot.
HISTOGRAM_OUT_OF_RANGE_EVERY = 97


def _make_transpose(shape, torch_dtype, generator, device):
    return (normals((shape["rows"], shape["cols"]), generator, device).to(torch_dtype),)


def _make_histogram(shape, torch_dtype, generator, device):
    import torch

    n, bins = shape["n"], shape["bins"]
    if torch_dtype == torch.uint8:  # bytes: every value 0..255, those >= bins out of range
        values = torch.randint(0, 256, (n,), generator=generator, device=device)
        return values.to(torch.uint8), bins
    values = torch.randint(0, bins, (n,), generator=generator, device=device)
    every = HISTOGRAM_OUT_OF_RANGE_EVERY
    values[every - 1 :: 2 * every] = -1
    values[2 * every - 1 :: 2 * every] = bins
    return values.to(torch_dtype), bins


def _reference_transpose(x):
    return as_float64(x).t().contiguous()


def histogram_counts(values, bins: int):
    """Exact int64 counts[bins + 1] of any integer tensor: the last slot holds the values
    outside [0, bins)."""
    import torch

    flat = values.reshape(-1).to(torch.int64)
    slot = torch.where((flat >= 0) & (flat < bins), flat, torch.full_like(flat, bins))
    return torch.bincount(slot, minlength=bins + 1)


def _eager_transpose(x):
    return x.t().contiguous()


def _eager_histogram(values, bins):
    return histogram_counts(values, bins)


def _cost_transpose(shape, dtype):
    from kernelab.roofline import costs

    return costs.transpose(shape["rows"], shape["cols"], dtype=dtype)


def _cost_histogram(shape, dtype):
    from kernelab.roofline import costs

    return costs.histogram(shape["n"], shape["bins"], dtype=dtype)


# ---- scan (the scan ladder): inclusive or exclusive prefix sums of x[n] ---------------------
#
# Inputs (x, exclusive): x[n] fp32 or int32, exclusive a bool (the drawn inputs are
# inclusive). out[i] = x[0] + ... + x[i], or x[0] + ... + x[i - 1] with out[0] = 0.
# fp32: the reference is the float64 cumsum. The fp32 inputs are N(0, 1) + 1, as reduce_sum's:
# prefixes grow like i, far from zero, so a relative error is well defined. int32: exact,
# computed in int64 and cast to int32, i.e. modulo 2^32 in two's complement (the kernels'
# wrapping adds); the int32 inputs span the whole range, so the running sums wrap.
SCAN_INPUT_OFFSET = 1.0
SCAN_FP32_ROUNDOFF = 2.0**-24  # harness.tolerances.UNIT_ROUNDOFF["fp32"]
SCAN_ACCUMULATION_MARGIN = 3.0  # harness.tolerances.ACCUMULATION_MARGIN


def scan_tolerance(n: int, dtype: str) -> float:
    """The relative norm error a correct scan of n elements may have against the reference.

    int32: 0 (exact). fp32: the prefixes of a correct scan are sums whose longest sequential
    chain may be n adds (a CPU cumsum; the ladder's chains are far shorter: n / 2048 tile
    prefixes plus a few hundred adds inside a tile). With mean-1 inputs the partial sum after
    j adds is about j, each add rounds it by u * j with a random sign, so prefix i carries an
    rms error u * sqrt(i^3 / 3); over all prefixes, against ||ref|| ~ sqrt(n^3 / 3), that is
    u * sqrt(n / 4). The bound has the checker's shape (kernelab.harness.tolerances, whose
    constants these mirror: spec sits below harness): two roundings to fp32, 2u, plus a
    margin of 3 on that accumulation term.
    """
    import math

    if canonical_name(dtype) == "int32":
        return 0.0
    u = SCAN_FP32_ROUNDOFF
    return 2.0 * u + SCAN_ACCUMULATION_MARGIN * u * math.sqrt(max(int(n), 1) / 4.0)


def _make_scan(shape, torch_dtype, generator, device):
    import torch

    n = shape["n"]
    if torch_dtype == torch.int32:
        low, high = -(2**31), 2**31
        values = torch.randint(low, high, (n,), generator=generator, device=device)
        return values.to(torch.int32), False
    return normals((n,), generator, device, 1.0, SCAN_INPUT_OFFSET).to(torch_dtype), False


def _shift_exclusive(prefix):
    import torch

    return torch.cat([torch.zeros_like(prefix[:1]), prefix[:-1]])


def _reference_scan(x, exclusive=False):
    """float64 prefix sums of fp32 x; exact wrapping int32 prefix sums of int32 x."""
    import torch

    if x.dtype == torch.int32:
        prefix = torch.cumsum(x.to(torch.int64), 0).to(torch.int32)  # modulo 2^32
    else:
        prefix = torch.cumsum(as_float64(x), 0)
    return _shift_exclusive(prefix) if exclusive else prefix


def _eager_scan(x, exclusive=False):
    """torch.cumsum in x's dtype, as a user calls it for an int32 answer (dtype=x.dtype: torch
    accumulates int32 in int32 then, and the sums wrap as the reference's)."""
    import torch

    prefix = torch.cumsum(x, 0, dtype=x.dtype)
    return _shift_exclusive(prefix) if exclusive else prefix


def _cost_scan(shape, dtype):
    from kernelab.roofline import costs

    return costs.scan(shape["n"], dtype=dtype)


_SCAN = OpSpec(
    "scan",
    ("n",),
    ("fp32", "int32"),
    "prefix sums of x[n], inclusive (exclusive with the second input True); int32 wraps",
    _make_scan,
    _reference_scan,
    _eager_scan,
    _cost_scan,
)


PRIMITIVE_OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "reduce_sum",
            ("n",),
            FLOAT_DTYPES,
            "sum of the n elements of x, accumulated and returned in fp32",
            _make_reduce_sum,
            _reference_reduce_sum,
            _eager_reduce_sum,
            _cost_reduce_sum,
            output_dtype="fp32",
        ),
        OpSpec(
            "transpose",
            ("rows", "cols"),
            ("fp64", *FLOAT_DTYPES),
            "x[rows, cols].t().contiguous()",
            _make_transpose,
            _reference_transpose,
            _eager_transpose,
            _cost_transpose,
        ),
        OpSpec(
            "histogram",
            ("n", "bins"),
            ("int32", "uint8"),
            "int64 counts[bins + 1] of values[n]; the last slot counts ids outside [0, bins)",
            _make_histogram,
            histogram_counts,
            _eager_histogram,
            _cost_histogram,
        ),
        _SCAN,
    )
}
