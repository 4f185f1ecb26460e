// Bandwidth kernels: every SM streams as many bytes as it can from one level of the hierarchy.
// Each folds what it reads into a register with XOR, which costs less than the load it
// follows, and stores it only under a condition the compiler cannot prove false, so the loads
// stay live. The host times them with the harness and divides the bytes moved by the time.

__device__ __forceinline__ uint4 load_shared_v4(unsigned int address) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(address));
    return v;
}

// .cg: cached in L2 only. Repeated passes must not be served by the SM's own L1.
__device__ __forceinline__ uint4 load_cg_v4(const uint4* address) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(address));
    return v;
}

// The read-only path (LDG.E.128.CONSTANT): for one streaming pass, where no cache helps.
__device__ __forceinline__ uint4 load_nc_v4(const uint4* address) { return __ldg(address); }

__device__ __forceinline__ unsigned int fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Shared memory: 16-byte loads (LDS.128), consecutive threads on consecutive 16-byte chunks,
// so a warp's 512 bytes fall in four 128-byte wavefronts with no bank conflict. Each thread
// reads kSmemChunks chunks per iteration, shifted by (iteration % 8) * 32 chunks so that no
// two iterations issue the same load; the buffer holds kSmemChunks * blockDim.x + 7 * 32
// chunks so the shift never wraps (launcher: dynamic shared memory = that many x 16 bytes).
// Bytes read: gridDim.x * blockDim.x * iterations * kSmemChunks * 16.
constexpr int kSmemChunks = 4;
constexpr int kSmemShifts = 8;

extern "C" __global__ void smem_read(int iterations, unsigned int* sink) {
    extern __shared__ uint4 buffer[];
    const int n = kSmemChunks * blockDim.x + (kSmemShifts - 1) * 32;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        buffer[i] = make_uint4(i, i * 3u, i * 5u, i * 7u);
    }
    __syncthreads();
    const unsigned int base =
        static_cast<unsigned int>(__cvta_generic_to_shared(buffer)) + 16u * threadIdx.x;
    const unsigned int chunk_stride = 16u * blockDim.x;
    unsigned int acc = 0;
    for (int it = 0; it < iterations; ++it) {
        const unsigned int shifted = base + 16u * 32u * (it % kSmemShifts);
#pragma unroll
        for (int c = 0; c < kSmemChunks; ++c) {
            acc ^= fold(load_shared_v4(shifted + c * chunk_stride));
        }
    }
    if (acc == 0x9e3779b9u) {
        sink[0] = acc;
    }
}

// Grid-stride reads, four independent 16-byte loads in flight per thread, `repeats` passes.
// Bytes read: n_vectors * 16 * repeats.
template <bool kL2Only>
__device__ __forceinline__ void stream_read(const uint4* data, long long n_vectors, int repeats,
                                            unsigned int* sink) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    unsigned int acc = 0;
    for (int r = 0; r < repeats; ++r) {
        long long i = first;
        for (; i + 3 * stride < n_vectors; i += 4 * stride) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = kL2Only ? load_cg_v4(data + i + u * stride)
                               : load_nc_v4(data + i + u * stride);
            }
            acc ^= fold(v[0]) ^ fold(v[1]) ^ fold(v[2]) ^ fold(v[3]);
        }
        for (; i < n_vectors; i += stride) {
            acc ^= fold(kL2Only ? load_cg_v4(data + i) : load_nc_v4(data + i));
        }
    }
    if (acc == 0x9e3779b9u) {
        sink[0] = acc;
    }
}

// L2: a buffer that fits in the L2, read `repeats` times with a warm L2.
extern "C" __global__ void l2_read(const uint4* data, long long n_vectors, int repeats,
                                   unsigned int* sink) {
    stream_read<true>(data, n_vectors, repeats, sink);
}

// HBM: passes (the launcher makes one) over a buffer many times the L2.
extern "C" __global__ void hbm_read(const uint4* __restrict__ data, long long n_vectors,
                                    int repeats, unsigned int* sink) {
    stream_read<false>(data, n_vectors, repeats, sink);
}

// Copy: every block copies one contiguous tile of kCopyUnroll * blockDim.x vectors and the grid
// covers the buffer once (the launcher sizes it), each thread loading all its vectors before it
// stores any. Measured on the H200 (benchmarks/experiments/copy_variants.py (at f7bfe57), 2 GiB buffers,
// cold L2): this shape at 128 threads and 2 vectors moved 4.26 TB/s, 99.6 % of torch's copy in
// the same run; a grid-stride loop over a resident grid (4 x 512 threads per SM) stalled at
// 3.93-3.98 TB/s whatever its unroll (2, 4, 8) or store policy. Streaming stores changed
// nothing measurable. Bytes moved: n_vectors * 16 read + n_vectors * 16 written.
constexpr int kCopyUnroll = 2;

extern "C" __global__ void hbm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                    long long n_vectors) {
    const long long first =
        static_cast<long long>(blockIdx.x) * blockDim.x * kCopyUnroll + threadIdx.x;
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
        const long long i = first + static_cast<long long>(u) * blockDim.x;
        if (i < n_vectors) v[u] = load_nc_v4(src + i);
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
        const long long i = first + static_cast<long long>(u) * blockDim.x;
        if (i < n_vectors) dst[i] = v[u];
    }
}
