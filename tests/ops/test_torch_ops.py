"""kernelab's kernels as torch operators (kernelab.ops.torch_ops): schemas, fake tensors,
torch.compile and CUDA graphs.

Anywhere: the twelve ops (seven kernels, five teaching kernels) are registered with their
schemas, every non-baseline implementation of the registry has one, importing kernelab registers nothing, and the fake implementations
give the right shape, dtype and device at awkward shapes (fake CUDA tensors need no GPU).
The Triton ops run on the CPU interpreter without a GPU (compiled on it with one): checked
against the float64 reference, through torch.library.opcheck and under
torch.compile(fullgraph=True). The ladder ops trace into an exported graph without running.
On a GPU (marked gpu): every op under torch.compile(fullgraph=True) and replayed from a
captured CUDA graph on new input values, against the reference.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, interpreted_kernels  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

from cuda_graph_replay import assert_replays_match  # noqa: E402

from kernelab.errors import KernelabError, UnknownNameError  # noqa: E402
from kernelab.harness.check import check_implementation, compare  # noqa: E402
from kernelab.ops.torch_ops import op_for, ops  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402
from kernelab.spec.registry import get, implementations  # noqa: E402

SCHEMAS = {
    "vector_add": "kernelab::vector_add(Tensor x, Tensor y) -> Tensor",
    "softmax": "kernelab::softmax(Tensor x) -> Tensor",
    "layernorm": "kernelab::layernorm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-05) -> Tensor",
    "rmsnorm": "kernelab::rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "matmul": "kernelab::matmul(Tensor a, Tensor b) -> Tensor",
    "vector_add_teaching": "kernelab::vector_add_teaching(Tensor x, Tensor y) -> Tensor",
    "softmax_teaching": "kernelab::softmax_teaching(Tensor x) -> Tensor",
    "layernorm_teaching": "kernelab::layernorm_teaching(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-05) -> Tensor",
    "rmsnorm_teaching": "kernelab::rmsnorm_teaching(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "matmul_teaching": "kernelab::matmul_teaching(Tensor a, Tensor b) -> Tensor",
    "sgemm": "kernelab::sgemm(Tensor a, Tensor b, int step) -> Tensor",
    "hgemm": "kernelab::hgemm(Tensor a, Tensor b, int step) -> Tensor",
}

# Small enough for the interpreter; none a multiple of a tile.
TRITON_CASES = [
    ("triton.vector_add", {"n": 37}, "fp32"),
    ("triton.vector_add", {"n": 37}, "bf16"),
    ("triton.softmax", {"rows": 3, "cols": 37}, "fp32"),
    ("triton.softmax", {"rows": 3, "cols": 37, "stride": 41}, "bf16"),
    ("triton.layernorm", {"rows": 3, "cols": 37}, "fp32"),
    ("triton.rmsnorm", {"rows": 3, "cols": 37, "stride": 41}, "bf16"),
    ("triton.matmul", {"m": 5, "n": 7, "k": 9}, "bf16"),
    ("triton.softmax.teaching", {"rows": 3, "cols": 37, "stride": 41}, "bf16"),
    ("triton.rmsnorm.teaching", {"rows": 3, "cols": 37}, "fp32"),
]


def _case_id(case) -> str:
    name, shape, dtype = case
    return f"{name}-{'x'.join(str(v) for v in shape.values())}-{dtype}"


@pytest.fixture(scope="module", autouse=True)
def _interpreter_builds():
    interpreted_kernels()


def _schema_text(schema) -> str:
    # torch prints float defaults with all their digits (1.0000000000000001e-05)
    text = str(schema)
    for default in ("1.0000000000000001e-05", "9.9999999999999995e-07"):
        text = text.replace(default, repr(float(default)))
    return text


# --- registration -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_op_is_registered_with_its_schema(name):
    assert _schema_text(getattr(ops(), name).default._schema) == SCHEMAS[name]


# The transpose, scan and histogram ladders and the sampling filter are called as functions;
# they have no kernelab torch op (tests/commands/test_bad_input.py's WITHOUT_TORCH_OP says the
# same). The decode kernels' ops are tested in tests/ops/decode_step/test_decode_torch_ops.py.
WITHOUT_TORCH_OP = ("transpose", "histogram", "scan", "sampling_probs")
# The backward kernels are functions: no kernelab torch op and no autograd formula yet.
WITHOUT_TORCH_OP += ("softmax_backward", "rmsnorm_backward")


def test_every_registered_kernel_has_its_op():
    kernels = [
        impl
        for impl in implementations()
        if not impl.is_baseline and impl.op not in WITHOUT_TORCH_OP
    ]
    assert {impl.name.split(":")[0] for impl in kernels} >= {"sgemm", "hgemm", "triton.softmax"}
    for impl in kernels:
        op = op_for(impl.name)
        if ":" in impl.name:
            ladder, step = impl.name.split(":")
            assert op.func is getattr(ops(), ladder) and op.keywords == {"step": int(step)}
        else:
            assert op is getattr(ops(), impl.name.removeprefix("triton.").replace(".", "_"))


def test_op_for_refuses_baselines_and_unknown_names():
    baseline = next(impl for impl in implementations() if impl.is_baseline)
    with pytest.raises(KernelabError, match="baseline"):
        op_for(baseline.name)
    with pytest.raises(UnknownNameError, match="sgemm:13"):
        op_for("sgemm:31")


def test_importing_kernelab_registers_nothing_and_the_ops_import_no_kernel():
    code = (
        "import sys, kernelab.spec.registry as r; r.implementations(); "
        "print('torch' in sys.modules, 'kernelab.ops.torch_ops' in sys.modules); "
        "import kernelab.ops.torch_ops; "
        "print('triton' in sys.modules, 'cuda.core' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False", "False"]


# --- fake tensors: shapes for torch.compile, no kernel run --------------------------------


def _fake_cuda(*shape, dtype=torch.float32, transposed=False):
    if transposed:
        return torch.empty(*reversed(shape), device="cuda", dtype=dtype).t()
    return torch.empty(*shape, device="cuda", dtype=dtype)


FAKE_CASES = [
    ("vector_add", lambda: (_fake_cuda(1031, dtype=torch.bfloat16),) * 2, (1031,), torch.bfloat16),
    ("softmax", lambda: (_fake_cuda(1, 70_001),), (1, 70_001), torch.float32),
    ("softmax", lambda: (_fake_cuda(37, 5, transposed=True),), (37, 5), torch.float32),
    (
        "layernorm",
        lambda: (_fake_cuda(3, 4097, dtype=torch.float16), _fake_cuda(4097), None, 1e-3),
        (3, 4097),
        torch.float16,
    ),
    ("rmsnorm", lambda: (_fake_cuda(129, 7), _fake_cuda(7)), (129, 7), torch.float32),
    (
        "matmul",
        lambda: (
            _fake_cuda(127, 65, dtype=torch.bfloat16),
            _fake_cuda(65, 257, dtype=torch.bfloat16),
        ),
        (127, 257),
        torch.bfloat16,
    ),
    (
        "matmul",
        lambda: (
            _fake_cuda(31, 64, dtype=torch.float8_e4m3fn),
            _fake_cuda(64, 33, dtype=torch.float8_e4m3fn, transposed=True),
        ),
        (31, 33),
        torch.bfloat16,
    ),
    ("sgemm", lambda: (_fake_cuda(1, 1), _fake_cuda(1, 1), 13), (1, 1), torch.float32),
    (
        "hgemm",
        lambda: (
            _fake_cuda(4097, 4100, dtype=torch.bfloat16),
            _fake_cuda(4100, 129, dtype=torch.bfloat16),
            18,
        ),
        (4097, 129),
        torch.bfloat16,
    ),
]


@pytest.mark.parametrize(
    "name, make_args, shape, dtype",
    FAKE_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(FAKE_CASES)],
)
def test_fake_implementation_gives_shape_dtype_and_device(name, make_args, shape, dtype):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        out = getattr(ops(), name)(*make_args())
    assert isinstance(out, FakeTensor)
    assert (tuple(out.shape), out.dtype, out.device.type) == (shape, dtype, "cuda")
    assert out.is_contiguous()  # what the kernels return


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: ops().sgemm(_fake_cuda(2, 3), _fake_cuda(3, 4), 99),
            UnknownNameError,
            "sgemm step",
        ),
        (
            lambda: ops().hgemm(_fake_cuda(2, 3), _fake_cuda(5, 4), 18),
            ValueError,
            r"\(2, 3\) and \(5, 4\)",
        ),
        (lambda: ops().softmax(_fake_cuda(2, 3, 4)), ValueError, "2-D"),
        (lambda: ops().vector_add(_fake_cuda(3), _fake_cuda(4)), ValueError, "equal shapes"),
    ],
    ids=["unknown-step", "inner-dims", "softmax-3d", "vector-add-shapes"],
)
def test_fake_implementation_refuses_what_the_kernel_would(call, error, match):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    "ladder, step, dtype", [("sgemm", 13, torch.float32), ("hgemm", 18, torch.bfloat16)]
)
def test_ladder_op_traces_into_an_exported_graph_without_running(ladder, step, dtype):
    class Product(torch.nn.Module):
        def forward(self, a, b):
            return getattr(ops(), ladder)(a * 2, b, step)

    # CPU tensors: the real kernel would refuse them, so only the fake implementation runs
    a, b = torch.randn(5, 9, dtype=dtype), torch.randn(9, 7, dtype=dtype)
    graph = torch.export.export(Product(), (a, b)).graph
    calls = [n for n in graph.nodes if n.target is getattr(ops(), ladder).default]
    assert len(calls) == 1
    assert calls[0].args[2] == step
    value = calls[0].meta["val"]
    assert (tuple(value.shape), value.dtype) == ((5, 7), dtype)


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU the compiled ladder ops run (gpu tests)")
@pytest.mark.parametrize("name", ["sgemm:13", "hgemm:18"])
def test_compiled_ladder_op_traces_whole_and_passes_the_kernels_error_through(name):
    """fullgraph=True: the op (a partial with its step) is one node, no graph break; the run
    then reaches the kernel's validation, whose one-line error arrives unchanged."""
    import torch._dynamo

    torch._dynamo.reset()
    op = op_for(name)
    dtype = torch.float32 if name.startswith("sgemm") else torch.bfloat16
    compiled = torch.compile(lambda a, b: op(a * 2, b), fullgraph=True)
    with pytest.raises(KernelabError, match="must be a CUDA tensor"):
        compiled(torch.randn(5, 9, dtype=dtype), torch.randn(9, 7, dtype=dtype))


# --- the Triton ops run: interpreter on the CPU, compiled on a GPU -------------------------


@pytest.mark.parametrize("case", TRITON_CASES, ids=_case_id)
def test_triton_op_matches_the_reference(case):
    name, shape, dtype = case
    report = check_implementation(op_for(name), get(name).op, shape, dtype, trials=1, device=DEVICE)
    assert report.ok, report.message


@pytest.mark.parametrize(
    "case", [c for c in TRITON_CASES if c[2] == "fp32" or c[0] == "triton.matmul"], ids=_case_id
)
def test_triton_op_passes_opcheck(case):
    name, shape, dtype = case
    inputs = get_op(get(name).op).make_inputs(shape, dtype, seed=3, device=DEVICE)
    torch.library.opcheck(op_for(name).default, inputs)


def _compiled_matches_reference(name: str, shape: dict, dtype: str) -> None:
    """torch.compile(fullgraph=True) of a function that feeds the op an input Inductor computed
    (the first one doubled: exact in floating point), on two fresh inputs, against the float64
    reference of the same doubled input."""
    import torch._dynamo

    impl = get(name)
    spec = get_op(impl.op)
    op = op_for(name)
    torch._dynamo.reset()  # each case compiles afresh, far from the recompile limit

    @torch.compile(fullgraph=True)
    def doubled_first(first, *rest):
        return op(first * 2, *rest)

    for seed in (11, 12):
        inputs = spec.make_inputs(shape, dtype, seed=seed, device=DEVICE)
        out = doubled_first(*inputs)
        expected = spec.reference(inputs[0] * 2, *inputs[1:])
        result = compare(out, expected, dtype=dtype, math_mode=impl.math_mode)
        assert result.ok, f"{name} {shape} {dtype} seed {seed}: {result.message}"


@pytest.mark.parametrize(
    "case", [c for c in TRITON_CASES if c[2] == "fp32" or c[0] == "triton.matmul"], ids=_case_id
)
def test_compiled_triton_op_matches_the_reference(case):
    _compiled_matches_reference(*case)


# --- on the GPU: every op compiled and captured -------------------------------------------

GPU_CASES = [
    ("triton.vector_add", {"n": 1_000_003}, "bf16"),
    ("triton.softmax", {"rows": 37, "cols": 1031}, "fp32"),
    ("triton.softmax", {"rows": 8, "cols": 70_001}, "bf16"),  # the long-row tuner's default
    ("triton.layernorm", {"rows": 129, "cols": 4097}, "bf16"),
    ("triton.rmsnorm", {"rows": 129, "cols": 4097, "stride": 4099}, "fp32"),
    ("triton.matmul", {"m": 300, "n": 520, "k": 777}, "bf16"),
    ("sgemm:01", {"m": 127, "n": 257, "k": 65}, "fp32"),
    ("sgemm:10", {"m": 65, "n": 520, "k": 777}, "fp32"),
    ("sgemm:13", {"m": 1000, "n": 1000, "k": 1000}, "fp32"),
    ("hgemm:05", {"m": 127, "n": 257, "k": 65}, "bf16"),
    ("hgemm:18", {"m": 2100, "n": 2900, "k": 130}, "bf16"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_case_id)
def test_gpu_compiled_op_matches_the_reference(case):
    _compiled_matches_reference(*case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_case_id)
def test_gpu_op_replays_in_a_cuda_graph(case):
    """Warm up on a side stream (compile, load, tune: none of it may happen in a capture),
    capture one call on that stream, then replay on new values copied into the captured
    inputs: each replay must give the reference of the new values."""
    name, shape, dtype = case
    impl = get(name)
    assert_replays_match(op_for(name), get_op(impl.op), shape, dtype, math_mode=impl.math_mode,
                         label=name)  # fmt: skip
