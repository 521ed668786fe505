"""Mitsuba's ``normalmap``: a nested BSDF seen in a shading frame tilted
towards the normal the texture ``normalmap`` stores (its RGB as 2 v - 1,
in Mitsuba's shading frame: tangent dp_du made orthogonal to the shading
normal, then n x tangent, then n).

As in Mitsuba 3.9: where ``flip_invalid_normals`` (default) and the
incident direction lies on the other side of the mapped normal than of the
surface, the normal's tangential part is mirrored; the tilted frame's
tangent is (1, 0, 0) made orthogonal to the mapped normal. Values and pdfs
are the nested BSDF's in that frame, zero where ``wo`` lies on different
sides of the shading and the tilted normal; with
``use_shadowing_function`` (default) values and sample weights are scaled
by the microfacet shadowing term of Estevez et al. 2019. The albedo is the
nested BSDF's, unperturbed.

Directions arrive in jaxrender's local frame (its tangent is the normal's
coordinate system, not dp_du); ``Nested.tangent`` gives Mitsuba's tangent
there, so the frame is built in Mitsuba's coordinates, and nested
children see their own perturbed frame (``Nested.within``). In
differentiable form the sampled direction is held fixed in the surface's
frame, not the tilted one: a smooth sample's weight is this BSDF's value
towards it over its (detached) pdf, so the normal map's derivative goes
through the value; a delta sample keeps the child's weight.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .base import BSDF, COLOR, FLAG, BsdfType, Param


@dataclasses.dataclass
class NormalmapParams:
    normalmap: Any
    nested_bsdf: Any
    flip_invalid_normals: Any
    use_shadowing_function: Any


class Tilt:
    """A perturbed frame (s, t, n), in Mitsuba's shading coordinates, and
    the rotation (cos, sin) from jaxrender's local frame into those."""

    def __init__(self, s: Vec, t: Vec, n: Vec, rot):
        self.s, self.t, self.n, self.rot = s, t, n, rot

    def to_mitsuba(self, v: Vec) -> Vec:
        c, s = self.rot
        return Vec(c * v.x + s * v.y, c * v.y - s * v.x, v.z)

    def from_mitsuba(self, v: Vec) -> Vec:
        c, s = self.rot
        return Vec(c * v.x - s * v.y, s * v.x + c * v.y, v.z)

    def to_tilted(self, v: Vec) -> Vec:
        """A local direction in the tilted frame."""
        m = self.to_mitsuba(v)
        return Vec(ir.dot(m, self.s), ir.dot(m, self.t), ir.dot(m, self.n))

    def from_tilted(self, v: Vec) -> Vec:
        return self.from_mitsuba(self.s * v.x + self.t * v.y + self.n * v.z)


def flip_invalid(n: Vec, wi_m: Vec, flag) -> Vec:
    """Mitsuba's ``flip_invalid_normals``: the normal's tangential part
    mirrored where ``wi`` (Mitsuba's coordinates) sees it from the other
    side than the surface."""
    flip = (flag > 0.5) & (wi_m.z * ir.dot(wi_m, n) <= 0.0)
    return Vec(ir.select(flip, -n.x, n.x), ir.select(flip, -n.y, n.y), n.z)


def _tan2(v: Vec):
    z2 = v.z * v.z
    return ir.maximum(1.0 - z2, 0.0) / z2


def shadowing(n: Vec, wo: Vec):
    """The shadowing term of Estevez et al. 2019 for a tilted normal ``n``
    and ``wo``, both in the surface's shading coordinates."""
    alpha2 = ir.minimum(0.125 * _tan2(n), 1.0)
    return 2.0 / (1.0 + ir.sqrt(1.0 + alpha2 * _tan2(wo)))


def tilted_query(nested, child, tilt: Tilt, shadow_flag, wi: Vec, wos: list, u):
    """What normalmap and bumpmap share: the nested BSDF ``child`` queried
    in the tilted frame, its answers taken back to the local frame."""
    S = nested.spectrum
    inner = nested.within((ir.Float(1.0), ir.Float(0.0)))
    use_shadow = shadow_flag > 0.5

    def term(wo_m: Vec):
        return ir.select(use_shadow, shadowing(tilt.n, wo_m), 1.0)

    def evaluate(dirs: list, extra_u=None):
        tilted = [tilt.to_tilted(w) for w in dirs]
        evals, s = inner.query(child, tilt.to_tilted(wi), tilted, extra_u)
        out = []
        for w, wt, (f, pdf) in zip(dirs, tilted, evals):
            ok = w.z * wt.z > 0.0
            out.append((ir.select(ok, f * term(tilt.to_mitsuba(w)), S.zero()), ir.select(ok, pdf, 0.0)))
        return out, s

    evals, s = evaluate(wos, u)
    if s is None:
        return evals, None
    wo_m = tilt.s * s.wo.x + tilt.t * s.wo.y + tilt.n * s.wo.z
    wo = tilt.from_mitsuba(wo_m)
    ok = s.wo.z * wo_m.z > 0.0
    nonzero = ir.Bool(False)
    for c in s.weight:
        nonzero = nonzero | (c != 0.0)
    ok = ok & nonzero
    weight = s.weight * term(wo_m)
    if nested.diff:
        wo_d = nested.detach(wo)
        (f_d, _), = evaluate([wo_d])[0]
        pdf_d = nested.detach(s.pdf)
        safe = pdf_d > 0.0
        smooth = f_d * ir.select(safe, 1.0 / ir.select(safe, pdf_d, 1.0), 0.0)
        weight = ir.select(s.delta, weight, smooth)
        wo = wo_d
    return evals, dataclasses.replace(s, wo=wo, pdf=ir.select(ok, s.pdf, 0.0), weight=ir.select(ok, weight, S.zero()))


def tilt(p: NormalmapParams, nested, wi: Vec) -> Tilt:
    rot = nested.tangent()
    frame = Tilt(None, None, None, rot)
    n = Vec(*(2.0 * c - 1.0 for c in tuple(p.normalmap)[:3]))
    n = ir.normalize(flip_invalid(n, frame.to_mitsuba(wi), p.flip_invalid_normals))
    s = ir.normalize(Vec(1.0 - n.x * n.x, -n.y * n.x, -n.z * n.x))
    return Tilt(s, ir.cross(n, s), n, rot)


def query(p: NormalmapParams, nested, wi: Vec, wos: list, u):
    return tilted_query(nested, p.nested_bsdf, tilt(p, nested, wi), p.use_shadowing_function, wi, wos, u)


def mix_albedo(p: NormalmapParams, nested, wi: Vec) -> Vec:
    return nested.albedo(p.nested_bsdf, wi)


TYPE = BsdfType("normalmap", "normalmap",
                (Param("normalmap", COLOR), Param("nested_bsdf", BSDF),
                 Param("flip_invalid_normals", FLAG, True), Param("use_shadowing_function", FLAG, True)),
                lambda v: NormalmapParams(v.normalmap, v.nested_bsdf, v.flip_invalid_normals,
                                          v.use_shadowing_function),
                None, None, None, query=query, mix_albedo=mix_albedo, frame=True)
