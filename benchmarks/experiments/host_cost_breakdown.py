"""Where vector_add's ~26 us a call goes on the H200's host, piece by piece, and what a lean
launch could cost (issue 30, session 21).

Each piece is timed alone as the median over ROUNDS loops of LOOP calls (a synchronise
between loops, so the launch queue never fills): torch.add as the yardstick, our whole call,
its prologue (checks, views, torch.empty_like), the plan key, the replay, Triton's launcher
given tensors and given raw pointers, and two launches that skip Triton's launcher: through
cuda.bindings' cuLaunchKernel and through ctypes into libcuda, both with a parameter array
built once. Every launch is checked against x + y before it is timed. Since session 25 also
the compiled replay's key and launch (compiled_replay.c) and the whole ops with it on.

  PYTHONPATH=src python3 benchmarks/experiments/host_cost_breakdown.py   # writes $OUT/host_cost_breakdown.json
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import statistics
import time
from pathlib import Path

import torch

OUT = Path(os.environ.get("OUT", "."))
LOOP = 200
ROUNDS = 15


def per_call_us(fn) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(LOOP):
            fn()
        samples.append((time.perf_counter() - start) / LOOP * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def param_info(function_handle: int) -> list[tuple[int, int]]:
    """(offset, size) of each kernel parameter, from the loaded image (CUDA 12.4+)."""
    from cuda.bindings import driver

    function = driver.CUfunction(function_handle)
    found = []
    for index in range(64):
        err, offset, size = driver.cuFuncGetParamInfo(function, index)
        if err != driver.CUresult.CUDA_SUCCESS:
            break
        found.append((offset, size))
    return found


def main() -> None:
    from kernelab.ops import vector_add as module
    from kernelab.runtime import compiled_replay, direct_launch, launch_plans

    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    device = x.device
    results: dict = {}
    notes: dict = {}

    def record(name, fn):
        results[name] = per_call_us(fn)
        print(f"{results[name]:8.2f} us  {name}", flush=True)

    record("torch.add", lambda: torch.add(x, y))
    record("torch.empty_like", lambda: torch.empty_like(x))
    assert torch.equal(module.vector_add(x, y), x + y)  # checked before it is timed
    record("kernelab vector_add", lambda: module.vector_add(x, y))
    record("x.contiguous().view(-1)", lambda: x.contiguous().view(-1))
    record("interpreting()", module.interpreting)
    record("_cuda_getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(0))
    record("is_current_stream_capturing", torch.cuda.is_current_stream_capturing)
    tensors = (x, y, out)
    record("signature()", lambda: launch_plans.signature(device, *tensors))
    record("_hooks_idle()", launch_plans._hooks_idle)
    record("PLANS.key()", lambda: module.PLANS.key(device, tensors))
    # the compiled replay's key (compiled_replay.c): the same tuple from C
    built = compiled_replay.module()
    notes["compiled replay built"] = built is not None or compiled_replay.last_failure
    if built is not None:
        raw_stream = torch._C._cuda_getCurrentRawStream(0)
        assert built.plan_key(0, raw_stream, tensors, 3, ()) == module.PLANS.key(device, tensors)
        record("compiled plan_key", lambda: built.plan_key(0, raw_stream, tensors, 3, ()))
    key = module.PLANS.key(device, tensors)
    for _ in range(3):
        module.PLANS.call(device, tensors, lambda: launch_plans.launch(
            module._vector_add_tuned, lambda m: ((4096 + m["BLOCK"] - 1) // m["BLOCK"],),
            x, y, out, 4096))  # fmt: skip
    assert module.PLANS.installed(key), module.PLANS.last_refusal
    out.fill_(float("nan"))
    module.PLANS.replay(key, tensors)
    assert torch.equal(out, x + y), "the replayed plan"
    record("PLANS.replay()", lambda: module.PLANS.replay(key, tensors))
    [step] = module.PLANS._plans[key]
    stream = key[1]
    idle = launch_plans._hooks_idle()
    record("step.run()", lambda: step.run(tensors, stream, idle))
    compiled = step.compiled
    values = list(step.template)
    for position, index in step.slots:
        values[position] = tensors[index]
    gx, gy, gz = step.grid
    runner = compiled.run
    notes["launcher_source"] = inspect.getsource(type(runner).__call__)
    notes["metadata"] = {
        k: repr(getattr(compiled.metadata, k, None))
        for k in ("num_warps", "num_ctas", "shared", "cluster_dims", "global_scratch_size",
                  "profile_scratch_size", "launch_cooperative_grid", "launch_pdl")
    }  # fmt: skip
    notes["signature"] = repr(getattr(compiled.src, "signature", None))
    notes["constants"] = repr(getattr(compiled.src, "constants", None))
    notes["template"] = repr(step.template)

    def run_with(vals):
        runner(gx, gy, gz, stream, compiled.function, compiled.packed_metadata, None, None,
               None, *vals)  # fmt: skip

    record("compiled.run(tensors)", lambda: run_with(values))
    pointer_values = [v.data_ptr() if hasattr(v, "data_ptr") else v for v in values]
    out.fill_(float("nan"))
    run_with(pointer_values)
    assert torch.equal(out, x + y), "Triton's launcher given raw pointers"
    record("compiled.run(pointers)", lambda: run_with(pointer_values))

    # --- lean launches: the parameter array built once, only the launch per call ----------
    params = param_info(compiled.function)
    notes["param_info"] = params
    print("param info (offset, size):", params, flush=True)
    print("metadata:", notes["metadata"], flush=True)
    print("signature:", notes["signature"], flush=True)
    # x_ptr, y_ptr, out_ptr, n (i32), then Triton's hidden scratch pointers (null)
    c_values = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(y.data_ptr()),
                ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(4096)]  # fmt: skip
    while len(c_values) < len(params):
        c_values.append(ctypes.c_uint64(0))
    sizes_match = [ctypes.sizeof(v) for v in c_values] == [size for _, size in params]
    notes["sizes_match"] = sizes_match
    array = (ctypes.c_void_p * len(c_values))(*(ctypes.addressof(v) for v in c_values))
    block = compiled.metadata.num_warps * 32
    shared = compiled.metadata.shared

    from cuda.bindings import driver

    cu_function = driver.CUfunction(compiled.function)
    cu_stream = driver.CUstream(stream)
    array_address = ctypes.addressof(array)

    def bindings_launch():
        driver.cuLaunchKernel(cu_function, gx, gy, gz, block, 1, 1, shared, cu_stream,
                              array_address, 0)  # fmt: skip

    libcuda = ctypes.CDLL("libcuda.so.1")
    launch_c = libcuda.cuLaunchKernel
    launch_c.restype = ctypes.c_int
    launch_c.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    def ctypes_launch():
        return launch_c(compiled.function, gx, gy, gz, block, 1, 1, shared, stream, array,
                        None)  # fmt: skip

    for name, fn in (("cuda.bindings cuLaunchKernel", bindings_launch),
                     ("ctypes cuLaunchKernel", ctypes_launch)):  # fmt: skip
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        correct = sizes_match and torch.equal(out, x + y)
        notes[f"{name} correct"] = correct
        print(f"{name}: correct={correct}", flush=True)
        if correct:
            record(name, fn)

    # the same call with every argument a ctypes object made once and no argtypes: ctypes then
    # passes each as it is, where argtypes convert 11 Python ints on every call
    launch_raw = ctypes.CDLL("libcuda.so.1").cuLaunchKernel  # a CDLL of its own: no argtypes
    launch_raw.restype = ctypes.c_int
    prebuilt = (ctypes.c_void_p(compiled.function), *(ctypes.c_uint(v) for v in
                (gx, gy, gz, block, 1, 1, shared)), ctypes.c_void_p(stream),
                ctypes.c_void_p(array_address), ctypes.c_void_p(None))  # fmt: skip

    def ctypes_prebuilt_launch():
        return launch_raw(*prebuilt)

    out.fill_(float("nan"))
    ctypes_prebuilt_launch()
    torch.cuda.synchronize()
    notes["ctypes prebuilt correct"] = sizes_match and torch.equal(out, x + y)
    print(f"ctypes cuLaunchKernel, arguments prebuilt: correct={notes['ctypes prebuilt correct']}")
    if notes["ctypes prebuilt correct"]:
        record("ctypes cuLaunchKernel, arguments prebuilt", ctypes_prebuilt_launch)

    def ctypes_with_pointer_update():
        c_values[0].value = x.data_ptr()
        c_values[1].value = y.data_ptr()
        c_values[2].value = out.data_ptr()
        return launch_c(compiled.function, gx, gy, gz, block, 1, 1, shared, stream, array,
                        None)  # fmt: skip

    if notes.get("ctypes cuLaunchKernel correct"):
        record("ctypes cuLaunchKernel + 3 pointer updates", ctypes_with_pointer_update)

    notes["step.direct built"] = step.direct is not None
    if step.direct is not None:
        out.fill_(float("nan"))
        step.direct(tensors, stream)
        torch.cuda.synchronize()
        notes["step.direct correct"] = torch.equal(out, x + y)
        record("step.direct()", lambda: step.direct(tensors, stream))
        compiled_replay.ENABLED = True  # for _prepared(); the whole ops below set it per variant
        prepared = direct_launch._prepared(step.direct)
        if prepared is not None:
            out.fill_(float("nan"))
            built.launch(prepared, tensors, stream)
            torch.cuda.synchronize()
            notes["compiled launch correct"] = torch.equal(out, x + y)
            if notes["compiled launch correct"]:
                record("compiled launch", lambda: built.launch(prepared, tensors, stream))

    # --- whole ops, the hooked replay against the lean one (DIRECT), beside torch -----------
    import torch.nn.functional as F

    from kernelab.ops.matmul import matmul
    from kernelab.ops.norms import layernorm, rmsnorm
    from kernelab.ops.softmax import softmax

    s = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    ma = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    mb = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    ops = [
        ("vector_add", lambda: module.vector_add(x, y), lambda: torch.add(x, y)),
        ("softmax", lambda: softmax(s), lambda: torch.softmax(s, dim=-1)),
        ("rmsnorm", lambda: rmsnorm(s, w, 1e-6), lambda: F.rms_norm(s, (4096,), w, 1e-6)),
        ("layernorm", lambda: layernorm(s, w, b, 1e-5),
         lambda: F.layer_norm(s, (4096,), w, b, 1e-5)),
        ("matmul 256^3", lambda: matmul(ma, mb), lambda: torch.mm(ma, mb)),  # TMA maps
    ]  # fmt: skip
    variants = [("hooked", False, False), ("lean", True, False)]
    if built is not None:
        variants.append(("compiled", True, True))
    for name, ours, theirs in ops:
        record(f"{name}: torch", theirs)
        for label, direct, compiled in variants:
            launch_plans.DIRECT = direct
            compiled_replay.ENABLED = compiled
            launch_plans._compiled_key = built.plan_key if compiled else None
            launch_plans.forget_all()
            for _ in range(3):  # the third call replays the plan
                got = ours()
            torch.testing.assert_close(got, theirs(), atol=1e-1, rtol=2e-2)
            record(f"{name}: kernelab, {label}", ours)
            plans = [p for p in launch_plans._every_op if p._plans]
            steps = [step for p in plans for plan in p._plans.values() for step in plan]
            notes[f"{name} {label}: direct steps"] = sum(st.direct is not None for st in steps)
            notes[f"{name} {label}: steps"] = len(steps)
            notes[f"{name} {label}: direct launches made"] = sum(
                st.direct.launches for st in steps if st.direct is not None
            )

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "host_cost_breakdown.json").write_text(
        json.dumps({"per_call_us": results, "notes": notes}, indent=1, default=repr)
    )
    print("\nlauncher source:\n" + notes["launcher_source"])


if __name__ == "__main__":
    main()
