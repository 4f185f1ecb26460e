"""Split-KV decode attention (ops/decode_attention) against its float64 reference: GQA groups of
1 to 4, head_dims that are no power of two, n from 1 to the whole cache, strided q and cache
views (the decode step's fused qkv and kv[batch, 2, ...] cache), every dtype, on the CPU
interpreter; the split plan; bad input; its torch op. On a GPU (marked gpu): Llama-3-8B's
attention (32 query heads, 8 KV heads, head_dim 128) at KV 1K and 8K, batch 1 and 4, against
the reference and against torch's scaled_dot_product_attention."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, HAS_CUDA, kernel_module  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.harness.tolerances import threshold  # noqa: E402
from kernelab.ops.decode_step import step_error  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# (batch, heads, kv_heads, head_dim, capacity, n)
SHAPES = [
    (1, 4, 2, 10, 40, 37),  # three splits of 16, the last short
    (2, 8, 2, 16, 50, 1),  # one token: softmax of one score is 1
    (3, 3, 1, 12, 70, 70),  # the whole cache, group 3 (padded to 16 rows)
    (1, 4, 4, 8, 20, 17),  # no grouping (MHA)
]


@pytest.fixture(scope="module")
def attention():
    return kernel_module("decode_attention")


def _inputs(batch, heads, kv_heads, head_dim, capacity, dtype, seed=0):
    """q as the first heads of a fused qkv, k and v as the halves of a [b, 2, ...] cache."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(batch, heads + 2 * kv_heads, head_dim, generator=gen)
    kv = torch.randn(batch, 2, kv_heads, capacity, head_dim, generator=gen)
    qkv, kv = qkv.to(DEVICE, DTYPES[dtype]), kv.to(DEVICE, DTYPES[dtype])
    return qkv[:, :heads], kv[:, 0], kv[:, 1]


def _budget(dtype: str) -> float:
    return threshold(dtype, bf16_truncates=not HAS_CUDA)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}-h{}-kv{}-d{}-c{}-n{}".format(*s))
def test_matches_the_reference(attention, shape, dtype):
    batch, heads, kv_heads, head_dim, capacity, n = shape
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, capacity, dtype)
    out = attention.decode_attention(q, k, v, n)
    assert out.shape == q.shape and out.dtype == q.dtype
    error = step_error(out, attention.decode_attention_reference(q, k, v, n))
    assert error <= _budget(dtype), f"{shape} {dtype}: {error:.3g}"


def test_tokens_past_n_are_never_read(attention):
    q, k, v = _inputs(1, 4, 2, 8, 40, "fp32")
    expected = attention.decode_attention(q, k, v, 21)
    k[:, :, 21:], v[:, :, 21:] = float("nan"), float("inf")
    assert torch.equal(attention.decode_attention(q, k, v, 21), expected)


def test_a_wrong_head_mapping_is_rejected(attention):
    """The checker's teeth: KV heads swapped (query head h reading KV head h % kv_heads, the
    interleaved-GQA mistake) fails by far."""
    q, k, v = _inputs(1, 4, 2, 8, 30, "fp32")
    ref = attention.decode_attention_reference(q, k, v, 30)
    wrong = attention.decode_attention(q, k.flip(1), v.flip(1), 30)
    assert step_error(wrong, ref) > 100 * _budget("fp32")


def test_plan_splits_fill_the_gpu_and_cover_every_token(attention):
    for batch, kv_heads, n, sms in [(1, 8, 1025, 132), (1, 8, 8193, 132), (16, 8, 8193, 132),
                                    (1, 8, 1, 132), (1, 8, 70, None)]:  # fmt: skip
        p = attention.plan(batch, kv_heads, n, sms)
        assert p["chunk"] % p["BLOCK_T"] == 0
        assert (p["splits"] - 1) * p["chunk"] < n <= p["splits"] * p["chunk"]  # none empty
        if sms:  # at least one program per SM wherever there are enough token tiles
            tiles = -(-n // p["BLOCK_T"])
            assert batch * kv_heads * p["splits"] >= min(sms, batch * kv_heads * tiles)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: (*_inputs(1, 4, 2, 8, 9, "fp32"), 10), "1 to 9"),
        (lambda: (*_inputs(1, 4, 2, 8, 9, "fp32"), 0), "1 to 9"),
        (lambda: (_inputs(1, 3, 2, 8, 9, "fp32")[0], *_inputs(1, 4, 2, 8, 9, "fp32")[1:], 4),
         "multiple of kv_heads"),
        (lambda: (_inputs(2, 4, 2, 8, 9, "fp32")[0], *_inputs(1, 4, 2, 8, 9, "fp32")[1:], 4),
         "one batch"),
        (lambda: (_inputs(1, 4, 2, 8, 9, "bf16")[0], *_inputs(1, 4, 2, 8, 9, "fp32")[1:], 4),
         "one dtype"),
        (lambda: (_inputs(1, 4, 2, 8, 9, "fp32")[0].transpose(1, 2).transpose(1, 2)[:, :, ::2],
                  *_inputs(1, 4, 2, 4, 9, "fp32")[1:], 4), "contiguous head_dim"),
        (lambda: (torch.zeros(4, 8, device=DEVICE), *_inputs(1, 4, 2, 8, 9, "fp32")[1:], 4),
         "q\\[batch, heads, head_dim\\]"),
    ],
    ids=["n-past", "n-zero", "gqa", "batch", "dtype", "strided-d", "2-d-q"],
)  # fmt: skip
def test_bad_input_is_one_line(attention, make, match):
    with pytest.raises(KernelabError, match=match) as raised:
        attention.decode_attention(*make())
    assert "\n" not in str(raised.value)


def test_empty_batch_gives_an_empty_output(attention):
    q, k, v = _inputs(0, 4, 2, 8, 9, "fp32")
    assert attention.decode_attention(q, k, v, 3).shape == (0, 4, 8)


def test_torch_op_matches_and_passes_opcheck(attention):
    from kernelab.ops.torch_ops import ops

    q, k, v = _inputs(2, 4, 2, 10, 30, "fp32", seed=3)
    expected = attention.decode_attention(q, k, v, 23)
    assert torch.equal(ops().decode_attention(q, k, v, 23), expected)
    torch.library.opcheck(ops().decode_attention.default, (q, k, v, 23))


@pytest.mark.gpu
@pytest.mark.parametrize("batch, n", [(1, 1025), (4, 1025), (1, 8193)])
def test_gpu_llama3_8b_attention(attention, batch, n):
    import torch.nn.functional as F

    q, k, v = _inputs(batch, 32, 8, 128, n, "bf16", seed=batch)
    ref = attention.decode_attention_reference(q, k, v, n)
    sdpa = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True).squeeze(2)
    sdpa_error = step_error(sdpa, ref)
    error = step_error(attention.decode_attention(q, k, v, n), ref)
    assert error <= max(threshold("bf16"), 2 * sdpa_error), f"{error:.3g} (sdpa {sdpa_error:.3g})"


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("decode_attention.teaching")


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}-h{}-kv{}-d{}-c{}-n{}".format(*s))
def test_the_teaching_kernel_matches_the_reference(attention, teaching, shape, dtype):
    batch, heads, kv_heads, head_dim, capacity, n = shape
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, capacity, dtype, seed=5)
    out = teaching.decode_attention(q, k, v, n)
    assert out.shape == q.shape and out.dtype == q.dtype
    error = step_error(out, attention.decode_attention_reference(q, k, v, n))
    assert error <= _budget(dtype), f"{shape} {dtype}: {error:.3g}"


def test_the_teaching_kernel_refuses_what_the_fast_one_refuses(teaching):
    q, k, v = _inputs(1, 4, 2, 8, 20, "fp32")
    with pytest.raises(KernelabError, match="attends 1 to 20"):
        teaching.decode_attention(q, k, v, 21)
    with pytest.raises(KernelabError, match="heads a multiple of kv_heads"):
        teaching.decode_attention(q[:, :3], k, v, 4)
