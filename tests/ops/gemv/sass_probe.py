"""Compiles the decode GEMV's kernel for sm_90 in forms given as JSON and prints, per form,
the opcode counts of its K loop's body and its local-memory instructions. Run as a script by
test_gemv_compile.py in a process without TRITON_INTERPRET (no GPU needed)."""

import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernelab.ops.gemv.split_k import gemv_split_kernel
from kernelab.runtime.cuda.sass import loop_report


def build(late, block_n, block_k, warps, stages, x_as_tile=False):
    # as a launch at k % 16 == 0 specialises it: unit K strides are constants, pointers and
    # multiples of 16 carry tt.divisibility 16
    index = gemv_split_kernel.arg_names.index
    signature = {
        "x_ptr": "*bf16",
        "w_ptr": "*bf16",
        "out_ptr": "*fp32",
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "k_per_split": "i32",
        "sxm": "i32",
        "sxk": "constexpr",
        "swn": "i32",
        "swk": "constexpr",
        "s_split": "i32",
        "som": "i32",
    }
    constants = {
        "sxk": 1,
        "swk": 1,
        "BLOCK_M": 1,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "USE_DOT": False,
        "IEEE": False,
        "LATE_SUM": late,
        "STAGES": stages,
        "X_AS_TILE": x_as_tile,
    }
    signature.update({name: "constexpr" for name in constants})
    aligned = {
        (index(n),): [["tt.divisibility", 16]]
        for n in (
            "x_ptr",
            "w_ptr",
            "out_ptr",
            "N",
            "K",
            "k_per_split",
            "sxm",
            "swn",
            "s_split",
            "som",
        )
    }
    source = ASTSource(
        fn=gemv_split_kernel,
        signature=signature,
        attrs=aligned,
        constexprs={(index(n),): v for n, v in constants.items()},
    )
    compiled = triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages}
    )
    return loop_report(compiled.asm["cubin"])


if __name__ == "__main__":
    forms = json.loads(sys.argv[1])
    print(json.dumps({name: build(*args) for name, args in forms.items()}))
