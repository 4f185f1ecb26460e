// Step 19's division of the work between clusters: whole tiles round-robin while every cluster
// has one, then the leftover tiles' K-tiles as one range cut evenly between the clusters
// (stream-K over the last partial wave). Host and device code alike, so a CPU test can walk
// it (tests/test_hgemm_stream_k.py).
//
// Why: 4096^3 is 256 cluster tiles on 66 clusters. Round-robin, 58 clusters run 4 tiles and 8
// run 3: the kernel takes 4 tile times for 3.88 tiles of work. Here every cluster runs 3 whole
// tiles and then 56.2 of the 58 x 64 leftover K-tiles: 3.88 tile times, plus the fix-up of the
// tiles whose K-tiles two or three clusters share.
//
// A cluster's leftover range is cut at tile boundaries into segments. A segment that reaches
// its tile's last K-tile is the tile's owner (WHOLE when it also starts at K-tile 0): it adds
// the other clusters' partial sums and stores the tile. Any other segment is a CONTRIBUTOR: it
// leaves its partial sum in the workspace. Only a range's last segment can be a contributor,
// so a cluster needs one workspace slot. Each cluster walks its segments last first: its
// contribution is the first thing it does and its owned tile the last, so an owner waits only
// for clusters of lower index, which were dispatched before it and are done by then.
#pragma once

namespace stream_k {

enum Role : int { WHOLE = 0, OWNER = 1, CONTRIBUTOR = 2 };

struct Segment {
    int q;        // the cluster tile
    int k_begin;  // its K-tiles [k_begin, k_end)
    int k_end;
    int role;
};

// When the leftover range is cut: at least one full round before it (else there is no
// partial wave to fill: 2048^3 is 64 tiles on 66 clusters), at least half the clusters' worth
// of leftover tiles (so no tile is shared by more than about three clusters, whose partial
// sums its owner reads back one after the other), at least MIN_SPAN_K_TILES per cluster, and
// only where it wins more than the fix-up costs: round-robin, the last round takes k_tiles
// K-tile times; shared out, left x k_tiles / clusters. The difference must reach
// MIN_SAVED_K_TILES (the build may set it: 0 shares wherever the rest allows, for the
// calibration in benchmarks/experiments/stream_k_calibrate.py (at f7bfe57)). On an H100 (docs/notes/hgemm.md,
// step 19) sharing lost 2.5 % of step 18 at 7.8 saved and won 0.1 % at
// 15.5, 1.4 % at 26 and 2.3 % at 62.
// 4096^3: 58 of 66 left, 56.2 K-tiles each, 7.8 saved; 8192^3: 34 of 66, 65.9 each, 62 saved.
constexpr int MIN_SPAN_K_TILES = 8;
#ifndef STREAM_K_MIN_SAVED_K_TILES
#define STREAM_K_MIN_SAVED_K_TILES 15
#endif
constexpr int MIN_SAVED_K_TILES = STREAM_K_MIN_SAVED_K_TILES;

struct Split {
    int clusters, k_tiles;
    int whole_tiles;  // cluster tiles run whole, q = c, c + clusters, ...
    int shared_tiles;  // the tiles after them, shared out as K-tiles (0: none)

    // may_share false (no workspace): every tile whole, as step 18 runs them.
    __host__ __device__ Split(int cluster_tiles, int k_tiles_, int clusters_, bool may_share = true)
        : clusters(clusters_), k_tiles(k_tiles_) {
        const int rounds = cluster_tiles / clusters;
        const int left = cluster_tiles - rounds * clusters;
        // range_begin's product in 32 bits: a 64-bit division is a subroutine call, and the
        // consumers have no registers to spare for it
        const long long largest = static_cast<long long>(left) * k_tiles * clusters;
        const bool worth_it = may_share && rounds > 0 && 2 * left >= clusters &&
                              largest <= 0x7fffffff &&
                              left * k_tiles >= MIN_SPAN_K_TILES * clusters &&
                              (clusters - left) * k_tiles >= MIN_SAVED_K_TILES * clusters;
        whole_tiles = worth_it ? rounds * clusters : cluster_tiles;
        shared_tiles = worth_it ? left : 0;
    }

    // Where cluster c's share of the leftover K-tiles starts (c = clusters: where they end),
    // counted from the first shared tile's K-tile 0.
    __host__ __device__ int range_begin(int c) const {
        return shared_tiles * k_tiles * c / clusters;
    }

    // The segment of cluster c's range that ends at `end` (exclusive), `begin` its range's start.
    __host__ __device__ Segment segment_ending_at(int end, int begin) const {
        const int tile = (end - 1) / k_tiles, tile_start = tile * k_tiles;
        const int start = begin > tile_start ? begin : tile_start;
        Segment s;
        s.q = whole_tiles + tile;
        s.k_begin = start - tile_start;
        s.k_end = end - tile_start;
        s.role = s.k_end < k_tiles ? CONTRIBUTOR : (s.k_begin == 0 ? WHOLE : OWNER);
        return s;
    }

    // Whether cluster c, below the owner of shared tile q, left a partial sum for it: its
    // range ends past the tile's start. The owner asks for owner - 1, owner - 2, ... until no.
    __host__ __device__ bool contributes(int c, int q) const {
        return c >= 0 && range_begin(c + 1) > (q - whole_tiles) * k_tiles;
    }

    // Every segment of cluster c in the order it runs them: whole tiles first, then its
    // leftover range last segment first. visit(const Segment &).
#pragma nv_exec_check_disable
    template <class Visit>
    __host__ __device__ __forceinline__ void walk(int c, Visit &&visit) const {
        for (int q = c; q < whole_tiles; q += clusters) visit(Segment{q, 0, k_tiles, WHOLE});
        const int begin = range_begin(c);
        for (int end = range_begin(c + 1); end > begin;) {
            const Segment s = segment_ending_at(end, begin);
            visit(s);
            end -= s.k_end - s.k_begin;
        }
    }
};

}  // namespace stream_k
