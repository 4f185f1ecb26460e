"""The m = 1 sweep of the late-summed quantized GEMVs and of the fused gate/up GEMV: the
candidate launches (candidates), and a timing loop a benchmark calls on a GPU in one process
(run), which checks every candidate against the float64 reference before it times it and
returns one row per (kind, shape, candidate), the fastest first per kind and shape.

The grid keeps what the SASS says is worth asking (tests/ops/quant_gemv/
test_quant_gemv_compile.py): tiles whose packed weights arrive in 16-byte loads (at least 16
bytes of W a thread a step), fp32 accumulators at most 64 a thread, x as a tile (no barrier in
the loop) or as a row through shared memory (two barriers a step, the bf16 GEMV's measured
winner at some shapes), 2 to 8 warps, 1 or 3 pipeline stages, K split by ops/gemv's rule or
not at all: 40 to 60 compiled forms a kind (each timed at both splits), about a second of
compiling each and a short cold timing (TIMER), so one or two kinds at their shapes fit in a
device call of ten minutes (run's `kinds`).

A candidate is a launch dict: for int8, fp8 and int4 a launches.json launch (BLOCK_K in
weights); for "gate_up" a gate_up_tiles.json launch (ops/gemv's format, BLOCK_N rows of
W_gate_up, half of each weight). The functions are reached through the registry
(kernelab.spec.registry), so this module imports no other op folder.

Use: `from kernelab.ops.quant_gemv.sweep import run; rows = run()` on a GPU (see
docs/ops/quant_gemv.md, "Measuring the late forms").
"""

from __future__ import annotations

KINDS = ("int8", "fp8", "int4", "int4_zp", "gate_up")
# kind -> (registry name, op of the spec, extra shape keys)
IMPLEMENTATIONS = {
    "int8": ("triton.quant_gemv.int8", "quant_gemv_int8", {}),
    "fp8": ("triton.quant_gemv.fp8", "quant_gemv_fp8", {}),
    "int4": ("triton.quant_gemv.int4", "quant_gemv_int4", {"group": 128}),
    "int4_zp": ("triton.quant_gemv.int4_zp", "quant_gemv_int4_zp", {"group": 128}),
    "gate_up": ("triton.gate_up_swiglu", "gate_up_swiglu", {}),
}
# (n, k) per kind: the decode shapes the figures in docs/ops/quant_gemv.md were measured at
SHAPES = {
    "int8": ((4096, 4096), (16384, 4096), (6144, 4096)),
    "fp8": ((4096, 4096), (16384, 4096)),
    "int4": ((4096, 4096), (16384, 4096), (6144, 4096)),
    "int4_zp": ((4096, 4096),),
    "gate_up": ((14336, 4096),),
}
BYTES_PER_WEIGHT = {"int8": 1.0, "fp8": 1.0, "int4": 0.5, "int4_zp": 0.5, "gate_up": 2.0}
MIN_W_BYTES, MAX_VALUES = 16, 64  # W bytes a thread a step; fp32 accumulator values a thread
TIMER = {"mode": "cold", "min_samples": 10, "max_time_s": 0.03, "max_samples": 100,
         "warmup_ms": 5.0}  # fmt: skip


def _fits(kind: str, block_n: int, block_k: int, warps: int) -> bool:
    threads = 32 * warps
    weights = block_n * block_k * (2 if kind == "gate_up" else 1)  # both weights for gate_up
    w_bytes = weights * BYTES_PER_WEIGHT[kind] / threads
    # int4 accumulates one fp32 per packed byte (the pair's two products summed)
    values = weights / threads / (2 if kind.startswith("int4") else 1)
    return w_bytes >= MIN_W_BYTES and values <= MAX_VALUES


def candidates(kind: str) -> list[dict]:
    """The launches the sweep times for `kind` (one of KINDS), the table's own among them."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    found = []
    block_ks = (1024, 2048) if kind.startswith("int4") else (512, 1024, 2048)
    for block_n in (2, 4, 8, 16):
        for block_k in block_ks:
            for warps in (2, 4, 8):
                if not _fits(kind, block_n, block_k, warps):
                    continue
                # x as a tile unpipelined (a pipelined loop stages x through shared memory,
                # barriers and all); x as a row with and without the pipeline
                for x_as_tile, stages in ((True, 1), (False, 1), (False, 3)):
                    for split in ("heuristic", 1):
                        found.append(_launch(kind, block_n, block_k, warps, stages, x_as_tile,
                                             split))  # fmt: skip
    return found


def _launch(kind, block_n, block_k, warps, stages, x_as_tile, split) -> dict:
    form = {"BLOCK_K": block_k, "X_AS_TILE": x_as_tile, "num_warps": warps,
            "num_stages": stages, "split": split}  # fmt: skip
    if kind != "gate_up":
        return {"BLOCK_N": block_n, **form}
    # ops/gemv's plan format; BLOCK_N here: rows of each weight (the launch gate_up_swiglu
    # takes), so a program streams 2 * block_n rows of W_gate_up
    return {"BLOCK_M": 1, "BLOCK_N": block_n, "USE_DOT": False, "LATE_SUM": True, **form}


def gate_up_launch(launch: dict, n: int, k: int, sms: int | None) -> dict:
    """A gate_up candidate as gate_up_swiglu(launch=...) takes it: the K split worked out by
    ops/gemv's rule over the 2n rows of W_gate_up (split 'heuristic') or as given."""
    from kernelab.ops.quant_gemv.dispatch import split_k  # ops/gemv's rule, as dispatch imports it

    wanted = None if launch["split"] == "heuristic" else launch["split"]
    split, k_per_split = split_k(1, 2 * n, k, 1, 2 * launch["BLOCK_N"], launch["BLOCK_K"], sms,
                                 wanted=wanted)  # fmt: skip
    return {**launch, "split": split, "k_per_split": k_per_split}


def name(launch: dict) -> str:
    form = "late_x" if launch["X_AS_TILE"] else "late"
    return (f"{form}-n{launch['BLOCK_N']}k{launch['BLOCK_K']}-w{launch['num_warps']}"
            f"s{launch['num_stages']}-split{launch['split']}")  # fmt: skip


def call_for(kind: str, inputs: tuple, launch: dict, sms: int | None):
    """A zero-argument callable that runs `kind` on `inputs` with `launch` (None: the
    table's)."""
    from kernelab.spec.registry import get

    fn = get(IMPLEMENTATIONS[kind][0]).build()
    if launch is None:  # the table's own launch
        return lambda: fn(*inputs)
    if kind == "gate_up":
        n, k = inputs[1].shape
        forced = gate_up_launch(launch, n, k, sms)
        return lambda: fn(*inputs, launch=forced)
    return lambda: fn(*inputs, launch=launch)


def run(kinds=KINDS, shapes: dict | None = None, device: str = "cuda", timer: dict | None = None,
        limit: int | None = None, say=print) -> list[dict]:  # fmt: skip
    """Check and time every candidate of `kinds` at m = 1, bf16 x, each shape of `shapes`
    (default SHAPES), beside the table's own launch ("table"). Returns rows {kind, n, k,
    launch, name, ms, w_gbps, ok, error}, sorted fastest first per kind and shape. `limit`
    caps the candidates per kind (a smoke run)."""
    import torch

    from kernelab.harness.check import compare
    from kernelab.harness.timing import benchmark
    from kernelab.spec.reference import get_op

    sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else None
    rows = []
    for kind in kinds:
        registry_name, op, extra = IMPLEMENTATIONS[kind]
        spec = get_op(op)
        for n, k in (shapes or SHAPES)[kind]:
            inputs = spec.make_inputs({"m": 1, "n": n, "k": k, **extra}, "bf16", seed=0,
                                      device=device)  # fmt: skip
            reference = spec.reference(*inputs)
            found = []
            for launch in [None, *candidates(kind)[:limit]]:
                row = {"kind": kind, "n": n, "k": k, "launch": launch,
                       "name": "table" if launch is None else name(launch), "ms": None,
                       "w_gbps": None, "ok": False, "error": None}  # fmt: skip
                try:
                    call = call_for(kind, inputs, launch, sms)
                    result = compare(call(), reference, dtype="bf16")
                    row["ok"] = result.ok
                    if not result.ok:
                        row["error"] = result.message
                    else:
                        timing = benchmark(call, **(timer or TIMER))
                        row["ms"] = timing.median_ms
                        w_bytes = n * k * BYTES_PER_WEIGHT[kind] * (2 if kind == "gate_up" else 1)
                        row["w_gbps"] = w_bytes / (timing.median_ms * 1e-3) / 1e9
                except Exception as exc:  # one candidate's failure is a row, not the end
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                found.append(row)
            found.sort(key=lambda r: (r["ms"] is None, r["ms"] or 0.0))
            best = found[0]
            say(f"{kind} {n}x{k}: best {best['name']} {best['ms']} ms; table "
                f"{next((r['ms'] for r in found if r['name'] == 'table'), None)} ms")  # fmt: skip
            rows += found
    return rows
