"""The torch references: the specification of every op a kernel can implement, assembled
from op_spec.py (the OpSpec form, dtype names, seeded drawing), dense.py (gemm, vector_add,
softmax, the norms), primitives.py (reduce_sum, transpose, histogram, scan) and decode.py
(the decode kernels: GEMV, quantized GEMV, fused small ops; their inputs are tabled there)
and sampling.py (the filtered distribution a sampler draws from).

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
| softmax_backward | rows, cols (, stride) | y = softmax(x), dy         | y * (dy - sum(dy * y))      |
| rmsnorm_backward | rows, cols (, stride) | x, weight, dy, eps          | stack(dx, dweight) [rows+1, cols] |
| transpose  | rows, cols               | x[rows, cols]                   | x.t().contiguous()          |
| histogram  | n, bins                  | values[n] (int32/uint8), bins   | int64 counts[bins + 1]      |

The output has the input dtype, except fp8 GEMM which writes bf16 and histogram, whose
answer is exact int64 counts: counts[b] for b in [0, bins) and, in the last slot, the values
outside [0, bins) (the defined answer for out-of-range ids; int32 inputs carry a few). Layernorm uses the
biased variance (divide by cols) and eps = 1e-5; rmsnorm uses eps = 1e-6.

`stride` (softmax, norms and their backward passes): the distance between rows in elements,
>= cols. Each [rows, cols] input is then a view into a wider buffer whose padding columns hold NaN, so a kernel that
ignores the row stride reads NaN and fails the check loudly.

Softmax of a row whose entries are all -inf: kernelab's kernels must produce NaN for every
element of that row, exactly as torch does (max is -inf, x - max is NaN). A row with no
finite entry has no distribution; NaN says so, and it is what a max-subtracting kernel
computes without a special case. The checker requires NaN at exactly those places. A row
with some -inf entries is ordinary: those entries get probability 0.
"""

from __future__ import annotations

from kernelab.errors import unknown
from kernelab.spec.decode import DECODE_OPS
from kernelab.spec.dense import DENSE_OPS
from kernelab.spec.op_spec import OpSpec
from kernelab.spec.primitives import PRIMITIVE_OPS
from kernelab.spec.sampling import SAMPLING_OPS

OPS: dict[str, OpSpec] = {**DENSE_OPS, **PRIMITIVE_OPS, **DECODE_OPS, **SAMPLING_OPS}


def get_op(name: str) -> OpSpec:
    """OPS[name], or an UnknownNameError that suggests the closest op."""
    if name not in OPS:
        raise unknown("op", name, OPS)
    return OPS[name]
