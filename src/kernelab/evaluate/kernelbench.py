"""KernelBench problems: `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`.

As KernelBench does: the global torch seed is set before get_init_inputs() and before each
model is built (so a ModelNew with the same parameters starts from the same random
weights), and before each get_inputs() call (that is what a seed means for this format).
When the solution's state dict has the reference's keys and shapes, the reference's
parameters are copied into it as well, so a solution that initialises differently is
still compared on equal weights. On a GPU, get_inputs() runs under the device (torch.device
as a context: its factory calls make the tensors there, from the device's generator), so a
set of inputs takes microseconds to make rather than a host generator's seconds and a copy;
a get_inputs() that cannot run that way (it needs the host) runs there, and its inputs are
moved to the device.

The format's own check, reported beside kernelab's: torch.allclose against the eager output
with atol = rtol = 1e-4 for fp32 and 1e-2 for fp16/bf16 (KernelBench's current table), in
float64 a block at a time (kernelab.harness.blocks.allclose).

A problem may declare its cost for the roofline with a module-level function
`roofline_cost(*inputs) -> {"flops": F, "bytes": B}` (optional keys "dtype", "op").
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate import trees
from kernelab.evaluate.footprint import is_out_of_memory
from kernelab.evaluate.problem import Case, Problem, describe_exception, import_file, scaled
from kernelab.harness import blocks

INIT_SEED = 42  # KernelBench's default seed_num
ALLCLOSE_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}


def _module_name(prefix: str, path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"kernelab_{prefix}_{path.stem}_{digest}"


def _scale_constants(module, scale: float) -> dict:
    """Shrink the module's integer constants (its sizes) in place, and tuples of integers (a
    shape such as `input_shape = (32768,)` beside `batch_size = 32768`: scaling one and not
    the other would break a broadcast the problem relies on); return what changed."""
    changed = {}
    for name, value in list(vars(module).items()):
        if name.startswith("_"):
            continue
        if type(value) is int:
            new = scaled(value, scale)
        elif type(value) is tuple and value and all(type(v) is int for v in value):
            new = tuple(scaled(v, scale) for v in value)
        else:
            continue
        if new != value:
            setattr(module, name, new)
            changed[name] = (value, new)
    return changed


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)


def allclose_check(reference, data, output) -> tuple[bool, str]:
    """KernelBench's own verdict: allclose against the eager output at its tolerance. `data`
    is the checker's own copy (the judge hands it one), so the reference runs on it."""
    import torch

    expected = reference(data)
    got, want = trees.leaves(output), trees.leaves(expected)
    if len(got) != len(want):
        return False, f"output has {len(got)} parts, the model's has {len(want)}"
    for (path, out), (_, ref) in zip(got, want, strict=True):
        if not isinstance(ref, torch.Tensor):
            continue
        if not isinstance(out, torch.Tensor):
            return False, f"output{path} is a {type(out).__name__}, not a tensor"
        if out.shape != ref.shape:
            return False, f"output{path} shape {tuple(out.shape)} != {tuple(ref.shape)}"
        tolerance = ALLCLOSE_TOLERANCE.get(str(ref.dtype).removeprefix("torch."), 1e-4)
        # in float64 a block at a time: the judge never holds float64 copies of a whole output
        ok, worst = blocks.allclose(out, ref, tolerance=tolerance)
        if not ok:
            return False, f"allclose(atol=rtol={tolerance:g}) fails: max difference {worst:.3g}"
    return True, "allclose passes"


def _compiled(model):
    import torch

    compiled = torch.compile(model)

    def run(data):
        with torch.no_grad():
            return compiled(*data)

    return run


def load_kernelbench(path: Path, *, device, scale: float) -> Problem:
    import torch

    try:
        module = import_file(path, _module_name("problem", path))
    except Exception as exc:
        raise KernelabError(f"problem {path} failed to import: {describe_exception(exc)}") from None
    missing = [
        name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)
    ]
    if missing:
        raise KernelabError(f"KernelBench problem {path} lacks {', '.join(missing)}")
    notes = []
    changed = _scale_constants(module, scale)
    if changed:
        notes.append(
            "scaled: " + ", ".join(f"{name} {old}->{new}" for name, (old, new) in changed.items())
        )

    try:
        _seeded(INIT_SEED)
        init_inputs = trees.to_device(list(module.get_init_inputs()), device)
        _seeded(INIT_SEED)
        model = module.Model(*init_inputs).to(device)
    except Exception as exc:
        raise KernelabError(
            f"problem {path}: building Model failed: {describe_exception(exc)}"
        ) from None

    on_device = [device.type == "cuda"]  # get_inputs run under the device: no host copy

    def generate(case: Case, seed: int):
        if on_device[0]:
            _seeded(seed)
            try:
                with torch.device(device):
                    return trees.to_device(list(module.get_inputs()), device)
            except Exception as exc:  # a get_inputs that needs the host (numpy, .tolist())
                if is_out_of_memory(exc):
                    # not a reason to make the inputs elsewhere: the judge and the worker would
                    # then draw different inputs from one seed. The judge's memory plan
                    # reports it (a skip), never a silent switch.
                    raise
                on_device[0] = False
        _seeded(seed)
        return trees.to_device(list(module.get_inputs()), device)

    def reference(data):
        with torch.no_grad():
            return model(*data)

    exact_model = None

    def reference64(data64):
        nonlocal exact_model
        if exact_model is None:
            exact_model = copy.deepcopy(model).to(torch.float64)
        with torch.no_grad():
            return exact_model(*data64)

    def load_solution(solution_path: Path):
        solution = import_file(solution_path, _module_name("solution", solution_path))
        if not hasattr(solution, "ModelNew"):
            raise KernelabError(f"{solution_path.name} defines no class ModelNew")
        _seeded(INIT_SEED)
        candidate = solution.ModelNew(*init_inputs).to(device)
        theirs, ours = candidate.state_dict(), model.state_dict()
        if ours and theirs.keys() == ours.keys():
            if all(theirs[key].shape == ours[key].shape for key in ours):
                candidate.load_state_dict(ours)

        def run(data):
            with torch.no_grad():
                return candidate(*data)

        return run

    declared = getattr(module, "roofline_cost", None)
    return Problem(
        name=path.stem,
        format="kernelbench",
        path=path,
        device=device,
        tests=[Case("default", {}, None, "test")],
        benchmarks=[],  # KernelBench times the one shape it checks
        generate=generate,
        reference=reference,
        reference64=reference64,
        compile_reference=lambda: _compiled(model),
        load_solution=load_solution,
        checker=lambda data, output: allclose_check(reference, data, output),
        checker_name="KernelBench allclose",
        declared_cost=(lambda data: declared(*data)) if callable(declared) else None,
        notes=notes,
    )
