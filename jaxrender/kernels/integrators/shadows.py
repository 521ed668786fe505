"""The edges of hard shadows: where point, spot and directional lights stop
reaching a surface, for derivatives of moving geometry.

A delta light's shadow has a sharp edge on the surfaces behind an occluder:
the curve that the light's rays grazing the occluder's silhouette (seen
from the light) trace on them. When the geometry moves, that curve moves
over the surface's points, and the radiance they send jumps across it by
the light's direct term. The film's boundary term samples these curves
where the camera sees them (``boundary.py``), and every path vertex where
it sees them after a bounce (:func:`vertex_sample` / :func:`vertex_term`,
like ``material.edge_sample`` / ``edge_term`` for the scene's edges).

A sample: a welded edge that is a silhouette from one of the lights
(``shadow_edges`` rows, ``layout.SHADOW_*``, drawn by length from
``shadow_cdf``: ``primitives/boundary.shadow_edges``) and a point e on it;
the light's ray through e, just past it on the lit side, meets the
surface at y. For the moving geometry the curve's point is where the
moving light's ray through the moving e meets the plane of the moving
surface at y (:func:`moving_points`), against y's own material point.

Example (in a kernel for moving geometry)::

    edge = sample(ctx, ctx.rand(s, group))         # traced, no derivatives
    c, y = moving_points(ctx, edge.at)             # follow the geometry
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import layout
from ..geometry import occluded
from ..interaction import KnownHit, SurfaceInteraction, intersect, material_coords, shape_of, surface_point
from ..shapes import curve_point
from ..sampling import sample_lengths
from .material import BEHIND, _apart, _sweep, placed_vertex, point_along_edge

# Dimension group of the vertex samples (plus the vertex's depth).
GROUP = 4096


@dataclasses.dataclass
class CurveAt:
    """What places a shadow's curve point and the surface point y under
    it for the moving geometry."""
    tri: Any           # the occluder's edge: its triangle, the slots of its ends, where along it (an
    slot0: Any         # analytic shape's outline: tri -1, the shape's row, which curve, its angle / 2 pi)
    slot1: Any
    tau: Any
    directional: Any   # the light: whether directional, its position (a directional one's direction of travel)
    g: Vec
    prim: Any          # y's primitive and material coordinates
    c1: Any
    c2: Any
    instance: Any = None    # in scenes with shared instances: the edge's instance (-1: the scene's own
    y_instance: Any = None  # edge) and y's


@dataclasses.dataclass
class ShadowEdge:
    """A point on the edge of a hard shadow, traced (no derivatives)."""
    at: CurveAt
    e: Vec             # the edge's point and its derivative along the edge, as traced
    de: Vec
    light: Any         # the light's emitter row
    toward: Vec        # unit normal of the plane (edge, light's rays), towards the occluder
    offset: Any        # a length well above float error at the edge
    hit: SurfaceInteraction   # y: where the light's ray past the edge meets a surface (lit side)
    ok: Any            # the light reaches the edge and its ray meets a surface past it
    density: Any       # per unit of the edge's length: 1 / (the edge's share of the total length)


def sample(ctx, u) -> ShadowEdge:
    """Draw a shadow's edge point with the uniforms ``u`` ((record, along, ...))."""
    from ..emitters import TYPE_ID
    b = ctx.b
    plain = ctx.primal()
    i, tau, length, total = sample_lengths(b["shadow_cdf"], u[0])
    recs = b["shadow_edges"]
    tri, slot0, slot1, inner, tri_b, light = (ir.cast(recs.read(i, k), "i32") for k in (
        layout.SHADOW_TRI, layout.SHADOW_SLOT0, layout.SHADOW_SLOT1, layout.SHADOW_INNER, layout.SHADOW_TRI_B,
        layout.SHADOW_LIGHT))
    instance = ir.cast(recs.read(i, layout.SHADOW_INSTANCE), "i32") if ctx.structure.instanced else None
    v0, v1 = placed_vertex(plain, tri, slot0, instance), placed_vertex(plain, tri, slot1, instance)
    e, de, inside = v0 + (v1 - v0) * tau, v1 - v0, placed_vertex(plain, tri, inner, instance)
    g = Vec(*(b["emitter_geom"].read(light, k) for k in range(3)))
    directional = b["emitter_meta"].read(light, layout.META_TYPE) == TYPE_ID["directional"]
    if ctx.structure.analytic:
        # an analytic shape's outline seen from the light, and a point of the
        # surface it bounds (as material.edge_sample's)
        geo, shape, phi = plain.geo, ir.maximum(slot0, 0), tau * (2.0 * math.pi)
        q, dq = ir.jvp(lambda a: curve_point(geo, shape, slot1, _origin(geo, shape, directional, g), a), (phi,), (1.0,))
        rim = slot1 < 4
        tube = geo.to_world_point(shape, Vec(ir.select(rim, ir.cos(phi), 0.0), ir.select(rim, ir.sin(phi), 0.0),
                                             ir.select(rim, 0.5, tau)))
        inner_c = Vec(*(ir.select(geo.shape_kind(shape) == 2, a, c) for a, c in zip(tube, geo.center(shape))))
        e, de, inside = ir.select(tri < 0, (q, dq * (2.0 * math.pi), inner_c), (e, de, inside))
    w = ir.normalize(_travel(directional, g, e))
    m = ir.cross(de, w)
    m_len = ir.sqrt(ir.dot(m, m))
    m = m * (ir.copysign(1.0, ir.dot(m, inside - e)) / ir.select(m_len > 0.0, m_len, 1.0))
    offset = 1e-4 * (1.0 + ir.maximum(ir.maximum(ir.abs(e.x), ir.abs(e.y)), ir.abs(e.z)))
    lit_side = e - m * offset
    to_light = ir.select(directional, 1e30, ir.sqrt(ir.dot(e - g, e - g)) * (1.0 - 1e-3))

    def trace():
        lit = ~occluded(ctx.geo, lit_side, -w, ir.Float(0.0), to_light)
        hit = intersect(plain, lit_side, ir.normalize(w - m * BEHIND), ir.Float(0.0))
        own = (hit.prim == tri) | (hit.prim == tri_b)
        if instance is not None:
            own = own & (hit.instance == instance)
        if ctx.structure.analytic:
            own = ir.select(tri < 0, shape_of(plain, hit.prim) == slot0, own)
        return lit & hit.hit & ~own, hit

    none = intersect(plain, lit_side, w, ir.Float(0.0), ir.Float(0.0),
                     KnownHit(ir.Bool(True), ir.Float(0.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.Int(-1)))
    ok, hit = ir.cond((length > 0.0) & (total > 0.0) & (m_len > 0.0), trace, lambda: (ir.Bool(False), none))
    at = CurveAt(tri, slot0, slot1, tau, directional, g, hit.prim, *material_coords(plain, hit), instance,
                 None if instance is None else hit.instance)
    return ShadowEdge(at, e, de, light, m, offset, hit, ok, total / ir.select(length > 0.0, length, 1.0))


def _travel(directional, g: Vec, q: Vec) -> Vec:
    """The light's direction of travel at ``q`` (unnormalised)."""
    return Vec(*(ir.select(directional, a, c) for a, c in zip(g, q - g)))


def _origin(geo, shape, directional, g: Vec) -> Vec:
    """Where an analytic shape's outline is seen from: the light's
    position, or, for a directional light, a point far up its rays."""
    far = geo.center(shape) - g * 1e6
    return Vec(*(ir.select(directional, a, c) for a, c in zip(far, g)))


def _on_plane(at: CurveAt, e: Vec, y: Vec, n: Vec) -> Vec:
    """Where the light's ray through the edge point ``e`` meets the plane
    through ``y`` with normal ``n``."""
    d = _travel(at.directional, at.g, e)
    dn = ir.dot(n, d)
    return e + d * (ir.dot(n, y - e) / ir.select(dn != 0.0, dn, 1.0))


def traced_curve(edge: ShadowEdge, tau, off=0.0) -> Vec:
    """The curve's point at ``tau`` along the traced edge, on the plane of
    the surface at y (``off``: the edge point moved that far towards the
    occluder, so that its ray lands in the shadow)."""
    # (to first order in tau - edge.at.tau, all its derivatives are taken at)
    e = edge.e + edge.de * (tau - edge.at.tau) + edge.toward * off
    return _on_plane(edge.at, e, edge.hit.p, edge.hit.ng)


def moving_points(ctx, at: CurveAt) -> tuple[Vec, Vec]:
    """(the curve's point, y's material point), following the geometry:
    the moving edge point, the light's ray through it and the plane of
    the moving surface at y."""
    e = point_along_edge(ctx, at.tri, at.slot0, at.slot1, at.tau, at.instance)
    if ctx.structure.analytic:
        geo, shape = ctx.geo, ir.maximum(at.slot0, 0)
        on_edge = e
        e = ir.cond(at.tri < 0, lambda: curve_point(geo, shape, at.slot1, _origin(geo, shape, at.directional, at.g),
                                                    at.tau * (2.0 * math.pi)), lambda: on_edge)
    y, n, _ = surface_point(ctx, at.prim, at.c1, at.c2, at.y_instance)
    return _on_plane(at, e, y, n), y


def jump(ctx, edge: ShadowEdge, toward: Vec) -> Vec:
    """What the lit side of the curve has over the shadowed one at y, seen
    from direction ``toward`` (unit, from y): the light's direct term there."""
    from .. import emitters
    from ..bsdfs.surface import SurfaceBsdf
    plain = ctx.primal()
    S = ctx.spectrum
    si = dataclasses.replace(edge.hit, wi=edge.hit.frame.to_local(toward))
    es = emitters.sample_one(plain, edge.light, emitters.reference_point(edge.hit, -toward), (ir.Float(0.5),) * 3)
    f, _, _ = SurfaceBsdf(plain, si).query(si.frame.to_local(es.w), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    return S.apply(f, S.radiance(emitters.eval_sample(plain, es)))


@dataclasses.dataclass
class ShadowTerm:
    """A shadow's edge seen from a path vertex x (traced): where its curve
    and y lie, the unit normal of the curve in directions at x (towards the
    shadowed side), and the coefficient (f cos jump per unit normal
    velocity, over the sample's density)."""
    at: CurveAt
    normal: Vec
    coef: Vec
    valid: Any


def vertex_sample(ctx, si, u, valid) -> ShadowTerm:
    """A shadow's edge point (:func:`sample`, uniforms ``u``) seen from the
    vertex ``si`` where ``valid`` (the path goes on from there and its next
    vertex samples emitters): its y unoccluded from x, and the radiance
    jump there towards x times the BSDF at x towards it."""
    from ..bsdfs.surface import SurfaceBsdf
    plain = ctx.primal()
    # (traced values: this runs in transport, whose reads of moving buffers
    # carry derivatives in a forward kernel, and the jvp below needs none)
    edge = ir.detach(sample(ctx, u))
    x = ir.detach(Vec(*(ir.select(si.hit, a, c) for a, c in zip(si.p, si.o + si.d))))     # (a miss: finite, unused)
    to_y = edge.hit.p - x
    dist = ir.maximum(ir.sqrt(ir.dot(to_y, to_y)), 1e-30)
    w_y = to_y / dist
    ok = valid & si.hit & edge.ok
    ok = ok & ir.cond(ok, lambda: ~occluded(ctx.geo, si.spawn(w_y), w_y, ir.Float(0.0), dist * (1.0 - 1e-3)),
                      lambda: ir.Bool(False))
    f, _, _ = SurfaceBsdf(plain, si).query(si.frame.to_local(w_y), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    jmp = jump(ctx, edge, -w_y)

    def direction(q: Vec) -> Vec:
        return ir.normalize(q - x)

    w_c, dw = ir.jvp(lambda t: direction(traced_curve(edge, t)), (edge.at.tau,), (1.0,))
    dw_len = ir.sqrt(ir.dot(dw, dw))
    n = ir.cross(w_c, dw)
    n_len = ir.sqrt(ir.dot(n, n))
    shadowed = direction(traced_curve(edge, edge.at.tau, edge.offset * 10.0)) - w_c
    side = ir.dot(n, shadowed)
    n = n * (ir.copysign(1.0, side) / ir.select(n_len > 0.0, n_len, 1.0))
    ok = ok & (n_len > 0.0) & (side != 0.0)
    coef = Vec(*(ir.select(ok, c * dw_len * edge.density, 0.0) for c in ctx.spectrum.apply(f, jmp)))
    return ShadowTerm(edge.at, n, coef, ok)


def vertex_term(ctx, rec: ShadowTerm, x: Vec):
    """The boundary term of ``rec`` seen from the (moving) point ``x``: 0
    in value, its derivative the coefficient times the rate at which the
    curve sweeps over y's point (normal velocity in directions)."""
    c, y = moving_points(ctx, rec.at)
    w_c = ir.normalize(_apart(x, c, rec.valid) - x)
    w_y = ir.normalize(_apart(x, y, rec.valid) - x)
    return rec.coef * _sweep(ir.dot(w_c - w_y, rec.normal), rec.valid)
