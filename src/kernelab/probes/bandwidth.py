"""Per-level bandwidth on the current GPU: each launcher returns the bytes one call moves and
the harness Timing of that call (kernelab.harness.timing.benchmark).

  smem      smem_read: every SM reads its shared memory with conflict-free LDS.128  (hot)
  l2        l2_read: a buffer that fits the L2, read `repeats` times through L2 only (hot)
  hbm_read  hbm_read: one pass over >= 4 GiB                                        (cold)
  hbm_copy  hbm_copy: read one buffer, write another (read + write counted)         (cold)
            one contiguous tile per block, the grid covering the buffer once
  h2d, d2h  torch copies between pinned host memory and the device                  (hot)
Modes: hot where the data must stay where it is (shared memory, the warm L2); cold (L2
flushed between calls) for HBM, as kernelab's copy ceiling is timed.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.probes.chase import GiB, MiB

SOURCE = "probes/bandwidth.cu"
SMEM_CHUNKS = 4  # kSmemChunks in bandwidth.cu
SMEM_SHIFTS = 8  # kSmemShifts in bandwidth.cu
SMEM_THREADS = 512
SMEM_BLOCKS_PER_SM = 4  # 4 x 512 threads: a full SM; 4 x 36.5 KiB of shared memory fits
SMEM_ITERATIONS = 1024  # ~0.5 ms per call at ~33 TB/s
STREAM_THREADS = 512
STREAM_BLOCKS_PER_SM = 4
COPY_THREADS = 128
COPY_UNROLL = 2  # kCopyUnroll in bandwidth.cu
HBM_READ_BYTES = 4 * GiB
HOST_LINK_BYTES = 256 * MiB


def _built():
    from kernelab.runtime.cuda.build import build

    return build(SOURCE)


def _sm_count(torch) -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def smem_read(*, max_time_s: float):
    """(bytes per call, Timing) of the shared-memory read kernel over every SM."""
    import numpy as np
    import torch

    from kernelab.harness.timing import benchmark
    from kernelab.runtime.cuda.launch import Launch, launch

    built = _built()
    blocks = _sm_count(torch) * SMEM_BLOCKS_PER_SM
    chunks = SMEM_CHUNKS * SMEM_THREADS + (SMEM_SHIFTS - 1) * 32
    config = Launch((blocks, 1, 1), (SMEM_THREADS, 1, 1), shared_bytes=chunks * 16)
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def call():
        launch(
            built.cubin, "smem_read", built.arch, config, np.int32(SMEM_ITERATIONS), sink.data_ptr()
        )

    # Bytes: every thread reads SMEM_CHUNKS 16-byte chunks per iteration.
    nbytes = blocks * SMEM_THREADS * SMEM_ITERATIONS * SMEM_CHUNKS * 16
    return nbytes, benchmark(call, mode="hot", max_time_s=max_time_s)


def _stream_config(torch, n_vectors: int):
    from kernelab.runtime.cuda.launch import Launch

    blocks = min(_sm_count(torch) * STREAM_BLOCKS_PER_SM, max(1, n_vectors // STREAM_THREADS))
    return Launch((blocks, 1, 1), (STREAM_THREADS, 1, 1))


def _read_passes(kernel: str, nbytes: int, repeats: int, mode: str, max_time_s: float):
    import numpy as np
    import torch

    from kernelab.harness.timing import benchmark
    from kernelab.runtime.cuda.launch import launch

    built = _built()
    data = torch.ones(nbytes // 4, dtype=torch.int32, device="cuda")
    n_vectors = data.numel() // 4
    config = _stream_config(torch, n_vectors)
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def call():
        launch(
            built.cubin,
            kernel,
            built.arch,
            config,
            data.data_ptr(),
            np.int64(n_vectors),
            np.int32(repeats),
            sink.data_ptr(),
        )

    # Bytes: the buffer, `repeats` times.
    return n_vectors * 16 * repeats, benchmark(call, mode=mode, max_time_s=max_time_s)


def l2_read(working_set_bytes: int, *, repeats: int, max_time_s: float):
    """(bytes per call, Timing) of `repeats` passes over `working_set_bytes` through L2 only;
    hot, so the warm-up leaves the buffer in the L2."""
    return _read_passes("l2_read", working_set_bytes, repeats, "hot", max_time_s)


def hbm_read(nbytes: int, *, max_time_s: float):
    """(bytes per call, Timing) of one read-only pass over `nbytes`, L2 flushed before each."""
    return _read_passes("hbm_read", nbytes, 1, "cold", max_time_s)


def hbm_copy(bytes_per_buffer: int, *, max_time_s: float):
    """(bytes per call, Timing) of copying one buffer of `bytes_per_buffer` into another."""
    import numpy as np
    import torch

    from kernelab.harness.timing import benchmark
    from kernelab.runtime.cuda.launch import Launch, launch

    built = _built()
    src = torch.empty(bytes_per_buffer // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.zeros_like(src)
    n_vectors = src.numel() // 4
    # One contiguous tile of COPY_UNROLL * COPY_THREADS vectors per block, the grid covering
    # the buffer once (why this shape: bandwidth.cu).
    tiles = -(-n_vectors // (COPY_THREADS * COPY_UNROLL))
    config = Launch((tiles, 1, 1), (COPY_THREADS, 1, 1))

    def call():
        launch(
            built.cubin,
            "hbm_copy",
            built.arch,
            config,
            src.data_ptr(),
            dst.data_ptr(),
            np.int64(n_vectors),
        )

    call()  # checked before it is timed: a copy that drops a tile would look fast
    if not torch.equal(dst, src):
        raise KernelabError("hbm_copy kernel copied wrongly; its bandwidth would mean nothing")
    # Bytes: every byte of src read once and every byte of dst written once.
    return 2 * n_vectors * 16, benchmark(call, mode="cold", max_time_s=max_time_s)


def host_link(direction: str, nbytes: int, *, max_time_s: float):
    """(bytes per call, Timing) of one copy of `nbytes` between pinned host memory and the
    device: direction "h2d" or "d2h"."""
    import torch

    from kernelab.errors import unknown
    from kernelab.harness.timing import benchmark

    if direction not in ("h2d", "d2h"):
        raise unknown("copy direction", direction, ("h2d", "d2h"))
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    if direction == "h2d":

        def call():
            device.copy_(host, non_blocking=True)
    else:

        def call():
            host.copy_(device, non_blocking=True)

    return nbytes, benchmark(call, mode="hot", max_time_s=max_time_s)
