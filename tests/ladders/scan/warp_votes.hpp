// __ballot_sync for the scan ladder's host emulation (step 5's warp-wide look-back), included
// after tests/cuda_host_emulation.hpp: like its __shfl_up_sync, every lane posts its predicate
// to its slot between two meetings of its warp's barrier, then reads all 32. Full mask only.
#pragma once

inline unsigned __ballot_sync(unsigned mask, int predicate) {
    using namespace kernelab_emu;
    if (mask != 0xffffffffu) fault("__ballot_sync with a partial mask", nullptr);
    const unsigned t = linear_thread(), first = t - t % kWarpSize;
    warp_barrier();  // every lane has read the slots of the previous collective
    shuffle_slots[t] = predicate ? 1 : 0;
    warp_barrier();  // every lane has written its predicate
    unsigned bits = 0;
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (shuffle_slots[first + lane]) bits |= 1u << lane;
    return bits;
}
