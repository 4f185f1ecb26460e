"""Build a CUDA ladder step for the CPU: its .cu sources compiled by g++ with
cuda_host_emulation.hpp included first (threads, shared memory, barriers and atomics on the
host), linked with the ladder's test driver into a shared library, cached by the content of
every source and flag, and loaded. The callers set `emulate`'s argument types.
`sparse_zeros` gives the buffers past 2^32 elements that index-arithmetic tests run the last
blocks of a grid over."""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
from pathlib import Path

import numpy as np

from kernelab.runtime.cuda import build as cuda_build

TESTS = Path(__file__).resolve().parent
EMULATION_HEADER = TESTS / "cuda_host_emulation.hpp"


def emulated_library(name: str, include_dir: Path, units: list[Path], flags: list[str],
                     depends: tuple[Path, ...] = ()) -> ctypes.CDLL:  # fmt: skip
    """units compiled as C++ with `flags` (-I include_dir and tests/); `depends`: files the
    units include that the cache key must also cover (common.cuh is always one)."""
    sources = [*units, include_dir / "common.cuh", EMULATION_HEADER, *depends]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + " ".join(flags).encode())
    library = cuda_build.cache_dir().parent / "emulation" / f"{name}-{digest.hexdigest()[:16]}.so"
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        tmp = library.with_suffix(".tmp.so")
        command = [
            "g++", "-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-fno-strict-aliasing",
            "-Wno-unknown-pragmas", f"-I{TESTS}", f"-I{include_dir}",
            "-include", EMULATION_HEADER.name, *flags,
            *(arg for unit in units for arg in ("-x", "c++", str(unit))), "-o", str(tmp),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]
        tmp.replace(library)
    lib = ctypes.CDLL(str(library))
    lib.emulate.restype = ctypes.c_int
    return lib


def sparse_zeros(count: int, dtype) -> np.ndarray | None:
    """A zeroed numpy array of `count` items backed by an anonymous private mapping that
    reserves no memory (MAP_NORESERVE on Linux): only the pages a test touches are ever
    allocated, so a buffer past 2^32 elements costs a few pages when an emulated kernel runs
    only its last blocks. None where the system refuses the mapping (the caller skips)."""
    import mmap
    import sys

    nbytes = count * np.dtype(dtype).itemsize
    noreserve = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)
    try:
        mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | noreserve)
    except (OSError, OverflowError, ValueError):
        return None
    return np.frombuffer(mapping, dtype=dtype, count=count)
