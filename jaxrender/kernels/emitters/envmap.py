"""The environment map emitter (Mitsuba's ``envmap``): radiance lookup and
importance sampling of directions.

Parameterisation (Mitsuba 3.9): a direction ``d`` in the emitter's frame
(``d = to_world^-1 d_world``) has ``u = atan2(d.x, -d.z) / 2pi`` (wrapped to
[0, 1)) and ``v = acos(d.y) / pi``; +y is up, v = 0 at the zenith. The W
columns of the image are texel-centred in u and periodic; its H rows are
*corner aligned* in v (row y sits at ``v = y / (H - 1)``, the first and last
rows at the poles). Radiance is the bilinear interpolation of the texels
between those positions, times the emitter's ``scale``.

Sampling: the sphere is cut into the W x (H - 1) patches between four
neighbouring texel positions (columns x, x + 1 mod W; rows y, y + 1). A
patch is chosen with probability proportional to the mean luminance of its
corners times its solid angle (marginal CDF over rows, conditional CDFs
over columns), then a direction is drawn uniformly in solid angle inside
it (u uniform, cos theta uniform). So the solid-angle pdf is constant per
patch, finite at the poles, and it is exactly what :func:`EnvMap.pdf`
returns. The scene builder (``jaxrender.scene.textures.envmap_tables``)
makes the tables; they are not differentiable (detached sampling).

``env_dist`` layout for a W x H map: cos(theta_y) for the H rows, then the
marginal CDF (H - 1), the conditional CDFs ((H - 1) x W, one row each),
then the patch pdfs ((H - 1) x W).
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import sample_cdf
from ..textures import WRAP_CLAMP, WRAP_REPEAT, Texel, bilinear, wrap_index
from .base import INF, DirectionSample, EmitterType

INV_PI = 1.0 / math.pi
INV_TWO_PI = 0.5 / math.pi
TWO_PI = 2.0 * math.pi


class EnvMap:
    """Kernel-side view of the environment map of emitter ``emitter``."""

    def __init__(self, b: dict, emitter):
        self.b = b
        self.t = Texel(b, b["emitter_meta"].read(emitter, layout.META_TEXTURE))
        self.W, self.H = self.t.width, self.t.height
        self.fW, self.fH = ir.cast(self.W, "f32"), ir.cast(self.H, "f32")
        f = b["env_frame"]
        self.m = [f.read(0, k) for k in range(9)]

    # Frames: to_world is a rotation (checked by the scene builder).
    def to_local(self, d: Vec) -> Vec:
        m = self.m
        return Vec(m[0] * d.x + m[3] * d.y + m[6] * d.z,
                   m[1] * d.x + m[4] * d.y + m[7] * d.z,
                   m[2] * d.x + m[5] * d.y + m[8] * d.z)

    def to_world(self, d: Vec) -> Vec:
        m = self.m
        return Vec(m[0] * d.x + m[1] * d.y + m[2] * d.z,
                   m[3] * d.x + m[4] * d.y + m[5] * d.z,
                   m[6] * d.x + m[7] * d.y + m[8] * d.z)

    def uv(self, d_world: Vec):
        d = self.to_local(d_world)
        u = ir.atan2(d.x, -d.z) * INV_TWO_PI
        u = ir.clamp(u - ir.floor(u), 0.0, 1.0)
        v = ir.acos(ir.clamp(d.y, -1.0, 1.0)) * INV_PI
        return u, ir.clamp(v, 0.0, 1.0)

    def eval(self, d_world: Vec) -> Vec:
        """Radiance (before ``scale``) arriving from direction ``d_world``
        (pointing away from the scene). Reads the texels: call it only
        where derivatives are wanted (an integrator's shading)."""
        u, v = self.uv(d_world)
        return bilinear(self.t, u * self.fW - 0.5, v * (self.fH - 1.0), WRAP_REPEAT, WRAP_CLAMP)

    # Offsets into env_dist.
    def _off_marginal(self):
        return self.H

    def _off_conditional(self):
        return self.H + (self.H - 1)

    def _off_pdf(self):
        return self.H + (self.H - 1) * (1 + self.W)

    def pdf(self, d_world: Vec):
        """Solid-angle density of :meth:`sample` at ``d_world``."""
        u, v = self.uv(d_world)
        x = wrap_index(ir.cast(ir.floor(u * self.fW - 0.5), "i32"), self.W, WRAP_REPEAT)
        y = ir.clamp(ir.cast(ir.floor(v * (self.fH - 1.0)), "i32"), 0, self.H - 2)
        return self.b["env_dist"].read(self._off_pdf() + y * self.W + x)

    def sample(self, u_row, u_col, u_phi):
        """A direction (world) and its solid-angle pdf from three uniforms."""
        dist = self.b["env_dist"]
        W, H = self.W, self.H
        om = self._off_marginal()
        i = sample_cdf(dist, om, H - 1, u_row)
        y = i - om
        lo = ir.select(y > 0, dist.read(i - 1), 0.0)
        hi = dist.read(i)
        t = ir.clamp((u_row - lo) / ir.maximum(hi - lo, 1e-30), 0.0, 1.0)
        oc = self._off_conditional() + y * W
        j = sample_cdf(dist, oc, W, u_col)
        x = j - oc
        c0, c1 = dist.read(y), dist.read(y + 1)
        cos_t = ir.clamp(c0 - t * (c0 - c1), -1.0, 1.0)
        sin_t = ir.safe_sqrt(1.0 - cos_t * cos_t)
        phi = TWO_PI * (ir.cast(x, "f32") + 0.5 + u_phi) / self.fW
        d = Vec(ir.sin(phi) * sin_t, cos_t, -ir.cos(phi) * sin_t)
        pdf = dist.read(self._off_pdf() + y * W + x)
        return ir.normalize(self.to_world(d)), pdf


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    w, pdf = EnvMap(ctx.b, sel).sample(u[1], u[2], u[0])      # (row, column): the 2D sample
    return DirectionSample(w, ir.Float(INF), ir.Float(1.0), pdf, ir.Bool(False))


TYPE = EmitterType("envmap", sample, environment=True,
                   pdf_direction=lambda ctx, sel, w: EnvMap(ctx.b, sel).pdf(w),
                   eval=lambda ctx, sel, w: EnvMap(ctx.b, sel).eval(w), used=lambda structure: structure.envmap)
