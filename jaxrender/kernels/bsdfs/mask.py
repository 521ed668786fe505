"""Mitsuba's ``mask``: a nested BSDF where the surface is opaque and a null
(pass-through) component where it is not, by ``opacity`` (a float or
texture, clipped to [0, 1], default 0.5).

Values and pdfs are the nested BSDF's times the opacity. Sampling takes the
nested BSDF where ``u1 < opacity`` (``u1 / opacity`` reused for it; its pdf
times the opacity) and otherwise passes straight through: ``wo = -wi``, pdf
``1 - opacity``, weight 1, a delta (null) sample. The path tracer treats
that sample as Mitsuba's does (a vertex that counts towards ``max_depth``).
In differentiable form each choice's probability is a constant, so the
weights carry the derivative of ``opacity`` (Mitsuba's ``replace_grad``).
The albedo is the nested BSDF's.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .base import BSDF, FLOAT, BsdfType, Param
from .blendbsdf import ONE_MINUS_EPS


@dataclasses.dataclass
class MaskParams:
    opacity: Any
    nested_bsdf: Any


def _over_detached(nested, x):
    """x / detach(x): 1 with x's derivative relative to itself (0 where x is 0)."""
    if not nested.diff:
        return ir.Float(1.0)
    d = nested.detach(x)
    return ir.select(d > 0.0, x / ir.select(d > 0.0, d, 1.0), 0.0)


def query(p: MaskParams, nested, wi: Vec, wos: list, u):
    a = ir.clamp(p.opacity, 0.0, 1.0)
    u_child = None
    if u is not None:
        u_child = (ir.minimum(u[0] / ir.select(a > 0.0, a, 1.0), ONE_MINUS_EPS), u[1])
    evals, s = nested.query(p.nested_bsdf, wi, wos, u_child)
    evals = [(f * a, pdf * a) for f, pdf in evals]
    if u is None:
        return evals, None
    opaque = u[0] < a
    through = nested.spectrum.one() * _over_detached(nested, 1.0 - a)
    return evals, dataclasses.replace(
        s, wo=ir.select(opaque, s.wo, -wi), pdf=ir.select(opaque, s.pdf * a, 1.0 - a),
        weight=ir.select(opaque, s.weight * _over_detached(nested, a), through),
        delta=ir.select(opaque, s.delta, True), null=ir.select(opaque, s.null, True),
        choice=ir.select(opaque, s.choice * a, 1.0 - a))


def null_transmission(p: MaskParams, nested, wi: Vec):
    """Where the surface is not opaque light passes, and where it is, what
    the nested BSDF lets through."""
    a = ir.clamp(p.opacity, 0.0, 1.0)
    return 1.0 - a * (1.0 - nested.null_transmission(p.nested_bsdf, wi))


def mix_albedo(p: MaskParams, nested, wi: Vec) -> Vec:
    return nested.albedo(p.nested_bsdf, wi)


TYPE = BsdfType("mask", "mask", (Param("opacity", FLOAT, 0.5), Param("nested_bsdf", BSDF)),
                lambda v: MaskParams(v.opacity, v.nested_bsdf), None, None, None,
                query=query, mix_albedo=mix_albedo, null=True, null_transmission=null_transmission)
