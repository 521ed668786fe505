"""Shape plugins: ray intersection and surface interaction.

Triangles (``triangle.py``) are every mesh's primitive. Mitsuba's analytic
shapes (``sphere.py``, ``disk.py``, ``cylinder.py``) are one module each with
``intersect(geo, s, o, d, t_min)``, ``surface(geo, s, o, d, t, uv)`` and,
for derivatives of moving shapes, ``material_coords(local)`` /
``material_point(c1, c2)`` / ``local_normal(local)`` (two numbers that
locate an object-space point, and back);
a shape's kind id (``layout.SHAPE_KIND`` of its ``shape_data`` row) is its
module's position in :data:`ANALYTIC`. Adding an analytic shape: its module
plus an entry in ``ANALYTIC`` (and its ``shape_data`` row on the scene side).

Example::

    t = intersect(geo, s, o, d, t_min)            # on analytic shape s, whatever its kind
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import coordinate_system
from . import cylinder, disk, sphere

ANALYTIC = (sphere, disk, cylinder)
NAMES = tuple(m.NAME for m in ANALYTIC)
KIND = {n: i for i, n in enumerate(NAMES)}


def by_kind(geo, s, branches):
    """``branches[kind of shape s]()`` (one per ``ANALYTIC`` kind), traced
    for the kinds the scene has only (``geo.kinds``): the one call, a branch
    for two kinds, a dispatch beyond."""
    kinds = geo.kinds
    if len(kinds) == 1:
        return branches[kinds[0]]()
    kind = geo.shape_kind(s)
    if len(kinds) == 2:
        return ir.cond(kind == kinds[0], branches[kinds[0]], branches[kinds[1]])
    # (an absent kind's entry repeats a present one's: the dispatch traces it once)
    return ir.dispatch(kind, [branches[k] if k in kinds else branches[kinds[0]] for k in range(len(ANALYTIC))])


def intersect(geo, s, o, d, t_min):
    """Nearest t > t_min (or a value <= t_min / inf: no hit) on analytic shape ``s``."""
    return by_kind(geo, s, [lambda m=m: m.intersect(geo, s, o, d, t_min) for m in ANALYTIC])


def surface(geo, s, o, d, t, uv: bool):
    """(point, geometric normal, u, v) of a hit at t on analytic shape ``s``;
    (u, v) only when ``uv`` (textured scenes), else 0."""
    return by_kind(geo, s, [lambda m=m: m.surface(geo, s, o, d, t, uv) for m in ANALYTIC])


def tangents(geo, s, p):
    """Mitsuba's (dp_du, dp_dv) at point ``p`` of analytic shape ``s``."""
    return by_kind(geo, s, [lambda m=m: m.tangents(geo, s, p) for m in ANALYTIC])


def material_coords(geo, s, local):
    """Two numbers locating the object-space point ``local`` on analytic
    shape ``s`` (a triangle's barycentrics' counterpart): points of moving
    shapes keep them (``integrators/material.py``)."""
    return by_kind(geo, s, [lambda m=m: m.material_coords(local) for m in ANALYTIC])


def material_point(geo, s, c1, c2):
    """The object-space point, and its object-space normal (not normalised),
    at material coordinates (c1, c2) of analytic shape ``s``."""
    def at(m):
        local = m.material_point(c1, c2)
        return local, m.local_normal(local)
    return by_kind(geo, s, [lambda m=m: at(m) for m in ANALYTIC])


def curve_point(geo, shape, which, origin: Vec, phi, outward=0.0):
    """The point at angle ``phi`` of an analytic shape's silhouette or rim
    (``which``: 0 a sphere's circle of tangency from ``origin``, 1 a disk's
    rim, 2 / 3 a cylinder's rim at z = 0 / 1, 4 / 5 a cylinder's silhouette
    lines seen from ``origin``, at height phi / 2 pi), moved ``outward`` (a
    fraction of its radius) off the surface, away from the shape: on the
    side its boundary region lies."""
    kinds = geo.kinds
    cos, sin = ir.cos(phi), ir.sin(phi)
    on_sphere = on_rim = None
    if KIND["sphere"] in kinds:
        # the circle where rays from the origin graze it
        c, r = geo.center(shape), geo.shape_value(shape, layout.SHAPE_RADIUS)
        axis = origin - c
        d2 = ir.maximum(ir.dot(axis, axis), 1e-30)
        k = r * r / d2
        rho = r * ir.safe_sqrt(1.0 - k) * (1.0 + outward)
        e1, e2 = coordinate_system(axis * (1.0 / ir.sqrt(d2)))
        on_sphere = c + axis * k + (e1 * cos + e2 * sin) * rho
    if KIND["disk"] in kinds or KIND["cylinder"] in kinds:
        # a rim, in object space
        z = ir.select(which == 3, 1.0 + outward, ir.select(which == 2, -outward, 0.0))
        radial = ir.select(which == 1, 1.0 + outward, 1.0)
        local = Vec(cos * radial, sin * radial, z)
        if KIND["cylinder"] in kinds:
            # a cylinder's silhouette line: where the tube's tangents
            # through the origin's projection on its cross-section touch it
            lo = geo.to_object(shape, origin)
            r2 = ir.maximum(lo.x * lo.x + lo.y * lo.y, 1.0)
            half = ir.acos(ir.clamp(ir.rsqrt(r2), -1.0, 1.0))
            angle = ir.atan2(lo.y, lo.x) + ir.select(which == 4, half, -half)
            line = Vec(ir.cos(angle) * (1.0 + outward), ir.sin(angle) * (1.0 + outward),
                       phi * (0.5 / 3.141592653589793))
            local = Vec(*(ir.select(which >= 4, a, b) for a, b in zip(line, local)))
        on_rim = geo.to_world_point(shape, local)
    if on_rim is None or on_sphere is None:
        return on_sphere if on_rim is None else on_rim
    return Vec(*(ir.select(which == 0, a, b) for a, b in zip(on_sphere, on_rim)))
