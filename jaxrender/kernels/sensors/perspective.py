"""Mitsuba's ``perspective`` sensor: a pinhole camera.

Its ``camera`` row (``layout.CAMERA_*``): the camera-to-world matrix, the
tangents of the half fields of view along x and y, and the near and far
clip distances. Camera space looks down +z with +x to the image's left
(Mitsuba's convention); rays start at the near clip plane and end at the
far one.
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout

NAME = "perspective"


def sample_ray(ctx, x, y):
    """The ray through film position (x, y) in [0, 1]^2: (origin, unit
    direction, t_min, t_max)."""
    cam = ctx.b["camera"]
    m = [cam.read(0, layout.CAMERA_TO_WORLD + k) for k in range(16)]
    tan_x, tan_y = cam.read(0, layout.CAMERA_TAN_X), cam.read(0, layout.CAMERA_TAN_Y)
    near, far = cam.read(0, layout.CAMERA_NEAR_CLIP), cam.read(0, layout.CAMERA_FAR_CLIP)
    dc = ir.normalize(Vec((1.0 - 2.0 * x) * tan_x, (1.0 - 2.0 * y) * tan_y, 1.0))
    d = ir.normalize(Vec(m[0] * dc.x + m[1] * dc.y + m[2] * dc.z,
                         m[4] * dc.x + m[5] * dc.y + m[6] * dc.z,
                         m[8] * dc.x + m[9] * dc.y + m[10] * dc.z))
    return Vec(m[3], m[7], m[11]), d, near / dc.z, far / dc.z
