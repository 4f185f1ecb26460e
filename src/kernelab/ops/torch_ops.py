"""kernelab's kernels as PyTorch operators: torch.ops.kernelab.*, for torch.compile and CUDA graphs.

    kernelab::vector_add(Tensor x, Tensor y) -> Tensor
    kernelab::softmax(Tensor x) -> Tensor
    kernelab::layernorm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-05) -> Tensor
    kernelab::rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor
    kernelab::matmul(Tensor a, Tensor b) -> Tensor
    kernelab::sgemm(Tensor a, Tensor b, int step) -> Tensor      fp32 ladder step 1..13
    kernelab::hgemm(Tensor a, Tensor b, int step) -> Tensor      bf16 Hopper ladder step 1..18
    kernelab::cute_softmax / cute_rmsnorm / cute_gemm             the CuTe-DSL kernels (extra cute)

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


vector_add_teaching.register_fake(_vector_add_fake)
softmax_teaching.register_fake(_softmax_fake)
layernorm_teaching.register_fake(_layernorm_fake)
rmsnorm_teaching.register_fake(_rmsnorm_fake)
matmul_teaching.register_fake(_matmul_fake)


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
