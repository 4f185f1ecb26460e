"""The decode kernels as torch operators (kernelab.ops.torch_ops): schemas, fake tensors at
Llama-3-8B's and awkward shapes (fake CUDA tensors need no GPU), every decode implementation
of the registry reachable through op_for, each op against the float64 reference and through
torch.library.opcheck on the CPU interpreter, rope_ in place equal to rope. On a GPU (marked
gpu): each op compiled with fullgraph=True and replayed from a CUDA graph at decode shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, kernel_module  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

from cuda_graph_replay import assert_replays_match  # noqa: E402

from kernelab.harness.check import check_implementation, compare  # noqa: E402
from kernelab.ops.torch_ops import add_rmsnorm, op_for, ops  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402
from kernelab.spec.registry import get, implementations  # noqa: E402

SCHEMAS = {
    "gemv": "kernelab::gemv(Tensor x, Tensor w) -> Tensor",
    "gemv_teaching": "kernelab::gemv_teaching(Tensor x, Tensor w) -> Tensor",
    "quant_gemv_int8": "kernelab::quant_gemv_int8(Tensor x, Tensor q, Tensor scale) -> Tensor",
    "quant_gemv_int8_teaching":
        "kernelab::quant_gemv_int8_teaching(Tensor x, Tensor q, Tensor scale) -> Tensor",
    "quant_gemv_fp8": "kernelab::quant_gemv_fp8(Tensor x, Tensor q, Tensor scale) -> Tensor",
    "quant_gemv_int4": "kernelab::quant_gemv_int4(Tensor x, Tensor packed, Tensor scales, "
                       "Tensor? zeros, int group) -> Tensor",
    "quant_gemv_int4_zp": "kernelab::quant_gemv_int4_zp(Tensor x, Tensor packed, Tensor scales, "
                          "Tensor? zeros, int group) -> Tensor",
    "add_rmsnorm": "kernelab::add_rmsnorm(Tensor x, Tensor residual, Tensor weight, "
                   "float eps=1e-06) -> Tensor",
    "rope_": "kernelab::rope_(Tensor(a0!) x, Tensor cos, Tensor sin, Tensor positions, "
             "bool interleaved=False) -> ()",
    "rope": "kernelab::rope(Tensor x, Tensor cos, Tensor sin, Tensor positions) -> Tensor",
    "rope_interleaved": "kernelab::rope_interleaved(Tensor x, Tensor cos, Tensor sin, "
                        "Tensor positions) -> Tensor",
    "swiglu": "kernelab::swiglu(Tensor gate, Tensor up) -> Tensor",
    "decode_attention":
        "kernelab::decode_attention(Tensor q, Tensor k, Tensor v, int n) -> Tensor",
}  # fmt: skip
DECODE_OPS = ("gemv", "quant_gemv_int8", "quant_gemv_int4", "quant_gemv_int4_zp",
              "quant_gemv_fp8", "add_rmsnorm", "rope", "rope_interleaved", "swiglu")  # fmt: skip

# Small enough for the interpreter; none a multiple of a tile.
CASES = [
    ("triton.gemv", {"m": 3, "n": 37, "k": 41}, "fp32"),
    ("triton.gemv.teaching", {"m": 2, "n": 19, "k": 70}, "fp32"),
    ("triton.quant_gemv.int8", {"m": 2, "n": 19, "k": 40}, "bf16"),
    ("triton.quant_gemv.int8.teaching", {"m": 1, "n": 19, "k": 40}, "bf16"),
    ("triton.quant_gemv.int4", {"m": 2, "n": 19, "k": 64, "group": 32}, "bf16"),
    ("triton.quant_gemv.int4_zp", {"m": 1, "n": 9, "k": 64, "group": 16}, "fp16"),
    ("triton.add_rmsnorm", {"rows": 3, "cols": 37}, "fp32"),
    ("triton.rope", {"tokens": 3, "heads": 5, "head_dim": 12}, "fp32"),
    ("triton.rope_interleaved", {"tokens": 2, "heads": 3, "head_dim": 8}, "fp32"),
    ("triton.swiglu", {"rows": 3, "cols": 37}, "fp32"),
]


def _case_id(case) -> str:
    name, shape, dtype = case
    return f"{name}-{'x'.join(str(v) for v in shape.values())}-{dtype}"


@pytest.fixture(scope="module", autouse=True)
def _interpreter_builds():
    for name in ("gemv", "quant_gemv", "fused_norm", "rope", "swiglu"):
        kernel_module(name)


def _schema_text(schema) -> str:
    return str(schema).replace("9.9999999999999995e-07", "1e-06")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_decode_op_is_registered_with_its_schema(name):
    assert _schema_text(getattr(ops(), name).default._schema) == SCHEMAS[name]


def test_every_decode_implementation_has_its_op():
    decode = [i for i in implementations() if i.op in DECODE_OPS and not i.is_baseline]
    assert len(decode) >= 11
    for impl in decode:
        assert op_for(impl.name) is getattr(ops(), impl.name[len("triton.") :].replace(".", "_"))


# --- fake tensors: shapes for torch.compile, no kernel run --------------------------------


def _fake(*shape, dtype=torch.bfloat16, strides=None):
    # strides, not slicing: a view of a fake CUDA tensor needs a CUDA build of torch
    if strides is not None:
        return torch.empty_strided(shape, strides, device="cuda", dtype=dtype)
    return torch.empty(*shape, device="cuda", dtype=dtype)


FAKE_CASES = [  # Llama-3-8B's decode shapes at batch 1 and awkward ones
    ("gemv", lambda: (_fake(1, 4096), _fake(6144, 4096)), (1, 6144)),
    ("gemv", lambda: (_fake(7, 14336), _fake(4097, 14336)), (7, 4097)),
    ("quant_gemv_int8", lambda: (_fake(1, 4096), _fake(4096, 4096, dtype=torch.int8),
                                 _fake(4096, dtype=torch.float32)), (1, 4096)),
    ("quant_gemv_int4", lambda: (_fake(16, 4096), _fake(28672, 2048, dtype=torch.uint8),
                                 _fake(28672, 32, dtype=torch.float16), None, 128), (16, 28672)),
    ("quant_gemv_int4_zp", lambda: (_fake(1, 256), _fake(9, 128, dtype=torch.uint8),
                                    _fake(9, 4, dtype=torch.float16),
                                    _fake(9, 4, dtype=torch.uint8), 64), (1, 9)),
    ("add_rmsnorm", lambda: (_fake(1, 4096), _fake(1, 4096), _fake(4096)), (2, 1, 4096)),
    ("add_rmsnorm", lambda: (_fake(3, 5, 37), _fake(3, 5, 37), _fake(37), 1e-5), (2, 3, 5, 37)),
    ("rope", lambda: (_fake(1, 40, 128), _fake(9000, 64, dtype=torch.float32),
                      _fake(9000, 64, dtype=torch.float32), _fake(1, dtype=torch.int64)),
     (1, 40, 128)),
    ("swiglu", lambda: (_fake(1, 14336, strides=(28672, 1)),) * 2, (1, 14336)),  # gate_up halves
    ("decode_attention", lambda: (_fake(1, 32, 128, strides=(48 * 128, 128, 1)),
                                  *(_fake(1, 8, 8193, 128, strides=(2 * 8 * 8193 * 128,
                                                                    8193 * 128, 128, 1)),) * 2,
                                  8193), (1, 32, 128)),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, make_args, shape", FAKE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(FAKE_CASES)]
)
def test_fake_implementation_gives_shape_dtype_and_device(name, make_args, shape):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        args = make_args()
        out = getattr(ops(), name)(*args)
    assert isinstance(out, FakeTensor)
    assert (tuple(out.shape), out.dtype, out.device.type) == (shape, args[0].dtype, "cuda")


def test_fake_rope_in_place_returns_nothing():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = _fake(2, 40, 128, strides=(48 * 128, 128, 1))  # q and k heads of a fused qkv
        table = _fake(100, 64, dtype=torch.float32)
        assert ops().rope_(x, table, table, _fake(2, dtype=torch.int64)) is None


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops().gemv(_fake(1, 4096), _fake(6144, 4095)), "k = 4095"),
        (lambda: ops().quant_gemv_int8(_fake(1, 64), _fake(8, 64, dtype=torch.int8),
                                       _fake(9, dtype=torch.float32)), "scale\\[n\\]"),
        (lambda: ops().quant_gemv_int4(_fake(1, 96), _fake(8, 48, dtype=torch.uint8),
                                       _fake(8, 1, dtype=torch.float16), None, 64), "group 64"),
        (lambda: ops().add_rmsnorm(_fake(2, 8), _fake(2, 9), _fake(8)), "one shape"),
        (lambda: ops().rope(_fake(2, 3, 8), _fake(9, 3, dtype=torch.float32),
                            _fake(9, 3, dtype=torch.float32), _fake(2, dtype=torch.int64)),
         "head_dim / 2"),
        (lambda: ops().rope_(_fake(2, 3, 8), _fake(9, 4, dtype=torch.float32),
                             _fake(9, 4, dtype=torch.float32), _fake(3, dtype=torch.int64)),
         "positions\\[2\\]"),
        (lambda: ops().swiglu(_fake(2, 8), _fake(2, 7)), "one shape"),
    ],
    ids=["gemv-k", "int8-scale", "int4-group", "add-rmsnorm", "rope-tables", "rope-positions",
         "swiglu"],
)  # fmt: skip
def test_fake_implementation_refuses_what_the_kernel_would(call, match):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(ValueError, match=match):
        call()


# --- the ops run: interpreter on the CPU, compiled on a GPU --------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_decode_op_matches_the_reference(case):
    name, shape, dtype = case
    report = check_implementation(op_for(name), get(name).op, shape, dtype, trials=1,
                                  device=DEVICE, bf16_truncates=DEVICE == "cpu")  # fmt: skip
    assert report.ok, report.message


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_decode_op_passes_opcheck(case):
    name, shape, dtype = case
    inputs = get_op(get(name).op).make_inputs(shape, dtype, seed=3, device=DEVICE)
    torch.library.opcheck(op_for(name).default, inputs)


def _rope_inputs(seed=4):
    spec = get_op("rope")
    return spec.make_inputs({"tokens": 3, "heads": 6, "head_dim": 12}, "fp32", seed=seed,
                            device=DEVICE)  # fmt: skip


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
def test_rope_in_place_rotates_a_view_and_passes_opcheck(interleaved):
    """Rotating the first 4 of 6 heads in place (the q and k heads of a fused qkv) equals the
    out-of-place rotation of those heads and leaves the other two alone."""
    x, cos, sin, positions = _rope_inputs()
    expected = (ops().rope_interleaved if interleaved else ops().rope)(x[:, :4], cos, sin,
                                                                      positions)  # fmt: skip
    untouched = x[:, 4:].clone()
    assert ops().rope_(x[:, :4], cos, sin, positions, interleaved) is None
    assert torch.equal(x[:, :4], expected) and torch.equal(x[:, 4:], untouched)
    torch.library.opcheck(ops().rope_.default, (x.clone(), cos, sin, positions, interleaved))


def test_add_rmsnorm_gives_h_and_y():
    spec = get_op("add_rmsnorm")
    x, residual, weight, eps = spec.make_inputs({"rows": 2, "cols": 33}, "fp32", seed=5,
                                                device=DEVICE)  # fmt: skip
    h, y = add_rmsnorm(x, residual, weight, eps)
    expected = spec.reference(x, residual, weight, eps)
    assert compare(h, expected[0], dtype="fp32").ok and compare(y, expected[1], dtype="fp32").ok


# --- on the GPU: compiled and captured at decode shapes ------------------------------------

GPU_CASES = [
    ("triton.gemv", {"m": 1, "n": 6144, "k": 4096}, "bf16"),
    ("triton.gemv", {"m": 16, "n": 4096, "k": 14336}, "bf16"),
    ("triton.quant_gemv.int8", {"m": 1, "n": 4096, "k": 4096}, "bf16"),
    ("triton.quant_gemv.int4", {"m": 1, "n": 28672, "k": 4096, "group": 128}, "bf16"),
    ("triton.quant_gemv.fp8", {"m": 4, "n": 4096, "k": 4096}, "bf16"),
    ("triton.add_rmsnorm", {"rows": 1, "cols": 4096}, "bf16"),
    ("triton.rope", {"tokens": 1, "heads": 40, "head_dim": 128}, "bf16"),
    ("triton.swiglu", {"rows": 1, "cols": 14336}, "bf16"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_case_id)
def test_gpu_decode_op_compiles_and_replays(case):
    """torch.compile(fullgraph=True) of a function that doubles the first input (exact) and
    calls the op; then the compiled function captured in a CUDA graph and replayed on new
    values: each against the float64 reference of the doubled input."""
    import torch._dynamo

    name, shape, dtype = case
    impl, op = get(name), op_for(name)
    spec = get_op(impl.op)
    torch._dynamo.reset()
    compiled = torch.compile(lambda first, *rest: op(first * 2, *rest), fullgraph=True)
    assert_replays_match(compiled, spec, shape, dtype, math_mode=impl.math_mode, label=name,
                         expected=lambda static: spec.reference(static[0] * 2, *static[1:]))  # fmt: skip
