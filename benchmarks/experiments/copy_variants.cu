// Copy-kernel variants for the hierarchy's HBM copy (issue 9): which traversal, how many
// 16-byte vectors in flight per thread and which store policy let a hand-written copy match
// torch's copy (4.21 TB/s on the H200, where kernelab's hbm_copy moved 3.91).
// Compile-time knobs (-D):
//   UNROLL      16-byte vectors each thread loads before it stores any (bytes in flight per
//               thread = 16 * UNROLL)
//   STREAMING   1: st.global.cs (evict-first) stores, 0: default stores
//   CONTIGUOUS  1: every block copies one contiguous tile of blockDim * UNROLL vectors, grid
//               covers the buffer once (torch's elementwise launch); 0: grid-stride loop
// Bytes moved: n_vectors * 16 read + n_vectors * 16 written.

__device__ __forceinline__ void store_v4(uint4* address, uint4 v) {
#if STREAMING
    __stcs(address, v);
#else
    *address = v;
#endif
}

extern "C" __global__ void copy_variant(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                        long long n_vectors) {
#if CONTIGUOUS
    const long long base = static_cast<long long>(blockIdx.x) * blockDim.x * UNROLL + threadIdx.x;
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = base + static_cast<long long>(u) * blockDim.x;
        if (i < n_vectors) v[u] = __ldg(src + i);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = base + static_cast<long long>(u) * blockDim.x;
        if (i < n_vectors) store_v4(dst + i, v[u]);
    }
#else
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n_vectors; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) store_v4(dst + i + u * stride, v[u]);
    }
    for (; i < n_vectors; i += stride) store_v4(dst + i, __ldg(src + i));
#endif
}
