"""The row plan the CuTe-DSL row kernels (softmax, RMSNorm) share: pure arithmetic, checked
on the CPU, no cutlass.

Plan for a row of n values of `itemsize` bytes:
  vec      values per 128-bit access, reduced to the largest power of two dividing n so every
           row starts aligned (n = 1009: scalar accesses, slower but exact);
  cluster  the fewest CTAs (a power of two) whose registers hold the row at no more than
           MAX_HELD values per thread (fp32 registers) and MAX_THREADS threads per CTA;
  threads  per CTA: enough warps that each thread holds up to MAX_HELD values, fewer for
           short rows so short rows still give many CTAs per SM;
  tile     threads x held values: the columns each CTA covers (>= n / cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError
from kernelab.hardware.catalog import get_gpu

MAX_HELD = 32  # fp32 values a thread holds: 32 of the 64 registers a 1024-thread CTA may use
MAX_THREADS = 1024
MIN_THREADS = 128
MAX_CLUSTER = 8  # the portable cluster size (16 needs the non-portable opt-in on H100)
WARP = 32
ITEMSIZES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class RowPlan:
    cols: int
    itemsize: int
    vec: int
    cluster: int
    threads: int
    held: int  # values per thread

    @property
    def tile_cols(self) -> int:
        return self.threads * self.held

    @property
    def held_bytes_per_cta(self) -> int:
        """Register bytes the CTA's slice takes, as fp32."""
        return self.tile_cols * 4

    @property
    def dsmem_bytes_per_cta(self) -> int:
        """Shared bytes each CTA reserves for the cluster exchange: one pair per peer."""
        return self.cluster * 2 * 4

    @property
    def hbm_bytes_per_row(self) -> int:
        return 2 * self.cols * self.itemsize  # one read, one write


def vector_width(cols: int, itemsize: int) -> int:
    """Values per access: 16 bytes' worth, halved until it divides the row length."""
    vec = 16 // itemsize
    while vec > 1 and cols % vec:
        vec //= 2
    return vec


def row_plan(cols: int, itemsize: int, *, max_held: int = MAX_HELD) -> RowPlan:
    """The launch shape for rows of `cols` values; KernelabError past what a cluster holds."""
    if cols < 1:
        raise KernelabError(f"cute row kernels: rows need at least one column, got {cols}")
    if itemsize not in (2, 4):
        raise KernelabError(f"cute row kernels: fp32, bf16 or fp16 only (itemsize {itemsize})")
    vec = vector_width(cols, itemsize)
    per_cta_max = MAX_THREADS * max_held
    cluster = 1
    while cluster * per_cta_max < cols:
        cluster *= 2
    if cluster > MAX_CLUSTER:
        raise KernelabError(
            f"cute row kernels: a row of {cols} values needs a cluster of {cluster} CTAs; "
            f"at most {MAX_CLUSTER * per_cta_max} columns fit a portable cluster"
        )
    per_cta = -(-cols // cluster)
    # held values per thread: a multiple of vec; threads: a multiple of a warp
    threads = MIN_THREADS
    while threads < MAX_THREADS and threads * max_held < per_cta:
        threads *= 2
    held = -(-per_cta // threads)
    held = -(-held // vec) * vec
    return RowPlan(cols=cols, itemsize=itemsize, vec=vec, cluster=cluster, threads=threads,
                   held=held)  # fmt: skip


def refuse_partial_vectors(kernel: str, plan: RowPlan, bulk: bool) -> None:
    """One line when bulk loads are asked of rows that are not whole 16-byte vectors: a
    cp.async.bulk moves multiples of 16 bytes between 16-byte aligned addresses, and every
    slice but the first starts at row x cols x itemsize + rank x tile_cols x itemsize."""
    if bulk and plan.vec * plan.itemsize != 16:
        raise KernelabError(
            f"{kernel}: bulk loads need rows of whole 16-byte vectors; {plan.cols} values "
            f"of {plan.itemsize} bytes are not"
        )


def fits(plan: RowPlan, gpu: str = "h100-sxm") -> bool:
    """Whether the plan's CTA fits one SM of `gpu`: its held row in at most half the register
    file (the rest: addresses, loop state, the exp results), its threads, its shared bytes."""
    spec = get_gpu(gpu)
    regs_per_thread = spec.registers_per_sm // plan.threads
    return (
        plan.held_bytes_per_cta <= spec.register_file_kib_per_sm * 1024 / 2
        and plan.held <= min(regs_per_thread, 255) // 2
        and plan.threads <= spec.max_threads_per_sm
        and plan.dsmem_bytes_per_cta + (plan.threads // WARP) * 8 <= spec.smem_per_block_kib * 1024
        and plan.tile_cols * plan.cluster >= plan.cols
    )


def max_cols() -> int:
    """The longest row a portable cluster holds."""
    return MAX_CLUSTER * MAX_THREADS * MAX_HELD


# ---- what the launchers share (lazy imports: torch, cutlass) -----------------------------


def check_rows(kernel: str, x):
    """x as contiguous rows starting 16-byte aligned (a copy when it is not: the kernels read
    whole 16-byte vectors) when it is a 2-D fp32/bf16/fp16 CUDA tensor and CuTe-DSL can run
    here; else one line that says what is wrong."""
    import torch

    from kernelab.runtime.cute_dsl import require

    require()
    if x.dim() != 2:
        raise KernelabError(f"{kernel} expects a 2-D tensor, got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise KernelabError(f"{kernel} supports fp32, bf16 and fp16, not {x.dtype}")
    if not x.is_cuda:
        raise KernelabError(f"{kernel} needs a CUDA tensor, got one on {x.device}")
    return aligned(x)


def aligned(t):
    """t when it is contiguous and starts 16-byte aligned, else a copy that is."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def row_tensors(plan: RowPlan, *tensors):
    """Contiguous [rows, cols] torch tensors as CuTe tensors: rows dynamic (one compile
    serves every row count), the row length and stride static, so the kernel's 128-bit
    accesses are provably aligned."""
    from cutlass.cute.runtime import from_dlpack

    align = plan.vec * plan.itemsize
    return [
        from_dlpack(t, assumed_align=align).mark_compact_shape_dynamic(mode=0, stride_order=(0, 1))
        for t in tensors
    ]


def current_stream():
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
