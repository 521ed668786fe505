"""Sampler plugins: where each random number of a sample comes from.

Kernels ask for random numbers by *dimension group*: ``ctx.rand(s, group)``
returns four uniforms (x, y, a, b) of sample ``s`` of the work item's pixel,
where (x, y) is one 2D dimension of the scene's sampler (stratified or
low-discrepancy jointly: a film position, a point on a light, a BSDF
direction) and a and b are two 1D dimensions (discrete choices: an
emitter, a triangle, a BSDF lobe, Russian roulette). The path tracer uses
group 0 for the film, 1 + 2 depth for the emitter sample and 2 + 2 depth
for the BSDF sample and roulette at each vertex. Numbers are a pure
function of (seed, pixel, sample index, group) — no state — so a replay
draws exactly the numbers of the pass it replays.

One module per sampler (Mitsuba 3's five), each a
:class:`~.base.SamplerType`; ``Structure.sampler`` names the scene's, which
is traced into the kernels. Its settings are runtime inputs: the sample
count is ``spp`` (already rounded as the sampler requires), ``jitter`` and
``strength`` the scalars ``sampler_jitter`` and ``sampler_strength``, so
changing spp or seed never recompiles. Adding a sampler: its module plus
an entry in :data:`TYPES` (the scene loads it from its declaration).

Example::

    sampler = create("stratified", buffers)     # in a kernel: for the work item's pixel
    x, y, a, b = sampler.rand(s, group)
"""
from __future__ import annotations

from ... import ir
from . import independent, ldsampler, multijitter, orthogonal, stratified
from .base import MAX_COUNT, PixelSequence, SamplerType

TYPES: dict[str, SamplerType] = {t.name: t for t in (independent.TYPE, stratified.TYPE, multijitter.TYPE,
                                                      orthogonal.TYPE, ldsampler.TYPE)}
NAMES = tuple(TYPES)

__all__ = ["MAX_COUNT", "NAMES", "TYPES", "PixelSequence", "SamplerType", "Sampler", "create"]


class Sampler:
    """The scene's sampler for one work item: :meth:`rand` draws from it."""

    def __init__(self, kind: SamplerType, seq: PixelSequence):
        self.kind, self.seq = kind, seq

    def rand(self, s, group) -> tuple:
        """(x, y, a, b): a 2D and two 1D dimensions of sample ``s``, group ``group``."""
        return self.kind.rand(self.seq, s, group)


def create(name: str, b: dict, pixel=None) -> Sampler:
    """Sampler ``name`` for the work item's pixel (or ``pixel``) from a
    kernel's buffers ``b`` (``seed``, ``spp``, ``sampler_jitter``,
    ``sampler_strength``)."""
    kind = TYPES[name]
    seq = kind.sequence(b["seed"].value, ir.item_index() if pixel is None else pixel, b["spp"].value,
                        b["sampler_jitter"].value != 0, b["sampler_strength"].value)
    return Sampler(kind, seq)
