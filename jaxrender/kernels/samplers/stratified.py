"""Mitsuba's ``stratified`` sampler: the sample count is rounded up to a
square r^2; each 2D dimension places one sample in every cell of an r x r
grid and each 1D dimension one in every 1/r^2 interval, in an order
permuted per pixel and dimension, jittered inside the cell (or at its
centre with ``jitter`` off)."""
from __future__ import annotations

import math

from .base import SamplerType, check_count
from .strata import divmod_small, isqrt_ceil, permute, stratum_point


def setup(seq):
    return isqrt_ceil(seq.count)          # the grid resolution r


def rand(seq, s, group):
    r = seq.derived
    n = r * r
    w, j = seq.group_words(group), seq.sample_words(s, group)
    row, col = divmod_small(permute(s, n, w[0]), r)
    x = stratum_point(col, r, j[0], seq.jitter)
    y = stratum_point(row, r, j[1], seq.jitter)
    a = stratum_point(permute(s, n, w[1]), n, j[2], seq.jitter)
    b = stratum_point(permute(s, n, w[2]), n, j[3], seq.jitter)
    return x, y, a, b


def sample_count(n: int, strength: int = 2) -> int:
    r = math.isqrt(n - 1) + 1 if n > 1 else 1       # the smallest r with r^2 >= n
    return check_count(r * r, "stratified")


TYPE = SamplerType("stratified", rand, sample_count, properties=("jitter",), setup=setup)
