"""Mitsuba's analytic ``sphere``: exact silhouettes, its UV parameterisation
and its light sampling (by the cone it subtends, as Mitsuba's sphere does).

A sphere is a ``shape_data`` row (``layout.SHAPE_*``): its object-to-world
transform maps the unit sphere; ``SHAPE_SIGN`` is -1 when normals point
inwards (``flip_normals``).
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import Frame, square_to_uniform_sphere

NAME = "sphere"
INF = float("inf")
# Mitsuba's math::RayEpsilon<float>: a point within this relative distance
# of a sphere light's surface counts as inside it (outside for a flipped one).
SPHERE_EPSILON = 1500.0 * 2.0 ** -24


def intersect(geo, s, o: Vec, d: Vec, t_min):
    """Nearest t > t_min where the ray meets sphere ``s`` (inf: none).

    The quadratic is solved in the form that keeps float32 accurate far from
    the sphere and for grazing rays: the discriminant from the distance of
    the line to the centre (|f - (f.d / d.d) d|^2, no cancellation), and the
    two roots as q / a and c / q (Ray Tracing Gems, ch. 7)."""
    c, r = geo.center(s), geo.shape_value(s, layout.SHAPE_RADIUS)
    f = o - c
    a = ir.dot(d, d)
    b = -ir.dot(f, d)
    lv = f + d * (b / a)
    disc = a * (r * r - ir.dot(lv, lv))
    q = b + ir.copysign(ir.safe_sqrt(disc), b)
    ok = (disc >= 0.0) & (q != 0.0)
    q = ir.select(ok, q, 1.0)
    t0 = (ir.dot(f, f) - r * r) / q
    t1 = q / a
    near, far = ir.select(t0 < t1, t0, t1), ir.select(t0 > t1, t0, t1)
    return ir.select(ok, ir.select(near > t_min, near, far), INF)


def surface(geo, s, o: Vec, d: Vec, t, uv: bool):
    """Point (re-projected onto the sphere, as Mitsuba), geometric normal and
    Mitsuba's (u, v) (only when ``uv``: textured scenes) of a hit."""
    centre = geo.center(s)
    n = ir.normalize(o + d * t - centre)
    p = centre + n * geo.shape_value(s, layout.SHAPE_RADIUS)
    u = v = ir.Float(0.0)
    if uv:
        local = geo.to_object(s, p)
        phi = ir.atan2(local.y, local.x)
        phi = ir.select(phi < 0.0, phi + 2.0 * math.pi, phi)
        u = phi * (0.5 / math.pi)
        v = ir.acos(ir.clamp(local.z, -1.0, 1.0)) * (1.0 / math.pi)
    ng = n * geo.shape_value(s, layout.SHAPE_SIGN)
    return p, ng, u, v


def tangents(geo, s, p: Vec) -> tuple[Vec, Vec]:
    """Mitsuba's (dp_du, dp_dv) at point ``p``: the derivatives of the
    position in u = phi / 2pi and v = theta / pi (dp_dv = (1, 0, 0) in
    object space at the poles)."""
    local = geo.to_object(s, p)
    rd = ir.sqrt(local.x * local.x + local.y * local.y)
    pole = rd == 0.0
    inv = 1.0 / ir.select(pole, 1.0, rd)
    du = Vec(-local.y, local.x, 0.0) * (2.0 * math.pi)
    dv = Vec(ir.select(pole, 1.0, local.z * local.x * inv), ir.select(pole, 0.0, local.z * local.y * inv),
             ir.select(pole, 0.0, -rd)) * math.pi
    return geo.to_world_dir(s, du), geo.to_world_dir(s, dv)


def cone(geo, s, p: Vec):
    """Sphere ``s`` seen from ``p``: (vector to its centre, its squared
    length, sin^2 and 1 - cos of the half angle of the cone it subtends,
    1 / (2 pi (1 - cos)) if p lies outside it, else 0). Outside is Mitsuba's
    test: beyond the radius shrunk by SPHERE_EPSILON (grown for a flipped
    sphere, whose own surface points then sample it by area). 1 - cos is
    computed as sin^2 / (1 + cos): exact for tiny cones too."""
    r = geo.shape_value(s, layout.SHAPE_RADIUS)
    dc = geo.center(s) - p
    dc2 = ir.dot(dc, dc)
    r_adj = r * ir.select(geo.shape_value(s, layout.SHAPE_SIGN) < 0.0, 1.0 + SPHERE_EPSILON, 1.0 - SPHERE_EPSILON)
    outside = dc2 > r_adj * r_adj
    sin2 = ir.minimum(r * r / ir.select(outside, dc2, 1.0), 1.0)
    cos_max = ir.safe_sqrt(1.0 - sin2)
    one_minus_cos = sin2 / (1.0 + cos_max)
    cone_pdf = ir.select(outside & (one_minus_cos > 0.0),
                         1.0 / (2.0 * math.pi * ir.select(one_minus_cos > 0.0, one_minus_cos, 1.0)), 0.0)
    return dc, dc2, sin2, one_minus_cos, cone_pdf


def sample_direction(geo, s, p: Vec, u: Vec):
    """Mitsuba's sphere sampling: from outside, a direction uniform in the
    cone the sphere subtends (Akalin's visible-sphere mapping to the
    point's outward normal); from inside, a point uniform on the sphere.
    Returns (outward unit normal at the sampled point, the cone's solid-angle
    pdf, 0 if sampled by area)."""
    dc, dc2, sin2, om, cone_pdf = cone(geo, s, p)

    def in_cone():
        inv_dc = ir.rsqrt(dc2)
        inv_sin = 1.0 / ir.sqrt(sin2)
        # cos(theta) = 1 - u (1 - cos_max); sin^2 written without cancellation.
        x = u.x * om
        sin_t2 = x * (2.0 - x)
        cos_t = ir.safe_sqrt(1.0 - sin_t2)
        cos_a = sin_t2 * inv_sin + cos_t * ir.safe_sqrt(1.0 - sin_t2 * inv_sin * inv_sin)
        sin_a = ir.safe_sqrt(1.0 - cos_a * cos_a)
        phi = 2.0 * math.pi * u.y
        local = Vec(ir.cos(phi) * sin_a, ir.sin(phi) * sin_a, cos_a)
        return Frame(dc * -inv_dc).to_world(local)

    n = ir.cond(cone_pdf > 0.0, in_cone, lambda: square_to_uniform_sphere(u))
    return n, cone_pdf


# -- material coordinates (moving shapes: integrators/material.py) -------------
def _fold(u, v):
    """The octahedron's lower half unfolded onto (or folded back from) the
    square's corners: its own inverse."""
    return (1.0 - ir.abs(v)) * ir.copysign(1.0, u), (1.0 - ir.abs(u)) * ir.copysign(1.0, v)


def material_coords(local: Vec):
    """Two numbers that locate the object-space point ``local`` on the
    unit sphere, for :func:`material_point`: its octahedral map (the point
    over |x| + |y| + |z|, the lower half folded out): arithmetic only, where
    an azimuth would take an atan2 and a cos and sin, double precision
    calls on the CPU. Moving kernels keep these fixed and use only the
    relative change of the measure, which is the shape's own
    (``interaction._on_shape``), so any fixed map serves."""
    s = ir.abs(local.x) + ir.abs(local.y) + ir.abs(local.z)
    s = ir.select(s > 0.0, s, 1.0)
    u, v = local.x / s, local.y / s
    fu, fv = _fold(u, v)
    lower = local.z < 0.0
    return ir.select(lower, fu, u), ir.select(lower, fv, v)


def material_point(c1, c2) -> Vec:
    """The object-space point of :func:`material_coords` ``(c1, c2)``."""
    z = 1.0 - ir.abs(c1) - ir.abs(c2)
    fu, fv = _fold(c1, c2)
    lower = z < 0.0
    return ir.normalize(Vec(ir.select(lower, fu, c1), ir.select(lower, fv, c2), z))


def local_normal(local: Vec) -> Vec:
    """The unit sphere's outward normal at its point ``local``."""
    return local
