"""Rough plastic (Mitsuba 3's ``roughplastic`` plugin): a microfacet specular
coating over a diffuse base.

Mitsuba precomputes, per (distribution, alpha, eta), a 64-entry table of the
coating's directional transmittance ``t(cos theta)`` and a scalar internal
reflectance, both integrals over visible microfacet normals.
:func:`table_kernel` computes them with Mitsuba's own quadrature (see the
section "the tables" below; ``jaxrender.primitives.bsdf_tables`` launches
it); the BSDF reads the table from any object with ``read(i)`` (e.g. an
``ir.In("f32")`` input of RES rows) and interpolates linearly as Mitsuba's
``lerp_gather``.

Trace-time keyword arguments: ``distribution`` (default "beckmann") and
``sample_visible`` (default True). Front side only.

Example::

    table, internal = bsdf_tables.precompute("ggx", 0.3, 1.5)   # host side (jaxrender.primitives)
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
from ..spectrum import uniform
from .base import COLOR, FLAG, IOR, OPTION, SCALAR, BsdfType, Param
from .. import layout, sampling
from .fresnel import fresnel, reflect_about, refract_about
from .microfacet import DISTRIBUTIONS, Microfacet
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
    return sum(v[1:], v[0]) * (1.0 / len(v))


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
    return ir.select(active, value, uniform(z))


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
    weight = ir.select(active, f / ir.select(active, p, 1.0), uniform(z))
    return ir.select(wi.z > 0.0, wo, Vec(z, z, z)), ir.select(wi.z > 0.0, p, 0.0), weight, ir.Bool(False)


# ------------------------------------------------------- the tables ----
# Mitsuba computes them in ``parameters_changed`` from scalar (detached)
# alpha and eta: the transmittance into the coating at RES values of
# cos theta_i = max(1e-6, linspace(0, 1, RES)), and the internal
# reflectance 2 * mean(mu * R(mu, 1 / eta)) over the same mu, each by a
# Gauss-Legendre rule (32 x 32 nodes for a relative IOR above 1, else
# 128 x 128) on the visible-normal sample square. ``table_kernel`` runs that
# same quadrature with this package's microfacet sampling, so the tables
# agree with Mitsuba's to float rounding.

# A BSDF's table: RES transmittances, then the internal reflectance.
assert RES + 1 <= layout.BSDF_TABLE_STRIDE
GL_SMALL, GL_LARGE = 32, 128


@functools.lru_cache(maxsize=None)
def gauss_legendre_nodes() -> np.ndarray:
    """(GL_SMALL + GL_LARGE, 2) float32 rows (node, weight) on [-1, 1]: the
    small rule first, then the large one."""
    rows = [np.stack(np.polynomial.legendre.leggauss(n), -1) for n in (GL_SMALL, GL_LARGE)]
    out = np.concatenate(rows).astype(np.float32)
    out.setflags(write=False)
    return out


def _coating_integral(d: Microfacet, wi: Vec, eta, transmit, gl):
    """Integral over visible microfacet normals of G1(wo) (1 - F) for the
    refracted wo (``transmit``) or G1(wo) F for the reflected one."""
    small = eta > 1.0
    res = ir.select(small, ir.UInt(GL_SMALL), ir.UInt(GL_LARGE))
    base = ir.select(small, ir.UInt(0), ir.UInt(GL_SMALL))

    def body(k, acc):
        ix, iy = base + k % res, base + k // res
        u = Vec(ir.fma(gl.read(ix, 0), 0.5, 0.5), ir.fma(gl.read(iy, 0), 0.5, 0.5))
        m, _ = d.sample(wi, u)
        c = ir.dot(wi, m)
        F, cos_t, _, eta_ti = fresnel(c, eta)
        wo = ir.select(transmit, refract_about(wi, m, cos_t, eta_ti), reflect_about(wi, m))
        s = d.smith_g1(wo, m) * ir.select(transmit, 1.0 - F, F)
        bad = ir.select(transmit, wo.z * wi.z >= 0.0, (wo.z <= 0.0) | (wi.z <= 0.0))
        return acc + ir.select(bad, 0.0, s) * (gl.read(ix, 1) * gl.read(iy, 1) * 0.25)

    return ir.fori_loop(ir.UInt(0), res * res, body, ir.Float(0.0))


def _table_body(distribution, prm, gl):
    i = ir.item_index()
    row, j = i // (2 * RES), i % (2 * RES)
    transmit = j < RES
    mu = ir.maximum(1e-6, ir.cast(j % RES, "f32") * (1.0 / (RES - 1)))
    wi = Vec(ir.safe_sqrt(1.0 - mu * mu), ir.Float(0.0), mu)
    alpha, eta = prm.read(row, 0), prm.read(row, 1)
    d = Microfacet(distribution, alpha, alpha, True)
    v = _coating_integral(d, wi, ir.select(transmit, eta, 1.0 / eta), transmit, gl)
    return ir.select(transmit, v, v * mu * 2.0)


@functools.lru_cache(maxsize=None)
def table_kernel(distribution: str) -> ir.Kernel:
    """Kernel computing the tables of N rough plastics sharing one
    distribution. Inputs ``prm`` (N, 2): alpha, eta per plastic; ``gl``:
    :func:`gauss_legendre_nodes`. Launched over N * 2 * RES items; output
    ``value``: item ``r * 2 * RES + j`` is the transmittance at mu_j for
    j < RES, else 2 mu R(mu, 1 / eta) at mu_(j - RES), whose mean over the
    RES values is the internal reflectance."""
    Microfacet(distribution, 0.1)  # validates the name
    return ir.trace(functools.partial(_table_body, distribution),
                    {"prm": ir.In("f32", (2,)), "gl": ir.In("f32", (2,))}, {"value": ir.Out("f32")},
                    name=f"roughplastic_table_{distribution}")


def tables_from_values(values: np.ndarray):
    """Launch output (N * 2 * RES,) -> (transmittance (N, RES), internal
    reflectance (N,)). Works on numpy and jax arrays."""
    v = values.reshape(-1, 2, RES)
    return v[:, 0, :], v[:, 1, :].mean(axis=-1)


def _type(distribution: str) -> BsdfType:
    # Mitsuba's roughplastic has one isotropic alpha (a plain float) and
    # always samples visible normals.
    return BsdfType(
        f"roughplastic-{distribution}", "roughplastic",
        (Param("distribution", OPTION, "beckmann", choices=DISTRIBUTIONS),
         Param("sample_visible", OPTION, True, choices=(True,)),
         Param("diffuse_reflectance", COLOR, 0.5), Param("specular_reflectance", COLOR, 1.0),
         Param("eta", IOR, "polypropylene"), Param("alpha", SCALAR, 0.1), Param("nonlinear", FLAG, False)),
        lambda p: RoughPlasticParams(p.eta, p.alpha, p.diffuse_reflectance, p.specular_reflectance,
                                     p.nonlinear > 0.5, p.table.read(RES), p.table),
        eval, pdf, sample, options=(("distribution", distribution), ("sample_visible", True)),
        kw=(("distribution", distribution),), table=(distribution, "alpha", "eta"),
        albedo="diffuse_reflectance")


TYPES = tuple(_type(d) for d in DISTRIBUTIONS)
