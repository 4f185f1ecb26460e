"""What each op must compute and move: FLOPs and the minimum bytes, the roofline's x axis.

Minimum bytes means every input read from memory once and every output written once, at
the size of its dtype: the traffic a perfect kernel with unlimited on-chip storage would
cause. A real kernel moves at least this much, so a time measured against these bytes can
only understate the bandwidth it needed, never flatter it.

FLOPs count a multiply and an add as two (a fused multiply-add is two), integer ops as
ops, and a transcendental (exp, rsqrt) as one. Each cost model states its conventions in
the one-line `explanation` the OpCost carries, which is printed to the user.

Every OpCost's `shape` holds every argument of its cost model except `dtype`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown

# Storage bytes per element. tf32 is a math mode over fp32 storage; fp4 packs two per byte.
_DTYPE_BYTES = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "int32": 4.0,  # histogram bin ids, integer scans
    "uint8": 1.0,  # histogram bytes
}
# Storage types whose arithmetic is integer (int8 is here too, though its tensor-core rate is
# listed: an int8 MMA counts its multiply-adds as operations; int32 and uint8 have no rate).
INTEGER_DTYPES = frozenset({"int8", "int32", "uint8"})

# Spellings people type for the same dtypes (torch names, short forms).
_DTYPE_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "nvfp4": "fp4",
}

# Inputs too narrow to be a useful output: their GEMMs write a wider result by default.
_WIDER_GEMM_OUTPUT = {"fp8": "bf16", "fp4": "bf16"}


def canonical_dtype(dtype: str) -> str:
    """The dtype's canonical name ("bfloat16" -> "bf16"); UnknownNameError if there is none."""
    key = str(dtype).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _DTYPE_BYTES:
        raise unknown("dtype", str(dtype), _DTYPE_BYTES)
    return key


def dtype_bytes(dtype: str) -> float:
    """Bytes one element of `dtype` occupies in memory (0.5 for fp4)."""
    return _DTYPE_BYTES[canonical_dtype(dtype)]


@dataclass(frozen=True)
class OpCost:
    op: str
    shape: dict  # every argument of the cost model but dtype, e.g. {"m": 4096, ..., "batch": 1}
    dtype: str  # the input dtype (canonical name)
    flops: float
    bytes: float  # minimum bytes moved: inputs read once, outputs written once
    explanation: str  # one line: how flops and bytes were counted

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes

    def to_dict(self) -> dict:
        return {
            "op": self.op,
            "shape": dict(self.shape),
            "dtype": self.dtype,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "explanation": self.explanation,
        }


# The largest count a cost model takes: every integer up to 2**53 is exact in a float, so
# FLOPs and bytes (floats) stay exact in each factor; a larger count is no real shape.
MAX_COUNT = 2**53


def count_text(number: int) -> str:
    """An integer as an error message shows it: its digits, or its length when it is huge."""
    digits = str(number)
    return digits if len(digits) <= 24 else f"a {len(digits.lstrip('-'))}-digit number"


def _count(op: str, name: str, value, *, minimum: int = 1) -> int:
    """`value` as an int from `minimum` to MAX_COUNT; a one-line KernelabError naming it
    otherwise."""
    kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if isinstance(value, bool):
        raise KernelabError(f"{op}: {name} must be {kind}, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise KernelabError(f"{op}: {name} must be {kind}, got {value!r}") from None
    if number < minimum:
        raise KernelabError(f"{op}: {name} must be {kind}, got {count_text(number)}")
    if number > MAX_COUNT:
        raise KernelabError(
            f"{op}: {name} must be at most 2**53 = {MAX_COUNT} (exact in a float), "
            f"got {count_text(number)}"
        )
    return number


def gemm(m, n, k, *, batch=1, dtype="bf16", out_dtype=None) -> OpCost:
    """C[M,N] = A[M,K] @ B[K,N], `batch` times."""
    m, n, k = (_count("gemm", name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    batch = _count("gemm", "batch", batch)
    dtype = canonical_dtype(dtype)
    out_dtype = canonical_dtype(out_dtype) if out_dtype else _WIDER_GEMM_OUTPUT.get(dtype, dtype)
    # One multiply and one add per multiply-accumulate, M*N*K of them per product.
    flops = 2.0 * m * n * k * batch
    # Read A (M*K) and B (K*N) once, write C (M*N) once, per product.
    bytes_ = batch * ((m * k + k * n) * dtype_bytes(dtype) + m * n * dtype_bytes(out_dtype))
    explanation = (
        "2*M*N*K FLOPs (a multiply and an add per MAC); bytes = (M*K + K*N) inputs at "
        f"{dtype} + M*N output at {out_dtype}" + (f", x batch {batch}" if batch > 1 else "")
    )
    shape = {"m": m, "n": n, "k": k, "batch": batch, "out_dtype": out_dtype}
    return OpCost("gemm", shape, dtype, flops, bytes_, explanation)


def gemv(m, n, *, dtype) -> OpCost:
    """y[M] = A[M,N] @ x[N]."""
    m, n = _count("gemv", "m", m), _count("gemv", "n", n)
    dtype = canonical_dtype(dtype)
    flops = 2.0 * m * n
    # Read A (M*N) and x (N), write y (M): the matrix dominates, so intensity is ~1 FLOP per element.
    bytes_ = (m * n + n + m) * dtype_bytes(dtype)
    explanation = f"2*M*N FLOPs; bytes = M*N matrix + N vector read, M written, at {dtype}"
    return OpCost("gemv", {"m": m, "n": n}, dtype, flops, bytes_, explanation)


def elementwise(n, *, reads=2, writes=1, flops_per_element=1, dtype) -> OpCost:
    """An n-element map reading `reads` tensors and writing `writes` (z = x + y by default)."""
    n = _count("elementwise", "n", n)
    reads = _count("elementwise", "reads", reads, minimum=0)
    writes = _count("elementwise", "writes", writes, minimum=0)
    flops_per_element = _count("elementwise", "flops_per_element", flops_per_element, minimum=0)
    if reads + writes == 0:
        raise KernelabError("elementwise: reads + writes must be at least 1")
    dtype = canonical_dtype(dtype)
    flops = float(n * flops_per_element)
    bytes_ = n * (reads + writes) * dtype_bytes(dtype)
    explanation = (
        f"{flops_per_element} FLOP(s) per element; bytes = n x ({reads} read(s) + "
        f"{writes} write(s)) at {dtype}"
    )
    shape = {"n": n, "reads": reads, "writes": writes, "flops_per_element": flops_per_element}
    return OpCost("elementwise", shape, dtype, flops, bytes_, explanation)


# Softmax per element: a max compare, a subtract, an exp, a running-sum add and a divide
# (a multiply by the row's reciprocal in practice).
SOFTMAX_FLOPS_PER_ELEMENT = 5


def softmax(rows, cols, *, dtype) -> OpCost:
    """Softmax over the last dim of x[rows, cols]."""
    rows, cols = _count("softmax", "rows", rows), _count("softmax", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    flops = float(SOFTMAX_FLOPS_PER_ELEMENT * elements)
    bytes_ = 2 * elements * dtype_bytes(dtype)  # read x, write y
    explanation = (
        f"{SOFTMAX_FLOPS_PER_ELEMENT} FLOPs per element (max, subtract, exp, sum, divide); "
        f"bytes = read + write rows*cols at {dtype}"
    )
    return OpCost("softmax", {"rows": rows, "cols": cols}, dtype, flops, bytes_, explanation)


def layernorm(rows, cols, *, dtype, bias=True) -> OpCost:
    """LayerNorm over the last dim of x[rows, cols] with a weight (and a bias) of cols."""
    rows, cols = _count("layernorm", "rows", rows), _count("layernorm", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    # Per element: add for the mean, subtract it, square and add for the variance, multiply
    # by rstd, multiply by weight (, add bias). The per-row rsqrt is ignored: 1/cols of it.
    per_element = 7 if bias else 6
    flops = float(per_element * elements)
    params = 2 if bias else 1  # weight (and bias): cols elements each, read once
    bytes_ = (2 * elements + params * cols) * dtype_bytes(dtype)  # read x, write y
    affine = "weight + bias" if bias else "weight"
    explanation = (
        f"{per_element} FLOPs per element (mean, center, variance, normalize, {affine}); "
        f"bytes = read x + write y (rows*cols) + {affine} (cols) once, at {dtype}"
    )
    shape = {"rows": rows, "cols": cols, "bias": bool(bias)}
    return OpCost("layernorm", shape, dtype, flops, bytes_, explanation)


def rmsnorm(rows, cols, *, dtype) -> OpCost:
    """RMSNorm over the last dim of x[rows, cols] with a weight of cols."""
    rows, cols = _count("rmsnorm", "rows", rows), _count("rmsnorm", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    # Per element: square and add for the mean square, multiply by rstd, multiply by weight.
    flops = 4.0 * elements
    bytes_ = (2 * elements + cols) * dtype_bytes(dtype)  # read x, write y, read weight once
    explanation = (
        "4 FLOPs per element (square, sum, normalize, weight); bytes = read x + write y "
        f"(rows*cols) + weight (cols) once, at {dtype}"
    )
    return OpCost("rmsnorm", {"rows": rows, "cols": cols}, dtype, flops, bytes_, explanation)


def softmax_backward(rows, cols, *, dtype) -> OpCost:
    """dx = y * (dy - sum(dy * y)) over the last dim of y[rows, cols] and dy[rows, cols]."""
    rows = _count("softmax_backward", "rows", rows)
    cols = _count("softmax_backward", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    # Per element: multiply and add for the row's dot product, subtract it, multiply by y.
    flops = 4.0 * elements
    bytes_ = 3 * elements * dtype_bytes(dtype)  # read y, read dy, write dx
    explanation = (
        "4 FLOPs per element (dy*y, sum, subtract, multiply); bytes = read y + read dy + "
        f"write dx (rows*cols each) at {dtype}"
    )
    return OpCost("softmax_backward", {"rows": rows, "cols": cols}, dtype, flops, bytes_,
                  explanation)  # fmt: skip


def rmsnorm_backward(rows, cols, *, dtype) -> OpCost:
    """dx and dweight of RMSNorm from x[rows, cols], weight[cols] and dy[rows, cols]."""
    rows = _count("rmsnorm_backward", "rows", rows)
    cols = _count("rmsnorm_backward", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    # Per element: x^2 and its sum, w*dy, times xhat and its sum (rstd * x recomputed),
    # the dx combination (multiply, subtract, multiply) and dy*xhat added into dw: 11.
    flops = 11.0 * elements
    # read x and dy, write dx (rows*cols each); read weight and write dweight once (cols
    # each). A kernel's fp32 dweight partials (programs*cols) are its own overhead.
    bytes_ = (3 * elements + 2 * cols) * dtype_bytes(dtype)
    explanation = (
        "11 FLOPs per element (mean square, w*dy*xhat sum, dx, dw); bytes = read x + read dy + "
        f"write dx (rows*cols each) + read weight + write dweight (cols each) at {dtype}"
    )
    return OpCost("rmsnorm_backward", {"rows": rows, "cols": cols}, dtype, flops, bytes_,
                  explanation)  # fmt: skip


def reduction(rows, cols, *, dtype) -> OpCost:
    """A sum over the last dim of x[rows, cols]: one value per row."""
    rows, cols = _count("reduction", "rows", rows), _count("reduction", "cols", cols)
    dtype = canonical_dtype(dtype)
    # One add per element (cols - 1 per row, rounded up to cols); integer adds are no FLOPs.
    integer = dtype in INTEGER_DTYPES
    flops = 0.0 if integer else float(rows * cols)
    bytes_ = (rows * cols + rows) * dtype_bytes(dtype)  # read x, write one value per row
    adds = "integer adds (no FLOPs)" if integer else "1 FLOP per element (an add)"
    explanation = f"{adds}; bytes = read rows*cols + write rows at {dtype}"
    return OpCost("reduction", {"rows": rows, "cols": cols}, dtype, flops, bytes_, explanation)


def reduce_sum(n, *, dtype) -> OpCost:
    """The sum of all n elements of x to one fp32 value (fp32 accumulation)."""
    n = _count("reduce_sum", "n", n)
    dtype = canonical_dtype(dtype)
    # n - 1 adds, whatever the order; integer adds are not floating-point operations, so an
    # int32 sum has no FLOPs to place (as scan counts them).
    integer = dtype in INTEGER_DTYPES
    flops = 0.0 if integer else float(n - 1)
    # Read x once; the one fp32 value written is 4 bytes, kept so that n = 1 is not free.
    bytes_ = n * dtype_bytes(dtype) + 4
    adds = "n - 1 integer adds (no FLOPs)" if integer else "n - 1 adds"
    explanation = f"{adds}; bytes = read n at {dtype} + write one fp32 value"
    return OpCost("reduce_sum", {"n": n}, dtype, flops, bytes_, explanation)


def transpose(rows, cols, *, dtype) -> OpCost:
    """out[cols, rows] = in[rows, cols]: every element read once and written once."""
    rows, cols = _count("transpose", "rows", rows), _count("transpose", "cols", cols)
    dtype = canonical_dtype(dtype)
    moved = rows * cols * dtype_bytes(dtype)
    return OpCost(
        "transpose", {"rows": rows, "cols": cols}, dtype, 0.0, 2.0 * moved,
        f"read {rows}x{cols}x{dtype_bytes(dtype):g} B, write the same; no FLOPs",
    )  # fmt: skip


HISTOGRAM_COUNT_BYTES = 8  # int64 counts: n past 2^32 cannot wrap a bin


def histogram(n, bins, *, dtype) -> OpCost:
    """counts[bins + 1] of n values: the values read once, the counts (one overflow slot)
    written once; the increments are not FLOPs."""
    n, bins = _count("histogram", "n", n), _count("histogram", "bins", bins)
    dtype = canonical_dtype(dtype)
    read = n * dtype_bytes(dtype)
    written = (bins + 1) * HISTOGRAM_COUNT_BYTES
    return OpCost(
        "histogram", {"n": n, "bins": bins}, dtype, 0.0, read + written,
        f"read {n}x{dtype_bytes(dtype):g} B, write ({bins}+1)x{HISTOGRAM_COUNT_BYTES} B counts",
    )  # fmt: skip


def causal_pairs(seq_q: int, seq_k: int) -> float:
    """Query-key pairs a causal mask keeps, counted as the area under the diagonal.

    The mask is aligned bottom-right (FlashAttention 2.1+, torch's causal_lower_right):
    query i sees keys j <= i + seq_k - seq_q, so the last query sees every key. As an area
    that is seq_k**2 / 2 when seq_q == seq_k (exactly half), seq_q*seq_k - seq_q**2/2 when
    seq_k > seq_q (a prefix of cached keys every query sees, then the triangle), and
    seq_k**2 / 2 when seq_q > seq_k (the first seq_q - seq_k queries see nothing).
    """
    if seq_k >= seq_q:
        return seq_q * seq_k - seq_q * seq_q / 2
    return seq_k * seq_k / 2


def attention(batch, heads, seq_q, seq_k, head_dim, *, causal=False, dtype) -> OpCost:
    """Attention forward: O = softmax(Q K^T / sqrt(D)) V, per batch and head."""
    batch = _count("attention", "batch", batch)
    heads = _count("attention", "heads", heads)
    seq_q = _count("attention", "seq_q", seq_q)
    seq_k = _count("attention", "seq_k", seq_k)
    head_dim = _count("attention", "head_dim", head_dim)
    dtype = canonical_dtype(dtype)
    pairs = causal_pairs(seq_q, seq_k) if causal else float(seq_q * seq_k)
    # Two matmuls (Q K^T and P V), 2*D FLOPs per query-key pair each; the softmax is not
    # counted, as in FlashAttention's reporting: it is ~5 FLOPs per pair against 4*D.
    flops = 4.0 * batch * heads * pairs * head_dim
    # Read Q (Sq*D), K and V (Sk*D each), write O (Sq*D), once per batch and head.
    bytes_ = batch * heads * (2 * seq_q + 2 * seq_k) * head_dim * dtype_bytes(dtype)
    if causal:
        mask = (
            "causal: pairs = Sq*Sk/2 when Sq == Sk, Sq*Sk - Sq^2/2 when Sk > Sq, Sk^2/2 when "
            "Sq > Sk (bottom-right mask)"
        )
    else:
        mask = "pairs = Sq*Sk"
    explanation = (
        f"4*B*H*pairs*D FLOPs (QK^T and PV, softmax not counted; {mask}); bytes = Q, K, V "
        f"read once + O written once at {dtype}"
    )
    shape = {
        "batch": batch,
        "heads": heads,
        "seq_q": seq_q,
        "seq_k": seq_k,
        "head_dim": head_dim,
        "causal": bool(causal),
    }
    return OpCost("attention", shape, dtype, flops, bytes_, explanation)


COST_MODELS: dict[str, Callable[..., OpCost]] = {
    "gemm": gemm,
    "gemv": gemv,
    "elementwise": elementwise,
    "softmax": softmax,
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "reduction": reduction,
    "reduce_sum": reduce_sum,
    "attention": attention,
    "softmax_backward": softmax_backward,
    "rmsnorm_backward": rmsnorm_backward,
}


def plain_number(x: float) -> str:
    """A number as a person says it: 1365, 295, 4.6, 0.139 (no exponents above 100)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def shape_label(shape: dict) -> str:
    """A short text for a shape: "m=4096 n=4096 k=4096", flags by name, defaults left out."""
    parts = []
    for key, value in shape.items():
        if isinstance(value, bool):
            if value and key != "bias":
                parts.append(key)
            elif not value and key == "bias":
                parts.append("no-bias")
        elif isinstance(value, int) and not (key == "batch" and value == 1):
            parts.append(f"{key}={value}")
    return " ".join(parts)


# ---- decode kernels: batched GEMV, weight-only quantized GEMV, fused small ops -------------


def gemv_batched(m, n, k, *, dtype) -> OpCost:
    """y[M,N] = x[M,K] @ W[N,K]^T for a decode batch M (the "gemv" op of spec.reference)."""
    m, n, k = (_count("gemv", name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    dtype = canonical_dtype(dtype)
    flops = 2.0 * m * n * k
    # W (N*K) read once dominates; x (M*K) read and y (M*N) written once
    bytes_ = (n * k + m * k + m * n) * dtype_bytes(dtype)
    explanation = f"2*M*N*K FLOPs; bytes = W N*K + x M*K read, y M*N written, at {dtype}"
    return OpCost("gemv", {"m": m, "n": n, "k": k}, dtype, flops, bytes_, explanation)


# Bytes per stored scale / zero point of the quantized weight formats (spec.reference's
# packing: fp32 per-channel scales, fp16 group scales, one uint8 zero point per group).
QUANT_SCALE_BYTES = {"int8": 4.0, "fp8": 4.0, "int4": 2.0}
QUANT_WEIGHT_BITS = {"int8": 8, "fp8": 8, "int4": 4}


def quant_gemv(m, n, k, *, weight: str, group: int = 0, zero_points: bool = False,
               dtype) -> OpCost:  # fmt: skip
    """y[M,N] = x[M,K] @ dequant(Wq)[N,K]^T; W stored in `weight` (int8, int4, fp8)."""
    m, n, k = (_count("quant_gemv", name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    if weight not in QUANT_WEIGHT_BITS:
        raise unknown("quantized weight format", weight, QUANT_WEIGHT_BITS)
    dtype = canonical_dtype(dtype)
    if weight == "int4" and (_count("quant_gemv", "group", group) % 2 or k % group):
        raise KernelabError(f"int4 packing needs an even group size dividing K, got K = {k}, "
                            f"group = {group}")  # fmt: skip
    if weight != "int4" and group:
        raise KernelabError(f"{weight} weights have one scale per output channel, not groups; "
                            f"got group = {group}")  # fmt: skip
    groups = n * (k // group) if weight == "int4" else n
    weight_bytes = n * k * QUANT_WEIGHT_BITS[weight] / 8
    meta_bytes = groups * (QUANT_SCALE_BYTES[weight] + (1.0 if zero_points else 0.0))
    flops = 2.0 * m * n * k  # the multiply-adds; dequantization is not counted
    bytes_ = weight_bytes + meta_bytes + (m * k + m * n) * dtype_bytes(dtype)
    explanation = (
        f"2*M*N*K FLOPs; bytes = {weight} W N*K*{QUANT_WEIGHT_BITS[weight]}/8 + scales"
        f"{' and zero points' if zero_points else ''} + x read, y written at {dtype}"
    )
    # A per-channel format has no group: None, so a label shows none rather than group=0.
    shape = {"m": m, "n": n, "k": k, "weight": weight,
             "group": group if weight == "int4" else None, "zero_points": zero_points}  # fmt: skip
    return OpCost("quant_gemv", shape, dtype, flops, bytes_, explanation)


def add_rmsnorm(rows, cols, *, dtype) -> OpCost:
    """h = x + residual; y = rmsnorm(h) * weight: both returned."""
    rows, cols = _count("add_rmsnorm", "rows", rows), _count("add_rmsnorm", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    flops = 5.0 * elements  # the add, then rmsnorm's 4 (square, sum, normalize, weight)
    bytes_ = (4 * elements + cols) * dtype_bytes(dtype)  # read x, residual; write h, y; weight
    explanation = (
        "5 FLOPs per element (add, square, sum, normalize, weight); bytes = read x and residual, "
        f"write h and y (4 x rows*cols) + weight (cols), at {dtype}"
    )
    return OpCost("add_rmsnorm", {"rows": rows, "cols": cols}, dtype, flops, bytes_, explanation)


def rope(tokens, heads, head_dim, *, dtype) -> OpCost:
    """Rotary embedding of x[tokens, heads, head_dim] in place, cos/sin[*, head_dim / 2] fp32."""
    tokens, heads = _count("rope", "tokens", tokens), _count("rope", "heads", heads)
    head_dim = _count("rope", "head_dim", head_dim)
    if head_dim % 2:
        raise KernelabError(f"rope rotates pairs of values: it needs an even head_dim, got {head_dim}")
    dtype = canonical_dtype(dtype)
    elements = tokens * heads * head_dim
    flops = 3.0 * elements  # per pair: 4 multiplies and 2 adds -> 3 per element
    # x read and written once; one cos and one sin row (fp32) per token, shared by its heads
    bytes_ = 2 * elements * dtype_bytes(dtype) + tokens * head_dim * 4.0
    explanation = (
        "3 FLOPs per element (a 2x2 rotation per pair); bytes = read + write x in place at "
        f"{dtype} + cos and sin (fp32, head_dim/2 each) per token"
    )
    shape = {"tokens": tokens, "heads": heads, "head_dim": head_dim}
    return OpCost("rope", shape, dtype, flops, bytes_, explanation)


def swiglu(rows, cols, *, dtype) -> OpCost:
    """out = silu(gate) * up over [rows, cols]."""
    rows, cols = _count("swiglu", "rows", rows), _count("swiglu", "cols", cols)
    dtype = canonical_dtype(dtype)
    elements = rows * cols
    flops = 5.0 * elements  # exp, add, divide (silu) and two multiplies (g * sigmoid, * up)
    bytes_ = 3 * elements * dtype_bytes(dtype)  # read gate and up, write out
    explanation = f"5 FLOPs per element (silu's exp, add, divide; 2 multiplies); bytes = 2 reads + 1 write at {dtype}"
    return OpCost("swiglu", {"rows": rows, "cols": cols}, dtype, flops, bytes_, explanation)


def gate_up_swiglu(m, n, k, *, dtype) -> OpCost:
    """y[M,N] = silu(x W_gate^T) * (x W_up^T): two GEMVs over one x and SwiGLU, fused."""
    m, n, k = (_count("gate_up_swiglu", name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    dtype = canonical_dtype(dtype)
    flops = 2.0 * m * (2 * n) * k + 5.0 * m * n  # both products, then silu(g) * u
    # W_gate and W_up (2*N*K) read once dominate; x (M*K) read once, y (M*N) written once
    bytes_ = (2 * n * k + m * k + m * n) * dtype_bytes(dtype)
    explanation = (f"2*M*2N*K + 5*M*N FLOPs; bytes = W_gate and W_up 2*N*K + x M*K read, "
                   f"y M*N written, at {dtype}")  # fmt: skip
    return OpCost("gate_up_swiglu", {"m": m, "n": n, "k": k}, dtype, flops, bytes_, explanation)


def decode_attention(batch, heads, kv_heads, tokens, head_dim, *, dtype) -> OpCost:
    """One query token per sequence attending `tokens` cached keys and values (GQA: heads
    query heads share kv_heads KV heads)."""
    batch = _count("decode_attention", "batch", batch)
    heads = _count("decode_attention", "heads", heads)
    kv_heads = _count("decode_attention", "kv_heads", kv_heads)
    tokens = _count("decode_attention", "tokens", tokens)
    head_dim = _count("decode_attention", "head_dim", head_dim)
    if heads % kv_heads:
        raise KernelabError(f"decode_attention needs heads a multiple of kv_heads (each KV head "
                            f"serves a group of query heads), got {heads} and {kv_heads}")  # fmt: skip
    dtype = canonical_dtype(dtype)
    # q.k and p.v: 2 FLOPs per (query head, token, element) each
    flops = 4.0 * batch * heads * tokens * head_dim
    # K and V read once per KV head (a GQA group shares them); q read and o written once
    elements = 2 * batch * kv_heads * tokens * head_dim + 2 * batch * heads * head_dim
    bytes_ = elements * dtype_bytes(dtype)
    explanation = (
        f"4 FLOPs per (query head, token, element); bytes = K and V of {tokens} tokens "
        f"per KV head read once, q and o at {dtype}"
    )
    shape = {
        "batch": batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "tokens": tokens,
        "head_dim": head_dim,
    }
    return OpCost("decode_attention", shape, dtype, flops, bytes_, explanation)


# ---- scan (the scan ladder) -----------------------------------------------------------------


def scan(n, *, dtype) -> OpCost:
    """Prefix sums of n elements (inclusive or exclusive): x read once, out written once."""
    n = _count("scan", "n", n)
    dtype = canonical_dtype(dtype)
    moved = n * dtype_bytes(dtype)
    # Integer adds are not floating-point operations: an int32 scan has no FLOPs to place.
    integer = dtype in INTEGER_DTYPES
    adds = f"n - 1 {'integer adds (no FLOPs)' if integer else 'adds'}"
    return OpCost(
        "scan", {"n": n}, dtype, 0.0 if integer else float(n - 1), 2.0 * moved,
        f"{adds}; bytes = read n at {dtype} + write n at {dtype}",
    )  # fmt: skip


COST_MODELS["scan"] = scan


# ---- sampling from logits (ops/sampling) ----------------------------------------------------


def sampling_probs(batch, vocab, *, dtype) -> OpCost:
    """The filtered distribution of logits[batch, vocab]: the logits read once, fp32 probs
    written once, 20 bytes of per-row parameters. A real kernel reads the row once per pass
    (docs/ops/sampling.md); this is the floor."""
    batch = _count("sampling_probs", "batch", batch)
    vocab = _count("sampling_probs", "vocab", vocab)
    dtype = canonical_dtype(dtype)
    elements = batch * vocab
    flops = 4.0 * elements  # subtract the max, scale by 1/T, exp, divide by the kept mass
    bytes_ = elements * (dtype_bytes(dtype) + 4) + 20 * batch
    explanation = (f"4 FLOPs per logit (subtract, scale, exp, divide); bytes = logits read once "
                   f"at {dtype} + fp32 probs written once + 20 bytes of parameters per row")  # fmt: skip
    return OpCost("sampling_probs", {"batch": batch, "vocab": vocab}, dtype, flops, bytes_,
                  explanation)  # fmt: skip
