"""The backward kernels compile for Hopper (sm_90) with this Triton, no GPU needed, at the
tile configurations their launchers pick: no local-memory stack (a spill would add traffic
to a kernel whose whole cost is traffic) and 16-byte loads of 16-byte-aligned fp32 rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Compiles in a process without TRITON_INTERPRET; prints {kernel: [registers, stack, wide]}.
_PROBE = """
import json, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelab.runtime.cuda.sass import disassemble, find_tool
from kernelab.ops.norms import backward as norm
from kernelab.ops.softmax import backward as soft

dt = sys.argv[1]
ALIGNED = ("y_ptr", "dy_ptr", "dx_ptr", "x_ptr", "w_ptr", "out_ptr", "n_cols", "y_stride",
           "dy_stride", "dx_stride", "x_stride")

def build(kernel, signature, constexprs, warps):
    index = kernel.arg_names.index
    signature = {**signature, **{name: "constexpr" for name in constexprs}}
    attrs = {(index(n),): [["tt.divisibility", 16]] for n in ALIGNED if n in signature}
    source = ASTSource(fn=kernel, signature=signature, attrs=attrs,
                       constexprs={(index(n),): v for n, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([find_tool("cuobjdump"), "-res-usage", cubin.name],
                               capture_output=True, text=True).stdout
        wide = re.search(r"LDG\\.E\\S*\\.128", disassemble(cubin.name)) is not None
    registers, stack = (int(v) for v in re.search(r"REG:(\\d+) STACK:(\\d+)", usage).groups())
    return [registers, stack, wide]

t = "*" + dt
two_d = {"n_rows": "i32", "n_cols": "i32"}
out = {}
for block in (1024, 8192, soft.SINGLE_PASS_MAX_COLS):
    rows, warps = soft._rows_config(block, 1 << 20)
    sig = {"y_ptr": t, "dy_ptr": t, "dx_ptr": t, **two_d, "y_stride": "i32",
           "dy_stride": "i32", "dx_stride": "i32"}
    out[f"softmax rows {block}"] = build(soft._rows_kernel, sig,
                                         {"BLOCK_N": block, "ROWS": rows}, warps)
for block in (1024, norm.SINGLE_PASS_MAX_COLS):
    rows = max(1, norm.TILE_ELEMENTS // block)
    sig = {"x_ptr": t, "w_ptr": t, "dy_ptr": t, "out_ptr": t, "partial_ptr": "*fp32", **two_d,
           "x_stride": "i32", "dy_stride": "i32", "eps": "fp32"}
    out[f"rmsnorm rows {block}"] = build(norm._rows_kernel, sig, {"BLOCK_N": block, "ROWS": rows},
                                         norm.rows_warps(rows, block))
sig = {"y_ptr": t, "dy_ptr": t, "dx_ptr": t, "dots_ptr": "*fp32", "n_cols": "i32",
       "y_stride": "i32", "dy_stride": "i32", "dx_stride": "i32", "n_chunks": "i32"}
out["softmax split dx"] = build(soft._split_dx_kernel, sig,
                                {"CHUNK": soft.CHUNK, "CHUNKS_POW2": 64}, 8)
sig = {"x_ptr": t, "w_ptr": t, "dy_ptr": t, "out_ptr": t, "partial_ptr": "*fp32",
       "stats_ptr": "*fp32", **two_d, "x_stride": "i32", "dy_stride": "i32"}
out["rmsnorm chunk"] = build(norm._chunk_kernel, sig, {"CHUNK": norm.CHUNK}, 8)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_backward_kernels_compile_for_hopper_without_spills(dtype):
    from kernelab.runtime.cuda.sass import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump (the Triton wheel carries it)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    probe = subprocess.run([sys.executable, "-c", _PROBE, dtype], capture_output=True,
                           text=True, env=env, timeout=600)  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    usage = json.loads(probe.stdout.strip().splitlines()[-1])
    assert len(usage) == 7
    for kernel, (registers, stack, wide) in usage.items():
        assert stack == 0, f"{kernel} spills {stack} bytes ({registers} registers)"
        assert wide or dtype != "fp32", f"{kernel} reads aligned fp32 rows without 16-byte loads"
