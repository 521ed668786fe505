"""Mitsuba's ``constant`` environment: the same radiance from every
direction, sampled uniformly on the sphere."""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from ..sampling import INV_FOUR_PI, square_to_uniform_sphere
from .base import INF, DirectionSample, EmitterType


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    w = square_to_uniform_sphere(Vec(u[1], u[2]))
    return DirectionSample(w, ir.Float(INF), ir.Float(1.0), ir.Float(INV_FOUR_PI), ir.Bool(False))


def pdf_direction(ctx, sel, w: Vec):
    return ir.Float(INV_FOUR_PI)


TYPE = EmitterType("constant", sample, environment=True, pdf_direction=pdf_direction)
