"""benchmarks/cute_dsl.py's CPU part: the cases (the target row lengths, both dtypes, both
ops), the line counts taken from the kernel files, and the dry-run record."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("cute_dsl")


def test_cases_cover_1k_to_256k_both_dtypes_forward_and_backward(script):
    cases = script.row_cases()
    for op in ("softmax", "rmsnorm", "softmax_backward", "rmsnorm_backward"):
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


def _record(script, **rows):
    """A stand-in record: copy at 1 ms for 4 GB moved, the kernels as given (ms), keyed
    "op:cols"."""
    base = {"bytes": 4e9, "copy_ms": 1.0, "rows": 1}
    made = []
    for key, (cute, triton, quack) in rows.items():
        op, cols = key.split(":")[0], int(key.split(":")[1])
        row = {**base, "op": op, "dtype": "bf16", "cols": cols, "cute_ms": cute,
               "triton_ms": triton, "quack_ms": quack}  # fmt: skip
        for column in ("cute", "triton", "quack"):
            ms = row[f"{column}_ms"]
            row[f"{column}_pct_of_copy"] = 100 / ms if ms else None
        made.append(row)
    return {"targets": script.TARGETS, "versions": {"nvidia-cutlass-dsl": "4.2.1"},
            "gpu": "h200", "rows": made, "gemm": [], "lines_of_kernel_code": {},
            "notes": ["QuACK not measured: one line"]}  # fmt: skip


def test_row_table_judges_each_target(script):
    cases = {
        ("softmax", 4096): (1.05, 1.2, None),  # 95 % of copy: met
        ("softmax", 8192): (1.2, 1.3, None),  # 83 %: missed
        ("softmax", 65536): (1.05, 1.0, None),  # 95 % but slower than Triton at 64K: missed
        ("softmax", 131072): (1.05, 1.1, 1.0),  # slower than QuACK: missed
        ("rmsnorm", 4096): (1.08, None, None),  # 92.6 %: met
    }
    record = _record(script, **{f"{op}:{cols}": v for (op, cols), v in cases.items()})
    table = script.row_table(record).splitlines()[2:]
    assert [line.rsplit("|", 2)[-2].strip() for line in table] == [
        "met", "missed", "missed", "missed", "met",
    ]  # fmt: skip
    assert "4.00" in table[0]  # copy TB/s: 4 GB in 1 ms
    text = script.tables(record)
    assert "nvidia-cutlass-dsl 4.2.1" in text and "- QuACK not measured" in text


def test_a_backward_is_judged_by_its_three_tensors_against_the_copys_two(script):
    """A backward moving 3 tensors of row data in 1.5x the copy's time runs at the copy's
    bandwidth: 100 %, not the 66.7 % a ratio of times would say."""
    from kernelab.spec.reference import OPS

    shape = {"rows": 8, "cols": 1024}
    tensor = 8 * 1024 * 2  # bf16 bytes of one [rows, cols] tensor
    assert OPS["softmax_backward"].cost(shape, "bf16").bytes == 3 * tensor  # y, dy; dx
    row = {"bytes": 2 * tensor, "op_bytes": 3 * tensor, "copy_ms": 1.0}
    assert script.pct_of_copy(row, 1.5) == pytest.approx(100.0)
    assert script.pct_of_copy(row, None) is None


def test_the_row_table_judges_rmsnorm_backward_at_80_and_leaves_softmax_backward_unjudged(script):
    record = _record(script, **{"rmsnorm_backward:4096": (1.2, 1.3, None),  # 83 %: met
                                "softmax_backward:4096": (1.2, 1.3, None)})  # fmt: skip
    verdicts = [
        line.rsplit("|", 2)[-2].strip() for line in script.row_table(record).splitlines()[2:]
    ]
    assert verdicts == ["met", "-"]


def test_gemm_and_cost_tables(script):
    record = _record(script)
    record["gemm"] = [{"size": 4096, "flops": 2 * 4096**3, "cublas_ms": 0.2,
                       "cute_pct_of_cublas": 96.0, "cuda_cpp_pct_of_cublas": 99.0,
                       "cuda_cpp_step": "hgemm:19", "triton_pct_of_cublas": None}]  # fmt: skip
    gemm = script.gemm_table(record).splitlines()[2]
    assert "96.0 %" in gemm and "(hgemm:19)" in gemm and gemm.endswith("| met |")
    record["lines_of_kernel_code"] = script.line_counts()
    record["compile"] = {"cute.softmax": {"first_call_ms": 900.0, "warm_launch_ms": 0.012},
                         "hgemm:19": {"first_call_ms": 4000.0, "warm_launch_ms": 0.01},
                         "triton.matmul": {"first_call_ms": 2000.0, "warm_launch_ms": 0.02}}  # fmt: skip
    record["cpu_compile"] = {"seconds": {"cute.softmax": {"seconds": 0.3},
                                         "hgemm:19 (nvcc)": {"seconds": 3.0}}}  # fmt: skip
    cost = script.cost_table(record)
    softmax = next(line for line in cost.splitlines() if "| cute-dsl | softmax |" in line)
    assert "900 ms" in softmax and "12.0 us" in softmax and "0.30 s" in softmax
    cuda = next(line for line in cost.splitlines() if "cuda-c++" in line)
    assert "3.00 s" in cuda and "4000 ms" in cuda
    assert "2000 ms" in next(line for line in cost.splitlines() if "| triton | gemm |" in line)


def test_tables_option_prints_a_record(script, tmp_path, capsys):
    path = tmp_path / "cute_dsl.json"
    path.write_text(json.dumps(_record(script)))
    assert script.main(["--tables", str(path)]) == 0
    assert "| op | dtype | cols |" in capsys.readouterr().out


def test_the_bulk_column_is_measured_on_rows_of_whole_vectors_only(script):
    assert script.cols_of_whole_vectors({"cols": 1024, "dtype": "bf16"})
    assert not script.cols_of_whole_vectors({"cols": 1009, "dtype": "fp32"})
    assert all(script.cols_of_whole_vectors(c) for c in script.row_cases())  # the targets' rows


def test_the_bulk_column_names_kernels_that_take_bulk(script):
    import importlib
    import inspect

    assert set(script.BULK_OPS) == {"softmax", "rmsnorm", "rmsnorm_backward"}
    for module, function in script.BULK_OPS.values():
        fn = getattr(importlib.import_module(f"kernelab.ops.{module}"), function)
        assert inspect.signature(fn).parameters["bulk"].default is False


def test_a_shape_the_kernel_refuses_is_a_note_not_the_end_of_the_run(script, monkeypatch):
    import types

    from kernelab.errors import KernelabError
    from kernelab.harness import check
    from kernelab.spec import registry

    refusal = "a row of 262144 values needs a cluster of 16 CTAs"

    def refuse(*args, **kwargs):
        raise KernelabError(refusal)

    built = types.SimpleNamespace(build=lambda: lambda *inputs: None)
    monkeypatch.setattr(registry, "get", lambda name: built)
    monkeypatch.setattr(check, "check_implementation", refuse)
    shape = {"rows": 1, "cols": 262144}
    assert script._checked("cute.softmax_backward", "softmax_backward", shape, "bf16") == (
        None, refusal)  # fmt: skip
    assert script._checked_variant(0.1, "softmax", shape, "bf16", (), bulk=True) is None
