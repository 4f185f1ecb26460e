"""One SGEMM ladder step called from Python: compile it (cached), prepare its launch for the
caller's operands (the tuned tiles, the geometry, the arguments) and launch it on the current
stream. Nothing here touches CUDA at import time."""

from __future__ import annotations

import ctypes

from kernelab.errors import KernelabError
from kernelab.ladders.provider import StepBuilds
from kernelab.ladders.sgemm.steps import Step, get_step
from kernelab.ladders.sgemm.tuning import winner
from kernelab.runtime.cuda.prepared import PlanCache, current_stream_handle, prepare

SOURCE_DIR = "ladders/sgemm"  # relative to the kernelab package, where build.source_path looks


_builds = StepBuilds(SOURCE_DIR)


def build_step(step: Step, defines: dict | None = None, *, arch: str | None = None):
    """Compile one step (with its default or given tile defines); cached on disk and, for
    the life of the process, in memory."""
    return _builds.get(step, {**step.default_defines, **(defines or {})}, arch)


def _row_major_view(t, name: str):
    """(tensor, leading dimension) for a 2-D fp32 CUDA tensor whose rows are contiguous."""
    import torch

    if t.dim() != 2:
        raise KernelabError(f"sgemm: {name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype != torch.float32:
        raise KernelabError(f"sgemm: {name} must be float32, got {t.dtype}")
    if not t.is_cuda:
        raise KernelabError(f"sgemm: {name} must be a CUDA tensor")
    if t.size(1) > 1 and t.stride(1) != 1:
        t = t.contiguous()  # the kernels take a row stride, not a column stride
    rows, cols = t.shape
    ld = t.stride(0) if rows > 1 else max(cols, 1)
    if ld < cols:
        t, ld = t.contiguous(), cols
    return t, ld


def sgemm(
    step: Step | int | str,
    a,
    b,
    *,
    out=None,
    alpha: float = 1.0,
    beta: float = 0.0,
    defines: dict | None = None,
):
    """out = alpha * a @ b + beta * out with one ladder step; a new tensor when out is None.

    a[M, K] and b[K, N] are fp32 CUDA tensors with contiguous rows (any row stride: a view
    with a larger stride is passed as lda/ldb, never copied). `defines` pick a tile
    configuration for the tunable steps; by default they use the tuned winner for this GPU
    and shape class.
    """
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    a, lda = _row_major_view(a, "a")
    b, ldb = _row_major_view(b, "b")
    m, k = a.shape
    k_b, n = b.shape
    if k != k_b:
        raise KernelabError(f"sgemm: inner dimensions differ: a is {m}x{k}, b is {k_b}x{n}")
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        beta = 0.0
    elif tuple(out.shape) != (m, n) or out.dtype != torch.float32 or (n > 1 and out.stride(1) != 1):
        raise KernelabError(f"sgemm: out must be a row-major float32 {m}x{n} tensor")
    if m == 0 or n == 0:
        return out
    if k == 0:  # an empty sum: C = beta * C
        return out.mul_(beta) if beta != 0.0 else out.zero_()
    ldc = out.stride(0) if m > 1 else n

    key = (step.number, a.device.index, m, n, k, a.data_ptr(), lda, b.data_ptr(), ldb,
           out.data_ptr(), ldc, alpha, beta, tuple(sorted((defines or {}).items())))  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        plan = _plans.put(
            key, _prepare(step, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc, defines)
        )
    plan(current_stream_handle(a.device.index if a.device.index is not None else 0))
    return out


_plans = PlanCache()


def _prepare(step: Step, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc, defines):
    """The launch of `step` for these operands: the tuned tiles, the geometry, the arguments.
    `a`, `b` and `out` are the caller's own tensors (views, never copies), so the launch can
    be kept for as long as their pointers and strides stay the same."""
    if defines is None and step.tunable:
        defines = winner(step, m, n, k)
    built = build_step(step, defines)
    config = step.launch(m, n, k, defines)
    params = [
        ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k), ctypes.c_float(alpha),
        ctypes.c_uint64(a.data_ptr()), ctypes.c_int32(lda),
        ctypes.c_uint64(b.data_ptr()), ctypes.c_int32(ldb),
        ctypes.c_float(beta), ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(ldc),
    ]  # fmt: skip
    return prepare(built.cubin, step.kernel, built.arch, config, params)
