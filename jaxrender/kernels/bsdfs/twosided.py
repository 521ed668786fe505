"""Mitsuba's ``twosided`` with two different BSDFs: ``brdf_0`` seen from the
front (``wi.z > 0``), ``brdf_1`` from the back, evaluated as if seen from
its own front (z of ``wi`` and ``wo`` mirrored); nothing at grazing
``wi.z == 0``. One nested BSDF on both sides needs no composite: its row's
twosided flag does it (``surface.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .base import BSDF, BsdfType, Param


@dataclasses.dataclass
class TwosidedParams:
    brdf_0: Any
    brdf_1: Any


def _mirror(v: Vec, sz) -> Vec:
    return Vec(v.x, v.y, v.z * sz)


def query(p: TwosidedParams, nested, wi: Vec, wos: list, u):
    front = wi.z > 0.0
    sz = ir.select(front, 1.0, -1.0)
    seen = (wi.z != 0.0)
    evals, s = nested.query(ir.select(front, p.brdf_0, p.brdf_1), _mirror(wi, sz), [_mirror(w, sz) for w in wos], u)
    S = nested.spectrum
    evals = [(ir.select(seen, f, S.zero()), ir.select(seen, pdf, 0.0)) for f, pdf in evals]
    if s is not None:
        s = dataclasses.replace(s, wo=_mirror(s.wo, sz), pdf=ir.select(seen, s.pdf, 0.0),
                                weight=ir.select(seen, s.weight, S.zero()))
    return evals, s


def _on_side(p: TwosidedParams, wi: Vec, look, nothing):
    """``look(bsdf, wi)`` of the BSDF on ``wi``'s side, seen from its front; ``nothing`` at grazing ``wi``."""
    front = wi.z > 0.0
    value = look(ir.select(front, p.brdf_0, p.brdf_1), _mirror(wi, ir.select(front, 1.0, -1.0)))
    return ir.select(wi.z != 0.0, value, nothing)


def mix_albedo(p: TwosidedParams, nested, wi: Vec) -> Vec:
    return _on_side(p, wi, nested.albedo, nested.spectrum.full(0.0))


def null_transmission(p: TwosidedParams, nested, wi: Vec):
    return _on_side(p, wi, nested.null_transmission, ir.Float(0.0))


TYPE = BsdfType("twosided", "twosided", (Param("brdf_0", BSDF), Param("brdf_1", BSDF)),
                lambda v: TwosidedParams(v.brdf_0, v.brdf_1), None, None, None,
                query=query, mix_albedo=mix_albedo, null_transmission=null_transmission)
