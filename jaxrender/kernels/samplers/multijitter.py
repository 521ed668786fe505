"""Mitsuba's ``multijitter`` sampler: correlated multi-jittered sampling
(Kensler, Pixar tech memo 13-01, 2013). The sample count n is rounded up
to rx x ry with ry = floor(sqrt(n)) (a grid of aspect close to one). Each
2D dimension puts one sample in every cell of the rx x ry grid *and* one
in every 1/n interval of each axis: the sample of cell (cx, cy) sits in
sub-column sy(cy) and sub-row sx(cx) of its cell, sx and sy permutations
shared by all rows and columns (the "correlated" variant). 1D dimensions
are stratified into n intervals. Orders are permuted per pixel and
dimension; ``jitter`` places points randomly inside their interval (else
at its centre)."""
from __future__ import annotations

import numpy as np

from ...ir.rng import pcg_hash
from .base import SamplerType, check_count
from .strata import divmod_small, isqrt_floor, permute, stratum_point


def setup(seq):
    ry = isqrt_floor(seq.count)
    rx, _ = divmod_small(seq.count + ry - 1, ry)
    return rx, ry


def rand(seq, s, group):
    rx, ry = seq.derived
    n = rx * ry
    w, j = seq.group_words(group), seq.sample_words(s, group)
    cy, cx = divmod_small(permute(s, n, w[0]), rx)
    sx, sy = permute(cx, rx, w[1]), permute(cy, ry, w[2])
    x = stratum_point(cx * ry + sy, n, j[0], seq.jitter)
    y = stratum_point(cy * rx + sx, n, j[1], seq.jitter)
    a = stratum_point(permute(s, n, w[3]), n, j[2], seq.jitter)
    b = stratum_point(permute(s, n, pcg_hash(w[3])), n, j[3], seq.jitter)
    return x, y, a, b


def sample_count(n: int, strength: int = 2) -> int:
    ry = int(np.sqrt(np.float32(n)))          # in single precision, as Mitsuba
    rx = (n + ry - 1) // ry
    return check_count(rx * ry, "multijitter")


TYPE = SamplerType("multijitter", rand, sample_count, properties=("jitter",), setup=setup)
