"""Mitsuba's analytic ``disk``: the unit disk in the object's z = 0 plane,
its UVs (radius, angle) and uniform sampling by area for disk lights.

A disk is a ``shape_data`` row (``layout.SHAPE_*``); ``SHAPE_NORMAL`` is its
world normal, with ``flip_normals`` already folded into the transform.
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import square_to_uniform_disk_concentric

NAME = "disk"
INF = float("inf")


def normal(geo, s) -> Vec:
    return Vec(*(geo.shape_value(s, layout.SHAPE_NORMAL + k) for k in range(3)))


def intersect(geo, s, o: Vec, d: Vec, t_min):
    """t where the ray meets disk ``s`` (inf: none)."""
    lo = geo.to_object(s, o)
    ld = geo.to_object_dir(s, d)
    t = -lo.z / ld.z
    x = lo.x + ld.x * t
    y = lo.y + ld.y * t
    return ir.select(x * x + y * y <= 1.0, t, INF)


def surface(geo, s, o: Vec, d: Vec, t, uv: bool):
    """Point, geometric normal and Mitsuba's (u, v) (only when ``uv``)."""
    p = o + d * t
    ng = normal(geo, s)
    u = v = ir.Float(0.0)
    if uv:
        local = geo.to_object(s, p)
        u = ir.sqrt(local.x * local.x + local.y * local.y)
        v = ir.atan2(local.y, local.x) * (0.5 / math.pi)
        v = ir.select(v < 0.0, v + 1.0, v)
    return p, ng, u, v


def tangents(geo, s, p: Vec) -> tuple[Vec, Vec]:
    """Mitsuba's (dp_du, dp_dv) at point ``p``: the derivatives of the
    position in u = r and v = phi / 2pi (zero at the centre)."""
    local = geo.to_object(s, p)
    r2 = local.x * local.x + local.y * local.y
    inv_r = ir.select(r2 != 0.0, ir.rsqrt(ir.select(r2 != 0.0, r2, 1.0)), 0.0)
    cos_phi, sin_phi = local.x * inv_r, local.y * inv_r
    return (geo.to_world_dir(s, Vec(cos_phi, sin_phi, 0.0)),
            geo.to_world_dir(s, Vec(-sin_phi, cos_phi, 0.0) * (2.0 * math.pi * r2 * inv_r)))


def sample_position(geo, s, u: Vec) -> tuple[Vec, Vec]:
    """A point uniform on the disk's area, and its normal."""
    x = square_to_uniform_disk_concentric(u)
    return geo.to_world(s, x.x, x.y), normal(geo, s)


# -- material coordinates (moving shapes: integrators/material.py) -------------
def material_coords(local: Vec):
    """The object-space point ``local`` of the unit disk as two numbers (x, y)."""
    return local.x, local.y


def material_point(c1, c2) -> Vec:
    return Vec(c1, c2, ir.Float(0.0))


def local_normal(local: Vec) -> Vec:
    return Vec(ir.Float(0.0), ir.Float(0.0), ir.Float(1.0))
