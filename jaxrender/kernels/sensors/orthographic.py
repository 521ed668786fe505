"""Mitsuba's ``orthographic`` sensor: parallel rays along the camera's +z.

The film covers [-1, 1] x [-1/aspect, 1/aspect] of the camera's xy plane
(``CAMERA_TAN_X`` / ``CAMERA_TAN_Y`` hold 1 and 1/aspect), scaled by
``to_world``, which, unlike a perspective camera's, may scale (its
extent). Rays start on the near clip plane and run ``far - near`` along
the normalised direction, as in Mitsuba.
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .perspective import CameraRow

NAME = "orthographic"


def sample_ray(ctx, x, y, lens=None):
    """The ray of film position (x, y) in [0, 1]^2 (``lens`` unused)."""
    cam = CameraRow(ctx.b["camera"])
    origin = cam.point(cam.film_point(x, y, 1.0) * Vec(1.0, 1.0, 0.0) + Vec(0.0, 0.0, cam.near))
    return origin, ir.normalize(cam.vector(Vec(0.0, 0.0, 1.0))), ir.Float(0.0), cam.far - cam.near
