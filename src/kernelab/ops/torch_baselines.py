"""The torch baselines every kernel is compared to: cuBLAS through torch.mm, the eager ops and
their torch.compile versions.

torch.compile uses its default mode with dynamic=False: the configuration most users run,
with no CUDA graphs (the timer's graph mode decides about launch batching, for every
implementation alike) and without max-autotune, which tunes for minutes per shape and would
make `kernelab bench` unusable interactively. Compilation happens on the first call, which
the checker and the timer's warm-up make, never inside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelab.spec.math_modes import fp32_matmul
from kernelab.spec.registry import Implementation

FLOAT_DTYPES = ("fp32", "bf16", "fp16")


def _mm(*, tf32: bool) -> Callable[[], Callable]:
    def build():
        import torch

        def mm(a, b):
            # cuBLAS picks tf32 kernels from this flag at call time, so set it around the call.
            with fp32_matmul(tf32=tf32):
                return torch.mm(a, b)

        return mm

    return build


def _eager(op: str) -> Callable[[], Callable]:
    def build():
        from kernelab.spec.reference import OPS

        return OPS[op].torch_eager

    return build


def _compiled(op: str) -> Callable[[], Callable]:
    def build():
        import torch

        from kernelab.spec.reference import OPS

        return torch.compile(OPS[op].torch_eager, dynamic=False)

    return build


# (name suffix, op, what torch runs)
_EAGER_OPS = (
    ("softmax", "softmax", "torch.softmax(x, dim=-1)"),
    ("layer_norm", "layernorm", "torch.nn.functional.layer_norm"),
    ("rms_norm", "rmsnorm", "torch.nn.functional.rms_norm"),
    ("softmax_backward", "softmax_backward", "torch._softmax_backward_data (softmax's autograd)"),
    ("rmsnorm_backward", "rmsnorm_backward", "autograd of torch.nn.functional.rms_norm"),
    ("add", "vector_add", "x + y"),
    ("sum", "reduce_sum", "torch.sum(x, dtype=torch.float32)"),
)


def implementations() -> list[Implementation]:
    impls = [
        Implementation(
            name="torch.mm",
            op="gemm",
            build=_mm(tf32=False),
            dtypes=FLOAT_DTYPES,
            description="cuBLAS through torch.mm; fp32 in full fp32 (TF32 off)",
            is_baseline=True,
        ),
        Implementation(
            name="torch.mm.tf32",
            op="gemm",
            build=_mm(tf32=True),
            dtypes=("fp32",),
            description="cuBLAS through torch.mm with fp32 inputs on tf32 tensor cores",
            math_mode="tf32",
            is_baseline=True,
        ),
    ]
    for suffix, op, what in _EAGER_OPS:
        impls.append(
            Implementation(
                name=f"torch.{suffix}",
                op=op,
                build=_eager(op),
                dtypes=FLOAT_DTYPES,
                description=f"torch eager: {what}",
                is_baseline=True,
            )
        )
        impls.append(
            Implementation(
                name=f"torch.compile.{suffix}",
                op=op,
                build=_compiled(op),
                dtypes=FLOAT_DTYPES,
                description=f"torch.compile (default mode, static shapes) of {what}",
                is_baseline=True,
                metadata={"compiler": "inductor", "mode": "default", "dynamic": False},
            )
        )
    impls.extend(_primitive_baselines())
    impls.extend(_decode_baselines())
    impls.extend(_scan_baselines())
    return impls


# ---- the primitives ladders' anchors: transpose and histogram ------------------------------


def _primitive_baselines() -> list[Implementation]:
    return [
        Implementation(
            name="torch.transpose",
            op="transpose",
            build=_eager("transpose"),
            dtypes=FLOAT_DTYPES,
            description="torch eager: x.t().contiguous()",
            is_baseline=True,
        ),
        Implementation(
            name="torch.bincount",
            op="histogram",
            build=_eager("histogram"),
            dtypes=("int32", "uint8"),
            description="torch eager: torch.bincount with out-of-range ids mapped to the "
            "overflow slot (kernelab.spec.primitives.histogram_counts)",
            is_baseline=True,
        ),
    ]


# ---- the decode kernels' anchors: cuBLAS for the GEMVs, eager torch for the fused ops -----


def _decode_baselines() -> list[Implementation]:
    halves = ("bf16", "fp16")
    rows = [
        ("torch.gemv", "gemv", FLOAT_DTYPES, "x @ w.t() (cuBLAS)"),
        ("torch.quant_gemv.int8", "quant_gemv_int8", halves,
         "dequantize int8 into x's dtype, then x @ w.t() (cuBLAS)"),
        ("torch.quant_gemv.int4", "quant_gemv_int4", halves,
         "unpack and dequantize int4 into x's dtype, then x @ w.t() (cuBLAS)"),
        ("torch.quant_gemv.int4_zp", "quant_gemv_int4_zp", halves,
         "unpack and dequantize int4 with zero points, then x @ w.t() (cuBLAS)"),
        ("torch.quant_gemv.fp8", "quant_gemv_fp8", halves,
         "dequantize fp8 e4m3 into x's dtype, then x @ w.t() (cuBLAS)"),
        ("torch.add_rmsnorm", "add_rmsnorm", FLOAT_DTYPES,
         "h = x + residual; torch.nn.functional.rms_norm(h), stacked"),
        ("torch.rope", "rope", FLOAT_DTYPES, "gathered cos/sin, rotate_half in fp32, rounded"),
        ("torch.rope_interleaved", "rope_interleaved", FLOAT_DTYPES,
         "gathered cos/sin, interleaved pairs rotated in fp32, rounded"),
        ("torch.swiglu", "swiglu", FLOAT_DTYPES, "torch.nn.functional.silu(gate) * up"),
        ("torch.gate_up_swiglu", "gate_up_swiglu", FLOAT_DTYPES,
         "silu(x @ w_gate.t()) * (x @ w_up.t()): two cuBLAS GEMVs, then SwiGLU"),
        ("torch.decode_attention", "decode_attention", FLOAT_DTYPES,
         "scaled_dot_product_attention over the first n slots (enable_gqa)"),
        ("torch.sampling_probs", "sampling_probs", FLOAT_DTYPES,
         "softmax, sort, cumsum and masks: the sort-based top-k/top-p/min-p filtering"),
    ]  # fmt: skip
    return [
        Implementation(name=name, op=op, build=_eager(op), dtypes=dtypes,
                       description=f"torch eager: {what}", is_baseline=True)
        for name, op, dtypes, what in rows
    ]  # fmt: skip
# ---- the scan ladder's anchor: torch.cumsum -------------------------------------------------


def _scan_baselines() -> list[Implementation]:
    return [
        Implementation(
            name="torch.cumsum",
            op="scan",
            build=_eager("scan"),
            dtypes=("fp32", "int32"),
            description="torch eager: torch.cumsum(x, 0, dtype=x.dtype), shifted by one for an "
            "exclusive scan",
            is_baseline=True,
        ),
    ]
