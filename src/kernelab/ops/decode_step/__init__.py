"""One decode step of a Llama-style transformer block with a KV cache: the public entry.

    config.py  DecodeConfig (LLAMA3_8B, TINY) and step_cost: bytes and FLOPs per step, the
               memory-bound floor
    block.py   build() random weights and a filled cache, make_input(), check_step() (one
               line for bad input), reference_step() in float64, eager_module() (plain torch)
    accuracy.py  step_error and error_budget: a step against the float64 reference
    paths.py   make_step(path, ...) for the four paths (eager, compiled, graphed-eager,
               kernelab-graphed) and the ungraphed kernelab path

    block = build(LLAMA3_8B, batch=1, capacity=1025, device="cuda")
    x = make_input(block)
    step = make_step("kernelab-graphed", block, 1024, x)
    out = step(x)            # the token at position 1024 through the block; K, V in slot 1024

docs/ops/decode_step.md walks through each path and the byte accounting;
benchmarks/decode_step.py times them per token.
"""

from __future__ import annotations

from kernelab.ops.decode_step.accuracy import ERROR_FACTOR, error_budget, step_error
from kernelab.ops.decode_step.block import (
    DecodeBlock,
    build,
    check_step,
    eager_module,
    make_input,
    reference_step,
)
from kernelab.ops.decode_step.config import LLAMA3_8B, TINY, DecodeConfig, StepCost, step_cost
from kernelab.ops.decode_step.paths import GRAPHED, PATHS, Graphed, kernelab_forward, make_step

__all__ = [
    "ERROR_FACTOR",
    "GRAPHED",
    "LLAMA3_8B",
    "PATHS",
    "TINY",
    "DecodeBlock",
    "DecodeConfig",
    "Graphed",
    "StepCost",
    "build",
    "check_step",
    "eager_module",
    "error_budget",
    "kernelab_forward",
    "make_input",
    "make_step",
    "reference_step",
    "step_cost",
    "step_error",
]
