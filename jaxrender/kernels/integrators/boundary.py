"""The boundary term of camera derivatives: visibility that moves.

``sensors/motion.py`` differentiates each sample with the point it sees
held fixed. That misses what changes discontinuously with the camera, on
curves of the film (each a *segment*, ``layout.SEGMENT_*``):

- silhouettes: an edge of a mesh seen against what lies behind it. The
  region behind loses (or gains) the points the edge sweeps over, at the
  edge's film velocity relative to theirs;
- the film's own edges: points the camera sees cross them;
- in kernels for moving geometry, the edges of hard shadows (point, spot
  and directional lights), on the surfaces the camera sees: the region
  lit there gains the light's direct term (:func:`_shadow_sample`).

For a segment bounding a region R of the film whose points carry radiance
L, the image's derivative gains

    integral over the segment of  w(q - s) L(s) ((v_curve - v_point) . n_out) dl

(Reynolds' transport theorem in film space), with w the filter weight of
pixel q, v_curve the segment's film velocity (0 for the film's edges),
v_point that of the point seen at s just inside R, and n_out R's outward
normal. The kernels sample points along the segments' total film length
(``segment_cdf``), stratified (:func:`_stratified`: the launch's samples
one stratum each), trace the path seen just inside R, and splat the
estimate into the footprint of pixels around it (an ``Accum`` over the
film canvas, ``primitives/film.py``'s layout; the image divides it by the
film's expected weights, ``film.expected_weights``). The forward kernel gets the
velocities by the IR's ``jvp`` along the camera tangent; the adjoint is
its transpose, a gather of pixel cotangents and a ``vjp`` of the
velocities into the camera's gradient. The estimates are integrals in
pixel units over all the launch's samples (each item draws ``spp`` along
the curves, ``spp_pixels`` of the kinds drawn per pixel).

A thin lens's film is a pinhole's per aperture point: each sample takes
one (:func:`_lens`), its segments are the grid's sides alone, and its
silhouettes are sampled on the scene's edges as seen from that point
(:func:`_lens_edge_sample`).
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from .. import layout, spectrum
from ..shapes import curve_point
from ..context import Context, Structure, moves_geometry
from ..geometry import occluded
from ..interaction import first_hit, material_coords, point_on_surface, shown_hit
from ..sampling import sample_lengths
from ..sensors import TYPES as SENSORS, film, motion, perspective
from .base import _KERNELS
from . import material, shadows
from .material import point_along_edge

# Film distance (pixels) inside the region at which its radiance is traced.
INSIDE = 1e-3
# Random dimension group of the segment sample (the path uses 1, 2, ...).
SEGMENT_DIM = 0
# and of the hard shadows' edge sample (no path is traced from it)
SHADOW_DIM = 96
# A thin lens's: the aperture point of a sample, and its edge sample
LENS_DIM = 98
LENS_EDGE_DIM = 99
# Whether the samples are stratified: the curves' points over the launch
# (_stratified), an item's pixel edges over its samples (_pixel_edge_sample).
# False draws each independently, the estimators the strata replaced (for
# tests to compare against).
STRATIFY = True


def inputs(integrator, structure: Structure) -> dict:
    # (spp: the samples per item along the curves, stratified; spp_pixels:
    # those of the kinds drawn per pixel, _pixel_kinds)
    out = dict(integrator.inputs(structure), segments=ir.In("f32", (layout.SEGMENT_ROW,)),
               segment_cdf=ir.In("f32"), canvas_width=ir.Scalar("u32"), spp_pixels=ir.Scalar("u32"))
    if structure.sensor == "thinlens":
        # (its silhouettes are sampled on the scene's welded edges: _lens_edge_sample; and
        # on the copies of shared shapegroups' edges, each with its instance)
        out.update(edges=ir.In("i32", (6,)), lens_edge_cdf=ir.In("f32"))
        if structure.instanced:
            out.update(instance_edges=ir.In("i32", (7,)))
    if structure.delta_lights:
        out.update(shadow_edges=ir.In("f32", (layout.SHADOW_ROW,)), shadow_cdf=ir.In("f32"))
    return out


def _footprint(ctx: Context, sp: Vec):
    """(canvas rows, filter weights) of the footprint of pixels around the
    film point ``sp`` (grid pixel (r, c) is canvas pixel (r + k // 2, c + k // 2))."""
    b = ctx.b
    k = ctx.structure.footprint
    ix = ir.minimum(ir.cast(ir.maximum(ir.floor(sp.x), 0.0), "u32"), b["width"].value - 1)
    iy = ir.minimum(ir.cast(ir.maximum(ir.floor(sp.y), 0.0), "u32"), b["height"].value - 1)
    weights = film.weights_at(ctx, sp.x - ir.cast(ix, "f32"), sp.y - ir.cast(iy, "f32"), k)
    cw = b["canvas_width"].value
    return [(iy + dy) * cw + ix + dx for dy in range(k) for dx in range(k)], weights


def _lens(ctx: Context, cam, s):
    """(lens uniforms, aperture point) of boundary sample ``s``: a thin
    lens's film is a pinhole's per point of its aperture (``sensors/
    motion.py``), so each sample takes one; (None, None) for a camera
    without an aperture."""
    if not motion.thin_lens(ctx):
        return None, None
    u = ctx.rand(s, LENS_DIM)
    return (u[0], u[1]), motion.eye_of_sample(ctx, cam, (u[0], u[1]))


def _sample(integrator, ctx: Context, s):
    """Segment sample ``s``: (canvas rows and weights of its footprint,
    radiance inside the region, the velocity term as a function of the
    camera, the estimate's scale). A thin lens's segments are the grid's
    sides alone, seen from an aperture point of the sample's."""
    b = ctx.b
    plain = ctx.primal()
    segs = b["segments"]
    i, tau, length, total = sample_lengths(b["segment_cdf"], _stratified(ctx, s, ctx.rand(s, SEGMENT_DIM)[0]))
    s0 = Vec(segs.read(i, layout.SEG_S0), segs.read(i, layout.SEG_S0 + 1))
    s1 = Vec(segs.read(i, layout.SEG_S1), segs.read(i, layout.SEG_S1 + 1))
    p0 = Vec(*(segs.read(i, layout.SEG_P0 + k) for k in range(3)))
    p1 = Vec(*(segs.read(i, layout.SEG_P1 + k) for k in range(3)))
    side = segs.read(i, layout.SEG_SIDE)
    kind = segs.read(i, layout.SEG_KIND)
    moving = kind != layout.SEG_FILM_EDGE
    e = s1 - s0
    e_len = ir.sqrt(e.x * e.x + e.y * e.y)
    inward = Vec(-e.y, e.x) * (side / ir.select(e_len > 0.0, e_len, 1.0))     # into the region
    sp = s0 + e * tau

    cam = perspective.CameraRow(b["camera"])
    ortho = motion.orthographic(ctx)
    lens, eye = _lens(ctx, cam, s)
    # The edge's point seen at sp (perspective-correct along the edge; an
    # orthographic projection keeps ratios)
    t = tau
    if not ortho and eye is None:
        z0 = ir.detach(motion.camera_space(cam, p0, True).z)
        z1 = ir.detach(motion.camera_space(cam, p1, True).z)
        den = (1.0 - tau) * z1 + tau * z0
        t = ir.select(den != 0.0, tau * z0 / ir.select(den != 0.0, den, 1.0), 0.0)
    p = p0 + (p1 - p0) * t
    # Film length per sampled length: 1 on straight segments; on a curve
    # record (an analytic shape's), tau is its angle over 2 pi, and the
    # record's share of the total is its approximate length.
    density = ir.Float(1.0)
    inside_grid = ir.Bool(True)
    if ctx.structure.analytic and eye is None:
        shape = ir.cast(segs.read(i, layout.SEG_SHAPE), "i32")
        which = ir.cast(segs.read(i, layout.SEG_CURVE), "i32")
        phi = tau * (2.0 * 3.141592653589793)

        def outline_eye():
            """Where the outline is seen from (held still: a smooth
            silhouette's grazing point slides along the surface, which
            does not move it on the film to first order)."""
            return ir.detach(motion.silhouette_origin(ctx, cam, ctx.geo.center(shape)))

        def on_curve():
            eye = outline_eye()
            point = curve_point(ctx.geo, shape, which, eye, phi)

            def project(q):
                return Vec(*motion.film_position(ctx, q, True, cam))

            spc, ds = ir.jvp(lambda a: project(curve_point(ctx.geo, shape, which, eye, a)), (phi,), (1.0,))
            # the unit normal of the film curve, on the side of a point moved
            # off the shape (that point's own offset is not along the normal
            # where the curve projects to an ellipse)
            off = project(curve_point(ctx.geo, shape, which, eye, phi, 1e-3)) - spc
            normal = Vec(-ds.y, ds.x)
            n_len = ir.sqrt(normal.x * normal.x + normal.y * normal.y)
            facing = normal.x * off.x + normal.y * off.y
            ds_len = n_len * (2.0 * 3.141592653589793)
            front = motion.camera_space(cam, point, True, ortho).z > ir.detach(cam.near)
            ok = front & (spc.x >= 0.0) & (spc.y >= 0.0) & (spc.x <= ir.cast(b["width"].value, "f32")) \
                & (spc.y <= ir.cast(b["height"].value, "f32")) & (n_len > 0.0) & (facing != 0.0)
            return (point, spc, normal * (ir.copysign(1.0, facing) / ir.select(n_len > 0.0, n_len, 1.0)),
                    ir.select(ok, ds_len / ir.select(length > 0.0, length, 1.0), 0.0), ok)

        curve = kind == layout.SEG_CURVE_KIND
        p, sp, inward, density, inside_grid = ir.cond(curve, on_curve, lambda: (p, sp, inward, density, inside_grid))
    # whether nothing hides the edge's point (a grazing ray's hit on a
    # curved silhouette lies within float error of it: a margin of 1e-3)
    seen = ir.cond(moving & inside_grid, lambda: _seen(ctx, cam, p, eye), lambda: inside_grid)

    # The region's side: a camera ray through a point just inside it.
    o, d, t_min, t_max, known, si = _inside(ctx, sp, inward, lens)
    # (the hit lies beyond the edge's point: its distance along the ray
    # past that of p's depth, from the camera or along the axis)
    if ortho:
        depth = ir.dot(ir.detach(p) - o, d)
    else:
        to_p = ir.detach(p) - o
        dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
        depth = dist * dist / ir.maximum(ir.dot(d, to_p), 1e-30)
    behind = ~moving | ~si.hit | (si.t > depth * (1.0 - 1e-3))
    valid = seen & behind & (length > 0.0) & (total > 0.0) & (density > 0.0)
    radiance = ir.cond(valid,
                       lambda: integrator.trace(plain, s, integrator.start_ray(plain, o, d, t_min, t_max, known)),
                       integrator.spectrum.no_radiance)
    x_point = ir.select(si.hit, si.p, d)

    def velocity():
        """(v_curve - v_point) . n_out, in pixels, as a function of the
        camera (and, in kernels for moving geometry, of the triangles and
        shapes: the edge's point and the point behind it follow theirs)."""
        seen, on_edge = x_point, p
        if ctx.geometry_motion:
            seen = _following_seen(ctx, si, x_point)
            tri = ir.cast(segs.read(i, layout.SEG_TRI), "i32")
            lo, hi = segs.read(i, layout.SEG_LO), segs.read(i, layout.SEG_HI)
            slot0 = ir.cast(segs.read(i, layout.SEG_SLOT0), "i32")
            slot1 = ir.cast(segs.read(i, layout.SEG_SLOT1), "i32")
            at = lo + (hi - lo) * t
            instance = ir.cast(segs.read(i, layout.SEG_INSTANCE), "i32") if ctx.structure.instanced else None
            follows = point_along_edge(ctx, tri, slot0, slot1, at, instance)
            on_edge = Vec(*(ir.select((tri >= 0) & (kind == layout.SEG_SILHOUETTE), a, c)
                            for a, c in zip(follows, p)))
            if ctx.structure.analytic and eye is None:
                # an analytic shape's outline follows the shape
                fixed = on_edge
                on_edge = ir.cond(kind == layout.SEG_CURVE_KIND,
                                  lambda: curve_point(ctx.geo, shape, which, outline_eye(), phi), lambda: fixed)
        sx, sy = motion.film_position(ctx, seen, si.hit, eye=eye)
        cx, cy = motion.film_position(ctx, on_edge, True, eye=eye)
        dx = ir.select(moving, cx, ir.detach(cx)) - sx
        dy = ir.select(moving, cy, ir.detach(cy)) - sy
        return -(dx * inward.x + dy * inward.y)

    rows, weights = _footprint(ctx, sp)
    scale = ir.select(valid, total * density / (ir.cast(b["spp"].value, "f32") * ir.cast(ir.launch_size(), "f32")),
                      0.0)
    return rows, weights, _film_value(integrator, ctx, radiance, valid, si.hit, d), velocity, scale


def _stratified(ctx: Context, s, u):
    """The uniform by which sample ``s`` of the item draws its point on the
    curves (along their cumulative length): the launch's samples take one
    stratum each (an item's samples consecutive ones), ``u`` where in it.
    Every pixel's footprint then gets about as many points as its length
    of curve, not a random number of them, and neighbouring lanes draw
    neighbouring points (their rays go alike)."""
    n = ir.cast(ctx.b["spp"].value, "f32") * ir.cast(ir.launch_size(), "f32")
    k = ir.cast(ctx.item, "f32") * ir.cast(ctx.b["spp"].value, "f32") + ir.cast(s, "f32")
    # (k / n and u / n apart: past 2^24 samples k + u would lose u)
    return ir.minimum(k / n + u / n, 0.99999994) if STRATIFY else u


def _lens_edge_sample(integrator, ctx: Context, s):
    """A thin lens's silhouettes, in the shape of :func:`_sample`. Seen
    from one aperture point a the film is a pinhole's (``sensors/
    motion.py``), and an edge of the scene that is a silhouette from a
    bounds a region of it: sample ``s`` takes its aperture point and a
    point on the scene's edges (``material.edge_point``: an edge by the
    weights of ``primitives/boundary.lens_edge_cdf``, which leaves out
    edges no aperture point sees as silhouettes, uniformly along it),
    whose film curve is its projection from a, with the projection's
    speed as the film length per unit of the sample."""
    b = ctx.b
    plain = ctx.primal()
    cam = perspective.CameraRow(b["camera"])
    lens, eye = _lens(ctx, cam, s)
    origin = ir.detach(motion.eye_point(cam, eye))
    def passes(prim):
        """Whether camera rays pass through triangle ``prim`` (an emitter's, under hide_emitters)."""
        return (b["hide_emitters"].value != 0) & (b["tri_attr"].read(prim, layout.ATTR_EMITTER) >= 0)
    # (the launch's samples one stratum each of the edges' total weight, :func:`_stratified`)
    u = ctx.rand(s, LENS_EDGE_DIM)
    ep = material.edge_point(ctx, origin, (u[0], u[1], _stratified(ctx, s, u[2]), u[3]), ir.Int(-1),
                             b["lens_edge_cdf"], passes if "hide_emitters" in b else None)

    def film_of(q: Vec) -> Vec:
        return Vec(*motion.film_position(ctx, q, True, cam, eye))

    sp, ds = ir.jvp(lambda e: film_of(ep.p + ep.tangent * e), (ir.Float(0.0),), (1.0,))
    # the film side of the occluding surface: where a step off the edge towards it lands
    _, off = ir.jvp(lambda e: film_of(ep.p + ep.normal * e), (ir.Float(0.0),), (1.0,))
    normal = Vec(-ds.y, ds.x)
    n_len = ir.sqrt(normal.x * normal.x + normal.y * normal.y)
    facing = normal.x * off.x + normal.y * off.y
    inward = normal * (-ir.copysign(1.0, facing) / ir.select(n_len > 0.0, n_len, 1.0))     # into what lies behind
    front = motion.camera_space(cam, ep.p, True).z > ir.detach(cam.near)
    ok = ep.silhouette & front & (n_len > 0.0) & (facing != 0.0) & (sp.x >= 0.0) & (sp.y >= 0.0) \
        & (sp.x <= ir.cast(b["width"].value, "f32")) & (sp.y <= ir.cast(b["height"].value, "f32"))
    ok = ok & ir.cond(ok, lambda: _seen(ctx, cam, ep.p, eye), lambda: ir.Bool(False))

    # what lies behind: the ray from the same aperture point through a film point just past the curve
    o, d, t_min, t_max, known, si = _inside(ctx, sp, inward, lens)
    to_p = ep.p - o
    dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
    depth = dist * dist / ir.maximum(ir.dot(d, to_p), 1e-30)
    valid = ok & (~si.hit | (si.t > depth * (1.0 - 1e-3)))
    radiance = ir.cond(valid,
                       lambda: integrator.trace(plain, s, integrator.start_ray(plain, o, d, t_min, t_max, known)),
                       integrator.spectrum.no_radiance)
    x_point = ir.select(si.hit, si.p, d)

    def velocity():
        """(v_curve - v_point) . n_out, in pixels, as a function of the
        camera (and of the geometry, as :func:`_sample`'s)."""
        seen, on_edge = x_point, ep.p
        if ctx.geometry_motion:
            seen = _following_seen(ctx, si, x_point)
            on_edge = point_along_edge(ctx, ep.tri, ep.slot0, ep.slot1, ep.t, ep.instance)
            if ctx.structure.analytic:
                on_line = on_edge
                on_edge = ir.cond(valid & (ep.shape >= 0),
                                  lambda: curve_point(ctx.geo, ir.maximum(ep.shape, 0), ep.which, origin, ep.t),
                                  lambda: on_line)
        sx, sy = motion.film_position(ctx, seen, si.hit, eye=eye)
        cx, cy = motion.film_position(ctx, on_edge, True, eye=eye)
        return ir.select(valid, -((cx - sx) * inward.x + (cy - sy) * inward.y), 0.0)

    rows, weights = _footprint(ctx, sp)
    scale = ir.select(valid, ep.weight * n_len / (ir.cast(b["spp"].value, "f32") * ir.cast(ir.launch_size(), "f32")),
                      0.0)
    return rows, weights, _film_value(integrator, ctx, radiance, valid, si.hit, d), velocity, scale


def _inside(ctx: Context, sp: Vec, inward: Vec, lens):
    """The camera ray (traced, from the aperture point of ``lens``)
    through the film point just inside a region, past ``sp`` along
    ``inward``, and what it shows: (o, d, t_min, t_max, its first hit as a
    ``KnownHit`` for the path, the shown hit)."""
    b = ctx.b
    q = sp + inward * INSIDE
    fx = (q.x + b["grid_x0"].value) / b["film_width"].value
    fy = (q.y + b["grid_y0"].value) / b["film_height"].value
    o, d, t_min, t_max = _film_ray(ctx, fx, fy, lens)
    first, known = first_hit(ctx, o, d, t_min, t_max)
    return o, d, t_min, t_max, known, shown_hit(ctx, o, d, t_min, t_max, first)


def _following_seen(ctx: Context, si, x_point: Vec) -> Vec:
    """What a boundary sample saw (``x_point``: the hit's point, or a miss's
    direction), a hit following its surface at its material coordinates."""
    return Vec(*(ir.select(si.hit, a, c) for a, c in
                 zip(point_on_surface(ctx, si.prim, *material_coords(ctx, si), si.instance), x_point)))


def _film_ray(ctx: Context, fx, fy, lens=None):
    """The camera ray (traced: no derivatives) through film position (fx,
    fy) in [0, 1]^2 (a thin lens's from the aperture point of the
    uniforms ``lens``)."""
    return tuple(ir.detach(v) for v in SENSORS[ctx.structure.sensor].sample_ray(ctx, fx, fy, lens))


def _seen(ctx: Context, cam, p: Vec, eye: Vec | None = None):
    """Whether the camera (a thin lens's aperture point ``eye``) sees the
    point ``p``: nothing it shows lies between the near plane and just
    before the point."""
    o, d, t_min, dist = (ir.detach(v) for v in motion.ray_to(ctx, cam, p, eye))
    return ~_hidden(ctx, o, d, t_min, dist * (1.0 - 1e-3))


def _hidden(ctx: Context, o: Vec, d: Vec, t_min, t_max):
    """Whether the camera does not see along (o, d) as far as t_max: a
    surface it shows lies before (emitters hidden by hide_emitters let it
    see through)."""
    if "hide_emitters" not in ctx.b:
        return occluded(ctx.geo, o, d, t_min, t_max)
    return ir.cond(ctx.b["hide_emitters"].value != 0, lambda: shown_hit(ctx, o, d, t_min, t_max).hit,
                   lambda: occluded(ctx.geo, o, d, t_min, t_max))


def _pixel_edge_sample(integrator, ctx: Context, s):
    """With the box filter, a pixel's value changes where the points seen
    cross its edges, its neighbour's by the opposite: sample ``s`` of the
    item takes its pixel's right or bottom edge (the grid's own sides are
    segments) and a point on it, in the shape of :func:`_sample`."""
    b = ctx.b
    plain = ctx.primal()
    _, _, pick, u = ctx.rand(s, SEGMENT_DIM)
    if STRATIFY:
        # The item's samples alternate between its two edges, from one
        # picked by a coin of the pixel's, and are stratified along each:
        # every sample is still uniform on either edge with probability 1/2.
        spp = b["spp"].value
        first_right = ctx.rand(ir.UInt(0), SEGMENT_DIM)[1] < 0.5
        right = ((s % 2) == 0) == first_right
        # (how many of the item's samples its first and second edges take)
        count = ir.cast(ir.select(right == first_right, (spp + 1) // 2, spp // 2), "f32")
        along = ir.minimum((ir.cast(s // 2, "f32") + u) / ir.maximum(count, 1.0), 0.99999994)
    else:
        right, along = pick < 0.5, u
    width, height = b["width"].value, b["height"].value
    ix, iy = ctx.pixel % width, ctx.pixel // width
    valid = ir.select(right, ix + 1 < width, iy + 1 < height) & (ctx.pixel < width * height)
    fx = ir.cast(ix, "f32") + ir.select(right, 1.0, along)
    fy = ir.cast(iy, "f32") + ir.select(right, along, 1.0)
    lens, eye = _lens(ctx, perspective.CameraRow(b["camera"]), s)
    o, d, t_min, t_max = _film_ray(ctx, (fx + b["grid_x0"].value) / b["film_width"].value,
                                   (fy + b["grid_y0"].value) / b["film_height"].value, lens)
    first, known = first_hit(ctx, o, d, t_min, t_max)
    si = shown_hit(ctx, o, d, t_min, t_max, first)
    radiance = ir.cond(valid,
                       lambda: integrator.trace(plain, s, integrator.start_ray(plain, o, d, t_min, t_max, known)),
                       integrator.spectrum.no_radiance)
    x_point = ir.select(si.hit, si.p, d)

    def velocity():
        """Minus the seen point's film velocity along the edge's normal out of the item's pixel."""
        seen = x_point
        if ctx.geometry_motion:
            seen = _following_seen(ctx, si, x_point)
        sx, sy = motion.film_position(ctx, seen, si.hit, eye=eye)
        return -ir.select(right, sx, sy)

    cw = b["canvas_width"].value
    row = iy * cw + ix
    rows = [row, ir.select(right, row + 1, row + cw)]
    return (rows, [1.0, -1.0], _film_value(integrator, ctx, radiance, valid, si.hit, d), velocity,
            ir.select(valid, 2.0 / ir.cast(b["spp"].value, "f32"), 0.0))


def _shadow_sample(integrator, ctx: Context, s):
    """Sample ``s``'s point on the edge of a hard shadow (``shadows.py``),
    in the shape of :func:`_sample`: where the camera sees its y, the film
    gains a curve across which the radiance jumps by the light's direct
    term at y; the lit side is the region, the shadowed one lacks it."""
    b = ctx.b
    S = ctx.spectrum
    # (a path of one vertex takes no emitter samples: no shadows)
    max_depth = b["max_depth"].value
    u = ctx.rand(s, SHADOW_DIM)
    edge = shadows.sample(ctx, (_stratified(ctx, s, u[0]), *u[1:]))
    cam = perspective.CameraRow(b["camera"])
    _, eye = _lens(ctx, cam, s)
    y = edge.hit.p
    c_y = motion.camera_space(cam, y, True, motion.orthographic(ctx))
    sp = Vec(*motion.film_position(ctx, y, True, cam, eye))
    ok = edge.ok & ((max_depth < 0) | (max_depth > 1)) & (c_y.z > ir.detach(cam.near)) & (sp.x >= 0.0) \
        & (sp.y >= 0.0) & (sp.x <= ir.cast(b["width"].value, "f32")) & (sp.y <= ir.cast(b["height"].value, "f32"))
    ok = ok & ir.cond(ok, lambda: _seen(ctx, cam, y, eye), lambda: ir.Bool(False))
    if motion.orthographic(ctx):
        toward = ir.detach(-ir.normalize(motion.axis(cam)))
    else:
        to_y = y - ir.detach(motion.eye_point(cam, eye))
        toward = -to_y / ir.maximum(ir.sqrt(ir.dot(to_y, to_y)), 1e-30)
    jump = shadows.jump(ctx, edge, toward)

    def film_of(q: Vec) -> Vec:
        return Vec(*motion.film_position(ctx, q, True, cam, eye))

    spc, ds = ir.jvp(lambda t: film_of(shadows.traced_curve(edge, t)), (edge.at.tau,), (1.0,))
    normal = Vec(-ds.y, ds.x)
    n_len = ir.sqrt(normal.x * normal.x + normal.y * normal.y)
    # into the lit side: away from where a ray past the edge on the occluder's side lands
    off = film_of(shadows.traced_curve(edge, edge.at.tau, edge.offset * 10.0)) - spc
    facing = normal.x * off.x + normal.y * off.y
    inward = normal * (-ir.copysign(1.0, facing) / ir.select(n_len > 0.0, n_len, 1.0))
    ok = ok & (n_len > 0.0) & (facing != 0.0) & (S.max(jump) > 0.0)

    def velocity():
        """(v_curve - v_point) . n_out of the lit side, in pixels, as a
        function of the camera and the geometry."""
        c, y_m = shadows.moving_points(ctx, edge.at)
        cx, cy = motion.film_position(ctx, c, True, eye=eye)
        sx, sy = motion.film_position(ctx, y_m, True, eye=eye)
        # (a sample without a term may have no finite point: its tangent is 0, not NaN)
        return ir.select(ok, -((cx - sx) * inward.x + (cy - sy) * inward.y), 0.0)

    rows, weights = _footprint(ctx, sp)
    # film length per sampled length (the records are drawn by their length)
    scale = ir.select(ok, n_len * edge.density / (ir.cast(b["spp"].value, "f32") * ir.cast(ir.launch_size(), "f32")),
                      0.0)
    value = integrator.film_values_along(ctx, ir.detach(-toward), Vec(*(ir.select(ok, c, 0.0) for c in jump)))
    if integrator.alpha:
        value = Vec(*value, ir.Float(0.0))      # (both sides of a shadow are opaque)
    return rows, weights, value, velocity, scale


def _film_value(integrator, ctx: Context, radiance: Vec, valid, hit, d: Vec) -> Vec:
    """The film channels of what the region's side shows along the camera
    ray of direction ``d``: its radiance's film values, then, on films with
    alpha, its alpha (1 where the camera ray meets a surface or a visible
    environment, as ``sample_alpha``): a silhouette against nothing moves
    the alpha's edge too."""
    value = integrator.film_values_along(ctx, ir.detach(d), radiance)
    if not integrator.alpha:
        return value
    alpha = ir.select(valid & (hit | integrator.camera_sees_environment(ctx)), 1.0, 0.0)
    return Vec(*value, alpha)


def _curve_kinds(ctx: Context) -> list:
    """The boundary samples an item draws along the curves, ``spp`` of each
    (the launch's stratified along them, :func:`_stratified`): the film's
    segments, the hard shadows' edges."""
    return [_sample] + ([_shadow_sample] if ctx.geometry_motion and ctx.structure.delta_lights else [])


def _pixel_kinds(ctx: Context) -> list:
    """Those it draws per pixel, ``spp_pixels`` of each: a thin lens's
    silhouettes (each sample from an aperture point of its own), the box
    filter's pixel edges (each item its own pixel's)."""
    return (([_lens_edge_sample] if motion.thin_lens(ctx) else [])
            + ([_pixel_edge_sample] if ctx.structure.footprint == 1 else []))


def _sample_loops(integrator, structure: Structure, b, base, active, body):
    """``body(samples, s)`` for each of the item's samples along the curves
    (``spp``) and each of its per-pixel ones (``spp_pixels``): one loop
    per count, with a context whose sampler and ``spp`` are its own; a
    sample's kinds each give it (rows, weights, radiance, velocity, scale),
    its ``ctx`` bound to its wavelengths (each radiance as the film takes it)."""
    for kinds_of, count in ((_curve_kinds, "spp"), (_pixel_kinds, "spp_pixels")):
        ctx = _context(integrator, structure, dict(b, spp=b[count]), base, active)
        kinds = kinds_of(ctx)
        if not kinds:
            continue

        def one(s, carry, kinds=kinds, ctx=ctx):
            bound = ctx.spectrum.bind(ctx, s)
            body([kind(integrator, bound, s) for kind in kinds], s)
            return carry
        ir.fori_loop(ir.UInt(0), ctx.b["spp"].value, one, ir.Int(0))


def _context(integrator, structure, b, base, active) -> Context:
    ctx = Context.create({k: b[k] for k in base}, structure, True, integrator.spectrum)
    return dataclasses.replace(ctx, geometry_motion=moves_geometry(active, structure))


def forward_kernel(integrator, structure: Structure, active: tuple = ("camera",)) -> ir.Kernel:
    """Inputs: the integrator's, ``segments``, ``segment_cdf``,
    ``canvas_width`` and ``d_<name>`` for each of ``active`` ("camera",
    "tris"); output ``canvas``: the boundary term's film-canvas image
    along those tangents (rows: canvas pixels, the colour channels)."""
    key = (integrator, "boundary_forward", structure, active)
    if key not in _KERNELS:
        base = inputs(integrator, structure)
        ins = dict(base, **{"d_" + n: base[n] for n in active})
        C = integrator.channels

        def body(**b):
            def splat(samples, s):
                for rows, weights, radiance, velocity, scale in samples:
                    _, dv = ir.jvp(velocity, (), (), buffer_tangents={b[n]: b["d_" + n] for n in active})
                    for row, w in zip(rows, weights):
                        for c in range(C):
                            ir.scatter_add(b["canvas"], row, w * radiance[c] * dv * scale, c)

            _sample_loops(integrator, structure, b, base, active, splat)
            return {}

        with spectrum.using(integrator.spectrum):
            _KERNELS[key] = ir.trace(lambda **b: body(**b), ins, {"canvas": ir.Accum("f32", (C,))},
                                 name=f"{integrator.name}_boundary_forward_" + "_".join(active)
                                 + integrator._spectrum_suffix() + structure.suffix())
    return _KERNELS[key]


def adjoint_kernel(integrator, structure: Structure, active: tuple = ("camera",)) -> ir.Kernel:
    """Inputs: the integrator's, ``segments``, ``segment_cdf``,
    ``canvas_width`` and ``ct_canvas`` (the cotangent of the forward
    kernel's canvas); accumulators ``grad_<name>`` for each of ``active``:
    the transpose of :func:`forward_kernel` for the same seed."""
    key = (integrator, "boundary_adjoint", structure, active)
    if key not in _KERNELS:
        base = inputs(integrator, structure)
        C = integrator.channels
        ins = dict(base, ct_canvas=ir.In("f32", (C,)))

        def body(**b):
            grads = {b[n]: b["grad_" + n] for n in active}

            def gather(samples, s):
                for rows, weights, radiance, velocity, scale in samples:
                    ct = ir.Float(0.0)
                    for row, w in zip(rows, weights):
                        for c in range(C):
                            ct = ct + w * radiance[c] * b["ct_canvas"].read(row, c)
                    _, pullback = ir.vjp(velocity, buffer_grads=grads)
                    pullback(ct * scale)

            _sample_loops(integrator, structure, b, base, active, gather)
            return {}

        with spectrum.using(integrator.spectrum):
            _KERNELS[key] = ir.trace(lambda **b: body(**b), ins,
                                 {"grad_" + n: ir.Accum("f32", ins[n].item_shape) for n in active},
                                 name=f"{integrator.name}_boundary_adjoint_" + "_".join(active)
                                 + integrator._spectrum_suffix() + structure.suffix())
    return _KERNELS[key]
