"""Check every Triton kernel on the CPU under TRITON_INTERPRET=1, at small awkward shapes.

Run as `python -m kernelab.lab.interpret` with TRITON_INTERPRET=1 in the environment (the
interpreter must be chosen before Triton is imported, hence a subprocess); prints one JSON
list of check results. The lab uses it on machines without a GPU.
"""

from __future__ import annotations

import json
import os
import sys

# (implementation, op, shape, dtype): a prime column count, one row, a strided row, K=65.
CASES = [
    ("triton.vector_add", "vector_add", {"n": 1031}, "fp32"),
    ("triton.softmax", "softmax", {"rows": 7, "cols": 127}, "fp32"),
    ("triton.softmax", "softmax", {"rows": 1, "cols": 1031}, "bf16"),
    ("triton.softmax", "softmax", {"rows": 5, "cols": 100, "stride": 131}, "fp32"),
    ("triton.layernorm", "layernorm", {"rows": 5, "cols": 127}, "fp32"),
    ("triton.rmsnorm", "rmsnorm", {"rows": 3, "cols": 257}, "bf16"),
    ("triton.matmul", "gemm", {"m": 17, "n": 33, "k": 65}, "bf16"),
]


def run_cases() -> list[dict]:
    from kernelab.harness.check import check_implementation
    from kernelab.spec.registry import get

    results = []
    for name, op, shape, dtype in CASES:
        try:
            report = check_implementation(
                get(name).build(), op, shape, dtype, trials=1, device="cpu"
            )
            results.append({"implementation": name, "op": op, "shape": shape, "dtype": dtype,
                            "ok": report.ok, "error": report.error,
                            "threshold": report.threshold, "message": report.message})  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a broken kernel is a result, not a crash
            results.append({"implementation": name, "op": op, "shape": shape, "dtype": dtype,
                            "ok": False, "error": None, "threshold": None,
                            "message": f"{type(exc).__name__}: {exc}"})  # fmt: skip
    return results


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 before running this module", file=sys.stderr)
        return 2
    print(json.dumps(run_cases()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
