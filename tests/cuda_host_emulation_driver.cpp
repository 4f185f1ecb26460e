// The entry point the tests call through ctypes: run KERNEL over a whole grid on the CPU.
// Compiled together with one ladder step: g++ -include cuda_host_emulation.hpp -DKERNEL=...
#include "cuda_host_emulation.hpp"

extern "C" void KERNEL(int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc);

extern "C" int emulate(unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned shared_bytes,
                       int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    if (shared_bytes > kernelab_emu::kDynamicSharedBytes) return -1;
    const unsigned threads = bx * by;
    std::barrier<> barrier(threads);
    kernelab_emu::block_barrier = &barrier;
    kernelab_emu::dynamic_smem_bytes = shared_bytes;
    kernelab_emu::faults = 0;
    blockDim = {bx, by, 1};
    gridDim = {gx, gy, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([=, &barrier] {
            for (unsigned y = 0; y < gy; ++y)
                for (unsigned x = 0; x < gx; ++x) {
                    if (t == 0) {  // fresh shared memory is garbage on a GPU: make it NaN here
                        float *s = kernelab_emu::dynamic_shared();
                        for (size_t i = 0; i < kernelab_emu::dynamic_smem_bytes / 4; ++i)
                            s[i] = NAN;
                    }
                    barrier.arrive_and_wait();
                    threadIdx = {t % bx, t / bx, 0};
                    blockIdx = {x, y, 0};
                    KERNEL(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                    barrier.arrive_and_wait();  // the block is done before the next reuses smem
                }
        });
    }
    for (auto &thread : pool) thread.join();
    return kernelab_emu::faults;
}
