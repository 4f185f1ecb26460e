// What every histogram step shares: counts[b] = how many of values[0..n) equal b.
//
// Values are int32 bin ids (MoE routing: expert ids, 8 to 256 experts) or uint8 bytes. A
// value outside [0, bins) is counted in one extra slot, counts[bins]: the defined answer for
// out-of-range input, so no value is dropped or written out of bounds. Counts are 64-bit, so
// n past 2^32 cannot wrap a bin (all values in one bin is the skewed case); the per-block
// shared counters are 32-bit and a block sees far fewer than 2^32 values (grid-stride over at
// most MAX_BLOCKS blocks, n < 2^40 enforced by the caller).
// Bytes: read n x itemsize, write (bins + 1) x 8; no FLOPs, so the ceiling is a pure read.
// Launch: block (256), grid (min(ceil(n / 256), MAX_BLOCKS)) for steps 1-3; steps 4-5 one
// thread per 16-byte unit up to the blocks the GPU holds at once (steps.geometry); counts
// zeroed by the caller.
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

// ---- Steps 4 and 5: the values read 16 bytes at a time ------------------------------------
//
// The values as 16-byte units (4 int32 ids or 16 bytes) from the first 16-byte boundary on:
// unit u belongs to thread u mod (grid x block), and each trip of the loop issues
// HISTOGRAM_LOADS unit loads (LDG.E.128) before the first of their values is counted, so a
// thread keeps HISTOGRAM_LOADS x 16 bytes in flight instead of one value. The values before
// the boundary (the head, fewer than a unit: a pointer into the middle of a tensor) go to
// thread 0, those after the last whole unit (the tail) to the thread that would own the next
// unit; both one value at a time. `add(bin)` counts one value.
#ifndef HISTOGRAM_LOADS
#define HISTOGRAM_LOADS 2
#endif
#define VECTOR_BYTES 16

struct __align__(16) Vector16 {
    unsigned int word[4];
};

template <typename T, typename Add>
__device__ __forceinline__ void count_unit(const Vector16 &unit, int bins, Add &add) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        if constexpr (sizeof(T) == 1) {
#pragma unroll
            for (int b = 0; b < 4; ++b)
                add(bin_of(static_cast<unsigned char>(unit.word[w] >> (8 * b)), bins));
        } else {
            add(bin_of(static_cast<int>(unit.word[w]), bins));
        }
    }
}

template <typename T, typename Add>
__device__ __forceinline__ void for_each_value_by_units(long long n, const T *values, int bins,
                                                        Add add) {
    constexpr long long PER_UNIT = VECTOR_BYTES / sizeof(T);
    const unsigned long long address = reinterpret_cast<unsigned long long>(values);
    long long head = static_cast<long long>((VECTOR_BYTES - address % VECTOR_BYTES) %
                                            VECTOR_BYTES / sizeof(T));
    if (head > n) head = n;
    const long long units = (n - head) / PER_UNIT;
    const long long tail = head + units * PER_UNIT;
    const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const Vector16 *unit = reinterpret_cast<const Vector16 *>(values + head);
    long long u = thread;
    for (; u + (HISTOGRAM_LOADS - 1) * stride < units; u += HISTOGRAM_LOADS * stride) {
        Vector16 loaded[HISTOGRAM_LOADS];
#pragma unroll
        for (int k = 0; k < HISTOGRAM_LOADS; ++k) loaded[k] = unit[u + k * stride];
#pragma unroll
        for (int k = 0; k < HISTOGRAM_LOADS; ++k) count_unit<T>(loaded[k], bins, add);
    }
    for (; u < units; u += stride) count_unit<T>(unit[u], bins, add);
    if (thread == 0)
        for (long long i = 0; i < head; ++i) add(bin_of(values[i], bins));
    if (thread == units % stride)
        for (long long i = tail; i < n; ++i) add(bin_of(values[i], bins));
}

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
