"""Mitsuba's ``pplastic``: a polarized plastic (a rough dielectric coating's
specular reflection over a diffuse base), Baek et al. 2018's model.

Its value is the sum of a microfacet specular lobe (D G / (4 cos theta_i)
times the dielectric Fresnel reflectance at the microfacet normal, times
``specular_reflectance``) and a diffuse lobe, ``diffuse_reflectance`` /
pi cos theta_o, reduced by the Fresnel transmittance into the coating and
out again (no internal scattering, unlike ``roughplastic``). In polarized
variants both are Mueller matrices, as Mitsuba's: the specular Fresnel
matrix in the frames of the microfacet's plane of incidence, and the
diffuse base depolarizing the light that enters and polarizing what leaves
(transmission matrices in, then out). Sampling picks the specular lobe with
probability mean(specular) / (mean(diffuse) + mean(specular)) of the
colours at the hit (Mitsuba uses the textures' means: the same image, other
noise), else the cosine hemisphere. Front side only.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import mueller, sampling, spectrum
from ..spectrum import black
from . import microfacet
from .base import COLOR, IOR, Param
from .fresnel import fresnel, reflect_about, refract
from .microfacet import Microfacet

INV_PI = 1.0 / math.pi


@dataclasses.dataclass
class PolarizedPlasticParams:
    eta: Any
    alpha_u: Any
    alpha_v: Any
    diffuse_reflectance: Vec
    specular_reflectance: Vec


def _specular_probability(p: PolarizedPlasticParams):
    s = spectrum.active()
    d_mean, s_mean = s.mean(p.diffuse_reflectance), s.mean(p.specular_reflectance)
    total = d_mean + s_mean
    return ir.select(total > 0.0, s_mean / ir.select(total > 0.0, total, 1.0), 1.0)


def eval(p: PolarizedPlasticParams, wi: Vec, wo: Vec, distribution: str = "beckmann",  # noqa: A001
         sample_visible: bool = True) -> Vec:
    S = spectrum.active()
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    d = Microfacet(distribution, p.alpha_u, p.alpha_v, sample_visible)
    h = ir.normalize(wo + wi)
    lobe = d.D(h) * d.G(wi, wo, h) / (4.0 * wi.z)
    if not S.polarized:
        specular = p.specular_reflectance * (fresnel(ir.dot(wi, h), p.eta)[0] * lobe)
        r_i, r_o = fresnel(wi.z, p.eta)[0], fresnel(wo.z, p.eta)[0]
        diffuse = p.diffuse_reflectance * ((1.0 - r_o) * (1.0 - r_i) * INV_PI * wo.z)
        return ir.select(ok, specular + diffuse, black())
    # light arrives along -wo and leaves along wi
    f_spec = mueller.in_specular_bases(mueller.specular_reflection(ir.dot(wo, h), p.eta), wo, wi, h)
    t_out = mueller.specular_transmission(ir.abs(wo.z), p.eta)            # into the coating
    inv_eta = 1.0 / p.eta
    cos_t = fresnel(wi.z, p.eta)[1]
    inside = -refract(wi, cos_t, inv_eta)                                   # towards the surface from below
    t_in = mueller.specular_transmission(ir.abs(inside.z), inv_eta)        # out of the coating
    matrices = []
    for c in range(S.channels):
        base = mueller.matmul(t_in, mueller.matmul(mueller.depolarizer(p.diffuse_reflectance[c]), t_out))
        m = mueller.scale(f_spec, p.specular_reflectance[c] * lobe)
        diffuse = mueller.scale(mueller.in_specular_bases(base, wo, wi), INV_PI * wo.z)
        matrices.append(tuple(Vec(*(a + b for a, b in zip(ra, rb))) for ra, rb in zip(m, diffuse)))
    return ir.select(ok, S.from_matrices(matrices), S.zero())


def pdf(p: PolarizedPlasticParams, wi: Vec, wo: Vec, distribution: str = "beckmann", sample_visible: bool = True):
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    d = Microfacet(distribution, p.alpha_u, p.alpha_v, sample_visible)
    h = ir.normalize(wo + wi)
    if sample_visible:
        p_spec = d.D(h) * d.smith_g1(wi, h) / (4.0 * wi.z)
    else:
        p_spec = d.pdf(wi, h) / (4.0 * ir.dot(wo, h))
    p_spec = ir.select((ir.dot(wi, h) <= 0.0) | (ir.dot(wo, h) <= 0.0), 0.0, p_spec)
    q = _specular_probability(p)
    return ir.select(ok, q * p_spec + (1.0 - q) * sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)


def sample(p: PolarizedPlasticParams, wi: Vec, u1, u2: Vec, distribution: str = "beckmann",
           sample_visible: bool = True):
    d = Microfacet(distribution, p.alpha_u, p.alpha_v, sample_visible)
    specular = u1 < _specular_probability(p)
    m = d.sample(wi, u2)[0]
    wo = ir.select(specular, reflect_about(wi, m), sampling.square_to_cosine_hemisphere(u2))
    density = pdf(p, wi, wo, distribution, sample_visible)
    ok = (wi.z > 0.0) & (density > 0.0)
    value = eval(p, wi, wo, distribution, sample_visible)
    weight = value * ir.select(ok, 1.0 / ir.select(ok, density, 1.0), 0.0)
    return wo, ir.select(ok, density, 0.0), weight, ir.Bool(False)


PARAMS = (Param("diffuse_reflectance", COLOR, 0.5), Param("specular_reflectance", COLOR, 1.0),
          Param("eta", IOR, "polypropylene"))
TYPES = microfacet.variants("pplastic", PARAMS,
                            lambda v: PolarizedPlasticParams(v.eta, v.alpha_u, v.alpha_v, v.diffuse_reflectance,
                                                             v.specular_reflectance),
                            eval, pdf, sample, albedo="diffuse_reflectance", polarizing=True, eta=None)
