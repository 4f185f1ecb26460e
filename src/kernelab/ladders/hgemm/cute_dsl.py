"""The Hopper bf16 GEMM in CuTe-DSL (`cute.gemm`, a column of `kernelab ladder hgemm`): the
algorithm of the CUDA C++ ladder's top steps written with CuTe layouts.

  C[M, N] (bf16) = A[M, K] @ B[K, N], fp32 accumulation
  tile     BM x BN x BK = 128 x 256 x 64 per CTA, two consumer warpgroups of 64 x 256 each
           (wgmma m64n256k16, four per BK), one producer warpgroup issuing TMA
  pipeline `stages` shared-memory slots of A and B tiles, each guarded by a full and an
           empty mbarrier (PipelineTmaAsync): the producer waits "empty", arms "full" with
           the slot's bytes and issues TMA; the consumers wait "full", run wgmma, release
  cluster  2 x 1: the two CTAs share B's tile, each loading half and multicasting it
  schedule persistent: one CTA per SM walks the tiles (StaticPersistentTileScheduler)
  registers the producer gives its registers back (setmaxnreg 40), the consumers take them
           (setmaxnreg 232): 128 fp32 accumulators a thread

This file is the plan (pure arithmetic the CPU tests check: tiles, stages against shared
memory, the grid) and the launcher's checks. The kernel (cute_dsl_kernel.py) is not written
yet, so `cute.gemm` is not registered: gemm() says so in one line after its checks.
Importing this file imports neither cutlass nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError
from kernelab.hardware.catalog import get_gpu

BF16 = 2
MBARRIER_BYTES = 8
WGMMA_M = 64  # rows of one wgmma; N up to 256 in steps of 8; K 16 for bf16
WGMMA_K = 16
TMA_BOX_BYTES = 128  # the innermost box extent with the 128-byte swizzle
SWIZZLE_ALIGN = 1024  # shared-memory slots aligned for the 128-byte swizzle pattern


@dataclass(frozen=True)
class GemmPlan:
    bm: int = 128
    bn: int = 256
    bk: int = 64
    consumers: int = 2  # consumer warpgroups; one more warpgroup produces
    cluster_m: int = 2
    cluster_n: int = 1
    stages: int = 4
    epilogue_bytes: int = 0  # shared bytes the epilogue stages C through (0: registers)

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def stage_bytes(self) -> int:
        """One slot of the ring: an A tile and a B tile."""
        return (self.bm * self.bk + self.bn * self.bk) * BF16

    @property
    def smem_bytes(self) -> int:
        ring = self.stages * self.stage_bytes
        barriers = 2 * self.stages * MBARRIER_BYTES
        return ring + self.epilogue_bytes + barriers + SWIZZLE_ALIGN

    @property
    def wgmma_per_stage(self) -> int:
        return self.bk // WGMMA_K

    @property
    def accumulators_per_thread(self) -> int:
        """fp32 accumulator registers per consumer thread: its warpgroup's BM/consumers x BN."""
        return (self.bm // self.consumers) * self.bn // 128

    def tiles(self, m: int, n: int) -> int:
        return -(-m // self.bm) * -(-n // self.bn)

    def grid(self, m: int, n: int, sms: int) -> int:
        """Persistent CTAs: no more than the tiles (rounded to whole clusters) or the SMs."""
        cluster = self.cluster_m * self.cluster_n
        ctas = min(self.tiles(m, n), sms)
        return max(cluster, ctas - ctas % cluster)


def max_stages(plan: GemmPlan, gpu: str = "h100-sxm") -> int:
    """The deepest ring that fits the shared memory one block may opt in to on `gpu`."""
    budget = get_gpu(gpu).smem_per_block_kib * 1024
    fixed = plan.epilogue_bytes + SWIZZLE_ALIGN
    return (budget - fixed) // (plan.stage_bytes + 2 * MBARRIER_BYTES)


def gemm_plan(gpu: str = "h100-sxm", **overrides) -> GemmPlan:
    """The default plan with the deepest ring that fits `gpu`, or KernelabError."""
    plan = GemmPlan(**overrides)
    if plan.bm % (WGMMA_M * plan.consumers) or plan.bk % WGMMA_K or plan.bn % 8 or plan.bn > 256:
        raise KernelabError(
            f"cute gemm: a {plan.bm}x{plan.bn}x{plan.bk} tile does not split into "
            f"m64nNk16 wgmma for {plan.consumers} consumer warpgroups"
        )
    if plan.bk * BF16 != TMA_BOX_BYTES:
        raise KernelabError("cute gemm: BK must span one 128-byte swizzle row (64 bf16)")
    stages = min(plan.stages, max_stages(plan, gpu))
    if stages < 2:
        raise KernelabError(f"cute gemm: no two stages of {plan.stage_bytes} bytes fit {gpu}")
    return GemmPlan(**{**plan.__dict__, "stages": stages})


# ---- the launcher ------------------------------------------------------------------------


def gemm(a, b):
    """a @ b for bf16 CUDA tensors a [M, K], b [K, N] (K and N multiples of 8: TMA needs
    16-byte aligned rows); a new bf16 [M, N] tensor."""
    import torch

    from kernelab.runtime.cute_dsl import require

    require()
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise KernelabError(f"cute gemm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not chain")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise KernelabError(f"cute gemm: bf16 only, got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[1]
    if k % 8 or n % 8:
        raise KernelabError(f"cute gemm: K ({k}) and N ({n}) must be multiples of 8 (TMA rows)")
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    raise KernelabError(
        "cute gemm: the CuTe-DSL kernel is not written yet (docs/ops/cute_dsl.md says what is)"
    )
