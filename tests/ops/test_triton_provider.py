"""The Triton provider: every op's kernel and teaching kernel registered under its op, built
lazily (importing the provider imports neither torch nor Triton), and the interpreter's bf16
rounding that the CPU checks allow for.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import HAS_CUDA, kernel_fixture  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

softmax = kernel_fixture("softmax")
matmul = kernel_fixture("matmul")


@pytest.mark.skipif(HAS_CUDA, reason="about Triton's CPU interpreter")
def test_the_interpreter_rounds_fp32_to_bf16_toward_zero():
    """Why the CPU checks pass bf16_truncates under the interpreter: its fp32 -> bf16 cast
    drops the low 16 bits. If a Triton release rounds to nearest there, this fails and the
    allowance can go."""
    import triton
    import triton.language as tl

    @triton.jit
    def cast(x_ptr, y_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(y_ptr + i, tl.load(x_ptr + i).to(tl.bfloat16))

    x = torch.rand(1024, generator=torch.Generator().manual_seed(27)) * 0.3
    y = torch.empty(1024, dtype=torch.bfloat16)
    cast[(1,)](x, y, N=1024)
    nearest = x.to(torch.bfloat16)
    assert (y.float() <= x).all()  # never up
    assert (y != nearest).sum() > 300  # about half the values one ulp below nearest


def test_provider_lists_the_five_kernels_and_their_teaching_kernels_with_their_ops():
    from kernelab.ops import implementations

    ops = {impl.name: impl.op for impl in implementations()}
    kernels = {
        "triton.vector_add": "vector_add",
        "triton.softmax": "softmax",
        "triton.layernorm": "layernorm",
        "triton.rmsnorm": "rmsnorm",
        "triton.matmul": "gemm",
    }
    # the backward passes (tests/ops/softmax/test_softmax_backward.py, norms/test_norms_backward.py)
    backward = {
        "triton.softmax_backward": "softmax_backward",
        "triton.rmsnorm_backward": "rmsnorm_backward",
    }
    # and the decode kernels (tests/ops/gemv, quant_gemv, fused_norm, rope, swiglu)
    decode = {
        "triton.gemv": "gemv",
        "triton.gemv.teaching": "gemv",
        "triton.quant_gemv.int8": "quant_gemv_int8",
        "triton.quant_gemv.int8.teaching": "quant_gemv_int8",
        "triton.quant_gemv.int4": "quant_gemv_int4",
        "triton.quant_gemv.int4_zp": "quant_gemv_int4_zp",
        "triton.quant_gemv.fp8": "quant_gemv_fp8",
        "triton.add_rmsnorm": "add_rmsnorm",
        "triton.rope": "rope",
        "triton.rope_interleaved": "rope_interleaved",
        "triton.swiglu": "swiglu",
        "triton.gate_up_swiglu": "gate_up_swiglu",
        "triton.decode_attention": "decode_attention",
        "triton.decode_attention.teaching": "decode_attention",
        "triton.softmax_backward.teaching": "softmax_backward",
        "triton.rmsnorm_backward.teaching": "rmsnorm_backward",
        "triton.sampling_probs": "sampling_probs",
        "triton.sampling_probs.teaching": "sampling_probs",
    }
    teaching = {f"{name}.teaching": op for name, op in kernels.items()}
    # the CuTe-DSL kernels register here too (their build() refuses without the extra)
    cute = {
        "cute.softmax": "softmax",
        "cute.rmsnorm": "rmsnorm",
        "cute.softmax_backward": "softmax_backward",
        "cute.rmsnorm_backward": "rmsnorm_backward",
    }
    assert ops == {**kernels, **teaching, **decode, **backward, **cute}


def test_provider_builds_the_public_functions(softmax, matmul):
    from kernelab.spec.registry import get

    assert get("triton.softmax").build() is softmax.softmax
    assert get("triton.matmul").build() is matmul.matmul


def test_importing_the_provider_does_not_import_triton_or_torch():
    code = "import sys, kernelab.ops; print('triton' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
