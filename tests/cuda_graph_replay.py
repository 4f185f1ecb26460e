"""One CUDA-graph check the op tests share: warm up on a side stream (compile, load, tune:
none of it may happen in a capture), capture one call on that stream, then replay on new
values copied into the captured inputs; every replay must give the reference of the new
values."""

from __future__ import annotations

from kernelab.harness.check import compare


def assert_replays_match(call, spec, shape, dtype, *, math_mode=None, expected=None, label=""):
    """`call(*inputs)` captured and replayed on fresh seeds 1 and 2; `expected(static)` the
    reference of the captured inputs (default: the op's reference of them)."""
    import torch

    expected = expected or (lambda inputs: spec.reference(*inputs))
    static = spec.make_inputs(shape, dtype, seed=0, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = call(*static)
    for seed in (1, 2):
        fresh = spec.make_inputs(shape, dtype, seed=seed, device="cuda")
        for captured, new in zip(static, fresh, strict=True):
            if isinstance(captured, torch.Tensor):
                captured.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        result = compare(out, expected(static), dtype=dtype, math_mode=math_mode)
        assert result.ok, f"{label} {shape} {dtype} replay with seed {seed}: {result.message}"
