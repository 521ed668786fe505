"""The path-tracing megakernel: one work item per pixel, ``spp`` paths each.

Unidirectional path tracing with next-event estimation and multiple
importance sampling (power heuristic) and Russian roulette, following the
structure of Mitsuba 3's ``path`` integrator so that images agree in
expectation. Geometry is triangles; BSDFs come from ``bsdfs.registry`` and
emitters (area, point, directional, constant) through one dispatch each.

Pixel reconstruction filters are importance sampled (the offset of each
sample within the filter's support is drawn from the filter), so every sample
has weight one; in expectation this equals Mitsuba's weighted splatting.
"""
from __future__ import annotations

from .. import ir
from ..ir import Vec
from . import geometry
from .bsdfs import registry as bsdf_registry
from .geometry import SceneGeometry, closest_hit, occluded
from .sampling import (INV_FOUR_PI, Frame, square_to_uniform_sphere,
                       square_to_uniform_triangle)

# Emitter type ids (jaxrender.scene.scene defines the same).
AREA, POINT, DIRECTIONAL, CONSTANT = 0, 1, 2, 3

INPUTS = {
    "tris": ir.In("f32", (9,)),
    "tri_attr": ir.In("i32", (2,)),          # (bsdf index, emitter index or -1)
    "bvh_bounds": ir.In("f32", (6,)),
    "bvh_links": ir.In("i32", (3,)),
    "bsdf_type": ir.In("i32"),                # index into bsdfs.registry.TYPES
    "bsdf_data": ir.In("f32", (bsdf_registry.ROW,)),
    "emitter_radiance": ir.In("f32", (3,)),
    "light_tris": ir.In("i32"),               # emissive triangles (leaf order index), grouped by emitter
    "light_cdf": ir.In("f32"),                # cumulative area within each emitter's group
    "emitter_meta": ir.In("i32", (4,)),       # type, first light triangle, count, 0
    "emitter_geom": ir.In("f32", (4,)),       # position (point) / direction (directional), area
    "env_emitter": ir.Scalar("i32"),          # the constant emitter, -1 if none
    "camera": ir.In("f32", (19,)),            # to_world (16, row-major), tan_x, tan_y, near_clip
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
}
OUTPUTS = {"image": ir.Out("f32", (3,))}


def _vec3(buf, row, start=0) -> Vec:
    return Vec(buf.read(row, start), buf.read(row, start + 1), buf.read(row, start + 2))


def _max3(v: Vec):
    return ir.maximum(ir.maximum(v.x, v.y), v.z)


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


def _sample_light_triangle(light_cdf, start, count, u):
    """Index in [start, start + count) whose CDF interval contains u (binary search)."""
    def step(s):
        lo, hi = s
        mid = (lo + hi) // 2
        go_right = light_cdf[mid] <= u
        return ir.select(go_right, mid + 1, lo), ir.select(go_right, hi, mid)

    lo, _ = ir.while_loop(lambda s: s[0] < s[1], step, (start, start + count - 1))
    return lo


def _bsdf_query(kind, row, wi: Vec, wo_light: Vec, u1, u2: Vec):
    """Dispatch over the BSDF types: (value and pdf towards the light sample,
    then a sampled direction with its pdf, weight and delta flag). A twosided
    BSDF is evaluated as if seen from its front."""
    flip = (row[bsdf_registry.TWOSIDED_SLOT] > 0.5) & (wi.z < 0.0)
    sz = ir.select(flip, -1.0, 1.0)
    wi_f = Vec(wi.x, wi.y, wi.z * sz)
    wl_f = Vec(wo_light.x, wo_light.y, wo_light.z * sz)

    def branch(t):
        def run():
            params = t.make(row)
            f = t.call("eval", params, wi_f, wl_f)
            pdf = t.call("pdf", params, wi_f, wl_f)
            wo, pdf_s, weight, delta = t.call("sample", params, wi_f, u1, u2)
            return f, pdf, Vec(wo.x, wo.y, wo.z * sz), pdf_s, weight, delta
        return run

    return ir.dispatch(kind, [branch(t) for t in bsdf_registry.TYPES])


def path_kernel(tris, tri_attr, bvh_bounds, bvh_links, bsdf_type, bsdf_data, emitter_radiance, light_tris,
                light_cdf, emitter_meta, emitter_geom, env_emitter, camera, filter_icdf, filter_cdf,
                filter_radius, width, height, spp, max_depth, rr_depth, hide_emitters, seed):
    geo = SceneGeometry(tris, bvh_bounds, bvh_links)
    pixel = ir.item_index()
    W, H = width.value, height.value
    px = ir.cast(pixel % W, "f32")
    py = ir.cast(pixel // W, "f32")
    fw, fh = ir.cast(W, "f32"), ir.cast(H, "f32")
    m = [camera.read(0, k) for k in range(16)]
    tan_x, tan_y, near_clip = camera.read(0, 16), camera.read(0, 17), camera.read(0, 18)
    cam_o = Vec(m[3], m[7], m[11])
    n_emitters = ir.cast(emitter_meta.len, "i32")
    pdf_select = 1.0 / ir.cast(ir.maximum(n_emitters, 1), "f32")  # emitters are chosen uniformly, as Mitsuba
    env = env_emitter.value
    seed_v = seed.value
    max_d = max_depth.value
    rr_d = rr_depth.value
    show_emitters = hide_emitters.value == 0

    def rand(stream, dim):
        return ir.rng.uniform4(seed_v, pixel, dim, stream)

    def one_path(s, acc):
        u = rand(s, 0)
        radius = filter_radius.value
        ox = _filter_offset(filter_icdf, filter_cdf, radius, u[0], px, fw)
        oy = _filter_offset(filter_icdf, filter_cdf, radius, u[1], py, fh)
        sx = (px + 0.5 + ox) / fw
        sy = (py + 0.5 + oy) / fh
        # Mitsuba's camera space looks down +z with +x to the image's left.
        dc = ir.normalize(Vec((1.0 - 2.0 * sx) * tan_x, (1.0 - 2.0 * sy) * tan_y, 1.0))
        d = ir.normalize(Vec(m[0] * dc.x + m[1] * dc.y + m[2] * dc.z,
                             m[4] * dc.x + m[5] * dc.y + m[6] * dc.z,
                             m[8] * dc.x + m[9] * dc.y + m[10] * dc.z))
        t_min0 = near_clip / dc.z

        def bounce(st):
            depth, o, d, t_min, beta, L, prev_pdf, prev_delta, alive = st
            t, tri, _, _ = closest_hit(geo, o, d, t_min, geometry.INF)
            hit = tri >= 0
            p0, p1, p2 = geo.triangle(tri)
            ng = ir.normalize(ir.cross(p1 - p0, p2 - p0))
            p = o + d * t
            attr_bsdf = tri_attr.read(tri, 0)
            attr_em = tri_attr.read(tri, 1)
            is_emitter = hit & (attr_em >= 0)
            cos_l = -ir.dot(ng, d)
            le = _vec3(emitter_radiance, attr_em) * ir.select(is_emitter & (cos_l > 0.0), 1.0, 0.0)
            # A ray that leaves the scene sees the environment.
            has_env = env >= 0
            le = ir.select(hit, le, _vec3(emitter_radiance, env) * ir.select(has_env, 1.0, 0.0))
            # MIS weight of the BSDF strategy for this emitter hit.
            area_e = emitter_geom.read(attr_em, 3)
            light_pdf = ir.select(hit, pdf_select * t * t / (ir.maximum(cos_l, 1e-20) * area_e),
                                  pdf_select * INV_FOUR_PI)
            w_bsdf = ir.select(depth == 0, ir.select(show_emitters, 1.0, 0.0),
                               ir.select(prev_delta, 1.0, _mis(prev_pdf, light_pdf)))
            L = L + beta * le * w_bsdf
            # hide_emitters: a camera ray passes through the emitters it meets
            # (as in Mitsuba), without counting a bounce.
            pass_through = is_emitter & (depth == 0) & ~show_emitters
            active_next = hit & ((max_d < 0) | (depth + 1 < max_d)) & ~pass_through

            frame = Frame(ng)
            wi = frame.to_local(-d)
            kind = bsdf_type[attr_bsdf]
            row = [bsdf_data.read(attr_bsdf, k) for k in range(bsdf_registry.ROW)]
            scale = 1e-4 * (1.0 + _max3(Vec(ir.abs(p.x), ir.abs(p.y), ir.abs(p.z))))

            def spawn(w):
                """Ray origin just off the surface, on the side w leaves towards."""
                return p + ng * ir.copysign(scale, ir.dot(ng, w))
            r = rand(s, 1 + depth * 2)

            # Emitter sample (independent of the BSDF), then one BSDF query for
            # both its value there and the next direction.
            sel = ir.minimum(ir.cast(r[0] * ir.cast(n_emitters, "f32"), "i32"), n_emitters - 1)
            em_kind = emitter_meta.read(sel, 0)
            em = _vec3(emitter_radiance, sel)
            g = _vec3(emitter_geom, sel)
            p_near = p + ng * ir.copysign(scale, -ir.dot(ng, d))  # on the side the ray came from

            def area_light():
                start, count = emitter_meta.read(sel, 1), emitter_meta.read(sel, 2)
                lt = light_tris[_sample_light_triangle(light_cdf, start, count, r[1])]
                q0, q1, q2 = geo.triangle(lt)
                b = square_to_uniform_triangle(Vec(r[2], r[3]))
                q = q0 * (1.0 - b.x - b.y) + q1 * b.x + q2 * b.y
                nl = ir.normalize(ir.cross(q1 - q0, q2 - q0))
                to_light = q - p_near
                dist2 = ir.dot(to_light, to_light)
                dist = ir.sqrt(dist2)
                wo_w = to_light / dist
                cos_light = -ir.dot(nl, wo_w)
                # The back of an area light does not emit: report a zero pdf (no sample).
                front_side = cos_light > 0.0
                pdf = ir.select(front_side, dist2 / (ir.maximum(cos_light, 1e-20) * emitter_geom.read(sel, 3)), 0.0)
                return wo_w, dist, ir.select(front_side, em, Vec(0.0, 0.0, 0.0)), pdf, ir.Bool(False)

            def point_light():
                to_light = g - p_near
                dist2 = ir.dot(to_light, to_light)
                dist = ir.sqrt(dist2)
                return to_light / dist, dist, em / dist2, ir.Float(0.0), ir.Bool(True)

            def directional_light():
                return -g, ir.Float(geometry.INF), em, ir.Float(0.0), ir.Bool(True)

            def environment():
                w = square_to_uniform_sphere(Vec(r[2], r[3]))
                return w, ir.Float(geometry.INF), em, ir.Float(INV_FOUR_PI), ir.Bool(False)

            have_emitters = n_emitters > 0
            wl_w, dist, radiance, pdf_dir, em_delta = ir.dispatch(
                em_kind, [area_light, point_light, directional_light, environment])
            wl = frame.to_local(wl_w)
            r2 = rand(s, 2 + depth * 2)
            f_l, bsdf_pdf_l, wo, bsdf_pdf, weight, bsdf_delta = _bsdf_query(
                kind, row, wi, wl, r2[3], Vec(r2[0], r2[1]))
            pdf_light = pdf_select * pdf_dir
            w_em = ir.select(em_delta, 1.0 / pdf_select, _mis(pdf_light, bsdf_pdf_l) / pdf_light)
            contrib = beta * f_l * radiance * w_em
            useful = active_next & have_emitters & (em_delta | (pdf_dir > 0.0)) & (_max3(contrib) > 0.0)
            blocked = ir.cond(useful, lambda: occluded(geo, spawn(wl_w), wl_w, ir.Float(0.0), dist * (1.0 - 1e-3)),
                              lambda: ir.Bool(True))
            L = L + ir.select(blocked, Vec(0.0, 0.0, 0.0), contrib)
            # Continue with the BSDF sample.
            beta = beta * weight
            d_new = frame.to_world(wo)
            origin = spawn(d_new)
            # Russian roulette, as Mitsuba: after rr_depth bounces.
            b_max = _max3(beta)
            active_next = active_next & (b_max != 0.0)
            rr_prob = ir.minimum(b_max, 0.95)
            rr_active = depth >= rr_d
            beta = beta * ir.select(rr_active, 1.0 / rr_prob, 1.0)
            active_next = active_next & (~rr_active | (r2[2] < rr_prob))
            beyond = p + d * scale
            return (ir.select(pass_through, depth, depth + 1), ir.select(pass_through, beyond, origin),
                    ir.select(pass_through, d, d_new), ir.Float(0.0), ir.select(pass_through, Vec(1.0, 1.0, 1.0), beta),
                    L, ir.select(pass_through, prev_pdf, bsdf_pdf), ir.select(pass_through, prev_delta, bsdf_delta),
                    active_next | pass_through)

        init = (ir.Int(0), cam_o, d, t_min0, Vec(1.0, 1.0, 1.0), Vec(0.0, 0.0, 0.0), ir.Float(1.0),
                ir.Bool(True), ir.Bool(True))
        final = ir.while_loop(lambda st: st[8], bounce, init)
        return acc + final[5]

    total = ir.fori_loop(ir.UInt(0), spp.value, one_path, Vec(0.0, 0.0, 0.0))
    return {"image": total / ir.cast(spp.value, "f32")}


_traced = None


def trace_path() -> ir.Kernel:
    global _traced
    if _traced is None:
        _traced = ir.trace(path_kernel, INPUTS, OUTPUTS, name="path")
    return _traced
