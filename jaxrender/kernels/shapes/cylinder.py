"""Mitsuba's analytic ``cylinder``: the open tube of unit radius from z = 0
to z = 1 in object space (its ``to_world`` carries p0, the axis, the
radius and the length), without caps; its UVs (angle, height) and uniform
sampling by area for cylinder lights.

A cylinder is a ``shape_data`` row (``layout.SHAPE_*``); ``SHAPE_SIGN`` is
-1 when normals point inwards (``flip_normals``, or a reflecting
``to_world``, as in Mitsuba).
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout

NAME = "cylinder"
INF = float("inf")


def _on_tube(z, t, t_min):
    return (z >= 0.0) & (z <= 1.0) & (t > t_min)


def intersect(geo, s, o: Vec, d: Vec, t_min):
    """Nearest t > t_min where the ray meets cylinder ``s`` (inf: none).
    The quadratic in the object's xy plane is solved in the stable form
    (roots q / a and c / q); a hit counts only between the two rims."""
    lo = geo.to_object(s, o)
    ld = geo.to_object_dir(s, d)
    a = ld.x * ld.x + ld.y * ld.y
    b = -(lo.x * ld.x + lo.y * ld.y)
    # the discriminant from the line's distance to the axis, without cancellation
    ex, ey = lo.x + ld.x * (b / a), lo.y + ld.y * (b / a)
    disc = a * (1.0 - (ex * ex + ey * ey))
    q = b + ir.copysign(ir.safe_sqrt(disc), b)
    ok = (disc >= 0.0) & (q != 0.0) & (a > 0.0)
    q = ir.select(ok, q, 1.0)
    t0 = (lo.x * lo.x + lo.y * lo.y - 1.0) / q
    t1 = q / ir.select(a > 0.0, a, 1.0)
    near, far = ir.minimum(t0, t1), ir.maximum(t0, t1)
    t = ir.select(_on_tube(lo.z + ld.z * near, near, t_min), near,
                  ir.select(_on_tube(lo.z + ld.z * far, far, t_min), far, INF))
    return ir.select(ok, t, INF)


def _frame(geo, s, x, y):
    """The world point over object (x, y) on the unit circle at height 0's
    tangent frame: (dp/du, dp/dv) as Mitsuba defines them."""
    m = [geo.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
    du = Vec(*(2.0 * math.pi * (m[4 * k + 1] * x - m[4 * k] * y) for k in range(3)))
    dv = Vec(m[2], m[6], m[10])
    return du, dv


def normal_at(geo, s, x, y) -> Vec:
    """The geometric normal over object point (x, y, .) (Mitsuba: the
    normalised cross product of dp/du and dp/dv, flipped if flipped)."""
    du, dv = _frame(geo, s, x, y)
    return ir.normalize(ir.cross(du, dv)) * geo.shape_value(s, layout.SHAPE_SIGN)


def surface(geo, s, o: Vec, d: Vec, t, uv: bool):
    """Point (re-projected onto the tube, as Mitsuba), geometric normal and
    Mitsuba's (u, v) = (angle / 2pi, height) (only when ``uv``)."""
    local = geo.to_object(s, o + d * t)
    inv_r = ir.rsqrt(local.x * local.x + local.y * local.y)
    x, y = local.x * inv_r, local.y * inv_r
    p = point(geo, s, x, y, local.z)
    u = v = ir.Float(0.0)
    if uv:
        phi = ir.atan2(y, x)
        u = ir.select(phi < 0.0, phi + 2.0 * math.pi, phi) * (0.5 / math.pi)
        v = local.z
    return p, normal_at(geo, s, x, y), u, v


def tangents(geo, s, p: Vec) -> tuple[Vec, Vec]:
    """Mitsuba's (dp_du, dp_dv) at point ``p``: the derivatives of the
    position in u = phi / 2pi and v (the axis, from p0 to p1)."""
    local = geo.to_object(s, p)
    return (geo.to_world_dir(s, Vec(-local.y, local.x, 0.0) * (2.0 * math.pi)),
            geo.to_world_dir(s, Vec(0.0, 0.0, 1.0)))


def point(geo, s, x, y, z) -> Vec:
    m = [geo.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
    return Vec(*(m[4 * k] * x + m[4 * k + 1] * y + m[4 * k + 2] * z + m[4 * k + 3] for k in range(3)))


def sample_position(geo, s, u: Vec) -> tuple[Vec, Vec]:
    """A point uniform on the tube's area (height u.x, angle 2 pi u.y, as
    Mitsuba), and its normal."""
    phi = 2.0 * math.pi * u.y
    x, y = ir.cos(phi), ir.sin(phi)
    return point(geo, s, x, y, u.x), normal_at(geo, s, x, y)


# -- material coordinates (moving shapes: integrators/material.py) -------------
def material_coords(local: Vec):
    """The object-space point ``local`` of the unit tube as (angle, height)."""
    return ir.atan2(local.y, local.x), local.z


def material_point(c1, c2) -> Vec:
    return Vec(ir.cos(c1), ir.sin(c1), c2)


def local_normal(local: Vec) -> Vec:
    return Vec(local.x, local.y, ir.Float(0.0))
