"""The dense ops' specifications: gemm, vector_add, softmax, layernorm and rmsnorm (the
inputs and outputs are tabled in kernelab.spec.reference)."""

from __future__ import annotations

from kernelab.spec.op_spec import FLOAT_DTYPES, OpSpec, as_float64, normals, rows_view

LAYERNORM_EPS = 1e-5
RMSNORM_EPS = 1e-6

# Input scaling: softmax logits are normals times this, so rows are far from flat.
SOFTMAX_LOGIT_SCALE = 3.0
# Norm inputs are normals plus this offset, so a kernel that skips mean subtraction fails.
NORM_INPUT_OFFSET = 1.0


def _make_gemm(shape, torch_dtype, generator, device):
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = normals((m, k), generator, device).to(torch_dtype)
    b = normals((k, n), generator, device).to(torch_dtype)
    return a, b


def _make_vector_add(shape, torch_dtype, generator, device):
    n = shape["n"]
    return (
        normals((n,), generator, device).to(torch_dtype),
        normals((n,), generator, device).to(torch_dtype),
    )


def _make_softmax(shape, torch_dtype, generator, device):
    return (rows_view(shape, torch_dtype, generator, device, SOFTMAX_LOGIT_SCALE, 0.0),)


def norm_weight(cols, torch_dtype, generator, device, offset):
    # Weights around 1 and biases around 0, both random, so ignoring either one fails.
    return normals((cols,), generator, device, 0.5, offset).to(torch_dtype)


def _make_layernorm(shape, torch_dtype, generator, device):
    x = rows_view(shape, torch_dtype, generator, device, 1.0, NORM_INPUT_OFFSET)
    weight = norm_weight(shape["cols"], torch_dtype, generator, device, 1.0)
    bias = norm_weight(shape["cols"], torch_dtype, generator, device, 0.0)
    return x, weight, bias, LAYERNORM_EPS


def _make_rmsnorm(shape, torch_dtype, generator, device):
    x = rows_view(shape, torch_dtype, generator, device, 1.0, NORM_INPUT_OFFSET)
    weight = norm_weight(shape["cols"], torch_dtype, generator, device, 1.0)
    return x, weight, RMSNORM_EPS


def _reference_gemm(a, b):
    return as_float64(a) @ as_float64(b)


def _reference_vector_add(x, y):
    return as_float64(x) + as_float64(y)


def _reference_softmax(x):
    import torch

    # torch.softmax subtracts the row max, so logits of 1e4 do not overflow exp.
    return torch.softmax(as_float64(x), dim=-1)


def _reference_layernorm(x, weight, bias, eps):
    x64 = as_float64(x)
    mean = x64.mean(dim=-1, keepdim=True)
    var = ((x64 - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, like torch
    return (x64 - mean) / (var + eps).sqrt() * as_float64(weight) + as_float64(bias)


def reference_rmsnorm(x, weight, eps):
    x64 = as_float64(x)
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / (mean_square + eps).sqrt() * as_float64(weight)


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


def eager_rmsnorm(x, weight, eps):
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


DENSE_OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "gemm",
            ("m", "n", "k"),
            ("fp64", *FLOAT_DTYPES, "fp8"),
            "a[m, k] @ b[k, n]",
            _make_gemm,
            _reference_gemm,
            _eager_gemm,
            _cost_gemm,
        ),
        OpSpec(
            "vector_add",
            ("n",),
            ("fp64", *FLOAT_DTYPES),
            "x + y over n elements",
            _make_vector_add,
            _reference_vector_add,
            _eager_vector_add,
            _cost_vector_add,
        ),
        OpSpec(
            "softmax",
            ("rows", "cols"),
            ("fp64", *FLOAT_DTYPES),
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
            ("fp64", *FLOAT_DTYPES),
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
            ("fp64", *FLOAT_DTYPES),
            f"x / sqrt(mean(x^2) + {RMSNORM_EPS:g}) * weight over the last dim",
            _make_rmsnorm,
            reference_rmsnorm,
            eager_rmsnorm,
            _cost_rmsnorm,
            optional_keys=("stride",),
        ),
    )
}
