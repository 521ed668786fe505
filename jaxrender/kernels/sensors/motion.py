"""How a sample's estimate changes when the camera moves (its ``to_world``
and field of view), for the perspective sensor.

Derivatives are taken in *material form*: the point x that a sample's
camera ray met stays where it is while the camera moves, and what changes
is

- where x lands on the film, so the filter weights of the pixels around it
  (:func:`attached_weights`);
- how much film area a unit of area at x covers (the Jacobian ``J`` below),
  which the estimate is divided by relative to its value at the sample;
- the direction from x back to the camera, so the shading at x
  (:func:`attach_primary_wi`).

Points the camera sees through a miss are directions (an environment).
What is *not* smooth in this form, the visibility of points behind a
silhouette and points crossing the film's edge, are boundary terms
estimated by ``integrators/boundary.py``. For a pinhole with half-field
tangents tx, ty, the film area (in units of the [0, 1]^2 film) per unit
area at x is |n.(o - x)| / (4 tx ty c_z^3), with c = x in camera space and
n the surface normal; per unit solid angle of a direction, 1 / (4 tx ty c_z^3).
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from ..interaction import followed, shown_hit
from . import film
from .perspective import CameraRow


def camera_space(cam: CameraRow, x: Vec, point) -> Vec:
    """``x`` (a point where ``point``, a bool or Bool, else a direction) in
    camera space; the camera's to_world is rigid (the scene checks it), so
    its inverse is the transpose."""
    m = cam.m
    if point is True:
        q = x - Vec(m[3], m[7], m[11])
    elif point is False:
        q = x
    else:
        q = x - Vec(m[3], m[7], m[11]) * ir.select(point, 1.0, 0.0)
    return Vec(m[0] * q.x + m[4] * q.y + m[8] * q.z, m[1] * q.x + m[5] * q.y + m[9] * q.z,
               m[2] * q.x + m[6] * q.y + m[10] * q.z)


def film_position(ctx, x: Vec, point=True, cam: CameraRow | None = None):
    """Where ``x`` lands on the film, in pixels of the sample grid
    (continuous: grid item (i, j) covers [j, j + 1) x [i, i + 1)); ``cam``:
    the camera row already read (default: read it here)."""
    cam = CameraRow(ctx.b["camera"]) if cam is None else cam
    c = camera_space(cam, x, point)
    b = ctx.b
    fx = 0.5 * (1.0 - c.x / (c.z * cam.tan_x))
    fy = 0.5 * (1.0 - c.y / (c.z * cam.tan_y))
    return fx * b["film_width"].value - b["grid_x0"].value, fy * b["film_height"].value - b["grid_y0"].value


def film_density(ctx, x: Vec, n: Vec, point) -> "ir.Var":
    """Film area per unit area at point ``x`` with normal ``n`` (per unit
    solid angle where ``point`` is false: x is a direction)."""
    cam = CameraRow(ctx.b["camera"])
    z = camera_space(cam, x, point).z
    cos = ir.select(point, ir.abs(ir.dot(n, Vec(cam.m[3], cam.m[7], cam.m[11]) - x)), 1.0)
    return cos / (4.0 * cam.tan_x * cam.tan_y * z * z * z)


def relative(x):
    """x / detach(x): 1 in value, x's relative derivative (1 where x is 0)."""
    d = ir.detach(x)
    return ir.select(d != 0.0, x / ir.select(d != 0.0, d, 1.0), 1.0)


def primary_point(ctx, s):
    """What the camera ray of sample ``s`` meets, the camera held still:
    (hit, point or direction, geometric normal, the measure of the point's
    coordinates). In kernels for moving geometry the point follows its
    surface at its material coordinates, whose measure this is (a
    direction's: 1)."""
    from . import sample_ray
    o, d, t_min, t_max = (ir.detach(v) for v in sample_ray(ctx, s))
    si = shown_hit(ctx, o, d, t_min, t_max)     # (found in transport; following() moves it)
    measure = ir.Float(1.0)
    if ctx.geometry_motion:
        si, measure = followed(ctx, si)
    return si.hit, ir.select(si.hit, si.p, d), si.ng, measure


def attached_weights(ctx, s, footprint: int) -> list:
    """Sample ``s``'s splat weights (``film.splat_weights``) as functions of
    the camera with the point it sees held fixed, times the relative change
    of the film density there: equal in value, carrying the camera's
    derivatives."""
    hit, x, n, measure = primary_point(ctx, s)
    px, py = film_position(ctx, x, hit)
    width = ctx.b["width"].value
    ux = px - ir.cast(ctx.pixel % width, "f32")
    uy = py - ir.cast(ctx.pixel // width, "f32")
    scale = relative(film_density(ctx, x, n, hit) * measure)
    return [w * scale for w in film.weights_at(ctx, ux, uy, footprint)]


def camera_origin(ctx) -> Vec:
    """The camera's position (a function of its buffer)."""
    m = CameraRow(ctx.b["camera"]).m
    return Vec(m[3], m[7], m[11])


def attach_primary_wi(ctx, si, first):
    """``si`` with its incident direction (towards the camera) a function of
    the camera's position where ``first`` (the camera ray's own hit)."""
    cam = CameraRow(ctx.b["camera"])
    toward = ir.normalize(Vec(cam.m[3], cam.m[7], cam.m[11]) - ir.detach(si.p))
    wi = si.frame.to_local(toward)
    return dataclasses.replace(si, wi=Vec(*(ir.select(first, a, b) for a, b in zip(wi, si.wi))))
