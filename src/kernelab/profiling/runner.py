"""The small program `kernelab profile NAME` runs under ncu.

    python -m kernelab.profiling.runner NAME --shape '{"m": 2048, "n": 2048, "k": 2048}'
        --dtype bf16 [--warmup 3] [--range kernelab_profile]

It builds the registered implementation and its inputs, runs it `--warmup` times (Triton
autotuning and compilation, cuBLAS heuristics, lazy module loading all happen here), then
runs it once more inside the NVTX push/pop range `--range`. ncu is told to profile only
kernels inside that range, so the warm-up and autotuning launches are never the profiled
ones, however many kernels they launch.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernelab.errors import KernelabError, one_line_failures

PROFILE_RANGE = "kernelab_profile"
DEFAULT_WARMUP = 3


def run(name: str, shape: dict, dtype: str, *, warmup: int, range_name: str) -> None:
    import torch

    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    if not torch.cuda.is_available():
        raise KernelabError("no CUDA GPU visible to the profiled process")
    impl = registry.get(name)
    op = get_op(impl.op)
    fn = impl.build()
    inputs = op.make_inputs(shape, dtype, seed=0, device="cuda")
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(range_name)
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


@one_line_failures
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.profiling.runner")
    parser.add_argument("name")
    parser.add_argument("--shape", required=True, help="the op's shape as a JSON object")
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--range", dest="range_name", default=PROFILE_RANGE)
    args = parser.parse_args(argv)
    try:
        shape = json.loads(args.shape)
    except json.JSONDecodeError as exc:
        raise KernelabError(f"--shape is not JSON ({exc})") from None
    if args.warmup < 0:
        raise KernelabError(f"--warmup must be 0 or more, got {args.warmup}")
    run(args.name, shape, args.dtype, warmup=args.warmup, range_name=args.range_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
