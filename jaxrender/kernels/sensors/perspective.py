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


def sample_ray(ctx, x, y, lens=None):
    """The ray through film position (x, y) in [0, 1]^2: (origin, unit
    direction, t_min, t_max). A pinhole: ``lens`` is not used."""
    cam = CameraRow(ctx.b["camera"])
    dc = ir.normalize(cam.film_point(x, y, 1.0))
    return cam.point(Vec(0.0, 0.0, 0.0)), ir.normalize(cam.vector(dc)), cam.near / dc.z, cam.far / dc.z


class CameraRow:
    """The ``camera`` row as the sensors read it."""

    def __init__(self, row):
        self.m = [row.read(0, layout.CAMERA_TO_WORLD + k) for k in range(16)]
        self.tan_x, self.tan_y = row.read(0, layout.CAMERA_TAN_X), row.read(0, layout.CAMERA_TAN_Y)
        self.near, self.far = row.read(0, layout.CAMERA_NEAR_CLIP), row.read(0, layout.CAMERA_FAR_CLIP)
        self.row = row

    def film_point(self, x, y, z):
        """The camera-space point at depth ``z`` that film position (x, y)
        looks through (+x is the image's left, as in Mitsuba)."""
        return Vec((1.0 - 2.0 * x) * self.tan_x * z, (1.0 - 2.0 * y) * self.tan_y * z, z)

    def vector(self, v: Vec) -> Vec:
        m = self.m
        return Vec(m[0] * v.x + m[1] * v.y + m[2] * v.z, m[4] * v.x + m[5] * v.y + m[6] * v.z,
                   m[8] * v.x + m[9] * v.y + m[10] * v.z)

    def point(self, p: Vec) -> Vec:
        return self.vector(p) + Vec(self.m[3], self.m[7], self.m[11])
