// What every transpose step shares: out[c, r] = in[r, c] for a row-major in[rows, cols].
//
// Elements are moved as bits, never converted, so one template serves fp32 (float) and bf16
// (its 16 bits as unsigned short). Each block owns a 32 x 32 tile and runs 32 x 8 threads,
// each thread moving 4 elements (TILE / BLOCK_ROWS). Offsets are size_t: rows * cols may pass
// 2^31 even though each dimension is an int. Bytes: read rows x cols x itemsize, write the
// same; no FLOPs, so the ceiling is a device-to-device copy.
// Launch: block (32, 8), grid (ceil(cols / 32), ceil(rows / 32)); step 5 owns 64 x 64 tiles.
#pragma once

#define TILE 32
#define BLOCK_ROWS 8

typedef unsigned short bf16_bits;

#define TRANSPOSE_ARGS int rows, int cols, const T *__restrict__ in, T *__restrict__ out

// One extern "C" entry per dtype, so the launcher finds each kernel by a plain name.
#define TRANSPOSE_ENTRIES(name) TRANSPOSE_ENTRIES_BOUNDED(name, TILE * BLOCK_ROWS)

// The same, with the __launch_bounds__ arguments given (threads, and blocks an SM must hold).
#define TRANSPOSE_ENTRIES_BOUNDED(name, ...)                                                 \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                  \
        name##_f32(int rows, int cols, const float *in, float *out) {                         \
        name<float>(rows, cols, in, out);                                                      \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                  \
        name##_bf16(int rows, int cols, const bf16_bits *in, bf16_bits *out) {                \
        name<bf16_bits>(rows, cols, in, out);                                                  \
    }
