"""Where a ray meets the scene: :class:`SurfaceInteraction` and :func:`intersect`.

The interaction holds what integrators, BSDFs and emitters ask of a hit:
the point, the geometric normal (ray offsets, which side of an area light
emits) and the shading frame (vertex normals, else the geometric one: what
BSDFs see), the primitive and its barycentrics / UV parameters, the BSDF
and emitter attached to the shape, and, in scenes with a BSDF that perturbs
the shading frame (normalmap, bumpmap: ``Structure.tangents``), Mitsuba's
``dp_du`` / ``dp_dv`` (None elsewhere, so other kernels do not compute them).
A hit on a shapegroup's triangle through an instance (``Structure.instanced``)
is computed in group space and brought to the world (:func:`intersect`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import ir
from ..ir import Vec
from ..ir.values import as_var
from . import layout, shapes
from .geometry import INF, closest_hit
from .sampling import Frame
from .shapes import triangle


@dataclasses.dataclass
class SurfaceInteraction:
    t: Any
    prim: Any         # primitive index (leaf order), -1 on a miss
    b1: Any           # barycentrics of a triangle hit (of its 2nd and 3rd vertex); an analytic shape's (u, v)
    b2: Any
    d: Vec            # ray direction
    hit: Any
    p: Vec
    ng: Vec           # geometric normal
    frame: Frame      # shading frame
    wi: Vec           # direction towards the ray's origin, in the shading frame
    attr_bsdf: Any    # BSDF index
    attr_em: Any      # emitter index, -1: none
    is_emitter: Any
    cos_l: Any        # cosine between the geometric normal and -d (> 0: the front side)
    scale: Any        # ray offset distance from the surface
    o: Vec = None     # ray origin
    dp_du: Vec = None  # position derivatives in (u, v), world (only with Structure.tangents)
    dp_dv: Vec = None
    instance: Any = None  # row of the instance tables whose shapegroup was hit, -1: the scene's own primitive

    def spawn(self, w: Vec) -> Vec:
        """A ray origin just off the surface, on the side ``w`` leaves towards."""
        return self.p + self.ng * ir.copysign(self.scale, ir.dot(self.ng, w))


@dataclasses.dataclass
class KnownHit:
    """A ray's first hit found by an earlier query along the same line (a
    medium's null collision moves the origin on, not the surface ahead):
    ``valid`` where it is, the hit's t from the ray's current origin, its
    primitive (-1: none within t_max), barycentrics and instance (-1: none)."""
    valid: Any
    t: Any
    prim: Any
    b1: Any
    b2: Any
    instance: Any
    key: Any = None   # the ray_key of the ray it was found for (then used only for that ray), or None

    @classmethod
    def none(cls) -> "KnownHit":
        return cls(ir.Bool(False), ir.Float(0.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.Int(-1))

    @classmethod
    def ahead(cls, valid, si: "SurfaceInteraction", t_moved) -> "KnownHit":
        """The hit ``si`` seen from ``t_moved`` further along its ray, where ``valid``."""
        # (an analytic shape's surface is recomputed from t alone: its b1, b2
        # here are its (u, v), never read back)
        return cls(valid, si.t - t_moved, si.prim, si.b1, si.b2, si.instance)


@dataclasses.dataclass
class KnownOcclusion:
    """A shadow ray's answer found by an earlier query (PRB's first pass):
    ``valid`` where it was traced, whether it was ``blocked``, and the
    ray_key of that ray."""
    valid: Any
    blocked: Any
    key: Any

    @classmethod
    def none(cls) -> "KnownOcclusion":
        return cls(ir.Bool(False), ir.Bool(True), ir.UInt(0))


def ray_key(o: Vec, d: Vec, t_min, t_max):
    """A 32-bit digest of a ray's bits (FNV-1a's steps over its eight words
    rather than bytes): an answer logged for one ray is reused only for a
    ray with the same key, so a replay whose ray differs from the logged
    one queries again (unless their keys collide, about once in 2^32)."""
    h = ir.UInt(2166136261)
    for v in (*o, *d, t_min, t_max):
        h = (h ^ ir.bitcast(as_var(v, "f32"), "u32")) * 16777619
    return h


def intersect(ctx, o: Vec, d: Vec, t_min, t_max=INF, known: "KnownHit | None" = None) -> SurfaceInteraction:
    """The first surface along the ray (o, d) with t_min < t < t_max;
    ``known``: where that is already known (no BVH query there; a known hit
    with a key only for a ray of that key)."""
    st = ctx.structure
    if known is None:
        t, prim, b1, b2, instance = closest_hit(ctx.geo, o, d, t_min, t_max)
    else:
        usable = known.valid if known.key is None else known.valid & (known.key == ray_key(o, d, t_min, t_max))
        t, prim, b1, b2, instance = ir.cond(usable,
                                            lambda: (known.t, known.prim, known.b1, known.b2, known.instance),
                                            lambda: closest_hit(ctx.geo, o, d, t_min, t_max))
    normals = ctx.b["tri_normals"] if st.shading_normals else None
    tangents = st.tangents

    def on_triangle(o=o, d=d):
        out = triangle.surface(ctx.geo.tris, normals, prim, o, d, t, b1, b2)
        if tangents:
            out += triangle.tangents(ctx.geo.tris, ctx.b["tri_uv"], prim, out[1])
        return out

    def on_instance():
        # Mitsuba's instance: the surface of the group's triangle in group
        # space (the ray taken there, t unchanged), brought to the world by
        # to_world: normals by its inverse transpose, so a mirroring
        # instance keeps the group's orientation; dp_du, dp_dv as vectors.
        inst = ctx.geo.instances
        p, ng, ns, u, v, *dp = on_triangle(inst.to_group(instance, o), inst.to_group_dir(instance, d))
        return (inst.to_world(instance, p), inst.normal_to_world(instance, ng), inst.normal_to_world(instance, ns),
                u, v, *(inst.to_world_dir(instance, x) for x in dp))

    if st.analytic:
        s = ctx.geo.prim_shape[prim]

        def on_shape():
            p, ng, u, v = shapes.surface(ctx.geo, s, o, d, t, st.tex_slots > 0 or tangents)
            if tangents:
                return (p, ng, ng, u, v) + shapes.tangents(ctx.geo, s, p)
            return p, ng, ng, u, v
        out = ir.cond((prim >= 0) & (s >= 0), on_shape, on_triangle)
    else:
        out = on_triangle()
    if st.instanced:
        shown = out
        out = ir.cond(instance >= 0, on_instance, lambda: shown)
    p, ng, ns, b1, b2 = out[:5]
    dp_du, dp_dv = out[5:] if tangents else (None, None)
    attr = ctx.b["tri_attr"]
    attr_em = attr.read(prim, layout.ATTR_EMITTER)
    hit = prim >= 0
    frame = Frame.along(ns, dp_du) if tangents else Frame(ns)
    # Offsets grow with the magnitude of the coordinates (float32 spacing).
    scale = 1e-4 * (1.0 + ir.maximum(ir.maximum(ir.abs(p.x), ir.abs(p.y)), ir.abs(p.z)))
    return SurfaceInteraction(t, prim, b1, b2, d, hit, p, ng, frame, frame.to_local(-d),
                              attr.read(prim, layout.ATTR_BSDF), attr_em, hit & (attr_em >= 0), -ir.dot(ng, d),
                              scale, o, dp_du, dp_dv, instance)


def first_hit(ctx, o: Vec, d: Vec, t_min, t_max=INF) -> tuple[SurfaceInteraction, KnownHit]:
    """The first hit of the ray (o, d), traced without derivatives, and the
    same as a :class:`KnownHit` for a path that starts with this ray (so
    that a kernel which needs the hit itself and the path's radiance
    queries the BVH once)."""
    si = intersect(ctx.primal(), o, d, t_min, t_max)
    return si, KnownHit(ir.Bool(True), si.t, si.prim, si.b1, si.b2, instance_of(si))


def instance_of(si: SurfaceInteraction):
    """The instance a hit was found through (-1: none, in scenes without them too)."""
    return si.instance if si.instance is not None else ir.Int(-1)


def shown_hit(ctx, o: Vec, d: Vec, t_min, t_max=INF, first: SurfaceInteraction | None = None) -> SurfaceInteraction:
    """What the camera ray (o, d) shows, traced without derivatives: its
    first hit, or, where the integrator hides emitters (its
    ``hide_emitters`` input), its first hit that is not an emitter, reached
    through them as the path tracer's pass-through steps reach it (from
    the same points); t is the distance from ``o``. ``first``: the ray's
    first hit where already traced (:func:`first_hit`)."""
    plain = ctx.primal()
    si = intersect(plain, o, d, t_min, t_max) if first is None else first
    if "hide_emitters" not in ctx.b:
        return si
    hide = ctx.b["hide_emitters"].value != 0

    def passed():
        def body(state):
            o_k, t_min_k, t_max_k, acc, t, prim, b1, b2, instance, _ = state
            at = intersect(plain, o_k, d, t_min_k, t_max_k, KnownHit(ir.Bool(True), t, prim, b1, b2, instance))
            o_n = at.p + d * at.scale
            t_n = t_max_k - at.t - at.scale
            nxt = closest_hit(plain.geo, o_n, d, ir.Float(0.0), t_n)
            emitter = (nxt[1] >= 0) & (ctx.b["tri_attr"].read(ir.maximum(nxt[1], 0), layout.ATTR_EMITTER) >= 0)
            return (o_n, ir.Float(0.0), t_n, acc + at.t + at.scale, *nxt,
                    emitter)

        init = (o, t_min, t_max, ir.Float(0.0), si.t, si.prim, si.b1, si.b2,
                instance_of(si), ir.Bool(True))
        o_k, t_min_k, t_max_k, acc, t, prim, b1, b2, instance, _ = ir.while_loop(lambda st: st[-1], body, init)
        last = intersect(plain, o_k, d, t_min_k, t_max_k, KnownHit(ir.Bool(True), t, prim, b1, b2, instance))
        return dataclasses.replace(last, t=last.t + acc)

    return ir.cond(hide & si.is_emitter, passed, lambda: si)


# -- moving surfaces (material-form derivatives: integrators/material.py) -----------
# A point of a moving surface keeps its *material coordinates*: a triangle's
# barycentrics (b1, b2), an analytic shape's object-space point as two
# numbers (shapes.material_coords). Where it lies, its normal and the
# measure of those coordinates follow the triangle's vertices (reads of
# ``tris``) or the shape's to_world (reads of ``shape_data``), derivatives
# included.

def shape_of(ctx, prim):
    """The analytic shape (row of ``shape_data``) of primitive ``prim``, -1 for a triangle."""
    if not ctx.structure.analytic:
        return ir.Int(-1)
    return ir.select(prim >= 0, ctx.geo.prim_shape[ir.maximum(prim, 0)], -1)


def _shape_coords(geo, s, point: Vec):
    """The material coordinates (no derivatives) of analytic shape ``s``'s
    point under the world point ``point``."""
    return tuple(ir.detach(c) for c in shapes.material_coords(geo, s, geo.to_object(s, ir.detach(point))))


def material_coords(ctx, si: SurfaceInteraction):
    """The material coordinates of ``si``'s point (no derivatives)."""
    if not ctx.structure.analytic:
        return ir.detach(si.b1), ir.detach(si.b2)
    s = shape_of(ctx, si.prim)
    return tuple(ir.detach(c) for c in ir.cond(si.hit & (s >= 0), lambda: _shape_coords(ctx.geo, s, si.p),
                                               lambda: (si.b1, si.b2)))


def _on_shape(geo, s, c1, c2):
    # (to_world's cofactor matrix maps object normals to world normals
    # scaled by the area the surface gains: its columns' cross products)
    local, n_local = shapes.material_point(geo, s, c1, c2)
    m = [geo.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
    c0, c1_, c2_ = (Vec(m[c], m[4 + c], m[8 + c]) for c in range(3))
    p = c0 * local.x + c1_ * local.y + c2_ * local.z + Vec(m[3], m[7], m[11])
    n = ir.cross(c1_, c2_) * n_local.x + ir.cross(c2_, c0) * n_local.y + ir.cross(c0, c1_) * n_local.z
    size = ir.sqrt(ir.dot(n, n))
    return p, n * (1.0 / ir.select(size > 0.0, size, 1.0)), size


def surface_point(ctx, prim, c1, c2, instance=None):
    """(point, unit normal up to orientation, measure of the material
    coordinates: a triangle's doubled area, an analytic shape's area per unit
    object area) of primitive ``prim`` at material coordinates (c1, c2),
    following the geometry (derivatives included). ``instance``: in scenes
    with shared instances, the instance a shapegroup's triangle is seen
    through (-1: the scene's own primitive); the point is then placed by
    its to_world."""
    def on_triangle():
        p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(prim, 0))
        if ctx.structure.instanced and instance is not None:
            p0, p1, p2 = (ctx.geo.instances.placed(instance, v) for v in (p0, p1, p2))
        c = ir.cross(p1 - p0, p2 - p0)
        size = ir.sqrt(ir.dot(c, c))
        return p0 * (1.0 - c1 - c2) + p1 * c1 + p2 * c2, c * (1.0 / ir.select(size > 0.0, size, 1.0)), size

    if not ctx.structure.analytic:
        return on_triangle()
    s = shape_of(ctx, prim)
    return ir.cond(s >= 0, lambda: _on_shape(ctx.geo, s, c1, c2), on_triangle)


def point_on_surface(ctx, prim, c1, c2, instance=None) -> Vec:
    """The point at material coordinates (c1, c2) of primitive ``prim``
    (seen through ``instance``: :func:`surface_point`), following it."""
    return surface_point(ctx, prim, c1, c2, instance)[0]


def on_analytic_shape(ctx, s, point: Vec):
    """(point, unit normal up to orientation, measure) of analytic shape
    ``s`` at the material point under the world point ``point`` (taken as
    fixed), following the shape."""
    return _on_shape(ctx.geo, s, *_shape_coords(ctx.geo, s, point))


def following(ctx, si: SurfaceInteraction) -> SurfaceInteraction:
    """``si`` (a hit, or a miss) with its point, geometric normal and
    shading frame following its surface at its material coordinates (the
    shading normal interpolated from the moving ``tri_normals`` in scenes
    with vertex normals; the tangents, where the scene's BSDFs use them,
    from the moving triangle or shape), the normal on the side the traced
    one is; its ``wi`` is left to the caller, its UV held."""
    return followed(ctx, si)[0]


def followed(ctx, si: SurfaceInteraction):
    """(:func:`following`'s interaction, the measure of its material
    coordinates as ``surface_point`` gives it: 1 for a miss)."""
    c1, c2 = material_coords(ctx, si)
    p, n, measure = surface_point(ctx, si.prim, c1, c2, si.instance)
    n = n * ir.copysign(1.0, ir.dot(ir.detach(n), ir.detach(si.ng)))

    def keep(a: Vec, b: Vec) -> Vec:
        return Vec(*(ir.select(si.hit, x, y) for x, y in zip(a, b)))
    ng = keep(n, ir.detach(si.ng))
    ns = ng
    if ctx.structure.shading_normals:
        smooth = triangle.shading_normal(ctx.b["tri_normals"], ir.maximum(si.prim, 0), c1, c2, ng)
        if _through_instance(ctx, si):
            # (a shapegroup's vertex normals are in group space: placed by the instance)
            placed = _placed_shading_normal(ctx, si, c1, c2, ng)
            smooth = Vec(*(ir.select(si.instance >= 0, a, b) for a, b in zip(placed, smooth)))
        ns = Vec(*(ir.select(si.hit & (shape_of(ctx, si.prim) < 0), a, b) for a, b in zip(smooth, ng)))
    p = keep(p, ir.detach(si.o + si.d))
    if ctx.structure.tangents:
        # The tangents (normal and bump maps, anisotropic BSDFs) turn with
        # the surface. A miss keeps the traced frame, and its moving one is
        # built from stand-ins: the traced values may be anything there, and
        # a NaN in the branch not taken would still reach the derivatives.
        up, across = Vec(0.0, 0.0, 1.0), Vec(1.0, 0.0, 0.0)
        du, dv = _moving_tangents(ctx, si, keep(ng, up), p)
        frame = ir.select(si.hit, Frame.along(keep(ns, up), keep(du, across)), si.frame)
        dp_du, dp_dv = ir.select(si.hit, (du, dv), (si.dp_du, si.dp_dv))
    else:
        frame, dp_du, dp_dv = Frame(ns), si.dp_du, si.dp_dv
    # (a miss's point is at infinity: a finite stand-in, so that nothing
    # computed from it and then selected away carries a NaN into derivatives)
    return (dataclasses.replace(si, p=p, ng=ng, frame=frame, dp_du=dp_du, dp_dv=dp_dv,
                                b1=ir.detach(si.b1), b2=ir.detach(si.b2)),
            ir.select(si.hit, measure, 1.0))


def _through_instance(ctx, si: SurfaceInteraction) -> bool:
    """Whether ``si`` may be a hit on a shapegroup's triangle through an instance."""
    return ctx.structure.instanced and si.instance is not None


def _to_group_normal(ctx, instance, n: Vec) -> Vec:
    """A world normal in the group space of ``instance`` (by the transpose
    of its to_world's linear part), normalised."""
    m = ctx.geo.instances._matrix(ir.maximum(instance, 0), layout.INSTANCE_TO_WORLD)
    return ir.normalize(Vec(*(m[c] * n.x + m[4 + c] * n.y + m[8 + c] * n.z for c in range(3))))


def _placed_shading_normal(ctx, si: SurfaceInteraction, c1, c2, ng: Vec) -> Vec:
    """The vertex normals of a shapegroup's triangle hit through an
    instance, interpolated and placed by it (``ng`` where it has none)."""
    inst = ctx.geo.instances
    n = triangle.shading_normal(ctx.b["tri_normals"], ir.maximum(si.prim, 0), c1, c2, _to_group_normal(
        ctx, si.instance, ng))
    return inst.normal_to_world(ir.maximum(si.instance, 0), n)


def _moving_tangents(ctx, si: SurfaceInteraction, ng: Vec, p: Vec) -> tuple[Vec, Vec]:
    """``intersect``'s (dp_du, dp_dv) of the hit, from the moving
    triangle (its normal ``ng``) or analytic shape (its point ``p``); a
    shapegroup's triangle in group space, placed by its instance."""
    def on_triangle():
        return triangle.tangents(ctx.b["tris"], ctx.b["tri_uv"], ir.maximum(si.prim, 0), ng)

    def on_mesh():
        if not _through_instance(ctx, si):
            return on_triangle()
        inst, i = ctx.geo.instances, ir.maximum(si.instance, 0)
        placed = tuple(inst.to_world_dir(i, v) for v in triangle.tangents(
            ctx.b["tris"], ctx.b["tri_uv"], ir.maximum(si.prim, 0), _to_group_normal(ctx, si.instance, ng)))
        return ir.select(si.instance >= 0, placed, on_triangle())

    if not ctx.structure.analytic:
        return on_mesh()
    s = shape_of(ctx, si.prim)
    return ir.cond(s >= 0, lambda: shapes.tangents(ctx.geo, s, p), on_mesh)
