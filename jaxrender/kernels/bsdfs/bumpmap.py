"""Mitsuba's ``bumpmap``: a nested BSDF seen in the shading frame of a
surface displaced along its shading normal by a height texture (one nested
bitmap, its uv gradient ``textures.gradient`` times ``scale``).

As in Mitsuba 3.9: the displaced dp_du / dp_dv replace their normal
components by the gradient's, their cross product is the new normal
(turned to the geometric normal's side), in the local frame;
``flip_invalid_normals`` mirrors its tangential part where the incident
direction sees it from the other side. The tilted frame's tangent is
Mitsuba 3.9.1's: the hit's world-space dp_du made orthogonal to that local
normal, as if it were a local vector (Mitsuba mixes the two spaces there;
isotropic children do not see the tangent, samples do). The rest, the
shadowing term and the side checks, is normalmap's (``normalmap.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .. import textures
from .base import BSDF, FLAG, SCALAR, TEXTURE, BsdfType, Param
from .normalmap import Tilt, flip_invalid, mix_albedo, tilted_query


@dataclasses.dataclass
class BumpmapParams:
    nested_texture: Any
    nested_bsdf: Any
    scale: Any
    flip_invalid_normals: Any
    use_shadowing_function: Any


def tilt(p: BumpmapParams, nested, wi: Vec) -> Tilt:
    sf = nested.surface
    si, b = sf.si, sf.ctx.b
    gu, gv = textures.gradient(b, p.nested_texture, textures.hit_uv(b, si.prim, si.b1, si.b2))
    n = si.frame.n
    du = si.dp_du + n * (gu * p.scale - ir.dot(n, si.dp_du))
    dv = si.dp_dv + n * (gv * p.scale - ir.dot(n, si.dp_dv))
    m = ir.normalize(ir.cross(du, dv))
    m = m * ir.select(ir.dot(si.ng, m) < 0.0, -1.0, 1.0)
    m = flip_invalid(si.frame.to_local(m), wi, p.flip_invalid_normals)
    s = ir.normalize(si.dp_du - m * ir.dot(m, si.dp_du))
    return Tilt(s, ir.cross(m, s), m)


def query(p: BumpmapParams, nested, wi: Vec, wos: list, u):
    return tilted_query(nested, p.nested_bsdf, tilt(p, nested, wi), p.use_shadowing_function, wi, wos, u)


TYPE = BsdfType("bumpmap", "bumpmap",
                (Param("nested_texture", TEXTURE), Param("nested_bsdf", BSDF),
                 Param("scale", SCALAR, 1.0, nondiff="Mitsuba's bumpmap scale is not differentiable"),
                 Param("flip_invalid_normals", FLAG, True), Param("use_shadowing_function", FLAG, True)),
                lambda v: BumpmapParams(v.nested_texture, v.nested_bsdf, v.scale, v.flip_invalid_normals,
                                        v.use_shadowing_function),
                None, None, None, query=query, mix_albedo=mix_albedo, frame=True)
