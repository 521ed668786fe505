"""Mitsuba's ``directional`` light: ``irradiance`` arriving along the unit
direction in ``emitter_geom``, from infinitely far (a delta emitter)."""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .base import INF, DirectionSample, EmitterType


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    g = Vec(*(ctx.b["emitter_geom"].read(sel, k) for k in range(3)))
    return DirectionSample(-g, ir.Float(INF), ir.Float(1.0), ir.Float(0.0), ir.Bool(True))


TYPE = EmitterType("directional", sample)
