"""Sampling from logits: temperature, top-k, top-p (nucleus) and min-p, on the GPU without a
sort. The semantics are kernelab.spec.sampling's (read its docstring first); the kernels:

  teaching.py   the whole row in registers, thresholds read off a sorted copy (small vocab)
  threshold.py  the exact filtered distribution by bisection on the logit, tiled
  rejection.py  top-p sampling by rejection: draw, check the mass above, rarely redraw

`sampling_probs(logits, ...)` -> fp32 probs[batch, vocab] (the registry's checked op);
`sample(logits, ...)` -> int64 token ids[batch] (-1 for a row with nothing drawable).
Parameters are Python numbers (one for every row) or tensors[batch]; see params.py for the
checks and their cost. BLOCK 4096 logits a tile at 16 warps: 8 values a thread, two 16-byte
loads at fp32; the summing passes take two tiles an iteration (32 KiB of fp32 in flight per
program), 81 registers for the sampler compiled for sm_90 (no spill; 8192 a tile spills):
a rule of thumb, no record under benchmarks/results/ backs it yet. Batch 1-64 is fewer rows
than SMs, so one program per row leaves SMs idle; a row split across programs is the next
step once measurements say where the time goes.
"""

from __future__ import annotations

import torch

from kernelab.ops.sampling.params import philox_key, prepare, seed_of
from kernelab.ops.sampling.rejection import sample_kernel
from kernelab.ops.sampling.threshold import probs_kernel
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import interpreting

BLOCK = 4096
INTERPRETER_BLOCK = 256
NUM_WARPS = 16

__all__ = ["sample", "sampling_probs"]


def _launch(kernel, logits, out, params, extra=()):
    batch, vocab = logits.shape
    flags = {f"{name}_ROWS": isinstance(value, torch.Tensor)
             for name, value in zip(("T", "K", "P", "MP"), params, strict=True)}  # fmt: skip
    block = INTERPRETER_BLOCK if interpreting() else BLOCK
    kernel[(batch,)](logits, out, *params, vocab, logits.stride(0), *extra, **flags,
                     BLOCK=min(block, triton_next_power_of_2(vocab)), num_warps=NUM_WARPS)  # fmt: skip


def triton_next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def sampling_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, *, validate=True):
    """The distribution a token is drawn from, fp32[batch, vocab]: NaN rows where nothing is
    drawable, one-hot rows where temperature is 0."""
    logits, params = prepare(logits, temperature, top_k, top_p, min_p, per_row=False,
                             validate=validate)  # fmt: skip
    out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    if not logits.shape[0]:
        return out
    rows = [isinstance(value, torch.Tensor) for value in params]
    if not any(rows):  # Python numbers: replayed as recorded, so they are the plan's key
        _probs_planned(logits, out, *params)
    elif all(rows):  # tensors[batch]: slots of the plan like the logits
        _probs_planned_per_row(logits, *params, out)
    else:  # a mix: the front door (each mix would want a launch function of its own)
        _launch(probs_kernel, logits, out, params)
    return out


# sampling_probs is planned (launch_plans): Triton's binding runs on the first calls of a
# signature, later ones replay. Its parameters are fixed per call site, so a plan serves a
# serving loop; `sample` is not planned: see there.
@planned("triton.sampling_probs", tensors=2, untuned=None)
def _probs_planned(logits, out, temperature, top_k, top_p, min_p) -> None:
    _launch(probs_kernel, logits, out, (temperature, top_k, top_p, min_p))


@planned(_probs_planned.plans, tensors=6)
def _probs_planned_per_row(logits, temperature, top_k, top_p, min_p, out) -> None:
    _launch(probs_kernel, logits, out, (temperature, top_k, top_p, min_p))


PLANS = _probs_planned.plans  # the launch plans (tests read and reset them)


def sample(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, *, seed=None, offset=0,
           generator=None, validate=True):  # fmt: skip
    """Token ids int64[batch]. The randomness is Philox keyed by (seed, offset): the same pair
    gives the same tokens; a decode loop keeps its seed and passes the step as offset. Without
    a seed, one is drawn from `generator` (or torch's default generator)."""
    logits, params = prepare(logits, temperature, top_k, top_p, min_p, per_row=False,
                             validate=validate)  # fmt: skip
    if seed is None:
        seed = seed_of(generator if generator is not None else torch.default_generator)
    key = philox_key(seed, offset)
    # Triton's front door, not a launch plan: the Philox key is a scalar of the launch that a
    # plan would replay as recorded, and it changes every call (a decode loop passes its step
    # as offset; without a seed one is drawn per call), so every call would be a new plan key,
    # recorded and never replayed: the recording's host cost on every call for nothing
    out = torch.empty((logits.shape[0],), dtype=torch.int64, device=logits.device)
    if logits.shape[0]:
        _launch(sample_kernel, logits, out, params, (key, logits.shape[0]))
    return out
