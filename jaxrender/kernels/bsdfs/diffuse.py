"""Lambertian (smooth diffuse) BSDF, as Mitsuba's ``diffuse`` plugin.

``DiffuseParams(reflectance=Vec(r, g, b))``; see the package docstring for
the eval / pdf / sample interface.
"""
from __future__ import annotations

import dataclasses
import math

from ... import ir
from ...ir import Vec
from ..spectrum import black
from .base import COLOR, BsdfType, Param
from .. import sampling

INV_PI = 1.0 / math.pi


@dataclasses.dataclass
class DiffuseParams:
    reflectance: Vec


def eval(params: DiffuseParams, wi: Vec, wo: Vec) -> Vec:
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    return ir.select(ok, params.reflectance * (INV_PI * wo.z), black())


def pdf(params: DiffuseParams, wi: Vec, wo: Vec):
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    return ir.select(ok, sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)


def sample(params: DiffuseParams, wi: Vec, u1, u2: Vec):
    wo = sampling.square_to_cosine_hemisphere(u2)
    p = sampling.square_to_cosine_hemisphere_pdf(wo)
    ok = (wi.z > 0.0) & (p > 0.0)
    weight = ir.select(ok, params.reflectance, black())
    return wo, p, weight, ir.Bool(False)


TYPE = BsdfType("diffuse", "diffuse", (Param("reflectance", COLOR, 0.5),),
                lambda p: DiffuseParams(p.reflectance), eval, pdf, sample, albedo="reflectance")
