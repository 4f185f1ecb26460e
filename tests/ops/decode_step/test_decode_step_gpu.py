"""The four decode-step paths at Llama-3-8B's shapes on a GPU (marked gpu): eager, torch.compile
(reduce-overhead), CUDA-graphed eager and the graphed kernelab block with torch's or
kernelab's split-KV attention (and both launched eagerly), each against the float64 reference step at batch 1 and 4, KV length 1K
(and 8K at batch 1), on two inputs: the graphed paths must give the reference of the second
input too (the captured input is refilled, the replay recomputes everything), and every path
must write the new token's K and V into slot L of the cache."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelab.harness.tolerances import threshold  # noqa: E402
from kernelab.ops.decode_step import (  # noqa: E402
    LLAMA3_8B,
    PATHS,
    build,
    error_budget,
    make_input,
    make_step,
    reference_step,
    step_error,
)

CASES = [(1, 1024), (4, 1024), (1, 8192)]


@pytest.mark.gpu
@pytest.mark.parametrize("batch, length", CASES, ids=[f"b{b}-L{n}" for b, n in CASES])
def test_every_path_matches_the_float64_step_at_llama3_8b(batch, length):
    import torch._dynamo

    torch._dynamo.reset()
    block = build(LLAMA3_8B, batch=batch, capacity=length + 1, dtype="bf16", device="cuda")
    inputs = [make_input(block, seed=seed) for seed in (1, 2)]
    references = [reference_step(block, x, length) for x in inputs]
    eager_errors = []
    for x, (ref, _, _) in zip(inputs, references, strict=True):
        eager_errors.append(step_error(make_step("eager", block, length, x)(x), ref))
    assert max(eager_errors) <= threshold("bf16"), f"eager: {eager_errors}"
    budget = error_budget("bf16", max(eager_errors))
    failures = []
    for path in PATHS:
        step = make_step(path, block, length, inputs[0])
        for i, (x, (ref, k, v)) in enumerate(zip(inputs, references, strict=True)):
            out = step(x).clone()
            torch.cuda.synchronize()
            error = step_error(out, ref)
            k_error = step_error(block.kv[:, 0, :, length], k)
            v_error = step_error(block.kv[:, 1, :, length], v)
            if max(error, k_error, v_error) > budget:
                failures.append(f"{path} input {i}: out {error:.3g}, k {k_error:.3g}, "
                                f"v {v_error:.3g} > {budget:.3g}")  # fmt: skip
        del step
    assert not failures, "; ".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["eager", "kernelab-graphed"])
def test_kernelab_timeline_runs_on_the_benchmark_loop(tmp_path, capsys, path):
    """The documented command: `kernelab timeline -- python3 benchmarks/decode_step.py
    --timeline PATH`: the script's loop marks each token, the capture records the steps asked
    for and finds the step's kernels (the graph's too)."""
    import json
    from pathlib import Path

    from kernelab.cli import main

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "decode_step.py"
    argv = ["timeline", "--out", str(tmp_path / path), "--steps", "3", "--warmup", "2", "--json",
            "--", "python", str(script), "--timeline", path, "--length", "1024", "--steps", "10"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capture"]["steps"] == 3 and data["unit"] == "kernel"
    assert len(data["top"]) >= 5  # GEMVs, norms, RoPE, attention, ...
