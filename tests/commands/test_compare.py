"""`kernelab compare OLD NEW`: works on record files, on a machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from record_factory import make_record

from kernelab.cli import main
from kernelab.harness.records import save_records


def write_pair(tmp_path):
    old = save_records(
        [
            make_record((1.0, 0.002), implementation="x"),
            make_record((1.0, 0.002), implementation="y"),
        ],
        tmp_path / "old.json",
    )
    new = save_records(
        [
            make_record((0.5, 0.002), implementation="x"),
            make_record((1.004, 0.002), implementation="y"),
        ],
        tmp_path / "new.json",
    )
    return old, new


def test_compare_json(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    assert main(["compare", str(old), str(new), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    labels = {c["implementation"]: c["label"] for c in result["comparisons"]}
    assert labels == {"x": "FAST", "y": "SAME"}
    assert result["counts"] == {"FAST": 1, "SLOW": 0, "SAME": 1}


def test_compare_table(tmp_path):
    old, new = write_pair(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "compare", str(old), str(new)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert "FAST" in done.stdout and "SAME" in done.stdout and "x" in done.stdout


def test_compare_bad_file_is_one_line(tmp_path, capsys):
    old, _ = write_pair(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["compare", str(old), str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kernelab:") and captured.err.count("\n") == 1


def _one_line_exit_2(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kernelab:") and captured.err.count("\n") == 1
    return captured.err


def test_compare_a_folder_is_one_line(tmp_path, capsys):
    old, _ = write_pair(tmp_path)
    folder = tmp_path / "adir"
    folder.mkdir()
    err = _one_line_exit_2(capsys, ["compare", str(folder), str(old)])
    assert "is a folder" in err


@pytest.mark.parametrize("median", [0, None, "fast", -1.0, float("nan"), True])
def test_compare_malformed_median_is_one_line(tmp_path, capsys, median):
    old, new = write_pair(tmp_path)
    data = json.loads(new.read_text())
    data[1]["stats"]["median"] = median
    new.write_text(json.dumps(data))
    err = _one_line_exit_2(capsys, ["compare", str(old), str(new), "--json"])
    assert "record 1" in err and "stats.median" in err and repr(median) in err


@pytest.mark.parametrize("noise", ["wide", -0.5])
def test_compare_malformed_noise_is_one_line(tmp_path, capsys, noise):
    old, new = write_pair(tmp_path)
    data = json.loads(old.read_text())
    data[0]["stats"]["rel_noise"] = noise
    old.write_text(json.dumps(data))
    err = _one_line_exit_2(capsys, ["compare", str(old), str(new)])
    assert "record 0" in err and "rel_noise" in err


def test_compare_shape_not_an_object_is_one_line(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    data = json.loads(new.read_text())
    data[0]["shape"] = [4096, 4096]
    new.write_text(json.dumps(data))
    assert "shape" in _one_line_exit_2(capsys, ["compare", str(old), str(new)])


def test_compare_fail_on_slow_exits_1_only_when_slow(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    # new is FAST and SAME against old: no SLOW, exit 0 even with the flag
    assert main(["compare", str(old), str(new), "--fail-on-slow", "--json"]) == 0
    capsys.readouterr()
    # the other way round x is SLOW (1.0 against 0.5)
    assert main(["compare", str(new), str(old), "--fail-on-slow", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["counts"]["SLOW"] == 1
    # without the flag a SLOW pair does not change the exit status
    assert main(["compare", str(new), str(old), "--json"]) == 0


def test_compare_output_is_whole_when_piped(tmp_path):
    """Piped, there is no screen to fit: no cell clipped to "...", no line wrapped at 80."""
    long_name = "triton.softmax_with_a_rather_long_implementation_name"
    old = save_records([make_record((1.0, 0.002), implementation=long_name)], tmp_path / "o.json")
    new = save_records([make_record((2.0, 0.002), implementation=long_name)], tmp_path / "n.json")
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "compare", str(old), str(new)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )
    assert done.returncode == 0
    assert long_name in done.stdout and "…" not in done.stdout
    summary = next(line for line in done.stdout.splitlines() if line.startswith("FAST"))
    assert len(summary) > 80 and summary.rstrip().endswith("samples)")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("stats", None, "stats are null"),
        ("rel_noise", None, "stats.rel_noise is None"),
        ("samples_ms", [0.0, 1.0], "samples_ms[0] is 0.0"),
        ("samples_ms", [1.0, float("nan")], "samples_ms[1] is nan"),
        ("samples_ms", ["fast"], "samples_ms[0] is 'fast'"),
        ("samples_ms", "1.0", "samples_ms is '1.0'"),
    ],
)
def test_compare_null_stats_noise_and_bad_samples_are_one_line(
    tmp_path, capsys, field, value, said
):
    old, new = write_pair(tmp_path)
    data = json.loads(new.read_text())
    if field == "rel_noise":
        data[0]["stats"]["rel_noise"] = value
    else:
        data[0][field] = value
    new.write_text(json.dumps(data))
    err = _one_line_exit_2(capsys, ["compare", str(old), str(new), "--json"])
    assert said in err


def test_compare_a_file_without_records_is_one_line(tmp_path, capsys):
    old, _ = write_pair(tmp_path)
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert "holds no records" in _one_line_exit_2(capsys, ["compare", str(empty), str(old)])


def test_compare_warns_when_the_pairs_ran_on_different_gpus(tmp_path, capsys):
    old = save_records([make_record((1.0, 0.002), implementation="x")], tmp_path / "old.json")
    on_h100 = make_record((1.5, 0.002), implementation="x")
    on_h100.gpu, on_h100.gpu_id = "NVIDIA H100 80GB HBM3", "h100-sxm"
    new = save_records([on_h100], tmp_path / "new.json")
    assert main(["compare", str(old), str(new), "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "1 of 1 pairs were measured on different GPUs" in result["gpus_differ"]
    (pair,) = result["comparisons"]
    assert (pair["old_gpu"], pair["new_gpu"]) == ("h200", "h100-sxm")
    warning = [line for line in captured.err.splitlines() if "different GPUs" in line]
    assert len(warning) == 1 and "h200 in the old file, h100-sxm in the new" in warning[0]
    # the same card on both sides: no warning
    assert main(["compare", str(old), str(old), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["gpus_differ"] == "" and "different GPUs" not in captured.err


def test_compare_fits_an_80_column_terminal():
    import io

    from kernelab.commands.compare import _render
    from kernelab.harness.records import compare_records
    from kernelab.output import _Console

    long_shape = {"rows": 16384, "cols": 131072}
    pairs = [(make_record((1.0, 0.01), implementation=name, shape=long_shape),
              make_record((1.3, 0.01), implementation=name, shape=long_shape))
             for name in ("triton.layernorm", "triton.softmax")]  # fmt: skip
    comparisons = compare_records([a for a, _ in pairs], [b for _, b in pairs])
    result = {"old": "benchmarks/results/h200/pytorch/pytorch_targets_20261202.json.xz",
              "new": "benchmarks/results/h100/pytorch/pytorch_targets_20261206.json.xz",
              "rule": "SAME when ...", "counts": {"FAST": 0, "SLOW": 2, "SAME": 0},
              "comparisons": [c.to_dict() for c in comparisons]}  # fmt: skip
    buffer = io.StringIO()
    console = _Console(file=buffer, force_terminal=True, width=80, color_system=None)
    _render(result)(console)
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "triton.layernorm" in text and "+30.0 %" in text and "SLOW" in text
    assert "…" not in text and "the op column on a wider terminal" in text
    wide = _Console(file=io.StringIO(), force_terminal=True, width=140, color_system=None)
    _render(result)(wide)
    assert "┃ op " in wide.file.getvalue()  # every column where there is room
