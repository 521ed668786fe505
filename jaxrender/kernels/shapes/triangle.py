"""Triangles: the primitive of every mesh (Mitsuba's ``obj``, ``ply``,
``rectangle``, ``cube``).

A triangle is a row of ``tris`` (``layout.TRI_ROW``: its three world-space
vertices, in BVH leaf order). Hits report barycentrics (b1, b2) of the
second and third vertex; the shading normal interpolates ``tri_normals``
where the scene has vertex normals.
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import coordinate_system

INF = float("inf")


def vertices(tris, i) -> tuple[Vec, Vec, Vec]:
    c = [tris.read(i, k) for k in range(layout.TRI_ROW)]
    return Vec(c[0], c[1], c[2]), Vec(c[3], c[4], c[5]), Vec(c[6], c[7], c[8])


def intersect(o: Vec, d: Vec, p0: Vec, p1: Vec, p2: Vec):
    """Moller-Trumbore: (t, b1, b2); t = inf when the ray misses."""
    e1 = p1 - p0
    e2 = p2 - p0
    pv = ir.cross(d, e2)
    det = ir.dot(e1, pv)
    inv_det = 1.0 / det
    tv = o - p0
    u = ir.dot(tv, pv) * inv_det
    qv = ir.cross(tv, e1)
    v = ir.dot(d, qv) * inv_det
    t = ir.dot(e2, qv) * inv_det
    ok = (det != 0.0) & (u >= 0.0) & (v >= 0.0) & (u + v <= 1.0)
    return ir.select(ok, t, INF), u, v


def surface(tris, normals, tri, o: Vec, d: Vec, t, b1, b2):
    """Point, geometric normal, shading normal and (b1, b2) of a hit on
    triangle ``tri``. ``normals``: the ``tri_normals`` buffer, or None when
    the scene has no vertex normals (the shading normal is then ng)."""
    p0, p1, p2 = vertices(tris, tri)
    ng = ir.normalize(ir.cross(p1 - p0, p2 - p0))
    ns = ng if normals is None else shading_normal(normals, tri, b1, b2, ng)
    return o + d * t, ng, ns, b1, b2


def shading_normal(normals, tri, b1, b2, ng: Vec) -> Vec:
    """The vertex normals of triangle ``tri`` (its ``tri_normals`` row)
    interpolated at barycentrics (b1, b2) and normalised; ``ng`` where they
    sum to zero (a mesh without them stores zeros)."""
    w0 = 1.0 - b1 - b2
    n = Vec(*(normals.read(tri, k) * w0 + normals.read(tri, 3 + k) * b1 + normals.read(tri, 6 + k) * b2
              for k in range(3)))
    l2 = ir.dot(n, n)
    smooth = l2 > 0.0
    return ir.select(smooth, n * ir.rsqrt(ir.select(smooth, l2, 1.0)), ng)


def tangents(tris, uvs, tri, ng: Vec) -> tuple[Vec, Vec]:
    """Mitsuba's (dp_du, dp_dv) of triangle ``tri``: the position's
    derivatives in its texture coordinates (``uvs``: the ``tri_uv`` buffer;
    a mesh without them has the barycentric map, so dp_du = p1 - p0), or
    the coordinate system of ``ng`` where those coordinates are degenerate."""
    p0, p1, p2 = vertices(tris, tri)
    q = [uvs.read(tri, k) for k in range(6)]
    du0, dv0, du1, dv1 = q[2] - q[0], q[3] - q[1], q[4] - q[0], q[5] - q[1]
    dp0, dp1 = p1 - p0, p2 - p0
    det = du0 * dv1 - dv0 * du1
    ok = det != 0.0
    inv = 1.0 / ir.select(ok, det, 1.0)
    s, t = coordinate_system(ng)
    dp_du = (dp0 * dv1 - dp1 * dv0) * inv
    dp_dv = (dp1 * du0 - dp0 * du1) * inv
    return (Vec(*(ir.select(ok, a, b) for a, b in zip(dp_du, s))),
            Vec(*(ir.select(ok, a, b) for a, b in zip(dp_dv, t))))
