"""This GPU's real ceilings: the copy bandwidth and the cuBLAS GEMM peaks, measured and cached.

The datasheet says what the chip could do; these say what it does here, today, with this
driver. A kernel at 95 % of the measured copy bandwidth is done; at 95 % of the datasheet
figure it would be a miracle (the H200 copies at ~4.28 of its 4.8 TB/s).

Measured:
  copy   dst.copy_(src), buffers of 2 GiB (1 GiB with quick): read + write = 4 GiB per call
  read   a read-only pass over 4 GiB (1 GiB with quick), no writes: the roof of a reduction,
         which reads and does not write (the copy roof pays for writes it never makes). The
         kernel is the caller's (kernelab.probes.bandwidth.hbm_read, passed in by
         `kernelab ceilings` and the reduction ladder: this floor may not import probes).
  fp32   torch.mm with TF32 off          4096^3, 8192^3
  tf32   torch.mm with TF32 on           4096^3, 8192^3
  bf16   torch.mm                        4096^3, 8192^3
  fp16   torch.mm                        4096^3, 8192^3
  fp8    torch._scaled_mm, e4m3 inputs   4096^3, 8192^3 (compute capability 8.9 and up)
each in cold mode (L2 flushed), the median of each shape, the best shape kept (quick mode:
4096 only). Inputs are random normals: zeros would let the tensor cores idle on power.

The results are cached as JSON per device and driver under the user's cache directory;
KERNELAB_CEILINGS (or the `path` argument) points at a committed file instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError, NoGPUError
from kernelab.harness.cache import cache_dir, safe_name
from kernelab.harness.records import (
    MachineRun,
    committed_card_dir,
    read_json,
    utc_now,
    write_atomically,
)
from kernelab.output import note

SCHEMA_VERSION = 1
GIB = 1024**3
GEMM_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
BANDWIDTH_CEILINGS = ("copy", "read")  # bytes/s; the rest are FLOP/s


@dataclass(frozen=True)
class DeviceIdentity:
    index: int
    name: str  # as the device reports it, e.g. "NVIDIA H200"
    gpu_id: str | None  # catalog id, None when the catalog does not know the chip
    driver: str | None
    compute_capability: tuple[int, int]

    @property
    def key(self) -> str:
        """The name the cache files of this device carry."""
        return self.gpu_id or safe_name(self.name)

    @property
    def spec(self):
        if self.gpu_id is None:
            return None
        from kernelab.hardware.catalog import get_gpu

        return get_gpu(self.gpu_id)


def catalog_id_for(device_name: str) -> str | None:
    """The catalog id of a reported device name ("NVIDIA H200" -> "h200"), or None."""
    from kernelab.hardware.detect import match_catalog

    spec = match_catalog(device_name)
    return spec.id if spec else None


def this_gpu(command: str = "kernelab") -> DeviceIdentity:
    """The current CUDA device; NoGPUError "<command> needs a CUDA GPU; none found" without."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(f"{command} needs a CUDA GPU; none found")
    from kernelab.harness.gpu_clocks import driver_version

    index = torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    return DeviceIdentity(
        index=index,
        name=name,
        gpu_id=catalog_id_for(name),
        driver=driver_version(),
        compute_capability=tuple(torch.cuda.get_device_capability(index)),
    )


@dataclass
class Ceiling:
    name: str  # "copy" or a dtype in GEMM_DTYPES
    unit: str  # "bytes/s" (copy) or "FLOP/s"
    rate: float  # the best shape's median rate
    median_ms: float
    rel_noise: float
    shape: dict
    datasheet: float | None  # the catalog figure in the same unit, None when unknown
    tried: list[dict] = field(default_factory=list)  # every shape: shape, median_ms, rate

    @property
    def ratio(self) -> float | None:
        return self.rate / self.datasheet if self.datasheet else None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "ratio": self.ratio}


@dataclass
class MeasuredCeilings(MachineRun):
    ceilings: dict[str, Ceiling]
    versions: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["ceilings"] = {name: c.to_dict() for name, c in self.ceilings.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> MeasuredCeilings:
        try:
            ceilings = {}
            for name, c in data["ceilings"].items():
                fields = {f.name for f in dataclasses.fields(Ceiling)}
                ceilings[name] = Ceiling(**{k: v for k, v in c.items() if k in fields})
            return cls(
                gpu=data["gpu"],
                gpu_id=data.get("gpu_id"),
                driver=data.get("driver"),
                timestamp=data["timestamp"],
                quick=bool(data.get("quick", False)),
                ceilings=ceilings,
                versions=data.get("versions", {}),
                warnings=data.get("warnings", []),
                schema_version=data.get("schema_version", SCHEMA_VERSION),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise KernelabError(f"not a measured-ceilings document (missing {exc})") from None

    def to_ceilings(self):
        """kernelab.roofline.model.Ceilings from these figures; None without a copy figure."""
        from kernelab.roofline.model import Ceilings

        copy = self.ceilings.get("copy")
        if copy is None:
            return None
        peaks = {
            name: c.rate for name, c in self.ceilings.items() if name not in BANDWIDTH_CEILINGS
        }
        date = self.timestamp[:10]
        return Ceilings(
            self.gpu_id or safe_name(self.gpu), peaks, copy.rate, f"measured on {self.gpu}, {date}"
        )


# --- the cache ----------------------------------------------------------------------------


def cache_path(identity: DeviceIdentity) -> Path:
    driver = safe_name(identity.driver or "unknown")
    return cache_dir() / "ceilings" / f"{identity.key}-driver-{driver}.json"


def save_measured(measured: MeasuredCeilings, path: str | Path) -> Path:

    path = Path(path)
    write_atomically(path, json.dumps(measured.to_dict(), indent=1) + "\n")
    return path


def load_measured(path: str | Path) -> MeasuredCeilings:

    path = Path(path)
    data = read_json(path, "ceilings file")
    if not isinstance(data, dict):
        raise KernelabError(f"{path} is not a measured-ceilings document")
    try:
        return MeasuredCeilings.from_dict(data)
    except KernelabError as exc:
        raise KernelabError(f"{path}: {exc}") from None


def cached_for(identity: DeviceIdentity) -> MeasuredCeilings | None:
    path = cache_path(identity)
    return load_measured(path) if path.exists() else None


def measured_ceilings_for(spec, path: str | Path | None = None):
    """The measured Ceilings (kernelab.roofline.model) for a catalog GPU, or None.

    Looks at `path`, else $KERNELAB_CEILINGS, else the newest cached measurement of that
    GPU (any driver). A file measured on another GPU gives None, never its figures.
    """
    explicit = path or os.environ.get("KERNELAB_CEILINGS")
    if explicit:
        measured = load_measured(explicit)
        if measured.gpu_id != spec.id:
            note(f"{explicit} holds ceilings of {measured.gpu_id or measured.gpu}, not {spec.id}")
            return None
        return measured.to_ceilings()
    folder = cache_dir() / "ceilings"
    found = []
    for file in sorted(folder.glob(f"{safe_name(spec.id)}-driver-*.json")):
        try:
            found.append(load_measured(file))
        except KernelabError as exc:
            note(f"ignoring a damaged ceilings cache: {exc}")
    found = [m for m in found if m.gpu_id == spec.id]
    if not found:
        return None
    return max(found, key=lambda m: m.timestamp).to_ceilings()


def committed_measured(spec) -> tuple[MeasuredCeilings, Path] | None:
    """The committed ceilings of a catalog GPU (benchmarks/results/<card>/ceilings.json[.xz] in
    a source checkout) and their path, or None: measured on that GPU, never another's."""

    folder = committed_card_dir(spec.id)
    if folder is None:
        return None
    for path in (folder / "ceilings.json", folder / "ceilings.json.xz"):
        if path.is_file():
            measured = load_measured(path)
            return (measured, path) if measured.gpu_id == spec.id else None
    return None


def measured_or_committed(spec, path: str | Path | None = None):
    """(Ceilings, where they come from) for a catalog GPU, or None: `path`, $KERNELAB_CEILINGS
    or this user's cache first (measured_ceilings_for), then the committed records of that card
    (committed_measured). What `kernelab roofline --ceilings measured` reads."""
    measured = measured_ceilings_for(spec, path)
    if measured is not None:
        return measured, str(path or os.environ.get("KERNELAB_CEILINGS") or "the ceilings cache")
    committed = committed_measured(spec)
    if committed is None:
        return None
    found, where = committed
    return found.to_ceilings(), f"the committed records ({where.parent.name}/{where.name})"


# --- measuring ----------------------------------------------------------------------------


def _datasheet(spec, name: str) -> float | None:
    if spec is None:
        return None
    if name in BANDWIDTH_CEILINGS:
        return spec.bandwidth_bytes_per_s
    return spec.peak_flops(name) if name in spec.peak_tflops else None


def _best(name: str, unit: str, tried: list[tuple[dict, object, float]], spec) -> Ceiling:
    """The Ceiling of the fastest of the (shape, timing, work) attempts; work in bytes or FLOPs."""
    attempts = [
        {
            "shape": shape,
            "median_ms": t.median_ms,
            "rate": work / (t.median_ms * 1e-3),
            "rel_noise": t.rel_noise,
        }
        for shape, t, work in tried
    ]
    top = max(attempts, key=lambda a: a["rate"])
    return Ceiling(
        name=name,
        unit=unit,
        rate=top["rate"],
        median_ms=top["median_ms"],
        rel_noise=top["rel_noise"],
        shape=top["shape"],
        datasheet=_datasheet(spec, name),
        tried=attempts,
    )


def _measure_copy(torch, quick: bool, max_time_s: float, warnings: list[str]):
    from kernelab.harness.timing import benchmark

    buffer_bytes = (1 if quick else 2) * GIB
    free, _ = torch.cuda.mem_get_info()
    while 2 * buffer_bytes > 0.8 * free and buffer_bytes > 64 * 1024**2:
        buffer_bytes //= 2
    if buffer_bytes < (1 if quick else 2) * GIB:
        warnings.append(
            f"copy measured with {buffer_bytes / GIB:.2f} GiB buffers: too little free memory"
        )
    src = torch.empty(buffer_bytes // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    timing = benchmark(lambda: dst.copy_(src), mode="cold", max_time_s=max_time_s)
    # Traffic: every byte of src read once and every byte of dst written once.
    traffic = 2 * buffer_bytes
    return [({"bytes_per_buffer": buffer_bytes}, timing, traffic)]


def _gemm_fn(torch, dtype: str, size: int):
    m = n = k = size
    if dtype == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        # _scaled_mm wants b column-major: the transpose of a row-major [n, k].
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        scale = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(
            a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16
        )
    torch_dtype = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[dtype]
    a = torch.randn(m, k, device="cuda", dtype=torch_dtype)
    b = torch.randn(k, n, device="cuda", dtype=torch_dtype)
    return lambda: torch.mm(a, b)


def _measure_gemm(torch, dtype: str, sizes, max_time_s: float):
    from kernelab.harness.timing import benchmark
    from kernelab.spec.math_modes import fp32_matmul

    tried = []
    for size in sizes:
        fn = _gemm_fn(torch, dtype, size)
        with fp32_matmul(tf32=dtype == "tf32"):
            timing = benchmark(fn, mode="cold", max_time_s=max_time_s)
        # 2 FLOPs (multiply, add) per term of each of the m*n dot products of length k.
        tried.append(({"m": size, "n": size, "k": size}, timing, 2.0 * size**3))
        del fn
        torch.cuda.empty_cache()
    return tried


def _measure_read(torch, read_probe, quick: bool, max_time_s: float, warnings: list[str]):
    """One read-only pass over a large buffer with `read_probe(nbytes, max_time_s=...)` ->
    (bytes read per call, Timing), the buffer shrunk to fit the free memory."""
    nbytes = (1 if quick else 4) * GIB
    free, _ = torch.cuda.mem_get_info()
    while nbytes > 0.8 * free and nbytes > 64 * 1024**2:
        nbytes //= 2
    if nbytes < (1 if quick else 4) * GIB:
        warnings.append(f"read measured over {nbytes / GIB:.2f} GiB: too little free memory")
    read_bytes, timing = read_probe(nbytes, max_time_s=max_time_s)
    return [({"bytes_read": read_bytes}, timing, read_bytes)]


def add_read_ceiling(measured: MeasuredCeilings, read_probe, *, quick: bool = False) -> Ceiling:
    """Measure the read-only ceiling on the current GPU and add it to `measured` (a cached
    document from before the read ceiling existed); returns it."""
    identity = this_gpu("kernelab ceilings")
    if measured.gpu_id != identity.gpu_id or measured.gpu != identity.name:
        raise KernelabError(f"these ceilings are of {measured.gpu}, not of {identity.name}")
    import torch

    from kernelab.harness.timing import device_memory_guard

    with device_memory_guard():
        note(f"measuring read-only bandwidth on {identity.name}")
        attempts = _measure_read(torch, read_probe, quick, 0.5 if quick else 2.0, measured.warnings)
        measured.ceilings["read"] = _best("read", "bytes/s", attempts, identity.spec)
    return measured.ceilings["read"]


def read_rate(measured: MeasuredCeilings | None) -> float | None:
    """The measured read-only bandwidth in bytes/s, None when it was not measured."""
    if measured is None or "read" not in measured.ceilings:
        return None
    return measured.ceilings["read"].rate


def measure_ceilings(*, quick: bool = False, read_probe=None) -> MeasuredCeilings:
    """Measure the current GPU's copy bandwidth and GEMM peaks (NoGPUError without a GPU),
    and its read-only bandwidth when a `read_probe` is given (see _measure_read)."""
    identity = this_gpu("kernelab ceilings")
    import torch

    from kernelab.environment import software_versions
    from kernelab.harness.timing import device_memory_guard

    spec = identity.spec
    max_time_s = 0.5 if quick else 2.0
    sizes = (4096,) if quick else (4096, 8192)
    warnings: list[str] = []
    results: dict[str, Ceiling] = {}
    with device_memory_guard():
        note(f"measuring copy bandwidth on {identity.name}")
        results["copy"] = _best(
            "copy", "bytes/s", _measure_copy(torch, quick, max_time_s, warnings), spec
        )
        torch.cuda.empty_cache()
        if read_probe is not None:
            note(f"measuring read-only bandwidth on {identity.name}")
            attempts = _measure_read(torch, read_probe, quick, max_time_s, warnings)
            results["read"] = _best("read", "bytes/s", attempts, spec)
            torch.cuda.empty_cache()
        for dtype in GEMM_DTYPES:
            if dtype == "fp8" and identity.compute_capability < (8, 9):
                warnings.append("fp8 skipped: needs compute capability 8.9 or newer")
                continue
            note(f"measuring {dtype} GEMM peak ({', '.join(f'{s}^3' for s in sizes)})")
            try:
                tried = _measure_gemm(torch, dtype, sizes, max_time_s)
            except (RuntimeError, TypeError) as exc:
                if isinstance(exc, torch.cuda.OutOfMemoryError):
                    raise
                first = (
                    str(exc).strip().splitlines()[0][:160]
                    if str(exc).strip()
                    else type(exc).__name__
                )
                warnings.append(f"{dtype} GEMM not measured: {first}")
                continue
            results[dtype] = _best(dtype, "FLOP/s", tried, spec)
    versions = dict(software_versions())
    versions["cuda_runtime"] = torch.version.cuda
    return MeasuredCeilings(
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        timestamp=utc_now(),
        quick=quick,
        ceilings=results,
        versions=versions,
        warnings=warnings,
    )
