"""benchmarks/cute_dsl.py's CPU part: the cases (the issue's row lengths, both dtypes, both
ops), the line counts taken from the kernel files, and the dry-run record."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cute_dsl.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("cute_dsl_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cases_cover_1k_to_256k_both_dtypes(script):
    cases = script.row_cases()
    for op in ("softmax", "rmsnorm"):
        for dtype in ("fp32", "bf16"):
            cols = sorted(c["cols"] for c in cases if c["op"] == op and c["dtype"] == dtype)
            assert cols[0] == 1024 and cols[-1] == 262144
    assert all(c["rows"] >= 1 for c in cases)
    assert script.GEMM_SIZES == (4096, 8192)


def test_code_lines_skip_comments_docstrings_and_blanks(script, tmp_path):
    py = tmp_path / "k.py"
    py.write_text(
        '"""doc\nstring"""\n\n# comment\nx = 1  # trailing\n\ndef f():\n    """d"""\n    return x\n'
    )
    assert script.code_lines(py) == 3
    cu = tmp_path / "k.cu"
    cu.write_text("// c\n/* a\n b */\nint x;\n\n__global__ void k() {}\n")
    assert script.code_lines(cu) == 2


def test_line_counts_come_from_existing_files(script):
    counts = script.line_counts()
    for language in ("cute-dsl", "triton", "cuda-c++"):
        for entry in counts[language].values():
            assert entry["files"] and entry["lines"] > 0


def test_dry_run_writes_a_record(script, tmp_path, capsys):
    assert script.main(["--dry-run", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "cute_dsl.json").read_text())
    assert record["benchmark"] == "cute_dsl" and "nvidia-cutlass-dsl" in record["versions"]
    assert record["targets"]["gemm_pct_of_cublas"] == 95.0
    assert "rows" not in record  # nothing measured without a GPU
    capsys.readouterr()


def test_quack_absent_is_one_line(script):
    found, why = script.quack_functions()
    if why is not None:
        assert "\n" not in why and "quack" in why.lower()


def test_cuda_line_count_follows_the_top_steps_includes(script):
    from kernelab.ladders.hgemm import DEFAULT_BENCHMARK_STEPS, get_step

    files = script.kernel_files()["cuda-c++"]["gemm"]
    assert files[0].endswith(get_step(DEFAULT_BENCHMARK_STEPS[-1]).file)
    assert len(files) == len(set(files)) > 1 and all(".." not in f for f in files)
    assert all((script.SRC / f).is_file() for f in files)


def test_cpu_compile_programs_name_every_cute_kernel(script):
    assert set(script._LOWER) == {"cute.softmax", "cute.rmsnorm", "cute.gemm"}
