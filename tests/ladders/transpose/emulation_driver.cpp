// The entry point the transpose tests call through ctypes: run one step's kernel (KERNEL,
// ELEM its element type) over a whole grid on the CPU, each block's threads as std::threads.
#include "cuda_host_emulation.hpp"

extern "C" void KERNEL(int rows, int cols, const ELEM *in, ELEM *out);

extern "C" int emulate(unsigned gx, unsigned gy, unsigned bx, unsigned by, int rows, int cols,
                       const ELEM *in, ELEM *out) {
    const unsigned threads = bx * by;
    std::barrier<> barrier(threads);
    kernelab_emu::block_barrier = &barrier;
    kernelab_emu::faults = 0;
    blockDim = {bx, by, 1};
    gridDim = {gx, gy, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([=, &barrier] {
            for (unsigned y = 0; y < gy; ++y)
                for (unsigned x = 0; x < gx; ++x) {
                    threadIdx = {t % bx, t / bx, 0};
                    blockIdx = {x, y, 0};
                    KERNEL(rows, cols, in, out);
                    barrier.arrive_and_wait();  // the block is done before the next reuses smem
                }
        });
    }
    for (auto &thread : pool) thread.join();
    return kernelab_emu::faults;
}
