"""Derivatives of moving geometry in *material form* (the path tracer's
and ``direct``'s geometry kernels; ``path.py`` calls these).

Every point of a path keeps its material coordinates while the surfaces
move: a triangle's barycentrics (reads of ``tris`` carry the
derivatives), an analytic shape's object-space point (reads of
``shape_data``: its to_world), ``interaction.surface_point``. Every
quantity between consecutive points is recomputed from them: the
directions, the cosines and distances that turn a sampled solid angle into
the area it covers, the measure of the coordinates (a triangle's area, a
shape's area per unit object area), the film position of the camera's
point. The estimate's samples stay fixed in those coordinates, so its
derivative has no terms from sampling. What this misses is where
visibility moves, boundary terms: on the film (``boundary.py``) and, at
each point of the path, in the directions it sees (:func:`edge_sample` /
:func:`edge_term`): an edge of the scene seen from there, with what lies
behind it, drawn among the welded triangle edges (``edges``:
``primitives/boundary.edge_topology``) and the analytic shapes' outlines
(a sphere's circle of tangency, a disk's rim): uniformly, then resampled
among a few such candidates by the angle each spans where it is a
silhouette.

Example (inside a kernel traced with ``ctx.geometry_motion``)::

    si, measure = followed(ctx, si)                # p, ng, frame follow the surface
    j = relative(area_jacobian(x_prev, si.p, si.ng, measure))
"""
from __future__ import annotations

import dataclasses

from ... import ir
from .. import layout
from ...ir import Vec
from ..geometry import occluded
from ..geometry import INF
from ..interaction import (KnownHit, following, instance_of, intersect, material_coords, on_analytic_shape,
                           point_on_surface, shape_of, surface_point)
from ..shapes import KIND, curve_point, triangle
from ..sensors import motion
from ..sensors.motion import relative
from ..sampling import sample_lengths

# Dimension group of the edge sample at the camera's point (beyond the path's).
EDGE_GROUP = 97
# Angle (radians) past an edge at which what lies behind it is traced.
BEHIND = 1e-4
# Candidates per edge sample of a path vertex, resampled by the angle they
# span where they are silhouettes (edge_sample), and their offsets: each a
# Kronecker (R3) step from the last in the sample's dimensions 0, 2 and 3.
EDGE_CANDIDATES = 8
# Share of a vertex's edge candidates drawn among the edges and outlines
# of the geometry that moves (the rest uniformly among all): in the
# usual inverse problem one object moves in a static scene, and an edge
# that neither moves nor has a moving surface behind it adds nothing.
MOVING_SHARE = 0.5
_CANDIDATE_STEP = (0.8191725133961645, 0.6710436067037893, 0.5497004779019703)
# The candidates also weigh what may lie behind them (_emission_guide): in
# scenes of up to GUIDE_EMITTERS emitters and no environment, whether the
# ray past the edge can meet an emitting surface (a mesh emitter of up to
# GUIDE_TRIANGLES triangles tested exactly, within GUIDE_SLACK radians; an
# analytic one by its bounding sphere). Where the path ends behind the edge
# that is the only radiance there; where it goes on, candidates with no
# emitter behind keep INDIRECT_SHARE of their importance.
GUIDE_EMITTERS = 8
GUIDE_TRIANGLES = 8
GUIDE_SLACK = 1e-3
INDIRECT_SHARE = 0.1


def area_jacobian(x: Vec, y: Vec, ny: Vec, area_y):
    """Area covered per unit solid angle seen from ``x``, at point ``y``
    (normal ``ny``) of a surface whose material coordinates have measure
    ``area_y``, inverted: |cos_y| * area / d^2 (its relative change is
    what a sample fixed in those coordinates gains in weight)."""
    v = y - x
    d2 = ir.dot(v, v)
    return ir.abs(ir.dot(ny, v)) * ir.rsqrt(d2) * area_y / d2


@dataclasses.dataclass
class EdgeSample:
    """A point of an edge seen from the camera's point x, traced in
    transport (no derivatives): where it lies, what lies behind it, and
    the boundary term's coefficient (throughput-free radiance per unit of
    the normal velocity in directions at x)."""
    tri: object        # a triangle edge: its triangle and the slots of its two ends
    slot0: object
    slot1: object
    t: object          # where along the edge (an outline's angle)
    shape: object      # an analytic shape's outline instead (-1: a triangle edge), which one (curve_point's)
    which: object
    normal: Vec        # unit normal of the plane (x, edge), towards the occluding surface
    behind: object     # what lies just past it: prim (-1: a miss), material coordinates, or the direction
    b1: object
    b2: object
    direction: Vec
    coef: Vec          # f cos L_behind / pdf, 0 where there is no term
    valid: object      # where there is one
    instance: object = None         # in scenes with shared instances: the edge's instance (-1: the scene's
    behind_instance: object = None  # own edge) and that of what lies past it


def vertex_of(ctx, tri, slot):
    """Vertex ``slot`` (0..2, a runtime value) of triangle ``tri``, following it."""
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(tri, 0))
    return Vec(*(ir.select(slot == 0, a, ir.select(slot == 1, b, c)) for a, b, c in zip(p0, p1, p2)))


def placed_vertex(ctx, tri, slot, instance=None):
    """:func:`vertex_of`, in world space: where ``instance`` >= 0 the
    triangle is a shared shapegroup's (group space), placed by that
    instance's to_world."""
    v = vertex_of(ctx, tri, slot)
    return v if instance is None else ctx.geo.instances.placed(instance, v)


def point_along_edge(ctx, tri, slot0, slot1, t, instance=None):
    """The point at ``t`` (0..1) from vertex ``slot0`` to ``slot1`` of
    triangle ``tri`` (placed by ``instance``: :func:`placed_vertex`),
    following it."""
    return placed_vertex(ctx, tri, slot0, instance) * (1.0 - t) + placed_vertex(ctx, tri, slot1, instance) * t


def _facing(origin: Vec, p: Vec, tangent: Vec, inner: Vec):
    """The unit normal of the plane through ``origin``, the edge point
    ``p`` and the edge's direction ``tangent``, on the side of ``inner``
    (a point of the occluding surface), and whether it is defined: not
    where ``inner`` lies in that plane (within float error: an edge of the
    origin's own plane lies on its horizon, a smooth-shaded point's
    :func:`horizon_sample`, where flat shading has no term)."""
    m = ir.cross(p - origin, tangent)
    m_len = ir.sqrt(ir.dot(m, m))
    to_inner = inner - origin
    side = ir.dot(m, to_inner)
    off_plane = ir.abs(side) > 1e-5 * m_len * ir.sqrt(ir.dot(to_inner, to_inner))
    return m * (ir.copysign(1.0, side) / ir.select(m_len > 0.0, m_len, 1.0)), (m_len > 0.0) & off_plane


def _outline(geo, shape, which, origin: Vec, phi):
    """The point at ``phi`` of analytic ``shape``'s outline seen from
    ``origin`` and its derivative in phi."""
    return ir.jvp(lambda a: curve_point(geo, shape, which, origin, a), (phi,), (1.0,))


@dataclasses.dataclass
class EdgePoint:
    """A point sampled on one of the scene's edges (traced, no
    derivatives), and whether it is a silhouette seen from a point x."""
    tri: object        # a triangle edge: its triangle, the slots of its two ends, the other triangle
    slot0: object
    slot1: object
    tri_b: object
    t: object          # the sample along it (an outline's angle)
    shape: object      # an analytic shape's outline instead (-1: a triangle edge), which one (curve_point's)
    which: object
    p: Vec
    tangent: Vec       # dp per unit of the sample along it
    inner: Vec         # a point of the surface it bounds
    normal: Vec        # unit normal of the plane (x, edge), towards ``inner``
    silhouette: object
    weight: object     # 1 / the sample's density per unit along it (the edges' count, a cylinder's 4 curves)
    instance: object = None  # where the buffer ``instance_edges`` is an input: the instance (row of
                             # ``instances``) whose copy of a shared shapegroup's edge this is, -1: none


def edge_point(ctx, x: Vec, u, x_shape, cdf=None, passes=None, x_prim=None) -> EdgePoint:
    """A point uniform on one of the scene's edges (an edge picked by
    ``u[2]``: a welded triangle edge, uniform along it, or an analytic
    shape's outline: a sphere's circle of tangency from ``x`` or a disk's
    rim by angle, a cylinder's rims by angle and silhouette lines by
    height) and whether it is a silhouette seen from ``x`` (which lies on
    analytic shape ``x_shape``, -1: none). The edge is picked uniformly,
    or by the cumulative weights ``cdf`` (a buffer over the edges, then
    the shapes: ``sampling.sample_lengths``; an edge of weight 0 is
    never one), and then where along it by ``u[3]``, or by ``cdf`` by
    where ``u[2]`` fell within its weight. ``passes(prim)``: whether the rays from ``x`` pass
    through a triangle (a second triangle that does leaves a boundary
    edge). Where the kernel has the input ``instance_edges`` (the welded
    edges of shared shapegroups, one copy per instance, and its instance:
    ``primitives/boundary.instance_edge_rows``), those are items too,
    after the scene's own edges and before the shapes: the group-space
    edge placed by its instance's to_world. Where the kernel has the
    input ``moving_edges`` (and ``cdf`` is None), a point ``x`` on a
    static leaf primitive ``x_prim`` (-1: none) favours the items that
    move (:func:`_favouring_motion`)."""
    b = ctx.b
    plain = ctx.primal()
    analytic = ctx.structure.analytic
    edges = b["edges"]
    n_edges = ir.cast(edges.len, "i32")
    copies = b["instance_edges"] if "instance_edges" in b else None
    n_lines = n_edges + (ir.cast(copies.len, "i32") if copies is not None else 0)
    n_items = n_lines + (ir.cast(b["shape_data"].len, "i32") if analytic else 0)
    if cdf is None and "moving_edges" in b:
        moves = ir.Bool(False) if x_prim is None else (x_prim >= 0) & (b["leaf_moves"][ir.maximum(x_prim, 0)] > 0)
        pick, items = _favouring_motion(b, u[2], n_items, ~moves)
        picked = n_items > 0
    elif cdf is None:
        pick = ir.minimum(ir.cast(u[2] * ir.cast(n_items, "f32"), "i32"), ir.maximum(n_items - 1, 0))
        items, picked = ir.cast(n_items, "f32"), n_items > 0
    else:
        pick, fraction, weight, total = sample_lengths(cdf, u[2])
        pick = ir.minimum(pick, ir.maximum(n_items - 1, 0))
        picked = (weight > 0.0) & (n_items > 0)
        items = ir.select(picked, total / ir.select(weight > 0.0, weight, 1.0), 0.0)
    e = ir.minimum(pick, ir.maximum(n_edges - 1, 0))
    row = tuple(edges.read(e, k) for k in range(6))
    instance = None
    if copies is not None:
        # (a copy's row only for a pick among them: the buffer may be empty)
        row = ir.cond((pick >= n_edges) & (pick < n_lines),
                      lambda: tuple(copies.read(pick - n_edges, k) for k in range(7)), lambda: (*row, ir.Int(-1)))
        row, instance = row[:6], row[6]
    tri_a, s0, s1, s3, tri_b, s3b = row
    # a triangle edge, at t along it: a silhouette where both its triangles
    # lie on one side of the plane through x and the edge
    v0, v1, a3, b3 = (placed_vertex(plain, tri, slot, instance)
                      for tri, slot in ((tri_a, s0), (tri_a, s1), (tri_a, s3), (tri_b, s3b)))
    # (by cdf: where u[2] fell within the picked item's weight, so that
    # strata of u[2] are strata along the items, one after the other)
    t = u[3] if cdf is None else fraction
    p = v0 + (v1 - v0) * t
    tangent, inner = v1 - v0, a3
    m = ir.cross(v0 - x, v1 - x)
    sa, sb = ir.dot(m, a3 - x), ir.dot(m, b3 - x)
    alone = tri_b < 0
    if passes is not None:
        alone = alone | ir.cond(alone, lambda: ir.Bool(False), lambda: passes(tri_b))
    silhouette = (pick < n_lines) & (alone | (sa * sb > 0.0))
    shape = which = ir.Int(-1)
    share = ir.Float(1.0)
    if analytic:
        # an analytic shape's outline, at an angle: a sphere's circle of
        # tangency from x (a silhouette from outside it), a disk's rim, one
        # of a cylinder's two rims and two silhouette lines (picked by u[0];
        # a line's height is the angle / 2 pi)
        geo = plain.geo
        shape = ir.select(pick >= n_lines, pick - n_lines, -1)
        s = ir.maximum(shape, 0)
        kind = geo.shape_kind(s)
        part = ir.minimum(ir.cast(u[0] * 4.0, "i32"), 3)
        which = ir.select(kind == 0, 0, ir.select(kind == 1, 1, 2 + part))
        share = ir.select((shape >= 0) & (kind == 2), 4.0, 1.0)     # (a triangle edge: 1, whatever shape 0 is)
        angle = t * (2.0 * 3.141592653589793)
        q, dq = _outline(geo, s, which, x, angle)
        centre = geo.center(s)
        r = geo.shape_value(s, layout.SHAPE_RADIUS)
        outside = ir.dot(centre - x, centre - x) > r * r
        tubes = KIND["cylinder"] in geo.kinds
        if tubes:
            local = geo.to_object(s, x)
            outside = ir.select(which == 0, outside, (which < 4) | (local.x * local.x + local.y * local.y > 1.0))
        elif KIND["disk"] in geo.kinds:
            outside = outside | (which != 0)
        # (a point of a sphere, a disk or a tube's outside sees none of its
        # own outline; one inside a tube sees its rims)
        own = (x_shape == shape) & ((which < 2) | (which >= 4))
        silhouette = silhouette | ((shape >= 0) & outside & ~own)
        curve = shape >= 0
        # a point of the surface the outline bounds: the centre of a sphere
        # or disk, along a tube's side from a rim, its axis beside a line
        if tubes:
            tube = geo.to_world_point(s, Vec(ir.select(which < 4, ir.cos(angle), 0.0),
                                             ir.select(which < 4, ir.sin(angle), 0.0),
                                             ir.select(which < 4, 0.5, angle * (0.5 / 3.141592653589793))))
            centre = Vec(*(ir.select(kind == 2, a, b) for a, b in zip(tube, centre)))
        p = Vec(*(ir.select(curve, a, c) for a, c in zip(q, p)))
        tangent = Vec(*(ir.select(curve, a * (2.0 * 3.141592653589793), c) for a, c in zip(dq, tangent)))
        inner = Vec(*(ir.select(curve, a, c) for a, c in zip(centre, inner)))
        # (a triangle edge keeps its fraction along it: edge_term and the
        # thin lens's boundary rebuild the point from it)
        t = ir.select(curve, angle, t)
    normal, defined = _facing(x, p, tangent, inner)
    silhouette = silhouette & defined & picked
    return EdgePoint(tri_a, s0, s1, tri_b, t, shape, which, p, tangent, inner, normal, silhouette, items * share,
                     instance)


def _favouring_motion(b, u, n_items, favour):
    """(an item, 1 / its probability) drawn with the uniform ``u``: where
    ``favour``, with probability MOVING_SHARE uniformly among the items
    that move (``moving_edges``, never empty: where none moves, one item
    whose ``edge_moves`` is 0), else uniformly among all ``n_items``.
    (From a point that moves every edge's view of it moves: uniform.)"""
    moving = b["moving_edges"]
    n_moving = ir.cast(moving.len, "i32")
    share = ir.select(favour & (b["edge_moves"][moving[0]] > 0), MOVING_SHARE, 0.0)
    among = u < share
    v = ir.select(among, u / ir.select(share > 0.0, share, 1.0), (u - share) / (1.0 - share))
    any_item = ir.minimum(ir.cast(v * ir.cast(n_items, "f32"), "i32"), ir.maximum(n_items - 1, 0))
    k = ir.minimum(ir.cast(v * ir.cast(n_moving, "f32"), "i32"), ir.maximum(n_moving - 1, 0))
    pick = ir.select(among, moving[k], any_item)
    moves = ir.cast(b["edge_moves"][ir.minimum(pick, ir.maximum(n_items - 1, 0))], "f32")
    pdf = (1.0 - share) / ir.cast(ir.maximum(n_items, 1), "f32") \
        + share * moves / ir.cast(ir.maximum(n_moving, 1), "f32")
    return pick, ir.select(pdf > 0.0, 1.0 / ir.select(pdf > 0.0, pdf, 1.0), 0.0)


def _angle_rate(x: Vec, p: Vec, tangent: Vec):
    """(the unit direction from ``x`` to edge point ``p``, the angle that
    direction turns per unit of the sample along the edge: the tangent's
    part across the view over the distance)."""
    to_p = p - x
    dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
    w = to_p / dist
    across = tangent - w * ir.dot(tangent, w)
    return w, ir.sqrt(ir.dot(across, across)) / dist


def _cone_test(x: Vec, rho, centre: Vec, radius):
    """Whether a ray along ``w`` from within ``rho`` of ``x`` may meet the
    ball (``centre``, ``radius``), give or take GUIDE_SLACK radians: a
    function of ``w`` (what depends on ``x`` alone computed once)."""
    v = centre - x
    dist = ir.sqrt(ir.dot(v, v))
    r = radius * (1.0 + GUIDE_SLACK) + 4.0 * rho
    sin_max = ir.minimum(r / ir.maximum(dist, 1e-30), 1.0)
    cos_max = ir.sqrt(ir.maximum(1.0 - sin_max * sin_max, 0.0))
    inside = dist <= r
    # (cos(a + s) >= cos a - s sin a - s^2: the cone widened by the slack)
    bound = dist * (cos_max - GUIDE_SLACK * sin_max - GUIDE_SLACK * GUIDE_SLACK)
    return lambda w: inside | (ir.dot(v, w) >= bound)


def _triangle_test(x: Vec, rho, v0: Vec, v1: Vec, v2: Vec):
    """Whether a ray along ``w`` from within ``rho`` of ``x`` may meet the
    triangle (v0, v1, v2): ``w`` within the three planes through ``x`` and
    its edges, each widened by GUIDE_SLACK radians and by the angle ``rho``
    spans at the triangle's plane (a point near that plane: yes). A
    function of ``w``: the planes are computed once for all candidates."""
    a, b, c = v0 - x, v1 - x, v2 - x
    n_tri = ir.cross(v1 - v0, v2 - v0)
    volume = ir.dot(a, ir.cross(b, c))
    plane = ir.abs(volume) * ir.rsqrt(ir.maximum(ir.dot(n_tri, n_tri), 1e-30))
    near = plane <= 8.0 * rho
    slack = GUIDE_SLACK + 4.0 * rho / ir.maximum(plane, 1e-30)
    sign = ir.copysign(1.0, volume)
    planes = [(m, -slack * ir.sqrt(ir.dot(m, m))) for m in (ir.cross(p, q) for p, q in ((a, b), (b, c), (c, a)))]

    def seen(w: Vec):
        within = ir.Bool(True)
        for m, bound in planes:
            within = within & (sign * ir.dot(m, w) >= bound)
        return near | within
    return seen


def _emitters_along(ctx, x: Vec, ws: list, rho, count) -> tuple:
    """For each direction of ``ws``: whether the ray along it from within
    ``rho`` of ``x`` may meet an emitting surface of the first ``count``
    emitters, occlusion aside (conservative: a large mesh emitter, an
    environment or a type not known here, always). Each emitter's tests
    are set up once for all the directions (the edge candidates of a
    vertex)."""
    from .. import emitters
    from ..emitters import TYPE_ID
    from ..shapes import cylinder
    b, geo = ctx.b, ctx.geo
    meta = b["emitter_meta"]
    used = {t.name for t in emitters.TYPES if t.used(ctx.structure)}
    none = tuple(ir.Bool(False) for _ in ws)

    def one(e, seen):
        kind = meta.read(e, layout.META_TYPE)
        known = ir.Bool(False)
        hit = none
        for name in ("point", "spot", "directional"):     # (nothing a ray meets)
            known = known | (kind == TYPE_ID[name])
        if "area" in used:
            first, n_tris = meta.read(e, layout.META_FIRST), meta.read(e, layout.META_COUNT)
            mesh = kind == TYPE_ID["area"]

            def triangles():
                def tri(j, acc):
                    test = _triangle_test(x, rho, *geo.triangle(b["light_tris"][first + j]))
                    return tuple(a | test(w) for a, w in zip(acc, ws))
                inside = ir.fori_loop(0, ir.minimum(n_tris, GUIDE_TRIANGLES), tri, none)
                return tuple(ir.select(n_tris > GUIDE_TRIANGLES, ir.Bool(True), a) for a in inside)
            known = known | mesh
            unseen = ~seen[0]
            for f in seen[1:]:
                unseen = unseen | ~f
            found = ir.cond(mesh & unseen, triangles, lambda: none)
            hit = tuple(h | (mesh & f) for h, f in zip(hit, found))
        for name, shape in (("area_sphere", "sphere"), ("area_disk", "disk"), ("area_cylinder", "cylinder")):
            if name not in used:
                continue
            mine = kind == TYPE_ID[name]
            s = ir.maximum(meta.read(e, layout.META_FIRST), 0)
            axes = [Vec(*(geo.shape_value(s, layout.SHAPE_TO_WORLD + 4 * i + k) for i in range(3))) for k in range(3)]
            spread = ir.sqrt(ir.dot(axes[0], axes[0]) + ir.dot(axes[1], axes[1]))
            if shape == "sphere":
                centre, radius = geo.center(s), geo.shape_value(s, layout.SHAPE_RADIUS)
            elif shape == "disk":
                centre, radius = geo.center(s), spread
            else:   # (object space: the unit disk times z in [0, 1])
                centre = cylinder.point(geo, s, ir.Float(0.0), ir.Float(0.0), ir.Float(0.5))
                radius = spread + 0.5 * ir.sqrt(ir.dot(axes[2], axes[2]))
            known = known | mine
            test = _cone_test(x, rho, centre, radius)
            hit = tuple(h | (mine & test(w)) for h, w in zip(hit, ws))
        return tuple(f | h | ~known for f, h in zip(seen, hit))
    return ir.fori_loop(0, count, one, none)


def _emission_guide(ctx, x: Vec, rho, emission_only):
    """The factors ``g(ws)`` by which edge candidates seen from ``x``
    along the directions ``ws`` are favoured: 1 where an emitting surface
    may lie behind one (or in scenes with an environment or many emitters,
    everywhere), else 0 where the path ends behind the edge
    (``emission_only``: what lies there counts only if it emits) and
    INDIRECT_SHARE where it goes on."""
    n = ctx.n_emitters
    unguided = (ctx.b["env_emitter"].value >= 0) | (n > GUIDE_EMITTERS)
    rest = ir.select(unguided, 1.0, ir.select(emission_only, 0.0, INDIRECT_SHARE))
    count = ir.select(unguided, 0, n)

    def guide(ws: list) -> list:
        return [ir.select(seen, 1.0, rest) for seen in _emitters_along(ctx, x, ws, rho, count)]
    return guide


def _resampled_edge_point(ctx, x: Vec, u, x_shape, guide, x_prim):
    """An edge point for the vertex at ``x`` by resampled importance
    sampling, and what its BSDF times radiance is weighted by: of
    :data:`EDGE_CANDIDATES` points drawn as :func:`edge_point` draws one
    (``u`` rotated by steps of ``_CANDIDATE_STEP``), one picked with
    probability proportional to the angle it spans per unit along its
    edge where it is a silhouette seen from ``x``, 0 elsewhere, times
    ``guide`` of its direction (``_emission_guide``; ``u[1]`` picks,
    streaming). Only silhouettes contribute, and the guide is 0 only where
    nothing emitting lies behind a candidate whose path ends there, so the
    estimate stays unbiased; most of a large mesh's edges are none from a
    given point, and a uniform pick among them found one rarely. The
    candidates are drawn first (their directions and importance kept), then
    guided together: the emitters' tests depend on ``x`` more than on a
    direction."""
    def candidate(i):
        steps = ir.cast(i, "f32")

        def rotated(v, step):
            v = v + steps * step
            return v - ir.floor(v)
        return (rotated(u[0], _CANDIDATE_STEP[0]), u[1], rotated(u[2], _CANDIDATE_STEP[1]),
                rotated(u[3], _CANDIDATE_STEP[2]))

    def draw(i, slots):
        ep = edge_point(ctx, x, candidate(i), x_shape, x_prim=x_prim)
        w, rate = _angle_rate(x, ep.p, ep.tangent)
        drawn = (*w, ir.select(ep.silhouette, rate * ep.weight, 0.0))
        return tuple(tuple(ir.select(i == k, a, c) for a, c in zip(drawn, slot)) for k, slot in enumerate(slots))

    zero = ir.Float(0.0)
    slots = ir.fori_loop(0, EDGE_CANDIDATES, draw, tuple((zero, zero, zero, zero) for _ in range(EDGE_CANDIDATES)))
    factors = guide([Vec(*slot[:3]) for slot in slots])
    total, picked, g, xi = ir.Float(0.0), ir.Int(0), ir.Float(0.0), u[1]
    for k, (slot, factor) in enumerate(zip(slots, factors)):
        weight = slot[3] * factor
        total = total + weight
        share = ir.select(total > 0.0, weight / ir.select(total > 0.0, total, 1.0), 0.0)
        take = xi < share
        # (the one uniform, rescaled to what is left of its interval)
        xi = ir.select(take, xi / ir.select(share > 0.0, share, 1.0),
                       (xi - share) / ir.select(share < 1.0, 1.0 - share, 1.0))
        picked, g, xi = ir.select(take, ir.Int(k), picked), ir.select(take, factor, g), ir.minimum(xi, 0.99999994)
    # (the picked point's contribution per unit along its edge, the BSDF
    # times the radiance times its rate, over its importance, the rate times
    # its guide, times the candidates' mean importance over density)
    weight = ir.select(g > 0.0, total * (1.0 / EDGE_CANDIDATES) / ir.select(g > 0.0, g, 1.0), 0.0)
    return edge_point(ctx, x, candidate(picked), x_shape, x_prim=x_prim), weight


def edge_sample(ctx, si, u, valid, incident, emission_only) -> EdgeSample:
    """Sample a point on one of the scene's edges (resampled among
    candidates, :func:`_resampled_edge_point`) and, where it is a silhouette seen from ``si``'s
    point, the radiance arriving from behind it (``incident(o, d, known)``: a
    path traced from there, whose first hit is ``known``). ``valid``: where the vertex continues (else
    no term); ``emission_only``: where that path ends at its first hit
    (then only an emitter there counts)."""
    from ..bsdfs.surface import SurfaceBsdf
    plain = ctx.primal()
    S = ctx.spectrum
    analytic = ctx.structure.analytic
    x = Vec(*(ir.select(si.hit, a, c) for a, c in zip(si.p, si.o + si.d)))     # (a miss: finite, unused)
    x_shape = ir.select(si.hit, shape_of(plain, si.prim), -1)
    def resampled():
        return _resampled_edge_point(ctx, x, u, x_shape, _emission_guide(plain, x, si.scale, emission_only),
                                     ir.select(si.hit, si.prim, -1))
    # (a vertex where the path ends, e.g. every path's last, has no term:
    # its candidates are not drawn)
    ep, weight = ir.cond(valid, resampled, lambda: (_no_edge_point(ctx), ir.Float(0.0)))
    tri_a, s0, s1, tri_b, t = ep.tri, ep.slot0, ep.slot1, ep.tri_b, ep.t
    shape, which, p, tangent, inner = ep.shape, ep.which, ep.p, ep.tangent, ep.inner
    normal, silhouette = ep.normal, ep.silhouette
    s = ir.maximum(shape, 0)
    w, _ = _angle_rate(x, p, tangent)
    # The rays start just off the surface: the edge's direction and the side
    # past it are taken from there (the offset turns the view of the edge
    # by more than the step past it); a sphere's outline is the one seen from there.
    o = si.spawn(w)
    p_o = p
    if analytic:
        q_o = curve_point(plain.geo, s, which, o, t)
        p_o = Vec(*(ir.select(shape >= 0, a, c) for a, c in zip(q_o, p)))
    from_o = p_o - o
    dist_o = ir.maximum(ir.sqrt(ir.dot(from_o, from_o)), 1e-30)
    w_o = from_o / dist_o
    m_o, _ = _facing(o, p_o, tangent, inner)
    d_behind = ir.normalize(w_o - m_o * BEHIND)

    def trace():
        """Whether the edge is seen, and what lies past it: not its own
        surface, and not in front of it (a surface the edge's mesh touches
        there, e.g. a floor under a box, lies at its distance)."""
        seen = ~occluded(ctx.geo, o, w_o, ir.Float(0.0), dist_o * (1.0 - 1e-3))
        hit = intersect(plain, o, d_behind, ir.Float(0.0))
        along = hit.t * ir.dot(d_behind, w_o)
        own = ir.select(shape >= 0, shape_of(plain, hit.prim) == shape, (hit.prim == tri_a) | (hit.prim == tri_b))
        if ep.instance is not None:
            own = own & (hit.instance == ep.instance)
        # (its own surface only where the ray grazes it at the edge: beyond,
        # e.g. a tube's inside past its rim, it is what lies behind)
        past = ~hit.hit | ((along > dist_o * (1.0 - 1e-3)) & ~(own & (along < dist_o * (1.0 + 1e-2))))
        return (seen & past, hit.prim, *material_coords(plain, hit), instance_of(hit), *_known(hit))

    # (the rays only for a silhouette: most sampled edges are none)
    ok, behind, c1, c2, behind_instance, *known = ir.cond(
        valid & silhouette, trace,
        lambda: (ir.Bool(False), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.Int(-1), *_known(None)))
    # the radiance arriving from behind the edge (its first hit is the one
    # just traced), and the BSDF towards it
    le = ir.cond(ok, lambda: incident(o, d_behind, KnownHit(*known)), S.no_radiance)
    f, _, _ = SurfaceBsdf(plain, si).query(si.frame.to_local(w), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    coef = Vec(*(ir.select(ok, c * weight, 0.0) for c in S.apply(f, le)))    # (polarized: a Stokes vector)
    return EdgeSample(tri_a, s0, s1, t, shape, which, normal, behind, c1, c2, d_behind, coef, ok, ep.instance,
                      None if ep.instance is None else behind_instance)


def _no_edge_point(ctx) -> EdgePoint:
    """An :class:`EdgePoint` that is no silhouette (as drawn where there is no term)."""
    none, zero = ir.Int(-1), ir.Float(0.0)
    origin = Vec(zero, zero, zero)
    instance = none if "instance_edges" in ctx.b else None
    return EdgePoint(none, ir.Int(0), ir.Int(0), none, zero, none, none, origin, origin, origin, origin,
                     ir.Bool(False), zero, instance)


def _known(hit):
    """The fields of a :class:`KnownHit` of ``hit`` (a ray's first hit from
    t = 0, for the path traced along that ray), or of none where None."""
    if hit is None:
        return (ir.Bool(False), ir.Float(0.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.Int(-1))
    return (ir.Bool(True), hit.t, hit.prim, hit.b1, hit.b2, instance_of(hit))


def _apart(x: Vec, a: Vec, ok) -> Vec:
    """``a`` where ``ok``, else a point away from ``x``: a finite
    derivative of the direction towards it, selected away."""
    return Vec(*(ir.select(ok, c, e) for c, e in zip(a, ir.detach(x) + Vec(1.0, 0.0, 0.0))))


def _seen_direction(ctx, x: Vec, prim, c1, c2, traced: Vec, valid, instance=None) -> Vec:
    """The direction from the (moving) point ``x`` to what a boundary
    sample saw past its edge: a surface point following its surface at
    material coordinates (c1, c2) (seen through ``instance``), or, where
    the ray missed (prim -1), the ``traced`` direction."""
    seen = point_on_surface(ctx, prim, c1, c2, instance)
    w = ir.normalize(_apart(x, seen, valid & (prim >= 0)) - x)
    return Vec(*(ir.select(prim >= 0, a, ir.detach(c)) for a, c in zip(w, traced)))


def _sweep(speed, valid):
    """0 in value, ``speed``'s derivative where ``valid``."""
    return ir.select(valid, speed - ir.detach(speed), 0.0)


def edge_term(ctx, rec: EdgeSample, x: Vec):
    """The boundary term of ``rec`` as seen from the (moving) point ``x``:
    0 in value, its derivative the coefficient times the rate at which the
    edge sweeps over what lies behind it (normal velocity in directions)."""
    p = point_along_edge(ctx, rec.tri, rec.slot0, rec.slot1, rec.t, rec.instance)
    if ctx.structure.analytic:
        on_edge = p
        p = ir.cond(rec.valid & (rec.shape >= 0),
                    lambda: curve_point(ctx.geo, ir.maximum(rec.shape, 0), rec.which, x, rec.t), lambda: on_edge)
    w_edge = ir.normalize(_apart(x, p, rec.valid) - x)
    w_behind = _seen_direction(ctx, x, rec.behind, rec.b1, rec.b2, rec.direction, rec.valid, rec.behind_instance)
    return rec.coef * _sweep(ir.dot(w_edge - w_behind, rec.normal), rec.valid)


@dataclasses.dataclass
class HorizonSample:
    """A direction on the geometric horizon of a smooth-shaded triangle's
    point (traced, no derivatives): the shading normal leaves the BSDF
    nonzero there, and the rays just above and just below the triangle's
    plane leave from its two sides (below a closed mesh, into it), so the
    radiance jumps where that plane turns. What lies on each side, and the
    boundary term's coefficients."""
    direction: Vec     # on the plane, traced
    normal: Vec        # the plane's normal towards the side below, traced
    sides: tuple       # per side (above, below): prim (-1: a miss), material coordinates, the direction, coef,
                       # the instance of the hit (None in scenes without shared instances)
    valid: object


def horizon_sample(ctx, si, u, valid, incident) -> HorizonSample:
    """A direction uniform on the horizon of ``si``'s triangle and, where
    the BSDF (shading frame) reflects towards it, the radiance arriving
    from just above and just below it (``incident(o, d, known)``). Only
    triangles whose shading normal leans off the geometric one (smooth
    shading, normal and bump maps) have a term (elsewhere the BSDF's cosine
    vanishes there)."""
    from ..bsdfs.surface import SurfaceBsdf
    from ..sampling import Frame
    plain = ctx.primal()
    S = ctx.spectrum
    phi = u * (2.0 * 3.141592653589793)
    w = Frame(si.ng).to_world(Vec(ir.cos(phi), ir.sin(phi), ir.Float(0.0)))
    f, _, _ = SurfaceBsdf(plain, si).query(si.frame.to_local(w), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    smooth = valid & si.hit & (shape_of(plain, si.prim) < 0) & (S.max(f) > 0.0)
    sides = []
    for sign in (1.0, -1.0):
        d = ir.normalize(w + si.ng * (sign * BEHIND))
        o = si.spawn(d)

        def trace(o=o, d=d):
            hit = intersect(plain, o, d, ir.Float(0.0))
            return (hit.prim, *material_coords(plain, hit), instance_of(hit), incident(o, d, KnownHit(*_known(hit))))
        prim, c1, c2, inst, le = ir.cond(smooth, trace, lambda: (ir.Int(-1), ir.Float(0.0), ir.Float(0.0),
                                                                 ir.Int(-1), S.no_radiance()))
        coef = Vec(*(ir.select(smooth, c * (2.0 * 3.141592653589793), 0.0) for c in S.apply(f, le)))
        sides.append((prim, c1, c2, d, coef, inst if ctx.structure.instanced else None))
    return HorizonSample(w, -si.ng, tuple(sides), smooth)


def horizon_term(ctx, rec: HorizonSample, x: Vec, ng: Vec):
    """The boundary term of ``rec`` seen from the (moving) point ``x`` of
    normal ``ng``: 0 in value, its derivative each side's coefficient
    times the rate at which the horizon sweeps over what lies there (the
    side above loses what the side below gains)."""
    w_edge = ir.normalize(rec.direction - ng * ir.dot(ng, rec.direction))
    out = None
    for (prim, c1, c2, d, coef, inst), sign in zip(rec.sides, (1.0, -1.0)):
        w_seen = _seen_direction(ctx, x, prim, c1, c2, d, rec.valid, inst)
        term = coef * (_sweep(ir.dot(w_edge - w_seen, rec.normal), rec.valid) * sign)
        out = term if out is None else out + term
    return out


def followed_emitter_sample(ctx, fixed, si, es, es_u):
    """The emitter sample ``es`` taken at ``fixed`` (the hit as traced) seen
    from ``si`` (the same hit following its surface): its direction from
    the moving point to the sampled point (which follows its emitting
    surface, a light triangle or an analytic shape, at its material
    coordinates), and the relative change of the sample's weight, the area
    its solid angle covers (|cos| measure / d^2; a point light's 1 / d^2, a
    spot light's falloff / d^2)."""
    from ..emitters import TYPE_ID, area, reference_point, spot
    finite = es.dist < INF
    lt, bc = area.mesh_point(ctx, ir.maximum(es.sel, 0), (es_u[3], es_u[0], es_u[1]))
    q, nl, measure = surface_point(ctx, lt, bc.x, bc.y)
    on_surface = es.kind == TYPE_ID["area"]
    # where the sample was taken: a point or spot light's position, which no
    # surface moves (mesh_point means nothing for those)
    q_fixed = reference_point(fixed, fixed.d) + es.w * ir.select(finite, es.dist, 0.0)
    q = ir.select(on_surface, q, q_fixed)
    if ctx.structure.analytic:
        on_shape = ir.Bool(False)
        for name in ("area_sphere", "area_disk", "area_cylinder"):
            on_shape = on_shape | (es.kind == TYPE_ID[name])
        s = ctx.b["emitter_meta"].read(ir.maximum(es.sel, 0), layout.META_FIRST)
        q, nl, measure = ir.cond(on_shape, lambda: on_analytic_shape(ctx, s, q_fixed), lambda: (q, nl, measure))
        on_surface = on_surface | on_shape
    v = q - si.p
    d2 = ir.maximum(ir.dot(v, v), 1e-30)
    w = v * ir.rsqrt(d2)
    follows = finite & fixed.hit
    w = Vec(*(ir.select(follows, a, c) for a, c in zip(w, es.w)))
    # (a spot light's intensity turns with the direction from the moving point)
    cone = ir.select(es.kind == TYPE_ID["spot"], spot.falloff(ctx.b["emitter_frame"], ir.maximum(es.sel, 0), -w), 1.0)
    j = ir.select(on_surface, ir.abs(ir.dot(nl, w)) * measure / d2, ir.select(finite, cone / d2, 1.0))
    return dataclasses.replace(es, w=w), relative(ir.select(follows, j, 1.0))


def instances_of(prev) -> tuple:
    """The instances (-1: none) of a path state's last hit and the one
    before (``path.PathState.prev``), (None, None) in scenes without shared
    instances."""
    return tuple(prev[9:11]) if len(prev) > 9 else (None, None)


def pair_factor(ctx, si, fixed, measure, prev) -> Vec:
    """1, with the derivative of reaching ``si`` (``followed``'s, with the
    ``measure`` of its coordinates) from the previous vertex (``prev``: its
    hit, the ray that found it and the hit before it): that vertex's BSDF
    (times cosine) towards this point and the area this point's solid
    angle covers there; a miss keeps its direction."""
    f, r = _reached(ctx, si, fixed, measure, prev)
    return Vec(*(relative(c) * r for c in f))


def mueller_pair(ctx, si, fixed, measure, prev, weight00) -> Vec:
    """(polarized) :func:`pair_factor` as a Mueller matrix to add to the
    previous vertex's continuation weight, whose (0, 0) entries (per
    channel) are ``weight00``: 0 in value, with the derivative of that
    vertex's BSDF (times cosine) towards this point, scaled as the area
    factor and the weight scale it. A matrix's relative change would need
    its inverse, which a polarizer's lacks; each channel's weight over its
    BSDF value is instead a number, 1 / pdf where the weight is f cos / pdf
    (a mixture's sampled lobe: its own ratio, unbiased as the scalar form)."""
    f, r = _reached(ctx, si, fixed, measure, prev)
    n = ctx.spectrum.channels
    f00 = [ir.detach(f[c]) for c in range(n)]
    scale = [ir.select(a != 0.0, w / ir.select(a != 0.0, a, 1.0), 0.0) for w, a in zip(weight00, f00)]
    return Vec(*((x * r - ir.detach(x)) * scale[i % n] for i, x in enumerate(f)))


def _reached(ctx, si, fixed, measure, prev):
    """(the previous vertex's BSDF times cosine towards ``si``, following
    both, and the relative change of the area ``si``'s solid angle covers
    there): :func:`pair_factor`'s parts."""
    from ..bsdfs.surface import SurfaceBsdf
    prim, b1, b2, o, d, t, prim2, b1_2, b2_2 = prev[:9]
    inst, inst2 = instances_of(prev)
    traced = intersect(ctx.primal(), o, d, ir.Float(0.0), INF,
                       KnownHit(ir.Bool(True), t, prim, b1, b2, ir.Int(-1) if inst is None else inst))
    before = following(ctx, traced)
    # the vertex before that one: the camera, or a hit following its surface
    cam = motion.CameraRow(ctx.b["camera"])
    back = ir.normalize(Vec(*(ir.select(prim2 < 0, a, c) for a, c in
                              zip(motion.to_camera(ctx, before.p, cam, motion.eye_of_ray(ctx, cam, o, d)),
                                  point_on_surface(ctx, prim2, b1_2, b2_2, inst2) - before.p))))
    before = dataclasses.replace(before, wi=before.frame.to_local(back))
    wo = ir.normalize(si.p - before.p)
    wo = Vec(*(ir.select(si.hit, a, c) for a, c in zip(wo, fixed.d)))
    f, _, _ = SurfaceBsdf(ctx, before).query(before.frame.to_local(wo), ir.Float(0.5), Vec(ir.Float(0.5), ir.Float(0.5)))
    j = ir.select(si.hit, area_jacobian(before.p, si.p, si.ng, measure), 1.0)
    return f, relative(j)
