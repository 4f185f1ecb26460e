"""SwiGLU's activation, fused: out = silu(gate) * up = gate * sigmoid(gate) * up.

The MLP of a Llama layer computes gate = x W_gate^T and up = x W_up^T (often one GEMM into
gate_up[rows, 2 * cols]) and then this: unfused, silu reads gate and writes a temporary, the
product reads it and up and writes out: 5 * itemsize bytes per element. Fused: read gate and
up, write out, 3 * itemsize (5 FLOPs: exp, add, divide, two multiplies).

One program per (row, BLOCK columns); row strides for gate, up and out, so gate and up may
be the two halves of gate_up without a copy. Math in fp32: sigmoid(g) = 1 / (1 + exp(-g)),
which is 0 (not NaN) for g = -1000 and 1 for g = +1000.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def swiglu_kernel(g_ptr, u_ptr, out_ptr, cols, sg, su, so, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    g = tl.load(g_ptr + row * sg + offs, mask=mask, other=0.0).to(tl.float32)  # BLOCK * itemsize
    u = tl.load(u_ptr + row * su + offs, mask=mask, other=0.0).to(tl.float32)  # BLOCK * itemsize
    out = g * (1.0 / (1.0 + tl.exp(-g))) * u
    tl.store(out_ptr + row * so + offs, out.to(out_ptr.dtype.element_ty), mask=mask)
