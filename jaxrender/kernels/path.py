"""The path-tracing megakernels: one work item per pixel, ``spp`` paths each.

Unidirectional path tracing with next-event estimation and multiple
importance sampling (power heuristic) and Russian roulette, following the
structure of Mitsuba 3's ``path`` integrator so that images agree in
expectation. Geometry is triangles and, where a scene has them, Mitsuba's
analytic spheres and disks (``geometry``); meshes with vertex normals shade
with the interpolated normal (the BSDF frame), the geometric normal offsets
rays and decides which side of an area light emits. BSDFs come from
``bsdfs.registry`` and emitters (area lights on triangles, spheres and
disks, point, directional, constant, spot, envmap) through one dispatch
each. Textured BSDF parameters (``textures``) and the environment
map's radiance (``envmap``) are read in :func:`_shade`, like every other
differentiable value.

Pixel reconstruction filters are importance sampled (the offset of each
sample within the filter's support is drawn from the filter), so every sample
has weight one; in expectation this equals Mitsuba's weighted splatting. The
image is therefore the plain mean of per-sample radiance, and the adjoint
kernels give each sample the cotangent of its own pixel over spp.

Three kernels come from the same bounce code (:func:`_bounce`):

* the primal kernel (:func:`trace_path`);
* the forward-mode kernel (:func:`trace_forward`): the IR's ``jvp`` of the
  path kernel traced in *differentiable* form, which detaches sampling
  (directions, pdfs, MIS weights, Russian roulette) so that only BSDF values
  and emitted radiance carry derivatives (Zeltner et al. 2021, detached
  sampling);
* the adjoint kernel (:func:`trace_adjoint`): path replay backpropagation,
  or radiative backpropagation (unbiased: the incident radiance at each
  vertex re-estimated by replaying the rest of the path; biased: incident
  radiance taken as 1). It computes the transpose of the forward kernel's
  linear map for the same seed.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from .. import ir
from ..ir import Vec
from . import geometry
from . import textures
from . import emitters, layout
from .bsdfs.base import ParamView
from .context import Structure
from .envmap import EnvMap
from .geometry import SceneGeometry, closest_hit, occluded
from .sampling import (INV_FOUR_PI, Frame, square_to_uniform_disk_concentric, square_to_uniform_sphere,
                       sample_cdf, square_to_uniform_triangle)

SHAPE_ROW = layout.SHAPE_ROW
AREA, POINT, DIRECTIONAL, CONSTANT, SPOT, ENVMAP, AREA_SPHERE, AREA_DISK = (emitters.TYPE_ID[n] for n in emitters.NAMES)
# Mitsuba's math::RayEpsilon<float>: a point within this relative distance
# of a sphere light's surface counts as inside it (outside for a flipped one).
SPHERE_EPSILON = 1500.0 * 2.0 ** -24

INPUTS = {
    "tris": ir.In("f32", (9,)),
    "tri_attr": ir.In("i32", (2,)),          # (bsdf index, emitter index or -1)
    "bvh_bounds": ir.In("f32", (6,)),
    "bvh_links": ir.In("i32", (3,)),
    "bsdf_type": ir.In("i32"),                # index into bsdfs.registry.TYPES
    "bsdf_data": ir.In("f32", (layout.BSDF_ROW,)),
    "emitter_radiance": ir.In("f32", (3,)),
    "light_tris": ir.In("i32"),               # emissive triangles (leaf order index), grouped by emitter
    "light_cdf": ir.In("f32"),                # cumulative area within each emitter's group
    "emitter_meta": ir.In("i32", (4,)),       # type, first light triangle, count, texture (envmap)
    "emitter_geom": ir.In("f32", (4,)),       # position (point) / direction (directional), area
    "env_emitter": ir.Scalar("i32"),          # the constant or envmap emitter, -1 if none
    # Textures (kernels/textures.py) and the envmap's tables (kernels/envmap.py).
    "tri_uv": ir.In("f32", (6,)),             # vertex UVs per triangle (leaf order); 0 rows: no textures
    "bsdf_tex": ir.In("i32", (2,)),           # per BSDF: first texture slot, slot count
    "tex_slots": ir.In("i32", (4,)),          # BSDF row start, width, texture, luminance flag
    "tex_meta": ir.In("i32", (layout.TEX_META_ROW,)),  # offset, width, height, channels, kind, wrap, filter, 0
    "tex_uv": ir.In("f32", (6,)),             # to_uv (2 x 3) per texture
    "texels": ir.In("f32"),                   # all texture values, flat
    "env_dist": ir.In("f32"),                 # envmap sampling tables
    "env_frame": ir.In("f32", (9,)),          # envmap to_world rotation (row-major)
    "camera": ir.In("f32", (layout.CAMERA_ROW,)),
    "filter_icdf": ir.In("f32"),              # inverse CDF of the 1-D pixel filter, offsets in pixels
    "filter_cdf": ir.In("f32"),               # its CDF on a uniform grid over [-radius, radius]
    "filter_radius": ir.Scalar("f32"),
    "width": ir.Scalar("u32"),
    "height": ir.Scalar("u32"),
    "spp": ir.Scalar("u32"),
    "max_depth": ir.Scalar("i32"),            # -1: unbounded
    "rr_depth": ir.Scalar("i32"),
    "hide_emitters": ir.Scalar("i32"),
    "seed": ir.Scalar("u32"),
    "bsdf_table": ir.In("f32"),               # per-BSDF tables, TABLE_STRIDE floats a BSDF (primitives/bsdf_tables.py)
    "emitter_frame": ir.In("f32", (16,)),     # world-to-local 3x3 (row-major), per-type constants (spot)
    # Shading normals (Structure.shading_normals): world vertex normals per
    # triangle (leaf order), a zero row where the face normal is used.
    "tri_normals": ir.In("f32", (9,)),
    # Analytic shapes (Structure.analytic): per leaf entry -1 (triangle) or
    # the shape's row in shape_data (geometry.SceneGeometry).
    "prim_shape": ir.In("i32"),
    "shape_data": ir.In("f32", (SHAPE_ROW,)),
    # Triangle-only scenes: the 8-wide BVH of ir.bvh_query (the skip-link
    # BVH above then has no rows); no rows with analytic shapes.
    "wide_nodes": ir.In("i32", (56,)),
    "wide_leaves": ir.In("i32", (40,)),
}
OUTPUTS = {"image": ir.Out("f32", (3,))}

# Float inputs whose values may carry derivatives: what the forward kernel
# takes tangents of and the adjoint kernel accumulates gradients into.
DIFFERENTIABLE_INPUTS = ("bsdf_data", "emitter_radiance", "texels")
# Ways to run the adjoint (see trace_adjoint).
ADJOINT_METHODS = ("prb", "rb", "rb_biased")


def _vec3(buf, row, start=0) -> Vec:
    return Vec(buf.read(row, start), buf.read(row, start + 1), buf.read(row, start + 2))


def _max3(v: Vec):
    return ir.maximum(ir.maximum(v.x, v.y), v.z)


def _zero3() -> Vec:
    return Vec(0.0, 0.0, 0.0)


def _mis(a, b):
    """Power heuristic weight of a strategy with pdf ``a`` against ``b``."""
    a2 = a * a
    return ir.select(a > 0.0, a2 / (a2 + b * b), 0.0)


def _lookup_icdf(table, u):
    """Linear interpolation in an inverse-CDF table sampled at uniform u."""
    n = ir.cast(table.len, "f32")
    x = u * (n - 1.0)
    i = ir.cast(ir.floor(x), "i32")
    f = x - ir.floor(x)
    return ir.lerp(table[i], table[i + 1], f)


def _lookup_cdf(table, radius, x):
    n = ir.cast(table.len, "f32")
    g = ir.clamp((x + radius) / (2.0 * radius), 0.0, 1.0) * (n - 1.0)
    i = ir.cast(ir.floor(g), "i32")
    return ir.lerp(table[i], table[i + 1], g - ir.floor(g))


def _filter_offset(icdf, cdf, radius, u, pixel, size):
    """Offset from the pixel centre drawn from the filter restricted to the
    image (Mitsuba splats only samples taken inside the image, so a border
    pixel averages over the part of its filter that lies inside)."""
    lo = ir.maximum(-radius, -(pixel + 0.5))
    hi = ir.minimum(radius, size - pixel - 0.5)
    c0 = _lookup_cdf(cdf, radius, lo)
    c1 = _lookup_cdf(cdf, radius, hi)
    return ir.clamp(_lookup_icdf(icdf, c0 + u * (c1 - c0)), lo, hi)


def _continuation_weight(t, params, wi: Vec, wo: Vec, pdf, weight: Vec, delta, diff: bool) -> Vec:
    """The BSDF sample weight f/pdf. In differentiable form the sampled
    direction and pdf are constants (detached sampling): for a smooth lobe
    the derivative is that of eval(wo) / pdf; for a delta lobe, whose
    weight is value / (discrete lobe probability), the probability's
    derivative is cancelled by multiplying with pdf / detach(pdf)."""
    if not diff:
        return weight
    wo_d = ir.detach(wo)
    pdf_d = ir.detach(pdf)
    e = t.call("eval", params, wi, wo_d)
    safe = pdf_d > 0.0
    inv_pdf = ir.select(safe, 1.0 / ir.select(safe, pdf_d, 1.0), 0.0)
    smooth = ir.detach(weight) + (e - ir.detach(e)) * inv_pdf
    ratio = ir.select(safe, pdf / ir.select(safe, pdf_d, 1.0), 0.0)
    return ir.select(delta, weight * ratio, smooth)


class _TableRow:
    """Reader of one BSDF's precomputed table in the ``bsdf_table`` buffer."""

    def __init__(self, buf, bsdf):
        self.buf = buf
        self.base = ir.cast(bsdf, "u32") * ir.UInt(layout.BSDF_TABLE_STRIDE)

    def read(self, i):
        return self.buf.read(self.base + (i if isinstance(i, ir.Var) else ir.UInt(i)))


def make_params(t, row, table, b=None):
    """The params object of BSDF type ``t`` from its row (and table)."""
    return t.make(ParamView(t, row, table, b))


def _bsdf_query(types, kind, row, wi: Vec, wo_light: Vec, u1, u2: Vec, diff: bool, table=None, b=None):
    """Dispatch over the BSDF types: (value and pdf towards the light sample,
    then a sampled direction with its pdf, weight and delta flag). A twosided
    BSDF is evaluated as if seen from its front. ``table``: the BSDF's
    :class:`_TableRow`."""
    flip = (row[layout.TWOSIDED_SLOT] > 0.5) & (wi.z < 0.0)
    sz = ir.select(flip, -1.0, 1.0)
    wi_f = Vec(wi.x, wi.y, wi.z * sz)
    wl_f = Vec(wo_light.x, wo_light.y, wo_light.z * sz)

    def branch(t):
        def run():
            params = make_params(t, row, table, b)
            f = t.call("eval", params, wi_f, wl_f)
            pdf = t.call("pdf", params, wi_f, wl_f)
            wo, pdf_s, weight, delta = t.call("sample", params, wi_f, u1, u2)
            weight = _continuation_weight(t, params, wi_f, wo, pdf_s, weight, delta, diff)
            return f, pdf, Vec(wo.x, wo.y, wo.z * sz), pdf_s, weight, delta
        return run

    return ir.dispatch(kind, [branch(t) for t in types])


@dataclasses.dataclass
class _Ctx:
    """The kernel's buffers and per-work-item constants."""
    b: dict                 # input name -> Buffer
    geo: SceneGeometry
    pixel: Any
    px: Any
    py: Any
    seed: Any
    diff: bool
    structure: Structure

    def rand(self, stream, dim):
        return ir.rng.uniform4(self.seed, self.pixel, dim, stream)

    @property
    def n_emitters(self):
        return ir.cast(self.b["emitter_meta"].len, "i32")

    @property
    def pdf_select(self):
        # Emitters are chosen uniformly, as in Mitsuba.
        return 1.0 / ir.cast(ir.maximum(self.n_emitters, 1), "f32")


def _context(b: dict, seed, diff: bool, structure: Structure = Structure()) -> _Ctx:
    pixel = ir.item_index()
    W = b["width"].value
    if structure.analytic:
        geo = SceneGeometry(b["tris"], b["bvh_bounds"], b["bvh_links"], b["prim_shape"], b["shape_data"])
    else:
        geo = SceneGeometry(b["tris"], b["bvh_bounds"], b["bvh_links"],
                            wide=(b["wide_nodes"], b["wide_leaves"]))
    return _Ctx(b, geo, pixel,
                ir.cast(pixel % W, "f32"), ir.cast(pixel // W, "f32"), seed, diff, structure)


def _camera_ray(c: _Ctx, s):
    """Primary ray of sample ``s``: (origin, direction, t_min)."""
    b = c.b
    cam = b["camera"]
    m = [cam.read(0, k) for k in range(16)]
    tan_x, tan_y, near_clip = cam.read(0, 16), cam.read(0, 17), cam.read(0, 18)
    fw, fh = ir.cast(b["width"].value, "f32"), ir.cast(b["height"].value, "f32")
    u = c.rand(s, 0)
    radius = b["filter_radius"].value
    ox = _filter_offset(b["filter_icdf"], b["filter_cdf"], radius, u[0], c.px, fw)
    oy = _filter_offset(b["filter_icdf"], b["filter_cdf"], radius, u[1], c.py, fh)
    sx = (c.px + 0.5 + ox) / fw
    sy = (c.py + 0.5 + oy) / fh
    # Mitsuba's camera space looks down +z with +x to the image's left.
    dc = ir.normalize(Vec((1.0 - 2.0 * sx) * tan_x, (1.0 - 2.0 * sy) * tan_y, 1.0))
    d = ir.normalize(Vec(m[0] * dc.x + m[1] * dc.y + m[2] * dc.z,
                         m[4] * dc.x + m[5] * dc.y + m[6] * dc.z,
                         m[8] * dc.x + m[9] * dc.y + m[10] * dc.z))
    return Vec(m[3], m[7], m[11]), d, near_clip / dc.z


@dataclasses.dataclass
class _Hit:
    t: Any
    tri: Any          # primitive index (leaf order), -1 on a miss
    b1: Any           # barycentrics of a triangle hit (of its 2nd and 3rd vertex); an analytic shape's (u, v)
    b2: Any
    d: Vec            # ray direction
    hit: Any
    p: Vec
    ng: Vec           # geometric normal: ray offsets, the side an area light emits from
    frame: Frame      # shading frame (vertex normals, else ng): what BSDFs see
    wi: Vec
    attr_bsdf: Any
    attr_em: Any
    is_emitter: Any
    cos_l: Any
    scale: Any
    o: Vec = None     # ray origin (emitter_pdf of sphere lights)


def _triangle_surface(c: _Ctx, tri, o: Vec, d: Vec, t, b1, b2):
    """Point, geometric and shading normal, (b1, b2) of a triangle hit."""
    p0, p1, p2 = c.geo.triangle(tri)
    ng = ir.normalize(ir.cross(p1 - p0, p2 - p0))
    ns = ng
    if c.structure.shading_normals:
        nb = c.b["tri_normals"]
        w0 = 1.0 - b1 - b2
        n = Vec(*(nb.read(tri, k) * w0 + nb.read(tri, 3 + k) * b1 + nb.read(tri, 6 + k) * b2 for k in range(3)))
        l2 = ir.dot(n, n)
        smooth = l2 > 0.0
        ns = ir.select(smooth, n * ir.rsqrt(ir.select(smooth, l2, 1.0)), ng)
    return o + d * t, ng, ns, b1, b2


def _shape_surface(c: _Ctx, s, o: Vec, d: Vec, t):
    """Point, normals and Mitsuba's (u, v) of a hit on analytic shape ``s``.
    UVs only where textures need them."""
    geo = c.geo
    uv = c.structure.tex_slots > 0

    def sphere():
        centre = geo.center(s)
        n = ir.normalize(o + d * t - centre)
        p = centre + n * geo.shape_value(s, geometry.RADIUS)   # re-projected onto the sphere, as Mitsuba
        u = v = ir.Float(0.0)
        if uv:
            local = geo.to_object(s, p)
            phi = ir.atan2(local.y, local.x)
            phi = ir.select(phi < 0.0, phi + 2.0 * math.pi, phi)
            u = phi * (0.5 / math.pi)
            v = ir.acos(ir.clamp(local.z, -1.0, 1.0)) * (1.0 / math.pi)
        ng = n * geo.shape_value(s, geometry.SIGN)
        return p, ng, u, v

    def disk():
        p = o + d * t
        ng = Vec(*(geo.shape_value(s, geometry.NORMAL + k) for k in range(3)))
        u = v = ir.Float(0.0)
        if uv:
            local = geo.to_object(s, p)
            u = ir.sqrt(local.x * local.x + local.y * local.y)
            v = ir.atan2(local.y, local.x) * (0.5 / math.pi)
            v = ir.select(v < 0.0, v + 1.0, v)
        return p, ng, u, v

    p, ng, u, v = ir.cond(geo.shape_kind(s) == geometry.SPHERE, sphere, disk)
    return p, ng, ng, u, v


def _intersect(c: _Ctx, o: Vec, d: Vec, t_min) -> _Hit:
    t, tri, b1, b2 = closest_hit(c.geo, o, d, t_min, geometry.INF)
    if c.structure.analytic:
        s = c.geo.prim_shape[tri]
        p, ng, ns, b1, b2 = ir.cond((tri >= 0) & (s >= 0), lambda: _shape_surface(c, s, o, d, t),
                                    lambda: _triangle_surface(c, tri, o, d, t, b1, b2))
    else:
        p, ng, ns, b1, b2 = _triangle_surface(c, tri, o, d, t, b1, b2)
    attr = c.b["tri_attr"]
    attr_em = attr.read(tri, 1)
    hit = tri >= 0
    frame = Frame(ns)
    scale = 1e-4 * (1.0 + _max3(Vec(ir.abs(p.x), ir.abs(p.y), ir.abs(p.z))))
    return _Hit(t, tri, b1, b2, d, hit, p, ng, frame, frame.to_local(-d), attr.read(tri, 0), attr_em,
                hit & (attr_em >= 0), -ir.dot(ng, d), scale, o)


@dataclasses.dataclass
class _EmitterSample:
    sel: Any          # emitter index
    w: Vec            # direction towards it (world)
    dist: Any
    factor: Any       # radiance scale from geometry (1/dist^2 for point lights, 0 behind an area light)
    pdf_dir: Any      # solid-angle pdf given the emitter (0 for delta emitters)
    delta: Any
    is_env: Any       # an envmap sample (its radiance is looked up in _shade)


def spot_falloff(frame, sel, w: Vec):
    """Mitsuba's spot falloff in world direction ``w`` (from the light):
    1 within the beam width, then linear in angle down to 0 at the cutoff."""
    local = Vec(*(ir.dot(Vec(frame.read(sel, 3 * k), frame.read(sel, 3 * k + 1), frame.read(sel, 3 * k + 2)), w)
                  for k in range(3)))
    cos_t = local.z * ir.rsqrt(ir.dot(local, local))
    cos_cutoff, cos_beam = frame.read(sel, 9), frame.read(sel, 10)
    cutoff, inv_width = frame.read(sel, 11), frame.read(sel, 12)
    beam = ir.select(cos_t >= cos_beam, 1.0, (cutoff - ir.acos(ir.clamp(cos_t, -1.0, 1.0))) * inv_width)
    return ir.select(cos_t > cos_cutoff, beam, 0.0)


def _sample_emitter(c: _Ctx, h: _Hit, d: Vec, r) -> _EmitterSample:
    """Choose an emitter and a point/direction on it; no radiance is read here
    (that is the differentiable part, in _shade)."""
    b = c.b
    n_em = c.n_emitters
    sel = ir.minimum(ir.cast(r[0] * ir.cast(n_em, "f32"), "i32"), n_em - 1)
    meta, geom = b["emitter_meta"], b["emitter_geom"]
    g = _vec3(geom, sel)
    p_near = h.p + h.ng * ir.copysign(h.scale, -ir.dot(h.ng, d))  # on the side the ray came from

    def towards(q, nl, pdf_fn):
        """Direction sample towards point q (normal nl) on an area light;
        pdf_fn(dist^2, cos at the light) its solid-angle density. The back
        of an area light does not emit: a zero pdf (no sample)."""
        to_light = q - p_near
        dist2 = ir.dot(to_light, to_light)
        dist = ir.sqrt(dist2)
        wo_w = to_light / dist
        cos_light = -ir.dot(nl, wo_w)
        front_side = cos_light > 0.0
        pdf = ir.select(front_side, pdf_fn(dist2, ir.maximum(cos_light, 1e-20)), 0.0)
        return wo_w, dist, ir.select(front_side, 1.0, 0.0), pdf, ir.Bool(False)

    def by_area(dist2, cos_light):
        return dist2 / (cos_light * geom.read(sel, 3))

    def area_light():
        start, count = meta.read(sel, 1), meta.read(sel, 2)
        lt = b["light_tris"][sample_cdf(b["light_cdf"], start, count, r[1])]
        q0, q1, q2 = c.geo.triangle(lt)
        bc = square_to_uniform_triangle(Vec(r[2], r[3]))
        q = q0 * (1.0 - bc.x - bc.y) + q1 * bc.x + q2 * bc.y
        nl = ir.normalize(ir.cross(q1 - q0, q2 - q0))
        return towards(q, nl, by_area)

    def disk_light():
        s = meta.read(sel, 1)
        x = square_to_uniform_disk_concentric(Vec(r[2], r[3]))
        q = c.geo.to_world(s, x.x, x.y)
        nl = Vec(*(c.geo.shape_value(s, geometry.NORMAL + k) for k in range(3)))
        return towards(q, nl, by_area)

    def sphere_light():
        s = meta.read(sel, 1)
        n, cone_pdf = _sample_sphere_light(c, s, p_near, Vec(r[2], r[3]))
        q = c.geo.center(s) + n * c.geo.shape_value(s, geometry.RADIUS)
        return towards(q, n * c.geo.shape_value(s, geometry.SIGN),
                       lambda dist2, cos_light: ir.select(cone_pdf > 0.0, cone_pdf, by_area(dist2, cos_light)))

    def point_light():
        to_light = g - p_near
        dist2 = ir.dot(to_light, to_light)
        dist = ir.sqrt(dist2)
        return to_light / dist, dist, 1.0 / dist2, ir.Float(0.0), ir.Bool(True)

    def directional_light():
        return -g, ir.Float(geometry.INF), ir.Float(1.0), ir.Float(0.0), ir.Bool(True)

    def spot_light():
        to_light = g - p_near
        dist2 = ir.dot(to_light, to_light)
        dist = ir.sqrt(dist2)
        w = to_light / dist
        return w, dist, spot_falloff(b["emitter_frame"], sel, -w) / dist2, ir.Float(0.0), ir.Bool(True)

    def environment():
        w = square_to_uniform_sphere(Vec(r[2], r[3]))
        return w, ir.Float(geometry.INF), ir.Float(1.0), ir.Float(INV_FOUR_PI), ir.Bool(False)

    def envmap():
        w, pdf = EnvMap(b, sel).sample(r[1], r[2], r[3])
        return w, ir.Float(geometry.INF), ir.Float(1.0), pdf, ir.Bool(False)

    kind = meta.read(sel, 0)
    branches = [area_light, point_light, directional_light, environment, spot_light]
    if c.structure.envmap or c.structure.analytic:
        branches.append(envmap if c.structure.envmap else environment)
    if c.structure.analytic:
        branches += [sphere_light, disk_light]
    w, dist, factor, pdf_dir, delta = ir.dispatch(kind, branches)
    is_env = (kind == ENVMAP) if c.structure.envmap else ir.Bool(False)
    return _EmitterSample(sel, w, dist, factor, pdf_dir, delta, is_env)


def _sphere_cone(c: _Ctx, s, p: Vec):
    """The sphere light ``s`` seen from ``p``: (vector to its centre, its
    squared length, sin^2 and 1 - cos of the half angle of the cone it
    subtends, 1 / (2 pi (1 - cos)) if p lies outside it, else 0). Outside
    is Mitsuba's test: beyond the radius shrunk by SPHERE_EPSILON (grown for
    a flipped sphere, whose own surface points then sample it by area).
    1 - cos is computed as sin^2 / (1 + cos): exact for tiny cones too."""
    geo = c.geo
    r = geo.shape_value(s, geometry.RADIUS)
    dc = geo.center(s) - p
    dc2 = ir.dot(dc, dc)
    r_adj = r * ir.select(geo.shape_value(s, geometry.SIGN) < 0.0, 1.0 + SPHERE_EPSILON, 1.0 - SPHERE_EPSILON)
    outside = dc2 > r_adj * r_adj
    sin2 = ir.minimum(r * r / ir.select(outside, dc2, 1.0), 1.0)
    cos_max = ir.safe_sqrt(1.0 - sin2)
    one_minus_cos = sin2 / (1.0 + cos_max)
    cone_pdf = ir.select(outside & (one_minus_cos > 0.0),
                         1.0 / (2.0 * math.pi * ir.select(one_minus_cos > 0.0, one_minus_cos, 1.0)), 0.0)
    return dc, dc2, sin2, one_minus_cos, cone_pdf


def _sample_sphere_light(c: _Ctx, s, p: Vec, u: Vec):
    """Mitsuba's sphere sampling: from outside, a direction uniform in the
    cone the sphere subtends (Akalin's visible-sphere mapping to the
    point's outward normal); from inside, a point uniform on the sphere.
    Returns (outward unit normal at the sampled point, the cone's solid-angle
    pdf, 0 if sampled by area)."""
    dc, dc2, sin2, om, cone_pdf = _sphere_cone(c, s, p)

    def cone():
        inv_dc = ir.rsqrt(dc2)
        inv_sin = 1.0 / ir.sqrt(sin2)
        # cos(theta) = 1 - u (1 - cos_max); sin^2 written without cancellation.
        x = u.x * om
        sin_t2 = x * (2.0 - x)
        cos_t = ir.safe_sqrt(1.0 - sin_t2)
        cos_a = sin_t2 * inv_sin + cos_t * ir.safe_sqrt(1.0 - sin_t2 * inv_sin * inv_sin)
        sin_a = ir.safe_sqrt(1.0 - cos_a * cos_a)
        phi = 2.0 * math.pi * u.y
        local = Vec(ir.cos(phi) * sin_a, ir.sin(phi) * sin_a, cos_a)
        return Frame(dc * -inv_dc).to_world(local)

    n = ir.cond(cone_pdf > 0.0, cone, lambda: square_to_uniform_sphere(u))
    return n, cone_pdf


def emitter_pdf(c: _Ctx, h: _Hit, env_pdf=INV_FOUR_PI):
    """Solid-angle density with which :func:`_sample_emitter` (emitter
    choice included) produces the direction of the ray that found ``h``: the
    emitter it hit, or the environment if it left the scene (``env_pdf``:
    the environment's own density in that direction, uniform unless it is an
    envmap). Meaningful where that ray sees emitted radiance."""
    area_e = c.b["emitter_geom"].read(h.attr_em, 3)
    pdf = c.pdf_select * h.t * h.t / (ir.maximum(h.cos_l, 1e-20) * area_e)
    if c.structure.analytic:
        meta = c.b["emitter_meta"]
        sphere = h.is_emitter & (meta.read(h.attr_em, 0) == AREA_SPHERE)
        cone = ir.cond(sphere, lambda: _sphere_cone(c, meta.read(h.attr_em, 1), h.o)[4], lambda: ir.Float(0.0))
        pdf = ir.select(cone > 0.0, c.pdf_select * cone, pdf)
    return ir.select(h.hit, pdf, c.pdf_select * env_pdf)


def _shade(c: _Ctx, h: _Hit, es: _EmitterSample, r2, depth, prev_pdf, prev_delta, show_emitters):
    """Everything at a vertex that reads differentiable parameters.

    Returns (emitted radiance times its MIS weight, the unshadowed
    emitter-sample contribution, sampled direction (world), its pdf, the
    continuation weight, delta flag); multiplying by the path throughput is
    left to the caller."""
    b = c.b
    rad = b["emitter_radiance"]
    env = b["env_emitter"].value
    dt = ir.detach if c.diff else (lambda x: x)
    le = _vec3(rad, h.attr_em) * ir.select(h.is_emitter & (h.cos_l > 0.0), 1.0, 0.0)
    # A ray that leaves the scene sees the environment: constant, or an
    # envmap's texels (and its sampling density, for MIS).
    def env_map():
        e = EnvMap(b, env)
        return e.eval(h.d), e.pdf(h.d)
    env_le, env_pdf = Vec(1.0, 1.0, 1.0), ir.Float(INV_FOUR_PI)
    if c.structure.envmap:
        sees_map = ~h.hit & (env >= 0) & (b["emitter_meta"].read(env, 0) == ENVMAP)
        env_le, env_pdf = ir.cond(sees_map, env_map, lambda: (env_le, env_pdf))
    le = ir.select(h.hit, le, _vec3(rad, env) * env_le * ir.select(env >= 0, 1.0, 0.0))
    # MIS weight of the BSDF strategy for this emitter hit.
    light_pdf = emitter_pdf(c, h, env_pdf)
    w_bsdf = ir.select(depth == 0, ir.select(show_emitters, 1.0, 0.0),
                       ir.select(prev_delta, 1.0, _mis(dt(prev_pdf), light_pdf)))
    row = [b["bsdf_data"].read(h.attr_bsdf, k) for k in range(layout.BSDF_ROW)]
    if c.structure.tex_slots:
        row = textures.apply_textures(b, h.attr_bsdf, row, h.tri, h.b1, h.b2, h.hit, c.structure.tex_slots)
    wl = h.frame.to_local(es.w)
    f_l, bsdf_pdf_l, wo, bsdf_pdf, weight, bsdf_delta = _bsdf_query(
        c.structure.bsdf_types, b["bsdf_type"][h.attr_bsdf], row, h.wi, wl, r2[3], Vec(r2[0], r2[1]), c.diff,
        _TableRow(b["bsdf_table"], h.attr_bsdf), b)
    em = _vec3(rad, es.sel) * es.factor
    if c.structure.envmap:
        em = em * ir.cond(es.is_env, lambda: EnvMap(b, es.sel).eval(es.w), lambda: Vec(1.0, 1.0, 1.0))
    pdf_light = c.pdf_select * es.pdf_dir
    w_em = ir.select(es.delta, 1.0 / c.pdf_select, _mis(pdf_light, dt(bsdf_pdf_l)) / pdf_light)
    wo_w = h.frame.to_world(wo)
    if c.diff:
        wo_w, bsdf_pdf = ir.detach(wo_w), ir.detach(bsdf_pdf)
    return le * w_bsdf, f_l * em * w_em, wo_w, bsdf_pdf, weight, bsdf_delta


# Loop state of one path: depth, origin, direction, t_min, throughput,
# accumulated radiance, previous BSDF pdf, previous delta flag, alive,
# eta (product of the relative IORs of the refractions so far, as Mitsuba's
# path integrator keeps it for Russian roulette).
def _initial_state(o: Vec, d: Vec, t_min):
    return (ir.Int(0), o, d, t_min, Vec(1.0, 1.0, 1.0), _zero3(), ir.Float(1.0), ir.Bool(True), ir.Bool(True),
            ir.Float(1.0))


def _sampled_eta(c: _Ctx, h: _Hit, wo_w: Vec):
    """Relative IOR of the sampled interaction (Mitsuba's bs.eta): eta_it of
    a dielectric the sample refracted through, else 1. Not differentiated
    (only Russian roulette uses it, detached)."""
    kind = c.b["bsdf_type"][h.attr_bsdf]
    cos_i = h.wi.z
    refracted = ir.dot(h.frame.n, wo_w) * cos_i < 0.0
    eta = ir.Float(1.0)
    for idx, t in enumerate(c.structure.bsdf_types):
        if t.eta is not None:
            e = c.b["bsdf_data"].read(h.attr_bsdf, t.slot(t.eta))
            eta = ir.select(kind == idx, ir.select(cos_i >= 0.0, e, 1.0 / e), eta)
    eta = ir.select(refracted, eta, 1.0)
    return ir.detach(eta) if c.diff else eta


def _bounce(c: _Ctx, s, st, shade=_shade):
    """One path vertex: intersect, shade (through ``shade``, which the
    adjoint wraps), trace the shadow ray, continue with the BSDF sample.
    Returns the next state and what the adjoint needs about this vertex."""
    b = c.b
    depth, o, d, t_min, beta, L, prev_pdf, prev_delta, alive = st[:9]
    max_d, rr_d = b["max_depth"].value, b["rr_depth"].value
    show_emitters = b["hide_emitters"].value == 0
    h = _intersect(c, o, d, t_min)
    # hide_emitters: a camera ray passes through the emitters it meets
    # (as in Mitsuba), without counting a bounce.
    pass_through = h.is_emitter & (depth == 0) & ~show_emitters
    active_next = h.hit & ((max_d < 0) | (depth + 1 < max_d)) & ~pass_through
    es = _sample_emitter(c, h, d, c.rand(s, 1 + depth * 2))
    r2 = c.rand(s, 2 + depth * 2)
    le_w, nee, wo_w, bsdf_pdf, weight, bsdf_delta = shade(c, h, es, r2, depth, prev_pdf, prev_delta,
                                                          show_emitters)
    L = L + beta * le_w

    def spawn(w):
        """Ray origin just off the surface, on the side w leaves towards."""
        return h.p + h.ng * ir.copysign(h.scale, ir.dot(h.ng, w))
    contrib = beta * nee
    useful = active_next & (c.n_emitters > 0) & (es.delta | (es.pdf_dir > 0.0)) & (_max3(contrib) > 0.0)
    blocked = ir.cond(useful, lambda: occluded(c.geo, spawn(es.w), es.w, ir.Float(0.0), es.dist * (1.0 - 1e-3)),
                      lambda: ir.Bool(True))
    L = L + ir.select(blocked, _zero3(), contrib)
    # Continue with the BSDF sample.
    beta_in = beta
    beta = beta * weight
    # Russian roulette, as Mitsuba: after rr_depth bounces, on the
    # throughput times eta^2 (undoing the radiance scaling of refractions).
    eta = st[9] * _sampled_eta(c, h, wo_w)
    b_max = _max3(beta)
    active_next = active_next & (b_max != 0.0)
    rr_prob = ir.minimum(b_max * eta * eta, 0.95)
    if c.diff:
        rr_prob = ir.detach(rr_prob)
    rr_active = depth + 1 >= rr_d   # Mitsuba counts this vertex first (depth += 1, then roulette)
    beta = beta * ir.select(rr_active, 1.0 / rr_prob, 1.0)
    active_next = active_next & (~rr_active | (r2[2] < rr_prob))
    beyond = h.p + d * h.scale
    new = (ir.select(pass_through, depth, depth + 1), ir.select(pass_through, beyond, spawn(wo_w)),
           ir.select(pass_through, d, wo_w), ir.Float(0.0), ir.select(pass_through, Vec(1.0, 1.0, 1.0), beta),
           L, ir.select(pass_through, prev_pdf, bsdf_pdf), ir.select(pass_through, prev_delta, bsdf_delta),
           active_next | pass_through, ir.select(pass_through, st[9], eta))
    info = {"beta": beta_in, "blocked": blocked, "weight": weight, "continues": active_next & ~pass_through}
    return new, info


def _trace(c: _Ctx, s, st):
    """Radiance of the rest of a path from loop state ``st``."""
    final = ir.while_loop(lambda q: q[8], lambda q: _bounce(c, s, q)[0], st)
    return final[5]


def path_kernel(diff: bool = False, structure: Structure = Structure(), **b):
    c = _context(b, b["seed"].value, diff, structure)

    def one_path(s, acc):
        o, d, t_min = _camera_ray(c, s)
        return acc + _trace(c, s, _initial_state(o, d, t_min))

    spp = b["spp"].value
    total = ir.fori_loop(ir.UInt(0), spp, one_path, _zero3())
    return {"image": total / ir.cast(spp, "f32")}


def _adjoint_kernel(active: tuple, method: str, structure: Structure, **b):
    """Accumulates, into ``grad_<name>`` for each active input, the image
    cotangent ``grad_image`` pulled back through the differentiable path
    kernel with the same seed (see the module docstring)."""
    c = _context(b, b["seed"].value, True, structure)
    # Passes that only need radiance (PRB's first pass, RB's re-estimates)
    # run the plain kernel: its values equal the differentiable form's, which
    # would evaluate every BSDF once more per vertex for nothing.
    c_plain = dataclasses.replace(c, diff=False)
    grads = {b[n]: b["grad_" + n] for n in active}
    spp = b["spp"].value
    g = b["grad_image"]
    inv_spp = 1.0 / ir.cast(spp, "f32")
    d_l = Vec(g.read(c.pixel, 0), g.read(c.pixel, 1), g.read(c.pixel, 2)) * inv_spp

    def one_path(s, carry):
        o, d, t_min = _camera_ray(c, s)
        st0 = _initial_state(o, d, t_min)
        total = _trace(c_plain, s, st0) if method == "prb" else _zero3()

        def replay(st):
            pullbacks = []

            def shade_with_vjp(*args):
                outs, pb = ir.vjp(lambda: _shade(*args), buffer_grads=grads)
                pullbacks.append(pb)
                return outs

            new, info = _bounce(c, s, st, shade_with_vjp)
            beta, weight = info["beta"], info["weight"]
            if method == "prb":
                # Radiance the rest of the path brings (exactly 0 when it ends).
                rest = total - new[5]
            elif method == "rb":
                rest = ir.cond(info["continues"], lambda: _trace(c_plain, s, new[:5] + (_zero3(),) + new[6:]),
                               _zero3)
            else:  # rb_biased: incident radiance taken as 1
                rest = ir.select(info["continues"], new[4], _zero3())
            nz = Vec(*(w != 0.0 for w in weight))
            ct_weight = Vec(*(ir.select(z, dl * r / ir.select(z, w, 1.0), 0.0)
                              for z, dl, r, w in zip(nz, d_l, rest, weight)))
            ct_weight = ir.select(info["continues"], ct_weight, _zero3())
            ct_nee = ir.select(info["blocked"], _zero3(), d_l * beta)
            pullbacks[0]((d_l * beta, ct_nee, (None, None, None), None, ct_weight, None))
            return new

        ir.while_loop(lambda q: q[8], replay, st0)
        return carry

    ir.fori_loop(ir.UInt(0), spp, one_path, ir.Int(0))
    return {}


def _suffix(structure: Structure) -> str:
    return structure.suffix()


@functools.lru_cache(maxsize=None)
def trace_path(structure: Structure = Structure()) -> ir.Kernel:
    """The primal path kernel for scenes of the given structure."""
    return ir.trace(functools.partial(path_kernel, False, structure), INPUTS, OUTPUTS,
                    name="path" + _suffix(structure))


def _check_active(active: tuple) -> tuple:
    bad = [n for n in active if n not in DIFFERENTIABLE_INPUTS]
    if bad or not active:
        raise ValueError(f"differentiable inputs must be a non-empty subset of {DIFFERENTIABLE_INPUTS}, got {active}")
    return tuple(sorted(set(active)))


@functools.lru_cache(maxsize=None)
def trace_forward(active: tuple, structure: Structure = Structure()) -> ir.Kernel:
    """Forward-mode kernel: inputs of the path kernel plus ``d_<name>`` (the
    tangent of each active input, same shape); output ``image`` is the image
    tangent. Linear in the tangents."""
    active = _check_active(active)
    inputs = dict(INPUTS)
    for n in active:
        inputs["d_" + n] = INPUTS[n]

    def fwd(**b):
        prim = {k: b[k] for k in INPUTS}
        _, tangent = ir.jvp(lambda: path_kernel(True, structure, **prim), (), (),
                            buffer_tangents={b[n]: b["d_" + n] for n in active})
        return {"image": tangent["image"]}

    return ir.trace(fwd, inputs, OUTPUTS, name="path_forward_" + "_".join(active) + _suffix(structure))


@functools.lru_cache(maxsize=None)
def trace_adjoint(active: tuple, method: str = "prb", structure: Structure = Structure()) -> ir.Kernel:
    """Adjoint kernel: inputs of the path kernel plus ``grad_image`` (the
    image cotangent, (pixels, 3)); accumulators ``grad_<name>`` with the
    shape of each active input. ``method`` is "prb" (path replay
    backpropagation), "rb" (radiative backpropagation, incident radiance
    re-estimated at every vertex by replaying the rest of the path: quadratic
    in path length, same result as prb) or "rb_biased" (incident radiance 1)."""
    active = _check_active(active)
    if method not in ADJOINT_METHODS:
        raise ValueError(f"adjoint method must be one of {ADJOINT_METHODS}, got {method!r}")
    inputs = dict(INPUTS)
    inputs["grad_image"] = ir.In("f32", (3,))
    outputs = {"grad_" + n: ir.Accum(INPUTS[n].dtype, INPUTS[n].item_shape) for n in active}
    return ir.trace(functools.partial(_adjoint_kernel, active, method, structure), inputs, outputs,
                    name=f"path_adjoint_{method}_" + "_".join(active) + _suffix(structure))
