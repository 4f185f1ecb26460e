"""The Triton kernels as registry implementations: vector add, softmax, norms, matmul, each
with its teaching kernel (triton.<op>.teaching: the form a learner writes first, checked and
timed like the fast one).

Importing this package imports neither torch nor Triton; each build() imports its kernel
module only when the kernel is about to run.
"""

from __future__ import annotations

import importlib

from kernelab.spec.registry import Implementation


def _builder(module: str, function: str):
    def build():
        return getattr(importlib.import_module(f"kernelab.ops.{module}"), function)

    return build


def _teaching(name: str, op: str, module: str, function: str, dtypes: tuple,
              file: str = "teaching") -> Implementation:  # fmt: skip
    return Implementation(
        name=f"triton.{name}.teaching",
        op=op,
        build=_builder(f"{module}.{file}", function),
        dtypes=dtypes,
        description=f"the teaching {name}: the tutorial form, one block per program, untuned",
        metadata={"technique": "teaching kernel (read first)", "accumulate": "fp32"},
    )


def implementations() -> list[Implementation]:
    floats = ("fp32", "bf16", "fp16")
    teaching = [
        _teaching("vector_add", "vector_add", "vector_add", "vector_add", floats),
        _teaching("softmax", "softmax", "softmax", "softmax", floats),
        _teaching("layernorm", "layernorm", "norms", "layernorm", floats),
        _teaching("rmsnorm", "rmsnorm", "norms", "rmsnorm", floats),
        _teaching("matmul", "gemm", "matmul", "matmul", ("bf16", "fp16")),
        _teaching("softmax_backward", "softmax_backward", "softmax", "softmax_backward", floats,
                  file="backward_teaching"),
        _teaching("rmsnorm_backward", "rmsnorm_backward", "norms", "rmsnorm_backward", floats,
                  file="backward_teaching"),
    ]
    return teaching + _decode_implementations() + _cute_implementations() + [
        Implementation(
            name="triton.vector_add",
            op="vector_add",
            build=_builder("vector_add", "vector_add"),
            dtypes=("fp32", "bf16", "fp16"),
            description="one program per BLOCK of elements, 16-byte accesses, autotuned BLOCK/warps",
            metadata={
                "technique": "bandwidth: bytes in flight",
                "bytes_per_element": "3 x itemsize",
            },
        ),
        Implementation(
            name="triton.softmax",
            op="softmax",
            build=_builder("softmax", "softmax"),
            dtypes=("fp32", "bf16", "fp16"),
            description="fused row softmax: autotuned row tiles; cooperative split-row for long rows",
            metadata={"technique": "one read + one write at any row length", "accumulate": "fp32"},
        ),
        Implementation(
            name="triton.layernorm",
            op="layernorm",
            build=_builder("norms", "layernorm"),
            dtypes=("fp32", "bf16", "fp16"),
            description="LayerNorm forward, one pass in registers, fp32 statistics",
            metadata={"technique": "row in registers, autotuned row tiles", "accumulate": "fp32"},
        ),
        Implementation(
            name="triton.rmsnorm",
            op="rmsnorm",
            build=_builder("norms", "rmsnorm"),
            dtypes=("fp32", "bf16", "fp16"),
            description="RMSNorm forward, one pass in registers, fp32 statistics",
            metadata={"technique": "row in registers, autotuned row tiles", "accumulate": "fp32"},
        ),
        Implementation(
            name="triton.softmax_backward",
            op="softmax_backward",
            build=_builder("softmax.backward", "softmax_backward"),
            dtypes=("fp32", "bf16", "fp16"),
            description="softmax backward: row tiles in registers; split (row, chunk) grid for long rows",
            metadata={"technique": "one read of y and dy, one write of dx", "accumulate": "fp32"},
        ),
        Implementation(
            name="triton.rmsnorm_backward",
            op="rmsnorm_backward",
            build=_builder("norms.backward", "rmsnorm_backward"),
            dtypes=("fp32", "bf16", "fp16"),
            description="RMSNorm backward: dx per row in registers, dweight from per-program fp32 partials",
            metadata={
                "technique": "persistent row tiles, dw partials summed in a second kernel",
                "accumulate": "fp32",
            },
        ),
        Implementation(
            name="triton.matmul",
            op="gemm",
            build=_builder("matmul", "matmul"),
            dtypes=("bf16", "fp16", "fp8"),
            description="autotuned matmul: TMA descriptors + persistent grouped tiles on Hopper, plain path elsewhere",
            metadata={
                "technique": "TMA, persistent grid, grouped tile order (L2 reuse)",
                "accumulate": "fp32",
            },
        ),
    ]


# ---- decode kernels: batched GEMV, weight-only quantized GEMV, fused small ops -------------


def _decode(name: str, op: str, module: str, function: str, dtypes: tuple, description: str,
            technique: str) -> Implementation:  # fmt: skip
    return Implementation(
        name=name,
        op=op,
        build=_builder(module, function),
        dtypes=dtypes,
        description=description,
        metadata={"technique": technique, "accumulate": "fp32"},
    )


def _decode_implementations() -> list[Implementation]:
    floats, halves = ("fp32", "bf16", "fp16"), ("bf16", "fp16")
    dequant = "weights dequantized in registers, W bytes are the cost"
    return [
        _teaching("gemv", "gemv", "gemv", "gemv", floats),
        _teaching("decode_attention", "decode_attention", "decode_attention", "decode_attention",
                  floats),
        _decode("triton.gemv", "gemv", "gemv", "gemv", floats,
                "decode GEMV x[m<=64, k] W[n, k]^T: all rows per W tile, split-K, "
                "atomic-free second pass", "stream W once; split K to fill the GPU"),
        _decode("triton.quant_gemv.int8.teaching", "quant_gemv_int8", "quant_gemv.teaching",
                "quant_gemv_int8", halves,
                "the teaching int8 weight-only GEMV: one program per column block, no split",
                "teaching kernel (read first)"),
        _decode("triton.quant_gemv.int8", "quant_gemv_int8", "quant_gemv", "quant_gemv_int8",
                halves, "int8 per-channel weight-only GEMV, split-K", dequant),
        _decode("triton.quant_gemv.int4", "quant_gemv_int4", "quant_gemv", "quant_gemv_int4",
                halves, "int4 (two per byte) group-scaled symmetric weight-only GEMV, split-K",
                dequant),
        _decode("triton.quant_gemv.int4_zp", "quant_gemv_int4_zp", "quant_gemv",
                "quant_gemv_int4", halves,
                "int4 (two per byte) group-scaled weight-only GEMV with zero points, split-K",
                dequant),
        _decode("triton.quant_gemv.fp8", "quant_gemv_fp8", "quant_gemv", "quant_gemv_fp8",
                halves, "float8 e4m3 per-channel weight-only GEMV, split-K", dequant),
        _decode("triton.add_rmsnorm", "add_rmsnorm", "fused_norm", "add_rmsnorm_stacked",
                floats, "residual add + RMSNorm in one pass, h and y written once each",
                "one read of x and residual, fp32 statistics"),
        _decode("triton.rope", "rope", "rope", "rope", floats,
                "rotary embedding, half-split pairs, position offsets (in place: rope_)",
                "one read and one write of x"),
        _decode("triton.rope_interleaved", "rope_interleaved", "rope", "rope_interleaved",
                floats, "rotary embedding, interleaved pairs, position offsets (in place: "
                "rope_)", "one read and one write of x"),
        _decode("triton.decode_attention", "decode_attention", "decode_attention",
                "decode_attention", floats,
                "split-KV decode attention: a GQA group per tensor-core tile, online softmax per "
                "chunk of tokens, a log-sum-exp combine", "K and V read once per KV head"),
        _decode("triton.swiglu", "swiglu", "swiglu", "swiglu", floats,
                "silu(gate) * up in one pass", "two reads and one write, fp32 math"),
        _decode("triton.gate_up_swiglu", "gate_up_swiglu", "swiglu", "gate_up_swiglu", floats,
                "silu(x W_gate^T) * (x W_up^T): the gate/up GEMV and SwiGLU in one kernel, "
                "split-K", "W_gate and W_up read once, x once for both"),
        _decode("triton.sampling_probs.teaching", "sampling_probs", "sampling.teaching",
                "sampling_probs", floats,
                "the teaching sampler: the row in registers, thresholds off a sorted copy",
                "teaching kernel (read first)"),
        _decode("triton.sampling_probs", "sampling_probs", "sampling", "sampling_probs",
                floats, "temperature/top-k/top-p/min-p distribution without a sort: "
                "thresholds by bisection on the logit, tiled rows",
                "passes of reductions over the row; sample() draws by rejection"),
    ]  # fmt: skip


# ---- CuTe-DSL kernels (extra kernelab[cute]): same checks, timing and records as Triton's ----


def _cute_builder(module: str, function: str):
    """build() for a CuTe-DSL kernel: one line (KernelabError) when the package or a Hopper
    GPU is absent, before anything imports cutlass."""

    def build():
        from kernelab.runtime.cute_dsl import require

        require()
        return getattr(importlib.import_module(f"kernelab.ops.{module}"), function)

    return build


def _cute_implementations() -> list[Implementation]:
    floats = ("fp32", "bf16", "fp16")
    cluster = "row over a thread-block cluster, statistics through DSMEM, row in registers"
    return [
        Implementation(
            name="cute.softmax",
            op="softmax",
            build=_cute_builder("softmax.cute_dsl", "softmax"),
            dtypes=floats,
            description="CuTe-DSL fused softmax: one row per CTA cluster, online (max, sum)",
            metadata={"technique": cluster, "accumulate": "fp32", "language": "cute-dsl"},
        ),
        Implementation(
            name="cute.rmsnorm",
            op="rmsnorm",
            build=_cute_builder("norms.cute_dsl", "rmsnorm"),
            dtypes=floats,
            description="CuTe-DSL RMSNorm forward: one row per CTA cluster, fp32 statistics",
            metadata={"technique": cluster, "accumulate": "fp32", "language": "cute-dsl"},
        ),
        Implementation(
            name="cute.softmax_backward",
            op="softmax_backward",
            build=_cute_builder("softmax.cute_dsl_backward", "softmax_backward"),
            dtypes=floats,
            description="CuTe-DSL softmax backward: one row per CTA cluster, y and dy in registers",
            metadata={"technique": cluster, "accumulate": "fp32", "language": "cute-dsl"},
        ),
        Implementation(
            name="cute.rmsnorm_backward",
            op="rmsnorm_backward",
            build=_cute_builder("norms.cute_dsl_backward", "rmsnorm_backward"),
            dtypes=floats,
            description="CuTe-DSL RMSNorm backward: persistent CTAs, dweight partials in registers",
            metadata={
                "technique": "row in one CTA's registers, fp32 dweight partial per CTA",
                "accumulate": "fp32",
                "language": "cute-dsl",
            },
        ),
    ]
