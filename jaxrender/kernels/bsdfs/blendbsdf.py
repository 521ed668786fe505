"""Mitsuba's ``blendbsdf``: a linear blend of two BSDFs by ``weight`` (a
float or texture, clipped to [0, 1]; 0 gives the first BSDF).

Values and pdfs mix linearly. Sampling picks the second BSDF where
``u1 <= weight`` (the first otherwise), reuses ``u1`` rescaled to [0, 1) for
the child, and, as Mitsuba 3.9, reports the mixture: pdf ``(1 - w) p0 + w p1``
and weight ``((1 - w) f0 + w f1) / pdf``, where the sampled child contributes
its own sample (value = weight x pdf, so a delta lobe's too) and the other
its eval / pdf towards the sampled direction. In differentiable form that
pdf is a constant: the derivative is the mixed value's over it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .base import BSDF, FLOAT, BsdfType, Param

# The largest float below 1: a rescaled sample stays in [0, 1).
ONE_MINUS_EPS = 0.99999994


@dataclasses.dataclass
class BlendParams:
    weight: Any
    bsdf_0: Any
    bsdf_1: Any


def _mix(a, b, w):
    return a * (1.0 - w) + b * w


def query(p: BlendParams, nested, wi: Vec, wos: list, u):
    w = ir.clamp(p.weight, 0.0, 1.0)
    if u is None:
        e0, _ = nested.query(p.bsdf_0, wi, wos)
        e1, _ = nested.query(p.bsdf_1, wi, wos)
        return [(_mix(f0, f1, w), _mix(p0, p1, w)) for (f0, p0), (f1, p1) in zip(e0, e1)], None
    u1, u2 = u
    second = u1 <= w
    u_child = ir.select(second, u1 / ir.select(w > 0.0, w, 1.0), (u1 - w) / ir.select(w < 1.0, 1.0 - w, 1.0))
    _, s = nested.query(ir.select(second, p.bsdf_1, p.bsdf_0), wi, [], (ir.minimum(u_child, ONE_MINUS_EPS), u2))
    wo = nested.detach(s.wo)
    e0, _ = nested.query(p.bsdf_0, wi, wos + [wo])
    e1, _ = nested.query(p.bsdf_1, wi, wos + [wo])
    (f0, p0), (f1, p1) = e0.pop(), e1.pop()
    pdf_s = nested.detach(s.pdf)
    own = s.weight * pdf_s          # the sampled child's value towards wo
    value = ir.select(second, _mix(f0, own, w), _mix(own, f1, w))
    pdf = ir.select(second, _mix(p0, pdf_s, w), _mix(pdf_s, p1, w))
    pdf_c = nested.detach(pdf)
    weight = value * ir.select(pdf_c > 0.0, 1.0 / ir.select(pdf_c > 0.0, pdf_c, 1.0), 0.0)
    evals = [(_mix(f0, f1, w), _mix(q0, q1, w)) for (f0, q0), (f1, q1) in zip(e0, e1)]
    choice = None if s.choice is None else s.choice * ir.select(second, w, 1.0 - w)
    return evals, dataclasses.replace(s, wo=wo, pdf=pdf, weight=weight, choice=choice)


def mix_albedo(p: BlendParams, nested, wi: Vec) -> Vec:
    w = ir.clamp(p.weight, 0.0, 1.0)
    return _mix(nested.albedo(p.bsdf_0, wi), nested.albedo(p.bsdf_1, wi), w)


def null_transmission(p: BlendParams, nested, wi: Vec):
    w = ir.clamp(p.weight, 0.0, 1.0)
    return _mix(nested.null_transmission(p.bsdf_0, wi), nested.null_transmission(p.bsdf_1, wi), w)


TYPE = BsdfType("blendbsdf", "blendbsdf", (Param("weight", FLOAT), Param("bsdf_0", BSDF), Param("bsdf_1", BSDF)),
                lambda v: BlendParams(v.weight, v.bsdf_0, v.bsdf_1), None, None, None,
                query=query, mix_albedo=mix_albedo, null_transmission=null_transmission)
