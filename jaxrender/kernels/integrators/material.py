"""Derivatives of moving meshes in *material form* (the ``direct``
integrator's geometry kernels; ``path.py`` calls these).

Every point of a path stays at its barycentric coordinates on its triangle
while the triangles move (reads of ``tris`` carry the derivatives), and
every quantity between consecutive points is recomputed from them: the
directions, the cosines and distances that turn a sampled solid angle into
the area it covers, the triangles' areas (the measure of barycentric
coordinates), the film position of the camera's point. The estimate's
samples stay fixed in those coordinates, so its derivative has no terms
from sampling. What this misses is where visibility moves, boundary terms:
on the film (``boundary.py``) and, at the camera's point, in the
directions it sees (:func:`edge_sample` / :func:`edge_term`): an edge of
the scene seen from there, with what lies behind it, sampled uniformly
among the welded edges (``edges``: ``primitives/boundary.edge_topology``).

Example (inside a kernel traced with ``ctx.geometry_motion``)::

    si = following(ctx, si)                        # p, ng, frame follow the triangle
    j = relative(area_jacobian(ctx, x_prev, si))   # 1, with the measure's derivative
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from ..geometry import occluded
from ..geometry import INF
from ..interaction import KnownHit, doubled_area, following, intersect, point_on_triangle
from ..shapes import triangle
from ..sensors import motion
from ..sensors.motion import relative

# Dimension group of the edge sample at the camera's point (beyond the path's).
EDGE_GROUP = 97
# Angle (radians) past an edge at which what lies behind it is traced.
BEHIND = 1e-4


def area_jacobian(x: Vec, y: Vec, ny: Vec, area_y):
    """Area covered per unit solid angle seen from ``x``, at point ``y``
    (normal ``ny``) of a triangle of doubled area ``area_y``, inverted:
    |cos_y| * area / d^2 (its relative change is what a fixed barycentric
    sample's weight gains)."""
    v = y - x
    d2 = ir.dot(v, v)
    return ir.abs(ir.dot(ny, v)) * ir.rsqrt(d2) * area_y / d2


@dataclasses.dataclass
class EdgeSample:
    """A point of an edge seen from the camera's point x, traced in
    transport (no derivatives): where it lies, what lies behind it, and
    the boundary term's coefficient (throughput-free radiance per unit of
    the normal velocity in directions at x)."""
    tri: object        # the edge: triangle and the slots of its two ends
    slot0: object
    slot1: object
    t: object          # where along the edge
    normal: Vec        # unit normal of the plane (x, edge), towards the occluding triangle
    behind: object     # what lies just past it: prim (-1: a miss), barycentrics, or the direction
    b1: object
    b2: object
    direction: Vec
    coef: Vec          # f cos L_behind / pdf, 0 where there is no term
    valid: object      # where there is one


def vertex_of(ctx, tri, slot):
    """Vertex ``slot`` (0..2, a runtime value) of triangle ``tri``, following it."""
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(tri, 0))
    return Vec(*(ir.select(slot == 0, a, ir.select(slot == 1, b, c)) for a, b, c in zip(p0, p1, p2)))


def edge_sample(ctx, si, u, valid, incident) -> EdgeSample:
    """Sample a point on one of the scene's edges uniformly (edge, then
    length) and, where it is a silhouette seen from ``si``'s point, the
    radiance arriving from behind it (``incident(o, d)``: a path traced
    from there). ``valid``: where the vertex continues (else no term)."""
    from ..bsdfs.surface import SurfaceBsdf
    b = ctx.b
    plain = ctx.primal()
    S = ctx.spectrum
    edges = b["edges"]
    n_edges = ir.cast(edges.len, "i32")
    e = ir.minimum(ir.cast(u[2] * ir.cast(n_edges, "f32"), "i32"), ir.maximum(n_edges - 1, 0))
    tri_a, s0, s1, s3 = (edges.read(e, k) for k in range(4))
    tri_b, s3b = edges.read(e, 4), edges.read(e, 5)
    v0, v1 = vertex_of(plain, tri_a, s0), vertex_of(plain, tri_a, s1)
    a3 = vertex_of(plain, tri_a, s3)
    b3 = vertex_of(plain, tri_b, s3b)
    x = Vec(*(ir.select(si.hit, a, c) for a, c in zip(si.p, si.o + si.d)))     # (a miss: finite, unused)
    m = ir.cross(v0 - x, v1 - x)
    m_len = ir.sqrt(ir.dot(m, m))
    sa, sb = ir.dot(m, a3 - x), ir.dot(m, b3 - x)
    silhouette = (n_edges > 0) & (sa != 0.0) & (m_len > 0.0) & ((tri_b < 0) | (sa * sb > 0.0))
    normal = m * (ir.copysign(1.0, sa) / ir.select(m_len > 0.0, m_len, 1.0))
    t = u[3]
    p = v0 + (v1 - v0) * t
    to_p = p - x
    dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
    w = to_p / dist
    edge = v1 - v0
    edge_len = ir.sqrt(ir.dot(edge, edge))
    # directions per unit length along the edge: its part across the view, over the distance
    across = edge - w * ir.dot(edge, w)
    per_length = ir.sqrt(ir.dot(across, across)) / ir.select(edge_len > 0.0, edge_len, 1.0) / dist
    # The rays start just off the surface: the edge's direction and the side
    # past it are taken from there (the offset turns the view of the edge
    # by more than the step past it).
    o = si.spawn(w)
    from_o = p - o
    dist_o = ir.maximum(ir.sqrt(ir.dot(from_o, from_o)), 1e-30)
    w_o = from_o / dist_o
    m_o = ir.cross(v0 - o, v1 - o)
    m_o = m_o * (ir.copysign(1.0, ir.dot(m_o, a3 - o)) / ir.maximum(ir.sqrt(ir.dot(m_o, m_o)), 1e-30))
    seen = valid & silhouette & ~occluded(ctx.geo, o, w_o, ir.Float(0.0), dist_o * (1.0 - 1e-3))
    d_behind = ir.normalize(w_o - m_o * BEHIND)
    hit = intersect(plain, o, d_behind, ir.Float(0.0))
    # what lies past the edge: not one of its own triangles, and not in front
    # of it (a surface the edge's mesh touches there, e.g. a floor under a box,
    # lies at its distance)
    own = (hit.prim == tri_a) | (hit.prim == tri_b)
    past = ~hit.hit | (~own & (hit.t * ir.dot(d_behind, w_o) > dist_o * (1.0 - 1e-3)))
    ok = seen & past
    # the radiance arriving from behind the edge, and the BSDF towards it
    le = ir.cond(ok, lambda: incident(o, d_behind), S.zero)
    f, _, _ = SurfaceBsdf(plain, si).query(si.frame.to_local(w), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    weight = ir.cast(n_edges, "f32") * edge_len * per_length
    coef = Vec(*(ir.select(ok, f[c] * le[c] * weight, 0.0) for c in range(S.channels)))
    return EdgeSample(tri_a, s0, s1, t, normal, hit.prim, hit.b1, hit.b2, d_behind, coef, ok)


def edge_term(ctx, rec: EdgeSample, x: Vec):
    """The boundary term of ``rec`` as seen from the (moving) point ``x``:
    0 in value, its derivative the coefficient times the rate at which the
    edge sweeps over what lies behind it (normal velocity in directions)."""
    def apart(a: Vec, ok) -> Vec:
        # where there is no term, a point away from x (a finite derivative, selected away)
        return Vec(*(ir.select(ok, c, e) for c, e in zip(a, ir.detach(x) + Vec(1.0, 0.0, 0.0))))

    p = vertex_of(ctx, rec.tri, rec.slot0) * (1.0 - rec.t) + vertex_of(ctx, rec.tri, rec.slot1) * rec.t
    w_edge = ir.normalize(apart(p, rec.valid) - x)
    behind = point_on_triangle(ctx, rec.behind, rec.b1, rec.b2)
    w_behind = ir.normalize(apart(behind, rec.valid & (rec.behind >= 0)) - x)
    w_behind = Vec(*(ir.select(rec.behind >= 0, a, ir.detach(c)) for a, c in zip(w_behind, rec.direction)))
    speed = ir.dot(w_edge - w_behind, rec.normal)
    delta = ir.select(rec.valid, speed - ir.detach(speed), 0.0)
    return rec.coef * delta



def followed_emitter_sample(ctx, fixed, si, es, es_u):
    """The emitter sample ``es`` taken at ``fixed`` (the hit as traced) seen
    from ``si`` (the same hit following its triangle): its direction from
    the moving point to the sampled point (which follows its light
    triangle, for a mesh emitter), and the relative change of the sample's
    weight, the area its solid angle covers (|cos| area / d^2; a point
    light's 1 / d^2)."""
    from ..emitters import TYPE_ID, area
    is_mesh = es.kind == TYPE_ID["area"]
    finite = es.dist < INF
    reference = fixed.p + fixed.ng * ir.copysign(fixed.scale, -ir.dot(fixed.ng, fixed.d))
    q_fixed = reference + es.w * ir.select(finite, es.dist, 0.0)
    lt, bc = area.mesh_point(ctx, ir.maximum(es.sel, 0), (es_u[3], es_u[0], es_u[1]))
    q_mesh = point_on_triangle(ctx, lt, bc.x, bc.y)
    q = Vec(*(ir.select(is_mesh, a, c) for a, c in zip(q_mesh, q_fixed)))
    v = q - si.p
    d2 = ir.maximum(ir.dot(v, v), 1e-30)
    w = v * ir.rsqrt(d2)
    follows = finite & fixed.hit
    w = Vec(*(ir.select(follows, a, c) for a, c in zip(w, es.w)))
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], lt)
    nl = ir.normalize(ir.cross(p1 - p0, p2 - p0))
    j = ir.select(is_mesh, ir.abs(ir.dot(nl, w)) * doubled_area(ctx, lt) / d2, ir.select(finite, 1.0 / d2, 1.0))
    return dataclasses.replace(es, w=w), relative(ir.select(follows, j, 1.0))


def pair_factor(ctx, si, fixed, prev, camera: Vec) -> Vec:
    """1, with the derivative of reaching ``si`` from the previous vertex
    (``prev``: its hit, the ray that found it and the hit before it): that
    vertex's BSDF (times cosine) towards this point and the area this
    point's solid angle covers there; a miss keeps its direction."""
    from ..bsdfs.surface import SurfaceBsdf
    prim, b1, b2, o, d, t, prim2, b1_2, b2_2 = prev
    before = intersect(ctx, o, d, ir.Float(0.0), INF, KnownHit(ir.Bool(True), t, prim, b1, b2, ir.Int(-1)))
    before = following(ctx, before)
    # the vertex before that one: the camera, or a hit following its triangle
    earlier = Vec(*(ir.select(prim2 < 0, a, c) for a, c in zip(camera, point_on_triangle(ctx, prim2, b1_2, b2_2))))
    before = dataclasses.replace(before, wi=before.frame.to_local(ir.normalize(earlier - before.p)))
    wo = ir.normalize(si.p - before.p)
    wo = Vec(*(ir.select(si.hit, a, c) for a, c in zip(wo, fixed.d)))
    f, _, _ = SurfaceBsdf(ctx, before).query(before.frame.to_local(wo), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    j = ir.select(si.hit, area_jacobian(before.p, si.p, si.ng, doubled_area(ctx, si.prim)), 1.0)
    r = relative(j)
    return Vec(*(relative(c) * r for c in f))
