"""Thin dielectric sheet (Mitsuba 3's ``thindielectric`` plugin).

Two interfaces with interreflection between them, zero thickness: specular
reflection with probability R = 2 F / (1 + F) (F the single-interface
Fresnel reflectance at |cos theta_i|), otherwise the ray passes straight
through (wo = -wi, Mitsuba's "null" transmission) with probability 1 - R.
The sampled weight is the tint alone (1 for untinted sheets); no eta^2
scaling because the ray leaves into the original medium.

Example::

    wo, pdf, weight, is_delta = sample(ThinDielectricParams(eta, refl, trans), wi, u1, u2)
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from ..spectrum import uniform
from .base import BsdfType
from .dielectric import GLASS_PARAMS
from .dielectric import fresnel, reflect


@dataclasses.dataclass
class ThinDielectricParams:
    eta: Any
    specular_reflectance: Vec
    specular_transmittance: Vec


def reflectance(params: ThinDielectricParams, wi: Vec):
    """Total reflectance of the sheet at incidence wi."""
    r = fresnel(ir.abs(wi.z), params.eta)[0]
    return r * (2.0 / (1.0 + r))


def eval(params: ThinDielectricParams, wi: Vec, wo: Vec) -> Vec:  # noqa: A001
    z = ir.Float(0.0)
    return uniform(z)


def pdf(params: ThinDielectricParams, wi: Vec, wo: Vec):
    return ir.Float(0.0)


def null_transmission(params: ThinDielectricParams, wi: Vec) -> Vec:
    """Mitsuba's ``eval_null_transmission``: (1 - R) times the transmittance tint."""
    return params.specular_transmittance * (1.0 - reflectance(params, wi))


def sample(params: ThinDielectricParams, wi: Vec, u1, u2: Vec):
    r = reflectance(params, wi)
    sel_r = u1 <= r
    wo = ir.select(sel_r, reflect(wi), -wi)
    p = ir.select(sel_r, r, 1.0 - r)
    weight = ir.select(sel_r, params.specular_reflectance, params.specular_transmittance)
    return wo, p, weight, ir.Bool(True)


TYPE = BsdfType("thindielectric", "thindielectric", GLASS_PARAMS,
                lambda p: ThinDielectricParams(p.eta, p.specular_reflectance, p.specular_transmittance),
                eval, pdf, sample, transmissive=True, delta=True)
