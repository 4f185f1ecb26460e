"""GPU MODE reference-kernels problems: a directory with reference.py, task.py and task.yml.

reference.py defines `generate_input(**case)` (the case's fields, a `seed` among them),
`ref_kernel(data)` and `check_implementation(data, output)`, which returns an error string
(empty when right) in the older problems and `(ok, message)` in the newer ones. task.yml
lists `tests:` and `benchmarks:` as mappings of generate_input's arguments, and `files:`
says which file each module name comes from (`utils.py` is `../utils.py` in the upstream
repository). A submission is a file with `custom_kernel(data)`.

Modules load as the upstream runner lays them out: the problem directory on sys.path, each
`files:` entry importable under its name, the submission as `submission`.

A problem may add `roofline_cost(data) -> {"flops": F, "bytes": B}` (optional keys "dtype",
"op") to reference.py for the roofline.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate import trees
from kernelab.evaluate.problem import Case, Problem, describe_exception, import_file, scaled

RUNNER_MODULES = ("reference", "task", "utils", "submission", "eval")


# --- task.yml ----------------------------------------------------------------------------


def _scalar(text: str):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _flow_mapping(text: str) -> dict:
    """`{"m": 1, seed: 2}` (JSON, or with bare keys) as a dict."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    quoted = re.sub(r"([{,]\s*)([A-Za-z_][\w.\-]*)\s*:", r'\1"\2":', text)
    try:
        return json.loads(quoted)
    except json.JSONDecodeError:
        body = text.strip()[1:-1]
        pairs = [part.split(":", 1) for part in body.split(",") if ":" in part]
        return {_scalar(key): _scalar(value) for key, value in pairs}


def parse_task_lists(text: str) -> dict[str, list[dict]]:
    """The top-level keys of task.yml whose value is a list of mappings, read without PyYAML
    (absent from some GPU images): flow items `- {m: 1, seed: 2}` and block items
    `- m: 1` with further `key: value` lines indented under them."""
    result: dict[str, list[dict]] = {}
    current: list | None = None
    item: dict | None = None
    item_indent = 0
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if indent == 0 and not stripped.startswith("-"):
            key, _, rest = stripped.partition(":")
            current = [] if not rest.strip() else None
            if current is not None:
                result[key.strip()] = current
            item = None
            continue
        if current is None:
            continue
        if stripped.startswith("- "):
            body = stripped[2:].strip()
            if body.startswith("{"):
                current.append(_flow_mapping(body))
                item = None
            elif ":" in body:
                key, _, value = body.partition(":")
                item = {key.strip(): _scalar(value)}
                item_indent = indent + 2
                current.append(item)
            continue
        if item is not None and indent >= item_indent and ":" in stripped:
            key, _, value = stripped.partition(":")
            item[key.strip()] = _scalar(value)
    return {key: value for key, value in result.items() if all(isinstance(v, dict) for v in value)}


def read_task(path: Path) -> dict:
    text = path.read_text()
    try:
        import yaml
    except ImportError:
        return parse_task_lists(text)
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise KernelabError(f"{path}: not valid YAML ({describe_exception(exc)})") from None
    if not isinstance(loaded, dict):
        raise KernelabError(f"{path}: expected a mapping at the top level")
    return loaded


def _cases(entries, kind: str, scale: float) -> list[Case]:
    cases = []
    for entry in entries or []:
        if not isinstance(entry, dict):
            raise KernelabError(f"task.yml {kind} entries must be mappings, got {entry!r}")
        params = {
            key: scaled(value, scale) if isinstance(value, int) and key != "seed" else value
            for key, value in entry.items()
        }
        seed = params.pop("seed", None)
        label = " ".join(f"{key}={value}" for key, value in params.items()) or "default"
        cases.append(Case(label, params, seed, kind))
    return cases


# --- modules -----------------------------------------------------------------------------


def _forget_runner_modules(extra=()) -> None:
    """Drop modules an earlier problem loaded under the runner's fixed names."""
    for name in (*RUNNER_MODULES, *extra):
        sys.modules.pop(name, None)


def _preload_files(directory: Path, files) -> list[str]:
    """Import each `files:` entry whose source is another path under its own name."""
    names = []
    for entry in files or []:
        if not isinstance(entry, dict):
            continue
        name, source = str(entry.get("name", "")), str(entry.get("source", ""))
        if not name.endswith(".py") or source.startswith("@") or source == name:
            continue
        module_name = name[:-3]
        if module_name in ("reference", "submission", "eval"):
            continue
        source_path = (directory / source).resolve()
        if source_path.is_file():
            import_file(source_path, module_name)
            names.append(module_name)
    return names


def _normalise_check(result) -> tuple[bool, str]:
    """check_implementation's answer, old style (error string) or new ((ok, message))."""
    if isinstance(result, tuple) and len(result) == 2:
        ok, message = result
        return bool(ok), str(message or "")
    if isinstance(result, bool):
        return result, ""
    if result is None:
        return True, ""
    text = str(result)
    return not text, text


def _compiled(ref_kernel):
    import torch

    return torch.compile(ref_kernel)


def load_gpumode(directory: Path, *, device, scale: float) -> Problem:
    task_path = directory / "task.yml"
    if not task_path.is_file():
        raise KernelabError(f"GPU MODE problem {directory} has no task.yml")
    task = read_task(task_path)
    tests = _cases(task.get("tests"), "test", scale)
    benchmarks = _cases(task.get("benchmarks"), "benchmark", scale)
    if not tests and not benchmarks:
        raise KernelabError(f"{task_path} lists no tests and no benchmarks")

    _forget_runner_modules()
    while str(directory) in sys.path:  # to the front, ahead of another problem's task.py
        sys.path.remove(str(directory))
    sys.path.insert(0, str(directory))
    try:
        _preload_files(directory, task.get("files"))
        reference = import_file(directory / "reference.py", "reference")
    except Exception as exc:
        raise KernelabError(
            f"problem {directory}/reference.py failed to import: {describe_exception(exc)}"
        ) from None
    missing = [
        name
        for name in ("generate_input", "ref_kernel", "check_implementation")
        if not callable(getattr(reference, name, None))
    ]
    if missing:
        raise KernelabError(f"{directory}/reference.py lacks {', '.join(missing)}")

    def generate(case: Case, seed: int):
        import torch

        torch.manual_seed(seed)
        return trees.to_device(reference.generate_input(**case.params, seed=seed), device)

    def load_solution(solution_path: Path):
        sys.modules.pop("submission", None)
        submission = import_file(solution_path, "submission")
        kernel = getattr(submission, "custom_kernel", None)
        if not callable(kernel):
            raise KernelabError(f"{solution_path.name} defines no custom_kernel(data)")
        return kernel

    declared = getattr(reference, "roofline_cost", None)
    scaled_note = [f"sizes scaled by {scale:g}"] if scale != 1.0 else []
    return Problem(
        name=directory.name,
        format="gpumode",
        path=directory,
        device=device,
        tests=tests,
        benchmarks=benchmarks,
        generate=generate,
        reference=reference.ref_kernel,
        reference64=reference.ref_kernel,
        compile_reference=lambda: _compiled(reference.ref_kernel),
        load_solution=load_solution,
        checker=lambda data, output: _normalise_check(reference.check_implementation(data, output)),
        checker_name="the problem's check_implementation",
        # its own allclose (GPU MODE's verbose_allclose): a difference, a tolerance and their
        # masks, as large as the output, beside its reference run (an estimate)
        checker_outputs=4,
        declared_cost=declared if callable(declared) else None,
        notes=scaled_note,
    )
