"""Mitsuba's ``area`` light, on a triangle mesh or on an analytic shape.

On a mesh (``area``) a point is sampled uniformly by area: a triangle from
the emitter's area CDF (``light_tris`` / ``light_cdf``, ``layout.META_FIRST``
and ``META_COUNT`` of its ``emitter_meta`` row), then a point on it. On a
disk (``area_disk``) or a cylinder (``area_cylinder``) uniformly by area
as well; on a sphere
(``area_sphere``) by the cone it subtends from the reference point, as
Mitsuba's sphere does (``shapes/sphere.py``), by area from inside. Only the
front side (along the geometric normal) emits.
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import sample_cdf, square_to_uniform_triangle
from ..shapes import cylinder, disk, sphere
from .base import DirectionSample, EmitterType


def _towards(ref: Vec, q: Vec, nl: Vec, pdf_fn) -> DirectionSample:
    """The direction from ``ref`` to the emitting point ``q`` (normal nl);
    ``pdf_fn(dist^2, cos at the light)`` its solid-angle density. The back
    of an area light does not emit: a zero pdf (no sample)."""
    to_light = q - ref
    dist2 = ir.dot(to_light, to_light)
    dist = ir.sqrt(dist2)
    w = to_light / dist
    cos_light = -ir.dot(nl, w)
    front_side = cos_light > 0.0
    pdf = ir.select(front_side, pdf_fn(dist2, ir.maximum(cos_light, 1e-20)), 0.0)
    return DirectionSample(w, dist, ir.select(front_side, 1.0, 0.0), pdf, ir.Bool(False))


def _by_area(ctx, sel):
    area = ctx.b["emitter_geom"].read(sel, layout.GEOM_AREA)
    return lambda dist2, cos_light: dist2 / (cos_light * area)


def mesh_point(ctx, sel, u):
    """The light triangle and barycentrics (of its 2nd and 3rd vertex) that
    ``u`` picks on mesh emitter ``sel``: uniform by area."""
    meta, b = ctx.b["emitter_meta"], ctx.b
    start, count = meta.read(sel, layout.META_FIRST), meta.read(sel, layout.META_COUNT)
    return b["light_tris"][sample_cdf(b["light_cdf"], start, count, u[0])], square_to_uniform_triangle(Vec(u[1], u[2]))


def sample_mesh(ctx, sel, ref: Vec, u) -> DirectionSample:
    lt, bc = mesh_point(ctx, sel, u)
    q0, q1, q2 = ctx.geo.triangle(lt)
    q = q0 * (1.0 - bc.x - bc.y) + q1 * bc.x + q2 * bc.y
    nl = ir.normalize(ir.cross(q1 - q0, q2 - q0))
    return _towards(ref, q, nl, _by_area(ctx, sel))


def _sample_by_area(shape):
    """The sampler of an area light on analytic ``shape`` (its module)
    that picks a point uniformly by area."""
    def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
        s = ctx.b["emitter_meta"].read(sel, layout.META_FIRST)
        q, nl = shape.sample_position(ctx.geo, s, Vec(u[1], u[2]))
        return _towards(ref, q, nl, _by_area(ctx, sel))
    return sample


def sample_sphere(ctx, sel, ref: Vec, u) -> DirectionSample:
    geo = ctx.geo
    s = ctx.b["emitter_meta"].read(sel, layout.META_FIRST)
    n, cone_pdf = sphere.sample_direction(geo, s, ref, Vec(u[1], u[2]))
    q = geo.center(s) + n * geo.shape_value(s, layout.SHAPE_RADIUS)
    by_area = _by_area(ctx, sel)
    return _towards(ref, q, n * geo.shape_value(s, layout.SHAPE_SIGN),
                    lambda dist2, cos_light: ir.select(cone_pdf > 0.0, cone_pdf, by_area(dist2, cos_light)))


def pdf_sphere(ctx, sel, si):
    """The cone density of a sphere light seen from the ray's origin (0
    from inside: then the area density applies)."""
    return sphere.cone(ctx.geo, ctx.b["emitter_meta"].read(sel, layout.META_FIRST), si.o)[4]


MESH = EmitterType("area", sample_mesh)
SPHERE = EmitterType("area_sphere", sample_sphere, pdf=pdf_sphere,
                     used=lambda structure: "sphere" in structure.analytic)
DISK = EmitterType("area_disk", _sample_by_area(disk),
                   used=lambda structure: "disk" in structure.analytic)
CYLINDER = EmitterType("area_cylinder", _sample_by_area(cylinder),
                       used=lambda structure: "cylinder" in structure.analytic)
