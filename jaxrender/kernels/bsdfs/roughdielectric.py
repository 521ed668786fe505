"""Rough dielectric interface (Mitsuba 3's ``roughdielectric`` plugin;
Walter et al. 2007 microfacet model with reflection and refraction).

Trace-time keyword arguments: ``distribution="ggx" | "beckmann"`` (default
"beckmann", Mitsuba's default) and ``sample_visible=True``. Without visible
normal sampling the roughness used for sampling (and therefore ``pdf``) is
scaled by ``1.2 - 0.2 sqrt(|cos theta_i|)`` (Walter's trick), as Mitsuba.
Transmitted radiance is scaled by ``1 / eta**2`` (radiance transport).
``wi`` may lie on either side of the interface.

Example::

    p = RoughDielectricParams(eta, alpha_u, alpha_v, Vec(1., 1., 1.), Vec(1., 1., 1.))
    f = eval(p, wi, wo, distribution="ggx")
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from . import microfacet
from .base import black
from .dielectric import GLASS_PARAMS
from .fresnel import fresnel, reflect_about, refract_about
from .microfacet import Microfacet


@dataclasses.dataclass
class RoughDielectricParams:
    eta: Any
    alpha_u: Any
    alpha_v: Any
    specular_reflectance: Vec
    specular_transmittance: Vec


def _sample_distr(p, wi, distribution, sample_visible):
    if sample_visible:
        return Microfacet(distribution, p.alpha_u, p.alpha_v, True)
    s = 1.2 - 0.2 * ir.sqrt(ir.abs(wi.z))
    return Microfacet(distribution, p.alpha_u * s, p.alpha_v * s, False)


def _half_vector(p, wi, wo):
    """(reflect?, eta seen from wi's side, its inverse, m in the upper hemisphere)."""
    ci = wi.z
    is_refl = ci * wo.z > 0.0
    eta = ir.select(ci > 0.0, p.eta, 1.0 / p.eta)
    inv_eta = ir.select(ci > 0.0, 1.0 / p.eta, p.eta)
    h = wi + wo * ir.select(is_refl, 1.0, eta)
    h = h * ir.rsqrt(ir.dot(h, h))
    m = h * ir.copysign(1.0, h.z)
    return is_refl, eta, inv_eta, m


def eval(params: RoughDielectricParams, wi: Vec, wo: Vec, distribution: str = "beckmann",  # noqa: A001
         sample_visible: bool = True) -> Vec:
    ci = wi.z
    active = ci != 0.0
    is_refl, eta, inv_eta, m = _half_vector(params, wi, wo)
    d = Microfacet(distribution, params.alpha_u, params.alpha_v, sample_visible)
    D = d.eval(m)
    wi_m, wo_m = ir.dot(wi, m), ir.dot(wo, m)
    F = fresnel(wi_m, params.eta)[0]
    G = d.G(wi, wo, m)
    r_val = params.specular_reflectance * (F * D * G / (4.0 * ir.abs(ci)))
    denom = wi_m + eta * wo_m
    t = ir.abs(inv_eta * inv_eta * (1.0 - F) * D * G * eta * eta * wi_m * wo_m / (ci * (denom * denom)))
    t_val = params.specular_transmittance * t
    return ir.select(active, ir.select(is_refl, r_val, t_val), black())


def pdf(params: RoughDielectricParams, wi: Vec, wo: Vec, distribution: str = "beckmann",
        sample_visible: bool = True):
    ci, co = wi.z, wo.z
    is_refl, eta, _, m = _half_vector(params, wi, wo)
    wi_m, wo_m = ir.dot(wi, m), ir.dot(wo, m)
    active = (ci != 0.0) & (wi_m * ci > 0.0) & (wo_m * co > 0.0)
    denom = wi_m + eta * wo_m
    dwh_dwo = ir.select(is_refl, 1.0 / (4.0 * wo_m), eta * eta * wo_m / (denom * denom))
    sd = _sample_distr(params, wi, distribution, sample_visible)
    prob = sd.pdf(wi * ir.copysign(1.0, ci), m)
    F = fresnel(wi_m, params.eta)[0]
    prob = prob * ir.select(is_refl, F, 1.0 - F)
    return ir.select(active, prob * ir.abs(dwh_dwo), 0.0)


def sample(params: RoughDielectricParams, wi: Vec, u1, u2: Vec, distribution: str = "beckmann",
           sample_visible: bool = True):
    ci = wi.z
    d = Microfacet(distribution, params.alpha_u, params.alpha_v, sample_visible)
    sd = _sample_distr(params, wi, distribution, sample_visible)
    m, pdf_m = sd.sample(wi * ir.copysign(1.0, ci), u2)
    active = (ci != 0.0) & (pdf_m != 0.0)
    wi_m = ir.dot(wi, m)
    F, cos_t, eta_it, eta_ti = fresnel(wi_m, params.eta)
    sel_r = u1 <= F
    wo = ir.select(sel_r, reflect_about(wi, m), refract_about(wi, m, cos_t, eta_ti))
    wo_m = ir.dot(wo, m)
    denom = wi_m + eta_it * wo_m
    dwh_dwo = ir.select(sel_r, 1.0 / (4.0 * wo_m), eta_it * eta_it * wo_m / (denom * denom))
    p = pdf_m * ir.select(sel_r, F, 1.0 - F) * ir.abs(dwh_dwo)
    weight = ir.select(sel_r, params.specular_reflectance,
                       params.specular_transmittance * (eta_ti * eta_ti))
    if sample_visible:
        g = d.smith_g1(wo, m)
    else:
        g = d.G(wi, wo, m) * wi_m / (ci * m.z)
    weight = weight * g
    z = ir.Float(0.0)
    return (ir.select(active, wo, Vec(z, z, z)), ir.select(active, p, 0.0), ir.select(active, weight, black()),
            ir.Bool(False))


TYPES = microfacet.variants("roughdielectric", GLASS_PARAMS,
                           lambda p: RoughDielectricParams(p.eta, p.alpha_u, p.alpha_v, p.specular_reflectance,
                                                           p.specular_transmittance),
                           eval, pdf, sample, eta="eta", transmissive=True)
