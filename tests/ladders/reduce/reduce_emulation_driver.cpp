// The entry points the reduction tests call through ctypes: run one pass of a ladder step
// over a whole 1-D grid on the CPU (tests/cuda_host_emulation.hpp). Compiled with one step
// and one input dtype (REDUCE_DTYPE: 0 fp32, 1 bf16, 2 fp16, as for nvcc):
//   g++ -include cuda_host_emulation.hpp -DKERNEL=reduce_05 -DREDUCE_DTYPE=1 [-DONE_PASS] ...
// The step's .cu is included last, so its kernels see the emulation's definitions. The input
// arrives untyped: the first pass reads in_t (the dtype's 16 or 32 bits), a later pass the
// fp32 partial sums of the pass before.
#include "cuda_host_emulation.hpp"

#include <functional>
#include <memory>

#include STEP_SOURCE

namespace {
// Run `body` once per thread of every block of a gx-block grid of bx threads.
int run_grid(unsigned gx, unsigned bx, const std::function<void()> &body) {
    using namespace kernelab_emu;
    if (bx == 0 || bx > kMaxThreads || bx % kWarpSize != 0) return -1;
    std::barrier<> barrier(bx);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < bx / kWarpSize; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(kWarpSize));
        warp_barriers[w] = warps.back().get();
    }
    block_barrier = &barrier;
    faults = 0;
    blockDim = {bx, 1, 1};
    gridDim = {gx, 1, 1};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < bx; ++t) {
        pool.emplace_back([&, t] {
            for (unsigned x = 0; x < gx; ++x) {
                barrier.arrive_and_wait();
                threadIdx = {t, 0, 0};
                blockIdx = {x, 0, 0};
                body();
                barrier.arrive_and_wait();  // the block is done before the next reuses smem
            }
        });
    }
    for (auto &thread : pool) thread.join();
    for (unsigned w = 0; w < kMaxThreads / kWarpSize; ++w) warp_barriers[w] = nullptr;
    return faults;
}
}  // namespace

#define PARTIALS_OF(name) name##_partials
#define PARTIALS(name) PARTIALS_OF(name)

#ifdef ONE_PASS
extern "C" int emulate(unsigned gx, unsigned bx, const void *x, long long n, float *out,
                       float *partials, unsigned *counter) {
    const in_t *input = static_cast<const in_t *>(x);
    return run_grid(gx, bx, [=] { KERNEL(input, n, out, partials, counter); });
}
#else
// partials = 0: the first pass, reading the input; 1: a later pass over fp32 partial sums.
extern "C" int emulate(unsigned gx, unsigned bx, const void *x, long long n, float *out,
                       int partials) {
    if (partials) {
        const float *sums = static_cast<const float *>(x);
        return run_grid(gx, bx, [=] { PARTIALS(KERNEL)(sums, n, out); });
    }
    const in_t *input = static_cast<const in_t *>(x);
    return run_grid(gx, bx, [=] { KERNEL(input, n, out); });
}
#endif
