"""Mitsuba's ``ldsampler``: a padded, scrambled (0, 2)-sequence (Kollig and
Keller, "Efficient multidimensional sampling", 2002).

The sample count is rounded up to 4^k. Each 2D dimension takes the first
points of the (0, 2)-sequence in base 2 (the van der Corput sequence and
the second Sobol dimension): any 2^m of its points starting at 0 have one
point in every elementary interval of area 2^-m (every [i 2^-a, (i + 1)
2^-a) x [j 2^-b, (j + 1) 2^-b), a + b = m). Each 1D dimension takes the van
der Corput sequence (one point per 1/2^m interval). Dimensions are padded
with each other by permuting the sample order per pixel and dimension, and
randomised by a digital (xor) scramble per pixel and dimension, which
keeps the intervals' property; there is no jitter.
"""
from __future__ import annotations

from ... import ir
from ...ir.rng import pcg_hash
from .base import SamplerType, check_count, to_unit
from .strata import permute

# The generator matrix of the second Sobol dimension, column k (bit k of
# the index) as a u32 whose top bit is the first digit.
_SOBOL2 = [1 << 31]
for _ in range(31):
    _SOBOL2.append(_SOBOL2[-1] ^ (_SOBOL2[-1] >> 1))


def reverse_bits(x):
    """The bits of u32 ``x`` in reverse order: the van der Corput digits of x."""
    for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
        x = ((x >> shift) & mask) | ((x & mask) << shift)
    return (x >> 16) | (x << 16)


def sobol2(i, bits: int = 24):
    """The second Sobol dimension's digits of index ``i`` < 2^bits."""
    out = ir.UInt(0)
    for k in range(bits):
        out = out ^ (ir.UInt(_SOBOL2[k]) & (ir.UInt(0) - ((i >> k) & 1)))
    return out


def rand(seq, s, group):
    n = seq.count
    w = seq.group_words(group)
    i = permute(s, n, w[0])
    x = to_unit(reverse_bits(i) ^ pcg_hash(w[0]))
    y = to_unit(sobol2(i) ^ pcg_hash(w[0] ^ 0x6A09E667))
    a = to_unit(reverse_bits(permute(s, n, w[1])) ^ pcg_hash(w[1]))
    b = to_unit(reverse_bits(permute(s, n, w[2])) ^ pcg_hash(w[2]))
    return x, y, a, b


def sample_count(n: int, strength: int = 2) -> int:
    r = 2                                  # Mitsuba: the smallest power of two r >= 2 with r^2 >= n
    while r * r < n:
        r *= 2
    return check_count(r * r, "ldsampler")


TYPE = SamplerType("ldsampler", rand, sample_count)
