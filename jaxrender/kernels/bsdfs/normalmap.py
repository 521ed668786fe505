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

Directions arrive in the hit's local frame, which in scenes with this BSDF
is Mitsuba's (``Structure.tangents``: its first axis along dp_du), so the
tilted frame is built in Mitsuba's coordinates and nested children see it
as theirs. In differentiable form the sampled direction is held fixed in the surface's
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
    """A perturbed frame (s, t, n) in the hit's shading coordinates (in
    scenes with a frame-perturbing BSDF, Mitsuba's: its first axis along
    dp_du, ``sampling.Frame.along``)."""

    def __init__(self, s: Vec, t: Vec, n: Vec):
        self.s, self.t, self.n = s, t, n

    def to_tilted(self, v: Vec) -> Vec:
        """A local direction in the tilted frame."""
        return Vec(ir.dot(v, self.s), ir.dot(v, self.t), ir.dot(v, self.n))

    def from_tilted(self, v: Vec) -> Vec:
        return self.s * v.x + self.t * v.y + self.n * v.z


def flip_invalid(n: Vec, wi: Vec, flag) -> Vec:
    """Mitsuba's ``flip_invalid_normals``: the normal's tangential part
    mirrored where ``wi`` sees it from the other side than the surface."""
    flip = (flag > 0.5) & (wi.z * ir.dot(wi, n) <= 0.0)
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
    use_shadow = shadow_flag > 0.5

    def term(w: Vec):
        return ir.select(use_shadow, shadowing(tilt.n, w), 1.0)

    def evaluate(dirs: list, extra_u=None):
        tilted = [tilt.to_tilted(w) for w in dirs]
        evals, s = nested.query(child, tilt.to_tilted(wi), tilted, extra_u)
        out = []
        for w, wt, (f, pdf) in zip(dirs, tilted, evals):
            ok = w.z * wt.z > 0.0
            out.append((ir.select(ok, f * term(w), S.zero()), ir.select(ok, pdf, 0.0)))
        return out, s

    evals, s = evaluate(wos, u)
    if s is None:
        return evals, None
    wo = tilt.from_tilted(s.wo)
    ok = s.wo.z * wo.z > 0.0
    nonzero = ir.Bool(False)
    for c in s.weight:
        nonzero = nonzero | (c != 0.0)
    ok = ok & nonzero
    weight = s.weight * term(wo)
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
    n = Vec(*(2.0 * c - 1.0 for c in tuple(p.normalmap)[:3]))
    n = ir.normalize(flip_invalid(n, wi, p.flip_invalid_normals))
    s = ir.normalize(Vec(1.0 - n.x * n.x, -n.y * n.x, -n.z * n.x))
    return Tilt(s, ir.cross(n, s), n)


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
