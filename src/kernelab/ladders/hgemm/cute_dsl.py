"""The Hopper bf16 GEMM in CuTe-DSL (`cute.gemm`, a column of `kernelab ladder hgemm`): the
algorithm of the CUDA C++ ladder's top steps written with CuTe layouts.

  C[M, N] (bf16) = A[M, K] @ B[K, N], fp32 accumulation
  tile     BM x BN x BK = 128 x 256 x 64 per CTA, two consumer warpgroups of 64 x 256 each
           (wgmma m64n256k16, four per BK), one producer warpgroup issuing TMA
  pipeline `stages` shared-memory slots of A and B tiles, each guarded by a full and an
           empty mbarrier (PipelineTmaAsync): the producer waits "empty", arms "full" with
           the slot's bytes and issues TMA; the consumers wait "full", run wgmma, release
  cluster  2 x 1: the two CTAs share B's tile, each loading half by TMA multicast into both
           CTAs' slots (a slot is free when the consumer warps of both CTAs released it)
  schedule persistent: one CTA per SM walks the tiles (StaticPersistentTileScheduler)
  registers the producer gives its registers back (setmaxnreg 40), the consumers take them
           (setmaxnreg 232): 128 fp32 accumulators a thread

This file is the plan (pure arithmetic the CPU tests check: tiles, stages against shared
memory, the grid) and the launcher; the kernel is cute_dsl_kernel.py, imported only when the
kernel is about to run. Importing this file imports neither cutlass nor torch.
Not yet there: a TMA-store epilogue (C is stored from registers: bf16 pairs for whole
tiles, single values at the edges).
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


def gemm(a, b, *, cluster_m: int | None = None):
    """a @ b for bf16 CUDA tensors a [M, K], b [K, N]; a new bf16 [M, N] tensor.

    TMA needs 16-byte aligned rows: when K or N is not a multiple of 8 (or an operand is not
    contiguous and aligned), the operands are copied into zero-padded rows first and the
    result sliced (inside the call: 2 x (MK + KN) + 2 MN bytes more traffic). `cluster_m`
    (1 or 2) overrides the plan's cluster: 1 runs without multicast."""
    import torch

    from kernelab.runtime.cute_dsl import require

    if cluster_m not in (None, 1, 2):
        raise KernelabError(f"cute gemm: cluster_m must be 1 or 2, got {cluster_m}")
    require()
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise KernelabError(f"cute gemm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not chain")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise KernelabError(f"cute gemm: bf16 only, got {a.dtype} and {b.dtype}")
    if not (a.is_cuda and b.is_cuda and a.device == b.device):
        raise KernelabError(
            f"cute gemm needs CUDA tensors on one device, got {a.device}, {b.device}"
        )
    m, k = a.shape
    n = b.shape[1]
    plan = gemm_plan() if cluster_m is None else gemm_plan(cluster_m=cluster_m)
    if m == 0 or n == 0 or k == 0:
        return torch.zeros((m, n), dtype=torch.bfloat16, device=a.device)
    kp, np_ = -(-k // 8) * 8, -(-n // 8) * 8
    if (kp, np_) != (k, n) or not (_aligned(a) and _aligned(b)):
        a_p = torch.zeros((m, kp), dtype=a.dtype, device=a.device)
        a_p[:, :k].copy_(a)
        b_p = torch.zeros((kp, np_), dtype=b.dtype, device=b.device)
        b_p[:k, :n].copy_(b)
        out = torch.empty((m, np_), dtype=a.dtype, device=a.device)
        return _launch(plan, a_p, b_p, out)[:, :n]
    return _launch(plan, a, b, torch.empty((m, n), dtype=torch.bfloat16, device=a.device))


def _aligned(t) -> bool:
    return t.is_contiguous() and t.data_ptr() % 16 == 0


def _launch(plan: GemmPlan, a, b, out):
    tensors, sms = _arguments(plan, a, b, out)
    if plan not in _compiled:
        import cutlass.cute as cute

        _compiled[plan] = cute.compile(_kernel(plan), *tensors, sms, _stream())
    _compiled[plan](*tensors, sms, _stream())
    return out


_compiled: dict[GemmPlan, object] = {}


def _kernel(plan: GemmPlan):
    from kernelab.ladders.hgemm.cute_dsl_kernel import HopperGemm

    return HopperGemm(plan.bm, plan.bn, plan.bk, plan.stages, plan.consumers, plan.cluster_m)


def _arguments(plan: GemmPlan, a, b, out):
    from kernelab.ladders.hgemm.cute_dsl_kernel import lower_args

    return lower_args(plan, a, b, out, _resident_ctas(plan.cluster_m, a.device))


_resident: dict[tuple, int] = {}


def _resident_ctas(cluster_m: int, device) -> int:
    """CTAs of the persistent grid: as many clusters as can be resident at once (the driver's
    cuOccupancyMaxActiveClusters for a block of all the shared memory, through the DSL's
    HardwareInfo), times the cluster size; the SM count if the driver cannot say (still
    correct: clusters that do not fit wait, the run is slower)."""
    import torch

    key = (device.index, cluster_m)
    if key not in _resident:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        try:
            from cutlass.utils import HardwareInfo

            clusters = HardwareInfo().get_max_active_clusters(cluster_m)
            _resident[key] = max(cluster_m, min(sms, cluster_m * clusters))
        except Exception as exc:  # the driver's answer is an optimisation, never a need
            from kernelab.output import note

            note(f"cute gemm: resident clusters unknown ({str(exc)[:80]}); assuming {sms} CTAs")
            _resident[key] = sms - sms % cluster_m
    return _resident[key]


def _stream():
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
