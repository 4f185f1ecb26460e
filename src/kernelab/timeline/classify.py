"""What kind of work a kernel (or a CPU op) does, read from its name.

Names come from several families: cuBLAS and CUTLASS (`sm90_xmma_gemm_...`, `nvjet_tst_...`,
`cutlass::Kernel2<cutlass_80_wmma_tensorop_...gemm...>`, `gemv2T_kernel_val`), attention
libraries (`flash_fwd_kernel`, `fmha_cutlassF_...`, `pytorch_flash::...`), torch's own
kernels (`vectorized_elementwise_kernel<..., FillFunctor>`, `reduce_kernel`,
`vectorized_layer_norm_kernel`, `cunn_SoftMaxForward`), Inductor's Triton kernels
(`triton_poi_` pointwise, `triton_red_`/`triton_per_` reductions, `triton_tem_` templates),
the runtime's `Memcpy HtoD`/`Memset` activities, and aten ops on the CPU (`aten::addmm`).

The rules are tried in order and the first match wins. The order carries the knowledge:
attention before GEMM (`fmha_cutlass...`), normalization before reduction and copy (an
Inductor RMSNorm is `triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0`), copy before
elementwise (torch's copy and fill kernels are instances of `elementwise_kernel`).
"""

from __future__ import annotations

import re

GEMM = "gemm"
ATTENTION = "attention"
NORMALIZATION = "normalization"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COPY = "copy"
OTHER = "other"

CLASSES = (GEMM, ATTENTION, NORMALIZATION, ELEMENTWISE, REDUCTION, COPY, OTHER)

# aten ops that only make a new view of a tensor or allocate one: no arithmetic, no traffic.
_VIEWS_AND_ALLOCATIONS = (
    r"^aten::(view|_unsafe_view|reshape|as_strided|transpose|t|permute|expand|slice|narrow|"
    r"split|split_with_sizes|chunk|select|unsqueeze|squeeze|unflatten|flatten|detach|alias|"
    r"lift_fresh|empty|empty_like|empty_strided|resolve_conj|resolve_neg|result_type|"
    r"is_nonzero|item|_local_scalar_dense)$"
)

_RULES: tuple[tuple[str, str], ...] = (
    (OTHER, _VIEWS_AND_ALLOCATIONS),
    # Collectives move data between GPUs: not this GPU's reduction (ncclDevKernel_AllReduce).
    (OTHER, r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"),
    # The CUDA runtime's copy and set activities: "Memcpy HtoD (Pageable -> Device)".
    (COPY, r"^(memcpy|memset)\b"),
    (ATTENTION, r"flash|fmha|sdpa|attention|attn|_mha|mha_|xformers|scaled_dot_product"),
    (
        NORMALIZATION,
        r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|welford|"
        r"rowwisemoments|rsqrt",
    ),
    (
        GEMM,
        r"gemm|gemv|nvjet|xmma|cutlass|cublas|matmul|wgmma|hgmma|splitkreduce|triton_tem_|"
        r"(^|[^a-z])(mm|addmm|bmm|baddbmm|linear|_scaled_mm|_addmm_activation|dot)($|[^a-z])",
    ),
    (COPY, r"copy|memcpy|memset|fill|catarray|cat_array|transpose|permute|contiguous|clone"),
    (
        REDUCTION,
        r"reduce|reduction|softmax|triton_red_|triton_per_|argmax|argmin|topk|cumsum|scan|"
        r"logsumexp|(^|[^a-z])(sum|mean|amax|amin|norm)($|[^a-z])",
    ),
    (
        ELEMENTWISE,
        r"elementwise|triton_poi_|pointwise|vectorized|unrolled|functor|silu|gelu|relu|"
        r"sigmoid|tanh|exp|activation|(^|[^a-z])(add|sub|mul|div|pow|neg|where|masked_fill|"
        r"add_|mul_|div_|sub_|index|gather|scatter|embedding)($|[^a-z])",
    ),
)
_COMPILED = tuple((cls, re.compile(pattern, re.IGNORECASE)) for cls, pattern in _RULES)


def classify(name: str) -> str:
    """The class of a kernel or CPU op name: one of CLASSES ("other" when nothing fits)."""
    text = name.strip()
    for cls, pattern in _COMPILED:
        if pattern.search(text):
            return cls
    return OTHER


def _drop_bracketed(text: str, open_: str, close: str) -> str:
    """`text` without any balanced open_..close run (template arguments, parameters)."""
    out, depth = [], 0
    for char in text:
        if char == open_:
            depth += 1
        elif char == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


def function_name(name: str) -> str:
    """The bare function name of a demangled kernel name, as Nsight Compute matches it by
    default (`--kernel-name-base function`): no return type, namespace, template arguments
    or parameters. "void at::native::vectorized_elementwise_kernel<4, F>(int, F)" ->
    "vectorized_elementwise_kernel"; a C-linkage name comes back unchanged."""
    text = name.replace("(anonymous namespace)", "anonymous_namespace").strip()
    text = _drop_bracketed(text, "<", ">")
    cut = text.find("(")
    if cut > 0:
        text = text[:cut]
    text = text.strip().split()[-1] if text.strip() else name
    return text.rsplit("::", 1)[-1] or name


def short_label(name: str, width: int = 72) -> str:
    """A kernel name short enough for a table row: parameters dropped, then truncated."""
    text = name.replace("(anonymous namespace)", "(anon)")
    depth, cut = 0, None
    for i, char in enumerate(text):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0 and not text.startswith("(anon)", i):
            cut = i
            break
    if cut:
        text = text[:cut]
    text = text.removeprefix("void ").strip()
    return text if len(text) <= width else text[: width - 3] + "..."
