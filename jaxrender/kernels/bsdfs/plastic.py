"""Smooth plastic (Mitsuba 3's ``plastic`` plugin).

A diffuse base under a smooth dielectric coating: a delta specular lobe
(Fresnel reflection off the coating) and a diffuse lobe attenuated by the
Fresnel transmission in and out, with Mitsuba's closed-form account of
internal scattering: ``diffuse / (1 - fdr_int)`` (``nonlinear=False``) or
``diffuse / (1 - diffuse * fdr_int)`` (``nonlinear=True``), where
``fdr_int = fresnel_diffuse_reflectance(1 / eta)`` uses Mitsuba's fitted
polynomials. Front side only (cos theta_i > 0); else everything is 0.

``nonlinear`` may be a trace-time Python bool or a runtime IR Bool.

Example::

    p = PlasticParams(eta, diffuse_reflectance=Vec(r, g, b), specular_reflectance=Vec(1.0, 1.0, 1.0))
    f = eval(p, wi, wo)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from ..spectrum import uniform
from .base import COLOR, IOR, OPTION, BsdfType, Param
from .. import sampling
from .dielectric import fresnel, reflect

INV_PI = 1.0 / math.pi


def fresnel_diffuse_reflectance(eta):
    """Hemispherically averaged Fresnel reflectance of an interface with
    relative IOR eta (Mitsuba's fits: d'Eon & Irving for eta < 1, Egan &
    Hilgeman's polynomial in 1/eta otherwise). Works on Python floats too."""
    if isinstance(eta, (int, float)):
        eta = float(eta)
        inv = 1.0 / eta
        if eta < 1.0:
            return 0.0636 * inv + (eta * (eta * -1.4399 + 0.7099) + 0.6681)
        acc = 0.0
        for c in (-1.36881, 4.98554, -7.80989, 6.75335, -3.4793, 0.919317):
            acc = acc * inv + c
        return acc
    inv = 1.0 / eta
    approx_1 = ir.fma(0.0636, inv, ir.fma(eta, ir.fma(eta, -1.4399, 0.7099), 0.6681))
    acc = ir.Float(-1.36881)
    for c in (4.98554, -7.80989, 6.75335, -3.4793, 0.919317):
        acc = ir.fma(acc, inv, c)
    return ir.select(eta < 1.0, approx_1, acc)


@dataclasses.dataclass
class PlasticParams:
    eta: Any
    diffuse_reflectance: Vec
    specular_reflectance: Vec
    nonlinear: Any = False  # Python bool (trace-time) or an IR Bool


def _mean(v: Vec):
    return sum(v[1:], v[0]) * (1.0 / len(v))


def specular_sampling_weight(params):
    s_mean = _mean(params.specular_reflectance)
    return s_mean / (_mean(params.diffuse_reflectance) + s_mean)


def internal_scattering(d: Vec, fdr_int, nonlinear) -> Vec:
    """d / (1 - fdr_int) or, nonlinear, d / (1 - d * fdr_int)."""
    lin = d / (1.0 - fdr_int)
    if isinstance(nonlinear, bool):
        return d / (1.0 - d * fdr_int) if nonlinear else lin
    return ir.select(nonlinear, d / (1.0 - d * fdr_int), lin)


def _diffuse_scale(params) -> Vec:
    """diffuse / (1 - fdr_int [* diffuse]) * inv_eta^2."""
    fdr_int = fresnel_diffuse_reflectance(1.0 / params.eta)
    d = internal_scattering(params.diffuse_reflectance, fdr_int, params.nonlinear)
    return d * (1.0 / (params.eta * params.eta))


def _prob_specular(params, f_i):
    sw = specular_sampling_weight(params)
    ps = f_i * sw
    pd = (1.0 - f_i) * (1.0 - sw)
    return ps / (ps + pd)


def eval(params: PlasticParams, wi: Vec, wo: Vec) -> Vec:  # noqa: A001
    active = (wi.z > 0.0) & (wo.z > 0.0)
    f_i = fresnel(wi.z, params.eta)[0]
    f_o = fresnel(wo.z, params.eta)[0]
    value = _diffuse_scale(params) * (
        sampling.square_to_cosine_hemisphere_pdf(wo) * (1.0 - f_i) * (1.0 - f_o))
    z = ir.Float(0.0)
    return ir.select(active, value, uniform(z))


def pdf(params: PlasticParams, wi: Vec, wo: Vec):
    active = (wi.z > 0.0) & (wo.z > 0.0)
    f_i = fresnel(wi.z, params.eta)[0]
    p = sampling.square_to_cosine_hemisphere_pdf(wo) * (1.0 - _prob_specular(params, f_i))
    return ir.select(active, p, 0.0)


def sample(params: PlasticParams, wi: Vec, u1, u2: Vec):
    active = wi.z > 0.0
    f_i = fresnel(wi.z, params.eta)[0]
    prob_spec = _prob_specular(params, f_i)
    prob_diff = 1.0 - prob_spec
    is_spec = u1 < prob_spec
    wo_d = sampling.square_to_cosine_hemisphere(u2)
    wo = ir.select(is_spec, reflect(wi), wo_d)
    pdf_d = prob_diff * sampling.square_to_cosine_hemisphere_pdf(wo_d)
    p = ir.select(is_spec, prob_spec, pdf_d)
    f_o = fresnel(wo_d.z, params.eta)[0]
    w_spec = params.specular_reflectance * (f_i / prob_spec)
    w_diff = _diffuse_scale(params) * ((1.0 - f_i) * (1.0 - f_o) / prob_diff)
    weight = ir.select(is_spec, w_spec, w_diff)
    z = ir.Float(0.0)
    wo = ir.select(active, wo, Vec(z, z, z))
    return wo, ir.select(active, p, 0.0), ir.select(active, weight, uniform(z)), is_spec & active


def _type(nonlinear: bool) -> BsdfType:
    return BsdfType(
        "plastic-nonlinear" if nonlinear else "plastic", "plastic",
        (Param("diffuse_reflectance", COLOR, 0.5), Param("specular_reflectance", COLOR, 1.0),
         Param("eta", IOR, "polypropylene"), Param("nonlinear", OPTION, False, choices=(False, True))),
        lambda p: PlasticParams(p.eta, p.diffuse_reflectance, p.specular_reflectance, nonlinear=nonlinear),
        eval, pdf, sample, options=(("nonlinear", nonlinear),), albedo="diffuse_reflectance",
        delta=True)


TYPES = (_type(False), _type(True))
