"""Smooth conductor: a delta reflection lobe weighted by the conductor
Fresnel term, as Mitsuba's ``conductor`` plugin.

``ConductorParams(eta=Vec, k=Vec, specular_reflectance=Vec)`` (rgb complex
IOR eta + i k; Mitsuba's default material "none" is eta = 0, k = 1, a
perfect mirror). ``eval`` and ``pdf`` are 0; ``sample`` returns the mirror
direction, pdf 1, weight F * specular_reflectance (0 if wi is below the
horizon) and ``is_delta`` true. In polarized variants the weight is the
polarized Fresnel reflection (a Mueller matrix per channel), as Mitsuba's.
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from .base import COLOR, BsdfType, Param
from .. import mueller, spectrum
from ..spectrum import black
from .fresnel import fresnel_conductor_rgb, reflect


@dataclasses.dataclass
class ConductorParams:
    eta: Vec
    k: Vec
    specular_reflectance: Vec


def eval(params: ConductorParams, wi: Vec, wo: Vec) -> Vec:
    return black()


def pdf(params: ConductorParams, wi: Vec, wo: Vec):
    return ir.Float(0.0)


def sample(params: ConductorParams, wi: Vec, u1, u2: Vec):
    cos_i = wi.z
    S = spectrum.active()
    if S.polarized:
        wo = reflect(wi)
        F = polarized_fresnel(S, params, wo, wi)
        return wo, ir.Float(1.0), ir.select(cos_i > 0.0, F, S.zero()), ir.Bool(True)
    F = fresnel_conductor_rgb(cos_i, params.eta, params.k) * params.specular_reflectance
    weight = ir.select(cos_i > 0.0, F, black())
    return reflect(wi), ir.Float(1.0), weight, ir.Bool(True)


def polarized_fresnel(S, params, wo: Vec, wi: Vec, normal: Vec | None = None) -> Vec:
    """The polarized reflection of light arriving along -wo and leaving
    along wi off a surface (a microfacet) of ``normal`` (None: +z): per
    channel, the Fresnel matrix of its complex IOR eta + i k in those
    directions' Stokes bases, times ``specular_reflectance`` (Mitsuba's)."""
    cos = wo.z if normal is None else ir.dot(wo, normal)
    return S.from_matrices([
        mueller.scale(mueller.in_specular_bases(mueller.specular_reflection(cos, (params.eta[c], params.k[c])),
                                                wo, wi, normal), params.specular_reflectance[c])
        for c in range(S.channels)])


# Mitsuba's default material "none": eta = 0, k = 1, a perfect mirror.
PARAMS = (Param("eta", COLOR, 0.0), Param("k", COLOR, 1.0), Param("specular_reflectance", COLOR, 1.0))
TYPE = BsdfType("conductor", "conductor", PARAMS, lambda p: ConductorParams(p.eta, p.k, p.specular_reflectance),
                eval, pdf, sample, delta=True, polarizing=True)
