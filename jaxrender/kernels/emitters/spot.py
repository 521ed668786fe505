"""Mitsuba's ``spot`` light: ``intensity`` from a point, shining along +z
of its ``to_world``: full within ``beam_width`` of the axis, then falling
off linearly in angle to 0 at ``cutoff_angle``. Its ``emitter_frame`` row
holds the world-to-local rotation and the angles (``layout.FRAME_SPOT_*``)."""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from .base import DirectionSample, EmitterType
from .point import position


def falloff(frame, sel, w: Vec):
    """The spot's falloff in world direction ``w`` (from the light)."""
    local = Vec(*(ir.dot(Vec(frame.read(sel, 3 * k), frame.read(sel, 3 * k + 1), frame.read(sel, 3 * k + 2)), w)
                  for k in range(3)))
    cos_t = local.z * ir.rsqrt(ir.dot(local, local))
    cos_cutoff, cos_beam = frame.read(sel, layout.FRAME_SPOT_COS_CUTOFF), frame.read(sel, layout.FRAME_SPOT_COS_BEAM)
    cutoff, inv_width = frame.read(sel, layout.FRAME_SPOT_CUTOFF), frame.read(sel, layout.FRAME_SPOT_INV_WIDTH)
    beam = ir.select(cos_t >= cos_beam, 1.0, (cutoff - ir.acos(ir.clamp(cos_t, -1.0, 1.0))) * inv_width)
    return ir.select(cos_t > cos_cutoff, beam, 0.0)


def sample(ctx, sel, ref: Vec, u) -> DirectionSample:
    to_light = position(ctx, sel) - ref
    dist2 = ir.dot(to_light, to_light)
    dist = ir.sqrt(dist2)
    w = to_light / dist
    return DirectionSample(w, dist, falloff(ctx.b["emitter_frame"], sel, -w) / dist2, ir.Float(0.0),
                           ir.Bool(True))


TYPE = EmitterType("spot", sample)
