"""The compiled replay: a planned call's key and its direct launches done in C.

A replayed Triton op still spends most of its host time in our own Python
(host_cost_breakdown.py on an H100 host where torch.add took 12.3 us a call): the plan key
6.6 us, of which the tensors' signature 5.3, and a direct launch 8.2, of which cuLaunchKernel
through cuda.bindings 5.9. Each is a handful of C calls per tensor (data_ptr, get_device,
shape, stride, dtype) strung together by bytecode, and on a slow host the bytecode is what
puts the small memory-bound ops 2-5 us past torch + 10 us. compiled_replay.c does the same
steps from C: `plan_key` builds the key tuple item for item as LaunchPlans.key() does, and
`launch` writes the call's addresses into a prepared launch's parameter slots and calls
cuLaunchKernel through its address in libcuda, without cuda.bindings' argument conversion.

The C file is built on first use with the machine's C compiler ($CC, cc, gcc or clang)
against Python's headers, as Triton builds its own launchers, into $KERNELAB_CACHE/replay/,
one file per source, Python ABI and machine. Nothing else is needed: no CUDA header, no
libcuda at build time. Where the build or the load fails, `module()` is None and the ops keep
their Python path.

On by default: on an H100 (Triton 3.6) the small ops' host cost over torch's, median of four
runs each, came down from the lean Python path's: vector_add +6.0 -> +3.9 us, softmax +5.4 -> +3.3,
rmsnorm +5.6 -> +0.8, layernorm +3.8 -> +1.3, triton.matmul +0.6-1.1 -> -1.1-1.3.
KERNELAB_COMPILED_REPLAY=0 keeps the Python path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("compiled_replay.c")
MODULE_NAME = "kernelab_compiled_replay"
BUILD_TIMEOUT_S = 120


def enabled_from(environ) -> bool:
    """On unless KERNELAB_COMPILED_REPLAY is "0" (see the module doc)."""
    return environ.get("KERNELAB_COMPILED_REPLAY", "1") != "0"


ENABLED = enabled_from(os.environ)

# why module() or launch_function() is None, for whoever asks (tests, benchmarks)
last_failure: str | None = None


def _cache_dir() -> Path:
    from kernelab.harness.cache import cache_dir

    return cache_dir() / "replay"


def _compiler() -> str | None:
    """$CC, else the first of cc, gcc and clang on the PATH (Triton looks for the same ones
    to build its launchers, so a machine that runs Triton has one)."""
    found = (shutil.which(name) for name in ("cc", "gcc", "clang"))
    return os.environ.get("CC") or next((path for path in found if path), None)


def built_path() -> Path:
    """Where the build of this source for this Python on this machine goes: the name carries a
    hash of the source, the Python ABI, the platform, the C library and the host name. A cache
    copied to another machine (the GPU runs take .kernelab-cache along) then holds no build
    that machine would load, perhaps against another glibc; it builds its own, in a second."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(SOURCE.read_bytes())
    machine = f"{suffix} {sysconfig.get_platform()} {platform.libc_ver()} {platform.node()}"
    digest.update(machine.encode())
    return _cache_dir() / f"{MODULE_NAME}-{digest.hexdigest()[:16]}{suffix}"


def build(target: Path) -> None:
    """Compile SOURCE into the extension `target`; raises with the compiler's first lines."""
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    # built beside the target, then renamed: a process that loads it never sees half a file
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as partial:
        temporary = Path(partial.name)
    try:
        command = [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o",
                   str(temporary)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            first = " | ".join(done.stderr.strip().splitlines()[:3])
            raise RuntimeError(f"{Path(compiler).name} failed: {first}")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _load(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@functools.cache
def module():
    """The built extension (plan_key, prepare, launch), or None with last_failure saying why."""
    global last_failure
    try:
        path = built_path()
        if not path.exists():
            build(path)
        return _load(path)
    except Exception as error:  # no compiler, no headers, a read-only cache: the Python path
        last_failure = f"{type(error).__name__}: {error}"[:300]
        return None


@functools.cache
def launch_function() -> int | None:
    """The address of libcuda's cuLaunchKernel, or None where libcuda cannot be loaded.

    The plain symbol: a launch on an explicit stream handle means the same through it as
    through cuda.bindings' (which resolves the per-thread variant only when asked to)."""
    global last_failure
    try:
        return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    except OSError as error:
        last_failure = f"libcuda: {error}"[:300]
        return None
