"""Mitsuba's ``polarizer``: an ideal linear polarizer sheet.

Light passes straight through it (its only sample is the null component,
``wo = -wi``, pdf 1, as the ``null`` BSDF's): in polarized variants
weighted by the Mueller matrix of a linear polarizer whose transmission
axis is at ``theta`` degrees from the shading frame's second axis (the
sheet's "up", (sin theta, cos theta, 0) in the local frame), projected
onto the plane orthogonal to the light for oblique incidence (Korger et
al. 2013, as Mitsuba), times ``transmittance``; with ``polarizing`` false
it halves the intensity of any light (an unpolarized filter). Without
polarization it transmits ``0.5 * transmittance`` of the (unpolarized)
light. It reflects nothing.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import mueller, spectrum
from . import null
from .base import COLOR, FLAG, FLOAT, BsdfType, Param


@dataclasses.dataclass
class PolarizerParams:
    theta: Any            # degrees
    transmittance: Vec
    polarizing: Any       # 1.0 or 0.0


def transmission(params: PolarizerParams, wi: Vec) -> Vec:
    """What the sheet does to light travelling along ``wi`` (local): a colour
    in unpolarized variants, a path spectrum in polarized ones."""
    S = spectrum.active()
    if not S.polarized:
        return params.transmittance * 0.5
    theta = params.theta * (math.pi / 180.0)
    forward = wi                        # the direction light travels (radiance transport)
    axis = Vec(ir.sin(theta), ir.cos(theta), 0.0)
    eff_a = ir.normalize(axis - forward * ir.dot(axis, forward))
    eff_t = ir.cross(forward, eff_a)
    m = mueller.rotate_mueller_basis_collinear(mueller.linear_polarizer(1.0), forward, eff_t,
                                               mueller.stokes_basis(forward))
    polarizing = S.from_matrices([mueller.scale(m, params.transmittance[c]) for c in range(S.channels)])
    return ir.select(params.polarizing > 0.5, polarizing, S.scaled(params.transmittance * 0.5))


def sample(params: PolarizerParams, wi: Vec, u1, u2: Vec):
    return -wi, ir.Float(1.0), transmission(params, wi), ir.Bool(True)


PARAMS = (Param("theta", FLOAT, 0.0), Param("transmittance", COLOR, 1.0), Param("polarizing", FLAG, True))
TYPE = BsdfType("polarizer", "polarizer", PARAMS,
                lambda p: PolarizerParams(p.theta, p.transmittance, p.polarizing), null.eval, null.pdf, sample,
                null=True, anisotropic=True, polarizing=True)
