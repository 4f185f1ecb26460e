"""One decode step of a Llama-style block (ops/decode_step) on the CPU: the eager torch block
and the block from kernelab's kernels, with torch's or kernelab's split-KV attention (Triton's
interpreter), against the float64 reference
step at a tiny GQA config, the cache written at exactly slot L, successive steps, a
known-wrong step rejected, both paths traced whole by torch.compile, the byte accounting,
and bad input as one-line errors. The four paths at Llama-3-8B's shapes on a GPU are in
test_decode_step_gpu.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, HAS_CUDA, kernel_module  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.harness.tolerances import threshold  # noqa: E402
from kernelab.ops.decode_step import (  # noqa: E402
    LLAMA3_8B,
    TINY,
    DecodeConfig,
    build,
    eager_module,
    error_budget,
    kernelab_forward,
    make_input,
    make_step,
    reference_step,
    step_cost,
    step_error,
)

TRUNCATES = not HAS_CUDA  # the interpreter rounds fp32 -> bf16 toward zero


@pytest.fixture(scope="module", autouse=True)
def _interpreter_builds():
    for name in ("norms", "gemv", "fused_norm", "rope", "swiglu", "decode_attention"):
        kernel_module(name)


def _block(dtype, batch=1, capacity=9, seed=0):
    return build(TINY, batch=batch, capacity=capacity, dtype=dtype, device=DEVICE, seed=seed)


def _run(path, block, length, seed=1):
    x = make_input(block, seed=seed)
    ref, k, v = reference_step(block, x, length)
    out = make_step(path, block, length, x)(x)
    return out, ref, k, v


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("batch, length", [(1, 0), (1, 8), (3, 5)], ids=["b1-L0", "b1-L8", "b3-L5"])
def test_eager_and_kernelab_steps_match_the_reference(dtype, batch, length):
    block = _block(dtype, batch)
    eager_out, ref, k, v = _run("eager", block, length)
    eager_error = step_error(eager_out, ref)
    assert eager_error <= threshold(dtype), f"eager {dtype}: {eager_error:.3g}"
    budget = error_budget(dtype, eager_error, bf16_truncates=TRUNCATES)
    for path in ("kernelab", "kernelab-splitkv"):
        out, ref2, _, _ = _run(path, block, length)
        assert torch.equal(ref, ref2)  # the steps before left slots 0..L-1 as they were
        error = step_error(out, ref)
        assert error <= budget, f"{path} {dtype} b{batch} L{length}: {error:.3g} > {budget:.3g}"


@pytest.mark.parametrize("path", ["eager", "kernelab", "kernelab-splitkv"])
def test_the_step_appends_at_slot_L_and_touches_nothing_else(path):
    block, length = _block("fp32", batch=2, capacity=11), 6
    before = block.kv.clone()
    _, ref, k, v = _run(path, block, length)
    after = block.kv
    others = [s for s in range(block.capacity) if s != length]
    assert torch.equal(after[:, :, :, others], before[:, :, :, others])
    limit = threshold("fp32")
    assert step_error(after[:, 0, :, length], k) <= limit
    assert step_error(after[:, 1, :, length], v) <= limit


def test_successive_steps_fill_successive_slots():
    """Three tokens in a row: each step's reference sees the K and V the steps before wrote."""
    block = _block("fp32", capacity=8)
    for length in (3, 4, 5):
        out, ref, k, _ = _run("kernelab", block, length, seed=length)
        assert step_error(out, ref) <= threshold("fp32")
        assert step_error(block.kv[:, 0, :, length], k) <= threshold("fp32")


def test_a_step_at_the_wrong_position_is_rejected():
    """The checker's teeth: RoPE at position L - 1 instead of L (the off-by-one of a decode
    loop) must fail the fp32 budget by far; so must a NaN."""
    block, length = _block("fp32"), 6
    x = make_input(block)
    ref, _, _ = reference_step(block, x, length)
    wrong = torch.full((1,), length - 1, dtype=torch.int64, device=DEVICE)
    out = kernelab_forward(block, length, wrong)(x)
    assert step_error(out, ref) > 100 * threshold("fp32")
    out[0, 3] = float("nan")
    assert step_error(out, ref) == math.inf


@pytest.mark.parametrize("path", ["eager", "kernelab", "kernelab-splitkv"])
def test_torch_compile_traces_the_whole_step(path):
    """fullgraph=True: the cache append and the kernelab ops (their fake implementations,
    rope_'s in-place write into a view of qkv) trace without a graph break."""
    import torch._dynamo

    torch._dynamo.reset()
    block, length = _block("fp32", batch=2), 4
    x = make_input(block)
    ref, _, _ = reference_step(block, x, length)
    if path == "eager":
        fn = eager_module(block, length)
    else:
        attention = "split_kv" if path.endswith("splitkv") else "sdpa"
        fn = kernelab_forward(block, length, torch.full((2,), length, device=DEVICE), attention)
    out = torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
    assert step_error(out, ref) <= threshold("fp32")


def test_llama3_8b_block_is_its_share_of_the_8b_model():
    """32 such blocks, the embedding and LM head (vocab 128256) and the final norm are
    Llama-3-8B's published 8,030,261,248 parameters."""
    c = LLAMA3_8B
    assert 32 * c.weight_count() + 2 * 128256 * c.hidden + c.hidden == 8_030_261_248


def test_step_cost_counts_weights_once_and_the_kv_per_token():
    c = LLAMA3_8B
    short, long = step_cost(c, 1, 1024), step_cost(c, 1, 8192)
    assert short.weight_bytes == long.weight_bytes == 2 * c.weight_count()
    per_token = 2 * 2 * c.kv_heads * c.head_dim  # K and V, bf16
    assert long.kv_read_bytes - short.kv_read_bytes == (8192 - 1024) * per_token
    assert short.kv_write_bytes == per_token
    batch4 = step_cost(c, 4, 1024)
    assert batch4.weight_bytes == short.weight_bytes  # W read once for the whole batch
    assert batch4.kv_read_bytes == 4 * short.kv_read_bytes
    assert short.floor_us(2.0) == pytest.approx(short.bytes / 2e12 * 1e6)
    assert step_cost(c, 1, 1024, "fp32").weight_bytes == 2 * short.weight_bytes


# --- bad input: one line each ---------------------------------------------------------------


@pytest.fixture(scope="module")
def block():
    return _block("fp32", batch=2)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda b: (torch.zeros(2, TINY.hidden + 1, device=DEVICE), 3), r"\[batch, hidden\]"),
        (lambda b: (torch.zeros(3, TINY.hidden, device=DEVICE), 3), r"\[2, 40\]"),
        (lambda b: (torch.zeros(2, 2, TINY.hidden, device=DEVICE), 3), "x\\[batch, hidden\\]"),
        (lambda b: (torch.zeros(0, TINY.hidden, device=DEVICE), 3), "empty batch"),
        (lambda b: (torch.zeros(2, TINY.hidden, dtype=torch.float64, device=DEVICE), 3),
         "torch.float32"),
        (lambda b: (make_input(b), b.capacity), "beyond the cache"),
        (lambda b: (make_input(b), b.capacity + 100), "beyond the cache"),
        (lambda b: (make_input(b), -1), "KV length"),
        (lambda b: (make_input(b), 2.0), "KV length"),
    ],
    ids=["hidden", "batch", "3-d", "empty", "dtype", "length-at-capacity", "length-past",
         "negative", "float-length"],
)  # fmt: skip
@pytest.mark.parametrize("call", ["reference", "make_step"])
def test_bad_input_is_one_line(block, make, match, call):
    x, length = make(block)
    with pytest.raises(KernelabError, match=match) as raised:
        if call == "reference":
            reference_step(block, x, length)
        else:
            make_step("kernelab", block, length, x)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: build(TINY, batch=0, capacity=4), "empty batch"),
        (lambda: build(TINY, capacity=0), "capacity"),
        (lambda: build(TINY, capacity=4, dtype="int8"), "dtype"),
        (lambda: DecodeConfig(hidden=64, heads=6, kv_heads=4, head_dim=8, intermediate=9),
         "multiple of kv_heads"),
        (lambda: DecodeConfig(hidden=64, heads=4, kv_heads=2, head_dim=7, intermediate=9),
         "even head_dim"),
        (lambda: DecodeConfig(hidden=0, heads=4, kv_heads=2, head_dim=8, intermediate=9),
         "hidden"),
    ],
    ids=["empty-batch", "capacity", "dtype", "gqa", "odd-head-dim", "zero-hidden"],
)  # fmt: skip
def test_bad_configs_are_one_line(call, match):
    with pytest.raises(KernelabError, match=match) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_unknown_and_gpu_only_paths_are_one_line(block):
    x = make_input(block)
    with pytest.raises(KernelabError, match="unknown path 'fast'.*kernelab-graphed"):
        make_step("fast", block, 3, x)
    with pytest.raises(KernelabError, match="attention must be one of sdpa, split_kv"):
        kernelab_forward(block, 3, None, "flash")
    if not HAS_CUDA:
        for path in ("compiled", "graphed-eager", "kernelab-graphed", "kernelab-splitkv-graphed"):
            with pytest.raises(KernelabError, match="needs a CUDA GPU"):
                make_step(path, block, 3, x)
