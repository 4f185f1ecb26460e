// Which half of the L2 each line lives in, as each SM sees it (l2_sides.py drives it).
//
// Hopper's L2 is two partitions joined by a fabric; a line whose home is the far partition
// costs an SM a fabric crossing, in time and in fabric bandwidth (ncu puts the long-row
// softmax and a plain copy at 91-95 % fabric busy on the H200). A kernel could only read
// lines of its own SM's half if the line-to-half map were known and coarse; this measures
// it, from latencies.
//
// One thread per block; each block, on whatever SM it lands on, times a short chase on every
// sampled line: the line's first word holds the line's own address, so each load waits for
// the previous one, and `repeats` loads of one line take `repeats` times its L2 latency from
// this SM. One untimed load first brings the line into L2. Blocks start at different lines
// so that they do not queue on the same line at the same moment.
//
// cycles[block * n_lines + i] = clock64 cycles of the repeats on line i; smids[block] = the SM.

__device__ __forceinline__ unsigned long long load_cg(unsigned long long address) {
    unsigned long long next;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(next) : "l"(address) : "memory");
    return next;
}

// A branch on the loaded value: the closing clock cannot be read before the last load returns.
__device__ __forceinline__ void wait_for(unsigned long long value) {
    asm volatile("{ .reg .pred p; setp.eq.u64 p, %0, 0; @p trap; }" ::"l"(value));
}

extern "C" __global__ void l2_sides(const unsigned long long* lines, int n_lines, int repeats,
                                    unsigned int* cycles, unsigned int* smids) {
    if (threadIdx.x != 0) {
        return;
    }
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    smids[blockIdx.x] = smid;
    const int first = static_cast<int>((static_cast<long long>(blockIdx.x) * n_lines) / gridDim.x);
    for (int k = 0; k < n_lines; ++k) {
        const int i = (first + k) % n_lines;
        unsigned long long address = load_cg(lines[i]);  // untimed: into L2
        wait_for(address);
        const long long before = clock64();
        for (int r = 0; r < repeats; ++r) {
            address = load_cg(address);
        }
        wait_for(address);
        const long long after = clock64();
        cycles[static_cast<long long>(blockIdx.x) * n_lines + i] =
            static_cast<unsigned int>(after - before);
    }
}
