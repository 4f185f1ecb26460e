"""Rotary embedding (ops/rope): both layouts against the float64 reference at awkward shapes
in every dtype (CPU interpreter), in place equal to out of place, position offsets, positions
outside the tables, bad input; on a GPU (marked gpu) Llama-3-8B's decode shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.spec.decode import rope_reference, rope_tables  # noqa: E402
from kernelab.spec.reference import OPS  # noqa: E402

SHAPES = [
    {"tokens": 1, "heads": 1, "head_dim": 2},
    {"tokens": 3, "heads": 5, "head_dim": 12},  # head_dim/2 = 6: not a power of two
    {"tokens": 2, "heads": 9, "head_dim": 64},
]


@pytest.fixture(scope="module")
def rope():
    return kernel_module("rope")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("op", ["rope", "rope_interleaved"])
def test_rope_matches_the_reference(rope, op, shape, dtype):
    assert_matches_reference(getattr(rope, op), op, shape, dtype)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
def test_in_place_is_out_of_place(rope, interleaved):
    x, cos, sin, positions = OPS["rope"].make_inputs({"tokens": 4, "heads": 3, "head_dim": 16},
                                                     "bf16", seed=2, device=DEVICE)  # fmt: skip
    expected = (rope.rope_interleaved if interleaved else rope.rope)(x, cos, sin, positions)
    same = x.clone()
    assert rope.rope_(same, cos, sin, positions, interleaved=interleaved) is same
    assert torch.equal(same, expected)


def test_the_layouts_are_the_same_rotation_of_permuted_pairs():
    x = torch.randn(2, 1, 8, dtype=torch.float64)
    cos, sin = rope_tables(4, 8)
    positions = torch.tensor([1, 3])
    half = rope_reference(x, cos, sin, positions, interleaved=False)
    # interleaved pairs (x[2i], x[2i+1]) are half-split pairs (x[i], x[i+4]) after a permutation
    order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    inter = rope_reference(x[..., order], cos, sin, positions, interleaved=True)
    torch.testing.assert_close(inter, half[..., order])
    # a rotation keeps each pair's length; position 0 is the identity
    zero = rope_reference(x, cos, sin, torch.tensor([0, 0]), interleaved=False)
    torch.testing.assert_close(zero, x)


def test_decode_positions_far_into_the_sequence(rope):
    x = torch.randn(3, 2, 8, device=DEVICE)
    cos, sin = rope_tables(5000, 8, DEVICE)
    positions = torch.tensor([4095, 17, 4999], device=DEVICE)
    expected = rope_reference(x, cos, sin, positions, interleaved=False)
    torch.testing.assert_close(rope.rope(x, cos, sin, positions).double(), expected, atol=1e-5,
                               rtol=1e-5)  # fmt: skip


def test_a_position_outside_the_tables_rotates_to_nan_only_its_token(rope):
    x = torch.randn(3, 2, 8, device=DEVICE)
    cos, sin = rope_tables(10, 8, DEVICE)
    y = rope.rope(x, cos, sin, torch.tensor([2, 10, -1], device=DEVICE))
    assert y[0].isfinite().all() and y[1].isnan().all() and y[2].isnan().all()


def test_strided_heads_and_an_empty_batch(rope):
    cos, sin = rope_tables(8, 8, DEVICE)
    qkv = torch.randn(2, 6, 8, device=DEVICE)
    q = qkv[:, :4]  # the query heads of a fused qkv tensor: a token stride of 6 heads
    positions = torch.tensor([3, 5], device=DEVICE)
    expected = rope_reference(q.contiguous(), cos, sin, positions, interleaved=False)
    torch.testing.assert_close(rope.rope_(q, cos, sin, positions).double(), expected,
                               atol=1e-5, rtol=1e-5)  # fmt: skip
    empty = torch.empty(0, 4, 8, device=DEVICE)
    assert rope.rope(empty, cos, sin, torch.empty(0, dtype=torch.int64, device=DEVICE)).shape == (
        0, 4, 8)  # fmt: skip


@pytest.mark.parametrize("case", ["odd-head-dim", "table-width", "positions-length",
                                  "float-positions", "fp16-tables", "2-d-x", "fp64"])  # fmt: skip
def test_bad_input_is_refused_in_one_line(rope, case):
    x = torch.randn(2, 3, 8, device=DEVICE)
    cos, sin = rope_tables(6, 8, DEVICE)
    positions = torch.tensor([0, 1], device=DEVICE)
    if case == "odd-head-dim":
        x = torch.randn(2, 3, 7, device=DEVICE)
    elif case == "table-width":
        cos, sin = rope_tables(6, 6, DEVICE)
    elif case == "positions-length":
        positions = positions[:1]
    elif case == "float-positions":
        positions = positions.float()
    elif case == "fp16-tables":
        cos, sin = cos.half(), sin.half()
    elif case == "2-d-x":
        x = x[0]
    else:
        x = x.double()
    with pytest.raises(KernelabError) as raised:
        rope.rope_(x, cos, sin, positions)
    assert str(raised.value).strip() and "\n" not in str(raised.value)


def test_registered(rope):
    from kernelab.spec.registry import get

    assert get("triton.rope").build() is rope.rope
    assert get("triton.rope_interleaved").build() is rope.rope_interleaved


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("tokens", [1, 16, 64])
@pytest.mark.parametrize("heads", [8, 32])  # Llama-3-8B: 8 KV heads, 32 query heads of 128
@pytest.mark.parametrize("op", ["rope", "rope_interleaved"])
def test_gpu_rope_at_decode_shapes(rope, op, heads, tokens, dtype):
    shape = {"tokens": tokens, "heads": heads, "head_dim": 128}
    assert_matches_reference(getattr(rope, op), op, shape, dtype)
