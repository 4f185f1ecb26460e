"""Compiles the late-summed m = 1 kernels (ops/quant_gemv/late.py, the gate/up GEMV's
gate_up_late_kernel) for sm_90 in forms given as JSON and prints, per form, the opcode counts
of its K loop's body and its local-memory instructions. Run as a script by
test_quant_gemv_compile.py in a process without TRITON_INTERPRET (no GPU needed)."""

import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernelab.ops.quant_gemv.late import int4_late_kernel, per_channel_late_kernel
from kernelab.ops.swiglu.gate_up_gemv import gate_up_late_kernel
from kernelab.runtime.cuda.sass import loop_report

# kernel -> (the function, its pointer and integer arguments' types, the constant strides, the
# arguments a launch at K % 16 == 0 and aligned tensors marks divisible by 16)
KERNELS = {
    "int8": (per_channel_late_kernel,
             {"x_ptr": "*bf16", "q_ptr": "*i8", "scale_ptr": "*fp32", "out_ptr": "*bf16"},
             {"sxk": 1, "sqk": 1, "INT8": True}, ("sqn",)),
    "fp8": (per_channel_late_kernel,
            {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "out_ptr": "*bf16"},
            {"sxk": 1, "sqk": 1, "INT8": False}, ("sqn",)),
    "int4": (int4_late_kernel,
             {"xw_ptr": "*i32", "p_ptr": "*u8", "s_ptr": "*fp16", "z_ptr": "*u8",
              "out_ptr": "*bf16"},
             {"ssg": 1, "szg": 1, "GROUP": 128, "ZERO": 8, "X_BF16": True}, ("spn",)),
    "gate_up": (gate_up_late_kernel,
                {"x_ptr": "*bf16", "wg_ptr": "*bf16", "wu_ptr": "*bf16", "out_ptr": "*bf16"},
                {"sxk": 1, "sgk": 1, "suk": 1, "FUSE": True}, ("sgn", "sun")),
}  # fmt: skip
INTS = ("N", "K", "k_per_split", "sqn", "spn", "ssn", "szn", "sgn", "sun", "s_split", "s_half")


def build(kind, constants, warps, stages):
    fn, pointers, fixed, strides = KERNELS[kind]
    constants = {**fixed, **constants, "STAGES": stages}
    index = fn.arg_names.index
    signature = {}
    for name in fn.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
        else:
            assert name in INTS, name
            signature[name] = "i32"
    aligned_names = [*pointers, "N", "K", "k_per_split", "s_split", *strides]
    aligned = {(index(n),): [["tt.divisibility", 16]] for n in aligned_names}
    source = ASTSource(fn=fn, signature=signature, attrs=aligned,
                       constexprs={(index(n),): v for n, v in constants.items()})  # fmt: skip
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})  # fmt: skip
    return loop_report(compiled.asm["cubin"])


if __name__ == "__main__":
    forms = json.loads(sys.argv[1])  # name: [kind, constants, warps, stages]
    print(json.dumps({name: build(*args) for name, args in forms.items()}))
