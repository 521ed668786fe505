"""A plain JAX path tracer: the baseline a JAX user would otherwise write.

Written in jax.numpy only, differentiated with plain ``jax.grad``, so the
autodiff tape stores every path vertex: its memory grows with
max_depth x spp, which is what ``bench_grad.py`` measures against jaxrender.

Scope (enough for the Cornell box): triangle geometry from a loaded
``jaxrender.Scene``, one-sided diffuse BSDFs, area emitters, perspective
camera.

* Intersection: brute force. Every ray is tested against every triangle
  (Moller-Trumbore, broadcast to (rays, triangles) arrays), closest hit by
  argmin. No BVH.
* Paths: unidirectional, fixed length (no Russian roulette). Each vertex
  does next-event estimation and samples a cosine-weighted BSDF direction.
  The two strategies are combined with MIS (power heuristic), like
  jaxrender's ``path`` kernel and Mitsuba's ``path``/``prb``, so the
  estimators agree in expectation; ``max_depth`` means the same thing
  (1: emitters seen by the camera only, 2: direct lighting, ...).
* Light sampling: a point uniformly by area over all emissive triangles
  (with one area emitter, as in the Cornell box, this is the same density
  as Mitsuba's: emitter chosen uniformly, then a point by area).
* Camera: jaxrender's ray model (camera buffer: to_world, tan_x, tan_y,
  near_clip). Pixel samples are the pixel centre plus uniform jitter, i.e.
  a box filter (jaxrender and Mitsuba use the scene's gaussian filter: the
  images differ slightly at edges, their means agree).
* Random numbers: ``jax.random`` (threefry), one key per bounce.
* Memory: all ``H * W * spp`` paths are traced at once, the bounce loop is a
  ``lax.scan`` (so compile time does not grow with max_depth).

Usage::

    tracer = PlainTracer(scene, max_depth=8)
    image = tracer.render(params, jax.random.key(0), spp=16)   # (H, W, 3)
    loss = lambda p: jnp.mean((tracer.render(p, key, spp) - target) ** 2)
    grads = jax.grad(loss)(params)   # params: {"red.reflectance.value": ...}
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

INV_PI = 1.0 / math.pi


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


def _cross(a, b):
    return jnp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                      a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                      a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1)


def _normalize(v):
    return v / jnp.linalg.norm(v, axis=-1, keepdims=True)


def _mis(a, b):
    """Power heuristic weight of a strategy with density a against b."""
    a2 = a * a
    return jnp.where(a > 0, a2 / jnp.maximum(a2 + b * b, 1e-30), 0.0)


class PlainTracer:
    """Brute-force path tracer over a ``jaxrender.Scene``'s triangles."""

    def __init__(self, scene, max_depth: int | None = None):
        from jaxrender.kernels.bsdfs import registry
        from jaxrender.scene.scene import EMITTER_AREA

        self.scene = scene
        self.max_depth = int(scene.integrator.get("max_depth", 8) if max_depth is None else max_depth)
        if self.max_depth < 1:
            raise ValueError("PlainTracer needs a finite max_depth >= 1 (no Russian roulette)")
        for t, fields, twosided in scene.bsdfs:
            if registry.TYPES[t].name != "diffuse" or twosided:
                raise ValueError("PlainTracer supports one-sided diffuse BSDFs only, "
                                 f"not {registry.TYPES[t].name}{' (twosided)' if twosided else ''}")
        if np.any(scene.emitter_meta[:, 0] != EMITTER_AREA) or len(scene.emitter_keys) == 0:
            raise ValueError("PlainTracer supports area emitters only (and needs at least one)")
        self.albedo_keys = [fields[0][0] for _, fields, _ in scene.bsdfs]
        self.emitter_keys = list(scene.emitter_keys)

        tri = np.asarray(scene.triangles, np.float32).reshape(-1, 3, 3)
        self.p0 = jnp.asarray(tri[:, 0])
        self.e1 = jnp.asarray(tri[:, 1] - tri[:, 0])
        self.e2 = jnp.asarray(tri[:, 2] - tri[:, 0])
        n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        self.ng = jnp.asarray(n / np.linalg.norm(n, axis=1, keepdims=True), jnp.float32)
        self.bsdf_idx = jnp.asarray(scene.tri_attr[:, 0], jnp.int32)
        self.em_idx = jnp.asarray(scene.tri_attr[:, 1], jnp.int32)
        light = np.nonzero(scene.tri_attr[:, 1] >= 0)[0]
        area = 0.5 * np.linalg.norm(n[light], axis=1)
        self.light_tris = jnp.asarray(light, jnp.int32)
        self.light_cdf = jnp.asarray(np.cumsum(area) / area.sum(), jnp.float32)
        self.light_area = float(area.sum())

        cam = scene.camera
        self.width, self.height = cam.width, cam.height
        m = np.asarray(scene.params[scene.camera_key], np.float32).reshape(4, 4)
        self.cam_rot = jnp.asarray(m[:3, :3])
        self.cam_pos = jnp.asarray(m[:3, 3])
        self.tan_x, self.tan_y, self.near_clip = float(cam.tan_x), float(cam.tan_y), float(cam.near_clip)

    # ------------------------------------------------------------ geometry
    def intersect(self, o, d, t_min, t_max):
        """Closest hit of rays (R, 3) against all triangles: (t, triangle);
        t = inf (triangle arbitrary) on a miss. Moller-Trumbore, brute force."""
        d_ = d[:, None, :]
        pv = _cross(d_, self.e2[None])                       # (R, N, 3)
        det = _dot(self.e1[None], pv)
        inv_det = 1.0 / jnp.where(det == 0, 1.0, det)
        tv = o[:, None, :] - self.p0[None]
        u = _dot(tv, pv) * inv_det
        qv = _cross(tv, self.e1[None])
        v = _dot(d_, qv) * inv_det
        t = _dot(self.e2[None], qv) * inv_det
        ok = ((det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1)
              & (t > t_min[:, None]) & (t < t_max[:, None]))
        t = jnp.where(ok, t, jnp.inf)
        idx = jnp.argmin(t, axis=1)
        return jnp.take_along_axis(t, idx[:, None], axis=1)[:, 0], idx

    # ------------------------------------------------------------ shading
    def _emitted(self, radiance, d, t, tri):
        """Radiance of the emitter each ray hits, MIS-weighted against light
        sampling (unless it is the camera ray), and its hit mask."""
        hit = jnp.isfinite(t)
        ts = jnp.where(hit, t, 1.0)
        em = self.em_idx[tri]
        cos_l = -_dot(self.ng[tri], d)
        emits = hit & (em >= 0) & (cos_l > 0)
        le = jnp.where(emits[:, None], radiance[jnp.maximum(em, 0)], 0.0)
        light_pdf = ts * ts / (jnp.maximum(cos_l, 1e-20) * self.light_area)
        return le, light_pdf, hit, ts

    def _vertex(self, carry, key, albedo, radiance, first):
        """One path vertex: emission found by the incoming ray, next-event
        estimation, then a cosine-weighted BSDF sample for the next ray."""
        o, d, t_min, beta, L, prev_pdf = carry
        R = o.shape[0]
        t, tri = self.intersect(o, d, t_min, jnp.full((R,), jnp.inf, jnp.float32))
        le, light_pdf, hit, ts = self._emitted(radiance, d, t, tri)
        w = 1.0 if first else _mis(prev_pdf, light_pdf)[:, None]
        L = L + beta * le * w

        p = o + d * ts[:, None]
        ng = self.ng[tri]
        cos_i = -_dot(ng, d)
        front = hit & (cos_i > 0)                # one-sided diffuse: the back is black
        alb = albedo[self.bsdf_idx[tri]]
        scale = 1e-4 * (1.0 + jnp.max(jnp.abs(p), axis=-1))
        p_off = p + ng * scale[:, None]          # just above the surface, on the lit side
        u = jax.random.uniform(key, (R, 5), jnp.float32)

        # Next-event estimation: a point on the lights, uniform by area.
        k = jnp.clip(jnp.searchsorted(self.light_cdf, u[:, 0], side="right"), 0, self.light_tris.shape[0] - 1)
        lt = self.light_tris[k]
        su = jnp.sqrt(u[:, 1])
        b1, b2 = 1.0 - su, u[:, 2] * su
        q = self.p0[lt] + self.e1[lt] * b1[:, None] + self.e2[lt] * b2[:, None]
        to_light = q - p_off
        dist = jnp.linalg.norm(to_light, axis=-1)
        wl = to_light / dist[:, None]
        cos_light = -_dot(self.ng[lt], wl)
        cos_o = _dot(ng, wl)
        t_sh, _ = self.intersect(p_off, wl, jnp.zeros((R,), jnp.float32), dist * (1.0 - 1e-3))
        visible = front & (cos_light > 0) & (cos_o > 0) & ~jnp.isfinite(t_sh)
        pdf_l = dist * dist / (jnp.maximum(cos_light, 1e-20) * self.light_area)
        pdf_b = jnp.maximum(cos_o, 0.0) * INV_PI
        w_l = pdf_l / (pdf_l * pdf_l + pdf_b * pdf_b)   # MIS weight / pdf_l
        f = alb * (jnp.maximum(cos_o, 0.0) * INV_PI)[:, None]
        le_l = radiance[self.em_idx[lt]]
        L = L + jnp.where(visible[:, None], beta * f * le_l * w_l[:, None], 0.0)

        # BSDF sample: cosine-weighted hemisphere about the geometric normal.
        r = jnp.sqrt(u[:, 3])
        phi = 2.0 * math.pi * u[:, 4]
        lx, ly, lz = r * jnp.cos(phi), r * jnp.sin(phi), jnp.sqrt(jnp.maximum(1.0 - u[:, 3], 0.0))
        sgn = jnp.where(ng[:, 2] >= 0, 1.0, -1.0)       # orthonormal basis (Duff et al. 2017)
        a = -1.0 / (sgn + ng[:, 2])
        bb = ng[:, 0] * ng[:, 1] * a
        s = jnp.stack([1.0 + sgn * ng[:, 0] ** 2 * a, sgn * bb, -sgn * ng[:, 0]], -1)
        tt = jnp.stack([bb, sgn + ng[:, 1] ** 2 * a, -ng[:, 1]], -1)
        d_new = _normalize(s * lx[:, None] + tt * ly[:, None] + ng * lz[:, None])
        beta = jnp.where(front[:, None], beta * alb, 0.0)   # weight f cos / pdf = albedo
        pdf_new = lz * INV_PI
        return (jnp.where(front[:, None], p_off, o), d_new, jnp.zeros((R,), jnp.float32), beta, L, pdf_new)

    # ------------------------------------------------------------ render
    def tables(self, params=None):
        """Albedo (B, 3) and radiance (E, 3) tables, params overriding scene.params."""
        p = dict(self.scene.params)
        if params:
            p.update(params)
        albedo = jnp.stack([jnp.asarray(p[k], jnp.float32).reshape(3) for k in self.albedo_keys])
        radiance = jnp.stack([jnp.asarray(p[k], jnp.float32).reshape(3) for k in self.emitter_keys])
        return albedo, radiance

    def render(self, params, key, spp: int):
        """(H, W, 3) image, differentiable w.r.t. the values of ``params``
        (reflectances ``*.reflectance.value``, ``*.emitter.radiance.value``)."""
        albedo, radiance = self.tables(params)
        H, W = self.height, self.width
        n = H * W * spp
        pix = jnp.arange(n, dtype=jnp.int32) // spp
        k_cam, k_path = jax.random.split(key)
        u = jax.random.uniform(k_cam, (n, 2), jnp.float32)
        sx = ((pix % W).astype(jnp.float32) + u[:, 0]) / W
        sy = ((pix // W).astype(jnp.float32) + u[:, 1]) / H
        # Camera space looks down +z with +x to the image's left (as Mitsuba).
        dc = _normalize(jnp.stack([(1.0 - 2.0 * sx) * self.tan_x, (1.0 - 2.0 * sy) * self.tan_y,
                                   jnp.ones_like(sx)], -1))
        d = _normalize(dc @ self.cam_rot.T)
        o = jnp.broadcast_to(self.cam_pos, (n, 3))
        zeros3 = jnp.zeros((n, 3), jnp.float32)
        carry = (o, d, self.near_clip / dc[:, 2], jnp.ones((n, 3), jnp.float32), zeros3,
                 jnp.zeros((n,), jnp.float32))
        keys = jax.random.split(k_path, self.max_depth)
        if self.max_depth > 1:
            carry = self._vertex(carry, keys[0], albedo, radiance, first=True)
            if self.max_depth > 2:
                def step(c, k):
                    return self._vertex(c, k, albedo, radiance, first=False), None
                carry, _ = jax.lax.scan(step, carry, keys[1:self.max_depth - 1])
        # Last vertex: only the emission the final ray finds.
        o, d, t_min, beta, L, prev_pdf = carry
        t, tri = self.intersect(o, d, t_min, jnp.full((n,), jnp.inf, jnp.float32))
        first = self.max_depth == 1
        le, light_pdf, _, _ = self._emitted(radiance, d, t, tri)
        w = 1.0 if first else _mis(prev_pdf, light_pdf)[:, None]
        L = L + beta * le * w
        return L.reshape(H, W, spp, 3).mean(axis=2)
