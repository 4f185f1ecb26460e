"""Detection: reported device names matched to the catalog; None and one-line errors without a GPU."""

from __future__ import annotations

import types

import pytest

from kernelab.errors import KernelabError, NoGPUError
from kernelab.hardware import detect
from kernelab.hardware.detect import DetectedGPU, detect_gpu, match_catalog, require_gpu


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.parametrize(
    ("reported", "sm_count", "expected"),
    [
        ("NVIDIA H200", 132, "h200"),
        ("NVIDIA H200 NVL", 132, "h200-nvl"),
        ("NVIDIA H100 80GB HBM3", 132, "h100-sxm"),
        ("NVIDIA H100 PCIe", 114, "h100-pcie"),
        ("NVIDIA H100 PCIe", None, "h100-pcie"),
        ("NVIDIA H100 NVL", 132, "h100-nvl"),
        ("NVIDIA H100", 114, "h100-pcie"),  # a bare family name: the SM count decides
        ("NVIDIA H100", 132, "h100-sxm"),
        ("NVIDIA GH200 480GB", 132, "gh200"),
        ("NVIDIA A100-SXM4-80GB", 108, "a100-sxm"),
        ("NVIDIA A100-SXM4-40GB", 108, "a100-sxm-40gb"),
        ("NVIDIA A100 80GB PCIe", 108, "a100-pcie"),
        ("NVIDIA A100-PCIE-40GB", 108, "a100-pcie-40gb"),
        ("NVIDIA B200", 148, "b200"),
        ("NVIDIA L4", 58, "l4"),
        ("NVIDIA L40S", 142, "l40s"),
        ("NVIDIA GeForce RTX 4090", 128, "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", 170, "rtx-5090"),
        ("AMD Instinct MI300X", 304, "mi300x"),
        ("AMD Instinct MI325X", 304, "mi325x"),
        ("Apple M2 Max", None, "m2-max"),
        ("nvidia h200", None, "h200"),  # case and spacing do not matter
    ],
)
def test_match_catalog_table(reported, sm_count, expected):
    spec = match_catalog(reported, sm_count)
    assert spec is not None and spec.id == expected


@pytest.mark.parametrize(
    "reported",
    [
        "NVIDIA L40",  # "L4" must not match inside "L40" / "L40S"
        "NVIDIA GB200",  # "B200" must not match inside "GB200"
        "NVIDIA GH200 144G HBM3e",  # another memory model, not in the catalog
        "NVIDIA GeForce RTX 3090",
        "NVIDIA T4",
        "",
    ],
)
def test_match_catalog_refuses_what_it_does_not_know(reported):
    assert match_catalog(reported) is None


def test_gh200_is_not_mistaken_for_h200():
    assert match_catalog("NVIDIA GH200 480GB").id == "gh200"


@pytest.mark.skipif(_cuda_available(), reason="this machine has a CUDA GPU")
def test_detect_gpu_is_none_without_a_gpu():
    assert detect_gpu() is None


@pytest.mark.skipif(_cuda_available(), reason="this machine has a CUDA GPU")
def test_require_gpu_raises_no_gpu_error_without_a_gpu():
    with pytest.raises(NoGPUError) as info:
        require_gpu()
    message = str(info.value)
    assert "--gpu" in message and "\n" not in message


def _fake_torch(monkeypatch, props):
    """Stand-in torch.cuda answering as a machine with one GPU would."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(detect, "_driver_version", lambda: "580.65")


def _props(name, sms, memory=150_000_000_000, l2=60 * 2**20, major=9, minor=0):
    return types.SimpleNamespace(
        name=name,
        multi_processor_count=sms,
        total_memory=memory,
        L2_cache_size=l2,
        major=major,
        minor=minor,
    )


def test_detect_gpu_reads_torch_properties(monkeypatch):
    _fake_torch(monkeypatch, _props("NVIDIA H200", 132))
    found = detect_gpu()
    assert isinstance(found, DetectedGPU)
    assert found.spec is not None and found.spec.id == "h200"
    assert (found.compute_capability, found.sm_count, found.l2_bytes) == ("9.0", 132, 60 * 2**20)
    assert found.driver_version == "580.65" and found.source == "torch"
    assert found.to_dict()["spec"] == "h200"
    assert require_gpu() == found


def test_detect_gpu_index_past_the_last_device_is_none(monkeypatch):
    _fake_torch(monkeypatch, _props("NVIDIA H200", 132))
    monkeypatch.setattr(detect, "_from_nvml", lambda index: None)
    assert detect_gpu(index=3) is None


def test_require_gpu_names_an_unknown_gpu_and_suggests_gpu_option(monkeypatch):
    _fake_torch(monkeypatch, _props("NVIDIA RTX A6000", 84, major=8, minor=6))
    with pytest.raises(KernelabError) as info:
        require_gpu()
    assert not isinstance(info.value, NoGPUError)
    message = str(info.value)
    assert "NVIDIA RTX A6000" in message and "--gpu" in message and "\n" not in message


def test_detect_gpu_swallows_a_failing_driver(monkeypatch):
    import torch

    def broken():
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    monkeypatch.setattr(detect, "_from_nvml", lambda index: None)
    assert detect_gpu() is None


@pytest.mark.gpu
def test_detected_gpu_is_in_the_catalog_with_its_sm_count():
    found = detect_gpu()
    assert found is not None, "torch sees a CUDA GPU but detect_gpu() found none"
    assert found.spec is not None, f"{found.name!r} is not matched to the catalog"
    assert found.sm_count == found.spec.sm_count
    assert found.compute_capability == found.spec.compute_capability
    assert (
        found.memory_bytes > 0.8 * found.spec.memory_gb * 1e9 * 0.93
    )  # GiB vs GB, reserved memory
    if found.l2_bytes is not None:
        assert found.l2_bytes == pytest.approx(found.spec.l2_kib * 1024, rel=0.05)
