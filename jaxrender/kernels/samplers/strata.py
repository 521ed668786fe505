"""Integer arithmetic the stratifying samplers share: random permutations
of [0, n), exact small divisions, and a point drawn inside a stratum.

Divisions go through float division where that is provably exact (SIMD
units have no integer division, so a u32 ``//`` would run lane by lane).

Example::

    k = permute(s, n, seed)                 # the stratum of sample s
    x = stratum_point(k, n, word, jitter)   # in [k / n, (k + 1) / n), exactly
"""
from __future__ import annotations

from ... import ir
from .base import to_unit


def divmod_small(a, b) -> tuple:
    """(a // b, a % b) of u32 values with a + b <= 2^24 and b >= 1.

    floor(fl(a / b)) is exact there: when a / b = q + r / b with r > 0, its
    distance to q + 1 is at least 1 / b, more than half an ulp of q + 1
    because b (q + 1) <= a + b <= 2^24."""
    q = ir.cast(ir.floor(ir.cast(a, "f32") / ir.cast(b, "f32")), "u32")
    return q, a - q * b


def isqrt_floor(n):
    """floor(sqrt(n)) of a u32 n < 2^24."""
    r = ir.cast(ir.sqrt(ir.cast(n, "f32")), "u32")    # floor(sqrt(n)) or one more (rounding up to an integer)
    return ir.select(r * r > n, r - 1, r)


def isqrt_ceil(n):
    """ceil(sqrt(n)) of a u32 n < 2^24."""
    r = isqrt_floor(n)
    return ir.select(r * r < n, r + 1, r)


def _mix(x, w, seed):
    """Kensler's hash (Pixar tech memo 13-01, "Correlated Multi-Jittered
    Sampling", 2013): a bijection of the low bits ``w`` = 2^k - 1 of x
    (xors, odd multipliers and xor-shifts of the masked bits never let high
    bits reach low ones), chosen by ``seed``."""
    x = (x ^ seed) * 0xE170893D
    x = x ^ (seed >> 16)
    x = x ^ ((x & w) >> 4)
    x = (x ^ (seed >> 8)) * 0x0929EB3F
    x = x ^ (seed >> 23)
    x = (x ^ ((x & w) >> 1)) * (ir.UInt(1) | (seed >> 27))
    x = x * 0x6935FA69
    x = (x ^ ((x & w) >> 11)) * 0x74DCB303
    x = (x ^ ((x & w) >> 2)) * 0x9E501CC3
    x = (x ^ ((x & w) >> 2)) * 0xC860A3DF
    x = x & w
    return x ^ (x >> 5)


def permute(i, n, seed):
    """Position of ``i`` (u32, i < n) in a random permutation of [0, n)
    chosen by ``seed`` (u32): Kensler's hash on the smallest power-of-two
    range holding n, walking the cycle until it lands inside [0, n), then a
    random rotation. Any n >= 1; n = 1 gives 0."""
    w = n - 1
    for shift in (1, 2, 4, 8, 16):
        w = w | (w >> shift)
    x = ir.while_loop(lambda x: x >= n, lambda x: _mix(x, w, seed), _mix(i, w, seed))
    x = x + ir.mulhi(seed, n)        # rotation by a seed-chosen offset in [0, n)
    return ir.select(x >= n, x - n, x)


def stratum_point(k, n, word, jitter):
    """A point of stratum ``k`` of ``n`` equal strata of [0, 1), i.e. in
    [k / n, (k + 1) / n) exactly (n <= 2^23): (k + u) / n with u uniform
    from the random u32 ``word`` where ``jitter``, else 1/2.

    In floats, k + u rounds to some s in [k, k + 1] and the division to the
    float nearest s / n; so if that lies outside the stratum, the next
    float towards it is inside (the stratum is wider than a float's step).
    The sign of v n - k (an fma: rounded once, so its sign is exact) says
    on which side it lies."""
    kf, nf = ir.cast(k, "f32"), ir.cast(n, "f32")
    v = (kf + ir.select(jitter, to_unit(word), 0.5)) / nf
    below = ir.fma(v, nf, -kf) < 0.0
    above = ir.fma(v, nf, -(kf + 1.0)) >= 0.0
    bits = ir.bitcast(v, "u32")
    return ir.bitcast(ir.select(below, bits + 1, ir.select(above, bits - 1, bits)), "f32")
