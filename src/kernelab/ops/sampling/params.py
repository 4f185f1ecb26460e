"""The sampling entries' input checks and the Philox key of a (seed, offset) pair.

Each parameter is a Python number (one value for every row, passed to the kernel as a scalar:
no allocation, no copy) or a tensor[batch] on the logits' device (one value per row). A
tensor's values are checked on the host, which costs one device synchronisation per call;
`validate=False` skips it, and then an out-of-range value gets what the kernels compute for
it, never a hang or a read outside the row: top_p above 1 or NaN and a negative top_k act as
off, a negative or NaN temperature as greedy, a min_p above 1 keeps nothing (token -1, NaN
probabilities).
"""

from __future__ import annotations

import numbers

from kernelab.errors import KernelabError

TEACHING_MAX_VOCAB = 16384  # the teaching kernel keeps (and sorts) the whole row in registers
MASK64 = (1 << 64) - 1

# name, lowest allowed, low end open?, highest allowed, high end open?, integer?
_RULES = {
    "temperature": (0.0, False, float("inf"), True, False),
    "top_k": (0, False, float("inf"), True, True),
    "top_p": (0.0, True, 1.0, False, False),
    "min_p": (0.0, False, 1.0, True, False),
}


def _range_text(name: str) -> str:
    low, low_open, high, high_open, _ = _RULES[name]
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return f"{left}{low:g}, {high:g}{right}"


def _in_range(name: str, value: float) -> bool:
    low, low_open, high, high_open, _ = _RULES[name]
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return above and below


def _check_scalar(name: str, value):
    integer = _RULES[name][4]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise KernelabError(
            f"{name} must be a number or a tensor[batch], got {type(value).__name__}"
        )
    if integer and not isinstance(value, numbers.Integral):
        raise KernelabError(f"top_k must be an integer, got {value!r}")
    if not _in_range(name, float(value)):
        raise KernelabError(f"{name} must lie in {_range_text(name)}, got {value!r}")
    return min(int(value), (1 << 31) - 1) if integer else float(value)


def _check_tensor(name: str, value, batch: int, device, validate: bool):
    import torch

    if value.dim() == 0:
        value = value.reshape(1).expand(batch)
    if tuple(value.shape) != (batch,):
        raise KernelabError(
            f"{name} needs one value per row, shape ({batch},), got {tuple(value.shape)}"
        )
    if value.device != device:
        raise KernelabError(f"{name} is on {value.device} but the logits are on {device}")
    integer = _RULES[name][4]
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise KernelabError(f"top_k must hold integers, got {value.dtype}")
    if not integer and not value.is_floating_point():
        raise KernelabError(f"{name} must hold floating-point values, got {value.dtype}")
    if integer and value.dtype == torch.int64:
        value = value.clamp(max=(1 << 31) - 1)  # any k >= vocab is off; int32 in the kernel
    value = value.to(torch.int32 if integer else torch.float32).contiguous()
    if validate and batch:
        low, low_open, high, high_open, _ = _RULES[name]
        bad = value.isnan() if not integer else torch.zeros_like(value, dtype=torch.bool)
        bad = bad | ((value <= low) if low_open else (value < low))
        bad = bad | ((value >= high) if high_open else (value > high))
        if bool(bad.any()):
            first = int(torch.nonzero(bad)[0])
            raise KernelabError(f"{name} must lie in {_range_text(name)}, got {value[first].item()!r} "
                                f"at row {first}")  # fmt: skip
    return value


def prepare(logits, temperature, top_k, top_p, min_p, *, per_row: bool, validate: bool = True):
    """(logits with contiguous rows, (temperature, top_k, top_p, min_p)): each parameter a
    tensor[batch] (per_row, or given as one) or a checked Python number."""
    import torch

    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise KernelabError(f"sampling needs logits[batch, vocab], got {shape}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise KernelabError(f"sampling supports fp32, bf16 and fp16 logits, not {logits.dtype}")
    batch, vocab = logits.shape
    if vocab == 0:
        raise KernelabError("sampling needs a vocabulary of at least one token, got vocab 0")
    if vocab >= 1 << 31:
        raise KernelabError(f"sampling indexes the vocabulary in int32, got vocab {vocab}")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    params = []
    for name, value in zip(_RULES, (temperature, top_k, top_p, min_p), strict=True):
        if isinstance(value, torch.Tensor):
            params.append(_check_tensor(name, value, batch, logits.device, validate))
            continue
        value = _check_scalar(name, value)
        if per_row:
            dtype = torch.int32 if _RULES[name][4] else torch.float32
            value = torch.full((batch,), value, dtype=dtype, device=logits.device)
        params.append(value)
    return logits, tuple(params)


def _mix64(z: int) -> int:
    """splitmix64's finaliser: nearby (seed, offset) pairs give unrelated keys."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def philox_key(seed, offset=0) -> int:
    """The 63-bit Philox key of one call: a function of seed and the per-call offset only."""
    for name, value in (("seed", seed), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise KernelabError(f"{name} must be a non-negative integer, got {value!r}")
    return _mix64(_mix64(int(seed) & MASK64) ^ (int(offset) & MASK64)) >> 1


def seed_of(generator) -> int:
    """A seed drawn from a torch.Generator (advancing it); on a CUDA generator one sync."""
    import torch

    draw = torch.randint(0, 1 << 62, (1,), generator=generator, device=generator.device)
    return int(draw.item())
