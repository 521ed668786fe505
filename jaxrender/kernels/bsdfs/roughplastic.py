"""Rough plastic (Mitsuba 3's ``roughplastic`` plugin): a microfacet specular
coating over a diffuse base.

Mitsuba precomputes, per (distribution, alpha, eta), a 64-entry table of the
coating's directional transmittance ``t(cos theta)`` and a scalar internal
reflectance, both integrals of the visible-normal distribution. Here
:func:`precompute` computes the same integrals on the host (numpy, float64,
direct quadrature over microfacet normals instead of Mitsuba's 32x32 /
128x128 Gauss-Legendre rule on the sample square, so values differ at the
~1e-3 level); the kernel reads the table from a buffer (any object with
``read(row)``, e.g. an ``ir.In("f32")`` input of 64 rows) and interpolates
linearly as Mitsuba's ``lerp_gather``.

Trace-time keyword arguments: ``distribution`` (default "beckmann") and
``sample_visible`` (default True). Front side only.

Example::

    table, internal = precompute("ggx", 0.3, 1.5)      # host side
    p = RoughPlasticParams(eta, alpha, diffuse, specular, False, internal, table_buffer)
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from ... import ir
from ...ir import Vec
from .. import sampling
from .fresnel import fresnel, reflect_about
from .microfacet import Microfacet
from .plastic import internal_scattering

RES = 64  # Mitsuba's MI_ROUGH_TRANSMITTANCE_RES


@dataclasses.dataclass
class RoughPlasticParams:
    eta: Any
    alpha: Any
    diffuse_reflectance: Vec
    specular_reflectance: Vec
    nonlinear: Any
    internal_reflectance: Any
    table: Any = dataclasses.field(default=None)

    # the table is a buffer handle, not kernel state
    def tree_flatten(self):
        return ((self.eta, self.alpha, self.diffuse_reflectance, self.specular_reflectance,
                 self.nonlinear, self.internal_reflectance), self.table)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, table=aux)


def _lerp_table(table, x):
    x = x * float(RES - 1)
    idx = ir.minimum(ir.cast(ir.maximum(x, 0.0), "u32"), ir.UInt(RES - 2))
    v0 = table.read(idx)
    v1 = table.read(idx + 1)
    return ir.lerp(v0, v1, x - ir.cast(idx, "f32"))


def _mean(v: Vec):
    return (v.x + v.y + v.z) * (1.0 / 3.0)


def _probs(p, t_i):
    s_mean = _mean(p.specular_reflectance)
    sw = s_mean / (_mean(p.diffuse_reflectance) + s_mean)
    ps = (1.0 - t_i) * sw
    pd = t_i * (1.0 - sw)
    ps = ps / (ps + pd)
    return ps, 1.0 - ps


def eval(params: RoughPlasticParams, wi: Vec, wo: Vec, distribution: str = "beckmann",  # noqa: A001
         sample_visible: bool = True) -> Vec:
    ci, co = wi.z, wo.z
    active = (ci > 0.0) & (co > 0.0)
    d = Microfacet(distribution, params.alpha, params.alpha, sample_visible)
    h = wi + wo
    h = h * ir.rsqrt(ir.dot(h, h))
    F = fresnel(ir.dot(wi, h), params.eta)[0]
    spec = params.specular_reflectance * (F * d.eval(h) * d.G(wi, wo, h) / (4.0 * ci))
    t_i = _lerp_table(params.table, ci)
    t_o = _lerp_table(params.table, co)
    diff = internal_scattering(params.diffuse_reflectance, params.internal_reflectance, params.nonlinear)
    value = spec + diff * ((1.0 / math.pi) / (params.eta * params.eta) * co * t_i * t_o)
    z = ir.Float(0.0)
    return ir.select(active, value, Vec(z, z, z))


def pdf(params: RoughPlasticParams, wi: Vec, wo: Vec, distribution: str = "beckmann",
        sample_visible: bool = True):
    ci, co = wi.z, wo.z
    active = (ci > 0.0) & (co > 0.0)
    ps, pd = _probs(params, _lerp_table(params.table, ci))
    h = wi + wo
    h = h * ir.rsqrt(ir.dot(h, h))
    d = Microfacet(distribution, params.alpha, params.alpha, sample_visible)
    if sample_visible:
        spec = d.eval(h) * d.smith_g1(wi, h) / (4.0 * ci)
    else:
        spec = d.pdf(wi, h) / (4.0 * ir.dot(wo, h))
    result = spec * ps + pd * sampling.square_to_cosine_hemisphere_pdf(wo)
    return ir.select(active, result, 0.0)


def sample(params: RoughPlasticParams, wi: Vec, u1, u2: Vec, distribution: str = "beckmann",
           sample_visible: bool = True):
    active = wi.z > 0.0
    ps, _ = _probs(params, _lerp_table(params.table, wi.z))
    is_spec = u1 < ps
    d = Microfacet(distribution, params.alpha, params.alpha, sample_visible)
    m, _ = d.sample(wi, u2)
    wo = ir.select(is_spec, reflect_about(wi, m), sampling.square_to_cosine_hemisphere(u2))
    p = pdf(params, wi, wo, distribution, sample_visible)
    active = active & (p > 0.0)
    f = eval(params, wi, wo, distribution, sample_visible)
    z = ir.Float(0.0)
    zero = Vec(z, z, z)
    weight = ir.select(active, f / ir.select(active, p, 1.0), zero)
    return ir.select(wi.z > 0.0, wo, zero), ir.select(wi.z > 0.0, p, 0.0), weight, ir.Bool(False)


# ------------------------------------------------------------ host side ----

def _np_d(kind, a, mz):
    c2 = mz * mz
    t2 = (1 - c2) / c2
    if kind == "beckmann":
        return np.exp(-t2 / (a * a)) / (math.pi * a * a * c2 * c2)
    return 1.0 / (math.pi * a * a * c2 * c2 * (1 + t2 / (a * a)) ** 2)


def _np_g1(kind, a, v, m):
    xy2 = a * a * (v[..., 0] ** 2 + v[..., 1] ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = xy2 / v[..., 2] ** 2
        if kind == "beckmann":
            aa = 1 / np.sqrt(t2)
            g = np.where(aa >= 1.6, 1.0, (3.535 * aa + 2.181 * aa * aa) / (1 + 2.276 * aa + 2.577 * aa * aa))
        else:
            g = 2 / (1 + np.sqrt(1 + t2))
    g = np.where(xy2 == 0, 1.0, g)
    return np.where(np.sum(v * m, -1) * v[..., 2] <= 0, 0.0, g)


def _np_fresnel(c, eta):
    eta_it = np.where(c >= 0, eta, 1 / eta)
    eta_ti = 1 / eta_it
    ct2 = 1 - (1 - c * c) * eta_ti ** 2
    ci, ct = np.abs(c), np.sqrt(np.maximum(ct2, 0))
    a_s = (ci - eta_it * ct) / (ci + eta_it * ct)
    a_p = (ct - eta_it * ci) / (ct + eta_it * ci)
    r = np.where(ct2 <= 0, 1.0, 0.5 * (a_s ** 2 + a_p ** 2))
    return r, -np.copysign(ct, c), eta_ti


def _albedo(kind, alpha, mu, eta, transmit, n=192):
    """Integral over visible normals of (1-F) G1 (refraction) or F G1 (reflection)."""
    # microfacet normals on a (tan-mapped theta, phi) grid, midpoint rule
    s = (np.arange(n) + 0.5) / n
    theta = np.arctan(alpha * 6.0 * np.tan(s * math.pi / 2 * 0.999))  # concentrated near the lobe
    dtheta = np.gradient(theta)
    phi = (np.arange(2 * n) + 0.5) / (2 * n) * 2 * math.pi
    T, P = np.meshgrid(theta, phi, indexing="ij")
    dA = (np.sin(T) * dtheta[:, None]) * (2 * math.pi / (2 * n))
    m = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1)
    out = np.zeros(len(mu))
    for k, c in enumerate(mu):
        wi = np.array([math.sqrt(1 - c * c), 0.0, c])
        wim = m @ wi
        dvis = _np_g1(kind, alpha, wi, m) * np.maximum(wim, 0) * _np_d(kind, alpha, m[..., 2]) / c
        F, ct, eta_ti = _np_fresnel(wim, eta)
        if transmit:
            wo = m * (wim * eta_ti + ct)[..., None] - wi * eta_ti[..., None]
            g = _np_g1(kind, alpha, wo, m) * (1 - F)
            g = np.where(wo[..., 2] * c >= 0, 0.0, g)
        else:
            wo = 2 * wim[..., None] * m - wi
            g = _np_g1(kind, alpha, wo, m) * F
            g = np.where(wo[..., 2] <= 0, 0.0, g)
        out[k] = np.sum(dvis * g * dA)
    return out


@functools.lru_cache(maxsize=64)
def precompute(distribution: str, alpha: float, eta: float):
    """(transmittance table of RES entries over cos theta in [0, 1], internal
    reflectance) as Mitsuba's ``RoughPlastic::parameters_changed``."""
    mu = np.maximum(1e-6, np.linspace(0, 1, RES))
    table = _albedo(distribution, alpha, mu, eta, True)
    mu_i = np.maximum(1e-6, np.linspace(0, 1, RES))
    internal = float(np.mean(_albedo(distribution, alpha, mu_i, 1 / eta, False) * mu_i) * 2)
    table = table.astype(np.float32)
    table.setflags(write=False)
    return table, internal
