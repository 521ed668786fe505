"""Microfacet distributions (GGX / Trowbridge-Reitz and Beckmann) with Smith
shadowing-masking, following Mitsuba 3's ``MicrofacetDistribution``.

The distribution type and whether visible normals are sampled are trace-time
choices; the roughness ``alpha_u`` / ``alpha_v`` are runtime IR values
(isotropic when equal). All vectors are in the local frame (z = normal).

Sampling:

* visible normals (default): GGX uses Heitz 2018 ("Sampling the GGX
  distribution of visible normals", hemisphere projection), Beckmann uses
  Heitz & d'Eon 2014 slope sampling with Mitsuba's Newton inversion in the
  erf domain (needs :func:`erfinv`, Giles' single-precision approximation);
* otherwise the whole distribution D(m) cos(theta_m) is sampled.

Example::

    d = Microfacet("ggx", alpha, alpha)
    m, pdf_m = d.sample(wi, u2)          # pdf_m == d.pdf(wi, m)
    g = d.G(wi, wo, m)
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from ..sampling import square_to_uniform_disk_concentric
from .base import FLOAT, OPTION, BsdfType, Param

INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
EPS = 2.0 ** -24
DISTRIBUTIONS = ("beckmann", "ggx")   # Mitsuba's microfacet distribution names


def erfinv(x):
    """Inverse error function on (-1, 1) (M. Giles, "Approximating the erfinv
    function", GPU Computing Gems, single-precision variant)."""
    w = -ir.log((1.0 - x) * (1.0 + x))
    a = w - 2.5
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p = ir.fma(p, a, c) if isinstance(p, ir.Var) else p * a + c
    b = ir.sqrt(w) - 3.0
    q = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        q = ir.fma(q, b, c) if isinstance(q, ir.Var) else q * b + c
    return ir.select(w < 5.0, p, q) * x


class Microfacet:
    """``kind`` is ``"ggx"`` or ``"beckmann"`` (trace time)."""

    def __init__(self, kind: str, alpha_u, alpha_v=None, sample_visible: bool = True):
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"unknown microfacet distribution {kind!r} (use 'ggx' or 'beckmann')")
        self.kind = kind
        self.alpha_u = alpha_u
        self.alpha_v = alpha_u if alpha_v is None else alpha_v
        self.sample_visible = sample_visible

    # -- distribution ------------------------------------------------------
    def D(self, m: Vec):
        """Normal distribution D(m) (projected area normalised: int D cos = 1)."""
        au, av = self.alpha_u, self.alpha_v
        c2 = m.z * m.z
        xu, yv = m.x / au, m.y / av
        if self.kind == "beckmann":
            d = ir.exp(-(xu * xu + yv * yv) / c2) / (math.pi * au * av * c2 * c2)
        else:
            t = xu * xu + yv * yv + c2
            d = 1.0 / (math.pi * au * av * t * t)
        return ir.select(d * m.z > 1e-20, d, 0.0)

    eval = D

    def smith_g1(self, v: Vec, m: Vec):
        """Smith masking for direction ``v`` and microfacet ``m`` (Beckmann uses
        the usual rational approximation); 0 if v sees the back of m."""
        ax, ay = self.alpha_u * v.x, self.alpha_v * v.y
        xy2 = ax * ax + ay * ay
        tan2 = xy2 / (v.z * v.z)
        if self.kind == "beckmann":
            a = ir.rsqrt(tan2)
            a2 = a * a
            g = ir.select(a >= 1.6, 1.0, (3.535 * a + 2.181 * a2) / (1.0 + 2.276 * a + 2.577 * a2))
        else:
            g = 2.0 / (1.0 + ir.sqrt(1.0 + tan2))
        g = ir.select(xy2 == 0.0, 1.0, g)
        return ir.select(ir.dot(v, m) * v.z <= 0.0, 0.0, g)

    def G(self, wi: Vec, wo: Vec, m: Vec):
        return self.smith_g1(wi, m) * self.smith_g1(wo, m)

    def pdf(self, wi: Vec, m: Vec):
        """Density (solid angle of m) of :meth:`sample`."""
        d = self.D(m)
        if self.sample_visible:
            return d * self.smith_g1(wi, m) * ir.abs(ir.dot(wi, m)) / wi.z
        return d * m.z

    # -- sampling ------------------------------------------------------------
    def sample(self, wi: Vec, u: Vec):
        """Sample a microfacet normal; returns ``(m, pdf)``."""
        if not self.sample_visible:
            return self._sample_all(u)
        au, av = self.alpha_u, self.alpha_v
        # Stretch wi to the alpha = 1 configuration.
        ws = Vec(au * wi.x, av * wi.y, wi.z)
        ws = ws * ir.rsqrt(ir.dot(ws, ws))
        sin2 = ws.x * ws.x + ws.y * ws.y
        inv = ir.rsqrt(sin2)
        pole = sin2 <= 4.0 * EPS
        cos_phi = ir.select(pole, 1.0, ir.clamp(ws.x * inv, -1.0, 1.0))
        sin_phi = ir.select(pole, 0.0, ir.clamp(ws.y * inv, -1.0, 1.0))
        cos_t = ws.z
        if self.kind == "ggx":
            nx, ny, nz = self._ggx_visible_11(cos_t, u)
        else:
            sx, sy = self._beckmann_slopes_11(cos_t, u)
            nx, ny, nz = -sx, -sy, ir.Float(1.0)
        # Rotate back to wi's azimuth and unstretch (normals scale by alpha in x/y).
        mx = (cos_phi * nx - sin_phi * ny) * au
        my = (sin_phi * nx + cos_phi * ny) * av
        m = Vec(mx, my, nz)
        m = m * ir.rsqrt(ir.dot(m, m))
        return m, self.pdf(wi, m)

    @staticmethod
    def _ggx_visible_11(cos_t, u: Vec):
        """Heitz 2018 for alpha = 1 and wi = (sin t, 0, cos t): uniform point on
        the projected half disk, lifted to the hemisphere around wi."""
        p = square_to_uniform_disk_concentric(u)
        s = 0.5 * (1.0 + cos_t)
        t1 = p.x
        t2 = ir.lerp(ir.safe_sqrt(1.0 - t1 * t1), p.y, s)
        h = ir.safe_sqrt(1.0 - t1 * t1 - t2 * t2)
        sin_t = ir.safe_sqrt(1.0 - cos_t * cos_t)
        # Orthonormal frame (T1, T2, wi) with T1 = (0, -1, 0), T2 = (-cos t, 0, sin t).
        return sin_t * h - cos_t * t2, -t1, sin_t * t2 + cos_t * h

    @staticmethod
    def _beckmann_slopes_11(cos_t, u: Vec):
        """Heitz & d'Eon 2014: sample the visible slopes of the alpha = 1
        Beckmann surface seen from theta_i; the x marginal is inverted by
        Newton's method in the erf domain."""
        tan_t = ir.safe_sqrt(1.0 - cos_t * cos_t) / cos_t
        cot_t = 1.0 / tan_t
        maxval = ir.erf(cot_t)
        ux = ir.clamp(u.x, 1e-6, 1.0 - 1e-6)
        uy = ir.clamp(u.y, 1e-6, 1.0 - 1e-6)
        x = maxval - (maxval + 1.0) * ir.erf(ir.sqrt(-ir.log(ux)))
        target = ux * (1.0 + maxval + INV_SQRT_PI * tan_t * ir.exp(-cot_t * cot_t))
        for _ in range(3):
            slope = erfinv(x)
            value = 1.0 + x + INV_SQRT_PI * tan_t * ir.exp(-slope * slope) - target
            x = x - value / (1.0 - slope * tan_t)
        return erfinv(x), erfinv(2.0 * uy - 1.0)

    def _sample_all(self, u: Vec):
        """Sample D(m) cos(theta_m) (no dependence on wi)."""
        au, av = self.alpha_u, self.alpha_v
        iso = au == av
        phi = (2.0 * math.pi) * u.y
        sin_i, cos_i = ir.sin(phi), ir.cos(phi)
        tmp = (av / au) * ir.tan(phi)
        cos_a = ir.copysign(ir.rsqrt(tmp * tmp + 1.0), ir.abs(u.y - 0.5) - 0.25)
        sin_a = cos_a * tmp
        cos_phi = ir.select(iso, cos_i, cos_a)
        sin_phi = ir.select(iso, sin_i, sin_a)
        cu, sv = cos_phi / au, sin_phi / av
        alpha2 = ir.select(iso, au * au, 1.0 / (cu * cu + sv * sv))
        # Closed-form density of the sampled normal (D(m) cos(theta_m)).
        if self.kind == "beckmann":
            cos_theta = ir.rsqrt(1.0 - alpha2 * ir.log(1.0 - u.x))
            c3 = ir.maximum(cos_theta * cos_theta * cos_theta, 1e-20)
            pdf = (1.0 - u.x) / (math.pi * au * av * c3)
        else:
            tan2 = alpha2 * u.x / (1.0 - u.x)
            cos_theta = ir.rsqrt(1.0 + tan2)
            c3 = ir.maximum(cos_theta * cos_theta * cos_theta, 1e-20)
            t = 1.0 + tan2 / alpha2
            pdf = 1.0 / (math.pi * au * av * c3 * t * t)
        sin_theta = ir.safe_sqrt(1.0 - cos_theta * cos_theta)
        m = Vec(cos_phi * sin_theta, sin_phi * sin_theta, cos_theta)
        return m, pdf


# The Mitsuba parameters every microfacet BSDF shares: the trace-time
# choices of distribution and sampling strategy, and the (an)isotropic
# roughness (one "alpha" unless alpha_u or alpha_v is given).
OPTION_PARAMS = (Param("distribution", OPTION, "beckmann", choices=DISTRIBUTIONS),
                 Param("sample_visible", OPTION, True, choices=(True, False)))
ALPHA_PARAMS = (Param("alpha_u", FLOAT, 0.1, group="alpha"), Param("alpha_v", FLOAT, 0.1, group="alpha"))


def variants(plugin: str, params: tuple, make, eval, pdf, sample, **extra) -> tuple:
    """One BsdfType of ``plugin`` per distribution and sampling strategy,
    with parameters OPTION_PARAMS + ``params`` + ALPHA_PARAMS; the options
    reach eval / pdf / sample as keyword arguments."""
    out = []
    for distribution in DISTRIBUTIONS:
        for visible in (True, False):
            options = (("distribution", distribution), ("sample_visible", visible))
            out.append(BsdfType(f"{plugin}-{distribution}" + ("" if visible else "-all"), plugin,
                                OPTION_PARAMS + tuple(params) + ALPHA_PARAMS, make, eval, pdf, sample,
                                options=options, kw=options, anisotropic=True, **extra))
    return tuple(out)