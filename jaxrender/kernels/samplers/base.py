"""What a sampler plugin declares, and the per-pixel sequence it draws from.

A sampler is a pure function of (seed, pixel, sample index, dimension
group): no state, so a replay (the forward-mode kernel, the adjoint's path
replay) recomputes exactly the numbers of the pass it replays. Its random
ingredients (permutation seeds, scrambles, jitter) are Philox words of
:class:`PixelSequence`; how it places points (strata, orthogonal arrays,
(0,2)-sequences) is the sampler's module.

Example::

    seq = PixelSequence(seed, pixel, count=spp, jitter=ir.Bool(True), strength=ir.UInt(2))
    x, y, a, b = TYPE.rand(seq, s, group)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ... import ir
from ...ir.rng import philox4x32

# Philox key word shared with ir.rng.uniform4: the independent sampler's
# numbers are that function's, counter (pixel, group, sample, 0).
_KEY = 0x5EED5EED
# The counter's last word tells the kinds of words apart.
_PER_SAMPLE, _PER_GROUP, _PER_PIXEL = 0, 1, 2
# The most samples per pixel (and rows of an orthogonal array) of a
# stratifying sampler: its strata must be wider than a float's step below 1
# (strata.stratum_point) and its divisions exact (strata.divmod_small, below
# 2^24 with room to spare).
MAX_COUNT = 1 << 23


@dataclasses.dataclass
class PixelSequence:
    """The samples of one pixel (work item): ``count`` samples, each with
    any number of dimension groups. ``derived`` holds what a sampler
    computes from them once per pixel (its ``setup``), e.g. a strata
    resolution."""
    seed: Any            # u32: the render's seed (the scene's sampler seed added)
    pixel: Any           # the work item
    count: Any           # u32: samples per pixel, as the sampler type rounds them
    jitter: Any          # Bool: jitter inside strata (else their centres)
    strength: Any        # u32: orthogonal array strength
    derived: Any = None

    def _words(self, a, b, kind: int) -> tuple:
        return philox4x32((self.pixel, a, b, kind), (self.seed, _KEY))

    def sample_words(self, s, group) -> tuple:
        """Four random u32 of sample ``s``, group ``group`` (jitter)."""
        return self._words(group, s, _PER_SAMPLE)

    def group_words(self, group) -> tuple:
        """Four random u32 of the pixel's group ``group``, the same for all
        its samples (permutation seeds, scrambles)."""
        return self._words(group, 0, _PER_GROUP)

    def pixel_words(self) -> tuple:
        """Four random u32 of the pixel, the same for all its samples and
        groups (an orthogonal array's row order)."""
        return self._words(0, 0, _PER_PIXEL)


@dataclasses.dataclass(frozen=True)
class SamplerType:
    """One sampler plugin.

    ``rand(seq, s, group)``: four uniforms (x, y, a, b) in [0, 1) of sample
    ``s`` of ``seq``: (x, y) one 2D dimension of the sampler, a and b two
    1D dimensions (see the package docstring). ``setup(seq)``: per-pixel
    values it derives from the sequence (None: nothing). ``sample_count(n,
    strength)``: the number of samples Mitsuba 3.9.1 takes when asked for
    ``n`` (its ``set_sample_count``); a ValueError for a request it cannot
    honour. ``properties``: the Mitsuba properties it reads besides
    ``sample_count`` and ``seed`` (``jitter``, ``strength``)."""
    name: str
    rand: Callable
    sample_count: Callable[[int, int], int]
    properties: tuple = ()
    setup: Callable | None = None

    def sequence(self, seed, pixel, count, jitter, strength) -> PixelSequence:
        seq = PixelSequence(seed, pixel, count, jitter, strength)
        if self.setup is not None:
            seq.derived = self.setup(seq)
        return seq


def to_unit(bits) -> ir.Float:
    """A u32 as a float in [0, 1): its top 24 bits (exact)."""
    return ir.cast(bits >> 8, "f32") * (1.0 / 16777216.0)


def check_count(n: int, name: str) -> int:
    if n > MAX_COUNT:
        raise ValueError(f"the {name} sampler takes at most {MAX_COUNT} samples per pixel, got {n}")
    return n
