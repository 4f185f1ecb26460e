"""The Triton kernel of kernelab.evaluate.digest's fold (read its docstring for the why);
`digest.fold_reference` is the same arithmetic in Python integers."""

import triton
import triton.language as tl


@triton.jit
def murmur(x):
    # MurmurHash3's 64-bit finaliser: a bijection of x (uint64)
    x ^= x >> 33
    x *= 0xFF51AFD7ED558CCD
    x ^= x >> 33
    x *= 0xC4CEB9FE1A85EC53
    return x ^ (x >> 33)


@triton.jit
def splitmix(x):
    # SplitMix64's finaliser: another bijection, with other shifts and multipliers
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB
    return x ^ (x >> 31)


# n and count unspecialised: one compiled kernel for every size (no compile inside a batch)
@triton.jit(do_not_specialize=["n", "count"])
def fold_kernel(words_ptr, out_ptr, n, count, W: tl.constexpr, BLOCK: tl.constexpr):
    # One column per lane of the program: column t holds words t, t + count, t + 2 count, ...,
    # so the lanes of one load read consecutive words.
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = t < count
    position = t.to(tl.uint64)
    a = (position * 0xBF58476D1CE4E5B9) ^ 0x9E3779B97F4A7C15
    b = (position * 0x94D049BB133111EB) ^ 0xD1B54A32D192ED03
    for k in range(W):
        i = k * count + t
        w = tl.load(words_ptr + i, mask=live & (i < n), other=0).to(tl.uint64, bitcast=True)
        a = murmur(a ^ w)
        b = splitmix(b ^ (w * 0xFF51AFD7ED558CCD + k))
    first = murmur(a ^ b).to(tl.int64, bitcast=True)
    second = splitmix(b + a).to(tl.int64, bitcast=True)
    tl.store(out_ptr + 2 * t, first, mask=live)
    tl.store(out_ptr + 2 * t + 1, second, mask=live)
