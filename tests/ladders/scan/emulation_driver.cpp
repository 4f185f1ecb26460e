// The entry point the scan tests call through ctypes: run one kernel of one step (STEP its
// number, ELEM float or int, SFX f32 or i32) over a 1-D grid on the CPU. Each block's threads
// are std::threads with a block barrier and one barrier per warp (the shuffles and votes);
// blocks run one after another, so the look-back of steps 4 and 5 always finds its
// predecessor's inclusive prefix already published. Arguments arrive as 64-bit words in the kernel's order.
#include <cstring>
#include <functional>
#include <memory>

#include "cuda_host_emulation.hpp"

#define GLUE2(a, b) a##_##b
#define GLUE(a, b) GLUE2(a, b)
#define K(name) GLUE(name, SFX)

typedef long long i64;
typedef unsigned long long u64;

#if STEP == 1 || STEP == 2
#if STEP == 1
#define TILE_KERNEL scan_hillis_steele
#define OFFSETS_KERNEL scan_hillis_steele_offsets
#else
#define TILE_KERNEL scan_blelloch
#define OFFSETS_KERNEL scan_blelloch_offsets
#endif
extern "C" void K(TILE_KERNEL)(i64, const ELEM *, ELEM *, ELEM *, int);
extern "C" void K(OFFSETS_KERNEL)(i64, ELEM *, const ELEM *);
#elif STEP == 3
extern "C" void K(scan_reduce_tiles)(i64, const ELEM *, ELEM *);
extern "C" void K(scan_tile_sums)(i64, ELEM *);
extern "C" void K(scan_tiles_seeded)(i64, const ELEM *, ELEM *, const ELEM *, int);
#elif STEP == 4
extern "C" void K(scan_lookback)(i64, const ELEM *, ELEM *, u64 *, u64 *, int);
#else
extern "C" void K(scan_wide)(i64, const ELEM *, ELEM *, u64 *, u64 *, int);
#endif

static int run_grid(unsigned gx, unsigned bx, const std::function<void()> &body) {
    if (bx % 32 != 0 || bx > 1024) return -1;  // whole warps only (see the header)
    std::barrier<> barrier(bx);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < bx / 32; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        kernelab_emu::warp_barriers[w] = warps.back().get();
    }
    kernelab_emu::block_barrier = &barrier;
    kernelab_emu::faults = 0;
    blockDim = {bx, 1, 1};
    gridDim = {gx, 1, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < bx; ++t) {
        pool.emplace_back([=, &barrier, &body] {
            for (unsigned x = 0; x < gx; ++x) {
                threadIdx = {t, 0, 0};
                blockIdx = {x, 0, 0};
                body();
                barrier.arrive_and_wait();  // the block is done before the next reuses smem
            }
        });
    }
    for (auto &thread : pool) thread.join();
    for (unsigned w = 0; w < bx / 32; ++w) kernelab_emu::warp_barriers[w] = nullptr;
    return kernelab_emu::faults;
}

template <typename P>
static P ptr(i64 word) {
    return reinterpret_cast<P>(static_cast<intptr_t>(word));
}

// 0 or the emulation's fault count; -2 for a kernel this step does not have.
extern "C" int emulate(const char *kernel, unsigned grid, unsigned block, const i64 *a) {
#if STEP == 1 || STEP == 2
    if (!std::strcmp(kernel, "tile"))
        return run_grid(grid, block, [=] {
            K(TILE_KERNEL)(a[0], ptr<const ELEM *>(a[1]), ptr<ELEM *>(a[2]), ptr<ELEM *>(a[3]),
                           static_cast<int>(a[4]));
        });
    if (!std::strcmp(kernel, "offsets"))
        return run_grid(grid, block, [=] {
            K(OFFSETS_KERNEL)(a[0], ptr<ELEM *>(a[1]), ptr<const ELEM *>(a[2]));
        });
#elif STEP == 3
    if (!std::strcmp(kernel, "scan_reduce_tiles"))
        return run_grid(grid, block, [=] {
            K(scan_reduce_tiles)(a[0], ptr<const ELEM *>(a[1]), ptr<ELEM *>(a[2]));
        });
    if (!std::strcmp(kernel, "scan_tile_sums"))
        return run_grid(grid, block, [=] { K(scan_tile_sums)(a[0], ptr<ELEM *>(a[1])); });
    if (!std::strcmp(kernel, "scan_tiles_seeded"))
        return run_grid(grid, block, [=] {
            K(scan_tiles_seeded)(a[0], ptr<const ELEM *>(a[1]), ptr<ELEM *>(a[2]),
                                 ptr<const ELEM *>(a[3]), static_cast<int>(a[4]));
        });
#elif STEP == 4
    if (!std::strcmp(kernel, "scan_lookback"))
        return run_grid(grid, block, [=] {
            K(scan_lookback)(a[0], ptr<const ELEM *>(a[1]), ptr<ELEM *>(a[2]), ptr<u64 *>(a[3]),
                             ptr<u64 *>(a[4]), static_cast<int>(a[5]));
        });
#else
    if (!std::strcmp(kernel, "scan_wide"))
        return run_grid(grid, block, [=] {
            K(scan_wide)(a[0], ptr<const ELEM *>(a[1]), ptr<ELEM *>(a[2]), ptr<u64 *>(a[3]),
                         ptr<u64 *>(a[4]), static_cast<int>(a[5]));
        });
#endif
    return -2;
}
