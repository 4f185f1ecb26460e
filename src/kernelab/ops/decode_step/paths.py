"""The four ways to run one decode step (and their variants), on one block and one input.

  eager             the torch block (block.eager_module): dozens of kernels launched one by
                    one from Python, most of them a few microseconds: at batch 1 the host's
                    launch rate, not the GPU, can set the pace
  compiled          torch.compile(mode="reduce-overhead"): Inductor fuses the elementwise
                    work (norms, RoPE, SiLU-gate, residual adds) into a few Triton kernels,
                    the GEMVs stay cuBLAS, and the step is replayed from a CUDA graph
  graphed-eager     the eager block captured once in a CUDA graph (torch.cuda.CUDAGraph) and
                    replayed: the same kernels as eager, without the host between them
  kernelab-graphed  the block from kernelab's kernels (kernelab_forward), captured and
                    replayed: GEMVs streaming W (ops/gemv), one fused add + RMSNorm, RoPE in
                    place over the q and k heads in one launch, one cache append for K and V,
                    SwiGLU fused; attention is torch's scaled_dot_product_attention (flash
                    decoding on the GPU), not a kernelab kernel
  kernelab-splitkv-graphed  the same block with kernelab's own attention instead of torch's
                    (ops/decode_attention: split over the KV length, the query heads of one
                    KV head in one program, a second pass combining the splits)

"kernelab" and "kernelab-splitkv" (the same kernels launched eagerly) are what the CPU tests
run under Triton's interpreter, and show the host cost the graph removes.

Every path writes the new token's K and V into slot L of the block's cache and returns
out[batch, hidden]. The graphed paths return the graph's static output, overwritten by the
next replay: clone it to keep it.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.ops.decode_step.block import DecodeBlock, check_step, eager_module

PATHS = ("eager", "compiled", "graphed-eager", "kernelab-graphed", "kernelab-splitkv-graphed",
         "kernelab", "kernelab-splitkv")  # fmt: skip
GRAPHED = ("compiled", "graphed-eager", "kernelab-graphed", "kernelab-splitkv-graphed")
ATTENTION = ("sdpa", "split_kv")
WARMUP_CALLS = 3  # compile, autotune, load: none of it may happen inside a capture


def kernelab_forward(block: DecodeBlock, length: int, positions, attention: str = "sdpa"):
    """The block from kernelab's torch ops; forward(x) -> out. Launches at batch 1 (each
    GEMV one kernel, or two with a K split): rmsnorm, qkv GEMV, rope_, cache append,
    attention (torch's SDPA, or kernelab's split-KV kernel and its combine), o GEMV,
    add_rmsnorm, gate/up GEMV, swiglu, down GEMV, residual add."""
    import torch.nn.functional as F

    from kernelab.ops.torch_ops import add_rmsnorm, ops

    if attention not in ATTENTION:
        raise KernelabError(f"decode step: attention must be one of {', '.join(ATTENTION)}, "
                            f"got {attention!r}")  # fmt: skip
    k_ops, c = ops(), block.config
    rotated = c.heads + c.kv_heads  # q and k heads, adjacent in qkv: one RoPE launch
    kv = block.kv

    def forward(x):
        b = x.shape[0]
        normed = k_ops.rmsnorm(x, block.attn_norm, c.eps)
        qkv = k_ops.gemv(normed, block.wqkv).view(b, c.heads + 2 * c.kv_heads, c.head_dim)
        k_ops.rope_(qkv[:, :rotated], block.cos, block.sin, positions)
        # K and V of the new token side by side in qkv: one copy appends both
        kv[:, :, :, length] = qkv[:, c.heads :].view(b, 2, c.kv_heads, c.head_dim)
        if attention == "split_kv":
            attended = k_ops.decode_attention(qkv[:, : c.heads], kv[:, 0], kv[:, 1], length + 1)
        else:
            attended = F.scaled_dot_product_attention(
                qkv[:, : c.heads].unsqueeze(2), kv[:, 0, :, : length + 1],
                kv[:, 1, :, : length + 1], enable_gqa=True,
            )  # fmt: skip
        o = k_ops.gemv(attended.reshape(b, c.q_width), block.wo)
        h, y = add_rmsnorm(o, x, block.mlp_norm, c.eps)  # h: the residual stream
        gate_up = k_ops.gemv(y, block.w_gate_up)
        act = k_ops.swiglu(gate_up[:, : c.intermediate], gate_up[:, c.intermediate :])
        # in a stack of blocks this add fuses into the next block's add_rmsnorm
        return h + k_ops.gemv(act, block.w_down)

    return forward


class Graphed:
    """fn(x) captured once in a CUDA graph on a side stream (after warm-up calls there, as
    torch's CUDA-graph notes ask) and replayed: x is copied into the captured input."""

    def __init__(self, fn, x):
        import torch

        self.torch = torch
        self.static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                fn(self.static_x)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=side):
            self.static_out = fn(self.static_x)
        torch.cuda.synchronize()

    def __call__(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_out


def _compiled(block: DecodeBlock, length: int):
    import torch

    module = eager_module(block, length)
    # fixed addresses: cudagraph trees then neither copy the weights and the cache into the
    # graph's inputs on every replay nor refuse the cache's in-place append
    for tensor in module.buffers():
        torch._dynamo.mark_static_address(tensor)
    compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)

    def step(x):
        torch.compiler.cudagraph_mark_step_begin()  # the previous replay's output may go
        return compiled(x)

    return step


def make_step(path: str, block: DecodeBlock, length: int, x):
    """A callable step(x) -> out[batch, hidden] for `path`, at KV length `length`; x is an
    example input (checked here, and the graphs' first captured value)."""
    import torch

    if path not in PATHS:
        raise KernelabError(f"decode step: unknown path {path!r}; paths: {', '.join(PATHS)}")
    check_step(block, x, length)
    if path in GRAPHED and block.device.type != "cuda":
        raise KernelabError(f"decode step: the {path} path needs a CUDA GPU (CUDA graphs)")
    if path in ("eager", "graphed-eager"):
        fn = eager_module(block, length)
    elif path == "compiled":
        step = _compiled(block, length)
        for _ in range(WARMUP_CALLS):  # compile and record the graph outside any timing
            step(x)
        return step
    else:
        positions = torch.full((block.batch,), length, dtype=torch.int64, device=block.device)
        attention = "split_kv" if path.startswith("kernelab-splitkv") else "sdpa"
        fn = kernelab_forward(block, length, positions, attention)
    return Graphed(fn, x) if path in GRAPHED else fn
