"""The torch references: the specification of every op a kernel can implement.

Each op is an OpSpec: which shape keys it takes, how to draw fresh inputs for a seed, the
reference answer (float64, upcast on the inputs' device), the plain torch eager version in
the input dtype (the baseline kernels are compared to), and its cost (FLOPs and bytes).

Inputs, in the order every implementation receives them:

| op         | shape keys               | inputs                          | output                      |
|------------|--------------------------|---------------------------------|-----------------------------|
| gemm       | m, n, k                  | a[m, k], b[k, n]                | a @ b, [m, n]               |
| vector_add | n                        | x[n], y[n]                      | x + y                       |
| softmax    | rows, cols (, stride)    | x[rows, cols]                   | softmax over the last dim   |
| layernorm  | rows, cols (, stride)    | x, weight[cols], bias[cols], eps | (x-mean)/sqrt(var+eps)*w+b |
| rmsnorm    | rows, cols (, stride)    | x, weight[cols], eps            | x/sqrt(mean(x^2)+eps)*w     |
| transpose  | rows, cols               | x[rows, cols]                   | x.t().contiguous()          |
| histogram  | n, bins                  | values[n] (int32/uint8), bins   | int64 counts[bins + 1]      |

The output has the input dtype, except fp8 GEMM which writes bf16 and histogram, whose
answer is exact int64 counts: counts[b] for b in [0, bins) and, in the last slot, the values
outside [0, bins) (the defined answer for out-of-range ids; int32 inputs carry a few). Layernorm uses the
biased variance (divide by cols) and eps = 1e-5; rmsnorm uses eps = 1e-6.

`stride` (softmax and norms): the distance between rows in elements, >= cols. The input
is then a view into a wider buffer whose padding columns hold NaN, so a kernel that
ignores the row stride reads NaN and fails the check loudly.

Softmax of a row whose entries are all -inf: kernelab's kernels must produce NaN for every
element of that row, exactly as torch does (max is -inf, x - max is NaN). A row with no
finite entry has no distribution; NaN says so, and it is what a max-subtracting kernel
computes without a special case. The checker requires NaN at exactly those places. A row
with some -inf entries is ordinary: those entries get probability 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown

LAYERNORM_EPS = 1e-5
RMSNORM_EPS = 1e-6

# Input scaling: softmax logits are normals times this, so rows are far from flat.
SOFTMAX_LOGIT_SCALE = 3.0
# Norm inputs are normals plus this offset, so a kernel that skips mean subtraction fails.
NORM_INPUT_OFFSET = 1.0

_TORCH_DTYPE_NAMES = {
    "fp64": "float64",
    "fp32": "float32",
    "tf32": "float32",  # a math mode over fp32 storage
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "float8_e4m3fn",
    "int8": "int8",
    "int32": "int32",  # histogram bin ids
    "uint8": "uint8",  # histogram bytes
}


def canonical_name(dtype: str) -> str:
    """ "bfloat16" -> "bf16"; UnknownNameError for a dtype without a torch storage type."""
    from kernelab.roofline.costs import canonical_dtype

    text = str(dtype).strip().lower().removeprefix("torch.")
    key = canonical_dtype(text) if text not in _TORCH_DTYPE_NAMES else text
    if key not in _TORCH_DTYPE_NAMES:
        raise unknown("dtype", str(dtype), _TORCH_DTYPE_NAMES)
    return key


def dtype_of(name: str):
    """The torch dtype that stores kernelab dtype `name` ("bf16" -> torch.bfloat16)."""
    import torch

    torch_name = _TORCH_DTYPE_NAMES[canonical_name(name)]
    if not hasattr(torch, torch_name):
        raise KernelabError(f"this torch ({torch.__version__}) has no {torch_name} for {name}")
    return getattr(torch, torch_name)


def name_of(dtype) -> str:
    """The kernelab name of a torch dtype (torch.float32 -> "fp32")."""
    import torch

    for name, torch_name in _TORCH_DTYPE_NAMES.items():
        if name != "tf32" and getattr(torch, torch_name, None) == dtype:
            return name
    raise KernelabError(f"kernelab has no name for torch dtype {dtype}")


@dataclass(frozen=True)
class OpSpec:
    name: str
    shape_keys: tuple[str, ...]  # required keys of `shape`
    dtypes: tuple[str, ...]  # input dtypes the op is defined for
    description: str
    _make: Callable  # (shape, torch_dtype, generator, device) -> inputs
    _reference: Callable  # (*inputs) -> float64 tensor
    _eager: Callable  # (*inputs) -> tensor in the output dtype
    _cost: Callable  # (shape, dtype) -> OpCost
    optional_keys: tuple[str, ...] = ()
    output_dtype: str | None = None  # the output's dtype whatever the input's (None: the input's)

    def validate(self, shape: dict) -> dict:
        """The shape with int values; KernelabError for a missing, extra or non-positive key."""
        if not isinstance(shape, dict):
            raise KernelabError(f"{self.name} shape must be a dict of {', '.join(self.shape_keys)}")
        missing = [key for key in self.shape_keys if key not in shape]
        if missing:
            raise KernelabError(f"{self.name} needs shape keys {', '.join(missing)}")
        allowed = self.shape_keys + self.optional_keys
        extra = [key for key in shape if key not in allowed]
        if extra:
            raise KernelabError(
                f"{self.name} takes shape keys {', '.join(allowed)}, not {', '.join(extra)}"
            )
        clean = {}
        for key, value in shape.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise KernelabError(
                    f"{self.name} shape {key} must be a positive integer, got {value!r}"
                )
            clean[key] = value
        if "stride" in clean and clean["stride"] < clean["cols"]:
            raise KernelabError(
                f"{self.name} stride {clean['stride']} is smaller than cols {clean['cols']}"
            )
        return clean

    def check_dtype(self, dtype: str) -> str:
        name = canonical_name(dtype)
        if name == "tf32":
            name = "fp32"
        if name not in self.dtypes:
            raise unknown(f"dtype for {self.name}", name, self.dtypes)
        return name

    def out_dtype(self, dtype: str) -> str:
        """The dtype of the op's output for inputs of `dtype`."""
        name = self.check_dtype(dtype)
        if self.output_dtype is not None:
            return self.output_dtype
        return "bf16" if name == "fp8" else name

    def make_inputs(self, shape: dict, dtype: str, seed: int, device="cpu") -> tuple:
        """Fresh random inputs drawn from a generator seeded with `seed` on `device`."""
        import torch

        shape = self.validate(shape)
        torch_dtype = dtype_of(self.check_dtype(dtype))
        device = torch.device(device)
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))
        return self._make(shape, torch_dtype, generator, device)

    def reference(self, *inputs):
        """The exact answer, computed in float64 on the inputs' device."""
        return self._reference(*inputs)

    def torch_eager(self, *inputs):
        """The plain torch op in the input dtype."""
        return self._eager(*inputs)

    def cost(self, shape: dict, dtype: str):
        """FLOPs and minimum bytes (kernelab.roofline.costs.OpCost)."""
        return self._cost(self.validate(shape), self.check_dtype(dtype))


# Drawing: normals in float32 from the seeded generator, then scaled and cast, so a seed gives
# the same data in every dtype up to rounding.


def _normals(shape, generator, device, scale=1.0, offset=0.0):
    import torch

    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return values * scale + offset


def _rows(shape, torch_dtype, generator, device, scale, offset):
    """x[rows, cols], a view into a [rows, stride] buffer whose padding is NaN."""
    import torch

    rows, cols = shape["rows"], shape["cols"]
    stride = shape.get("stride", cols)
    x = _normals((rows, cols), generator, device, scale, offset).to(torch_dtype)
    if stride == cols:
        return x
    buffer = torch.full((rows, stride), float("nan"), dtype=torch_dtype, device=device)
    buffer[:, :cols] = x
    return buffer[:, :cols]


def _make_gemm(shape, torch_dtype, generator, device):
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = _normals((m, k), generator, device).to(torch_dtype)
    b = _normals((k, n), generator, device).to(torch_dtype)
    return a, b


def _make_vector_add(shape, torch_dtype, generator, device):
    n = shape["n"]
    return (
        _normals((n,), generator, device).to(torch_dtype),
        _normals((n,), generator, device).to(torch_dtype),
    )


def _make_softmax(shape, torch_dtype, generator, device):
    return (_rows(shape, torch_dtype, generator, device, SOFTMAX_LOGIT_SCALE, 0.0),)


def _norm_weight(cols, torch_dtype, generator, device, offset):
    # Weights around 1 and biases around 0, both random, so ignoring either one fails.
    return _normals((cols,), generator, device, 0.5, offset).to(torch_dtype)


def _make_layernorm(shape, torch_dtype, generator, device):
    x = _rows(shape, torch_dtype, generator, device, 1.0, NORM_INPUT_OFFSET)
    weight = _norm_weight(shape["cols"], torch_dtype, generator, device, 1.0)
    bias = _norm_weight(shape["cols"], torch_dtype, generator, device, 0.0)
    return x, weight, bias, LAYERNORM_EPS


def _make_rmsnorm(shape, torch_dtype, generator, device):
    x = _rows(shape, torch_dtype, generator, device, 1.0, NORM_INPUT_OFFSET)
    weight = _norm_weight(shape["cols"], torch_dtype, generator, device, 1.0)
    return x, weight, RMSNORM_EPS


def _f64(tensor):
    import torch

    return tensor.to(torch.float64)


def _reference_gemm(a, b):
    return _f64(a) @ _f64(b)


def _reference_vector_add(x, y):
    return _f64(x) + _f64(y)


def _reference_softmax(x):
    import torch

    # torch.softmax subtracts the row max, so logits of 1e4 do not overflow exp.
    return torch.softmax(_f64(x), dim=-1)


def _reference_layernorm(x, weight, bias, eps):
    x64 = _f64(x)
    mean = x64.mean(dim=-1, keepdim=True)
    var = ((x64 - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, like torch
    return (x64 - mean) / (var + eps).sqrt() * _f64(weight) + _f64(bias)


def _reference_rmsnorm(x, weight, eps):
    x64 = _f64(x)
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / (mean_square + eps).sqrt() * _f64(weight)


def _eager_gemm(a, b):
    import torch

    if a.dtype == torch.float8_e4m3fn:
        # Plain torch has no fp8 matmul on every device: the eager baseline dequantizes.
        return torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16))
    return torch.mm(a, b)


def _eager_vector_add(x, y):
    return x + y


def _eager_softmax(x):
    import torch

    return torch.softmax(x, dim=-1)


def _eager_layernorm(x, weight, bias, eps):
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _eager_rmsnorm(x, weight, eps):
    import torch
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Older torch: normalise in fp32 and round once, as inference RMSNorm layers do.
    x32 = x.to(torch.float32)
    normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (normed * weight.to(torch.float32)).to(x.dtype)


def _cost_gemm(shape, dtype):
    from kernelab.roofline import costs

    return costs.gemm(shape["m"], shape["n"], shape["k"], dtype=dtype)


def _cost_vector_add(shape, dtype):
    from kernelab.roofline import costs

    return costs.elementwise(shape["n"], reads=2, writes=1, flops_per_element=1, dtype=dtype)


def _cost_softmax(shape, dtype):
    from kernelab.roofline import costs

    return costs.softmax(shape["rows"], shape["cols"], dtype=dtype)


def _cost_layernorm(shape, dtype):
    from kernelab.roofline import costs

    return costs.layernorm(shape["rows"], shape["cols"], dtype=dtype, bias=True)


def _cost_rmsnorm(shape, dtype):
    from kernelab.roofline import costs

    return costs.rmsnorm(shape["rows"], shape["cols"], dtype=dtype)


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
        _normals((shape["n"],), generator, device, 1.0, REDUCE_SUM_INPUT_OFFSET).to(torch_dtype),
    )


def _reference_reduce_sum(x):
    return _f64(x).sum()


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
    return (_normals((shape["rows"], shape["cols"]), generator, device).to(torch_dtype),)


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
    return _f64(x).t().contiguous()


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


_FLOAT_DTYPES = ("fp32", "bf16", "fp16")

OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "gemm",
            ("m", "n", "k"),
            ("fp64", *_FLOAT_DTYPES, "fp8"),
            "a[m, k] @ b[k, n]",
            _make_gemm,
            _reference_gemm,
            _eager_gemm,
            _cost_gemm,
        ),
        OpSpec(
            "vector_add",
            ("n",),
            ("fp64", *_FLOAT_DTYPES),
            "x + y over n elements",
            _make_vector_add,
            _reference_vector_add,
            _eager_vector_add,
            _cost_vector_add,
        ),
        OpSpec(
            "softmax",
            ("rows", "cols"),
            ("fp64", *_FLOAT_DTYPES),
            "softmax of x[rows, cols] over the last dim",
            _make_softmax,
            _reference_softmax,
            _eager_softmax,
            _cost_softmax,
            optional_keys=("stride",),
        ),
        OpSpec(
            "layernorm",
            ("rows", "cols"),
            ("fp64", *_FLOAT_DTYPES),
            f"(x - mean) / sqrt(var + {LAYERNORM_EPS:g}) * weight + bias over the last dim",
            _make_layernorm,
            _reference_layernorm,
            _eager_layernorm,
            _cost_layernorm,
            optional_keys=("stride",),
        ),
        OpSpec(
            "rmsnorm",
            ("rows", "cols"),
            ("fp64", *_FLOAT_DTYPES),
            f"x / sqrt(mean(x^2) + {RMSNORM_EPS:g}) * weight over the last dim",
            _make_rmsnorm,
            _reference_rmsnorm,
            _eager_rmsnorm,
            _cost_rmsnorm,
            optional_keys=("stride",),
        ),
        OpSpec(
            "reduce_sum",
            ("n",),
            _FLOAT_DTYPES,
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
            ("fp64", *_FLOAT_DTYPES),
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
    )
}


def get_op(name: str) -> OpSpec:
    """OPS[name], or an UnknownNameError that suggests the closest op."""
    if name not in OPS:
        raise unknown("op", name, OPS)
    return OPS[name]


# ---- decode kernels (issue 50): batched GEMV, weight-only quantized GEMV, fused small ops ---
#
# | op                   | shape keys              | inputs                                  |
# |----------------------|-------------------------|-----------------------------------------|
# | gemv                 | m, n, k                 | x[m, k], w[n, k] -> x @ w^T, [m, n]     |
# | quant_gemv_int8      | m, n, k                 | x, q int8[n, k], scale fp32[n]          |
# | quant_gemv_int4      | m, n, k, group          | x, packed uint8[n, k/2], scales fp16[n, |
# |                      |                         | k/group], None, group (symmetric)       |
# | quant_gemv_int4_zp   | m, n, k, group          | ... zeros uint8[n, k/group], group      |
# | quant_gemv_fp8       | m, n, k                 | x, q float8_e4m3fn[n, k], scale fp32[n] |
# | add_rmsnorm          | rows, cols              | x, residual, weight, eps -> stack(h, y) |
# | rope / rope_interleaved | tokens, heads, head_dim | x, cos, sin [positions, head_dim/2]  |
# |                      |                         | fp32, positions int64[tokens]           |
# | swiglu               | rows, cols              | gate, up -> silu(gate) * up             |
#
# The quantized ops' reference is the float64 product with the DEQUANTIZED weights, so a
# kernel is judged on its arithmetic; the quantization error itself (against the bf16
# weights the packing started from) is a separate figure (docs/ops/quant_gemv.md).
# add_rmsnorm returns h = x + residual and y = rmsnorm(h) * weight; as one op output they are
# stacked, [2, rows, cols] (the kernel writes both halves of one buffer, so the stacked form
# costs nothing). RoPE rotates pairs (x[2i], x[2i+1]) when interleaved (GPT-J layout) and
# (x[i], x[i + d/2]) in the half-split layout (GPT-NeoX / Llama's rotate_half), by the angle
# of the token's position: positions = ROPE_POSITION_OFFSET + arange(tokens), a decode step
# deep into a sequence.

INT4_SYMMETRIC_ZERO = 8  # signed int4 -8..7 stored as unsigned 0..15 with this implicit zero
ROPE_POSITION_OFFSET = 37
ROPE_THETA = 10000.0


def pack_int8(w):
    """Per-output-channel symmetric int8: (q int8[n, k], scale fp32[n]), w ~ q * scale."""
    import torch

    w32 = w.to(torch.float32)
    scale = w32.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w32 / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return _f64(q) * _f64(scale)[:, None]


def _check_group(k: int, group: int) -> None:
    if group <= 0 or group % 2 or k % group:
        raise KernelabError(f"int4 packing needs an even group size dividing K, got K = {k}, "
                            f"group = {group}")  # fmt: skip


def pack_int4(w, group: int, *, zero_points: bool):
    """int4 with one fp16 scale per `group` columns of a row, two values per byte (column 2j in
    the low nibble, 2j + 1 in the high). Symmetric: q in -8..7 stored as q + 8, scale =
    absmax / 7. With zero points: q in 0..15, scale = (max - min) / 15, zero = round(-min /
    scale) as uint8; w ~ (q - zero) * scale. Returns (packed uint8[n, k/2], scales fp16[n,
    k/group], zeros uint8[n, k/group] or None)."""
    import torch

    n, k = w.shape
    _check_group(k, group)
    grouped = w.to(torch.float32).reshape(n, k // group, group)
    if zero_points:
        low, high = grouped.amin(dim=2), grouped.amax(dim=2)
        scale = ((high - low) / 15.0).clamp(min=1e-6).to(torch.float16)
        zero = torch.round(-low / scale.to(torch.float32)).clamp(0, 15)
    else:
        scale = (grouped.abs().amax(dim=2) / 7.0).clamp(min=1e-6).to(torch.float16)
        zero = torch.full_like(scale, INT4_SYMMETRIC_ZERO, dtype=torch.float32)
    q = torch.round(grouped / scale.to(torch.float32)[..., None] + zero[..., None])
    q = q.clamp(0, 15).to(torch.uint8).reshape(n, k)
    packed = q[:, 0::2] | (q[:, 1::2] << 4)
    return packed, scale, zero.to(torch.uint8) if zero_points else None


def unpack_int4(packed):
    """uint8[n, k/2] -> the unsigned nibbles uint8[n, k] in column order."""
    import torch

    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(packed.shape[0], -1)


def dequantize_int4(packed, scales, zeros, group: int):
    import torch

    q = _f64(unpack_int4(packed))
    n, k = q.shape
    _check_group(k, group)
    zero = _f64(zeros) if zeros is not None else torch.full_like(_f64(scales), 8.0)
    grouped = (q.reshape(n, k // group, group) - zero[..., None]) * _f64(scales)[..., None]
    return grouped.reshape(n, k)


def pack_fp8(w):
    """Per-output-channel float8 e4m3: (q float8_e4m3fn[n, k], scale fp32[n]), the row's absmax
    mapped to e4m3's largest finite value, 448."""
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        raise KernelabError(f"this torch ({torch.__version__}) has no float8_e4m3fn")
    w32 = w.to(torch.float32)
    scale = w32.abs().amax(dim=1).clamp(min=1e-12) / 448.0
    return (w32 / scale[:, None]).to(torch.float8_e4m3fn), scale


def dequantize_fp8(q, scale):
    return _f64(q) * _f64(scale)[:, None]


def _make_gemv(shape, torch_dtype, generator, device):
    x = _normals((shape["m"], shape["k"]), generator, device).to(torch_dtype)
    w = _normals((shape["n"], shape["k"]), generator, device).to(torch_dtype)
    return x, w


def _quant_weight(shape, torch_dtype, generator, device):
    """x and the bf16 weights the packing starts from (a model's stored weights)."""
    import torch

    x, w = _make_gemv(shape, torch_dtype, generator, device)
    return x, w.to(torch.bfloat16)


def _make_quant_int8(shape, torch_dtype, generator, device):
    x, w = _quant_weight(shape, torch_dtype, generator, device)
    return (x, *pack_int8(w))


def _make_quant_int4(zero_points: bool):
    def make(shape, torch_dtype, generator, device):
        x, w = _quant_weight(shape, torch_dtype, generator, device)
        group = shape["group"]
        return (x, *pack_int4(w, group, zero_points=zero_points), group)

    return make


def _make_quant_fp8(shape, torch_dtype, generator, device):
    x, w = _quant_weight(shape, torch_dtype, generator, device)
    return (x, *pack_fp8(w))


def _reference_gemv(x, w):
    return _f64(x) @ _f64(w).t()


def _eager_gemv(x, w):
    return x @ w.t()


def _reference_quant_int8(x, q, scale):
    return _f64(x) @ dequantize_int8(q, scale).t()


def _reference_quant_int4(x, packed, scales, zeros, group):
    return _f64(x) @ dequantize_int4(packed, scales, zeros, group).t()


def _reference_quant_fp8(x, q, scale):
    return _f64(x) @ dequantize_fp8(q, scale).t()


def _eager_dequantized(dequantize):
    """The eager baseline: dequantize into x's dtype, then x @ W^T (cuBLAS on a GPU)."""

    def eager(x, *weights):
        return x @ dequantize(*weights).to(x.dtype).t()

    return eager


def _make_add_rmsnorm(shape, torch_dtype, generator, device):
    rows, cols = shape["rows"], shape["cols"]
    x = _normals((rows, cols), generator, device, 1.0, NORM_INPUT_OFFSET).to(torch_dtype)
    residual = _normals((rows, cols), generator, device).to(torch_dtype)
    weight = _norm_weight(cols, torch_dtype, generator, device, 1.0)
    return x, residual, weight, RMSNORM_EPS


def _reference_add_rmsnorm(x, residual, weight, eps):
    import torch

    h = _f64(x) + _f64(residual)
    return torch.stack((h, _reference_rmsnorm(h, weight, eps)))


def _eager_add_rmsnorm(x, residual, weight, eps):
    import torch

    h = x + residual
    return torch.stack((h, _eager_rmsnorm(h, weight, eps)))


def rope_tables(positions: int, head_dim: int, device="cpu", theta: float = ROPE_THETA):
    """cos and sin fp32[positions, head_dim / 2] of the angles p * theta^(-2i / head_dim)."""
    import torch

    if head_dim % 2:
        raise KernelabError(f"rope needs an even head_dim, got {head_dim}")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().to(torch.float32).to(device), angles.sin().to(torch.float32).to(device)


def _make_rope(shape, torch_dtype, generator, device):
    import torch

    tokens, heads, head_dim = shape["tokens"], shape["heads"], shape["head_dim"]
    x = _normals((tokens, heads, head_dim), generator, device).to(torch_dtype)
    cos, sin = rope_tables(ROPE_POSITION_OFFSET + tokens, head_dim, device)
    positions = torch.arange(tokens, device=device) + ROPE_POSITION_OFFSET
    return x, cos, sin, positions


def _rotate(x, c, s, interleaved: bool):
    import torch

    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).reshape(x.shape)
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * c - second * s, first * s + second * c), dim=-1)


def rope_reference(x, cos, sin, positions, *, interleaved: bool):
    """The rotated x in float64 (out of place)."""
    c, s = _f64(cos)[positions][:, None, :], _f64(sin)[positions][:, None, :]
    return _rotate(_f64(x), c, s, interleaved)


def _eager_rope(interleaved: bool):
    """The plain torch rotation: gathered tables, fp32 math, one rounding (as HF's apply_rotary
    _pos_emb computes it for bf16 models with fp32 tables)."""

    def eager(x, cos, sin, positions):
        import torch

        c, s = cos[positions][:, None, :], sin[positions][:, None, :]
        return _rotate(x.to(torch.float32), c, s, interleaved).to(x.dtype)

    return eager


def _make_swiglu(shape, torch_dtype, generator, device):
    gate = _normals((shape["rows"], shape["cols"]), generator, device, 2.0).to(torch_dtype)
    up = _normals((shape["rows"], shape["cols"]), generator, device).to(torch_dtype)
    return gate, up


def _reference_swiglu(gate, up):
    import torch

    return torch.nn.functional.silu(_f64(gate)) * _f64(up)


def _eager_swiglu(gate, up):
    import torch

    return torch.nn.functional.silu(gate) * up


def _decode_cost(model: str, **fixed):
    def cost(shape, dtype):
        from kernelab.roofline import costs

        return getattr(costs, model)(**shape, **fixed, dtype=dtype)

    return cost


def _quant_cost(weight: str, zero_points: bool = False):
    def cost(shape, dtype):
        from kernelab.roofline import costs

        return costs.quant_gemv(shape["m"], shape["n"], shape["k"], weight=weight,
                                group=shape.get("group", 0), zero_points=zero_points,
                                dtype=dtype)  # fmt: skip

    return cost


_DECODE_DTYPES = ("bf16", "fp16")

OPS.update(
    {
        spec.name: spec
        for spec in (
            OpSpec("gemv", ("m", "n", "k"), ("fp64", *_FLOAT_DTYPES),
                   "x[m, k] @ w[n, k]^T for a decode batch m", _make_gemv, _reference_gemv,
                   _eager_gemv, _decode_cost("gemv_batched")),
            OpSpec("quant_gemv_int8", ("m", "n", "k"), _DECODE_DTYPES,
                   "x @ dequant(q int8, per-channel scale)^T", _make_quant_int8,
                   _reference_quant_int8, _eager_dequantized(dequantize_int8),
                   _quant_cost("int8")),
            OpSpec("quant_gemv_int4", ("m", "n", "k", "group"), _DECODE_DTYPES,
                   "x @ dequant(int4 two per byte, fp16 group scales, symmetric)^T",
                   _make_quant_int4(False), _reference_quant_int4,
                   _eager_dequantized(dequantize_int4), _quant_cost("int4")),
            OpSpec("quant_gemv_int4_zp", ("m", "n", "k", "group"), _DECODE_DTYPES,
                   "x @ dequant(int4 two per byte, fp16 group scales, uint8 zero points)^T",
                   _make_quant_int4(True), _reference_quant_int4,
                   _eager_dequantized(dequantize_int4), _quant_cost("int4", True)),
            OpSpec("quant_gemv_fp8", ("m", "n", "k"), _DECODE_DTYPES,
                   "x @ dequant(float8 e4m3, per-channel scale)^T", _make_quant_fp8,
                   _reference_quant_fp8, _eager_dequantized(dequantize_fp8),
                   _quant_cost("fp8")),
            OpSpec("add_rmsnorm", ("rows", "cols"), ("fp64", *_FLOAT_DTYPES),
                   f"h = x + residual, y = rmsnorm(h, eps {RMSNORM_EPS:g}) * weight; "
                   "stacked [2, rows, cols]", _make_add_rmsnorm, _reference_add_rmsnorm,
                   _eager_add_rmsnorm, _decode_cost("add_rmsnorm")),
            OpSpec("rope", ("tokens", "heads", "head_dim"), ("fp64", *_FLOAT_DTYPES),
                   "rotary embedding, half-split pairs (x[i], x[i + d/2])", _make_rope,
                   lambda *a: rope_reference(*a, interleaved=False), _eager_rope(False),
                   _decode_cost("rope")),
            OpSpec("rope_interleaved", ("tokens", "heads", "head_dim"),
                   ("fp64", *_FLOAT_DTYPES),
                   "rotary embedding, interleaved pairs (x[2i], x[2i + 1])", _make_rope,
                   lambda *a: rope_reference(*a, interleaved=True), _eager_rope(True),
                   _decode_cost("rope")),
            OpSpec("swiglu", ("rows", "cols"), ("fp64", *_FLOAT_DTYPES),
                   "silu(gate) * up", _make_swiglu, _reference_swiglu, _eager_swiglu,
                   _decode_cost("swiglu")),
        )
    }
)  # fmt: skip


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
    return _normals((n,), generator, device, 1.0, SCAN_INPUT_OFFSET).to(torch_dtype), False


def _shift_exclusive(prefix):
    import torch

    return torch.cat([torch.zeros_like(prefix[:1]), prefix[:-1]])


def _reference_scan(x, exclusive=False):
    """float64 prefix sums of fp32 x; exact wrapping int32 prefix sums of int32 x."""
    import torch

    if x.dtype == torch.int32:
        prefix = torch.cumsum(x.to(torch.int64), 0).to(torch.int32)  # modulo 2^32
    else:
        prefix = torch.cumsum(_f64(x), 0)
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


OPS["scan"] = OpSpec(
    "scan",
    ("n",),
    ("fp32", "int32"),
    "prefix sums of x[n], inclusive (exclusive with the second input True); int32 wraps",
    _make_scan,
    _reference_scan,
    _eager_scan,
    _cost_scan,
)
