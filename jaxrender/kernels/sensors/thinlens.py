"""Mitsuba's ``thinlens`` sensor: a perspective camera with a circular
aperture, so that only the plane at ``focus_distance`` is sharp.

A ray leaves a point on the aperture disk (radius ``aperture_radius`` in
the camera's xy plane, sampled with the concentric map from the lens
uniforms) towards the point of the focal plane that the pinhole ray
through its film position reaches; it starts where it crosses the near
clip plane and ends at the far one, as in Mitsuba. Its ``camera`` row is
the perspective one plus ``CAMERA_APERTURE`` and ``CAMERA_FOCUS``.
"""
from __future__ import annotations

from ...ir import Vec
from ... import ir
from .. import layout
from ..sampling import square_to_uniform_disk_concentric
from .perspective import CameraRow

NAME = "thinlens"


def sample_ray(ctx, x, y, lens):
    """The ray of film position (x, y) in [0, 1]^2 and lens uniforms
    ``lens``: (origin, unit direction, t_min, t_max)."""
    cam = CameraRow(ctx.b["camera"])
    radius = cam.row.read(0, layout.CAMERA_APERTURE)
    focus = cam.row.read(0, layout.CAMERA_FOCUS)
    disk = square_to_uniform_disk_concentric(Vec(lens[0], lens[1], 0.0))
    aperture = Vec(disk.x * radius, disk.y * radius, 0.0)
    dc = ir.normalize(cam.film_point(x, y, focus) - aperture)
    return cam.point(aperture), ir.normalize(cam.vector(dc)), cam.near / dc.z, cam.far / dc.z
