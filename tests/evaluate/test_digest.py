"""The digest that holds a timed output to the bytes the call returned: its fold on the
device matches its arithmetic in Python integers, it follows every bit, and a forger that
beats a sum of the words does not beat it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from triton_on_cpu import DEVICE  # sets TRITON_INTERPRET without a GPU: before any Triton import

sys.modules.pop("kernelab.evaluate.digest_kernel", None)  # built for the interpreter if need be
from kernelab.evaluate import digest  # noqa: E402

FORGER = Path(__file__).resolve().parents[1] / "fixtures/eval/checks/forges_the_fingerprint.py"


def _random_words(count: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**63), 2**63 - 1, (count,), dtype=torch.int64, generator=generator)


@pytest.mark.parametrize("count", [1, 7, digest.W - 1, digest.W, digest.W + 1, 5003])
def test_the_fold_is_its_python_arithmetic(count):
    words = _random_words(count, seed=count)
    folded = digest.fold(words.to(DEVICE)).cpu().tolist()
    assert len(folded) == 2 * digest.columns(count)
    assert folded == digest.fold_reference(words.tolist())


@pytest.mark.parametrize("method", ["host_digest", "device_digest"])
def test_the_digest_follows_every_bit_and_nothing_else(method):
    made = getattr(digest, method)
    # 20,000 words: past FINAL_WORDS, so the device digest folds once before the host
    values = torch.randn(200, 800, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    first = made(values)
    assert made(values.t().contiguous().t()) == first  # the same values in other strides
    assert made(values.clone()) == first
    for row, col, bit in [(0, 0, 0), (199, 799, 31), (57, 3, 12), (120, 640, 22)]:
        flipped = values.clone()
        flipped.view(torch.int32)[row, col] ^= 1 << bit
        assert made(flipped) != first, (row, col, bit)
    swapped = values.clone()
    swapped[[3, 4]] = values[[4, 3]]  # the same words in other places
    assert made(swapped) != first
    zeros = torch.zeros(4, device=DEVICE)
    assert len({made(zeros), made(zeros.view(2, 2)), made(zeros.view(torch.int32))}) == 3


def _forger():
    spec = importlib.util.spec_from_file_location("forger", FORGER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # it wraps channel.encode: put it back afterwards
    return module


def test_a_forge_that_beats_a_sum_of_the_words_does_not_beat_the_digest(monkeypatch):
    from kernelab.evaluate import channel

    monkeypatch.setattr(channel, "encode", channel.encode)
    forger = _forger()
    honest = torch.relu(torch.randn(128, 512, generator=torch.Generator().manual_seed(2)))
    zeros = torch.zeros_like(honest)
    forged = forger.forge(honest, forger.linear_fingerprint(zeros))
    # the class is real: the sum the fingerprint used to be agrees, the values are right
    assert forger.linear_fingerprint(forged) == forger.linear_fingerprint(zeros)
    assert not torch.equal(forged, honest)
    assert (forged - honest).abs().max() < 1e-37
    for made in (digest.host_digest, digest.device_digest):
        assert made(forged.to(DEVICE)) != made(zeros.to(DEVICE))


# Compiles the fold for sm_90 with Triton's own toolchain (no GPU needed) in a process without
# TRITON_INTERPRET, and prints what its PTX shifts with.
_COMPILE_PROBE = """
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelab.evaluate import digest
from kernelab.evaluate.digest_kernel import fold_kernel

signature = {"words_ptr": "*i64", "out_ptr": "*i64", "n": "i64", "count": "i64",
             "W": "constexpr", "BLOCK": "constexpr"}
source = ASTSource(fold_kernel, signature, constexprs={"W": digest.W, "BLOCK": digest.BLOCK})
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
ptx = compiled.asm["ptx"]
print(json.dumps({"cubin": len(compiled.asm["cubin"]), "logical": "shr.u64" in ptx,
                  "arithmetic": "shr.s64" in ptx}))
"""


def test_the_fold_compiles_for_the_gpu_with_logical_shifts():
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # the mixers shift unsigned words: a sign-extending shift would change every lane
    assert found == {"cubin": found["cubin"], "logical": True, "arithmetic": False}
    assert found["cubin"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("count", [digest.W * 4096 + 17, digest.FINAL_WORDS * 64])
def test_gpu_the_compiled_fold_is_its_python_arithmetic(count):
    words = _random_words(count, seed=count)
    folded = digest.fold(words.cuda()).cpu().tolist()
    assert folded == digest.fold_reference(words.tolist())


@pytest.mark.gpu
def test_gpu_the_digest_of_a_large_output_follows_one_bit():
    values = torch.randn(4096, 4096, device="cuda")  # 64 MiB: two folds on the device
    first = digest.digest(values)
    assert first.startswith("fold:") and digest.digest(values.clone()) == first
    flipped = values.clone()
    flipped.view(torch.int32)[4095, 4095] ^= 1
    assert digest.digest(flipped) != first
