"""The environment map emitter (Mitsuba's ``envmap``): radiance lookup and
importance sampling of directions.

Parameterisation (Mitsuba 3.9): a direction ``d`` in the emitter's frame
(``d = to_world^-1 d_world``) has ``u = atan2(d.x, -d.z) / 2pi`` (wrapped to
[0, 1)) and ``v = acos(d.y) / pi``; +y is up, v = 0 at the zenith. The W
columns of the image are texel-centred in u and periodic; its H rows are
*corner aligned* in v (row y sits at ``v = y / (H - 1)``, the first and last
rows at the poles). Radiance is the bilinear interpolation of the texels
between those positions, times the emitter's ``scale``.

Sampling, as Mitsuba's (its hierarchical bilinear warp): the density
follows the map's luminance. With ``w`` the luminance of each texel times
sin(theta) of its row, the function ``f(u, v)`` that interpolates ``w``
bilinearly between the texel positions is sampled on the unit square, so
the solid-angle pdf is ``f(u, v) / (Z 2 pi^2 sin theta)`` (Z: the integral
of f), nearly proportional to the radiance itself. A patch between four
neighbouring texel positions (columns x, x + 1 mod W; rows y, y + 1) is
chosen by its mass (the mean of its corners: marginal CDF over rows,
conditional CDFs over columns), then a point in it from the linear
marginal of f in v and the linear conditional in u, reusing the
uniforms' remainders from the two discrete choices (so a stratified 2D
sample stays stratified). :meth:`EnvMap.pdf` returns exactly that
density. The scene builder (``jaxrender.scene.textures.envmap_tables``)
makes the tables; they are not differentiable (detached sampling).

``env_dist`` layout for a W x H map: ``1 / (Z 2 pi^2)``, then the
marginal CDF (H - 1), the conditional CDFs ((H - 1) x W, one row each),
the corner weights ``w`` (H x W), then the guide tables of the marginal
(H entries) and of each conditional ((H - 1) x (W + 1)), which narrow the
two searches to a few entries (``sampling.sample_cdf``).
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import sample_cdf
from ..spectrum import RGB, SpectrumType
from ..textures import WRAP_CLAMP, WRAP_REPEAT, Texel, bilinear, corners, wrap_index
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

    def eval(self, d_world: Vec, spectrum: SpectrumType = RGB) -> Vec:
        """Radiance (before ``scale``) arriving from direction ``d_world``
        (pointing away from the scene), of colour type ``spectrum``. Reads
        the texels: call it only where derivatives are wanted (an
        integrator's shading). Spectral texels are (coefficients, scale) of
        an RGB radiance, as Mitsuba's spectral envmap holds them: as there,
        the upsampled spectra of the four around the point and their scales
        are interpolated separately, and their product is times D65."""
        u, v = self.uv(d_world)
        px, py = u * self.fW - 0.5, v * (self.fH - 1.0)
        if not spectrum.spectral:
            return spectrum.color(bilinear(self.t, px, py, WRAP_REPEAT, WRAP_CLAMP))
        v00, v10, v01, v11, wx, wy = corners(self.t, px, py, WRAP_REPEAT, WRAP_CLAMP, 4)
        s00, s10, s01, s11 = (spectrum.color(c[:3]) for c in (v00, v10, v01, v11))
        s = (s00 * (1.0 - wx) + s10 * wx) * (1.0 - wy) + (s01 * (1.0 - wx) + s11 * wx) * wy
        f = (v00[3] * (1.0 - wx) + v10[3] * wx) * (1.0 - wy) + (v01[3] * (1.0 - wx) + v11[3] * wx) * wy
        return spectrum.d65(s * f)

    # Offsets into env_dist.
    def _off_marginal(self):
        return 1

    def _off_conditional(self):
        return 1 + (self.H - 1)

    def _off_weights(self):
        return 1 + (self.H - 1) * (1 + self.W)

    def _off_marginal_guide(self):
        return self._off_weights() + self.H * self.W

    def _off_conditional_guide(self):
        return self._off_marginal_guide() + self.H

    def _patch(self, x, y):
        """The corner weights (w00, w10, w01, w11) of patch (x, y): columns
        x and x + 1 (mod W), rows y and y + 1."""
        dist, W = self.b["env_dist"], self.W
        x1 = ir.select(x + 1 < W, x + 1, 0)
        row = self._off_weights() + y * W
        return dist.read(row + x), dist.read(row + x1), dist.read(row + W + x), dist.read(row + W + x1)

    def _density(self, corners, s, t, sin_theta):
        """Solid-angle pdf at (s, t) within a patch with these corners."""
        w00, w10, w01, w11 = corners
        f = ir.lerp(ir.lerp(w00, w10, s), ir.lerp(w01, w11, s), t)
        norm = self.b["env_dist"].read(0)
        return ir.select(sin_theta > 0.0, f * norm / ir.maximum(sin_theta, 1e-30), 0.0)

    def pdf(self, d_world: Vec):
        """Solid-angle density of :meth:`sample` at ``d_world``."""
        u, v = self.uv(d_world)
        px = u * self.fW - 0.5
        fx = ir.floor(px)
        x = wrap_index(ir.cast(fx, "i32"), self.W, WRAP_REPEAT)
        py = v * (self.fH - 1.0)
        y = ir.clamp(ir.cast(ir.floor(py), "i32"), 0, self.H - 2)
        t = ir.clamp(py - ir.cast(y, "f32"), 0.0, 1.0)
        cos_theta = ir.clamp(self.to_local(d_world).y, -1.0, 1.0)
        return self._density(self._patch(x, y), px - fx, t, ir.safe_sqrt(1.0 - cos_theta * cos_theta))

    def sample(self, u_row, u_col):
        """A direction (world) and its solid-angle pdf from a 2D uniform."""
        dist = self.b["env_dist"]
        W, H = self.W, self.H
        y, t_u = _choose(dist, self._off_marginal(), H - 1, u_row, self._off_marginal_guide())
        x, s_u = _choose(dist, self._off_conditional() + y * W, W, u_col,
                         self._off_conditional_guide() + y * (W + 1))
        corners = self._patch(x, y)
        w00, w10, w01, w11 = corners
        t = sample_linear(t_u, w00 + w10, w01 + w11)
        s = sample_linear(s_u, ir.lerp(w00, w01, t), ir.lerp(w10, w11, t))
        theta = math.pi * (ir.cast(y, "f32") + t) / (self.fH - 1.0)
        phi = TWO_PI * (ir.cast(x, "f32") + 0.5 + s) / self.fW
        sin_t, cos_t = ir.sin(theta), ir.cos(theta)
        d = Vec(ir.sin(phi) * sin_t, cos_t, -ir.cos(phi) * sin_t)
        return ir.normalize(self.to_world(d)), self._density(corners, s, t, ir.abs(sin_t))


def _choose(dist, start, count, u, guide):
    """The entry (0-based) of the discrete distribution whose CDF is
    ``dist[start:start + count]`` (its guide table at ``guide``) that ``u``
    selects, and u's remainder rescaled to [0, 1] within that entry."""
    i = sample_cdf(dist, start, count, u, guide)
    lo = ir.select(i > start, dist.read(i - 1), 0.0)
    hi = dist.read(i)
    return i - start, ir.clamp((u - lo) / ir.maximum(hi - lo, 1e-30), 0.0, 1.0)


def sample_linear(u, a, b):
    """x in [0, 1] with density proportional to (1 - x) a + x b (a, b >= 0)
    from a uniform u: the inverse CDF, written without cancellation."""
    den = a + ir.safe_sqrt(ir.lerp(a * a, b * b, u))
    return ir.clamp(ir.select(den > 0.0, u * (a + b) / ir.maximum(den, 1e-30), u), 0.0, 1.0)


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    w, pdf = EnvMap(ctx.b, sel).sample(u[1], u[2])      # (row, column): the 2D sample
    return DirectionSample(w, ir.Float(INF), ir.Float(1.0), pdf, ir.Bool(False))


TYPE = EmitterType("envmap", sample, environment=True,
                   pdf_direction=lambda ctx, sel, w: EnvMap(ctx.b, sel).pdf(w),
                   eval=lambda ctx, sel, w: EnvMap(ctx.b, sel).eval(w, ctx.spectrum), used=lambda structure: structure.envmap and not structure.sunsky)
