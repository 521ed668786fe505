"""Mitsuba's ``retarder``: an ideal linear retarder (wave plate) sheet.

Light passes straight through it (the null component, as ``polarizer``).
In polarized variants it is weighted by the Mueller matrix of a linear
retarder of phase ``delta`` degrees (default 90: a quarter-wave plate),
scaled by |cos theta_i| as Mitsuba's, with its fast axis at ``theta``
degrees from the shading frame's first axis (mirrored when seen from
behind), times ``transmittance``, as Mitsuba's (including how its axes
turn at oblique incidence, see ``sample``). Without polarization it
transmits ``transmittance``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import mueller, spectrum
from . import null
from .base import COLOR, FLOAT, BsdfType, Param


@dataclasses.dataclass
class RetarderParams:
    theta: Any            # degrees
    delta: Any            # degrees
    transmittance: Vec


def sample(params: RetarderParams, wi: Vec, u1, u2: Vec):
    S = spectrum.active()
    if not S.polarized:
        return -wi, ir.Float(1.0), params.transmittance, ir.Bool(True)
    cos_i = wi.z
    phase = params.delta * (math.pi / 180.0) * ir.abs(cos_i)
    side = ir.select(cos_i >= 0.0, 1.0, -1.0)
    m = mueller.rotated_element(side * params.theta * (math.pi / 180.0), mueller.linear_retarder(phase))
    # Mitsuba turns the plate's frame (x axis) to the ray's Stokes basis by
    # their angle in space, not seen along the ray: at oblique incidence the
    # plate's axes turn by about the angle of incidence (1 degree off the
    # normal, a half-wave plate at 15 degrees acts as one at 16). Kept, for
    # Mitsuba's images.
    m = mueller.rotate_mueller_basis_collinear(m, wi, Vec(1.0, 0.0, 0.0), mueller.stokes_basis(wi), in_space=True)
    weight = S.from_matrices([mueller.scale(m, params.transmittance[c]) for c in range(S.channels)])
    return -wi, ir.Float(1.0), weight, ir.Bool(True)


PARAMS = (Param("theta", FLOAT, 0.0), Param("delta", FLOAT, 90.0), Param("transmittance", COLOR, 1.0))
TYPE = BsdfType("retarder", "retarder", PARAMS,
                lambda p: RetarderParams(p.theta, p.delta, p.transmittance), null.eval, null.pdf, sample,
                null=True, anisotropic=True, polarizing=True)
