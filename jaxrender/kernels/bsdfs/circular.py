"""Mitsuba's ``circular``: an ideal circular polarizer sheet.

Light passes straight through it (the null component, as ``polarizer``):
in polarized variants weighted by the Mueller matrix of a right (or, with
``left_handed``, left) circular polarizer times ``transmittance``; without
polarization it transmits ``0.5 * transmittance`` of the (unpolarized)
light. Its albedo (the aov integrator's) is ``transmittance``, as Mitsuba's.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .. import mueller, spectrum
from . import null
from .base import COLOR, FLAG, BsdfType, Param


@dataclasses.dataclass
class CircularParams:
    transmittance: Vec
    left_handed: Any      # 1.0 or 0.0


def sample(params: CircularParams, wi: Vec, u1, u2: Vec):
    S = spectrum.active()
    if not S.polarized:
        return -wi, ir.Float(1.0), params.transmittance * 0.5, ir.Bool(True)
    m = mueller.select(params.left_handed > 0.5, mueller.left_circular_polarizer(),
                       mueller.right_circular_polarizer())
    # (a circular polarizer is the same in every frame; Mitsuba's rotation kept for its arithmetic)
    m = mueller.rotate_mueller_basis_collinear(m, wi, Vec(1.0, 0.0, 0.0), mueller.stokes_basis(wi), in_space=True)
    weight = S.from_matrices([mueller.scale(m, params.transmittance[c]) for c in range(S.channels)])
    return -wi, ir.Float(1.0), weight, ir.Bool(True)


PARAMS = (Param("transmittance", COLOR, 1.0), Param("left_handed", FLAG, False))
TYPE = BsdfType("circular", "circular", PARAMS, lambda p: CircularParams(p.transmittance, p.left_handed),
                null.eval, null.pdf, sample, albedo="transmittance", null=True, polarizing=True)
