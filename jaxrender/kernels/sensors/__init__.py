"""Sensor plugins: the ray a sample of a pixel traces.

``film.py`` places a sample on the image (pixel and reconstruction filter);
one module per sensor type turns a film position (x, y) and a point on the
lens ``lens`` (two uniforms, the 1D dimensions of the film's sampler group)
into a ray (``sample_ray(ctx, x, y, lens) -> (origin, direction, t_min,
t_max)``). Adding a sensor: its module plus an entry in :data:`TYPES` (and
its loader and ``camera`` row on the scene side); ``Structure.sensor``
names the scene's.

Example::

    o, d, t_min, t_max = sample_ray(ctx, sample_index)
"""
from __future__ import annotations

from . import film, orthographic, perspective, thinlens

TYPES = {m.NAME: m for m in (perspective, thinlens, orthographic)}


def sample_ray(ctx, s):
    """The camera ray of sample ``s`` of the work item's pixel."""
    x, y = film.sample_position(ctx, s)
    _, _, a, b = ctx.rand(s, film.POSITION_DIM)
    return TYPES[ctx.structure.sensor].sample_ray(ctx, x, y, (a, b))
