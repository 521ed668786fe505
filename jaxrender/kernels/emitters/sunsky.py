"""Mitsuba's ``sunsky`` emitter (RGB): the Hosek-Wilkie sky and sun seen by
rays that leave the scene.

Radiance, as Mitsuba evaluates it: the sky model per RGB channel,
``(1 + p0 exp(p1 / (cos theta + 0.01))) (p2 + p3 exp(p4 gamma) + p5
cos^2 gamma + p6 chi(p8, gamma) + p7 sqrt(cos theta)) L`` with theta the
angle to the zenith and gamma the angle to the sun, plus the sun within a
cone around the sun direction: a constant radiance, or with
``complex_sun`` Mitsuba's polynomial in the elevation of the direction and
in the cosine of the angle to the sun's limb (its table, 45 segments of
4 x 6 RGB coefficients, is a DATA texture). Both are 0 below the horizon
(the sun below it has been turned off by the scene builder). The
coefficients, reduced by the builder (``jaxrender.scene.sunsky``) for the
emitter's turbidity, albedo and sun elevation, sit in its ``emitter_frame``
row (``layout.FRAME_SKY_*`` ...), the sun direction and ``1 - cos`` of the
cone's half angle in its ``emitter_geom`` row.

Sampling: with the row's sky probability the sky, by the environment-map
sampling of :class:`~.envmap.EnvMap` over a map of the sky's luminance
(built at load time; only its sampling tables are read, its texels never
enter the radiance), else the sun, uniformly in its cone as Mitsuba samples
it. Mitsuba samples its sky with another mixture (a truncated Gaussian
around the sun's azimuth); only the images' expectation is the same.

The cone test compares the squared chord ``|w - sun|^2`` with ``2 (1 -
cos)``: for a quarter-degree cone, ``dot(w, sun) >= cos`` in single
precision would blur the cone's edge by about one percent of its area.
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout
from ..textures import Texel
from .base import INF, DirectionSample, EmitterType
from .envmap import EnvMap

TWO_PI = 2.0 * math.pi
SUN_SEGMENTS, SUN_ELEVATION_TERMS, SUN_LIMB_TERMS = 45, 4, 6


class Sunsky:
    """Kernel-side view of sunsky emitter ``emitter`` (the scene's environment)."""

    def __init__(self, b: dict, emitter):
        self.b, self.emitter = b, emitter
        geom, frame = b["emitter_geom"], b["emitter_frame"]
        self.sun = Vec(*(geom.read(emitter, k) for k in range(3)))
        self.cone = geom.read(emitter, layout.GEOM_SUN_CONE)          # 1 - cos(half angle)
        self.zenith = self._vec(layout.FRAME_ZENITH)
        self.sky_prob = frame.read(emitter, layout.FRAME_SKY_PROB)

    def _vec(self, at: int) -> Vec:
        return Vec(*(self.b["emitter_frame"].read(self.emitter, at + k) for k in range(3)))

    def in_sun(self, w: Vec):
        """Whether unit direction ``w`` lies within the sun's cone."""
        chord = w - self.sun
        return ir.dot(chord, chord) <= 2.0 * self.cone

    def eval(self, w: Vec) -> Vec:
        """Radiance arriving from unit direction ``w`` (world, pointing away
        from the scene)."""
        cos_theta = ir.dot(self.zenith, w)
        above = cos_theta >= 0.0
        ct = ir.maximum(cos_theta, 0.0)
        chord = w - self.sun
        gamma = 2.0 * ir.asin(ir.minimum(0.5 * ir.sqrt(ir.dot(chord, chord)), 1.0))
        cos_gamma = ir.clamp(ir.dot(self.sun, w), -1.0, 1.0)
        frame = self.b["emitter_frame"]
        sky_rad = self._vec(layout.FRAME_SKY_RADIANCE)
        table = ir.cast(frame.read(self.emitter, layout.FRAME_SUN_TABLE), "i32")
        lit = above & self.in_sun(w)
        sun_rad = Vec(*ir.cond(lit & (table >= 0), lambda: tuple(self._complex_sun(table, ct, gamma)),
                               lambda: tuple(self._vec(layout.FRAME_SUN_RADIANCE))))
        sun = ir.select(lit, 1.0, 0.0)
        out = []
        for c in range(3):
            p = [frame.read(self.emitter, layout.FRAME_SKY_PARAMS + 3 * k + c) for k in range(9)]
            c1 = 1.0 + p[0] * ir.exp(p[1] / (ct + 0.01))
            base = ir.maximum(1.0 + p[8] * p[8] - 2.0 * p[8] * cos_gamma, 1e-30)
            chi = (1.0 + cos_gamma * cos_gamma) / (base * ir.sqrt(base))
            c2 = (p[2] + p[3] * ir.exp(p[4] * gamma) + p[5] * cos_gamma * cos_gamma + p[6] * chi
                  + p[7] * ir.sqrt(ct))
            out.append(ir.select(above, c1 * c2 * sky_rad[c], 0.0) + sun * sun_rad[c])
        return Vec(*out)

    def _complex_sun(self, table, cos_theta, gamma) -> Vec:
        """Mitsuba's complex_sun radiance (scaled by the builder) towards
        a direction at ``cos_theta`` from the zenith and ``gamma`` from the
        sun's centre: in the segment of its elevation e (uniform in
        cbrt(e / (pi / 2))), sum_k sum_j c[k, j] x^k cos(psi)^j, with x the
        elevation past the segment's start and psi the angle between the
        sun's radius and the direction."""
        elevation = 0.5 * math.pi - ir.acos(ir.minimum(cos_theta, 1.0))
        t = ir.pow(ir.maximum(elevation, 0.0) * (2.0 / math.pi), 1.0 / 3.0)
        segment = ir.minimum(ir.cast(ir.floor(t * SUN_SEGMENTS), "i32"), SUN_SEGMENTS - 1)
        start = ir.cast(segment, "f32") * (1.0 / SUN_SEGMENTS)
        x = elevation - 0.5 * math.pi * start * start * start
        sin_gamma = ir.sin(gamma)
        sin2_radius = self.b["emitter_frame"].read(self.emitter, layout.FRAME_SUN_SIN2)
        cos_psi = ir.safe_sqrt(1.0 - sin_gamma * sin_gamma / sin2_radius)
        texel = Texel(self.b, table)
        first = segment * (SUN_ELEVATION_TERMS * SUN_LIMB_TERMS)
        total, x_k = Vec(0.0, 0.0, 0.0), ir.Float(1.0)
        for k in range(SUN_ELEVATION_TERMS):
            limb, cos_j = Vec(0.0, 0.0, 0.0), ir.Float(1.0)
            for j in range(SUN_LIMB_TERMS):
                limb = limb + texel.fetch(first + k * SUN_LIMB_TERMS + j) * cos_j
                cos_j = cos_j * cos_psi
            total = total + limb * x_k
            x_k = x_k * x
        return total

    def sun_pdf(self, w: Vec):
        return ir.select(self.in_sun(w), 1.0 / (TWO_PI * self.cone), 0.0)

    def pdf(self, w: Vec):
        """Solid-angle density of :meth:`sample` at ``w``."""
        return self.sky_prob * EnvMap(self.b, self.emitter).pdf(w) + (1.0 - self.sky_prob) * self.sun_pdf(w)

    def sample_sun(self, x, y) -> Vec:
        """A direction uniform in the sun's cone (Mitsuba's
        square_to_uniform_cone), written with ``1 - cos`` so that the
        quarter-degree cone keeps its precision."""
        h = x * self.cone                                   # 1 - cos(theta)
        sin_theta = ir.safe_sqrt(h * (2.0 - h))
        phi = TWO_PI * y
        t1, t2 = self._vec(layout.FRAME_SUN_T1), self._vec(layout.FRAME_SUN_T2)
        lateral = t1 * (ir.cos(phi) * sin_theta) + t2 * (ir.sin(phi) * sin_theta)
        return ir.normalize(self.sun + (lateral - self.sun * h))

    def sample(self, choose, x, y):
        """A direction (world) and its density: the sky with probability
        ``sky_prob`` (``choose`` below it), else the sun."""
        sky_w, _ = EnvMap(self.b, self.emitter).sample(x, y)
        w = ir.select(choose < self.sky_prob, sky_w, self.sample_sun(x, y))
        return w, self.pdf(w)


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    w, pdf = Sunsky(ctx.b, sel).sample(*u)
    return DirectionSample(w, ir.Float(INF), ir.Float(1.0), pdf, ir.Bool(False))


TYPE = EmitterType("sunsky", sample, environment=True,
                   pdf_direction=lambda ctx, sel, w: Sunsky(ctx.b, sel).pdf(w),
                   eval=lambda ctx, sel, w: Sunsky(ctx.b, sel).eval(w), used=lambda structure: structure.sunsky)
