"""The boundary term of camera derivatives: visibility that moves.

``sensors/motion.py`` differentiates each sample with the point it sees
held fixed. That misses what changes discontinuously with the camera, on
curves of the film (each a *segment*, ``layout.SEGMENT_*``):

- silhouettes: an edge of a mesh seen against what lies behind it. The
  region behind loses (or gains) the points the edge sweeps over, at the
  edge's film velocity relative to theirs;
- the film's own edges: points the camera sees cross them.

For a segment bounding a region R of the film whose points carry radiance
L, the image's derivative gains

    integral over the segment of  w(q - s) L(s) ((v_curve - v_point) . n_out) dl

(Reynolds' transport theorem in film space), with w the filter weight of
pixel q, v_curve the segment's film velocity (0 for the film's edges),
v_point that of the point seen at s just inside R, and n_out R's outward
normal. The kernels sample segments by film length (``segment_cdf``) and
a point uniformly on each, trace the path seen just inside R, and splat
the estimate into the footprint of pixels around it (an ``Accum`` over the
film canvas, ``primitives/film.py``'s layout). The forward kernel gets the
velocities by the IR's ``jvp`` along the camera tangent; the adjoint is
its transpose, a gather of pixel cotangents and a ``vjp`` of the
velocities into the camera's gradient. The estimates are integrals in
pixel units over all the launch's samples (each item draws ``spp``).
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from ..context import Context, Structure
from ..geometry import occluded
from ..interaction import intersect
from ..sampling import sample_cdf
from ..sensors import film, motion, perspective
from .base import _KERNELS

# Film distance (pixels) inside the region at which its radiance is traced.
INSIDE = 1e-3
# Random dimension group of the segment sample (the path uses 1, 2, ...).
SEGMENT_DIM = 0


def inputs(integrator, structure: Structure) -> dict:
    return dict(integrator.inputs(structure), segments=ir.In("f32", (layout.SEGMENT_ROW,)),
                segment_cdf=ir.In("f32"), canvas_width=ir.Scalar("u32"))


def _sample(integrator, ctx: Context, s):
    """Segment sample ``s``: (canvas rows and weights of its footprint,
    radiance inside the region, the velocity term as a function of the
    camera, the estimate's scale)."""
    b = ctx.b
    plain = ctx.primal()
    segs, cdf = b["segments"], b["segment_cdf"]
    n = ir.cast(cdf.len, "i32")
    total = cdf[n - 1]
    u = ctx.rand(s, SEGMENT_DIM)
    target = u[0] * total
    i = sample_cdf(cdf, ir.Int(0), n, target)
    before = ir.select(i > 0, cdf[ir.maximum(i - 1, 0)], 0.0)
    length = cdf[i] - before
    tau = ir.minimum(ir.maximum((target - before) / ir.select(length > 0.0, length, 1.0), 0.0), 1.0)
    s0 = Vec(segs.read(i, layout.SEG_S0), segs.read(i, layout.SEG_S0 + 1))
    s1 = Vec(segs.read(i, layout.SEG_S1), segs.read(i, layout.SEG_S1 + 1))
    p0 = Vec(*(segs.read(i, layout.SEG_P0 + k) for k in range(3)))
    p1 = Vec(*(segs.read(i, layout.SEG_P1 + k) for k in range(3)))
    side = segs.read(i, layout.SEG_SIDE)
    moving = segs.read(i, layout.SEG_KIND) == 0.0
    e = s1 - s0
    e_len = ir.sqrt(e.x * e.x + e.y * e.y)
    inward = Vec(-e.y, e.x) * (side / ir.select(e_len > 0.0, e_len, 1.0))     # into the region
    sp = s0 + e * tau

    cam = perspective.CameraRow(b["camera"])
    origin = ir.detach(Vec(cam.m[3], cam.m[7], cam.m[11]))
    # The edge's point seen at sp (perspective-correct along the edge), and
    # whether nothing hides it.
    z0 = ir.detach(motion.camera_space(cam, p0, True).z)
    z1 = ir.detach(motion.camera_space(cam, p1, True).z)
    den = (1.0 - tau) * z1 + tau * z0
    t = ir.select(den != 0.0, tau * z0 / ir.select(den != 0.0, den, 1.0), 0.0)
    p = p0 + (p1 - p0) * t
    to_p = p - origin
    dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
    near = ir.detach(cam.near) * dist / ir.maximum(ir.detach(motion.camera_space(cam, p, True).z), 1e-30)
    seen = ir.cond(moving, lambda: ~occluded(ctx.geo, origin, to_p / dist, near, dist * (1.0 - 1e-4)),
                   lambda: ir.Bool(True))

    # The region's side: a camera ray through a point just inside it.
    q = sp + inward * INSIDE
    fx = (q.x + b["grid_x0"].value) / b["film_width"].value
    fy = (q.y + b["grid_y0"].value) / b["film_height"].value
    o, d, t_min, t_max = (ir.detach(v) for v in perspective.sample_ray(ctx, fx, fy))
    si = intersect(plain, o, d, t_min, t_max)
    behind = ~moving | ~si.hit | (si.t * ir.dot(d, to_p / dist) > dist * (1.0 - 1e-3))
    valid = seen & behind & (length > 0.0) & (total > 0.0)
    radiance = ir.cond(valid, lambda: integrator.trace(plain, s, integrator.start_ray(plain, o, d, t_min, t_max)),
                       integrator.spectrum.zero)
    x_point = ir.select(si.hit, si.p, d)

    def velocity():
        """(v_curve - v_point) . n_out, in pixels, as a function of the camera."""
        sx, sy = motion.film_position(ctx, x_point, si.hit)
        cx, cy = motion.film_position(ctx, p, True)
        dx = ir.select(moving, cx, ir.detach(cx)) - sx
        dy = ir.select(moving, cy, ir.detach(cy)) - sy
        return -(dx * inward.x + dy * inward.y)

    # The footprint of pixels around sp on the canvas (grid pixel (r, c) is
    # canvas pixel (r + k // 2, c + k // 2)).
    k = ctx.structure.footprint
    width = b["width"].value
    ix = ir.minimum(ir.cast(ir.maximum(ir.floor(sp.x), 0.0), "u32"), width - 1)
    iy = ir.minimum(ir.cast(ir.maximum(ir.floor(sp.y), 0.0), "u32"), b["height"].value - 1)
    weights = film.weights_at(ctx, sp.x - ir.cast(ix, "f32"), sp.y - ir.cast(iy, "f32"), k)
    cw = b["canvas_width"].value
    rows = [(iy + dy) * cw + ix + dx for dy in range(k) for dx in range(k)]
    scale = ir.select(valid, total / (ir.cast(b["spp"].value, "f32") * ir.cast(ir.launch_size(), "f32")), 0.0)
    return rows, weights, radiance, velocity, scale


def _check(structure: Structure) -> None:
    if structure.footprint == 1:
        raise ValueError("the camera's boundary term needs a splatting film (footprint > 1)")


def forward_kernel(integrator, structure: Structure) -> ir.Kernel:
    """Inputs: the integrator's, ``segments``, ``segment_cdf``,
    ``canvas_width`` and ``d_camera``; output ``canvas``: the boundary
    term's film-canvas image along the camera tangent (rows: canvas
    pixels, the colour channels)."""
    key = (integrator, "boundary_forward", structure)
    if key not in _KERNELS:
        _check(structure)
        base = inputs(integrator, structure)
        ins = dict(base, d_camera=base["camera"])
        C = integrator.spectrum.channels

        def body(**b):
            ctx = Context.create({k: b[k] for k in base}, structure, True, integrator.spectrum)

            def one(s, carry):
                rows, weights, radiance, velocity, scale = _sample(integrator, ctx, s)
                _, dv = ir.jvp(velocity, (), (), buffer_tangents={b["camera"]: b["d_camera"]})
                for row, w in zip(rows, weights):
                    for c in range(C):
                        ir.scatter_add(b["canvas"], row, w * radiance[c] * dv * scale, c)
                return carry

            ir.fori_loop(ir.UInt(0), b["spp"].value, one, ir.Int(0))
            return {}

        _KERNELS[key] = ir.trace(lambda **b: body(**b), ins, {"canvas": ir.Accum("f32", (C,))},
                                 name=f"{integrator.name}_boundary_forward" + structure.suffix())
    return _KERNELS[key]


def adjoint_kernel(integrator, structure: Structure) -> ir.Kernel:
    """Inputs: the integrator's, ``segments``, ``segment_cdf``,
    ``canvas_width`` and ``ct_canvas`` (the cotangent of the forward
    kernel's canvas); accumulator ``grad_camera``: the transpose of
    :func:`forward_kernel` for the same seed."""
    key = (integrator, "boundary_adjoint", structure)
    if key not in _KERNELS:
        _check(structure)
        base = inputs(integrator, structure)
        C = integrator.spectrum.channels
        ins = dict(base, ct_canvas=ir.In("f32", (C,)))

        def body(**b):
            ctx = Context.create({k: b[k] for k in base}, structure, True, integrator.spectrum)
            grads = {b["camera"]: b["grad_camera"]}

            def one(s, carry):
                rows, weights, radiance, velocity, scale = _sample(integrator, ctx, s)
                ct = ir.Float(0.0)
                for row, w in zip(rows, weights):
                    for c in range(C):
                        ct = ct + w * radiance[c] * b["ct_canvas"].read(row, c)
                _, pullback = ir.vjp(velocity, buffer_grads=grads)
                pullback(ct * scale)
                return carry

            ir.fori_loop(ir.UInt(0), b["spp"].value, one, ir.Int(0))
            return {}

        _KERNELS[key] = ir.trace(lambda **b: body(**b), ins,
                                 {"grad_camera": ir.Accum("f32", (layout.CAMERA_ROW,))},
                                 name=f"{integrator.name}_boundary_adjoint" + structure.suffix())
    return _KERNELS[key]
