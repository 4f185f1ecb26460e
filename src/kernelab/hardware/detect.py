"""The GPU this process runs on, read from torch (or NVML) and matched to the catalog.

Nothing here touches a GPU at import time; on a machine without one, detect_gpu() returns
None and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from kernelab.errors import KernelabError, NoGPUError
from kernelab.hardware.catalog import CATALOG, get_gpu
from kernelab.hardware.specs import GPUSpec

NO_GPU_MESSAGE = "no CUDA GPU found on this machine; pass --gpu NAME (kernelab gpus lists them)"


@dataclass(frozen=True)
class DetectedGPU:
    index: int
    name: str  # as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
    spec: GPUSpec | None  # the catalog entry, None when the name matches none
    compute_capability: str  # "9.0"; the ISA target ("gfx942") on ROCm
    sm_count: int | None
    memory_bytes: int | None
    l2_bytes: int | None
    driver_version: str | None
    source: str  # "torch" or "nvml"

    def to_dict(self) -> dict:
        # The spec by its id: the whole GPUSpec is one `kernelab gpu ID` away.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["spec"] = self.spec.id if self.spec else None
        return data


def _normalize(name: str) -> str:
    """Lower case, dashes and underscores as spaces, runs of spaces collapsed."""
    return " ".join(re.sub(r"[-_]", " ", name.lower()).split())


def _contains_words(haystack: str, needle: str) -> bool:
    """`needle` in `haystack` on word boundaries, so "l4" does not match "l40s" nor "h200" "gh200"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])", haystack) is not None


def match_catalog(reported_name: str, sm_count: int | None = None) -> GPUSpec | None:
    """The catalog entry for a device name as torch / NVML report it, or None.

    The longest matching device name wins, so "NVIDIA H100 PCIe" finds h100-pcie, not the
    SXM part that also answers to a bare "H100". Between equally long matches the one whose
    SM count equals `sm_count` wins.
    """
    reported = _normalize(reported_name)
    best: tuple[int, bool, int] | None = None
    best_spec = None
    for order, spec in enumerate(CATALOG.values()):
        for device_name in spec.device_names:
            pattern = _normalize(device_name)
            if not _contains_words(reported, pattern):
                continue
            score = (len(pattern), sm_count is not None and spec.sm_count == sm_count, -order)
            if best is None or score > best:
                best, best_spec = score, spec
    return best_spec


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, or a ROCm machine
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def _from_torch(index: int) -> DetectedGPU | None:
    try:
        import torch

        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        props = torch.cuda.get_device_properties(index)
    except Exception:  # no torch, a CPU build, or a driver that fails to initialise
        return None
    if getattr(torch.version, "hip", None):
        capability = str(getattr(props, "gcnArchName", "")).split(":")[0] or "unknown"
    else:
        capability = f"{props.major}.{props.minor}"
    l2 = getattr(props, "L2_cache_size", None)
    return DetectedGPU(
        index=index,
        name=props.name,
        spec=match_catalog(props.name, props.multi_processor_count),
        compute_capability=capability,
        sm_count=props.multi_processor_count,
        memory_bytes=props.total_memory,
        l2_bytes=int(l2) if l2 else None,
        driver_version=_driver_version(),
        source="torch",
    )


def _from_nvml(index: int) -> DetectedGPU | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        if index >= pynvml.nvmlDeviceGetCount():
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    # NVML reports neither the SM count nor the L2 size.
    return DetectedGPU(
        index=index,
        name=name,
        spec=match_catalog(name),
        compute_capability=f"{major}.{minor}",
        sm_count=None,
        memory_bytes=int(memory),
        l2_bytes=None,
        driver_version=driver,
        source="nvml",
    )


def detect_gpu(index: int = 0) -> DetectedGPU | None:
    """GPU `index` as torch sees it (NVML when torch cannot tell), or None without one."""
    return _from_torch(index) or _from_nvml(index)


def require_gpu(index: int = 0) -> DetectedGPU:
    """The detected GPU, which must exist and be in the catalog; a one-line error otherwise."""
    detected = detect_gpu(index)
    if detected is None:
        raise NoGPUError(NO_GPU_MESSAGE)
    if detected.spec is None:
        sms = f", {detected.sm_count} SMs" if detected.sm_count else ""
        raise KernelabError(
            f"this GPU ('{detected.name}', compute capability {detected.compute_capability}{sms}) "
            "is not in the kernelab catalog; pass --gpu NAME with the closest entry "
            "(kernelab gpus lists them)"
        )
    return detected


# --- which GPU a command describes ---------------------------------------------------------

# The GPU every command describes when none is named and none is detected: the card with the
# fullest committed records (every stage of the lab has one), so that the lab's report, the
# rooflines and the lenses describe one card.
DEFAULT_GPU = "h200"

# Device files a GPU driver creates on Linux (NVIDIA, ROCm, WSL2). Without any of them no GPU
# can be reached, and choose_gpu skips detection, which imports torch and takes seconds.
_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def _gpu_device_present() -> bool:
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return True  # no cheap test elsewhere: ask torch
    return any(os.path.exists(path) for path in _DEVICE_FILES)


@dataclass(frozen=True)
class ChosenGPU:
    """The GPU a command describes, and how it was chosen: "given" (--gpu NAME), "detected"
    (the GPU this process sees) or "default" (none named, none usable detected)."""

    spec: GPUSpec
    how: str
    reason: str  # one phrase for the output, e.g. "the default: no GPU detected here"

    @property
    def label(self) -> str:
        """The id and how it was chosen, as the output states it."""
        return self.spec.id if self.how == "given" else f"{self.spec.id} ({self.reason})"

    def to_dict(self) -> dict:
        return {"id": self.spec.id, "how": self.how, "reason": self.reason}


def choose_gpu(name: str | None) -> ChosenGPU:
    """The one rule for the GPU a command describes: a catalog id when one is named; "auto"
    for the detected GPU (a one-line error without one); nothing named, the detected GPU when
    the catalog has it, else DEFAULT_GPU, saying why."""
    if name is not None and not name.strip():
        raise KernelabError("--gpu needs a catalog id or 'auto', not an empty string")
    if name is not None and name.strip().lower() != "auto":
        return ChosenGPU(get_gpu(name), "given", "given with --gpu")
    if name is not None:
        return ChosenGPU(require_gpu().spec, "detected", "detected here")
    detected = detect_gpu() if _gpu_device_present() else None
    if detected is not None and detected.spec is not None:
        return ChosenGPU(detected.spec, "detected", "detected here")
    if detected is None:
        why = "no GPU detected here"
    else:
        why = f"this GPU, {detected.name}, is not in the catalog"
    return ChosenGPU(
        get_gpu(DEFAULT_GPU), "default", f"the default: {why}; --gpu NAME picks another"
    )
