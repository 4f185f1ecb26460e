// The entry points the histogram tests call through ctypes: run one step's kernel (KERNEL,
// ELEM its value type) over a 1-D grid on the CPU, each block's threads as std::threads and
// each warp with its own barrier for the emulated warp collectives.
//   emulate         every block of a gx-block grid
//   emulate_blocks  only blocks [first, last) of a gx-block grid (gridDim.x is still gx): the
//                   last blocks of a grid past 2^32 values run alone, over a sparse buffer,
//                   so the index arithmetic is exercised where 32 bits would wrap
#include <memory>

#include "cuda_host_emulation.hpp"

extern "C" void KERNEL(long long n, const ELEM *values, int bins, unsigned long long *counts);

extern "C" int emulate_blocks(unsigned gx, unsigned first, unsigned last, unsigned bx,
                              long long n, const ELEM *values, int bins,
                              unsigned long long *counts) {
    if (bx % 32 != 0 || bx > 1024) return -1;  // whole warps only (see the header)
    if (first > last || last > gx) return -1;
    std::barrier<> barrier(bx);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<std::barrier<> *> warp_pointers;
    for (unsigned w = 0; w < bx / 32; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        warp_pointers.push_back(warps.back().get());
    }
    kernelab_emu::block_barrier = &barrier;
    kernelab_emu_warp::warp_barriers = warp_pointers.data();
    kernelab_emu::faults = 0;
    blockDim = {bx, 1, 1};
    gridDim = {gx, 1, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < bx; ++t) {
        pool.emplace_back([=, &barrier] {
            for (unsigned x = first; x < last; ++x) {
                threadIdx = {t, 0, 0};
                blockIdx = {x, 0, 0};
                KERNEL(n, values, bins, counts);
                barrier.arrive_and_wait();  // the block is done before the next reuses smem
            }
        });
    }
    for (auto &thread : pool) thread.join();
    return kernelab_emu::faults;
}

extern "C" int emulate(unsigned gx, unsigned bx, long long n, const ELEM *values, int bins,
                       unsigned long long *counts) {
    return emulate_blocks(gx, 0, gx, bx, n, values, bins, counts);
}
