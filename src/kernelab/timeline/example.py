"""The inference example: a small transformer in plain torch, at decode and prefill shapes.

Each layer is a pre-norm Llama-style block: RMSNorm, one fused QKV projection, attention
through F.scaled_dot_product_attention, the output projection, RMSNorm, a SiLU-gated MLP
(gate and up fused in one projection), residual adds. Three workloads:

  decode        batch 1, one new token attending to a KV cache of `context` tokens: every
                GEMM is a matrix-vector product that reads its whole weight for 2 FLOPs per
                element (memory-bound), and each kernel is a few microseconds, as short as
                its launch, so the GPU idles between them (launch-bound)
  prefill       `batch` sequences of `seq` tokens: GEMMs with M = batch*seq, far right of the
                ridge, on the tensor cores (compute-bound)
  decode-graph  the decode step captured once in a CUDA graph and replayed: one launch for
                every kernel of the step, so the gaps between kernels close

Run it as a workload (each iteration calls kernelab.timeline.step()):
    kernelab timeline -- python -m kernelab.timeline.example --mode decode
On a machine without a GPU it runs in fp32 on the CPU at a tenth of the width.
"""

from __future__ import annotations

import argparse
import math
import time

MODES = ("decode", "prefill", "decode-graph")


def model_config(device: str) -> dict:
    """The model's dimensions: ~0.1 B parameters per 4 layers on a GPU, tiny on a CPU."""
    if device == "cuda":
        return {"layers": 4, "d_model": 2048, "heads": 16, "ffn": 5632, "context": 1024}
    return {"layers": 2, "d_model": 128, "heads": 4, "ffn": 352, "context": 64}


def build_model(config: dict, *, device: str, dtype):
    """The layer stack as a torch.nn.Module (built here so importing this file needs no
    torch)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d_model: int, heads: int, ffn: int):
            super().__init__()
            self.heads = heads
            self.attn_norm = nn.RMSNorm(d_model, eps=1e-6)
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
            self.out = nn.Linear(d_model, d_model, bias=False)
            self.mlp_norm = nn.RMSNorm(d_model, eps=1e-6)
            self.gate_up = nn.Linear(d_model, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, d_model, bias=False)

        def forward(self, x, cache_k, cache_v):
            batch, tokens, d_model = x.shape
            head_dim = d_model // self.heads
            q, k, v = self.qkv(self.attn_norm(x)).split(d_model, dim=-1)
            q = q.view(batch, tokens, self.heads, head_dim).transpose(1, 2)
            if cache_k is None:  # prefill: the sequence attends to itself, causally
                k = k.view(batch, tokens, self.heads, head_dim).transpose(1, 2)
                v = v.view(batch, tokens, self.heads, head_dim).transpose(1, 2)
                attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # decode: the new token attends to the cache (kept fixed, as in a benchmark)
                attended = F.scaled_dot_product_attention(q, cache_k, cache_v)
            attended = attended.transpose(1, 2).reshape(batch, tokens, d_model)
            x = x + self.out(attended)
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(
                Block(config["d_model"], config["heads"], config["ffn"])
                for _ in range(config["layers"])
            )

        def forward(self, x, caches=None):
            for i, block in enumerate(self.blocks):
                k, v = caches[i] if caches is not None else (None, None)
                x = block(x, k, v)
            return x

    with torch.no_grad():
        model = Model().to(device=device, dtype=dtype).eval()
        for p in model.parameters():
            p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    return model


def make_workload(mode: str, *, device: str | None = None, batch: int = 16, seq: int = 512):
    """A zero-argument callable running one step of `mode` (and the config it uses)."""
    import torch

    if mode not in MODES:
        from kernelab.errors import unknown

        raise unknown("mode", mode, MODES)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if mode == "decode-graph" and device != "cuda":
        from kernelab.errors import NoGPUError

        raise NoGPUError("decode-graph captures a CUDA graph: it needs a CUDA GPU")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = model_config(device)
    if device != "cuda":
        batch, seq = min(batch, 2), min(seq, 32)
    model = build_model(config, device=device, dtype=dtype)
    d_model, heads = config["d_model"], config["heads"]
    head_dim = d_model // heads
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=generator)

    if mode == "prefill":
        x = randn(batch, seq, d_model)
        caches = None
    else:
        x = randn(1, 1, d_model)
        caches = [
            (
                randn(1, heads, config["context"], head_dim),
                randn(1, heads, config["context"], head_dim),
            )
            for _ in range(config["layers"])
        ]

    @torch.inference_mode()
    def step():
        return model(x, caches)

    if mode != "decode-graph":
        return step, {**config, "mode": mode, "batch": batch if mode == "prefill" else 1}

    # One decode step captured in a graph, after the side-stream warm-up capture needs (the
    # harness timer's own graph capture); replay() launches all of its kernels at once.
    from kernelab.harness.timing import capture_graph

    graph = capture_graph(step, torch, 1)
    return graph.replay, {**config, "mode": mode, "batch": 1}


def wall_ms_per_step(fn, *, steps: int = 50, device: str = "cuda") -> float:
    """Host wall-clock time per call of fn, launches included: what a server sees per decode
    step. (The harness timer measures device time and would hide the launch gaps.)"""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - start) * 1e3 / steps


def main(argv: list[str] | None = None) -> int:
    import kernelab.timeline

    parser = argparse.ArgumentParser(prog="python -m kernelab.timeline.example")
    parser.add_argument("--mode", choices=MODES, default="decode")
    parser.add_argument("--iterations", type=int, default=100, help="steps to run at most")
    parser.add_argument("--batch", type=int, default=16, help="prefill batch")
    parser.add_argument("--seq", type=int, default=512, help="prefill sequence length")
    args = parser.parse_args(argv)
    step, config = make_workload(args.mode, batch=args.batch, seq=args.seq)
    for _ in range(args.iterations):
        step()
        kernelab.timeline.step()
    print(f"example: {config}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
