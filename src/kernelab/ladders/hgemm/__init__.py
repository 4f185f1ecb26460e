"""The Hopper bf16 GEMM ladder: the registry provider and the Python entry point to every step.

`hgemm(step, a, b)` computes a @ b (bf16 inputs, fp32 accumulation, bf16 output) with one
ladder step; `implementations()` registers one Implementation per step as "hgemm:01", ...
for op "gemm". Compiling happens on first use (nvcc for sm_90a, cached on disk); nothing here
touches CUDA at import time.

What the launcher does before the kernel, and what it costs (all inside the timed call):
- rows that cp.async or TMA read must start 16-byte aligned: an operand whose row stride is
  not a multiple of 8 elements (or whose base is unaligned) is copied into padded rows;
  contiguous operands with K (and, for step 01, N) a multiple of 8 are used in place;
- steps 02-03 read B^T [N, K] (K-major, the layout their descriptors and TMA boxes
  describe), so the launcher transposes B: 2 * K * N * 2 bytes of extra traffic per call
  (measured on the H200: 124 us of step 03's 336 us at 4096^3). From step 04 on, the kernels
  read B [K, N] as stored (wgmma's transpose bit, MN-major descriptors): no copy.
- steps that store C by TMA (08, 10, 11) need C's rows 16-byte aligned too: an output whose
  row stride is not a multiple of 8 elements is computed into padded rows, then copied. TMA
  clips its stores at 16 bytes, so when N is not a multiple of 8 the tiles at the right edge
  are stored from registers (`exact_store_columns`): nothing past column N is written.
- persistent cluster steps (07+) size their grid to the clusters that fit at once
  (cuOccupancyMaxActiveClusters, asked once per process).
All of that is done once per (step, shapes, strides, pointers) and kept as a prepared launch
(runtime/cuda/prepared.py); a repeated call on the caller's own operands costs a lookup and
one cuLaunchKernel. Calls that need a padded or transposed copy prepare afresh every time.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.ladders.hgemm.steps import (
    CHECK_SHAPES,
    DEFAULT_BENCHMARK_STEPS,
    STEPS,
    STREAM_K_SLOT_BYTES,
    Step,
    get_step,
    stream_k_shares,
    stream_k_slots,
)
from kernelab.ladders.provider import StepBuilds, ladder_implementations
from kernelab.runtime.cuda.prepared import PlanCache, current_stream_handle
from kernelab.spec.registry import Implementation

__all__ = [
    "CHECK_SHAPES",
    "DEFAULT_BENCHMARK_STEPS",
    "STEPS",
    "Step",
    "build_step",
    "exact_store_columns",
    "get_step",
    "hgemm",
    "implementations",
    "output_map_param",
    "persistent_launch",
    "tma_step_params",
]

SOURCE_DIR = "ladders/hgemm"  # relative to the kernelab package, where build.source_path looks
ARCH = "sm_90a"
ROW_ALIGN = 8  # elements: 16 bytes of bf16

_builds = StepBuilds(SOURCE_DIR, arch=ARCH)


def build_step(step: Step):
    """Compile one step for sm_90a; cached on disk and, for the process, in memory."""
    return _builds.get(step)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _check_operand(t, name: str):
    import torch

    if t.dim() != 2:
        raise KernelabError(f"hgemm: {name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype != torch.bfloat16:
        raise KernelabError(f"hgemm: {name} must be bfloat16, got {t.dtype}")
    if not t.is_cuda:
        raise KernelabError(f"hgemm: {name} must be a CUDA tensor")


def aligned_rows(t):
    """(tensor, row stride) with unit column stride, a 16-byte aligned base and a row stride
    that is a multiple of 8 elements, so every row starts 16-byte aligned: `t` itself when it
    already is, else a copy into padded rows (the padding is never read)."""
    import torch

    rows, cols = t.shape
    ld = t.stride(0) if rows > 1 else round_up(cols, ROW_ALIGN)
    if (cols <= 1 or t.stride(1) == 1) and ld % ROW_ALIGN == 0 and t.data_ptr() % 16 == 0:
        if ld >= cols:
            return t, ld
    ld = round_up(cols, ROW_ALIGN)
    padded = torch.empty((rows, ld), dtype=t.dtype, device=t.device)
    padded[:, :cols].copy_(t)
    return padded[:, :cols], ld


def transposed_rows(b):
    """B[K, N] as B^T[N, K] with aligned rows of stride round_up(K, 8): one read and one
    write of K * N bf16 (the transpose is the copy)."""
    import torch

    k, n = b.shape
    ld = round_up(k, ROW_ALIGN)
    bt = torch.empty((n, ld), dtype=b.dtype, device=b.device)
    bt[:, :k].copy_(b.t())
    return bt[:, :k], ld


def tensor_map_params(step: Step, a, lda: int, b, ldb: int):
    """The two CUtensorMap kernel parameters of a TMA step: A [M, K] and the B operand as the
    step reads it (B^T [N, K] for "nk", B [K, N] for "kn"), with the step's boxes and the
    128-byte swizzle."""
    from kernelab.ladders.hgemm import tma

    if step.tma_boxes is None:
        raise KernelabError(f"{step.name} does not read its operands through TMA")
    maps = []
    for t, ld, (box_rows, box_cols) in zip((a, b), (lda, ldb), step.tma_boxes, strict=True):
        rows, cols = t.shape
        tiled = tma.tiled_map_2d(t.data_ptr(), rows, cols, ld, box_rows=box_rows, box_cols=box_cols)
        maps.append(tma.TensorMapParam.from_encoded(tma.encode(tiled)))
    return maps


def exact_store_columns(n: int) -> int:
    """How many leading columns of C a TMA store may cover without writing past column n.

    TMA stores clip a row at 16-byte granularity, not per element (measured on the H200:
    step 08 wrote the padding of a 131-column view whose row stride was 136; reported for
    Triton's descriptor stores on H100, triton-lang/triton#11583). C's rows start 16-byte
    aligned, so that is n when n is a multiple of 8 bf16, else n rounded down to one; the
    kernels store a tile that reaches past it from registers."""
    return n - n % ROW_ALIGN


def tma_step_params(
    map_a, map_b, m: int, n: int, k: int, c_ptr: int, ldc: int, *, map_c=None, workspace=None
) -> list:
    """A TMA step's kernel arguments as ctypes values, in the kernels' order and C types:
    (CUtensorMap, CUtensorMap, int M, int N, int K, bf16 *C, int ldc), or, for a step that
    stores C by TMA (`map_c` given), (CUtensorMap A, B, C, int M, int N, int K, bf16 *C,
    int ldc, int exact_cols): C and ldc for the tiles TMA cannot store exactly. A stream-K
    step (`workspace` given: the addresses of its partial sums and flags) adds
    (float *partials, int *flags)."""
    import ctypes

    sizes = [ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k)]
    output = [ctypes.c_uint64(c_ptr), ctypes.c_int32(ldc)]
    if map_c is not None:
        params = [map_a, map_b, map_c, *sizes, *output, ctypes.c_int32(exact_store_columns(n))]
    else:
        params = [map_a, map_b, *sizes, *output]
    if workspace is not None:
        partials, flags = workspace
        params += [ctypes.c_uint64(partials), ctypes.c_uint64(flags)]
    return params


# Stream-K workspaces per (device index, stream handle): the partial sums and the flags of
# step 19 (steps.stream_k_slots), sized for a grid of every SM. One per stream, so launches
# that may run at once never share one; the flags are zeroed once, here, and every launch
# leaves them zero. A workspace is never freed: a prepared launch keeps its address.
_stream_k_workspaces: dict[tuple[int, int], tuple] = {}


def stream_k_workspace(device, stream: int, slots: int) -> tuple[int, int] | None:
    """(partials address, flags address) with room for `slots` slots on `device`, `stream`;
    None inside CUDA-graph capture when the stream has none yet (its zeroing would only run at
    replay), and the kernel then runs every tile whole."""
    import torch

    from kernelab.runtime.tuner import sm_count

    key = (device.index or 0, stream)
    kept = _stream_k_workspaces.get(key)
    if kept is None or kept[1].numel() < slots:
        if torch.cuda.is_current_stream_capturing():
            return None
        slots = max(slots, stream_k_slots(sm_count(device)))
        partials = torch.empty(slots * STREAM_K_SLOT_BYTES // 4, dtype=torch.float32,
                               device=device)  # fmt: skip
        flags = torch.zeros(slots, dtype=torch.int32, device=device)
        kept = (partials, flags)
        _stream_k_workspaces[key] = kept
        _every_workspace.append(kept)  # never freed (see above)
    return kept[0].data_ptr(), kept[1].data_ptr()


_every_workspace: list[tuple] = []


def output_map_param(step: Step, out, ldc: int):
    """The CUtensorMap kernel parameter of C for a TMA-store step (its store box, the
    128-byte swizzle the kernel writes its staging buffer in)."""
    from kernelab.ladders.hgemm import tma

    box_rows, box_cols = step.tma_store_box
    rows, cols = out.shape
    tiled = tma.tiled_map_2d(out.data_ptr(), rows, cols, ldc, box_rows=box_rows, box_cols=box_cols)
    return tma.TensorMapParam.from_encoded(tma.encode(tiled))


def persistent_launch(step: Step, built, m: int, n: int, k: int, device):
    """The launch of a persistent step: as many blocks as can be resident at once."""
    from kernelab.runtime.tuner import sm_count

    sms = sm_count(device)
    if step.cluster > 1:
        from kernelab.ladders.hgemm.tma import co_resident_clusters
        from kernelab.output import note

        probe = step.launch(m, n, k, sms=sms)
        try:
            clusters = co_resident_clusters(built.cubin, step.kernel, built.arch, probe)
        except KernelabError as exc:  # still correct, maybe slower: say so and go on
            clusters = sms // step.cluster
            note(f"{step.name}: {exc}; assuming {clusters} co-resident clusters")
        sms = step.cluster * clusters
    return step.launch(m, n, k, sms=sms)


def hgemm(step: Step | int | str, a, b, *, out=None):
    """out = a @ b with one ladder step; a new bf16 tensor when out is None.

    a [M, K] and b [K, N] are bf16 CUDA tensors (any strides; see the module docstring for
    the copies some layouts cost). `out`, when given, must be a bf16 [M, N] tensor with unit
    column stride; it is overwritten.
    """
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    _check_operand(a, "a")
    _check_operand(b, "b")
    m, k = a.shape
    k_b, n = b.shape
    if k != k_b:
        raise KernelabError(f"hgemm: inner dimensions differ: a is {m}x{k}, b is {k_b}x{n}")
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    elif (
        tuple(out.shape) != (m, n) or out.dtype != torch.bfloat16 or (n > 1 and out.stride(1) != 1)
    ):
        raise KernelabError(f"hgemm: out must be a bfloat16 {m}x{n} tensor with unit column stride")
    if m == 0 or n == 0:
        return out
    if k == 0:  # an empty sum
        return out.zero_()
    if out.data_ptr() % 4:  # the epilogue stores bf16 pairs as 4-byte words
        return out.copy_(hgemm(step, a, b))
    ldc = out.stride(0) if m > 1 else round_up(n, ROW_ALIGN)  # one row: any stride will do
    if step.tma_store_box is not None and (ldc % ROW_ALIGN or out.data_ptr() % 16):
        padded = torch.empty((m, round_up(n, ROW_ALIGN)), dtype=out.dtype, device=out.device)
        return out.copy_(hgemm(step, a, b, out=padded[:, :n]))

    a_rows, lda = aligned_rows(a)
    b_rows, ldb = aligned_rows(b) if step.b_layout == "kn" else transposed_rows(b)
    # Only a launch whose pointers are the caller's own can be kept: a padded or transposed
    # copy is new memory with new contents every call.
    stream = current_stream_handle(a.device.index if a.device.index is not None else 0)
    key = None
    if a_rows is a and b_rows is b:
        # a stream-K launch carries its stream's workspace, so it is kept per stream
        key = (step.number, a.device.index, m, n, k, a.data_ptr(), lda, b.data_ptr(), ldb,
               out.data_ptr(), ldc, stream if step.stream_k else None)  # fmt: skip
    plan = _plans.get(key) if key is not None else None
    if plan is None:
        plan = _prepare(step, a_rows, lda, b_rows, ldb, out, ldc, m, n, k, stream)
        # a stream-K launch prepared inside capture may lack its workspace: not kept
        if key is not None and not (step.stream_k and torch.cuda.is_current_stream_capturing()):
            _plans.put(key, plan)
    plan(stream)
    return out


_plans = PlanCache()


def _prepare(
    step: Step, a_rows, lda: int, b_rows, ldb: int, out, ldc: int, m: int, n: int, k: int,
    stream: int = 0,
):  # fmt: skip
    """The launch of `step` on these operands (on `stream`, for a stream-K step's workspace):
    geometry, TMA descriptors and argument bytes."""
    import ctypes

    from kernelab.runtime.cuda.prepared import prepare

    built = build_step(step)
    if step.persistent:
        config = persistent_launch(step, built, m, n, k, a_rows.device)
    else:
        config = step.launch(m, n, k)
    if step.whole_tile_step is not None and not stream_k_shares(
        m, n, k, clusters=config.grid[0] // step.cluster
    ):
        # nothing to share out: the twin's kernel, without the split's setup
        step = get_step(step.whole_tile_step)
        built = build_step(step)
        config = persistent_launch(step, built, m, n, k, a_rows.device)
    if step.uses_tma:
        map_a, map_b = tensor_map_params(step, a_rows, lda, b_rows, ldb)
        map_c = output_map_param(step, out, ldc) if step.tma_store_box is not None else None
        workspace = None
        if step.stream_k:
            slots = stream_k_slots(config.grid[0])
            # None: (0, 0), the kernel's whole-tile schedule (see stream_k_workspace)
            workspace = stream_k_workspace(a_rows.device, stream, slots) or (0, 0)
        params = tma_step_params(map_a, map_b, m, n, k, out.data_ptr(), ldc, map_c=map_c,
                                 workspace=workspace)  # fmt: skip
        return prepare(built.cubin, step.kernel, built.arch, config, params)
    params = [
        ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k),
        ctypes.c_uint64(a_rows.data_ptr()), ctypes.c_int32(lda),
        ctypes.c_uint64(b_rows.data_ptr()), ctypes.c_int32(ldb),
        ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(ldc),
    ]  # fmt: skip
    return prepare(built.cubin, step.kernel, built.arch, config, params)


def implementations():
    return ladder_implementations(
        STEPS,
        run_step=hgemm,
        build_step=build_step,
        prefix="hgemm",
        dtypes=("bf16",),
        label="Hopper bf16 GEMM",
    ) + [_cute_gemm()]


def _build_cute_gemm():
    from kernelab.ladders.hgemm import cute_dsl
    from kernelab.runtime.cute_dsl import require

    require()  # one line without the extra or a Hopper GPU, before cutlass is imported
    return cute_dsl.gemm


def _cute_gemm():
    """The CuTe-DSL column of the ladder: the same algorithm written with CuTe layouts."""
    return Implementation(
        name="cute.gemm",
        op="gemm",
        build=_build_cute_gemm,
        dtypes=("bf16",),
        description="CuTe-DSL Hopper GEMM: TMA + wgmma, warp-specialised, mbarrier ring, persistent",
        metadata={
            "technique": "TMA + wgmma m64n256k16, producer/consumer warpgroups, setmaxnreg",
            "accumulate": "fp32",
            "language": "cute-dsl",
        },
    )
