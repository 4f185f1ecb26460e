"""SwiGLU's fused activation, out = silu(gate) * up: the public entry (the kernel is
teaching.py, small enough to be read whole). gate_up_gemv.py fuses it one step further, into
the decode GEMV that produces gate and up (gate_up_swiglu).

gate and up of one shape [..., cols] (row strides free, columns contiguous: gate_up[:, :c]
and gate_up[:, c:] need no copy). BLOCK 1024 columns at 4 warps: 8 values a thread, two
16-byte loads per input at bf16 (a rule of thumb, no record under benchmarks/results/ yet).
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.swiglu.gate_up_gemv import gate_up_swiglu
from kernelab.ops.swiglu.teaching import swiglu_kernel
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import interpreting

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BLOCK = 1024
INTERPRETER_BLOCK = 16
__all__ = ["gate_up_swiglu", "swiglu"]


def _rows(t, cols):
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    t = t.reshape(-1, cols)
    return t if t.stride(-1) == 1 else t.contiguous()


def swiglu(gate, up):
    """silu(gate) * up in gate's dtype (fp32 math)."""
    if gate.shape != up.shape or gate.dim() < 1:
        raise KernelabError(f"swiglu needs gate and up of one shape, got {tuple(gate.shape)} "
                            f"and {tuple(up.shape)}")  # fmt: skip
    if gate.dtype != up.dtype or gate.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"swiglu needs gate and up of one dtype among fp32, bf16, fp16, "
                            f"got {gate.dtype} and {up.dtype}")  # fmt: skip
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    if gate.numel() == 0:
        return out
    cols = gate.shape[-1]
    _planned(_rows(gate, cols), _rows(up, cols), out.view(-1, cols))
    return out


@planned("triton.swiglu", tensors=3)
def _planned(g2, u2, o2) -> None:
    """The launch on rows of gate, up and out (out new: the last tensor, left out of the key);
    planned (launch_plans): later calls of a signature replay it."""
    cols = g2.shape[1]
    block = INTERPRETER_BLOCK if interpreting() else BLOCK
    grid = (g2.shape[0], triton.cdiv(cols, block))
    swiglu_kernel[grid](g2, u2, o2, cols, g2.stride(0), u2.stride(0), o2.stride(0),
                        BLOCK=block, num_warps=4)  # fmt: skip


PLANS = _planned.plans  # the launch plans (tests read and reset them)
