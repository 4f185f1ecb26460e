"""The emulation header's bf16 and fp16 types (tests/cuda_host_emulation.hpp) convert as CUDA
does, checked without a GPU: every one of the 65,536 bit patterns of each type widens to the
float numpy (fp16) or the bit layout (bf16) gives, and floats narrow with round to nearest,
ties to even, overflow to inf and NaN to the canonical 0x7fff, against numpy's float16 and
torch's bfloat16 over the exact midpoints between neighbours, their float neighbours, the
subnormals, the overflow edge and random bit patterns. The reduction ladder's bf16 and fp16
emulation tests rest on these conversions (test_reduce_steps.py)."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from host_emulation import emulated_library  # noqa: E402

REDUCE_DIR = Path(__file__).parents[3] / "src" / "kernelab" / "ladders" / "reduce"
DRIVER = Path(__file__).parent / "half_types_driver.cpp"
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

BF16_TO_F32, F32_TO_BF16, F16_TO_F32, F32_TO_F16 = range(4)


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = emulated_library("half-types", REDUCE_DIR, [DRIVER], [])
    lib.emulate.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    return lib


def _convert(lib, which: int, values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values)
    out = np.empty(values.size, np.float32 if which in (BF16_TO_F32, F16_TO_F32) else np.uint16)
    assert lib.emulate(which, values.ctypes.data, out.ctypes.data, values.size) == 0
    return out


ALL_16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _same_floats(got: np.ndarray, expected: np.ndarray) -> None:
    """Bit-equal where the expected value is a number (so -0 stays -0), NaN where it is NaN."""
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_every_fp16_pattern_widens_as_numpy_does(lib):
    got = _convert(lib, F16_TO_F32, ALL_16)
    _same_floats(got, ALL_16.view(np.float16).astype(np.float32))
    # the extremes by name: the smallest subnormal, the largest finite, inf
    table = dict(zip(ALL_16.tolist(), got.tolist(), strict=True))
    assert table[0x0001] == 2.0**-24 and table[0x7BFF] == 65504.0 and table[0xFC00] == -np.inf


def test_every_bf16_pattern_widens_to_the_top_half_of_a_float(lib):
    got = _convert(lib, BF16_TO_F32, ALL_16)
    _same_floats(got, (ALL_16.astype(np.uint32) << 16).view(np.float32))


def _narrowing_inputs(neighbours: np.ndarray) -> np.ndarray:
    """Floats where rounding decides: every finite 16-bit value, the exact midpoint between
    each pair of neighbours (a tie) and the floats just either side of it, the specials, and
    random bit patterns over the whole float range."""
    finite = np.sort(neighbours[np.isfinite(neighbours)].astype(np.float64))
    finite = np.unique(finite)
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact in fp32: one bit more
    assert np.array_equal(mids.astype(np.float64), (finite[:-1] + finite[1:]) / 2)
    rng = np.random.default_rng(49)
    random_bits = rng.integers(0, 1 << 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([
        finite.astype(np.float32), mids, np.nextafter(mids, np.float32(np.inf)),
        np.nextafter(mids, np.float32(-np.inf)),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65519.996, 65520.0, 1e30,
                  -1e30, 2.0**-25, 2.0**-26, 3 * 2.0**-26, 1e-45], np.float32),
        random_bits.view(np.float32),
    ])  # fmt: skip


def test_floats_narrow_to_fp16_as_numpy_rounds(lib):
    values = _narrowing_inputs(ALL_16.view(np.float16))
    got = _convert(lib, F32_TO_F16, values)
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], expected[~nan])
    assert (got[nan] == 0x7FFF).all()  # CUDA's canonical NaN
    # ties go to even: 2049 lies between 2048 and 2050; 65520 overflows to inf
    assert _convert(lib, F32_TO_F16, np.array([2049.0, 2051.0, 65520.0], np.float32)).tolist() == [
        np.float16(2048).view(np.uint16), np.float16(2052).view(np.uint16), 0x7C00,
    ]  # fmt: skip


def test_floats_narrow_to_bf16_as_torch_rounds(lib):
    torch = pytest.importorskip("torch")
    values = _narrowing_inputs((ALL_16.astype(np.uint32) << 16).view(np.float32))
    got = _convert(lib, F32_TO_BF16, values)
    expected = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()
    expected = expected.view(np.uint16)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], expected[~nan])
    assert (got[nan] == 0x7FFF).all()  # CUDA's canonical NaN
    # 1 + 2^-8 is the tie between 1 and 1 + 2^-7: to even, 1; past the largest finite: inf
    ties = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.4e38], np.float32)
    assert _convert(lib, F32_TO_BF16, ties).tolist() == [0x3F80, 0x3F82, 0x7F80]


def test_a_round_trip_keeps_every_16_bit_value(lib):
    for widen, narrow in ((F16_TO_F32, F32_TO_F16), (BF16_TO_F32, F32_TO_BF16)):
        wide = _convert(lib, widen, ALL_16)
        back = _convert(lib, narrow, wide)
        number = ~np.isnan(wide)
        assert np.array_equal(back[number], ALL_16[number])
        assert (back[~number] == 0x7FFF).all()
