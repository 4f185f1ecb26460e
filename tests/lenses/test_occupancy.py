"""The occupancy calculator against hand-worked cases and Nsight Compute's own figures."""

from __future__ import annotations

import json

import pytest

from kernelab.errors import KernelabError
from kernelab.hardware import CATALOG, get_gpu
from kernelab.lenses.occupancy import LaunchDoesNotFit, occupancy

# The H200 has the H100 SXM's SM (same registers, shared memory, warp and block limits);
# fall back to it while the h200 catalog entry is not there.
GPU = "h200" if "h200" in CATALOG else "h100-sxm"


@pytest.fixture
def h200():
    spec = get_gpu(GPU)
    assert (spec.registers_per_sm, spec.smem_per_sm_kib, spec.max_threads_per_sm) == (
        65536,
        228,
        2048,
    )
    return spec


def test_registers_decide_256_threads_at_128_registers(h200):
    # 128 regs x 32 lanes = 4096 per warp; a 16384-register sub-partition holds 4 warps,
    # the SM 16 warps = two 8-warp blocks.
    occ = occupancy(h200, threads_per_block=256, registers_per_thread=128)
    assert occ.blocks_per_sm == 2
    assert occ.limits["registers"] == 2
    assert occ.limiter == ("registers",)
    assert occ.occupancy_pct == pytest.approx(25.0)


def test_shared_memory_decides_100_kib_per_block(h200):
    # 100 KiB + 1 KiB reserved = 103424 bytes; 228 KiB holds two of them.
    occ = occupancy(
        h200, threads_per_block=128, registers_per_thread=32, smem_per_block_bytes=100 * 1024
    )
    assert occ.smem_per_block_allocated == 101 * 1024
    assert occ.limits["shared_memory"] == 2
    assert occ.blocks_per_sm == 2
    assert occ.limiter == ("shared_memory",)


def test_warps_decide_1024_thread_blocks(h200):
    occ = occupancy(h200, threads_per_block=1024, registers_per_thread=32)
    assert occ.limits["warps"] == 2
    assert occ.blocks_per_sm == 2
    assert "warps" in occ.limiter
    assert occ.occupancy_pct == pytest.approx(100.0)


def test_block_slots_decide_one_warp_blocks(h200):
    occ = occupancy(h200, threads_per_block=32, registers_per_thread=32)
    assert occ.limits["blocks"] == 32
    assert occ.limits["warps"] == 64
    assert occ.blocks_per_sm == 32
    assert occ.limiter == ("blocks",)
    assert occ.occupancy_pct == pytest.approx(50.0)


def test_register_rounding_to_the_allocation_unit(h200):
    # 37 regs x 32 = 1184 -> 1280 per warp; 16384 // 1280 = 12 warps per sub-partition
    # (48 per SM), not 65536 // 1184 = 55.
    occ = occupancy(h200, threads_per_block=64, registers_per_thread=37)
    assert occ.registers_per_block == 2 * 1280
    assert occ.limits["registers"] == 48 // 2


def test_shared_memory_rounds_to_128_bytes(h200):
    occ = occupancy(h200, threads_per_block=128, registers_per_thread=32, smem_per_block_bytes=1)
    assert occ.smem_per_block_allocated == 1024 + 128


def test_partial_warp_is_noted(h200):
    occ = occupancy(h200, threads_per_block=100, registers_per_thread=32)
    assert occ.warps_per_block == 4
    assert occ.notes


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threads_per_block": 1024, "registers_per_thread": 128},  # 131072 registers
        {"threads_per_block": 128, "registers_per_thread": 256},
        {"threads_per_block": 2048, "registers_per_thread": 32},
        {"threads_per_block": 128, "registers_per_thread": 32, "smem_per_block_bytes": 228 * 1024},
    ],
)
def test_configs_that_cannot_fit_one_block_say_so(h200, kwargs):
    with pytest.raises(LaunchDoesNotFit):
        occupancy(h200, **kwargs)


def test_bad_input_is_a_kernelab_error(h200):
    with pytest.raises(KernelabError):
        occupancy(h200, threads_per_block=0, registers_per_thread=32)
    with pytest.raises(KernelabError):
        occupancy(h200, threads_per_block=128, registers_per_thread=0)


def _fixture_kernels(fixtures_dir):
    return json.loads((fixtures_dir / "occupancy_h200.json").read_text())["kernels"]


@pytest.mark.parametrize("index", [0, 1])
def test_matches_nsight_compute_on_the_h200(h200, fixtures_dir, index):
    kernel = _fixture_kernels(fixtures_dir)[index]
    launch, ncu = kernel["launch"], kernel["ncu"]
    occ = occupancy(
        h200,
        threads_per_block=launch["threads_per_block"],
        registers_per_thread=launch["registers_per_thread"],
        smem_per_block_bytes=launch["smem_static_bytes"],
        dynamic_smem_bytes=launch["smem_dynamic_bytes"],
        barriers_per_block=launch["barriers_per_block"],
    )
    assert occ.limits == {
        "registers": ncu["limit_registers"],
        "shared_memory": ncu["limit_shared_mem"],
        "warps": ncu["limit_warps"],
        "blocks": ncu["limit_blocks"],
        "barriers": ncu["limit_barriers"],
    }
    assert occ.smem_per_block_allocated == ncu["smem_allocated_bytes"]
    assert occ.smem_carveout_bytes == ncu["smem_config_bytes"]
    assert occ.occupancy_pct == pytest.approx(ncu["theoretical_occupancy_pct"])
    waves = launch["grid_size"] / (occ.blocks_per_sm * ncu["sm_count"])
    assert waves == pytest.approx(ncu["waves_per_multiprocessor"], abs=0.005)


def test_non_nvidia_gpus_are_refused():
    amd = [s for s in CATALOG.values() if s.vendor != "nvidia"]
    if not amd:
        pytest.skip("no non-NVIDIA GPU in the catalog yet")
    with pytest.raises(KernelabError):
        occupancy(amd[0], threads_per_block=256, registers_per_thread=32)


# A kernel whose register use grows with N (N floats live across a loop), with a little
# static shared memory and some dynamic shared memory; compiled by NVRTC for the GPU present.
_PROBE = r"""
#define N {n}
extern "C" __global__ void probe(float* out, const float* in, int iters) {{
  extern __shared__ float dyn[];
  __shared__ float stat[{static_floats}];
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = in[threadIdx.x + i * blockDim.x];
  for (int it = 0; it < iters; ++it) {{
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i + 1) % N] + 1.0f;
  }}
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += acc[i];
  stat[threadIdx.x % {static_floats}] = s;
  dyn[threadIdx.x] = s;
  __syncthreads();
  out[threadIdx.x] = s + stat[(threadIdx.x + 1) % {static_floats}] + dyn[0];
}}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("live_floats, static_floats", [(4, 1), (40, 1), (100, 3000), (200, 1)])
def test_matches_the_driver_occupancy_api(live_floats, static_floats):
    from cuda.core import Device, Program, ProgramOptions

    from kernelab.hardware import resolve_gpu

    spec = resolve_gpu("auto")
    device = Device(0)
    device.set_current()
    major, minor = device.compute_capability
    source = _PROBE.format(n=live_floats, static_floats=static_floats)
    program = Program(source, "c++", ProgramOptions(arch=f"sm_{major}{minor}"))
    kernel = program.compile("cubin").get_kernel("probe")
    attributes = kernel.attributes
    registers, static_smem = attributes.num_regs, attributes.shared_size_bytes
    max_threads = attributes.max_threads_per_block
    checked = 0
    for threads in (32, 64, 96, 128, 160, 256, 384, 512, 640, 768, 1024):
        if threads > max_threads:
            continue
        # Without opting in, static + dynamic shared memory must stay within 48 KiB.
        for dynamic in (0, 1, 4096, 20000, 48 * 1024 - static_smem):
            driver = kernel.occupancy.max_active_blocks_per_multiprocessor(threads, dynamic)
            try:
                ours = occupancy(
                    spec,
                    threads_per_block=threads,
                    registers_per_thread=registers,
                    smem_per_block_bytes=static_smem,
                    dynamic_smem_bytes=dynamic,
                ).blocks_per_sm
            except LaunchDoesNotFit:
                ours = 0
            assert ours == driver, (threads, registers, static_smem, dynamic)
            checked += 1
    assert checked >= 20
