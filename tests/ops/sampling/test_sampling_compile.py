"""The sampling kernels compile for Hopper (sm_90) with this Triton, no GPU needed: every
parameter form (scalars, per-row tensors) and logits dtype; the fast kernels keep their
state in registers (no local-memory stack: a spill would add traffic to every pass) and read
rows of 16-byte-aligned length (every real vocabulary here) with 16-byte loads (LDG.E.128),
as Triton specialises them at launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Compiles in a process without TRITON_INTERPRET; prints {kernel: [registers, stack bytes]}.
_PROBE = """
import json, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelab.runtime.cuda.sass import disassemble, find_tool
from kernelab.ops.sampling.rejection import sample_kernel
from kernelab.ops.sampling.threshold import probs_kernel

def build(kernel, signature, constexprs):
    signature = {**signature, **{name: "constexpr" for name in constexprs}}
    index = kernel.arg_names.index
    aligned = {(index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "out_ptr", "vocab", "stride")}
    source = ASTSource(fn=kernel, signature=signature, attrs=aligned, constexprs={
        (index(n),): v for n, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 16})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([find_tool("cuobjdump"), "-res-usage", cubin.name],
                               capture_output=True, text=True).stdout
        wide = "LDG.E.128" in disassemble(cubin.name)
    registers, stack = (int(v) for v in re.search(r"REG:(\\d+) STACK:(\\d+)", usage).groups())
    return [registers, stack, wide]

rows, dtype = sys.argv[1] == "rows", sys.argv[2]
signature = {"x_ptr": "*" + dtype, "out_ptr": "*fp32", "t_ptr": "*fp32" if rows else "fp32",
             "k_ptr": "*i32" if rows else "i32", "p_ptr": "*fp32" if rows else "fp32",
             "mp_ptr": "*fp32" if rows else "fp32", "vocab": "i32", "stride": "i64"}
flags = {"T_ROWS": rows, "K_ROWS": rows, "P_ROWS": rows, "MP_ROWS": rows, "BLOCK": 4096}
sample = {**signature, "out_ptr": "*i64", "seed": "i64", "rows": "i32"}
print(json.dumps({"probs": build(probs_kernel, signature, flags),
                  "sample": build(sample_kernel, sample, flags)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("form", "dtype"), [("scalars", "fp32"), ("rows", "bf16")])
def test_the_fast_kernels_compile_for_hopper_without_spills(form, dtype):
    from kernelab.runtime.cuda.sass import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump (the Triton wheel carries it)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    probe = subprocess.run([sys.executable, "-c", _PROBE, form, dtype], capture_output=True,
                           text=True, env=env, timeout=600)  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    usage = json.loads(probe.stdout.strip().splitlines()[-1])
    for kernel, (registers, stack, wide) in usage.items():
        assert stack == 0, f"{kernel} spills {stack} bytes ({registers} registers)"
        assert registers <= 255, kernel
        assert wide or dtype != "fp32", f"{kernel} reads fp32 rows without 16-byte loads"
