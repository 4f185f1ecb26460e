"""Read the resource report that `nvcc -Xptxas -v` prints for every kernel it compiles.

ptxas writes one block per function, for example:

    ptxas info    : Compiling entry function 'sgemm_naive' for 'sm_90'
    ptxas info    : Function properties for sgemm_naive
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem, 424 bytes cmem[0]

Registers bound occupancy, spills turn register traffic into local-memory traffic (LDL/STL)
and the shared-memory figure is the static allocation only (dynamic shared memory is chosen
at launch). Those are the numbers a kernel engineer reads first after every change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass
class PtxasReport:
    """The resources ptxas gave one kernel."""

    kernel: str
    arch: str = ""
    registers: int = 0
    shared_bytes: int = 0  # static shared memory; dynamic shared memory is set at launch
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    constant_bytes: dict[int, int] = field(default_factory=dict)  # bank -> bytes

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel,
            "arch": self.arch,
            "registers": self.registers,
            "shared_bytes": self.shared_bytes,
            "stack_frame_bytes": self.stack_frame_bytes,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "barriers": self.barriers,
            "constant_bytes": {str(k): v for k, v in self.constant_bytes.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> PtxasReport:
        fields = dict(data)
        fields["constant_bytes"] = {int(k): v for k, v in data.get("constant_bytes", {}).items()}
        return cls(**fields)


def parse_ptxas(text: str) -> dict[str, PtxasReport]:
    """Every kernel's report in `text` (nvcc's stderr), keyed by the (mangled) function name.

    Non-entry functions that ptxas also reports (device functions compiled separately)
    appear too; they have no 'Compiling entry function' line and so an empty arch.
    """
    reports: dict[str, PtxasReport] = {}
    current: PtxasReport | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = reports.setdefault(m.group(1), PtxasReport(m.group(1)))
            current.arch = m.group(2)
        elif m := _PROPERTIES.search(line):
            current = reports.setdefault(m.group(1), PtxasReport(m.group(1)))
        elif current is None:
            continue
        elif m := _FRAME.search(line):
            current.stack_frame_bytes = int(m.group(1))
            current.spill_store_bytes = int(m.group(2))
            current.spill_load_bytes = int(m.group(3))
        elif m := _USED.search(line):
            current.registers = int(m.group(1))
            if s := _SMEM.search(line):
                current.shared_bytes = int(s.group(1))
            if b := _BARRIERS.search(line):
                current.barriers = int(b.group(1))
            current.constant_bytes = {int(c[1]): int(c[0]) for c in _CMEM.findall(line)}
    return reports
