"""nvcc builds, the on-disk cache, the ptxas and SASS readers, and the one-line errors."""

from __future__ import annotations

import pytest

from kernelab.errors import KernelabError, MissingToolError, NoGPUError
from kernelab.runtime.cuda import build as cuda_build
from kernelab.runtime.cuda import launch as cuda_launch
from kernelab.runtime.cuda.ptxas import PtxasReport, parse_ptxas
from kernelab.runtime.cuda.sass import functions, sass_facts

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'copy4' for 'sm_90'
ptxas info    : Function properties for copy4
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 352 bytes cmem[0]
ptxas info    : Compile time = 1.023 ms
ptxas info    : Compiling entry function 'tiled' for 'sm_90a'
ptxas info    : Function properties for tiled
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16640 bytes smem, 400 bytes cmem[0], 8 bytes cmem[2]
"""

KERNEL = """\
#include "helper.cuh"
extern "C" __global__ void copy4(const float4 *a, float4 *b) { b[threadIdx.x] = scale(a[threadIdx.x]); }
"""
HELPER = "__device__ float4 scale(float4 v) { return make_float4(v.x * 2, v.y, v.z, v.w); }\n"


def test_parse_ptxas_reads_every_field():
    reports = parse_ptxas(PTXAS_LOG)
    assert set(reports) == {"copy4", "tiled"}
    copy4, tiled = reports["copy4"], reports["tiled"]
    assert (copy4.arch, copy4.registers, copy4.shared_bytes, copy4.barriers) == ("sm_90", 12, 0, 0)
    assert copy4.constant_bytes == {0: 352} and not copy4.spills
    assert (tiled.arch, tiled.registers, tiled.shared_bytes, tiled.barriers) == (
        "sm_90a",
        255,
        16640,
        1,
    )
    assert (tiled.stack_frame_bytes, tiled.spill_store_bytes, tiled.spill_load_bytes) == (24, 8, 12)
    assert tiled.constant_bytes == {0: 400, 2: 8} and tiled.spills
    assert PtxasReport.from_dict(tiled.to_dict()) == tiled


def test_arch_flags():
    assert cuda_build.arch_flags("sm_90") == ["-arch=sm_90"]
    assert cuda_build.arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(KernelabError, match="bad CUDA architecture"):
        cuda_build.arch_flags("hopper")


@pytest.fixture
def kernel_source(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "helper.cuh").write_text(HELPER)
    source = tmp_path / "copy4.cu"
    source.write_text(KERNEL)
    return source


@needs_nvcc
def test_build_then_cache_hit_without_nvcc(kernel_source, monkeypatch, tmp_path):
    first = cuda_build.build(kernel_source)
    assert not first.cached and first.cubin.is_file()
    assert first.cubin.parent == tmp_path / "cache" / "cubins"
    assert first.report("copy4").registers > 0 and first.report("copy4").arch == "sm_90"
    assert "-lineinfo" in first.flags and "-arch=sm_90" in first.flags

    def no_compiler(command):
        raise AssertionError("nvcc ran on a cache hit")

    monkeypatch.setattr(cuda_build, "_run_nvcc", no_compiler)
    second = cuda_build.build(kernel_source)
    assert second.cached and second.cubin == first.cubin
    assert second.report("copy4").registers == first.report("copy4").registers
    # A machine without nvcc still uses what is in the cache.
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: None)
    assert cuda_build.build(kernel_source).cached


@needs_nvcc
def test_cache_key_follows_headers_and_defines(kernel_source, tmp_path):
    first = cuda_build.build(kernel_source)
    (tmp_path / "helper.cuh").write_text(HELPER.replace("v.x * 2", "v.x * 3"))
    edited = cuda_build.build(kernel_source)
    assert not edited.cached and edited.cubin != first.cubin
    defined = cuda_build.build(kernel_source, defines={"TILE": 64})
    assert not defined.cached and "-DTILE=64" in defined.flags


@needs_nvcc
def test_sass_of_a_vector_copy(kernel_source):
    built = cuda_build.build(kernel_source)
    facts = sass_facts(built.cubin, "copy4")
    assert facts["ldg_128"] == 1 and facts["stg_128"] == 1
    assert facts["local_loads"] == facts["local_stores"] == 0
    from kernelab.runtime.cuda.sass import disassemble

    assert "copy4" in functions(disassemble(built.cubin))


@needs_nvcc
def test_compile_error_is_one_line(kernel_source):
    kernel_source.write_text('extern "C" __global__ void broken() { undeclared_name = 1; }\n')
    with pytest.raises(KernelabError) as info:
        cuda_build.build(kernel_source)
    message = str(info.value)
    assert "\n" not in message and "undeclared_name" in message and "copy4.cu" in message


def test_missing_nvcc_is_one_line(kernel_source, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(cuda_build, "FALLBACK_CUDA_HOMES", ())
    with pytest.raises(MissingToolError) as info:
        cuda_build.build(kernel_source)
    assert str(info.value) == "nvcc not found; install the CUDA toolkit or put nvcc on PATH"


def test_unknown_source_is_an_error():
    with pytest.raises(KernelabError, match="not found"):
        cuda_build.build("ladders/sgemm/99_missing.cu")


def test_arch_mismatch_message():
    cuda_launch.check_arch("sm_90a", "sm_90")  # same SASS family: accepted
    with pytest.raises(KernelabError) as info:
        cuda_launch.check_arch("sm_90", "sm_80")
    assert str(info.value) == "this cubin is built for sm_90; the GPU is sm_80"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="checks the no-GPU path")
def test_launch_without_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(cuda_launch, "_device", None)
    with pytest.raises(NoGPUError) as info:
        cuda_launch.device()
    assert str(info.value).startswith("no NVIDIA driver/GPU") and "\n" not in str(info.value)
