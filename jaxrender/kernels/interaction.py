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

    @classmethod
    def none(cls) -> "KnownHit":
        return cls(ir.Bool(False), ir.Float(0.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.Int(-1))

    @classmethod
    def ahead(cls, valid, si: "SurfaceInteraction", t_moved) -> "KnownHit":
        """The hit ``si`` seen from ``t_moved`` further along its ray, where ``valid``."""
        # (an analytic shape's surface is recomputed from t alone: its b1, b2
        # here are its (u, v), never read back)
        return cls(valid, si.t - t_moved, si.prim, si.b1, si.b2, si.instance)


def intersect(ctx, o: Vec, d: Vec, t_min, t_max=INF, known: "KnownHit | None" = None) -> SurfaceInteraction:
    """The first surface along the ray (o, d) with t_min < t < t_max;
    ``known``: where that is already known (no BVH query there)."""
    st = ctx.structure
    if known is None:
        t, prim, b1, b2, instance = closest_hit(ctx.geo, o, d, t_min, t_max)
    else:
        t, prim, b1, b2, instance = ir.cond(known.valid,
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


# -- moving triangles (material-form derivatives: integrators/material.py) -----------
def point_on_triangle(ctx, prim, b1, b2) -> Vec:
    """The point at barycentrics (b1, b2) of triangle ``prim``, following
    the triangle's vertices (reads of ``tris``, derivatives included)."""
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(prim, 0))
    return p0 * (1.0 - b1 - b2) + p1 * b1 + p2 * b2


def doubled_area(ctx, prim):
    """Twice the area of triangle ``prim``: the measure of its barycentric coordinates."""
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(prim, 0))
    c = ir.cross(p1 - p0, p2 - p0)
    return ir.sqrt(ir.dot(c, c))


def following(ctx, si: SurfaceInteraction) -> SurfaceInteraction:
    """``si`` (a triangle hit, or a miss) with its point, geometric normal
    and shading frame following the triangle at its barycentrics (flat
    shading: the kernels that call this run for scenes without vertex
    normals); its ``wi`` is left to the caller."""
    p0, p1, p2 = triangle.vertices(ctx.b["tris"], ir.maximum(si.prim, 0))
    p = p0 * (1.0 - si.b1 - si.b2) + p1 * si.b1 + p2 * si.b2
    ng = ir.normalize(ir.cross(p1 - p0, p2 - p0))

    def keep(a: Vec, b: Vec) -> Vec:
        return Vec(*(ir.select(si.hit, x, y) for x, y in zip(a, b)))
    ng = keep(ng, si.ng)
    # (a miss's point is at infinity: a finite stand-in, so that nothing
    # computed from it and then selected away carries a NaN into derivatives)
    return dataclasses.replace(si, p=keep(p, ir.detach(si.o + si.d)), ng=ng, frame=Frame(ng))
