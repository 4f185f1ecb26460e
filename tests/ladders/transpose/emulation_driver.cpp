// The entry points the transpose tests call through ctypes: run one step's kernel (KERNEL,
// ELEM its element type) over a grid on the CPU, each block's threads as std::threads.
//   emulate         every block of a gx x gy grid
//   emulate_blocks  only blocks [x0, x1) x [y0, y1) of a gx x gy grid (gridDim stays gx x gy):
//                   the last tiles of a matrix past 2^32 elements run alone, over sparse
//                   buffers, so the offsets are exercised where 32 bits would wrap
#include "cuda_host_emulation.hpp"

extern "C" void KERNEL(int rows, int cols, const ELEM *in, ELEM *out);

extern "C" int emulate_blocks(unsigned gx, unsigned gy, unsigned x0, unsigned x1, unsigned y0,
                              unsigned y1, unsigned bx, unsigned by, int rows, int cols,
                              const ELEM *in, ELEM *out) {
    if (x0 > x1 || x1 > gx || y0 > y1 || y1 > gy) return -1;
    const unsigned threads = bx * by;
    std::barrier<> barrier(threads);
    kernelab_emu::block_barrier = &barrier;
    kernelab_emu::faults = 0;
    blockDim = {bx, by, 1};
    gridDim = {gx, gy, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([=, &barrier] {
            for (unsigned y = y0; y < y1; ++y)
                for (unsigned x = x0; x < x1; ++x) {
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

extern "C" int emulate(unsigned gx, unsigned gy, unsigned bx, unsigned by, int rows, int cols,
                       const ELEM *in, ELEM *out) {
    return emulate_blocks(gx, gy, 0, gx, 0, gy, bx, by, rows, cols, in, out);
}
