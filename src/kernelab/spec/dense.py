"""The dense ops' specifications: gemm, vector_add, softmax, layernorm and rmsnorm, and the
backward passes softmax_backward and rmsnorm_backward (the inputs and outputs are tabled in
kernelab.spec.reference).

rmsnorm_backward has two results, dx[rows, cols] and dweight[cols]; the checker compares one
tensor, so the op returns them stacked as [rows + 1, cols]: rows 0..rows-1 hold dx, the last
row holds dweight. One relative norm error then covers both, and neither hides the other:
dweight sums `rows` terms of random sign, so ||dweight|| ~ sqrt(rows * cols) ~ ||dx||.
"""

from __future__ import annotations

from kernelab.spec.op_spec import FLOAT_DTYPES, OpSpec, as_float64, normals, rows_view

LAYERNORM_EPS = 1e-5
RMSNORM_EPS = 1e-6

# Input scaling: softmax logits are normals times this, so rows are far from flat.
SOFTMAX_LOGIT_SCALE = 3.0
# Norm inputs are normals plus this offset, so a kernel that skips mean subtraction fails.
NORM_INPUT_OFFSET = 1.0
# softmax_backward's logits: see _make_softmax_backward
SOFTMAX_BACKWARD_LOGIT_SCALE = 1.0
# rmsnorm_backward's x keeps this far from zero: see _make_rmsnorm_backward
RMSNORM_BACKWARD_GAP = 0.25


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


def _padded(tensor, stride):
    """tensor[rows, cols] as a view into a [rows, stride] buffer whose padding is NaN."""
    import torch

    rows, cols = tensor.shape
    if stride == cols:
        return tensor
    buffer = torch.full((rows, stride), float("nan"), dtype=tensor.dtype, device=tensor.device)
    buffer[:, :cols] = tensor
    return buffer[:, :cols]


def _make_softmax_backward(shape, torch_dtype, generator, device):
    import torch

    # y is a real softmax of normal logits, exact in float64 and rounded once to the input
    # dtype; dy is plain normals. The logits are N(0, 1), not the forward's 3x: on a row that
    # peaked, dy_i - sum(dy * y) cancels for the dominant entry and dx shrinks to ~1e-3 of
    # dy, so a correct fp32 kernel misses the dtype's threshold on about 1 one-row draw in
    # 300 (measured on 20,000 seeds of a 1 x 13 row; none of 10,000 at N(0, 1)).
    dense = {"rows": shape["rows"], "cols": shape["cols"]}
    logits = normals((shape["rows"], shape["cols"]), generator, device, SOFTMAX_BACKWARD_LOGIT_SCALE)
    y = torch.softmax(logits.to(torch.float64), dim=-1).to(torch_dtype)
    dy = rows_view(dense, torch_dtype, generator, device, 1.0, 0.0)
    stride = shape.get("stride", shape["cols"])
    return _padded(y, stride), _padded(dy, stride)


def _make_rmsnorm_backward(shape, torch_dtype, generator, device):
    import torch

    x, weight, eps = _make_rmsnorm(shape, torch_dtype, generator, device)
    # Each x moves RMSNORM_BACKWARD_GAP away from zero. A one-column row with |x| a few
    # sqrt(eps) has dx = w dy eps / rms^3 (1/rms - x^2/rms^3 cancels to eps/rms^3), as large as
    # dweight and off by x^2/eps roundings: a correct fp32 gradient missed the threshold on 1
    # such draw in 1,500 (wider rows never: their mean square is not near zero).
    x.copy_(x + RMSNORM_BACKWARD_GAP * torch.sign(x))
    dense = {"rows": shape["rows"], "cols": shape["cols"]}
    dy = rows_view(dense, torch_dtype, generator, device, 1.0, 0.0)
    return x, weight, _padded(dy, shape.get("stride", shape["cols"])), eps


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


def _reference_softmax_backward(y, dy):
    y64, dy64 = as_float64(y), as_float64(dy)
    return y64 * (dy64 - (dy64 * y64).sum(dim=-1, keepdim=True))


def _reference_rmsnorm_backward(x, weight, dy, eps):
    import torch

    x64, w64, dy64 = as_float64(x), as_float64(weight), as_float64(dy)
    rstd = ((x64 * x64).mean(dim=-1, keepdim=True) + eps).rsqrt()
    xhat = x64 * rstd
    wdy = w64 * dy64
    dx = rstd * (wdy - xhat * (wdy * xhat).mean(dim=-1, keepdim=True))
    dweight = (dy64 * xhat).sum(dim=0)
    return torch.cat([dx, dweight[None, :]])


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


def _eager_softmax_backward(y, dy):
    import torch

    # the op autograd runs for torch.softmax's backward, given the saved output
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


def _eager_rmsnorm_backward(x, weight, dy, eps):
    import torch

    # autograd of the torch forward: what a training step runs (the forward is recomputed
    # here, as the eager op saves nothing from a call this function did not make)
    x_ = x.detach().requires_grad_(True)
    w_ = weight.detach().requires_grad_(True)
    with torch.enable_grad():
        y = eager_rmsnorm(x_, w_, eps)
        dx, dweight = torch.autograd.grad(y, (x_, w_), dy)
    return torch.cat([dx, dweight[None, :]])


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


def _cost_softmax_backward(shape, dtype):
    from kernelab.roofline import costs

    return costs.softmax_backward(shape["rows"], shape["cols"], dtype=dtype)


def _cost_rmsnorm_backward(shape, dtype):
    from kernelab.roofline import costs

    return costs.rmsnorm_backward(shape["rows"], shape["cols"], dtype=dtype)


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
        OpSpec(
            "softmax_backward",
            ("rows", "cols"),
            ("fp64", *FLOAT_DTYPES),
            "dx = y * (dy - sum(dy * y)) over the last dim, y = softmax(x)",
            _make_softmax_backward,
            _reference_softmax_backward,
            _eager_softmax_backward,
            _cost_softmax_backward,
            optional_keys=("stride",),
        ),
        OpSpec(
            "rmsnorm_backward",
            ("rows", "cols"),
            ("fp64", *FLOAT_DTYPES),
            f"dx and dweight of rmsnorm (eps {RMSNORM_EPS:g}), stacked [rows + 1, cols]",
            _make_rmsnorm_backward,
            _reference_rmsnorm_backward,
            _eager_rmsnorm_backward,
            _cost_rmsnorm_backward,
            optional_keys=("stride",),
        ),
    )
}
