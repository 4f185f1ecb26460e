"""The anchors benchmarks/decode_kernels.py times beside kernelab's decode kernels, each an
optional extra: torch.compile of the same eager code, Liger-Kernel, FlashInfer, torchao's
int4 weight-only path and gemlite.

An anchor is built per op. `build()` returns a callable on the op's inputs (the order
kernelab.spec.reference.OPS[op].make_inputs gives them) or raises Absent with one line
saying why (the package does not import, or its API is not the one read from its docs).
Anchors whose API wants the data in another form (Liger's RoPE wants [batch, heads, seq,
head_dim] and HF-style cos/sin; FlashInfer's SiLU-and-mul wants gate and up side by side)
convert it once per input set, outside the timed calls (`Prepared`): a model holds its data
in that form already. What is left in the timed call is said in `note`.

The int4 anchors (torchao, gemlite) quantize the bf16 weights themselves, to their own
grid, so they are not the op's dequantized product: `build_int4(w_bf16, group)` returns
the layer's forward on x, and the script checks it against the float64 product of the
unquantized weights, to within twice the error kernelab's own int4 GEMV has there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class Absent(Exception):
    """The anchor cannot run here: one line, the package and the reason."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def _import(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except Exception as exc:  # ImportError, or a package that breaks at import
        raise Absent(f"{package} not importable ({_first_line(exc)})") from None


class Prepared:
    """A callable on the op's inputs that converts each input set once (prepare) and runs the
    anchor on the converted form (run). The last input set's conversion is kept while its
    first tensor lives (a weak reference: a new tensor at a freed one's address is a new
    input set), so the timed calls only run."""

    def __init__(self, prepare: Callable, run: Callable):
        self.prepare, self.run = prepare, run
        self._first, self._state = None, None

    def __call__(self, *inputs):
        import weakref

        if self._first is None or self._first() is not inputs[0]:
            self._first, self._state = None, None  # free the last conversion first
            self._state = self.prepare(*inputs)
            self._first = weakref.ref(inputs[0])
        return self.run(self._state)


@dataclass(frozen=True)
class Anchor:
    name: str  # the record's implementation: "liger.swiglu", "torch.compile.rope", ...
    op: str
    build: Callable[[], Callable]
    note: str  # what the timed call does, in words


# ---- torch.compile of the same eager code ---------------------------------------------------


def _compiled(op: str):
    def build():
        import torch

        from kernelab.spec.reference import OPS

        return torch.compile(OPS[op].torch_eager, dynamic=False)

    return build


# ---- Liger-Kernel (liger_kernel.ops.rms_norm, .rope, .swiglu) -------------------------------


def _liger_add_rmsnorm():
    module = _import("liger_kernel.ops.rms_norm", "Liger-Kernel")
    norm = getattr(module, "LigerRMSNormFunction", None)
    if norm is None:
        raise Absent("Liger-Kernel has no liger_kernel.ops.rms_norm.LigerRMSNormFunction")
    import torch

    def add_rmsnorm(x, residual, weight, eps):
        h = x + residual
        return torch.stack((h, norm.apply(h, weight, eps)))

    return add_rmsnorm


def _liger_rope():
    module = _import("liger_kernel.ops.rope", "Liger-Kernel")
    rope = getattr(module, "LigerRopeFunction", None)
    if rope is None:
        raise Absent("Liger-Kernel has no liger_kernel.ops.rope.LigerRopeFunction")
    import torch

    def prepare(x, cos, sin, positions):
        # q [1, heads, tokens, head_dim] over a copy of x (Liger rotates q in place); cos and
        # sin gathered per token and repeated to head_dim (HF's layout), [1, tokens, head_dim]
        q = x.clone().permute(1, 0, 2)[None]
        c, s = cos[positions], sin[positions]
        k = torch.zeros(1, 1, x.shape[0], x.shape[2], dtype=x.dtype, device=x.device)
        return (q, k, torch.cat((c, c), -1)[None].to(x.dtype),
                torch.cat((s, s), -1)[None].to(x.dtype))  # fmt: skip

    def run(state):
        q, k, c, s = state
        q_out, _ = rope.apply(q, k, c, s)
        return q_out[0].permute(1, 0, 2)  # back to [tokens, heads, head_dim], a view

    return Prepared(prepare, run)


def _liger_swiglu():
    module = _import("liger_kernel.ops.swiglu", "Liger-Kernel")
    silu_mul = getattr(module, "LigerSiLUMulFunction", None)
    if silu_mul is None:
        raise Absent("Liger-Kernel has no liger_kernel.ops.swiglu.LigerSiLUMulFunction")
    return lambda gate, up: silu_mul.apply(gate, up)


# ---- FlashInfer (flashinfer.norm, .rope, .activation) ---------------------------------------


def _flashinfer_add_rmsnorm():
    norm = _import("flashinfer.norm", "flashinfer")
    fused = getattr(norm, "fused_add_rmsnorm", None)
    if fused is None:
        raise Absent("flashinfer has no flashinfer.norm.fused_add_rmsnorm")
    import torch

    def prepare(x, residual, weight, eps):
        # in place: residual += x (-> h), x = rmsnorm(h) * weight (-> y); one buffer [h, y],
        # the op's stacked output, whose halves the timed calls keep updating
        out = torch.stack((residual, x))
        return out, weight, eps

    def run(state):
        out, weight, eps = state
        fused(out[1], out[0], weight, eps)
        return out

    return Prepared(prepare, run)


def _flashinfer_rope():
    from kernelab.spec.decode import ROPE_THETA

    module = _import("flashinfer.rope", "flashinfer")
    apply = getattr(module, "apply_rope_pos_ids", None)
    if apply is None:
        raise Absent("flashinfer has no flashinfer.rope.apply_rope_pos_ids")
    import torch

    def prepare(x, cos, sin, positions):
        # cos/sin computed in the kernel from theta (ours: the tables); k one head, unused
        k = torch.zeros(x.shape[0], 1, x.shape[2], dtype=x.dtype, device=x.device)
        return x, k, positions.to(torch.int32)

    def run(state):
        x, k, positions = state
        q_out, _ = apply(x, k, positions, interleave=False, rope_theta=ROPE_THETA)
        return q_out

    return Prepared(prepare, run)


def _flashinfer_swiglu():
    module = _import("flashinfer.activation", "flashinfer")
    silu_and_mul = getattr(module, "silu_and_mul", None)
    if silu_and_mul is None:
        raise Absent("flashinfer has no flashinfer.activation.silu_and_mul")
    import torch

    # gate and up side by side, [rows, 2 * cols]: a fused gate/up GEMV's output
    return Prepared(lambda gate, up: torch.cat((gate, up), dim=-1), silu_and_mul)


# ---- the gate/up GEMV + SwiGLU unfused: what the fused kernel replaces ------------------


def _fused_weight(w_gate, w_up):
    """W_gate_up[2n, k] as one view when the halves are adjacent (the op's inputs are), else
    a copy."""
    import torch

    n, k = w_gate.shape
    adjacent = (w_gate.stride() == w_up.stride() == (k, 1)
                and w_up.data_ptr() == w_gate.data_ptr() + n * k * w_gate.element_size())  # fmt: skip
    if adjacent:
        return torch.as_strided(w_gate, (2 * n, k), (k, 1))
    return torch.cat((w_gate, w_up))


def _kernelab_unfused():
    from kernelab.ops import gemv as gemv_op
    from kernelab.ops import swiglu as swiglu_op

    def run(state):
        x, w = state
        n = w.shape[0] // 2
        gate_up = gemv_op.gemv(x, w)
        return swiglu_op.swiglu(gate_up[:, :n], gate_up[:, n:])

    return Prepared(lambda x, w_gate, w_up: (x, _fused_weight(w_gate, w_up)), run)


def _torch_one_gemm():
    import torch

    def run(state):
        x, w = state
        gate, up = (x @ w.t()).chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    return Prepared(lambda x, w_gate, w_up: (x, _fused_weight(w_gate, w_up)), run)


ANCHORS = (
    Anchor("torch.compile.add_rmsnorm", "add_rmsnorm", _compiled("add_rmsnorm"),
           "torch.compile (default mode, static shapes) of the eager add + RMSNorm + stack"),
    Anchor("torch.compile.rope", "rope", _compiled("rope"),
           "torch.compile of the eager gather + rotate_half in fp32"),
    Anchor("torch.compile.swiglu", "swiglu", _compiled("swiglu"),
           "torch.compile of silu(gate) * up"),
    Anchor("torch.compile.gate_up_swiglu", "gate_up_swiglu", _compiled("gate_up_swiglu"),
           "torch.compile of silu(x @ w_gate.t()) * (x @ w_up.t())"),
    Anchor("liger.add_rmsnorm", "add_rmsnorm", _liger_add_rmsnorm,
           "h = x + residual in torch, Liger's RMSNorm, stacked (one copy of h and y more "
           "than the fused kernels make)"),
    Anchor("liger.rope", "rope", _liger_rope,
           "LigerRopeFunction on q (and a one-head k), tables gathered beforehand"),
    Anchor("liger.swiglu", "swiglu", _liger_swiglu, "LigerSiLUMulFunction(gate, up)"),
    Anchor("flashinfer.add_rmsnorm", "add_rmsnorm", _flashinfer_add_rmsnorm,
           "flashinfer.norm.fused_add_rmsnorm, in place on the stacked [h, y] buffer"),
    Anchor("flashinfer.rope", "rope", _flashinfer_rope,
           "flashinfer.rope.apply_rope_pos_ids (cos/sin from theta in the kernel), one-head k"),
    Anchor("flashinfer.swiglu", "swiglu", _flashinfer_swiglu,
           "flashinfer.activation.silu_and_mul on [gate | up] laid side by side beforehand"),
    Anchor("kernelab.gemv+swiglu", "gate_up_swiglu", _kernelab_unfused,
           "triton.gemv on W_gate_up, then triton.swiglu on the halves: two launches"),
    Anchor("torch.gate_up_swiglu.one_gemm", "gate_up_swiglu", _torch_one_gemm,
           "x @ W_gate_up.t() (one cuBLAS GEMV), chunk, silu(gate) * up: a model's eager MLP"),
)  # fmt: skip


def anchors_for(op: str) -> list[Anchor]:
    return [anchor for anchor in ANCHORS if anchor.op == op]


# ---- int4 weight-only anchors: they quantize the bf16 weights themselves ---------------------


def _torchao_int4(w, group: int):
    quantization = _import("torchao.quantization", "torchao")
    import torch

    quantize_ = getattr(quantization, "quantize_", None)
    if quantize_ is None:
        raise Absent("torchao has no torchao.quantization.quantize_")
    configs = []  # newest API first (Int4WeightOnlyConfig v2, then v1, then the old function)
    config_class = getattr(quantization, "Int4WeightOnlyConfig", None)
    if config_class is not None:
        configs.append(
            lambda: config_class(group_size=group, int4_packing_format="tile_packed_to_4d")
        )
        configs.append(lambda: config_class(group_size=group))
    old = getattr(quantization, "int4_weight_only", None)
    if old is not None:
        configs.append(lambda: old(group_size=group))
    failures = []
    for make in configs:
        linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            linear.weight.copy_(w)
        model = torch.nn.Sequential(linear)
        try:
            quantize_(model, make())
            return model
        except Exception as exc:
            failures.append(_first_line(exc))
    raise Absent(f"torchao int4 weight-only did not quantize: {'; '.join(failures) or 'no API'}")


def _gemlite_int4(w, group: int):
    helper = _import("gemlite.helper", "gemlite")
    import torch

    a16wn = getattr(helper, "A16Wn", None)
    if a16wn is None:
        raise Absent("gemlite has no gemlite.helper.A16Wn")
    n, k = w.shape
    # asymmetric int4 per group (HQQ's convention, w ~ (q - zero) * scale), unpacked q
    grouped = w.float().reshape(n, k // group, group)
    low, high = grouped.amin(dim=2, keepdim=True), grouped.amax(dim=2, keepdim=True)
    scale = ((high - low) / 15.0).clamp(min=1e-6)
    zero = torch.round(-low / scale)
    q = torch.round(grouped / scale + zero).clamp(0, 15).to(torch.uint8).reshape(n, k)
    try:
        return a16wn(device=str(w.device), dtype=w.dtype).from_weights(
            q, scale.reshape(n, -1).to(w.dtype), zero.reshape(n, -1).to(w.dtype), W_nbits=4,
            group_size=group, bias=None)  # fmt: skip
    except Exception as exc:
        raise Absent(f"gemlite A16Wn.from_weights failed: {_first_line(exc)}") from None


INT4_ANCHORS = {
    "torchao.int4_weight_only": (_torchao_int4, "torchao quantize_(Int4WeightOnlyConfig) of an "
                                 "nn.Linear, called eagerly"),
    "gemlite.a16w4": (_gemlite_int4, "gemlite A16Wn(W_nbits=4) from the weights, asymmetric "
                      "per group"),
}  # fmt: skip


def build_int4(name: str, w, group: int) -> Callable:
    """The int4 anchor `name`'s forward on x for bf16 weights w[n, k]; Absent when it cannot."""
    make, _ = INT4_ANCHORS[name]
    layer = make(w, group)
    return lambda x: layer(x)


def availability() -> list[tuple[str, str | None]]:
    """(package, None when it imports, else the one-line reason) for each optional anchor."""
    rows = []
    for package, module in (("Liger-Kernel", "liger_kernel"), ("flashinfer", "flashinfer"),
                            ("torchao", "torchao"), ("gemlite", "gemlite")):  # fmt: skip
        try:
            _import(module, package)
            rows.append((package, None))
        except Absent as exc:
            rows.append((package, str(exc)))
    return rows
