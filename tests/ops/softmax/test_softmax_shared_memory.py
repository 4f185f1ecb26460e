"""The softmax kernels whose rows wait in shared memory (Gluon, Hopper TMA: shared.py,
shared_split.py, held.py): where they are offered, how they turn themselves off, and on a
GPU their answers and kept exchange words.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import (  # noqa: E402  (sets TRITON_INTERPRET without a GPU)
    DEVICE,
    kernel_fixture,
)

pytest.importorskip("triton")

from softmax_checks import assert_precise_at_huge_logits  # noqa: E402

from kernelab.harness.check import check_implementation  # noqa: E402

softmax = kernel_fixture("softmax")


def test_shared_row_softmax_fits_only_rows_its_tma_boxes_can_address():
    from kernelab.ops.softmax import shared as shared

    fits = shared.shape_fits
    # rows of 2- or 4-byte values in whole steps of 8 lines of 256, contiguous, <= 64 KiB
    assert fits(2048, 2, 2048) and fits(32768, 2, 32768) and fits(20480, 2, 20480)
    assert fits(16384, 4, 16384) and not fits(32768, 4, 32768)  # fp32: 64 KiB at most
    assert not fits(1024, 2, 1024)  # four lines: not a whole step
    assert not fits(30000, 2, 30000)  # not whole lines
    assert not fits(65536, 2, 65536)  # 128 KiB: one program per SM
    assert not fits(4096, 2, 4160)  # a row stride the line view cannot follow
    # never on the CPU or under the interpreter, so never offered there
    x = torch.randn(4, 4096, dtype=torch.bfloat16)
    assert not shared.fits(x) and shared.candidates_for(x) == []
    # the GPU test of each configuration runs them by index
    assert [(c["SUB"], c["num_warps"]) for c in shared.CONFIGS] == [(8, 8), (16, 8), (8, 4)]


def test_shared_row_softmax_offers_the_steps_that_divide_a_row(monkeypatch):
    # As if on a Hopper GPU: rows of 72 lines take the steps of 8 only, 128 lines all three
    # configurations; the tuners' keys carry those steps, so a winner is never reused on rows
    # whose lines it does not divide.
    from kernelab.ops.softmax import shared as shared

    monkeypatch.setattr(shared, "fits", lambda x2d: True)
    steps = {cols: [c["SUB"] for c in shared.candidates_for(torch.empty(2, cols))]
             for cols in (18432, 32768)}  # fmt: skip
    assert steps == {18432: [8, 8], 32768: [8, 16, 8]}


def test_shared_row_softmax_leads_the_row_tuner_from_8_kib_rows(softmax, monkeypatch):
    # As if on a Hopper GPU: rows of 8 KiB or more (fp32 2K, bf16 4K) list the shared-memory
    # kernel first, so it is what small inputs and an untuned run launch; 4 KiB rows (bf16
    # 2K) keep the register tile first and the shared kernel last. Nothing dropped.
    from kernelab.ops.softmax import shared as shared

    monkeypatch.setattr(shared, "fits", lambda x2d: True)
    for cols, dtype, first in [
        (2048, torch.float32, "shared-row"),
        (4096, torch.bfloat16, "shared-row"),
        (2048, torch.bfloat16, None),
    ]:
        x = torch.empty(4, cols, dtype=dtype, device=DEVICE)
        listed = softmax.single_pass_candidates_for(x)
        assert listed[0].get("path") == first
        assert sorted(map(str, listed)) == sorted(
            map(str, softmax.row_candidates_for(x) + shared.candidates_for(x))
        )


def test_shared_memory_softmax_turns_itself_off_with_a_warning_where_gluon_fails(monkeypatch):
    # A Triton or a GPU where the Gluon kernel does not compile or run: the first check
    # warns once and the shared-memory paths are not offered (the register kernels serve).
    from kernelab.ops.softmax import shared as shared

    def broken(*args, **kwargs):
        raise RuntimeError("PassManager::run failed")

    monkeypatch.setattr(shared, "_launch_row", broken)
    shared._works_here.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"shared-memory \(Gluon\) kernels are off"):
            assert shared.works_here(0, torch.bfloat16) is False
        assert shared.works_here(0, torch.bfloat16) is False  # asked once, then remembered
    finally:
        shared._works_here.cache_clear()


# Compiles the shared-row kernel for sm_90 with this Triton (no GPU) in a process without
# TRITON_INTERPRET; prints (registers, spilled bytes, TMA load in the SASS, shared bytes).
_SHARED_ROW_PROBE = """
import json, re, subprocess, sys, tempfile
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type
from kernelab.runtime.cuda.sass import disassemble, find_tool
from kernelab.ops.softmax import shared as shared

kernel = shared._softmax_shared_row_kernel
cols, sub, warps = (int(v) for v in sys.argv[1:4])
lines = cols // 256
rows = torch.empty(4 * lines, 256, dtype=torch.bfloat16)
layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
desc = TensorDescriptor(rows, list(rows.shape), list(rows.stride()), [sub, 256], layout)
signature = {"x_desc": mangle_type(desc), "out_ptr": "*bf16", "out_row_stride": "i32",
             "LINES": "constexpr", "SUB": "constexpr", "VEC": "constexpr",
             "num_warps": "constexpr"}
constexprs = {"LINES": lines, "SUB": sub, "VEC": 8, "num_warps": warps}
source = GluonASTSource(
    fn=kernel, signature=signature,
    constexprs={(kernel.arg_names.index(n),): v for n, v in constexprs.items()},
    attrs={(kernel.arg_names.index("out_ptr"),): [["tt.divisibility", 16]]})
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
    cubin.write(compiled.asm["cubin"])
    cubin.flush()
    sass = disassemble(cubin.name)
    usage = subprocess.run([find_tool("cuobjdump"), "-res-usage", cubin.name],
                           capture_output=True, text=True).stdout
registers, stack = (int(v) for v in re.search(r"REG:(\\d+) STACK:(\\d+)", usage).groups())
print(json.dumps([registers, stack, "UTMALDG" in sass, compiled.metadata.shared]))
"""


@pytest.mark.parametrize("sub, warps", [(8, 8), (16, 8), (8, 4)])
def test_shared_row_softmax_compiles_for_hopper_with_tma_and_few_registers(sub, warps):
    # The row comes in by TMA (UTMALDG) into 64 KiB of shared memory at 32K bf16 values, and
    # the registers stay few (27-57 compiled for sm_90 by Triton 3.6 and 3.9), so three
    # programs fit per SM: the point of the kernel. Needs Gluon and the CUDA tools.
    import json

    from kernelab.ops.softmax import shared as shared
    from kernelab.runtime.cuda.sass import find_tool

    if shared.gluon is None or find_tool("cuobjdump") is None:
        pytest.skip("needs a Triton with Gluon, and cuobjdump")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    probe = subprocess.run(
        [sys.executable, "-c", _SHARED_ROW_PROBE, "32768", str(sub), str(warps)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    registers, stack, tma_load, shared_bytes = json.loads(probe.stdout.strip().splitlines()[-1])
    assert tma_load and stack == 0
    assert registers <= 64, registers  # three programs of 8 warps: 65,536 / (3 x 256) = 85
    assert 64 * 1024 <= shared_bytes <= 65 * 1024, shared_bytes


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(3), ids=["sub8w8", "sub16w8", "sub8w4"])
def test_gpu_softmax_shared_row_kernel(softmax, index):
    from kernelab.ops.softmax import shared as shared

    config = dict(shared.CONFIGS[index])
    fn = functools.partial(softmax.softmax, config=config)
    for dtype, torch_dtype in (
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
        ("fp32", torch.float32),
    ):
        for shape in (
            {"rows": 1, "cols": 32768},
            {"rows": 3001, "cols": 4096},
            {"rows": 257, "cols": 20480},  # 80 lines: whole steps of 8 and of 16
            {"rows": 4096, "cols": 16384},
            {"rows": 77, "cols": 2048},
        ):
            x = torch.empty(shape["rows"], shape["cols"], device="cuda", dtype=torch_dtype)
            if shape["cols"] // 256 % config["SUB"] or shape["cols"] * x.element_size() > 65536:
                assert config not in shared.candidates_for(x)
                continue
            # the kernel itself runs, not a fallback under its name
            assert softmax.long_rows.launch_one(x, torch.empty_like(x), config), (config, shape)
            report = check_implementation(fn, "softmax", shape, dtype, trials=2)
            assert report.ok, f"{config} {dtype} {shape}: {report.message}"
    # a row of only -inf is NaN (the documented output); -inf entries get 0
    x = 3 * torch.randn(6, 8192, device="cuda", dtype=torch.bfloat16)
    x[2] = float("-inf")
    x[4, :4000] = float("-inf")
    y = fn(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3, 4, 5]]).all()
    assert (y[4, :4000] == 0).all()
    expected = torch.softmax(x[[0, 1, 3, 4, 5]].double(), dim=-1)
    assert torch.allclose(y[[0, 1, 3, 4, 5]].double(), expected, rtol=2e-2, atol=1e-6)
    # huge logits: one c for the whole row, so its rounding cancels
    x = (1e4 + torch.randn(8, 32768, device="cuda")).to(torch.bfloat16)
    expected = torch.softmax(x.double(), dim=-1)
    assert torch.allclose(fn(x).double(), expected, rtol=2e-2, atol=1e-7)


@pytest.mark.gpu
def test_gpu_softmax_shared_row_is_offered_only_where_it_fits(softmax):
    bf16 = torch.empty(64, 32768, device="cuda", dtype=torch.bfloat16)
    # the untuned default of 32K bf16 rows, and a candidate of the row tuner at 4K
    assert softmax.long_row_candidates_for(bf16)[0]["path"] == "shared-row"
    assert any(
        c.get("path") == "shared-row"
        for c in softmax.shared.candidates_for(bf16[:, :4096].contiguous())
    )
    # not for a 128 KiB row (32K fp32), a strided row, rows of partial steps, or a start 8
    # bytes off
    shared = softmax.shared
    assert shared.candidates_for(bf16.float()) == []
    assert shared.candidates_for(bf16[:, :4096]) == []
    assert shared.candidates_for(bf16[:, :30000].contiguous()) == []
    assert shared.candidates_for(bf16.view(-1)[4 : 4 + 4096 * 8].view(8, 4096)) == []
    # 72 lines take steps of 8 only: a winner of steps of 16 tuned at 32K is never reused there
    assert {c["SUB"] for c in shared.candidates_for(bf16[:, :18432].contiguous())} == {8}
    assert softmax.long_rows.tuner_key(bf16) != softmax.long_rows.tuner_key(bf16[:, :18432].contiguous())


def test_shared_split_softmax_offers_rows_of_whole_chunks():
    from kernelab.ops.softmax import shared_split as split

    def chunks(cols, itemsize):
        return [cols * itemsize // c["CHUNK_BYTES"] for c in split.offered(cols, itemsize)]

    # chunks of 64 KiB (steps of 8 and of 16 lines) and of 32 KiB, 2 to 64 per row
    assert chunks(65536, 2) == [2, 4, 2] and chunks(262144, 2) == [8, 16, 8]
    assert chunks(32768, 4) == [2, 4, 2] and chunks(262144, 4) == [16, 32, 16]
    assert chunks(32768, 2) == [2]  # one 64 KiB chunk is the whole row (softmax_shared)
    assert chunks(70001, 4) == [] and chunks(65536, 1) == [] and chunks(1 << 22, 4) == []
    assert split.candidates_for(torch.empty(4, 65536, dtype=torch.bfloat16)) == []  # CPU


def test_a_gluon_kernel_that_fails_its_first_launch_is_turned_off_with_a_warning():
    from kernelab.ops.softmax.shared import works_or_warn

    def broken() -> bool:
        raise RuntimeError("PassManager::run failed\nmore lines")

    with pytest.warns(RuntimeWarning, match=r"the held kernel is off here \(RuntimeError: "):
        assert works_or_warn("the held kernel is", broken) is False
    with pytest.warns(RuntimeWarning, match="a wrong answer"):
        assert works_or_warn("the held kernel is", lambda: False) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert works_or_warn("the held kernel is", lambda: True) is True


def test_held_softmax_offers_2_byte_rows_of_262k_values_or_more(softmax):
    from kernelab.ops.softmax import held as held

    def chunks(cols, itemsize):
        return [cols // c["CHUNK"] for c in held.offered(cols, itemsize)]

    # rows of 262K values or more, whole chunks of 8,192 or 4,096, at most 256 a row; 2-byte
    # values only (fp32 lost at 262K)
    assert chunks(262_144, 2) == [32, 64, 64] and chunks(1 << 20, 2) == [128, 256, 256]
    assert chunks(131_072, 2) == [] and chunks(262_144 + 4096 * 256, 2) == [160]
    assert chunks(8192 * 257, 2) == [] and chunks(262_144 + 4096, 2) == [65, 65]
    assert chunks(262_144 + 100, 2) == [] and chunks(262_144, 4) == [] == chunks(262_144, 1)
    assert held.candidates_for(torch.empty(2, 262_144, dtype=torch.bfloat16)) == []  # CPU
    # a forced path runs its first config; the held kernel is the winner nowhere
    # (the cooperative c2048 holding its input pairs took bf16 262K), so it never goes first
    assert softmax.long_rows.path_default("held", torch.bfloat16) == held.CONFIGS[0]
    others = [{"path": "cooperative", "CHUNK": 1024}]
    offered = [dict(c) for c in held.CONFIGS]
    assert softmax.long_rows.gluon_winner_first(others + offered, 2, 262_144) == others + offered
    assert softmax.long_rows.gluon_winner_first(others + offered, 2, 131_072) == others + offered


def _launched_by(launch, config):
    """x -> out from launch(x, out, config), which must report that it ran."""

    def run(x):
        out = torch.empty_like(x)
        assert launch(x, out, config), config
        return out

    return run


def _held_launch(config):
    """The held kernel itself on any dtype (fp32 too: its tolerance is the tight one)."""
    from kernelab.ops.softmax import held as held

    return _launched_by(held._launch, config)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype,n_cols", [("bf16", 65_536), ("bf16", 131_072), ("fp32", 131_072), ("bf16", 262_144)]
)
def test_gpu_softmax_kept_words_continue_across_calls(softmax, monkeypatch, dtype, n_cols):
    # turn_words.REUSE on the GPU, where a row's chunks are many peers: the measured winner
    # (and at bf16 262K the held kernel) called again and again on kept words, each call on
    # fresh data, checked against the reference; a stale word read as current would mix
    # rows up or poison them with NaN. (The winners there are the flat kernel's, whose kept
    # words change their tag each call instead of continuing turns.)
    from kernelab.ops.softmax import held as softmax_held
    from kernelab.runtime import turn_words

    monkeypatch.setattr(turn_words, "REUSE", True)
    turn_words.forget()
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    configs = [softmax.long_row_candidates(n_cols, torch_dtype)[0]]
    if dtype == "bf16" and n_cols >= softmax_held.LEAST_COLS:
        configs.append(dict(softmax_held.CONFIGS[0]))

    for config in configs:
        assert config.get("DEFER") or config["path"] in ("held", "flat"), config
        run = _launched_by(softmax.long_rows.launch_one, config)
        for rows in (301, 97, 301):
            shape = {"rows": rows, "cols": n_cols}
            report = check_implementation(run, "softmax", shape, dtype, trials=3)
            assert report.ok, f"{config} {shape}: {report.message}"
    kept = list(turn_words._kept.values())
    assert len(kept) >= len(configs) and any(k.any() for k in kept)
    turn_words.forget()


@pytest.mark.gpu
def test_gpu_softmax_configs_of_one_shape_share_kept_words(softmax, monkeypatch):
    # The tuner times every deferred candidate on the same kept words where their workspace
    # shapes agree (same chunk, same packing): each must continue the turns another one
    # left. bf16 131K: the c1024 candidates (three) take turns on one workspace, and the
    # c2048 ones (two) on another, each call on fresh data and checked.
    from kernelab.runtime import turn_words

    monkeypatch.setattr(turn_words, "REUSE", True)
    turn_words.forget()
    configs = [c for c in softmax.long_row_candidates(131_072, torch.bfloat16) if c.get("DEFER")]
    chunks = sorted({c["CHUNK"] for c in configs})
    for round_ in range(2):
        for config in configs:
            run = _launched_by(softmax.long_rows.launch_one, config)
            shape = {"rows": 97 + 200 * round_, "cols": 131_072}
            report = check_implementation(run, "softmax", shape, "bf16", trials=2)
            assert report.ok, f"{config} {shape}: {report.message}"
    shapes = {key[4] for key in turn_words._kept}
    assert len(shapes) == len(chunks), turn_words._kept.keys()
    turn_words.forget()


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(3), ids=["c8192w4", "c4096w2", "c4096w2-r128"])
def test_gpu_softmax_held_kernel(softmax, index):
    from kernelab.ops.softmax import held as held

    config = dict(held.CONFIGS[index])
    public = functools.partial(softmax.softmax, config=config)
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for shape in (
            {"rows": 1, "cols": 262_144},
            {"rows": 301, "cols": 262_144},
            {"rows": 7, "cols": 1 << 20},
        ):
            x = torch.empty(shape["rows"], shape["cols"], device="cuda", dtype=torch_dtype)
            # the kernel itself runs, not a fallback under its name
            assert softmax.long_rows.launch_one(x, torch.empty_like(x), config), (config, shape)
            report = check_implementation(public, "softmax", shape, dtype, trials=2)
            assert report.ok, f"{config} {dtype} {shape}: {report.message}"
    # rows further apart than their length (a row stride of 262,208 values)
    wide = torch.randn(5, 262_144 + 64, device="cuda", dtype=torch.bfloat16)[:, :262_144]
    assert held.candidates_for(wide) == [dict(c) for c in held.CONFIGS]
    expected = torch.softmax(wide.float(), dim=-1)
    torch.testing.assert_close(public(wide).float(), expected, rtol=2e-2, atol=1e-7)
    # fp32 through the kernel itself (the tight tolerance), more rows than resident groups
    report = check_implementation(
        _held_launch(config), "softmax", {"rows": 301, "cols": 262_144}, "fp32", trials=2
    )
    assert report.ok, f"{config} fp32: {report.message}"
    # -inf rows are NaN, a chunk of only -inf gets 0, huge logits stay within 1e-5 (fp32)
    assert_precise_at_huge_logits(_held_launch(config), config, n_cols=262_144)
    info = softmax.long_row_plan(wide.contiguous(), config)
    assert info["path"] == "held" and info["spills"] == 0
    assert info["chunks_per_row"] == 262_144 // config["CHUNK"]
    # 12 warps per SM or more (c8192 w4: 3 programs; c4096 w2: 6, or 8 at 128 registers)
    assert info["per_sm"] * config["num_warps"] >= 12 and info["groups"] >= 1, info


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(3), ids=["c64k-sub8w8", "c32k-sub8w8", "c64k-sub16w4"])
def test_gpu_softmax_shared_split_kernel(softmax, index):
    from kernelab.ops.softmax import shared_split as split

    config = dict(split.CONFIGS[index])
    fn = functools.partial(softmax.softmax, config=config)
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        for shape in (
            {"rows": 1, "cols": 262_144},
            {"rows": 301, "cols": 65_536},
            {"rows": 7, "cols": 131_072},
        ):
            x = torch.empty(shape["rows"], shape["cols"], device="cuda", dtype=torch_dtype)
            # the kernel itself runs, not a fallback under its name
            assert softmax.long_rows.launch_one(x, torch.empty_like(x), config), (config, shape)
            report = check_implementation(fn, "softmax", shape, dtype, trials=2)
            assert report.ok, f"{config} {dtype} {shape}: {report.message}"
    # -inf rows are NaN, a chunk of only -inf gets 0, huge logits stay within 1e-5 (fp32)
    assert_precise_at_huge_logits(fn, config, n_cols=65_536)
