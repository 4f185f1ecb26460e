"""Read the SASS (the machine code the GPU runs) of a cubin, without a GPU.

The source says what we asked for; the SASS says what we got. A float4 load is only a
128-bit load if `LDG.E.128` is there; cp.async is only asynchronous if `LDGSTS` is there;
a kernel only avoids local memory if there is no `LDL`/`STL`. cuobjdump ships with the CUDA
toolkit and, on machines without one, inside the Triton wheel (triton/backends/nvidia/bin).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from kernelab.errors import KernelabError, MissingToolError

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0060*/   @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;" -> the opcode with its modifiers
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
# the same line with its address and operands (the branch target of a BRA among them)
_ADDRESSED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


@functools.cache
def find_tool(name: str) -> str | None:
    """A CUDA binary utility (cuobjdump, nvdisasm): PATH, CUDA home, then the Triton wheel."""
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    # Find the wheel without importing it: importing Triton here would fix its mode for the
    # whole process, and a later TRITON_INTERPRET=1 (the CPU tests) would no longer apply.
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        bundled = Path(root) / "backends" / "nvidia" / "bin" / name
        if bundled.is_file():
            return str(bundled)
    return None


def disassemble(cubin: str | os.PathLike) -> str:
    """The whole SASS listing of `cubin` (cuobjdump -sass)."""
    tool = find_tool("cuobjdump")
    if tool is None:
        raise MissingToolError(
            "cuobjdump not found; install the CUDA toolkit or the triton wheel that bundles it"
        )
    result = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True)
    if result.returncode != 0:
        raise KernelabError(f"cuobjdump failed on {cubin}: {result.stderr.strip()[:200]}")
    return result.stdout


def functions(listing: str) -> dict[str, list[str]]:
    """Opcodes (with modifiers, e.g. 'LDG.E.128') of each function in a SASS listing."""
    result: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = result.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTRUCTION.match(line)):
            current.append(m.group(1))
    return result


def main_loop(listing: str, loads: str = "LDG") -> list[str]:
    """Opcodes of the shortest loop (a backward branch's body) that holds an instruction
    starting with `loads`: a streaming kernel's main loop, a GEMV's K loop; [] when none."""
    code = [(int(a, 16), op, rest) for a, op, rest in _ADDRESSED.findall(listing)]
    loops = []
    for address, op, rest in code:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < address:
            body = [o for a, o, _ in code if int(target.group(1), 16) <= a <= address]
            if any(o.startswith(loads) for o in body):
                loops.append(body)
    return min(loops, key=len) if loops else []


def loop_report(cubin: bytes) -> dict:
    """A compiled kernel's main loop as opcode counts ("loop") and its local-memory
    instructions, anywhere in it ("local": spills), from the cubin's bytes."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        listing = disassemble(file.name)
    whole = Counter(op for _, op, _ in _ADDRESSED.findall(listing))
    return {"loop": Counter(main_loop(listing)),
            "local": sum(n for op, n in whole.items() if op.split(".")[0] in ("LDL", "STL"))}  # fmt: skip


def opcode_counts(cubin: str | os.PathLike, kernel: str) -> Counter:
    """How often each opcode appears (statically) in `kernel`'s SASS."""
    listing = functions(disassemble(cubin))
    if kernel not in listing:
        raise KernelabError(f"no function '{kernel}' in {cubin} (found: {', '.join(listing)})")
    return Counter(listing[kernel])


def has(counts: Counter, prefix: str) -> bool:
    """True when some opcode equals `prefix` or starts with `prefix` followed by a modifier."""
    return any(op == prefix or op.startswith(prefix + ".") for op in counts)


def sass_facts(cubin: str | os.PathLike, kernel: str) -> dict[str, int]:
    """The SASS facts the ladder's claims rest on, as static instruction counts."""
    counts = opcode_counts(cubin, kernel)

    def total(predicate) -> int:
        return sum(n for op, n in counts.items() if predicate(op))

    return {
        "ffma": total(lambda op: op.split(".")[0] == "FFMA"),
        "ldg_128": total(lambda op: op.startswith("LDG") and ".128" in op),
        "ldg": total(lambda op: op.startswith("LDG.")),
        "lds_128": total(lambda op: op.startswith("LDS") and ".128" in op),
        "lds": total(lambda op: op.split(".")[0] == "LDS"),
        "ldgsts": total(lambda op: op.startswith("LDGSTS")),
        "ldgsts_128": total(lambda op: op.startswith("LDGSTS") and ".128" in op),
        "local_loads": total(lambda op: op.split(".")[0] == "LDL"),
        "local_stores": total(lambda op: op.split(".")[0] == "STL"),
        "stg_128": total(lambda op: op.startswith("STG") and ".128" in op),
    }
