"""Shape plugins: ray intersection and surface interaction.

Triangles (``triangle.py``) are every mesh's primitive. Mitsuba's analytic
shapes (``sphere.py``, ``disk.py``, ``cylinder.py``) are one module each with
``intersect(geo, s, o, d, t_min)`` and ``surface(geo, s, o, d, t, uv)``;
a shape's kind id (``layout.SHAPE_KIND`` of its ``shape_data`` row) is its
module's position in :data:`ANALYTIC`. Adding an analytic shape: its module
plus an entry in ``ANALYTIC`` (and its ``shape_data`` row on the scene side).

Example::

    t = intersect(geo, s, o, d, t_min)            # on analytic shape s, whatever its kind
"""
from __future__ import annotations

from ... import ir
from . import cylinder, disk, sphere

ANALYTIC = (sphere, disk, cylinder)
NAMES = tuple(m.NAME for m in ANALYTIC)
KIND = {n: i for i, n in enumerate(NAMES)}


def by_kind(kind, branches):
    """``branches[kind]()``, as a branch for two kinds and a dispatch beyond."""
    if len(branches) == 1:
        return branches[0]()
    if len(branches) == 2:
        return ir.cond(kind == 0, branches[0], branches[1])
    return ir.dispatch(kind, branches)


def intersect(geo, s, o, d, t_min):
    """Nearest t > t_min (or a value <= t_min / inf: no hit) on analytic shape ``s``."""
    return by_kind(geo.shape_kind(s), [lambda m=m: m.intersect(geo, s, o, d, t_min) for m in ANALYTIC])


def surface(geo, s, o, d, t, uv: bool):
    """(point, geometric normal, u, v) of a hit at t on analytic shape ``s``;
    (u, v) only when ``uv`` (textured scenes), else 0."""
    return by_kind(geo.shape_kind(s), [lambda m=m: m.surface(geo, s, o, d, t, uv) for m in ANALYTIC])


def tangents(geo, s, p):
    """Mitsuba's (dp_du, dp_dv) at point ``p`` of analytic shape ``s``."""
    return by_kind(geo.shape_kind(s), [lambda m=m: m.tangents(geo, s, p) for m in ANALYTIC])
