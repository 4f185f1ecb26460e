"""The GPU catalog: one GPUSpec per chip, every number with its source.

A source is written "<key>" or "<key> (<note>)"; SOURCES expands the key to the document.
Peak rates are dense. Datasheets print tensor rates with 2:4 structured sparsity (marked
with an asterisk); those are halved here and the note says so. Board-level figures (HGX,
DGX) are divided by the number of GPUs on the board.
"""

from __future__ import annotations

from kernelab.errors import unknown
from kernelab.hardware.specs import GPUSpec

SOURCES = {
    "ampere-whitepaper": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)",
    "a100-datasheet": "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM and PCIe columns",
    "hopper-whitepaper": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)",
    "h100-datasheet": "NVIDIA H100 Tensor Core GPU datasheet (2023): SXM, PCIe and NVL columns",
    "h200-datasheet": "NVIDIA H200 Tensor Core GPU datasheet (2024): SXM and NVL columns",
    "gh200-datasheet": "NVIDIA GH200 Grace Hopper Superchip datasheet (2023), HBM3 96 GB model",
    "hgx-b200-datasheet": "NVIDIA HGX B200 datasheet (2024): totals for a board of 8 GPUs",
    "dgx-b200-datasheet": "NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB HBM3e in total",
    "chipsandcheese-b200": (
        "Chips and Cheese, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling' (2025): "
        "148 SMs, 256 KB L1/shared per SM, measured on a B200"
    ),
    "ada-whitepaper": "NVIDIA Ada GPU Architecture whitepaper (2022), appendix tables",
    "l4-datasheet": "NVIDIA L4 Tensor Core GPU datasheet (2023)",
    "l40s-datasheet": "NVIDIA L40S GPU datasheet (2023)",
    "rtx-5090-specs": (
        "NVIDIA GeForce RTX 5090 product specifications and RTX Blackwell GPU "
        "Architecture whitepaper (2025)"
    ),
    "mi300x-datasheet": "AMD Instinct MI300X accelerator data sheet (2023)",
    "mi325x-datasheet": "AMD Instinct MI325X accelerator data sheet (2024)",
    "cdna3-whitepaper": "AMD CDNA 3 Instruction Set Architecture guide and CDNA 3 whitepaper (2023)",
    "apple-m2-max": (
        "Apple newsroom, MacBook Pro with M2 Pro and M2 Max (January 2023): 38-core GPU, "
        "13.6 TFLOPS, 400GB/s, up to 96GB unified memory"
    ),
    "apple-m3-max": (
        "Apple newsroom, M3, M3 Pro and M3 Max (October 2023): 40-core GPU, 400GB/s, "
        "up to 128GB unified memory; no TFLOPS figure published"
    ),
    "metal-feature-tables": "Apple Metal Feature Set Tables (threadgroup memory, SIMD-group width)",
    "metal-benchmarks": (
        "Philip Turner, metal-benchmarks (GitHub): third-party microbenchmarks of Apple GPU "
        "cores; estimates, not Apple's figures"
    ),
    "cuda-guide-cc": (
        "CUDA C++ Programming Guide, table of technical specifications per compute capability"
    ),
    "device-reported": "what the CUDA driver reports on a real card (cudaDeviceProp), not in a datasheet",
    "derived": "computed from other sourced figures; the note gives the formula",
    "estimate": "not published by the vendor; the note says what the estimate rests on",
    "unpublished": "not published by the vendor and no sound estimate: the value is NaN (unknown)",
}

# Per-SM limits fixed by the compute capability (CUDA C++ Programming Guide). The shared
# memory pair is (most an SM can hand out, most one block can opt in to) in KiB.
_CC_LIMITS: dict[str, dict[str, int]] = {
    "8.0": dict(
        smem_per_sm_kib=164, smem_per_block_kib=163, max_threads_per_sm=2048, max_blocks_per_sm=32
    ),
    "8.9": dict(
        smem_per_sm_kib=100, smem_per_block_kib=99, max_threads_per_sm=1536, max_blocks_per_sm=24
    ),
    "9.0": dict(
        smem_per_sm_kib=228, smem_per_block_kib=227, max_threads_per_sm=2048, max_blocks_per_sm=32
    ),
    "10.0": dict(
        smem_per_sm_kib=228, smem_per_block_kib=227, max_threads_per_sm=2048, max_blocks_per_sm=32
    ),
    "12.0": dict(
        smem_per_sm_kib=100, smem_per_block_kib=99, max_threads_per_sm=1536, max_blocks_per_sm=32
    ),
}


def _nvidia(*, compute_capability: str, sources: dict[str, str], **fields) -> GPUSpec:
    """An NVIDIA spec: the per-compute-capability limits come from the CUDA guide's table."""
    limits = dict(_CC_LIMITS[compute_capability], registers_per_sm=65536, warp_size=32)
    cited = {name: "cuda-guide-cc" for name in limits} | sources
    return GPUSpec(
        vendor="nvidia", compute_capability=compute_capability, sources=cited, **limits, **fields
    )


# --- Ampere (GA100, cc 8.0): 64 FP32 lanes per SM ----------------------------------------

_A100_RATES = {
    "fp64": 19.5,
    "fp32": 19.5,
    "tf32": 156.0,
    "bf16": 312.0,
    "fp16": 312.0,
    "int8": 624.0,
}
_A100_RATE_SOURCES = {
    "peak_tflops.fp64": "a100-datasheet (FP64 Tensor Core)",
    "peak_tflops.fp32": "a100-datasheet",
    "peak_tflops.tf32": "a100-datasheet (312* with sparsity; dense is half)",
    "peak_tflops.bf16": "a100-datasheet (624* with sparsity; dense is half)",
    "peak_tflops.fp16": "a100-datasheet (624* with sparsity; dense is half)",
    "peak_tflops.int8": "a100-datasheet (1,248* TOPS with sparsity; dense is half)",
}


def _a100(*, id, name, memory_gb, bandwidth, tdp_w, device_names, form) -> GPUSpec:
    return _nvidia(
        id=id,
        name=name,
        architecture="Ampere",
        compute_capability="8.0",
        sm_count=108,
        boost_clock_mhz=1410,
        memory_gb=memory_gb,
        memory_bandwidth_gbps=bandwidth,
        memory_type="HBM2e" if memory_gb == 80 else "HBM2",
        l2_kib=40 * 1024,
        l1_per_sm_kib=192,
        peak_tflops=_A100_RATES,
        tdp_w=tdp_w,
        device_names=device_names,
        sources={
            "sm_count": "ampere-whitepaper",
            "boost_clock_mhz": "ampere-whitepaper",
            "memory_gb": f"a100-datasheet ({form} column)",
            "memory_bandwidth_gbps": f"a100-datasheet ({form} column)",
            "l2_kib": "ampere-whitepaper",
            "l1_per_sm_kib": "ampere-whitepaper",
            "tdp_w": f"a100-datasheet ({form} column)",
            **_A100_RATE_SOURCES,
        },
    )


_A100_SXM = _a100(
    id="a100-sxm",
    name="NVIDIA A100 SXM4 80GB",
    memory_gb=80,
    bandwidth=2039,
    tdp_w=400,
    device_names=("A100-SXM4-80GB", "A100 SXM4", "A100"),
    form="80GB SXM",
)
_A100_SXM_40GB = _a100(
    id="a100-sxm-40gb",
    name="NVIDIA A100 SXM4 40GB",
    memory_gb=40,
    bandwidth=1555,
    tdp_w=400,
    device_names=("A100-SXM4-40GB",),
    form="40GB SXM",
)
_A100_PCIE = _a100(
    id="a100-pcie",
    name="NVIDIA A100 PCIe 80GB",
    memory_gb=80,
    bandwidth=1935,
    tdp_w=300,
    device_names=("A100 80GB PCIe", "A100 PCIe"),
    form="80GB PCIe",
)
_A100_PCIE_40GB = _a100(
    id="a100-pcie-40gb",
    name="NVIDIA A100 PCIe 40GB",
    memory_gb=40,
    bandwidth=1555,
    tdp_w=250,
    device_names=("A100-PCIE-40GB",),
    form="40GB PCIe",
)

# --- Hopper (GH100, cc 9.0): 128 FP32 lanes per SM ---------------------------------------

# The whitepaper's dense tensor rates for the SXM5 part at its 1,980 MHz boost clock.
_HOPPER_SXM_RATES = {
    "fp64": 67.0,
    "fp32": 67.0,
    "tf32": 494.7,
    "bf16": 989.4,
    "fp16": 989.4,
    "fp8": 1978.9,
    "int8": 1978.9,
}


# Table 3 of the Hopper whitepaper lists the boost clock for tensor-core work apart from the
# SIMT boost clock: the tensor rates are quoted at it (132 SMs x 4,096 dense bf16 FLOP/clk x
# 1.83 GHz = 989.4 TFLOP/s), the fp32 and fp64 rates at 1,980 MHz (132 x 256 x 1.98 = 66.9).
_TENSOR_DTYPES = ("tf32", "bf16", "fp16", "fp8", "int8")
_HOPPER_SXM_TENSOR_CLOCK_MHZ = 1830
_HOPPER_PCIE_TENSOR_CLOCK_MHZ = 1620
# No table for the NVL cards: their dense tensor rate over the Hopper SM's 4,096 bf16 FLOP/clk.
_HOPPER_NVL_TENSOR_CLOCK_MHZ = 1545


def _tensor_clocks(mhz: float) -> dict[str, float]:
    return {dtype: mhz for dtype in _TENSOR_DTYPES}


def _tensor_clock_sources(note: str) -> dict[str, str]:
    return {f"peak_clock_mhz.{dtype}": note for dtype in _TENSOR_DTYPES}


_HOPPER_SXM_TENSOR_CLOCK_SOURCES = _tensor_clock_sources(
    "hopper-whitepaper (table 3: H100 SXM5 boost clock for tensor work, 1,830 MHz; "
    "132 SMs x 4,096 bf16 FLOP/clk x 1.83 GHz = 989.4 TFLOP/s)"
)


def _hopper_sxm_rate_sources(doc: str) -> dict[str, str]:
    return {
        "peak_tflops.fp64": f"{doc} (FP64 Tensor Core)",
        "peak_tflops.fp32": doc,
        "peak_tflops.tf32": f"{doc} (989* with sparsity; dense is half)",
        "peak_tflops.bf16": f"{doc} (1,979* with sparsity; dense is half)",
        "peak_tflops.fp16": f"{doc} (1,979* with sparsity; dense is half)",
        "peak_tflops.fp8": f"{doc} (3,958* with sparsity; dense is half)",
        "peak_tflops.int8": f"{doc} (3,958* TOPS with sparsity; dense is half)",
    }


_H100_SXM = _nvidia(
    id="h100-sxm",
    name="NVIDIA H100 SXM5 80GB",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1980,
    memory_gb=80,
    memory_bandwidth_gbps=3350,
    memory_type="HBM3",
    l2_kib=50 * 1024,
    l1_per_sm_kib=256,
    peak_tflops=_HOPPER_SXM_RATES,
    peak_clock_mhz=_tensor_clocks(_HOPPER_SXM_TENSOR_CLOCK_MHZ),
    tdp_w=700,
    device_names=("H100 80GB HBM3", "H100 SXM5", "H100 SXM", "H100"),
    sources={
        "sm_count": "hopper-whitepaper",
        "boost_clock_mhz": "hopper-whitepaper (H100 SXM5 max boost)",
        "memory_gb": "h100-datasheet",
        "memory_bandwidth_gbps": "h100-datasheet",
        "l2_kib": "hopper-whitepaper",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "h100-datasheet (up to 700 W, configurable)",
        **_hopper_sxm_rate_sources("h100-datasheet"),
        **_HOPPER_SXM_TENSOR_CLOCK_SOURCES,
        "peak_tflops.tf32": "hopper-whitepaper (494.7 dense; the datasheet prints 989* sparse)",
        "peak_tflops.bf16": "hopper-whitepaper (989.4 dense; the datasheet prints 1,979* sparse)",
        "peak_tflops.fp16": "hopper-whitepaper (989.4 dense; the datasheet prints 1,979* sparse)",
        "peak_tflops.fp8": "hopper-whitepaper (1,978.9 dense; the datasheet prints 3,958* sparse)",
    },
)

_H100_PCIE = _nvidia(
    id="h100-pcie",
    name="NVIDIA H100 PCIe 80GB",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=114,
    boost_clock_mhz=1755,
    memory_gb=80,
    memory_bandwidth_gbps=2000,
    memory_type="HBM2e",
    l2_kib=50 * 1024,
    l1_per_sm_kib=256,
    peak_tflops={
        "fp64": 51.0,
        "fp32": 51.0,
        "tf32": 378.0,
        "bf16": 756.5,
        "fp16": 756.5,
        "fp8": 1513.0,
        "int8": 1513.0,
    },
    peak_clock_mhz=_tensor_clocks(_HOPPER_PCIE_TENSOR_CLOCK_MHZ),
    tdp_w=350,
    device_names=("H100 PCIe", "H100"),
    sources={
        "sm_count": "hopper-whitepaper (H100 PCIe: 114 SMs)",
        "boost_clock_mhz": "hopper-whitepaper (H100 PCIe boost)",
        "memory_gb": "h100-datasheet (PCIe column)",
        "memory_bandwidth_gbps": "h100-datasheet (PCIe column: 2 TB/s)",
        "l2_kib": "hopper-whitepaper",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "h100-datasheet (PCIe column: 300-350 W configurable)",
        "peak_tflops.fp64": "h100-datasheet (PCIe column, FP64 Tensor Core)",
        "peak_tflops.fp32": "h100-datasheet (PCIe column)",
        "peak_tflops.tf32": "h100-datasheet (PCIe column: 756* with sparsity; dense is half)",
        "peak_tflops.bf16": "h100-datasheet (PCIe column: 1,513* with sparsity; dense is half)",
        "peak_tflops.fp16": "h100-datasheet (PCIe column: 1,513* with sparsity; dense is half)",
        "peak_tflops.fp8": "h100-datasheet (PCIe column: 3,026* with sparsity; dense is half)",
        "peak_tflops.int8": "h100-datasheet (PCIe column: 3,026* TOPS with sparsity; dense is half)",
        **_tensor_clock_sources(
            "hopper-whitepaper (table 3: H100 PCIe boost clock for tensor work, 1,620 MHz; "
            "114 SMs x 4,096 bf16 FLOP/clk x 1.62 GHz = 756.5 TFLOP/s)"
        ),
    },
)

# The NVL cards (H100 NVL, H200 NVL) run the full 132-SM GH100 at a lower power limit.
_HOPPER_NVL_RATES = {
    "fp64": 60.0,
    "fp32": 60.0,
    "tf32": 417.5,
    "bf16": 835.5,
    "fp16": 835.5,
    "fp8": 1670.5,
    "int8": 1670.5,
}


_HOPPER_NVL_TENSOR_CLOCK_SOURCES = _tensor_clock_sources(
    "derived (835.5 TFLOP/s bf16 / (132 SMs x 4,096 FLOP/clk, hopper-whitepaper) = 1,545 MHz)"
)


def _hopper_nvl_rate_sources(doc: str) -> dict[str, str]:
    return {
        "peak_tflops.fp64": f"{doc} (NVL column, FP64 Tensor Core)",
        "peak_tflops.fp32": f"{doc} (NVL column)",
        "peak_tflops.tf32": f"{doc} (NVL column: 835* with sparsity; dense is half)",
        "peak_tflops.bf16": f"{doc} (NVL column: 1,671* with sparsity; dense is half)",
        "peak_tflops.fp16": f"{doc} (NVL column: 1,671* with sparsity; dense is half)",
        "peak_tflops.fp8": f"{doc} (NVL column: 3,341* with sparsity; dense is half)",
        "peak_tflops.int8": f"{doc} (NVL column: 3,341* TOPS with sparsity; dense is half)",
    }


_NVL_CLOCK_NOTE = (
    "estimate (third-party databases list 1,785 MHz; 132 SMs x 256 FLOP/clk x 1.785 GHz "
    "= 60.3 TFLOP/s matches the datasheet's 60 TFLOP/s fp32)"
)

_H100_NVL = _nvidia(
    id="h100-nvl",
    name="NVIDIA H100 NVL 94GB",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1785,
    memory_gb=94,
    memory_bandwidth_gbps=3900,
    memory_type="HBM3",
    l2_kib=50 * 1024,
    l1_per_sm_kib=256,
    peak_tflops=_HOPPER_NVL_RATES,
    peak_clock_mhz=_tensor_clocks(_HOPPER_NVL_TENSOR_CLOCK_MHZ),
    tdp_w=400,
    device_names=("H100 NVL",),
    sources={
        "sm_count": "hopper-whitepaper (full GH100 SXM configuration: 132 SMs)",
        "boost_clock_mhz": _NVL_CLOCK_NOTE,
        "memory_gb": "h100-datasheet (NVL column)",
        "memory_bandwidth_gbps": "h100-datasheet (NVL column: 3.9 TB/s)",
        "l2_kib": "hopper-whitepaper",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "h100-datasheet (NVL column: 350-400 W configurable)",
        **_hopper_nvl_rate_sources("h100-datasheet"),
        **_HOPPER_NVL_TENSOR_CLOCK_SOURCES,
    },
)

_H200 = _nvidia(
    id="h200",
    name="NVIDIA H200 SXM 141GB",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1980,
    memory_gb=141,
    memory_bandwidth_gbps=4800,
    memory_type="HBM3e",
    l2_kib=60 * 1024,
    l1_per_sm_kib=256,
    peak_tflops=_HOPPER_SXM_RATES,
    peak_clock_mhz=_tensor_clocks(_HOPPER_SXM_TENSOR_CLOCK_MHZ),
    tdp_w=700,
    device_names=("H200",),
    sources={
        "sm_count": "device-reported (132 SMs on an H200: torch.cuda.get_device_properties)",
        "boost_clock_mhz": "derived (same GH100 SXM part as the H100 SXM; hopper-whitepaper)",
        "memory_gb": "h200-datasheet",
        "memory_bandwidth_gbps": "h200-datasheet (4.8 TB/s)",
        "l2_kib": "device-reported (60 MiB on an H200: torch.cuda.get_device_properties)",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "h200-datasheet (up to 700 W, configurable)",
        **_hopper_sxm_rate_sources("h200-datasheet"),
        **_HOPPER_SXM_TENSOR_CLOCK_SOURCES,
    },
)

_H200_NVL = _nvidia(
    id="h200-nvl",
    name="NVIDIA H200 NVL 141GB",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1785,
    memory_gb=141,
    memory_bandwidth_gbps=4800,
    memory_type="HBM3e",
    l2_kib=60 * 1024,
    l1_per_sm_kib=256,
    peak_tflops=_HOPPER_NVL_RATES,
    peak_clock_mhz=_tensor_clocks(_HOPPER_NVL_TENSOR_CLOCK_MHZ),
    tdp_w=600,
    device_names=("H200 NVL",),
    sources={
        "sm_count": "estimate (the same GH100 configuration as the H200 SXM; 60 TFLOP/s fp32 fits 132 SMs)",
        "boost_clock_mhz": _NVL_CLOCK_NOTE,
        "memory_gb": "h200-datasheet (NVL column)",
        "memory_bandwidth_gbps": "h200-datasheet (NVL column: 4.8 TB/s)",
        "l2_kib": "estimate (as the H200 SXM reports: 60 MiB)",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "h200-datasheet (NVL column: up to 600 W)",
        **_hopper_nvl_rate_sources("h200-datasheet"),
        **_HOPPER_NVL_TENSOR_CLOCK_SOURCES,
    },
)

_GH200 = _nvidia(
    id="gh200",
    name="NVIDIA GH200 Grace Hopper (96GB HBM3)",
    architecture="Hopper",
    compute_capability="9.0",
    sm_count=132,
    boost_clock_mhz=1980,
    memory_gb=96,
    memory_bandwidth_gbps=4000,
    memory_type="HBM3",
    l2_kib=50 * 1024,
    l1_per_sm_kib=256,
    peak_tflops=_HOPPER_SXM_RATES,
    peak_clock_mhz=_tensor_clocks(_HOPPER_SXM_TENSOR_CLOCK_MHZ),
    tdp_w=1000,
    device_names=("GH200 480GB",),
    notes="The 144 GB HBM3e model (4.9 TB/s) reports another name and is not in the catalog.",
    sources={
        "sm_count": "gh200-datasheet (the H100 GPU of the superchip; hopper-whitepaper: 132 SMs)",
        "boost_clock_mhz": "derived (same rates as the H100 SXM, so the same 1,980 MHz boost)",
        "memory_gb": "gh200-datasheet (HBM3 model)",
        "memory_bandwidth_gbps": "gh200-datasheet (HBM3 model: 4 TB/s)",
        "l2_kib": "hopper-whitepaper",
        "l1_per_sm_kib": "hopper-whitepaper",
        "tdp_w": "gh200-datasheet (450-1000 W configurable, for CPU + GPU + memory together)",
        **_hopper_sxm_rate_sources("gh200-datasheet"),
        **_HOPPER_SXM_TENSOR_CLOCK_SOURCES,
    },
)

# --- Blackwell (cc 10.0 datacenter, 12.0 GeForce) -------------------------------------------

_B200 = _nvidia(
    id="b200",
    name="NVIDIA B200 (HGX, 1000 W)",
    architecture="Blackwell",
    compute_capability="10.0",
    sm_count=148,
    boost_clock_mhz=1980,
    memory_gb=180,
    memory_bandwidth_gbps=8000,
    memory_type="HBM3e",
    l2_kib=126 * 1024,
    l1_per_sm_kib=256,
    peak_tflops={
        "fp64": 37.0,
        "fp32": 75.0,
        "tf32": 1125.0,
        "bf16": 2250.0,
        "fp16": 2250.0,
        "fp8": 4500.0,
        "int8": 4500.0,
        "fp4": 9000.0,
    },
    tdp_w=1000,
    device_names=("B200",),
    notes="Per-GPU figures of the 8-GPU HGX B200 board; the GB200 parts run at higher power.",
    sources={
        "sm_count": "chipsandcheese-b200 (2 dies x 74 enabled SMs)",
        "boost_clock_mhz": (
            "derived (75 TFLOP/s fp32 / (148 SMs x 256 FLOP/clk) = 1.98 GHz; "
            "third-party databases list the same 1,980 MHz)"
        ),
        "memory_gb": "dgx-b200-datasheet (1,440 GB / 8 GPUs; 192 GB physical, 180 GB usable)",
        "memory_bandwidth_gbps": "hgx-b200-datasheet (64 TB/s / 8 GPUs)",
        "l2_kib": "estimate (about 126 MB as the driver reports on B200 systems; NVIDIA prints no L2 size)",
        "l1_per_sm_kib": "chipsandcheese-b200",
        "tdp_w": "hgx-b200-datasheet (up to 1,000 W per GPU)",
        "peak_tflops.fp64": "hgx-b200-datasheet (296 TFLOP/s / 8 GPUs)",
        "peak_tflops.fp32": "hgx-b200-datasheet (600 TFLOP/s / 8 GPUs)",
        "peak_tflops.tf32": "hgx-b200-datasheet (18 PFLOP/s* sparse / 8 GPUs / 2 for dense)",
        "peak_tflops.bf16": "hgx-b200-datasheet (36 PFLOP/s* sparse / 8 GPUs / 2 for dense)",
        "peak_tflops.fp16": "hgx-b200-datasheet (36 PFLOP/s* sparse / 8 GPUs / 2 for dense)",
        "peak_tflops.fp8": "hgx-b200-datasheet (72 PFLOP/s* sparse / 8 GPUs / 2 for dense)",
        "peak_tflops.int8": "hgx-b200-datasheet (72 POPS* sparse / 8 GPUs / 2 for dense)",
        "peak_tflops.fp4": "hgx-b200-datasheet (144 PFLOP/s* sparse / 8 GPUs / 2 for dense)",
    },
)

_RTX_5090 = _nvidia(
    id="rtx-5090",
    name="NVIDIA GeForce RTX 5090",
    architecture="Blackwell",
    compute_capability="12.0",
    sm_count=170,
    boost_clock_mhz=2407,
    memory_gb=32,
    memory_bandwidth_gbps=1792,
    memory_type="GDDR7",
    l2_kib=96 * 1024,
    l1_per_sm_kib=128,
    # Tensor rates left out: the sources print only sparse FP16-accumulate figures, and
    # GeForce parts run FP32 accumulation (what a matmul uses) at a rate they do not state.
    peak_tflops={"fp32": 104.8},
    tdp_w=575,
    device_names=("GeForce RTX 5090", "RTX 5090"),
    sources={
        "sm_count": "rtx-5090-specs (21,760 CUDA cores / 128 per SM)",
        "boost_clock_mhz": "rtx-5090-specs",
        "memory_gb": "rtx-5090-specs",
        "memory_bandwidth_gbps": "rtx-5090-specs",
        "l2_kib": "rtx-5090-specs (96 MB)",
        "l1_per_sm_kib": "rtx-5090-specs",
        "tdp_w": "rtx-5090-specs (total graphics power)",
        "peak_tflops.fp32": "rtx-5090-specs (104.8 shader TFLOPS)",
    },
)

# --- Ada (cc 8.9): 128 FP32 lanes per SM ----------------------------------------------------

_L4 = _nvidia(
    id="l4",
    name="NVIDIA L4",
    architecture="Ada",
    compute_capability="8.9",
    sm_count=58,
    boost_clock_mhz=2040,
    memory_gb=24,
    memory_bandwidth_gbps=300,
    memory_type="GDDR6",
    l2_kib=48 * 1024,
    l1_per_sm_kib=128,
    peak_tflops={
        "fp32": 30.3,
        "tf32": 60.0,
        "bf16": 121.0,
        "fp16": 121.0,
        "fp8": 242.5,
        "int8": 242.5,
    },
    tdp_w=72,
    device_names=("L4",),
    sources={
        "sm_count": "l4-datasheet (7,424 CUDA cores / 128 per SM)",
        "boost_clock_mhz": "l4-datasheet",
        "memory_gb": "l4-datasheet",
        "memory_bandwidth_gbps": "l4-datasheet",
        "l2_kib": "ada-whitepaper (AD104: 48 MB)",
        "l1_per_sm_kib": "ada-whitepaper",
        "tdp_w": "l4-datasheet",
        "peak_tflops.fp32": "l4-datasheet",
        "peak_tflops.tf32": "l4-datasheet (120* with sparsity; dense is half)",
        "peak_tflops.bf16": "l4-datasheet (242* with sparsity; dense is half)",
        "peak_tflops.fp16": "l4-datasheet (242* with sparsity; dense is half)",
        "peak_tflops.fp8": "l4-datasheet (485* with sparsity; dense is half)",
        "peak_tflops.int8": "l4-datasheet (485* TOPS with sparsity; dense is half)",
    },
)

_L40S = _nvidia(
    id="l40s",
    name="NVIDIA L40S",
    architecture="Ada",
    compute_capability="8.9",
    sm_count=142,
    boost_clock_mhz=2520,
    memory_gb=48,
    memory_bandwidth_gbps=864,
    memory_type="GDDR6",
    l2_kib=96 * 1024,
    l1_per_sm_kib=128,
    peak_tflops={
        "fp32": 91.6,
        "tf32": 183.0,
        "bf16": 362.05,
        "fp16": 362.05,
        "fp8": 733.0,
        "int8": 733.0,
    },
    tdp_w=350,
    device_names=("L40S",),
    sources={
        "sm_count": "l40s-datasheet (18,176 CUDA cores / 128 per SM)",
        "boost_clock_mhz": "l40s-datasheet",
        "memory_gb": "l40s-datasheet",
        "memory_bandwidth_gbps": "l40s-datasheet",
        "l2_kib": "ada-whitepaper (AD102: 96 MB)",
        "l1_per_sm_kib": "ada-whitepaper",
        "tdp_w": "l40s-datasheet",
        "peak_tflops.fp32": "l40s-datasheet",
        "peak_tflops.tf32": "l40s-datasheet (dense 183; 366* with sparsity)",
        "peak_tflops.bf16": "l40s-datasheet (dense 362.05; 733* with sparsity)",
        "peak_tflops.fp16": "l40s-datasheet (dense 362.05; 733* with sparsity)",
        "peak_tflops.fp8": "l40s-datasheet (dense 733; 1,466* with sparsity)",
        "peak_tflops.int8": "l40s-datasheet (dense 733 TOPS; 1,466* with sparsity)",
    },
)

_RTX_4090 = _nvidia(
    id="rtx-4090",
    name="NVIDIA GeForce RTX 4090",
    architecture="Ada",
    compute_capability="8.9",
    sm_count=128,
    boost_clock_mhz=2520,
    memory_gb=24,
    memory_bandwidth_gbps=1008,
    memory_type="GDDR6X",
    l2_kib=72 * 1024,
    l1_per_sm_kib=128,
    # GeForce Ada halves the tensor rate when accumulating in FP32, which is what a bf16
    # or fp16 matmul does; these are the FP32-accumulate figures.
    peak_tflops={
        "fp32": 82.6,
        "tf32": 82.6,
        "bf16": 165.2,
        "fp16": 165.2,
        "fp8": 330.3,
        "int8": 660.6,
    },
    tdp_w=450,
    device_names=("GeForce RTX 4090", "RTX 4090"),
    sources={
        "sm_count": "ada-whitepaper",
        "boost_clock_mhz": "ada-whitepaper",
        "memory_gb": "ada-whitepaper",
        "memory_bandwidth_gbps": "ada-whitepaper",
        "l2_kib": "ada-whitepaper (72 MB)",
        "l1_per_sm_kib": "ada-whitepaper",
        "tdp_w": "ada-whitepaper (total graphics power)",
        "peak_tflops.fp32": "ada-whitepaper",
        "peak_tflops.tf32": "ada-whitepaper (82.6 dense / 165.2* sparse)",
        "peak_tflops.bf16": "ada-whitepaper (FP32 accumulate: 165.2 dense / 330.4* sparse)",
        "peak_tflops.fp16": (
            "ada-whitepaper (FP32 accumulate: 165.2 dense; 330.3 with FP16 accumulate)"
        ),
        "peak_tflops.fp8": (
            "ada-whitepaper (FP32 accumulate: 330.3 dense; 660.6 with FP16 accumulate)"
        ),
        "peak_tflops.int8": "ada-whitepaper (660.6 dense / 1,321.2* sparse TOPS)",
    },
)

# --- AMD CDNA 3 (gfx942): a CU is the SM, a 64-wide wavefront is the warp -------------------

_CDNA3_RATES = {
    "fp64": 163.4,
    "fp32": 163.4,
    "tf32": 653.7,
    "bf16": 1307.4,
    "fp16": 1307.4,
    "fp8": 2614.9,
    "int8": 2614.9,
}


def _cdna3(*, id, name, memory_gb, bandwidth, tdp_w, device_names, doc, extra_sources) -> GPUSpec:
    return GPUSpec(
        id=id,
        name=name,
        vendor="amd",
        architecture="CDNA 3",
        compute_capability="gfx942",
        sm_count=304,
        boost_clock_mhz=2100,
        memory_gb=memory_gb,
        memory_bandwidth_gbps=bandwidth,
        memory_type="HBM3" if memory_gb == 192 else "HBM3E",
        l2_kib=8 * 4 * 1024,
        smem_per_sm_kib=64,
        smem_per_block_kib=64,
        l1_per_sm_kib=32,
        registers_per_sm=4 * 512 * 64,
        max_threads_per_sm=2048,
        max_blocks_per_sm=32,
        warp_size=64,
        peak_tflops=_CDNA3_RATES,
        tdp_w=tdp_w,
        device_names=device_names,
        notes=(
            "L2 is 4 MB per XCD (8 XCDs of 38 CUs); the 256 MB Infinity Cache behind it is "
            "the level all CUs share. LDS (shared memory) is a separate 64 KiB array per CU."
        ),
        extra={"infinity_cache_mib": 256, "infinity_cache_bandwidth_gbps": 17200},
        sources={
            "sm_count": f"{doc} (compute units)",
            "boost_clock_mhz": f"{doc} (peak engine clock)",
            "memory_gb": doc,
            "memory_bandwidth_gbps": doc,
            "l2_kib": "cdna3-whitepaper (4 MB L2 per XCD x 8 XCDs)",
            "smem_per_sm_kib": "cdna3-whitepaper (64 KiB LDS per CU)",
            "smem_per_block_kib": "cdna3-whitepaper (a workgroup may use the whole 64 KiB LDS)",
            "l1_per_sm_kib": "cdna3-whitepaper (32 KB vector L1 per CU; LDS is separate)",
            "registers_per_sm": (
                "derived (cdna3-whitepaper: 4 SIMDs x 512 VGPRs x 64 lanes of 4 bytes = 512 KB per CU)"
            ),
            "max_threads_per_sm": "estimate (8 wave slots per SIMD x 4 SIMDs x 64 lanes)",
            "max_blocks_per_sm": "estimate (one workgroup per wave slot at most: 32)",
            "warp_size": "cdna3-whitepaper (wave64)",
            "tdp_w": doc,
            "peak_tflops.fp64": f"{doc} (FP64 matrix; vector FP64 is 81.7)",
            "peak_tflops.fp32": f"{doc} (FP32 vector: 304 CUs x 128 lanes x 2 x 2.1 GHz)",
            "peak_tflops.tf32": f"{doc} (dense; 1,307.4 with sparsity)",
            "peak_tflops.bf16": f"{doc} (dense; 2,614.9 with sparsity)",
            "peak_tflops.fp16": f"{doc} (dense; 2,614.9 with sparsity)",
            "peak_tflops.fp8": f"{doc} (dense; 5,229.8 with sparsity)",
            "peak_tflops.int8": f"{doc} (dense TOPS; 5,229.8 with sparsity)",
            "extra.infinity_cache_mib": "cdna3-whitepaper (256 MB AMD Infinity Cache)",
            "extra.infinity_cache_bandwidth_gbps": "cdna3-whitepaper (17.2 TB/s peak)",
            **extra_sources,
        },
    )


_MI300X = _cdna3(
    id="mi300x",
    name="AMD Instinct MI300X",
    memory_gb=192,
    bandwidth=5300,
    tdp_w=750,
    device_names=("Instinct MI300X", "MI300X"),
    doc="mi300x-datasheet",
    extra_sources={},
)
_MI325X = _cdna3(
    id="mi325x",
    name="AMD Instinct MI325X",
    memory_gb=256,
    bandwidth=6000,
    tdp_w=1000,
    device_names=("Instinct MI325X", "MI325X"),
    doc="mi325x-datasheet",
    extra_sources={},
)

# --- Apple M-series: a GPU core is the SM, a SIMD-group of 32 the warp ----------------------


def _apple(
    *, id, name, gpu_family, cores, clock_mhz, memory_gb, bandwidth, fp32, sources
) -> GPUSpec:
    # Apple GPU cores have 128 FP32 lanes and run fp16 at the fp32 rate (metal-benchmarks);
    # there are no matrix units exposed with a published rate, so only those two are listed.
    return GPUSpec(
        id=id,
        name=name,
        vendor="apple",
        architecture=f"Apple GPU family {gpu_family}",
        compute_capability=f"apple{gpu_family}",
        sm_count=cores,
        boost_clock_mhz=clock_mhz,
        memory_gb=memory_gb,
        memory_bandwidth_gbps=bandwidth,
        memory_type="LPDDR5 (unified)",
        l2_kib=48 * 1024,
        smem_per_sm_kib=64,
        smem_per_block_kib=32,
        l1_per_sm_kib=64,
        registers_per_sm=384 * 1024 // 4,
        max_threads_per_sm=3072,
        max_blocks_per_sm=96,
        warp_size=32,
        peak_tflops={"fp32": fp32, "fp16": fp32},
        tdp_w=float("nan"),
        device_names=(name,),
        sources={
            "l2_kib": "estimate (48 MB system level cache in third-party die analyses; Apple publishes none)",
            "smem_per_sm_kib": "metal-benchmarks (64 KB on-chip shared memory per core)",
            "smem_per_block_kib": "metal-feature-tables (32 KiB threadgroup memory at most)",
            "l1_per_sm_kib": "metal-benchmarks (estimate)",
            "registers_per_sm": "metal-benchmarks (estimate: 384 KB register file per core)",
            "max_threads_per_sm": "metal-benchmarks (estimate: up to 3,072 resident threads per core)",
            "max_blocks_per_sm": "estimate (3,072 threads / 32-thread SIMD-groups)",
            "warp_size": "metal-feature-tables (SIMD-group width 32)",
            "tdp_w": "unpublished (Apple gives no GPU power figure)",
            "peak_tflops.fp16": "metal-benchmarks (fp16 runs at the fp32 rate on Apple GPU cores)",
            **sources,
        },
    )


_M2_MAX = _apple(
    id="m2-max",
    name="Apple M2 Max",
    gpu_family=8,
    cores=38,
    clock_mhz=1398,
    memory_gb=96,
    bandwidth=400,
    fp32=13.6,
    sources={
        "sm_count": "apple-m2-max (38-core GPU)",
        "boost_clock_mhz": "metal-benchmarks (1,398 MHz; 38 x 256 x 1.398 GHz = 13.6 TFLOP/s)",
        "memory_gb": "apple-m2-max",
        "memory_bandwidth_gbps": "apple-m2-max",
        "peak_tflops.fp32": "apple-m2-max (13.6 TFLOPS)",
    },
)
_M3_MAX = _apple(
    id="m3-max",
    name="Apple M3 Max",
    gpu_family=9,
    cores=40,
    clock_mhz=1580,
    memory_gb=128,
    bandwidth=400,
    fp32=16.2,
    sources={
        "sm_count": "apple-m3-max (40-core GPU)",
        "boost_clock_mhz": "estimate (third-party figure about 1.58 GHz; Apple publishes no clock)",
        "memory_gb": "apple-m3-max",
        "memory_bandwidth_gbps": "apple-m3-max (40-core model)",
        "peak_tflops.fp32": "estimate (40 cores x 128 lanes x 2 x ~1.58 GHz; third-party tables list 16.2)",
        "registers_per_sm": (
            "metal-benchmarks (estimate; M3 allocates registers and threadgroup memory "
            "dynamically from one on-chip pool)"
        ),
    },
)

CATALOG: dict[str, GPUSpec] = {
    spec.id: spec
    for spec in (
        _A100_SXM,
        _A100_SXM_40GB,
        _A100_PCIE,
        _A100_PCIE_40GB,
        _H100_SXM,
        _H100_PCIE,
        _H100_NVL,
        _H200,
        _H200_NVL,
        _GH200,
        _B200,
        _L4,
        _L40S,
        _RTX_4090,
        _RTX_5090,
        _MI300X,
        _MI325X,
        _M2_MAX,
        _M3_MAX,
    )
}


def source_document(source: str) -> str:
    """A source string ("key (note)") with its key expanded to the document it names."""
    key, _, note = source.partition(" (")
    document = SOURCES.get(key, key)
    return f"{document} ({note}" if note else document


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry for an id (case-insensitive); UnknownNameError with hints otherwise."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in CATALOG:
        return CATALOG[key]
    raise unknown("GPU", name, CATALOG)
