"""Rotary position embedding, in place (rope_) or into a new tensor (rope, rope_interleaved:
the registry's form, since a checked implementation must not write into its inputs). The
kernel is teaching.py, small enough to be read whole.

x[tokens, heads, head_dim] (any token and head strides, contiguous head_dim), cos and sin
fp32[positions, head_dim / 2] (kernelab.spec.decode.rope_tables), positions int[tokens].
Heads per program: enough that a program moves about 8 KiB of x (a rule of thumb, no record
under benchmarks/results/ backs it yet).
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.rope.teaching import rope_kernel
from kernelab.runtime.launch_plans import planned

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BYTES_PER_PROGRAM = 8192


def _validate(x, cos, sin, positions) -> None:
    if x.dim() != 3:
        raise KernelabError(f"rope needs x[tokens, heads, head_dim], got {tuple(x.shape)}")
    tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise KernelabError(f"rope needs an even head_dim, got {head_dim}")
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[1] != head_dim // 2:
        raise KernelabError(f"rope needs cos and sin [positions, {head_dim // 2}], got "
                            f"{tuple(cos.shape)} and {tuple(sin.shape)}")  # fmt: skip
    if positions.shape != (tokens,):
        raise KernelabError(f"rope needs positions[{tokens}], got {tuple(positions.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"rope supports fp32, bf16 and fp16 x, not {x.dtype}")
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        raise KernelabError(f"rope needs fp32 cos and sin tables, got {cos.dtype}, {sin.dtype}")
    if positions.dtype not in (torch.int32, torch.int64) or positions.is_floating_point():
        raise KernelabError(f"rope needs int32 or int64 positions, got {positions.dtype}")


def _launch(x, out, cos, sin, positions, interleaved: bool) -> None:
    tokens, heads, head_dim = x.shape
    half = head_dim // 2
    block_half = triton.next_power_of_2(half)
    block_h = triton.next_power_of_2(max(1, min(heads, BYTES_PER_PROGRAM //
                                                 (head_dim * x.element_size()))))  # fmt: skip
    grid = (tokens, triton.cdiv(heads, block_h))
    rope_kernel[grid](x, out, cos, sin, positions, heads, half, cos.shape[0],
                      x.stride(0), x.stride(1), out.stride(0), out.stride(1), cos.stride(0),
                      sin.stride(0), INTERLEAVED=interleaved, BLOCK_H=block_h,
                      BLOCK_HALF=block_half, num_warps=4)  # fmt: skip


# Planned (launch_plans): the tile arithmetic and Triton's binding run on the first calls of
# a signature, later ones replay. `interleaved` is replayed as recorded, so it is in the key.
@planned("triton.rope", tensors=4, untuned=None, fresh=0)
def _planned_in_place(x, cos, sin, positions, interleaved: bool) -> None:
    """rope_: x is read and written (the kernel's out pointer is x's)."""
    _launch(x, x, cos, sin, positions, interleaved)


@planned(_planned_in_place.plans, tensors=5, untuned=None)
def _planned_out_of_place(x, cos, sin, positions, out, interleaved: bool) -> None:
    """rope, rope_interleaved: out is new (the last tensor, left out of the key)."""
    _launch(x, out, cos, sin, positions, interleaved)


PLANS = _planned_in_place.plans  # the launch plans (tests read and reset them)


def _tables(cos, sin, positions):
    """cos and sin with contiguous columns, positions contiguous: made before the planned
    launch, so the kernel only ever sees the call's tensors."""
    cos = cos if cos.stride(-1) == 1 else cos.contiguous()
    sin = sin if sin.stride(-1) == 1 else sin.contiguous()
    return cos, sin, positions if positions.is_contiguous() else positions.contiguous()


def rope_(x, cos, sin, positions, *, interleaved: bool = False):
    """Rotate x in place; returns x. x's head_dim must be contiguous."""
    _validate(x, cos, sin, positions)
    if x.numel() and x.stride(-1) != 1:
        raise KernelabError("rope_ rotates in place: x's head_dim must be contiguous")
    if x.numel():
        _planned_in_place(x, *_tables(cos, sin, positions), bool(interleaved))
    return x


def _out_of_place(x, cos, sin, positions, interleaved: bool):
    _validate(x, cos, sin, positions)
    source = x if x.numel() == 0 or x.stride(-1) == 1 else x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        _planned_out_of_place(source, *_tables(cos, sin, positions), out, interleaved)
    return out


def rope(x, cos, sin, positions):
    """The half-split rotation (GPT-NeoX / Llama's rotate_half) into a new tensor."""
    return _out_of_place(x, cos, sin, positions, False)


def rope_interleaved(x, cos, sin, positions):
    """The interleaved rotation (GPT-J) into a new tensor."""
    return _out_of_place(x, cos, sin, positions, True)
