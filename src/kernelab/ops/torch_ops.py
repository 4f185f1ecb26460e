"""kernelab's kernels as PyTorch operators: torch.ops.kernelab.*, for torch.compile and CUDA graphs.

    kernelab::vector_add(Tensor x, Tensor y) -> Tensor
    kernelab::softmax(Tensor x) -> Tensor
    kernelab::layernorm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-05) -> Tensor
    kernelab::rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor
    kernelab::matmul(Tensor a, Tensor b) -> Tensor
    kernelab::sgemm(Tensor a, Tensor b, int step) -> Tensor      fp32 ladder step 1..13
    kernelab::hgemm(Tensor a, Tensor b, int step) -> Tensor      bf16 Hopper ladder step 1..18
    kernelab::cute_softmax / cute_rmsnorm / cute_gemm             the CuTe-DSL kernels (extra cute)

The decode kernels (ops/gemv, quant_gemv, fused_norm, rope, swiglu; see ops/decode_step for a
whole block built from them):

    kernelab::gemv(Tensor x, Tensor w) -> Tensor                          x[m, k] @ w[n, k]^T
    kernelab::quant_gemv_int8(Tensor x, Tensor q, Tensor scale) -> Tensor
    kernelab::quant_gemv_fp8(Tensor x, Tensor q, Tensor scale) -> Tensor
    kernelab::quant_gemv_int4(Tensor x, Tensor packed, Tensor scales, Tensor? zeros, int group)
        -> Tensor                                 (quant_gemv_int4_zp: the same, the registry's
                                                   name for it with zero points)
    kernelab::add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) -> Tensor
        h = x + residual and y = rmsnorm(h) * weight stacked [2, *x.shape]: a custom op's
        outputs may not share storage, and the kernel writes both halves of one buffer, so the
        op returns the buffer and add_rmsnorm() below hands back its two views (h, y)
    kernelab::rope_(Tensor(a!) x, Tensor cos, Tensor sin, Tensor positions,
        bool interleaved=False) -> ()                                     in place
    kernelab::rope(Tensor x, Tensor cos, Tensor sin, Tensor positions) -> Tensor
    kernelab::rope_interleaved(Tensor x, Tensor cos, Tensor sin, Tensor positions) -> Tensor
    kernelab::swiglu(Tensor gate, Tensor up) -> Tensor                    silu(gate) * up
    kernelab::gate_up_swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor
        silu(x @ w_gate^T) * (x @ w_up^T), both weights read once
    kernelab::gemv_teaching, kernelab::quant_gemv_int8_teaching,
    kernelab::decode_attention_teaching: their teaching kernels
    kernelab::decode_attention(Tensor q, Tensor k, Tensor v, int n) -> Tensor
        one query token per sequence over n cached tokens, GQA, split over the KV length

Each op calls the public function of its kernel module (triton.vector_add.vector_add,
cuda.sgemm.sgemm, ...) and returns a new tensor (mutates_args=()); a fake implementation
gives torch.compile the output's shape, dtype and device without running anything. Forward
only: no autograd formula is registered. `op_for("sgemm:13")` is the op of a registry name.

Why torch.library.custom_op, not triton_op, for the Triton kernels: triton_op traces its body
with fake tensors (to derive the fake implementation and to let Inductor see the kernels), so
the body may hold only torch ops and Triton launches wrapped in wrap_triton. The launchers
here are not that: they time candidate configurations on the first large call, read pointer
alignment (data_ptr) to choose TMA or not, size persistent grids from the compiled binary's
occupancy and keep workspaces between calls. Wrapped as they are, triton_op fails at the first
fake call (the launcher hands fake tensors to a real launch: "Attempted to set the storage of a
tensor on device meta to a storage on different device cpu", torch 2.13, Triton 3.9), and a
traceable body would be a second copy of every launcher. So each op is opaque to
torch.compile: Inductor schedules it as an extern call and fuses around it, not into it.

Nothing touches the GPU or imports Triton when this module is imported; it imports torch and
registers the ops, so nothing in kernelab imports it eagerly (import it, or call ops(), to use
them). The kernel modules are imported on an op's first call.

CUDA graphs: every launcher launches on torch's current stream, so the ops can be captured.
The first call of a shape must happen outside the capture: it compiles the kernel (and loads
the cubin), and for the Triton kernels autotunes (matmul and vector_add through Triton's
autotuner, softmax and the norms by timing candidates on inputs of 64 MiB or more), none of
which a capture allows. Warm up on a side stream, as torch's CUDA-graph docs say, and capture
on that same stream (torch.cuda.graph(g, stream=side)): the per-stream state (cuda.core's
stream wrapper, matmul's split-K counters) then exists before the capture starts.
The softmax's split-row kernels keep exchange words between calls, but give a captured launch
a zeroed workspace of its own (kernelab.runtime.turn_words).
"""

from __future__ import annotations

import functools
import importlib

import torch
from torch import Tensor

from kernelab.errors import KernelabError

NAMESPACE = "kernelab"


def ops():
    """torch.ops.kernelab: the registered operators (registered when this module is imported)."""
    return getattr(torch.ops, NAMESPACE)


def _public(module: str, function: str):
    """A kernel module's public function, imported on first use (Triton, cuda.core)."""
    return getattr(importlib.import_module(f"kernelab.{module}"), function)


def _rows_of(op: str, x: Tensor) -> tuple:
    if x.dim() != 2:
        raise ValueError(f"{op} expects a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    return tuple(x.shape)


def _product_shape(op: str, a: Tensor, b: Tensor) -> tuple:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"{op} needs a[M, K] and b[K, N], got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    return (a.shape[0], b.shape[1])


# --- Triton -----------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::vector_add", mutates_args=())
def vector_add(x: Tensor, y: Tensor) -> Tensor:
    return _public("ops.vector_add", "vector_add")(x, y)


@vector_add.register_fake
def _vector_add_fake(x, y):
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(
            f"vector_add needs equal shapes and dtypes, got {x.shape}/{x.dtype} and {y.shape}/{y.dtype}"
        )
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{NAMESPACE}::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    return _public("ops.softmax", "softmax")(x)


@softmax.register_fake
def _softmax_fake(x):
    return x.new_empty(_rows_of("softmax", x))


@torch.library.custom_op(f"{NAMESPACE}::layernorm", mutates_args=())
def layernorm(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    return _public("ops.norms", "layernorm")(x, weight, bias, eps)


@layernorm.register_fake
def _layernorm_fake(x, weight, bias=None, eps=1e-5):
    return x.new_empty(_rows_of("layernorm", x))


@torch.library.custom_op(f"{NAMESPACE}::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return _public("ops.norms", "rmsnorm")(x, weight, eps)


@rmsnorm.register_fake
def _rmsnorm_fake(x, weight, eps=1e-6):
    return x.new_empty(_rows_of("rmsnorm", x))


@torch.library.custom_op(f"{NAMESPACE}::matmul", mutates_args=())
def matmul(a: Tensor, b: Tensor) -> Tensor:
    return _public("ops.matmul", "matmul")(a, b)


@matmul.register_fake
def _matmul_fake(a, b):
    # fp8 inputs write bf16 (kernelab.spec.reference)
    dtype = torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype
    return a.new_empty(_product_shape("matmul", a, b), dtype=dtype)


# --- the decode kernels ------------------------------------------------------------------


def _gemv_shape(op: str, x: Tensor, n: int, k: int, weights: tuple) -> tuple:
    if x.dim() != 2 or x.shape[1] != k:
        shapes = ", ".join(str(tuple(t.shape)) for t in (x, *weights))
        raise ValueError(f"{op} needs x[m, k] and weights of k = {k} columns, got {shapes}")
    return (x.shape[0], n)


@torch.library.custom_op(f"{NAMESPACE}::gemv", mutates_args=())
def gemv(x: Tensor, w: Tensor) -> Tensor:
    return _public("ops.gemv", "gemv")(x, w)


@gemv.register_fake
def _gemv_fake(x, w):
    if w.dim() != 2:
        raise ValueError(f"gemv needs w[n, k], got {tuple(w.shape)}")
    return x.new_empty(_gemv_shape("gemv", x, w.shape[0], w.shape[1], (w,)))


@torch.library.custom_op(f"{NAMESPACE}::quant_gemv_int8", mutates_args=())
def quant_gemv_int8(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    return _public("ops.quant_gemv", "quant_gemv_int8")(x, q, scale)


@torch.library.custom_op(f"{NAMESPACE}::quant_gemv_fp8", mutates_args=())
def quant_gemv_fp8(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    return _public("ops.quant_gemv", "quant_gemv_fp8")(x, q, scale)


def _per_channel_fake(x, q, scale):
    if q.dim() != 2 or scale.shape != q.shape[:1]:
        raise ValueError(f"a per-channel GEMV needs q[n, k] and scale[n], got "
                         f"{tuple(q.shape)} and {tuple(scale.shape)}")  # fmt: skip
    return x.new_empty(_gemv_shape("quant_gemv", x, q.shape[0], q.shape[1], (q, scale)))


quant_gemv_int8.register_fake(_per_channel_fake)
quant_gemv_fp8.register_fake(_per_channel_fake)

# "int group": a format constant torch.compile specializes on, never a traced size.
INT4_SCHEMA = "(Tensor x, Tensor packed, Tensor scales, Tensor? zeros, int group) -> Tensor"


@torch.library.custom_op(f"{NAMESPACE}::quant_gemv_int4", mutates_args=(), schema=INT4_SCHEMA)
def quant_gemv_int4(x: Tensor, packed: Tensor, scales: Tensor, zeros: Tensor | None,
                    group: int) -> Tensor:  # fmt: skip
    return _public("ops.quant_gemv", "quant_gemv_int4")(x, packed, scales, zeros, group)


@torch.library.custom_op(f"{NAMESPACE}::quant_gemv_int4_zp", mutates_args=(), schema=INT4_SCHEMA)
def quant_gemv_int4_zp(x: Tensor, packed: Tensor, scales: Tensor, zeros: Tensor | None,
                       group: int) -> Tensor:  # fmt: skip
    """The registry's triton.quant_gemv.int4_zp: the same kernel, zero points given."""
    return _public("ops.quant_gemv", "quant_gemv_int4")(x, packed, scales, zeros, group)


def _int4_fake(x, packed, scales, zeros, group):
    if packed.dim() != 2 or group <= 0 or (2 * packed.shape[1]) % group:
        raise ValueError(f"quant_gemv_int4 needs packed[n, k/2] with k a multiple of the group "
                         f"{group}, got {tuple(packed.shape)}")  # fmt: skip
    weights = (packed, scales) if zeros is None else (packed, scales, zeros)
    return x.new_empty(_gemv_shape("quant_gemv_int4", x, packed.shape[0], 2 * packed.shape[1],
                                   weights))  # fmt: skip


quant_gemv_int4.register_fake(_int4_fake)
quant_gemv_int4_zp.register_fake(_int4_fake)


@torch.library.custom_op(f"{NAMESPACE}::add_rmsnorm", mutates_args=())
def add_rmsnorm_stacked(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return _public("ops.fused_norm", "add_rmsnorm_stacked")(x, residual, weight, eps)


@add_rmsnorm_stacked.register_fake
def _add_rmsnorm_fake(x, residual, weight, eps=1e-6):
    if x.shape != residual.shape or x.dim() < 1 or weight.shape != x.shape[-1:]:
        raise ValueError(f"add_rmsnorm needs x and residual of one shape and weight[cols], got "
                         f"{tuple(x.shape)}, {tuple(residual.shape)}, "
                         f"{tuple(weight.shape)}")  # fmt: skip
    return x.new_empty((2, *x.shape))


def add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6):
    """(h, y) = (x + residual, rmsnorm(x + residual) * weight): two views of the op's buffer."""
    out = ops().add_rmsnorm(x, residual, weight, eps)
    return out[0], out[1]


def _rope_fake_checks(x, cos, sin, positions) -> None:
    if x.dim() != 3 or cos.shape != sin.shape or cos.dim() != 2 or x.shape[2] != 2 * cos.shape[1]:
        raise ValueError(f"rope needs x[tokens, heads, head_dim] and cos, sin [positions, "
                         f"head_dim / 2], got {tuple(x.shape)}, {tuple(cos.shape)}, "
                         f"{tuple(sin.shape)}")  # fmt: skip
    if positions.shape != x.shape[:1]:
        raise ValueError(f"rope needs positions[{x.shape[0]}], got {tuple(positions.shape)}")


@torch.library.custom_op(f"{NAMESPACE}::rope_", mutates_args=("x",))
def rope_(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor,
          interleaved: bool = False) -> None:  # fmt: skip
    _public("ops.rope", "rope_")(x, cos, sin, positions, interleaved=interleaved)


@rope_.register_fake
def _(x, cos, sin, positions, interleaved=False):
    _rope_fake_checks(x, cos, sin, positions)


@torch.library.custom_op(f"{NAMESPACE}::rope", mutates_args=())
def rope(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor) -> Tensor:
    return _public("ops.rope", "rope")(x, cos, sin, positions)


@torch.library.custom_op(f"{NAMESPACE}::rope_interleaved", mutates_args=())
def rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor) -> Tensor:
    return _public("ops.rope", "rope_interleaved")(x, cos, sin, positions)


def _rope_fake(x, cos, sin, positions):
    _rope_fake_checks(x, cos, sin, positions)
    return x.new_empty(x.shape)


rope.register_fake(_rope_fake)
rope_interleaved.register_fake(_rope_fake)


@torch.library.custom_op(f"{NAMESPACE}::swiglu", mutates_args=())
def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    return _public("ops.swiglu", "swiglu")(gate, up)


@swiglu.register_fake
def _(gate, up):
    if gate.shape != up.shape or gate.dim() < 1:
        raise ValueError(f"swiglu needs gate and up of one shape, got {tuple(gate.shape)} and "
                         f"{tuple(up.shape)}")  # fmt: skip
    return gate.new_empty(gate.shape)


@torch.library.custom_op(f"{NAMESPACE}::gate_up_swiglu", mutates_args=())
def gate_up_swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor:
    return _public("ops.swiglu", "gate_up_swiglu")(x, w_gate, w_up)


@gate_up_swiglu.register_fake
def _(x, w_gate, w_up):
    if x.dim() != 2 or w_gate.dim() != 2 or w_gate.shape != w_up.shape or w_gate.shape[1] != x.shape[1]:
        raise ValueError(f"gate_up_swiglu needs x[m, k] and w_gate, w_up [n, k], got "
                         f"{tuple(x.shape)}, {tuple(w_gate.shape)}, {tuple(w_up.shape)}")  # fmt: skip
    return x.new_empty((x.shape[0], w_gate.shape[0]))


# "int n": the number of cached tokens attended; a new n is a new graph, never a traced size.
DECODE_ATTENTION_SCHEMA = "(Tensor q, Tensor k, Tensor v, int n) -> Tensor"


@torch.library.custom_op(f"{NAMESPACE}::decode_attention", mutates_args=(),
                         schema=DECODE_ATTENTION_SCHEMA)  # fmt: skip
def decode_attention(q: Tensor, k: Tensor, v: Tensor, n: int) -> Tensor:
    return _public("ops.decode_attention", "decode_attention")(q, k, v, n)


def _decode_attention_fake(q, k, v, n):
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape or k.shape[3] != q.shape[2]:
        raise ValueError(f"decode_attention needs q[batch, heads, head_dim] and k, v [batch, "
                         f"kv_heads, tokens, head_dim], got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")  # fmt: skip
    return q.new_empty(q.shape)


decode_attention.register_fake(_decode_attention_fake)


# --- the teaching kernels (triton.<op>.teaching): the same schemas and fakes ---------------


@torch.library.custom_op(f"{NAMESPACE}::vector_add_teaching", mutates_args=())
def vector_add_teaching(x: Tensor, y: Tensor) -> Tensor:
    return _public("ops.vector_add.teaching", "vector_add")(x, y)


@torch.library.custom_op(f"{NAMESPACE}::softmax_teaching", mutates_args=())
def softmax_teaching(x: Tensor) -> Tensor:
    return _public("ops.softmax.teaching", "softmax")(x)


@torch.library.custom_op(f"{NAMESPACE}::layernorm_teaching", mutates_args=())
def layernorm_teaching(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    return _public("ops.norms.teaching", "layernorm")(x, weight, bias, eps)


@torch.library.custom_op(f"{NAMESPACE}::rmsnorm_teaching", mutates_args=())
def rmsnorm_teaching(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return _public("ops.norms.teaching", "rmsnorm")(x, weight, eps)


@torch.library.custom_op(f"{NAMESPACE}::matmul_teaching", mutates_args=())
def matmul_teaching(a: Tensor, b: Tensor) -> Tensor:
    return _public("ops.matmul.teaching", "matmul")(a, b)


@torch.library.custom_op(f"{NAMESPACE}::decode_attention_teaching", mutates_args=(),
                         schema=DECODE_ATTENTION_SCHEMA)  # fmt: skip
def decode_attention_teaching(q: Tensor, k: Tensor, v: Tensor, n: int) -> Tensor:
    return _public("ops.decode_attention.teaching", "decode_attention")(q, k, v, n)


decode_attention_teaching.register_fake(_decode_attention_fake)


@torch.library.custom_op(f"{NAMESPACE}::gemv_teaching", mutates_args=())
def gemv_teaching(x: Tensor, w: Tensor) -> Tensor:
    return _public("ops.gemv.teaching", "gemv")(x, w)


@torch.library.custom_op(f"{NAMESPACE}::quant_gemv_int8_teaching", mutates_args=())
def quant_gemv_int8_teaching(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    return _public("ops.quant_gemv.teaching", "quant_gemv_int8")(x, q, scale)


vector_add_teaching.register_fake(_vector_add_fake)
softmax_teaching.register_fake(_softmax_fake)
layernorm_teaching.register_fake(_layernorm_fake)
rmsnorm_teaching.register_fake(_rmsnorm_fake)
matmul_teaching.register_fake(_matmul_fake)
gemv_teaching.register_fake(_gemv_fake)
quant_gemv_int8_teaching.register_fake(_per_channel_fake)


# --- the CuTe-DSL kernels (extra kernelab[cute]): the Triton ops' schemas and fakes -------


@torch.library.custom_op(f"{NAMESPACE}::cute_softmax", mutates_args=())
def cute_softmax(x: Tensor) -> Tensor:
    return _public("ops.softmax.cute_dsl", "softmax")(x)


@torch.library.custom_op(f"{NAMESPACE}::cute_rmsnorm", mutates_args=())
def cute_rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return _public("ops.norms.cute_dsl", "rmsnorm")(x, weight, eps)


@torch.library.custom_op(f"{NAMESPACE}::cute_gemm", mutates_args=())
def cute_gemm(a: Tensor, b: Tensor) -> Tensor:
    return _public("ladders.hgemm.cute_dsl", "gemm")(a, b)


cute_softmax.register_fake(_softmax_fake)
cute_rmsnorm.register_fake(_rmsnorm_fake)


@cute_gemm.register_fake
def _(a, b):
    return a.new_empty(_product_shape("cute_gemm", a, b), dtype=torch.bfloat16)


# --- the CUDA C++ ladders ---------------------------------------------------------------


# "int", not the "SymInt" inferred from the annotation: the step picks a kernel, so
# torch.compile must specialize on it, never trace it as a dynamic size.
LADDER_SCHEMA = "(Tensor a, Tensor b, int step) -> Tensor"


def _known_step(ladder: str, step: int) -> None:
    """An unknown step fails while torch.compile traces, not at the first run."""
    _public(f"ladders.{ladder}", "get_step")(step)


@torch.library.custom_op(f"{NAMESPACE}::sgemm", mutates_args=(), schema=LADDER_SCHEMA)
def sgemm(a: Tensor, b: Tensor, step: int) -> Tensor:
    return _public("ladders.sgemm", "sgemm")(step, a, b)


@sgemm.register_fake
def _(a, b, step):
    _known_step("sgemm", step)
    return a.new_empty(_product_shape("sgemm", a, b), dtype=torch.float32)


@torch.library.custom_op(f"{NAMESPACE}::hgemm", mutates_args=(), schema=LADDER_SCHEMA)
def hgemm(a: Tensor, b: Tensor, step: int) -> Tensor:
    return _public("ladders.hgemm", "hgemm")(step, a, b)


@hgemm.register_fake
def _(a, b, step):
    _known_step("hgemm", step)
    return a.new_empty(_product_shape("hgemm", a, b), dtype=torch.bfloat16)


REDUCE_SCHEMA = "(Tensor x, int step) -> Tensor"


@torch.library.custom_op(f"{NAMESPACE}::reduce", mutates_args=(), schema=REDUCE_SCHEMA)
def reduce(x: Tensor, step: int) -> Tensor:
    return _public("ladders.reduce", "reduce_sum")(step, x)


@reduce.register_fake
def _(x, step):
    _known_step("reduce", step)
    return x.new_empty((), dtype=torch.float32)


LADDERS = ("sgemm", "hgemm", "reduce")


def op_for(name: str):
    """The torch op that runs registry implementation `name` ("triton.softmax", "sgemm:13"),
    called with the inputs of its op in kernelab.spec.reference.OPS, in that order."""
    from kernelab.spec.registry import get

    impl = get(name)  # an unknown name says which ones exist
    ladder, _, step = name.partition(":")
    if ladder in LADDERS and step:
        return functools.partial(getattr(ops(), ladder), step=int(step))
    if name.startswith("triton."):
        # triton.softmax -> kernelab::softmax, triton.softmax.teaching -> softmax_teaching
        return getattr(ops(), name.removeprefix("triton.").replace(".", "_"))
    if name.startswith("cute."):
        return getattr(ops(), name.replace(".", "_"))  # cute.softmax -> kernelab::cute_softmax
    raise KernelabError(f"{impl.name} has no kernelab torch op (a baseline is torch already)")
