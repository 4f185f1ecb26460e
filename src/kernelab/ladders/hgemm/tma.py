"""TMA tensor maps for the ladder's 2-D bf16 operands, and a launch that can pass them.

A TMA load reads a CUtensorMap: a 128-byte opaque descriptor of a global tensor (address,
sizes, strides) and of the box one instruction copies (its size and shared-memory swizzle).
The host builds it with the driver's cuTensorMapEncodeTiled; the kernel takes it by value as
a `const __grid_constant__ CUtensorMap` parameter. cuda.core's launch does not accept such a
parameter in every release (1.2.0 on the H200 image), so the ladder calls cuLaunchKernel
with an argument array (runtime/cuda/prepared.py).

`tiled_map_2d` checks every rule the driver documents for the encode call, so a matrix TMA
cannot describe (a row stride that is not a multiple of 16 bytes, an unaligned base) is a
one-line error here instead of CUDA_ERROR_INVALID_VALUE later; the launcher pads such rows.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from kernelab.errors import KernelabError

TENSOR_MAP_BYTES = 128
MAX_BOX = 256  # elements per box dimension
SWIZZLE_SPANS = (0, 32, 64, 128)  # bytes; 0 = no swizzle


@dataclass(frozen=True)
class TiledMap:
    """The arguments of cuTensorMapEncodeTiled for a row-major rows x cols matrix.

    Dimensions run innermost first, as the driver and the PTX coordinates want them:
    global_dim = (cols, rows), global_strides = (row stride in bytes,),
    box_dim = (box_cols, box_rows).
    """

    address: int
    global_dim: tuple[int, int]
    global_strides: tuple[int]
    box_dim: tuple[int, int]
    element_strides: tuple[int, int]
    element_bytes: int
    swizzle_bytes: int

    @property
    def box_bytes(self) -> int:
        """What one load delivers (and an mbarrier must expect), edges included."""
        return self.box_dim[0] * self.box_dim[1] * self.element_bytes


def tiled_map_2d(
    address: int,
    rows: int,
    cols: int,
    row_stride: int,
    *,
    box_rows: int,
    box_cols: int,
    element_bytes: int = 2,
    swizzle_bytes: int = 128,
) -> TiledMap:
    """Check and assemble the tensor map of a row-major matrix (row_stride in elements)."""
    if rows < 1 or cols < 1:
        raise KernelabError(f"TMA: the matrix must be at least 1 x 1, got {rows} x {cols}")
    if row_stride < cols:
        raise KernelabError(f"TMA: row stride {row_stride} is shorter than a row of {cols}")
    if address % 16:
        raise KernelabError(f"TMA: base address {address:#x} is not 16-byte aligned")
    stride_bytes = row_stride * element_bytes
    if stride_bytes % 16:
        raise KernelabError(
            f"TMA: a row stride of {stride_bytes} bytes is not a multiple of 16; pad the rows"
        )
    if stride_bytes >= 1 << 40 or max(rows, cols) > 1 << 32:
        raise KernelabError("TMA: the matrix is too large for one tensor map")
    for name, box in (("box_rows", box_rows), ("box_cols", box_cols)):
        if not 1 <= box <= MAX_BOX:
            raise KernelabError(f"TMA: {name} = {box} is outside 1..{MAX_BOX}")
    inner_bytes = box_cols * element_bytes
    if inner_bytes % 16:
        raise KernelabError(f"TMA: the box's inner extent ({inner_bytes} bytes) is not 16k bytes")
    if swizzle_bytes not in SWIZZLE_SPANS:
        raise KernelabError(f"TMA: swizzle must be one of {SWIZZLE_SPANS} bytes")
    if swizzle_bytes and inner_bytes > swizzle_bytes:
        raise KernelabError(
            f"TMA: a {swizzle_bytes}-byte swizzle needs a box at most {swizzle_bytes} bytes wide"
        )
    return TiledMap(
        address=address,
        global_dim=(cols, rows),
        global_strides=(stride_bytes,),
        box_dim=(box_cols, box_rows),
        element_strides=(1, 1),
        element_bytes=element_bytes,
        swizzle_bytes=swizzle_bytes,
    )


def encode(tiled: TiledMap) -> bytes:
    """The 128-byte CUtensorMap for `tiled` (bf16 elements; zeros outside the matrix)."""
    from cuda.bindings import driver

    if tiled.element_bytes != 2:
        raise KernelabError("TMA: only 2-byte (bf16) elements are wired up")
    swizzle = {
        0: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        32: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        64: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        128: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }[tiled.swizzle_bytes]
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        2,
        tiled.address,
        [driver.cuuint64_t(d) for d in tiled.global_dim],
        [driver.cuuint64_t(s) for s in tiled.global_strides],
        [driver.cuuint32_t(b) for b in tiled.box_dim],
        [driver.cuuint32_t(e) for e in tiled.element_strides],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        # NONE fills out-of-bounds elements with zeros (NAN_REQUEST_ZERO_FMA would use NaN).
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise KernelabError(f"cuTensorMapEncodeTiled failed: {err.name} for {tiled}")
    return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)


class TensorMapParam(ctypes.Structure):
    """A CUtensorMap passed by value: 128 bytes, 64-byte aligned in the parameter space."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]

    @classmethod
    def from_encoded(cls, data: bytes) -> TensorMapParam:
        if len(data) != TENSOR_MAP_BYTES:
            raise KernelabError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(data)}")
        return cls.from_buffer_copy(data)


def launch_with_params(cubin, kernel_name: str, arch: str, config, params: list) -> None:
    """Launch `kernel_name` on torch's current stream with ctypes-typed `params` (kept for
    one-off launches; the ladder keeps its launches prepared, runtime/cuda/prepared.py)."""
    import torch

    from kernelab.runtime.cuda.prepared import current_stream_handle, prepare

    prepare(cubin, kernel_name, arch, config, params)(
        current_stream_handle(torch.cuda.current_device())
    )


_co_resident: dict[tuple, int] = {}


def co_resident_clusters(cubin, kernel_name: str, arch: str, config) -> int:
    """How many clusters of this kernel (its compile-time cluster size, `config`'s block and
    shared memory) fit on the GPU at once, from cuOccupancyMaxActiveClusters. A persistent
    cluster grid must not exceed it: clusters beyond it would only start when others end.
    Clusters are placed inside one GPC, so this can be less than SMs / cluster size."""
    import torch
    from cuda.bindings import driver

    from kernelab.runtime.cuda import launch as cuda_launch

    key = (str(cubin), kernel_name, config.block, config.shared_bytes)
    if key in _co_resident:
        return _co_resident[key]
    kernel = cuda_launch.load(cubin, kernel_name, arch=arch)
    cuda_launch._raise_smem_limit(kernel, (str(cubin), kernel_name), config.shared_bytes)
    function = kernel.handle
    if not isinstance(function, driver.CUfunction):  # a library CUkernel: this context's one
        err, function = driver.cuKernelGetFunction(function)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise KernelabError(f"cuKernelGetFunction({kernel_name}) failed: {err.name}")
    launch_config = driver.CUlaunchConfig()
    launch_config.gridDimX, launch_config.gridDimY, launch_config.gridDimZ = config.grid
    launch_config.blockDimX, launch_config.blockDimY, launch_config.blockDimZ = config.block
    launch_config.sharedMemBytes = config.shared_bytes
    launch_config.hStream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    launch_config.numAttrs = 0
    err, clusters = driver.cuOccupancyMaxActiveClusters(function, launch_config)
    if err != driver.CUresult.CUDA_SUCCESS or clusters < 1:
        raise KernelabError(
            f"cuOccupancyMaxActiveClusters({kernel_name}) failed: {getattr(err, 'name', err)}, "
            f"{clusters} clusters"
        )
    _co_resident[key] = int(clusters)
    return _co_resident[key]
