"""Mitsuba's ``point`` light: ``intensity`` (W/sr) from ``emitter_geom``'s
position, a delta emitter."""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .base import DirectionSample, EmitterType


def position(ctx, sel) -> Vec:
    return Vec(*(ctx.b["emitter_geom"].read(sel, k) for k in range(3)))


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    to_light = position(ctx, sel) - ref
    dist2 = ir.dot(to_light, to_light)
    dist = ir.sqrt(dist2)
    return DirectionSample(to_light / dist, dist, 1.0 / dist2, ir.Float(0.0), ir.Bool(True))


TYPE = EmitterType("point", sample)
