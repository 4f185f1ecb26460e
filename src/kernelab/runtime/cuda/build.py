"""Compile a .cu file to a cubin with nvcc, once: the result is cached on disk.

The cache key is a hash of the source, every header it includes with `#include "..."`,
the flags and the nvcc release, so an edit to any of them rebuilds and nothing else does.
Each entry keeps the cubin, the ptxas report (`-Xptxas -v`) and a small JSON index, under
$KERNELAB_CACHE/cubins (default ~/.cache/kernelab/cubins). A machine without nvcc (the GPU
box may have none) can still use entries built elsewhere with the same source and flags:
point KERNELAB_CACHE at a copied cache directory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError, MissingToolError
from kernelab.runtime.cuda.ptxas import PtxasReport, parse_ptxas

KERNEL_DIR = Path(__file__).parents[2]  # the kernelab package: .cu files ship as its package data
DEFAULT_ARCH = "sm_90"
NO_NVCC = "nvcc not found; install the CUDA toolkit or put nvcc on PATH"

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# A source that needs Hopper-only instructions (wgmma, setmaxnreg, ...) says so in a comment:
#   // kernelab-arch: sm_90a
_ARCH_PRAGMA = re.compile(r"//\s*kernelab-arch:\s*(sm_\w+)")


@dataclass
class BuildResult:
    """A compiled cubin and what ptxas said about each kernel in it."""

    source: Path
    cubin: Path
    arch: str
    flags: tuple[str, ...]
    reports: dict[str, PtxasReport] = field(default_factory=dict)  # kernel name -> report
    ptxas_log: str = ""
    nvcc: str | None = None  # the nvcc release that built it
    cached: bool = False  # True when this call found it in the cache

    def report(self, kernel: str) -> PtxasReport:
        if kernel not in self.reports:
            raise KernelabError(
                f"{self.source.name}: no kernel '{kernel}' in the ptxas report "
                f"(found: {', '.join(sorted(self.reports)) or 'none'})"
            )
        return self.reports[kernel]

    def to_dict(self) -> dict:
        return {
            "source": str(self.source),
            "cubin": str(self.cubin),
            "arch": self.arch,
            "flags": list(self.flags),
            "nvcc": self.nvcc,
            "cached": self.cached,
            "reports": {k: r.to_dict() for k, r in self.reports.items()},
        }


CompiledKernel = BuildResult  # the name the brief uses for the same thing


def cache_dir() -> Path:
    from kernelab.harness.cache import cache_dir as kernelab_cache

    return kernelab_cache() / "cubins"


FALLBACK_CUDA_HOMES = ("/usr/local/cuda",)


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *FALLBACK_CUDA_HOMES):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


@functools.cache
def _nvcc_release(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"


def source_path(name: str | os.PathLike) -> Path:
    """A .cu file by path, or by its name relative to the kernelab package."""
    path = Path(name)
    if path.is_file():
        return path.resolve()
    packaged = KERNEL_DIR / path
    if packaged.is_file():
        return packaged
    raise KernelabError(f"CUDA source '{name}' not found (looked in {KERNEL_DIR})")


def arch_flags(arch: str) -> list[str]:
    """nvcc flags that produce SASS for exactly `arch` (e.g. sm_90, sm_90a, sm_100a)."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise KernelabError(f"bad CUDA architecture '{arch}'; expected e.g. sm_90 or sm_90a")
    if arch[-1] in "af":  # arch-specific features (wgmma, tcgen05) need a matching compute_
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


def _source_with_headers(path: Path, seen: set[Path] | None = None) -> bytes:
    """The bytes of `path` followed by those of every local header it includes, recursively."""
    seen = set() if seen is None else seen
    if path in seen:
        return b""
    seen.add(path)
    data = path.read_bytes()
    chunks = [data]
    for header in _INCLUDE.findall(data.decode("utf-8", errors="replace")):
        candidate = (path.parent / header).resolve()
        if candidate.is_file():
            chunks.append(_source_with_headers(candidate, seen))
    return b"\0".join(chunks)


def default_arch_for(path: Path) -> str:
    match = _ARCH_PRAGMA.search(path.read_text(errors="replace"))
    return match.group(1) if match else DEFAULT_ARCH


def _first_errors(log: str, limit: int = 3) -> str:
    lines = [line.strip() for line in log.splitlines() if "error" in line.lower()]
    lines = lines or [line.strip() for line in log.splitlines() if line.strip()]
    return " | ".join(lines[:limit]) or "no message"


def _run_nvcc(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def build(
    source: str | os.PathLike,
    *,
    arch: str | None = None,
    defines: dict[str, object] | None = None,
    extra_flags: tuple[str, ...] | list[str] = (),
    force: bool = False,
) -> BuildResult:
    """Compile `source` to a cubin (or find it in the cache) and return the result.

    `arch` defaults to the source's `// kernelab-arch:` comment, else sm_90. `defines` become
    -DNAME=VALUE (how the tuned steps instantiate tile configurations).
    """
    path = source_path(source)
    arch = arch or default_arch_for(path)
    flags = (
        "-cubin",
        "-O3",
        *arch_flags(arch),
        "-lineinfo",
        "-Xptxas",
        "-v",
        "-std=c++17",
        *(f"-D{k}={v}" for k, v in sorted((defines or {}).items())),
        *extra_flags,
    )
    nvcc = find_nvcc()
    release = _nvcc_release(nvcc) if nvcc else None
    digest = hashlib.sha256(_source_with_headers(path) + b"\0" + "\0".join(flags).encode())
    entry = cache_dir() / f"{path.stem}-{digest.hexdigest()[:20]}"
    cubin, log_file, index = (entry.with_suffix(s) for s in (".cubin", ".ptxas.txt", ".json"))

    if not force and cubin.is_file() and index.is_file():
        meta = json.loads(index.read_text())
        if release is None or meta.get("nvcc") == release:
            log = log_file.read_text() if log_file.is_file() else ""
            return BuildResult(
                path, cubin, arch, flags, parse_ptxas(log), log, meta.get("nvcc"), True
            )
    if nvcc is None:
        raise MissingToolError(NO_NVCC)

    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry.parent) as scratch:
        out = Path(scratch) / "out.cubin"
        command = [nvcc, *flags, "-I", str(path.parent), "-o", str(out), str(path)]
        result = _run_nvcc(command)
        log = result.stderr + result.stdout
        if result.returncode != 0 or not out.is_file():
            raise KernelabError(f"nvcc failed on {path.name} ({arch}): {_first_errors(log)}")
        # Write the log and index first and the cubin last, each by an atomic rename, so a
        # reader that sees the cubin also sees the rest (other processes share this cache).
        for target, text in (
            (log_file, log),
            (index, json.dumps({"nvcc": release, "flags": flags})),
        ):
            tmp = Path(scratch) / target.name
            tmp.write_text(text)
            os.replace(tmp, target)
        os.replace(out, cubin)
    return BuildResult(path, cubin, arch, flags, parse_ptxas(log), log, release, False)
