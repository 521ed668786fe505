"""Mitsuba's ``independent`` sampler: every number independent and uniform
(Philox4x32-10 of (seed, pixel, group, sample)); any sample count."""
from __future__ import annotations

from .base import SamplerType, to_unit


def rand(seq, s, group):
    return tuple(to_unit(w) for w in seq.sample_words(s, group))


def sample_count(n: int, strength: int = 2) -> int:
    return n


TYPE = SamplerType("independent", rand, sample_count)
