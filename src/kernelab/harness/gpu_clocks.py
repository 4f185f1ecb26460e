"""Watching the GPU's clocks through NVML while a benchmark runs.

A timing is only comparable with another if the chip ran at the same clocks. NVML (the
pynvml module of nvidia-ml-py) reports the SM and memory clocks, temperature, power and the
reasons the driver is holding the clocks down. Without NVML every function here degrades to
"nothing known" (empty dicts, None), never an exception.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

# Clock event ("throttle") reason bits from nvml.h. GpuIdle (0x1), application clocks (0x2),
# sync boost (0x10) and display clocks (0x100) are not slowdowns of a busy chip.
SLOWDOWN_REASONS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
GPU_IDLE = 0x1

# A run whose SM clock fell more than this fraction below the highest clock seen in it is
# marked throttled: its later samples ran on a slower chip than its earlier ones.
CLOCK_DROP_LIMIT = 0.10


@dataclass(frozen=True)
class ClockReading:
    t_s: float  # time.perf_counter() when read
    sm_mhz: float | None
    mem_mhz: float | None
    temperature_c: float | None
    power_w: float | None
    reasons: int | None  # bit mask of clock event reasons


@functools.cache
def _nvml():
    """The initialised pynvml module, or None when it or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, driver not loaded, ...
        return None
    return pynvml


def nvml_available() -> bool:
    return _nvml() is not None


def _handle_for_torch_device(index: int):
    """The NVML handle of torch's CUDA device `index` (CUDA_VISIBLE_DEVICES renumbers devices,
    NVML does not, so match by UUID or PCI bus id before falling back to the index)."""
    nvml = _nvml()
    if nvml is None:
        return None
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        for candidate in (text, f"GPU-{text}"):
            try:
                return nvml.nvmlDeviceGetHandleByUUID(candidate)
            except Exception:
                continue
    if hasattr(props, "pci_bus_id"):
        bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except Exception:
            pass
    try:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def driver_version() -> str | None:
    """The NVIDIA driver release ("580.65.06"), or None without NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except Exception:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def _read(call, *args) -> float | None:
    try:
        return call(*args)
    except Exception:
        return None


def read_clocks(handle) -> ClockReading:
    """One reading of the device's clocks, temperature, power and slowdown reasons."""
    nvml = _nvml()
    reasons_call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    power_mw = _read(nvml.nvmlDeviceGetPowerUsage, handle)
    return ClockReading(
        t_s=time.perf_counter(),
        sm_mhz=_read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        mem_mhz=_read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        temperature_c=_read(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        power_w=power_mw / 1000 if power_mw is not None else None,
        reasons=_read(reasons_call, handle) if reasons_call else None,
    )


def assess(
    readings: list[ClockReading], max_sm_mhz: float | None = None
) -> tuple[dict, bool, list[str]]:
    """The clocks summary of a run, whether it throttled, and the warnings to show.

    Throttled means: the SM clock of a busy reading fell more than CLOCK_DROP_LIMIT below the
    highest seen in the run, or NVML named a slowdown reason (power cap, thermal, hardware).
    Readings flagged GpuIdle are left out of the clock-drop test: an idle chip lowers its clock
    between calls without that slowing any call down.
    """
    if not readings:
        return {}, False, []
    busy = [r for r in readings if not (r.reasons or 0) & GPU_IDLE]
    sm = [r.sm_mhz for r in busy if r.sm_mhz is not None]
    all_sm = [r.sm_mhz for r in readings if r.sm_mhz is not None]

    def extreme(values, pick):
        present = [v for v in values if v is not None]
        return pick(present) if present else None

    reason_mask = 0
    for r in readings:
        reason_mask |= r.reasons or 0
    slowdowns = [name for bit, name in SLOWDOWN_REASONS.items() if reason_mask & bit]
    clocks = {
        "readings": len(readings),
        "sm_mhz_start": readings[0].sm_mhz,
        "sm_mhz_end": readings[-1].sm_mhz,
        "sm_mhz_min": min(sm) if sm else extreme(all_sm, min),
        "sm_mhz_max": max(sm) if sm else extreme(all_sm, max),
        "sm_mhz_max_supported": max_sm_mhz,
        "mem_mhz": extreme([r.mem_mhz for r in readings], max),
        "temperature_c_max": extreme([r.temperature_c for r in readings], max),
        "power_w_max": extreme([r.power_w for r in readings], max),
        "slowdown_reasons": slowdowns,
    }
    warnings = []
    if sm and min(sm) < (1 - CLOCK_DROP_LIMIT) * max(sm):
        warnings.append(
            f"SM clock fell from {max(sm):.0f} to {min(sm):.0f} MHz during the run "
            "(> 10 %): samples are not from one clock; rerun on a cooler, idle GPU"
        )
    if slowdowns:
        warnings.append(f"the driver slowed the clocks during the run: {', '.join(slowdowns)}")
    return clocks, bool(warnings), warnings


class ClockWatcher:
    """Reads the clocks at start, every `interval_s` of wall time when polled, and at stop.

    poll() is cheap when the interval has not passed (one perf_counter call), so a timing loop
    may call it after every chunk of samples.
    """

    def __init__(self, device_index: int = 0, interval_s: float = 0.05):
        self.interval_s = interval_s
        self.readings: list[ClockReading] = []
        self._handle = _handle_for_torch_device(device_index)
        self.available = self._handle is not None
        self._last = -float("inf")
        self.max_sm_mhz = None
        if self.available:
            self.max_sm_mhz = _read(
                _nvml().nvmlDeviceGetMaxClockInfo, self._handle, _nvml().NVML_CLOCK_SM
            )

    def poll(self, force: bool = False) -> None:
        if not self.available:
            return
        now = time.perf_counter()
        if force or now - self._last >= self.interval_s:
            self.readings.append(read_clocks(self._handle))
            self._last = now

    def result(self) -> tuple[dict, bool, list[str]]:
        return assess(self.readings, self.max_sm_mhz)
