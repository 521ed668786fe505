"""Smooth dielectric interface (Mitsuba 3's ``dielectric`` plugin).

A single delta lobe pair: specular reflection with probability F (the
unpolarised Fresnel reflectance) and refraction with probability 1 - F.
``eval`` and ``pdf`` are zero. In radiance transport the transmitted weight
is scaled by ``eta_ti**2`` (solid-angle compression), as Mitsuba does. In
polarized variants the weight is the chosen event's polarized Fresnel
matrix over its (unpolarized) probability. In the spectral variants the
IOR may be a tabulated spectrum (dispersion, beyond Mitsuba): the event
and direction follow the path's first wavelength.

Directions are in the local shading frame (z = normal); ``wi`` may lie
below the horizon (light arriving from inside the medium).

Example::

    p = DielectricParams(eta=ir.Float(1.5) / 1.0, specular_reflectance=Vec(1.0, 1.0, 1.0),
                         specular_transmittance=Vec(1.0, 1.0, 1.0))
    wo, pdf, weight, is_delta = sample(p, wi, u1, u2)
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .. import mueller, spectrum
from .base import COLOR, IOR, BsdfType, Param, black

from .fresnel import fresnel, reflect, refract


@dataclasses.dataclass
class DielectricParams:
    """eta = int_ior / ext_ior; the two tints are rgb ``Vec``s (1 by default
    in Mitsuba)."""
    eta: Any
    specular_reflectance: Vec
    specular_transmittance: Vec


def eval(params: DielectricParams, wi: Vec, wo: Vec) -> Vec:  # noqa: A001 - BSDF interface name
    return black()


def pdf(params: DielectricParams, wi: Vec, wo: Vec):
    return ir.Float(0.0)


def sample(params: DielectricParams, wi: Vec, u1, u2: Vec):
    """(wo, pdf, weight, is_delta) as Mitsuba's ``bsdf.sample`` (radiance mode)."""
    S = spectrum.active()
    # A dispersive IOR (spectral variant) differs per wavelength: the event
    # and the refracted direction follow the first wavelength's (after a
    # refraction the path tracer keeps that wavelength alone, path.py).
    etas = S.ior(params.eta) if S.dispersion else None
    eta = params.eta if etas is None else etas[0]
    r_i, cos_theta_t, eta_it, eta_ti = fresnel(wi.z, eta)
    t_i = 1.0 - r_i
    sel_r = u1 <= r_i
    wo = ir.select(sel_r, reflect(wi), refract(wi, cos_theta_t, eta_ti))
    p = ir.select(sel_r, r_i, t_i)
    if S.polarized:
        return wo, p, _polarized_weight(S, params, etas, wi, wo, sel_r, p, eta_ti), ir.Bool(True)
    w_t = params.specular_transmittance * (eta_ti * eta_ti)
    w_r = params.specular_reflectance
    if etas is not None:
        # each wavelength's reflectance over the first one's, the probability
        w_r = w_r * Vec(*(fresnel(wi.z, e)[0] for e in etas)) * ir.select(r_i > 0.0, 1.0 / ir.select(
            r_i > 0.0, r_i, 1.0), 0.0)
    weight = ir.select(sel_r, w_r, w_t)
    return wo, p, weight, ir.Bool(True)


def _polarized_weight(S, params: DielectricParams, etas, wi: Vec, wo: Vec, sel_r, p, eta_ti) -> Vec:
    """Mitsuba's polarized weight: the Fresnel matrix of the chosen event
    for light arriving along -wo (from inside where wo.z < 0) over its
    probability, in the Stokes bases of -wo and wi, times the tint (and
    eta_ti^2 after a refraction, as unpolarized); with a dispersive IOR
    (``etas``) each wavelength's own matrix."""
    inv_p = ir.select(p > 0.0, 1.0 / ir.select(p > 0.0, p, 1.0), 0.0)
    scale = inv_p * ir.select(sel_r, 1.0, eta_ti * eta_ti)
    tint = ir.select(sel_r, params.specular_reflectance, params.specular_transmittance)

    def matrix(eta):
        return mueller.in_specular_bases(mueller.select(sel_r, mueller.specular_reflection(wo.z, eta),
                                                        mueller.specular_transmission(wo.z, eta)), wo, wi)

    # (the same eta in every channel without dispersion: value numbering traces it once)
    return S.from_matrices([mueller.scale(matrix(params.eta if etas is None else etas[c]), scale * tint[c])
                            for c in range(S.channels)])


# The IOR of a refracting interface bends the sampled direction itself.
REFRACTION_NONDIFF = ("the derivative with respect to an index of refraction that bends transmitted rays needs "
                      "attached sampling, which the adjoint integrators do not do")
GLASS_PARAMS = (Param("specular_reflectance", COLOR, 1.0), Param("specular_transmittance", COLOR, 1.0),
                Param("eta", IOR, "bk7", nondiff=REFRACTION_NONDIFF))
TYPE = BsdfType("dielectric", "dielectric", GLASS_PARAMS,
                lambda p: DielectricParams(p.eta, p.specular_reflectance, p.specular_transmittance),
                eval, pdf, sample, eta="eta", transmissive=True, delta=True, polarizing=True)
