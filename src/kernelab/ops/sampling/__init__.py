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
    if logits.shape[0]:
        _launch(probs_kernel, logits, out, params)
    return out


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
    out = torch.empty((logits.shape[0],), dtype=torch.int64, device=logits.device)
    if logits.shape[0]:
        _launch(sample_kernel, logits, out, params, (key, logits.shape[0]))
    return out
