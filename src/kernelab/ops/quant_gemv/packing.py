"""The weight formats the quantized GEMVs read, and their float64 dequantized references.

The functions live in kernelab.spec.reference, beside the op definitions whose inputs they
make (the spec floor cannot import ops); this module is where the kernels' readers find them.

| format   | stored                                   | dequantized weight          | bytes/weight  |
|----------|------------------------------------------|-----------------------------|---------------|
| int8     | q int8[n, k], scale fp32[n]              | q * scale[n]                | 1 (+4/k)      |
| int4     | packed uint8[n, k/2] (2j low, 2j+1 high  | (q - 8) * scale[n, k/g]     | 0.5 + 2/g     |
|          | nibble), scales fp16[n, k/g]             |                             |               |
| int4 zp  | + zeros uint8[n, k/g]                    | (q - zero) * scale          | 0.5 + 3/g     |
| fp8 e4m3 | q float8_e4m3fn[n, k], scale fp32[n]     | q * scale[n] (absmax->448)  | 1 (+4/k)      |
"""

from __future__ import annotations

from kernelab.spec.decode import (
    INT4_SYMMETRIC_ZERO,
    dequantize_fp8,
    dequantize_int4,
    dequantize_int8,
    pack_fp8,
    pack_int4,
    pack_int8,
    unpack_int4,
)

__all__ = [
    "INT4_SYMMETRIC_ZERO",
    "dequantize_fp8",
    "dequantize_int4",
    "dequantize_int8",
    "pack_fp8",
    "pack_int4",
    "pack_int8",
    "unpack_int4",
]
