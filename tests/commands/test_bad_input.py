"""Bad input to every kernel gets a one-line error or the right answer, never a wrong one.

For every non-baseline implementation in the registry, inputs that are bad in one way: a
dtype it does not take (fp64, int32, a float dtype outside its list, two dtypes mixed),
non-contiguous (transposed views, every other column of a wider buffer), misaligned (views
starting one element into a buffer, so no pointer is 16-byte aligned) or empty (no rows, no
columns, K = 0). Each call must either raise KernelabError, ValueError or TypeError with a
one-line message, or return what the float64 reference says within the dtype's tolerance
(kernelab.harness.check.compare: NaN or Inf where the reference is finite never passes).
Calls run with torch's poisoned allocator, so an output element a kernel forgets is NaN.
Integer inputs must be refused: no kernel lists an integer dtype.

Without a GPU the Triton kernels run on the CPU interpreter at tiny shapes, and the CUDA C++
ladders (which cannot launch here) must refuse CPU tensors and wrong dtypes in their input
validation, before anything is compiled or launched. On a GPU (marked gpu) the whole matrix
runs on every implementation at awkward shapes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import HAS_CUDA, interpreted_kernels  # noqa: E402  (sets TRITON_INTERPRET)

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.harness.check import compare, poisoned_allocations  # noqa: E402
from kernelab.spec.op_spec import dtype_of  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402
from kernelab.spec.registry import implementations  # noqa: E402

CLEAR_ERRORS = (KernelabError, ValueError, TypeError)
FLOATS = ("fp32", "bf16", "fp16")

SMALL_SHAPES = {  # the interpreter's
    "gemm": {"m": 5, "n": 7, "k": 9},
    "vector_add": {"n": 33},
    "softmax": {"rows": 3, "cols": 17},
    "layernorm": {"rows": 3, "cols": 17},
    "rmsnorm": {"rows": 3, "cols": 17},
    "softmax_backward": {"rows": 3, "cols": 17},
    "rmsnorm_backward": {"rows": 3, "cols": 17},
    "reduce_sum": {"n": 33},
    # the decode kernels that take float tensors only
    "gemv": {"m": 3, "n": 7, "k": 9},
    "add_rmsnorm": {"rows": 3, "cols": 17},
    "swiglu": {"rows": 3, "cols": 17},
}
# Rows 16-byte aligned where a kernel has a TMA or vector path for aligned rows (gemm N and
# K multiples of 8, softmax rows of 16 KiB fp32: the shared-memory row kernel's), so that
# only the misaligned, strided and transposed views lose that path.
GPU_SHAPES = {
    "gemm": {"m": 67, "n": 136, "k": 80},
    "vector_add": {"n": 1031},
    "softmax": {"rows": 5, "cols": 4096},
    "layernorm": {"rows": 5, "cols": 1031},
    "rmsnorm": {"rows": 5, "cols": 1031},
    "softmax_backward": {"rows": 5, "cols": 1031},
    "rmsnorm_backward": {"rows": 5, "cols": 1031},
    "reduce_sum": {"n": 100003},
    "transpose": {"rows": 67, "cols": 129},
    "gemv": {"m": 5, "n": 136, "k": 80},
    "add_rmsnorm": {"rows": 5, "cols": 1031},
    "swiglu": {"rows": 5, "cols": 1031},
    "scan": {"n": 100003},  # the fp32 half; int32 is a dtype it takes (tests/ladders/scan)
}
# The float matrix covers every op with a shape above. The histogram takes integer ids, so
# its bad input (out-of-range ids, wrong integer types) is tested in tests/ladders/histogram/.
# The transpose steps have no kernelab torch op: they are called as functions only.
WITHOUT_TORCH_OP = ("transpose", "scan")  # the scan steps too: functions only
# The backward kernels are functions too (no autograd formula is registered with the ops).
WITHOUT_TORCH_OP += ("softmax_backward", "rmsnorm_backward")
# The quantized GEMVs take packed integer or fp8 weights with scales and RoPE int positions
# and fp32 tables, not the float matrix's one-dtype tensors: their bad input (shapes, K not a
# multiple of the group, dtypes, empty batches, out-of-table positions) is tested in
# tests/ops/quant_gemv/ and tests/ops/rope/. Decode attention takes a token count beside its
# tensors and a cache of another rank than q: tests/ops/decode_attention/ holds its bad input.
NOT_FLOAT_MATRIX = ("quant_gemv_int8", "quant_gemv_int4", "quant_gemv_int4_zp", "quant_gemv_fp8",
                    "rope", "rope_interleaved", "decode_attention")  # fmt: skip
# Sampling takes logits with per-row integer and float parameters; its bad input (NaN/inf
# logits, out-of-range parameters, shapes, empty batches) is tested in tests/ops/sampling/.
NOT_FLOAT_MATRIX += ("sampling_probs",)
# The fused gate/up GEMV takes x[m, k] and two weights [n, k]: its bad input is tested in
# tests/ops/swiglu/test_gate_up_gemv.py.
NOT_FLOAT_MATRIX += ("gate_up_swiglu",)
ONE_D_OPS = ("vector_add", "reduce_sum", "scan")


def _torch_dtype(name: str):
    # int32 is no kernelab dtype (nothing computes in it), so dtype_of does not know it
    return torch.int32 if name == "int32" else dtype_of(name)


def _kernels():
    return [
        impl
        for impl in implementations()
        if not impl.is_baseline and impl.op not in NOT_FLOAT_MATRIX
    ]


def _map_tensors(inputs, change, *, first_only: bool = False):
    done, changed = False, []
    for value in inputs:
        if isinstance(value, torch.Tensor) and not (first_only and done):
            value, done = change(value), True
        changed.append(value)
    return tuple(changed)


def _transposed(t):
    """The same values with column-major strides (a 1-D tensor stays as it is)."""
    return t.t().contiguous().t() if t.dim() == 2 else t


def _every_other(t):
    """The same values as every other column (element) of a buffer twice as wide."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _misaligned(t):
    """The same values in a view that starts one element into its buffer."""
    buffer = torch.zeros(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buffer[1:].view(t.shape)
    view.copy_(t)
    return view


def _emptied(op: str, inputs, which: str):
    """The inputs with one dimension cut to zero: "rows", "cols" or (gemm) "k"."""
    if op == "gemm":
        a, b = inputs
        return {"rows": (a[:0], b), "cols": (a, b[:, :0]), "k": (a[:, :0], b[:0])}[which]
    if op in ONE_D_OPS:
        return tuple(t[:0] if isinstance(t, torch.Tensor) else t for t in inputs)
    x, *rest = inputs
    if which == "rows":
        return (x[:0], *rest)
    return (x[:, :0], *(r[:0] if isinstance(r, torch.Tensor) else r for r in rest))


def _bad_dtypes(impl) -> dict[str, tuple[str, str | None]]:
    """kind -> (dtype of the first tensor, dtype of the others or None for the same)."""
    good = impl.dtypes[0]
    kinds = {"fp64": ("fp64", None), "int32": ("int32", None)}
    if "int32" in impl.dtypes:  # the scan: int32 is no bad input there
        del kinds["int32"]
    outside = [d for d in FLOATS if d not in impl.dtypes]
    if outside:
        kinds["unsupported-" + outside[0]] = (outside[0], None)
    if impl.op != "softmax":  # one tensor: nothing to mix
        other = next(d for d in FLOATS if d != good)
        kinds["mixed-" + other] = (good, other)
    return kinds


def _cases(impl) -> list[str]:
    kinds = [*_bad_dtypes(impl), "strided", "misaligned", "empty-rows"]
    if impl.op not in ONE_D_OPS:  # 1-D ops: no columns to transpose
        kinds += ["transposed", "empty-cols"]
    if impl.op == "gemm":
        kinds.append("empty-k")
    return kinds


def _inputs(impl, kind: str, shape: dict, device: str):
    """(inputs, dtype name the result is judged by) for one bad-input case."""
    spec = get_op(impl.op)
    good = impl.dtypes[0]
    inputs = spec.make_inputs(shape, good, seed=7, device=device)
    if kind in _bad_dtypes(impl):
        first, others = _bad_dtypes(impl)[kind]
        if others is None:
            return _map_tensors(inputs, lambda t: t.to(_torch_dtype(first))), first
        recast = _map_tensors(inputs, lambda t: t.to(_torch_dtype(others)))
        return (inputs[0], *recast[1:]), first
    if kind.startswith("empty-"):
        return _emptied(impl.op, inputs, kind.removeprefix("empty-")), good
    change = {"transposed": _transposed, "strided": _every_other, "misaligned": _misaligned}[kind]
    return _map_tensors(inputs, change), good


def _assert_clear_error_or_right_answer(fn, impl, inputs, dtype: str) -> None:
    spec = get_op(impl.op)
    try:
        with poisoned_allocations():
            out = fn(*inputs)
    except CLEAR_ERRORS as exc:
        message = str(exc)
        assert message.strip() and "\n" not in message, f"not a one-line message: {message!r}"
        return
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    assert all(t.is_floating_point() for t in tensors), (
        f"{impl.name} accepted {[t.dtype for t in tensors]} and returned {type(out).__name__}"
    )
    result = compare(out, spec.reference(*inputs), dtype=dtype)
    assert result.ok, f"{impl.name}: wrong answer: {result.message}"


def _matrix(names_from) -> list:
    return [
        pytest.param(impl, kind, id=f"{impl.name}-{kind}")
        for impl in _kernels()
        if names_from(impl)
        for kind in _cases(impl)
    ]


def _callable(impl, via: str):
    """The kernel as the registry builds it, or as its torch op (kernelab.ops.torch_ops),
    which must pass the kernel's errors and answers through unchanged."""
    if via == "torch-op":
        from kernelab.ops.torch_ops import op_for

        return op_for(impl.name)
    return impl.build()


# --- the Triton kernels on the CPU interpreter (compiled on a GPU) ------------------------


@pytest.fixture(scope="module")
def interpreter():
    interpreted_kernels()


@pytest.mark.parametrize("via", ["function", "torch-op"])
@pytest.mark.parametrize("impl, kind", _matrix(lambda impl: impl.name.startswith("triton.")))
def test_triton_kernel_refuses_or_answers_right(interpreter, impl, kind, via):
    if via == "torch-op" and impl.op in WITHOUT_TORCH_OP:
        pytest.skip(f"{impl.op} has no kernelab torch op")
    device = "cuda" if HAS_CUDA else "cpu"
    inputs, dtype = _inputs(impl, kind, SMALL_SHAPES[impl.op], device)
    _assert_clear_error_or_right_answer(_callable(impl, via), impl, inputs, dtype)


# --- the CUDA C++ ladders without a GPU: validation before any compile or launch ------------

LADDERS = ("sgemm", "hgemm")
LADDER_CASES = ["cpu-tensor", "fp64", "int32", "unsupported-float", "empty-k-on-cpu"]


def _ladder_inputs(ladder: str, kind: str):
    supported = "fp32" if ladder == "sgemm" else "bf16"
    dtype = {"fp64": "fp64", "int32": "int32"}.get(kind, supported)
    if kind == "unsupported-float":
        dtype = "bf16" if ladder == "sgemm" else "fp32"
    a = torch.randn(5, 9).to(_torch_dtype(dtype))
    b = torch.randn(9, 7).to(_torch_dtype(dtype))
    if kind == "empty-k-on-cpu":
        a, b = a[:, :0], b[:0]
    return a, b, dtype


@pytest.mark.parametrize("kind", LADDER_CASES)
@pytest.mark.parametrize(
    "name", [impl.name for impl in _kernels() if impl.name.split(":")[0] in LADDERS]
)
def test_ladder_step_refuses_bad_input_before_compiling(monkeypatch, name, kind):
    import importlib

    ladder = name.split(":")[0]
    module = importlib.import_module(f"kernelab.ladders.{ladder}")
    # The module whose launch function calls build_step: the sgemm package launches from
    # its launch module, hgemm's from the package itself.
    launcher = importlib.import_module(getattr(module, ladder).__module__)

    def no_build(*args, **kwargs):
        raise AssertionError(f"{name} reached the compiler with bad input ({kind})")

    monkeypatch.setattr(launcher, "build_step", no_build)
    a, b, dtype = _ladder_inputs(ladder, kind)
    with pytest.raises(KernelabError) as raised:
        getattr(module, ladder)(name, a, b)
    message = str(raised.value)
    assert message.strip() and "\n" not in message
    if kind in ("fp64", "int32", "unsupported-float"):
        assert str(_torch_dtype(dtype)) in message  # names what it got
    else:
        assert "CUDA" in message


# The reduction ladder takes one tensor of any float dtype: only CPU tensors and non-float
# dtypes are bad before a launch.
REDUCE_CASES = ["cpu-tensor", "fp64", "int32", "empty-on-cpu"]


@pytest.mark.parametrize("kind", REDUCE_CASES)
@pytest.mark.parametrize("name", [impl.name for impl in _kernels() if impl.op == "reduce_sum"])
def test_reduce_step_refuses_bad_input_before_compiling(monkeypatch, name, kind):
    from kernelab.ladders.reduce import launch

    def no_build(*args, **kwargs):
        raise AssertionError(f"{name} reached the compiler with bad input ({kind})")

    monkeypatch.setattr(launch, "build_step", no_build)
    dtype = {"fp64": "fp64", "int32": "int32"}.get(kind, "fp32")
    x = torch.randn(9).to(_torch_dtype(dtype))
    x = x[:0] if kind == "empty-on-cpu" else x
    with pytest.raises(KernelabError) as raised:
        launch.reduce_sum(name, x)
    message = str(raised.value)
    assert message.strip() and "\n" not in message
    assert str(_torch_dtype(dtype)) in message if dtype != "fp32" else "CUDA" in message


# --- on the GPU: the whole matrix, every implementation ------------------------------------


def _gpu_matrix() -> list:
    return [
        pytest.param(impl, kind, via, id=f"{impl.name}-{kind}-{via}")
        for impl in _kernels()
        if impl.op in GPU_SHAPES
        for kind in _cases(impl)
        for via in ("function", "torch-op")
        if not (via == "torch-op" and impl.op in WITHOUT_TORCH_OP)
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("impl, kind, via", _gpu_matrix())
def test_gpu_kernel_refuses_or_answers_right(impl, kind, via):
    if impl.metadata.get("language") == "cute-dsl":
        from kernelab.runtime.cute_dsl import unusable_reason

        if (reason := unusable_reason()) is not None:  # the extra is optional
            pytest.skip(reason)
    inputs, dtype = _inputs(impl, kind, GPU_SHAPES[impl.op], "cuda")
    _assert_clear_error_or_right_answer(_callable(impl, via), impl, inputs, dtype)
    torch.cuda.synchronize()  # a fault in this case is reported here, not in the next one
