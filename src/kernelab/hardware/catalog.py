"""The GPU catalog: one GPUSpec per chip, every number with its source.

Sources are named in a short form; SOURCES below expands each key to the document.
"""

from __future__ import annotations

from kernelab.errors import unknown
from kernelab.hardware.specs import GPUSpec

SOURCES = {
    "h100-datasheet": "NVIDIA H100 Tensor Core GPU datasheet (2023), dense figures",
    "hopper-whitepaper": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)",
    "cuda-guide-cc": "CUDA C++ Programming Guide, table of technical specifications per compute capability",
}

_H100_SXM = GPUSpec(
    id="h100-sxm",
    name="NVIDIA H100 SXM5 80GB",
    vendor="nvidia",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1980,
    memory_gb=80,
    memory_bandwidth_gbps=3350,
    l2_kib=50 * 1024,
    smem_per_sm_kib=228,
    smem_per_block_kib=227,
    l1_per_sm_kib=256,
    registers_per_sm=65536,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    warp_size=32,
    peak_tflops={
        "fp64": 67.0,
        "fp32": 67.0,
        "tf32": 494.7,
        "bf16": 989.4,
        "fp16": 989.4,
        "fp8": 1978.9,
        "int8": 1978.9,
    },
    tdp_w=700,
    device_names=("H100 80GB HBM3", "H100 SXM"),
    sources={
        "sm_count": "hopper-whitepaper",
        "boost_clock_mhz": "hopper-whitepaper",
        "memory_gb": "h100-datasheet",
        "memory_bandwidth_gbps": "h100-datasheet",
        "l2_kib": "hopper-whitepaper",
        "smem_per_sm_kib": "cuda-guide-cc",
        "smem_per_block_kib": "cuda-guide-cc",
        "l1_per_sm_kib": "hopper-whitepaper",
        "registers_per_sm": "cuda-guide-cc",
        "max_threads_per_sm": "cuda-guide-cc",
        "max_blocks_per_sm": "cuda-guide-cc",
        "warp_size": "cuda-guide-cc",
        "peak_tflops.fp64": "h100-datasheet (FP64 Tensor Core)",
        "peak_tflops.fp32": "h100-datasheet",
        "peak_tflops.tf32": "h100-datasheet (989 with sparsity; dense is half)",
        "peak_tflops.bf16": "h100-datasheet (1979 with sparsity; dense is half)",
        "peak_tflops.fp16": "h100-datasheet (1979 with sparsity; dense is half)",
        "peak_tflops.fp8": "h100-datasheet (3958 with sparsity; dense is half)",
        "peak_tflops.int8": "h100-datasheet (3958 TOPS with sparsity; dense is half)",
        "tdp_w": "h100-datasheet",
    },
)

CATALOG: dict[str, GPUSpec] = {spec.id: spec for spec in (_H100_SXM,)}


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry for an id (case-insensitive); UnknownNameError with hints otherwise."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in CATALOG:
        return CATALOG[key]
    raise unknown("GPU", name, CATALOG)
