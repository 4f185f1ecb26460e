"""The transpose ladder on a GPU: every step exact over shapes and both dtypes, the
registry's entries, the strided and empty inputs. The targets are measured by
benchmarks/primitives_ladders.py, not here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelab.ladders.transpose import STEPS, transpose  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (1, 33), (33, 1), (31, 65), (127, 129), (32, 32), (1000, 3), (2049, 4097)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_is_exact_over_shapes(step, dtype):
    spec = get_op("transpose")
    for rows, cols in SHAPES:
        (x,) = spec.make_inputs({"rows": rows, "cols": cols}, dtype, seed=rows, device="cuda")
        out = transpose(step, x)
        assert out.shape == (cols, rows) and out.dtype == x.dtype and out.is_contiguous()
        assert torch.equal(out.double(), spec.reference(x)), f"{rows}x{cols}"


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_strided_and_empty_inputs(step):
    wide = torch.randn(37, 90, device="cuda")
    view = wide[:, ::3]  # non-contiguous: made dense first, never misread
    assert torch.equal(transpose(step, view), view.t().contiguous())
    col_major = torch.randn(45, 17, device="cuda").t()
    assert torch.equal(transpose(step, col_major), col_major.t().contiguous())
    assert transpose(step, torch.empty(0, 5, device="cuda")).shape == (5, 0)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_registry_entry_answers_like_the_function(step):
    from kernelab.spec.registry import get

    x = torch.randn(65, 31, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(get(step.name).build()(x), x.t().contiguous())


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
@pytest.mark.whole_card  # GiBs past 2^31 elements: alone, or it skips for want of memory
def test_more_than_2_to_the_31_elements_index_right(step):
    """rows x cols past 2^31 (bf16, 4 GiB each way): the size_t offsets hold; the corners and
    a random sample are compared (a full reference would need a third 4 GiB buffer)."""
    free, _ = torch.cuda.mem_get_info()
    if free < (16 << 30):  # 8 GiB of fp32 draws, then 4 GiB in and 4 GiB out
        pytest.skip("needs 16 GiB of free GPU memory")
    rows, cols = 1 << 16, (1 << 15) + 3
    x = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    out = transpose(step, x)
    assert torch.equal(out[:, -3:], x[-3:, :].t()) and torch.equal(out[-3:, :], x[:, -3:].t())
    r = torch.randint(0, rows, (4096,), device="cuda")
    c = torch.randint(0, cols, (4096,), device="cuda")
    assert torch.equal(out[c, r], x[r, c])
