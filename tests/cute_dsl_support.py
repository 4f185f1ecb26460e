"""What the CuTe-DSL tests share: whether the package and a Hopper GPU are here, lowering a
kernel to an sm_90a cubin on the CPU, and reading its SASS opcodes."""

from __future__ import annotations

from collections import Counter

import pytest

from kernelab.runtime import cute_dsl

HAS_PACKAGE = cute_dsl.package_available()
needs_package = pytest.mark.skipif(not HAS_PACKAGE, reason="nvidia-cutlass-dsl not installed")


def usable_or_skip():
    reason = cute_dsl.unusable_reason()
    if reason is not None:
        pytest.skip(reason)


def sass_opcodes(cubin_path) -> Counter:
    """Opcode -> count over every function of the cubin (cuobjdump from the toolkit or the
    Triton wheel; skipped when neither is here)."""
    from kernelab.runtime.cuda import sass

    if sass.find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    counts: Counter = Counter()
    for opcodes in sass.functions(sass.disassemble(cubin_path)).values():
        counts.update(opcodes)
    return counts


def has_opcode(counts: Counter, prefix: str) -> bool:
    return any(op.startswith(prefix) for op in counts)
