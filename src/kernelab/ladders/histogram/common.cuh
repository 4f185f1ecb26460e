// What every histogram step shares: counts[b] = how many of values[0..n) equal b.
//
// Values are int32 bin ids (MoE routing: expert ids, 8 to 256 experts) or uint8 bytes. A
// value outside [0, bins) is counted in one extra slot, counts[bins]: the defined answer for
// out-of-range input, so no value is dropped or written out of bounds. Counts are 64-bit, so
// n past 2^32 cannot wrap a bin (all values in one bin is the skewed case); the per-block
// shared counters are 32-bit and a block sees far fewer than 2^32 values (grid-stride over at
// most MAX_BLOCKS blocks, n < 2^40 enforced by the caller).
// Bytes: read n x itemsize, write (bins + 1) x 8; no FLOPs, so the ceiling is a pure read.
// Launch: block (256), grid (min(ceil(n / 256), MAX_BLOCKS)); counts zeroed by the caller.
#pragma once

#define THREADS 256
#define MAX_BINS 4096

typedef unsigned long long count_t;

template <typename T>
__device__ __forceinline__ int bin_of(T value, int bins) {
    // A uint8 is never negative; an int32 below 0 or at/above bins goes to the overflow slot.
    const long long v = static_cast<long long>(value);
    return (v >= 0 && v < bins) ? static_cast<int>(v) : bins;
}

#define HISTOGRAM_ARGS long long n, const T *__restrict__ values, int bins, count_t *counts

// One extern "C" entry per value type, so the launcher finds each kernel by a plain name.
#define HISTOGRAM_ENTRIES(name)                                                               \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        name##_i32(long long n, const int *values, int bins, count_t *counts) {                \
        name<int>(n, values, bins, counts);                                                    \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        name##_u8(long long n, const unsigned char *values, int bins, count_t *counts) {      \
        name<unsigned char>(n, values, bins, counts);                                          \
    }
