"""The teaching LayerNorm and RMSNorm (ops/norms/teaching.py): right at awkward shapes in
every dtype, and registered so that `kernelab bench` times them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 1031},
    {"rows": 7, "cols": 127},
    {"rows": 3, "cols": 257, "stride": 263},
]


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("norms.teaching")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_teaching_norm_matches_the_reference(teaching, op, shape, dtype):
    assert_matches_reference(getattr(teaching, op), op, shape, dtype)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_teaching_norm_is_the_registered_implementation(teaching, op):
    from kernelab.spec.registry import get

    impl = get(f"triton.{op}.teaching")
    assert impl.op == op and impl.build() is getattr(teaching, op)


def test_layernorm_without_bias_is_the_reference_without_bias(teaching):
    x, w = torch.randn(3, 37, device=DEVICE), torch.randn(37, device=DEVICE)
    expected = torch.nn.functional.layer_norm(x, (37,), w, None, 1e-5)
    torch.testing.assert_close(teaching.layernorm(x, w), expected)


def test_a_constant_row_normalizes_to_the_bias_not_nan(teaching):
    x = torch.full((2, 33), 3.0, device=DEVICE)
    w, b = torch.ones(33, device=DEVICE), torch.arange(33.0, device=DEVICE)
    torch.testing.assert_close(teaching.layernorm(x, w, b), b.expand(2, 33))


def test_a_weight_of_the_wrong_length_is_refused_in_one_line(teaching):
    with pytest.raises(KernelabError, match="weight"):
        teaching.rmsnorm(torch.zeros(2, 8, device=DEVICE), torch.ones(7, device=DEVICE))


# Compiles in a process without TRITON_INTERPRET; prints the PTX's division instructions for
# an n_cols Triton passes as a value and for the n_cols of 1 it passes as a constexpr.
_DIVISIONS_PROBE = """
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelab.ops.norms.teaching import norm_kernel

signature = {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32",
             "n_cols": "i32", "x_row_stride": "i32", "out_row_stride": "i32", "eps": "fp32",
             "IS_RMS": "constexpr", "HAS_BIAS": "constexpr", "BLOCK": "constexpr"}
divisions = {}
for n_cols in (None, 1):
    constexprs = {"IS_RMS": False, "HAS_BIAS": True, "BLOCK": 64}
    if n_cols is not None:
        constexprs["n_cols"] = n_cols
    source = ASTSource(fn=norm_kernel, constexprs=constexprs,
                       signature={**signature, **{name: "constexpr" for name in constexprs}})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    divisions[str(n_cols)] = re.findall(r"div\\.\\w+\\.f32", ptx)
print(json.dumps(divisions))
"""


def test_the_mean_is_a_correctly_rounded_division_on_hopper_at_any_row_length():
    """The mean divides with div.rn (a constant row's mean is the constant, exactly), also
    when a row of one column makes n_cols a constexpr."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _DIVISIONS_PROBE], capture_output=True,
                          text=True, env=env, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    divisions = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(divisions) == {"None", "1"}
    for found in divisions.values():
        assert found[0] == "div.rn.f32", divisions  # the mean, the kernel's first division
