"""CuTe-DSL (the `nvidia-cutlass-dsl` package, extra `kernelab[cute]`): is it usable here, and
the cubin of a kernel without a GPU.

Importing this module imports neither cutlass nor torch. `unusable_reason()` answers in one
line why a CuTe-DSL kernel cannot run (package absent, no GPU, a GPU older than Hopper);
`require()` raises that line as a KernelabError, which `kernelab bench` prints as it is.

`lower_to_cubin()` runs the DSL's whole compile pipeline (Python -> MLIR -> NVVM -> ptxas)
and returns the cubin, with no driver and no GPU: the DSL only needs libcuda.so for the
last step of cute.compile, the host-side JIT engine that would launch the kernel. That step
is replaced by one that keeps the compiled module and stops, so CPU tests can lower every
kernel for sm_90a and read its SASS (cuobjdump: HGMMA, UTMALDG, SYNCS ...).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

from kernelab.errors import KernelabError, MissingToolError, NoGPUError

PACKAGE = "nvidia-cutlass-dsl"
VERSION = "4.2.1"  # the pinned release: one 62 MB wheel (later ones split into larger parts)
MIN_CAPABILITY = (9, 0)  # TMA, wgmma, clusters and DSMEM: Hopper and later
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only in the arch-specific target


def package_available() -> bool:
    """Whether `import cutlass.cute` can work (found without importing it)."""
    try:
        return importlib.util.find_spec("cutlass") is not None
    except (ImportError, ValueError):
        return False


def installed_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu_capability() -> tuple[int, int] | None:
    """The compute capability of CUDA device 0, or None without a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(0))


def unusable_reason(capability: tuple[int, int] | None | str = "detect") -> str | None:
    """None when CuTe-DSL kernels can run here, else one line that says why not.

    `capability` stands in for the GPU's (None: no GPU) so the message can be tested on a
    machine without one."""
    if not package_available():
        return f"CuTe-DSL is not installed: pip install 'kernelab[cute]' ({PACKAGE}=={VERSION})"
    cc = _gpu_capability() if capability == "detect" else capability
    if cc is None:
        return "CuTe-DSL kernels need a CUDA GPU of compute capability 9.0+; none found"
    if tuple(cc) < MIN_CAPABILITY:
        return (
            f"CuTe-DSL kernels here use TMA, wgmma and clusters: they need compute capability "
            f"9.0+ (Hopper), this GPU is {cc[0]}.{cc[1]}"
        )
    return None


def require() -> None:
    """Raise the one-line reason as a KernelabError when CuTe-DSL kernels cannot run."""
    reason = unusable_reason()
    if reason is None:
        return
    if not package_available():
        raise MissingToolError(reason)
    raise NoGPUError(reason)


# ---- lowering without a GPU --------------------------------------------------------------


class _Lowered(Exception):
    """Raised in place of building the JIT engine, once the module holds the cubin."""


@contextlib.contextmanager
def _arch(arch: str):
    """Compile for `arch` whatever GPU (none) this machine has: the DSL reads CUTE_DSL_ARCH
    (or asks the driver, else assumes sm_100a) once, into its settings, when it starts."""
    from cutlass.cutlass_dsl import CuTeDSL

    settings = CuTeDSL._get_dsl().envar
    before = settings.arch
    settings.arch = arch
    try:
        yield
    finally:
        settings.arch = before


def lower(jit_function, *args, arch: str = ARCH) -> str:
    """The compiled MLIR module of `cute.compile(jit_function, *args)` as text, after ptxas
    ran (it holds the cubin in a gpu.binary op). Needs the package, not a GPU or a driver."""
    if not package_available():
        raise MissingToolError(unusable_reason(capability=None))
    import cutlass.cute as cute
    from cutlass.base_dsl import compiler

    kept: dict = {}

    def keep_and_stop(self, module, opt_level=2, shared_libs=()):
        kept["module"] = module
        raise _Lowered

    original = compiler.Compiler.jit
    compiler.Compiler.jit = keep_and_stop
    try:
        with _arch(arch):
            cute.compile(jit_function, *args)
    except Exception as exc:  # the DSL wraps _Lowered in its own error
        if "module" not in kept:
            raise KernelabError(f"CuTe-DSL could not lower the kernel: {str(exc)[:300]}") from exc
    finally:
        compiler.Compiler.jit = original
    return str(kept["module"].operation)


def cubins(module_text: str) -> list[bytes]:
    """Every cubin embedded in a lowered module (gpu.binary ... bin = "<escaped ELF>")."""
    found = []
    marker = 'bin = "'
    start = module_text.find(marker)
    while start != -1:
        found.append(_unescape(module_text, start + len(marker)))
        start = module_text.find(marker, start + len(marker))
    return found


def _unescape(text: str, i: int) -> bytes:
    """MLIR's string escapes: \\XX is a byte in hex, \\\\ and \\" themselves; ends at '"'."""
    out = bytearray()
    hexdigits = "0123456789abcdefABCDEF"
    while text[i] != '"':
        if text[i] == "\\":
            pair = text[i + 1 : i + 3]
            if len(pair) == 2 and all(c in hexdigits for c in pair):
                out.append(int(pair, 16))
                i += 3
            else:
                out += text[i + 1].encode()
                i += 2
        else:
            out += text[i].encode()
            i += 1
    return bytes(out)


def lower_to_cubin(jit_function, *args, path: str | os.PathLike, arch: str = ARCH) -> str:
    """Lower `jit_function` for `arch` and write its (first) cubin to `path`; returns path."""
    found = cubins(lower(jit_function, *args, arch=arch))
    if not found:
        raise KernelabError("CuTe-DSL lowered the kernel but its module holds no cubin")
    with open(path, "wb") as f:
        f.write(found[0])
    return str(path)
