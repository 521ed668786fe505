"""Rough conductor (microfacet reflection with conductor Fresnel), as
Mitsuba's ``roughconductor`` plugin.

``RoughConductorParams(alpha_u, alpha_v, eta=Vec, k=Vec,
specular_reflectance=Vec)``; pass the same value twice for isotropic
roughness. Trace-time keywords of eval / pdf / sample:
``distribution="ggx" | "beckmann"`` (default "beckmann", Mitsuba's default)
and ``sample_visible=True``. See the package docstring for the interface.
In polarized variants the Fresnel term is a Mueller matrix per channel at
the microfacet normal, as Mitsuba's.
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from . import microfacet
from .. import spectrum
from .conductor import PARAMS as CONDUCTOR_PARAMS, polarized_fresnel
from ..spectrum import black
from .fresnel import fresnel_conductor_rgb, reflect_about
from .microfacet import Microfacet



@dataclasses.dataclass
class RoughConductorParams:
    alpha_u: ir.Float
    alpha_v: ir.Float
    eta: Vec
    k: Vec
    specular_reflectance: Vec


def _distr(p, distribution, sample_visible):
    return Microfacet(distribution, p.alpha_u, p.alpha_v, sample_visible)


def _normalize(v: Vec) -> Vec:
    return v * ir.rsqrt(ir.dot(v, v))


def eval(params: RoughConductorParams, wi: Vec, wo: Vec, distribution: str = "beckmann",
         sample_visible: bool = True) -> Vec:
    d = _distr(params, distribution, sample_visible)
    h = _normalize(wi + wo)
    D = d.D(h)
    ok = (wi.z > 0.0) & (wo.z > 0.0) & (D != 0.0)
    f = D * d.G(wi, wo, h) / (4.0 * wi.z)
    S = spectrum.active()
    if S.polarized:
        return ir.select(ok, polarized_fresnel(S, params, wo, wi, h) * f, S.zero())
    F = fresnel_conductor_rgb(ir.dot(wi, h), params.eta, params.k) * params.specular_reflectance
    return ir.select(ok, F * f, black())


def pdf(params: RoughConductorParams, wi: Vec, wo: Vec, distribution: str = "beckmann",
        sample_visible: bool = True):
    d = _distr(params, distribution, sample_visible)
    h = _normalize(wi + wo)
    ok = (wi.z > 0.0) & (wo.z > 0.0) & (ir.dot(wi, h) > 0.0) & (ir.dot(wo, h) > 0.0)
    if sample_visible:
        p = d.D(h) * d.smith_g1(wi, h) / (4.0 * wi.z)
    else:
        p = d.pdf(wi, h) / (4.0 * ir.dot(wo, h))
    return ir.select(ok, p, 0.0)


def sample(params: RoughConductorParams, wi: Vec, u1, u2: Vec, distribution: str = "beckmann",
           sample_visible: bool = True):
    d = _distr(params, distribution, sample_visible)
    m, pdf_m = d.sample(wi, u2)
    wo = reflect_about(wi, m)
    ok = (wi.z > 0.0) & (pdf_m != 0.0) & (wo.z > 0.0)
    if sample_visible:
        w = d.smith_g1(wo, m)
    else:
        w = d.G(wi, wo, m) * ir.dot(wi, m) / (wi.z * m.z)
    p = pdf_m / (4.0 * ir.dot(wo, m))
    S = spectrum.active()
    if S.polarized:
        weight = ir.select(ok, polarized_fresnel(S, params, wo, wi, m) * w, S.zero())
        return wo, ir.select(ok, p, 0.0), weight, ir.Bool(False)
    F = fresnel_conductor_rgb(ir.dot(wi, m), params.eta, params.k) * params.specular_reflectance
    weight = ir.select(ok, F * w, black())
    return wo, ir.select(ok, p, 0.0), weight, ir.Bool(False)


TYPES = microfacet.variants("roughconductor", CONDUCTOR_PARAMS,
                           lambda p: RoughConductorParams(p.alpha_u, p.alpha_v, p.eta, p.k, p.specular_reflectance),
                           eval, pdf, sample, polarizing=True)
