"""Mitsuba's ``orthogonal`` sampler: orthogonal array sampling (Jarosz et
al., "Orthogonal Array Sampling for Monte Carlo Rendering", 2019).

The sample count is rounded up to p^2, p prime. The samples are the rows
of an orthogonal array, one column per dimension (a 2D dimension takes
two consecutive columns), visited in an order permuted per pixel; a
column's value picks a stratum of [0, 1) and a partner value a sub-stratum
in it (the multi-jitter idea), both permuted per pixel and column, with
jitter inside (or the centre with ``jitter`` off).

* ``strength`` 2 (the default): Bose's construction, p^2 rows and p + 1
  distinct columns (a0, a1, a0 + c a1 mod p); any two of them hold every
  pair of values once, so any two dimensions are stratified on a p x p
  grid, and each 1D projection has one sample in every 1/p^2 interval.
  Columns repeat beyond p + 1 dimensions (as in Mitsuba).
* ``strength`` t > 2: Bush's construction, p^t rows: row i's digits in base
  p are the coefficients of a polynomial, column c its value at c mod p;
  any t columns with distinct c mod p hold every t-tuple once. As Mitsuba
  3.9.1 does, a pixel takes only p^2 of those rows (its sample count), so
  the strength-t stratification belongs to the whole array, not to a
  pixel's samples.
"""
from __future__ import annotations

from ... import ir
from ...ir.rng import pcg_hash
from .base import MAX_COUNT, SamplerType, check_count
from .strata import divmod_small, isqrt_ceil, permute, stratum_point


def setup(seq):
    p = isqrt_ceil(seq.count)
    rows = ir.fori_loop(ir.UInt(0), seq.strength, lambda _, acc: acc * p, ir.UInt(1))   # p^t (Bush)
    return p, rows, seq.pixel_words()[0]              # the row order's seed


def _mod(x, p):
    return divmod_small(x, p)[1]


def _wrap(x, p):
    return ir.select(x >= p, x - p, x)


def _bose(seq, s, first, seeds, words):
    p, _, row_seed = seq.derived
    n = p * p
    a0, a1 = divmod_small(permute(s, n, row_seed), p)
    # Columns c >= 2 are a0 + (c - 1) a1 mod p: consecutive columns differ by a1.
    linear = [_mod(a0 + _mod(first + p - 1, p) * a1, p)]
    for _ in range(3):
        linear.append(_wrap(linear[-1] + a1, p))
    values = [ir.select(first + k == 0, a0, ir.select(first + k == 1, a1, linear[k])) for k in range(4)]
    out = []
    for k, ((seed_a, seed_b), word) in enumerate(zip(seeds, words)):
        # the partner column (sub-strata) of an even column is the next one and back
        stratum, sub = permute(values[k], p, seed_a), permute(values[k ^ 1], p, seed_b)
        out.append(stratum_point(stratum * p + sub, n, word, seq.jitter))
    return tuple(out)


def _bush(seq, s, first, seeds, words):
    p, rows, row_seed = seq.derived
    subs, _ = divmod_small(rows, p)                   # p^(t-1) sub-strata per stratum
    row = permute(s, rows, row_seed)
    high, _ = divmod_small(row, p)

    def polynomial_at(c):
        x = _mod(c, p)

        def digit(_, st):
            rest, acc, power = st
            rest, d = divmod_small(rest, p)
            return rest, _mod(acc + d * power, p), _mod(power * x, p)
        return ir.fori_loop(ir.UInt(0), seq.strength, digit, (row, ir.UInt(0), ir.UInt(1)))[1]

    out = []
    for k, ((seed_a, seed_b), word) in enumerate(zip(seeds, words)):
        stratum, sub = permute(polynomial_at(first + k), p, seed_a), permute(high, subs, seed_b)
        out.append(stratum_point(stratum * subs + sub, rows, word, seq.jitter))
    return tuple(out)


def rand(seq, s, group):
    first = ir.cast(group, "u32") * 4                 # the group's columns: x, y, a, b
    seeds = [(w, pcg_hash(w)) for w in seq.group_words(group)]
    words = seq.sample_words(s, group)
    return ir.cond(seq.strength == 2, lambda: _bose(seq, s, first, seeds, words),
                   lambda: _bush(seq, s, first, seeds, words))


def _is_prime(p: int) -> bool:
    return p >= 2 and all(p % d for d in range(2, int(p ** 0.5) + 1))


def sample_count(n: int, strength: int = 2) -> int:
    p = 2
    while p * p < n or not _is_prime(p):
        p += 1
    if strength < 2:
        raise ValueError(f"the orthogonal sampler's strength must be at least 2, got {strength}")
    if p ** strength > MAX_COUNT:
        raise ValueError(f"the orthogonal sampler's array has (sqrt of the sample count rounded up to a prime "
                         f"= {p})^strength = {p ** strength} rows, more than {MAX_COUNT}")
    return check_count(p * p, "orthogonal")


TYPE = SamplerType("orthogonal", rand, sample_count, properties=("jitter", "strength"), setup=setup)
