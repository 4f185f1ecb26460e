// The 16-bit conversions of tests/cuda_host_emulation.hpp, called from Python through ctypes
// (test_half_types.py): `which` picks the conversion, n elements from `in` to `out`.
//   0: bf16 bits -> float   1: float -> bf16 bits   2: fp16 bits -> float   3: float -> fp16 bits
#include "cuda_host_emulation.hpp"

extern "C" int emulate(int which, const void *in, void *out, long long n) {
    const auto *bf16_in = static_cast<const __nv_bfloat16 *>(in);
    const auto *half_in = static_cast<const __half *>(in);
    const auto *float_in = static_cast<const float *>(in);
    for (long long i = 0; i < n; ++i) {
        switch (which) {
            case 0: static_cast<float *>(out)[i] = __bfloat162float(bf16_in[i]); break;
            case 1: static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16(float_in[i]); break;
            case 2: static_cast<float *>(out)[i] = __half2float(half_in[i]); break;
            case 3: static_cast<__half *>(out)[i] = __float2half(float_in[i]); break;
            default: return -1;
        }
    }
    return 0;
}
