// Pointer chasing: one thread follows a cycle of dependent loads, so each load can only issue
// once the previous one has returned. Cycles per load (clock64) and nanoseconds per load
// (%globaltimer) are then the unloaded latency of wherever the chain lives.
//
// The chain lives in global memory as 8-byte words: the word at a node holds the address of
// the next node (the host builds a random single cycle over the nodes), so the loaded value
// is the next address itself and no index arithmetic sits on the critical path.
//
// `warm_steps` loads run untimed first: they bring the chain into the cache under test (L1
// with .ca, L2 with .cg) and its pages into the TLB. The HBM chase runs with none, on a
// chain far larger than the L2 that the host flushed first.
//
// result[0] = cycles, result[1] = ns, result[2] = the final address (so the loads are live).
// ptxas may read the closing clock before the last load returns (and the opening one before
// the last warm load does): at most one load in `steps` (the launcher runs >= 10,000).

__device__ __forceinline__ unsigned long long load_ca(unsigned long long address) {
    unsigned long long next;
    asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(next) : "l"(address) : "memory");
    return next;
}

__device__ __forceinline__ unsigned long long load_cg(unsigned long long address) {
    unsigned long long next;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(next) : "l"(address) : "memory");
    return next;
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

template <bool kL1>
__device__ __forceinline__ void chase(unsigned long long start, int warm_steps, int steps,
                                      unsigned long long* result) {
    unsigned long long address = start;
    for (int i = 0; i < warm_steps; ++i) {
        address = kL1 ? load_ca(address) : load_cg(address);
    }
    const long long cycles_before = clock64();
    const unsigned long long ns_before = global_ns();
    for (int i = 0; i < steps; ++i) {
        address = kL1 ? load_ca(address) : load_cg(address);
    }
    const long long cycles_after = clock64();
    const unsigned long long ns_after = global_ns();
    result[0] = static_cast<unsigned long long>(cycles_after - cycles_before);
    result[1] = ns_after - ns_before;
    result[2] = address;
}

// L1 hits: .ca caches the line in the SM's L1 on the warm pass.
extern "C" __global__ void chase_global_ca(unsigned long long start, int warm_steps, int steps,
                                           unsigned long long* result) {
    chase<true>(start, warm_steps, steps, result);
}

// L2 (or HBM) accesses: .cg caches in L2 only, so every load leaves the SM.
extern "C" __global__ void chase_global_cg(unsigned long long start, int warm_steps, int steps,
                                           unsigned long long* result) {
    chase<false>(start, warm_steps, steps, result);
}

// Shared memory: the block copies the successor table (node indices) into dynamic shared
// memory as 32-bit shared-window addresses, then thread 0 chases them.
extern "C" __global__ void chase_shared(const unsigned int* next_index, int nodes, int warm_steps,
                                        int steps, unsigned long long* result) {
    extern __shared__ unsigned int table[];
    const unsigned int base = static_cast<unsigned int>(__cvta_generic_to_shared(table));
    for (int i = threadIdx.x; i < nodes; i += blockDim.x) {
        table[i] = base + 4u * next_index[i];
    }
    __syncthreads();
    if (threadIdx.x != 0) {
        return;
    }
    unsigned int address = base;
    for (int i = 0; i < warm_steps; ++i) {
        asm volatile("ld.shared.u32 %0, [%0];" : "+r"(address) : : "memory");
    }
    const long long cycles_before = clock64();
    const unsigned long long ns_before = global_ns();
    for (int i = 0; i < steps; ++i) {
        asm volatile("ld.shared.u32 %0, [%0];" : "+r"(address) : : "memory");
    }
    const long long cycles_after = clock64();
    const unsigned long long ns_after = global_ns();
    result[0] = static_cast<unsigned long long>(cycles_after - cycles_before);
    result[1] = ns_after - ns_before;
    result[2] = address;
}
