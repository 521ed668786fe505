"""How a sample's estimate changes when the camera moves (its ``to_world``
and field of view), for the perspective, thinlens and orthographic sensors.

Derivatives are taken in *material form*: the point x that a sample's
camera ray met stays where it is while the camera moves, and what changes
is

- where x lands on the film, so the filter weights of the pixels around it
  (:func:`attached_weights`);
- how much film area a unit of area at x covers (the Jacobian ``J`` below),
  which the estimate is divided by relative to its value at the sample;
- the direction from x back to the camera, so the shading at x
  (:func:`attach_primary_wi`);
- for an orthographic camera, the one direction all its misses see, so
  the environment's radiance there (:func:`attach_primary_miss`).

Points the camera sees through a miss are directions (an environment).
What is *not* smooth in this form, the visibility of points behind a
silhouette and points crossing the film's edge, are boundary terms
estimated by ``integrators/boundary.py``. For a pinhole with half-field
tangents tx, ty, the film area (in units of the [0, 1]^2 film) per unit
area at x is |n.(o - x)| / (4 tx ty c_z^3), with c = x in camera space and
n the surface normal; per unit solid angle of a direction, 1 / (4 tx ty c_z^3).
An orthographic camera projects along its axis a = to_world (0, 0, 1)
(to_world may scale): the film area per unit area is |n.a| / (4 tx ty
|det to_world|), and what it sees through a miss is one direction, which
its motion turns but never moves on the film (a miss keeps its film
position, and the radiance it sees is the environment's along the turned
axis).

A thin lens is a pinhole per point of its aperture: a sample's ray leaves
the aperture point a (camera space, z = 0) towards the focal plane z = F,
so x lands at film coordinate (a.x / F + (c.x - a.x) / c_z) / tx (and y
likewise), the pinhole's projection seen from a shifted by a / F. Its film
density is the pinhole's with the camera's position replaced by a's. The
functions below take that point as ``eye`` (None: the pinhole's centre),
fixed in camera space while the camera moves; :func:`eye_of_sample` and
:func:`eye_of_ray` find it.
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from .. import layout
from ..interaction import first_hit, followed, shown_hit
from . import film
from .perspective import CameraRow


def orthographic(ctx) -> bool:
    """Whether the scene's camera is an orthographic one (else a pinhole)."""
    return ctx.structure.sensor == "orthographic"


def camera_space(cam: CameraRow, x: Vec, point, ortho: bool = False) -> Vec:
    """``x`` (a point where ``point``, a bool or Bool, else a direction) in
    camera space. A perspective camera's to_world is rigid (the scene
    checks it), so its inverse is the transpose; an orthographic one's
    (``ortho``) may scale, and is inverted."""
    m = cam.m
    if point is True:
        q = x - Vec(m[3], m[7], m[11])
    elif point is False:
        q = x
    else:
        q = x - Vec(m[3], m[7], m[11]) * ir.select(point, 1.0, 0.0)
    if ortho:
        # the rows of the inverse: the columns' cross products over the determinant
        c0, c1, c2 = (Vec(m[k], m[4 + k], m[8 + k]) for k in range(3))
        r0, r1, r2 = ir.cross(c1, c2), ir.cross(c2, c0), ir.cross(c0, c1)
        det = ir.dot(c0, r0)
        return Vec(ir.dot(r0, q) / det, ir.dot(r1, q) / det, ir.dot(r2, q) / det)
    return Vec(m[0] * q.x + m[4] * q.y + m[8] * q.z, m[1] * q.x + m[5] * q.y + m[9] * q.z,
               m[2] * q.x + m[6] * q.y + m[10] * q.z)


def thin_lens(ctx) -> bool:
    """Whether the scene's camera is a thin lens (rays leave its aperture)."""
    return ctx.structure.sensor == "thinlens"


def eye_of_sample(ctx, cam: CameraRow, lens) -> Vec | None:
    """The aperture point (camera space, fixed while the camera moves) of
    the lens uniforms ``lens`` (the two 1D numbers a sample's ray takes),
    or None for a camera without an aperture."""
    if not thin_lens(ctx):
        return None
    from ..sampling import square_to_uniform_disk_concentric
    radius = ir.detach(cam.row.read(0, layout.CAMERA_APERTURE))
    disk = square_to_uniform_disk_concentric(Vec(lens[0], lens[1], 0.0))
    return Vec(ir.detach(disk.x * radius), ir.detach(disk.y * radius), ir.Float(0.0))


def eye_of_ray(ctx, cam: CameraRow, o: Vec, d: Vec) -> Vec | None:
    """The aperture point a traced camera ray (o, d) left from: where its
    line crosses the camera's z = 0 plane (also for a ray continued past a
    hidden emitter), or None for a camera without an aperture."""
    if not thin_lens(ctx):
        return None
    c = camera_space(cam, ir.detach(o), True)
    dc = camera_space(cam, ir.detach(d), False)
    t = c.z / ir.select(dc.z != 0.0, dc.z, 1.0)
    return Vec(ir.detach(c.x - dc.x * t), ir.detach(c.y - dc.y * t), ir.Float(0.0))


def eye_point(cam: CameraRow, eye: Vec | None) -> Vec:
    """The world point rays leave from: the camera's position, or its
    aperture point ``eye`` (moving with the camera)."""
    if eye is None:
        return Vec(cam.m[3], cam.m[7], cam.m[11])
    return cam.point(eye)


def axis(cam: CameraRow) -> Vec:
    """The camera's viewing axis, to_world (0, 0, 1) (an orthographic
    camera's scaled)."""
    return Vec(cam.m[2], cam.m[6], cam.m[10])


def film_position(ctx, x: Vec, point=True, cam: CameraRow | None = None, eye: Vec | None = None):
    """Where ``x`` lands on the film, in pixels of the sample grid
    (continuous: grid item (i, j) covers [j, j + 1) x [i, i + 1)); ``cam``:
    the camera row already read (default: read it here); ``eye``: seen
    from this aperture point of a thin lens. (An orthographic camera's
    film position of a direction is not defined.)"""
    cam = CameraRow(ctx.b["camera"]) if cam is None else cam
    ortho = orthographic(ctx)
    c = camera_space(cam, x, point, ortho)
    b = ctx.b
    z = 1.0 if ortho else c.z
    if eye is None:
        fx = 0.5 * (1.0 - c.x / (z * cam.tan_x))
        fy = 0.5 * (1.0 - c.y / (z * cam.tan_y))
    else:
        focus = ir.detach(cam.row.read(0, layout.CAMERA_FOCUS))
        at = ir.select(point, 1.0, 0.0) if not isinstance(point, bool) else (1.0 if point else 0.0)
        fx = 0.5 * (1.0 - (eye.x / focus + (c.x - eye.x * at) / z) / cam.tan_x)
        fy = 0.5 * (1.0 - (eye.y / focus + (c.y - eye.y * at) / z) / cam.tan_y)
    px, py = fx * b["film_width"].value - b["grid_x0"].value, fy * b["film_height"].value - b["grid_y0"].value
    if ortho and point is not True:
        # a direction does not move on an orthographic camera's film
        px, py = ir.select(point, px, ir.detach(px)), ir.select(point, py, ir.detach(py))
    return px, py


def film_density(ctx, x: Vec, n: Vec, point, eye: Vec | None = None) -> "ir.Var":
    """Film area per unit area at point ``x`` with normal ``n`` (per unit
    solid angle where ``point`` is false: x is a direction; an
    orthographic camera's, which sees one direction, is 1), seen from the
    aperture point ``eye`` of a thin lens."""
    cam = CameraRow(ctx.b["camera"])
    if orthographic(ctx):
        a = axis(cam)
        det = ir.dot(a, ir.cross(Vec(cam.m[0], cam.m[4], cam.m[8]), Vec(cam.m[1], cam.m[5], cam.m[9])))
        return ir.select(point, ir.abs(ir.dot(n, a)) / (4.0 * cam.tan_x * cam.tan_y * ir.abs(det)), 1.0)
    z = camera_space(cam, x, point).z
    cos = ir.select(point, ir.abs(ir.dot(n, eye_point(cam, eye) - x)), 1.0)
    return cos / (4.0 * cam.tan_x * cam.tan_y * z * z * z)


def to_camera(ctx, p: Vec, cam: CameraRow | None = None, eye: Vec | None = None) -> Vec:
    """A vector (not unit) from the point ``p`` towards the camera: to its
    position (a thin lens's aperture point ``eye``), or against an
    orthographic camera's axis."""
    cam = CameraRow(ctx.b["camera"]) if cam is None else cam
    if orthographic(ctx):
        return -axis(cam)
    return eye_point(cam, eye) - p


def toward_camera(ctx, p: Vec, cam: CameraRow | None = None, eye: Vec | None = None) -> Vec:
    """The unit direction from the point ``p`` to the camera."""
    return ir.normalize(to_camera(ctx, p, cam, eye))


def ray_to(ctx, cam: CameraRow, p: Vec, eye: Vec | None = None):
    """The camera ray that meets the point ``p``: (origin, unit direction,
    t_min, the distance to p along it), from the camera's position (a thin
    lens's aperture point ``eye``) past the near plane, or an orthographic
    camera's from the near plane."""
    if orthographic(ctx):
        c = camera_space(cam, p, True, True)
        a = axis(cam)
        length = ir.sqrt(ir.dot(a, a))
        return cam.point(Vec(c.x, c.y, cam.near)), a / length, ir.Float(0.0), (c.z - cam.near) * length
    origin = eye_point(cam, eye)
    to_p = p - origin
    dist = ir.maximum(ir.sqrt(ir.dot(to_p, to_p)), 1e-30)
    return origin, to_p / dist, cam.near * dist / ir.maximum(camera_space(cam, p, True).z, 1e-30), dist


def silhouette_origin(ctx, cam: CameraRow, centre: Vec, eye: Vec | None = None) -> Vec:
    """Where an analytic shape centred at ``centre`` is seen from, for its
    outline (``shapes.curve_point``): the camera's position (a thin lens's
    aperture point ``eye``), or, for an orthographic camera, a point far
    back along its axis."""
    if orthographic(ctx):
        return centre - ir.normalize(axis(cam)) * 1e6
    return eye_point(cam, eye)


def relative(x):
    """x / detach(x): 1 in value, x's relative derivative (1 where x is 0)."""
    d = ir.detach(x)
    return ir.select(d != 0.0, x / ir.select(d != 0.0, d, 1.0), 1.0)


def camera_hit(ctx, s):
    """The first hit of sample ``s``'s camera ray, traced without
    derivatives, and the same as a ``KnownHit`` for the path that starts
    with it (``interaction.first_hit``): one BVH query for the path and
    the moving splat weights (:func:`attached_weights`)."""
    from . import sample_ray
    return first_hit(ctx, *(ir.detach(v) for v in sample_ray(ctx, s)))


def primary_point(ctx, s, first=None):
    """What the camera ray of sample ``s`` meets, the camera held still:
    (hit, point or direction, geometric normal, the measure of the point's
    coordinates). In kernels for moving geometry the point follows its
    surface at its material coordinates, whose measure this is (a
    direction's: 1). ``first``: the camera ray's first hit where already
    traced (``interaction.first_hit``)."""
    from . import sample_ray
    o, d, t_min, t_max = (ir.detach(v) for v in sample_ray(ctx, s))
    si = shown_hit(ctx, o, d, t_min, t_max, first)     # (found in transport; following() moves it)
    measure = ir.Float(1.0)
    if ctx.geometry_motion:
        si, measure = followed(ctx, si)
    return si.hit, ir.select(si.hit, si.p, d), si.ng, measure


def attached_weights(ctx, s, footprint: int, first=None) -> list:
    """Sample ``s``'s splat weights (``film.splat_weights``) as functions of
    the camera with the point it sees held fixed, times the relative change
    of the film density there: equal in value, carrying the camera's
    derivatives (``first``: as :func:`primary_point`'s)."""
    hit, x, n, measure = primary_point(ctx, s, first)
    eye = eye_of_sample(ctx, CameraRow(ctx.b["camera"]), ctx.rand(s, film.POSITION_DIM)[2:])
    px, py = film_position(ctx, x, hit, eye=eye)
    width = ctx.b["width"].value
    ux = px - ir.cast(ctx.pixel % width, "f32")
    uy = py - ir.cast(ctx.pixel // width, "f32")
    if orthographic(ctx):
        # (a miss: the direction the camera sees everywhere stays where it was sampled)
        ox, oy = film.sample_offset(ctx, s)
        ux, uy = ir.select(hit, ux, ox), ir.select(hit, uy, oy)
    scale = relative(film_density(ctx, x, n, hit, eye) * measure)
    return [w * scale for w in film.weights_at(ctx, ux, uy, footprint)]


def attach_primary_wi(ctx, si, first):
    """``si`` with its incident direction (towards the camera) a function of
    the camera where ``first`` (the camera ray's own hit)."""
    cam = CameraRow(ctx.b["camera"])
    wi = si.frame.to_local(toward_camera(ctx, ir.detach(si.p), cam, eye_of_ray(ctx, cam, si.o, si.d)))
    return dataclasses.replace(si, wi=Vec(*(ir.select(first, a, b) for a, b in zip(wi, si.wi))))


def attach_primary_miss(ctx, si, first):
    """``si`` with, for an orthographic camera, the direction of a camera
    ray that left the scene (``first`` and no hit) a function of the
    camera: every such ray runs along the camera's axis, so turning the
    camera turns what the environment shows at every pixel, where a
    perspective camera's misses keep their directions and move on the film
    (:func:`attached_weights`)."""
    if not orthographic(ctx):
        return si
    a = ir.normalize(axis(CameraRow(ctx.b["camera"])))
    miss = first & ~si.hit
    return dataclasses.replace(si, d=Vec(*(ir.select(miss, x, y) for x, y in zip(a, si.d))))
