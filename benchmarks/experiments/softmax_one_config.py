"""Run one long-row softmax configuration a few times on the GPU: a target for Nsight Compute.

    ncu --set full -k regex:_softmax_coop -s 2 -c 1 -o coop \
        python3 benchmarks/experiments/softmax_one_config.py --cols 65536 --dtype fp32 \
        --config '{"path": "cooperative", "CHUNK": 4096, "num_warps": 4, "PREFETCH": true}'

The input is --mib of data (rows = mib * 2^20 / (cols * itemsize)); the output is checked
against torch.softmax once, so a profile is never taken of a configuration that is wrong.
"""

from __future__ import annotations

import argparse
import json


def run(module, x, out, config: dict) -> bool:
    """One launch of this configuration's kernel itself (never a fallback). A held config
    runs even where the library does not offer it (another chunk, no L2 prefetch, fp32)."""
    if config.get("path") == "held":
        from kernelab.ops.softmax import held as softmax_held

        return softmax_held._launch(x, out, config)
    return module._run_long_rows(x, out, config)


def main(argv=None) -> int:
    import torch

    from kernelab.ops import softmax as module

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cols", type=int, required=True)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--config", type=json.loads, required=True)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--launches", type=int, default=3)
    args = parser.parse_args(argv)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    rows = (args.mib << 20) // (args.cols * torch.empty((), dtype=dtype).element_size())
    x = torch.randn(rows, args.cols, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    for _ in range(1 + args.launches):
        if not run(module, x, y, args.config):
            raise SystemExit(f"{args.config} cannot be resident at {rows} x {args.cols}")
    torch.cuda.synchronize()
    error = (y.float() - torch.softmax(x.float(), dim=-1)).abs().max().item()
    print(f"{rows} x {args.cols} {args.dtype} {args.config}: max abs error {error:.2e}")
    return 0 if error < 1e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
