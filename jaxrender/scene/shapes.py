"""Built-in shapes as triangle meshes, in the object-space conventions of
Mitsuba 3 (rectangle: [-1, 1]^2 at z = 0 facing +z; cube: [-1, 1]^3 with
outward faces), with Mitsuba's texture coordinates: the rectangle's
``uv = ((x + 1) / 2, (y + 1) / 2)``; the cube is Mitsuba's own 24-vertex
mesh (``mi.load_dict({"type": "cube"})``), each face mapped to [0, 1]^2.

Mitsuba's analytic ``sphere``, ``disk`` and ``cylinder`` stay analytic (exact silhouettes):
:class:`AnalyticShape` holds their world transform, and its :meth:`row` is
what the kernels read (``kernels/geometry.py``)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..kernels import layout
from ..kernels import shapes as kshapes
from .errors import SceneError


def rectangle_mesh() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float64)
    f = np.array([[0, 1, 2], [2, 3, 0]], np.int64)
    return v, f, 0.5 * (v[:, :2] + 1.0)


# Corners of each face of Mitsuba's cube, in its vertex order; every face
# has the texture coordinates _CUBE_UV at its four corners.
_CUBE_FACES = (
    ((1, -1, -1), (1, -1, 1), (-1, -1, 1), (-1, -1, -1)),    # -y
    ((1, 1, -1), (-1, 1, -1), (-1, 1, 1), (1, 1, 1)),        # +y
    ((1, -1, -1), (1, 1, -1), (1, 1, 1), (1, -1, 1)),        # +x
    ((1, -1, 1), (1, 1, 1), (-1, 1, 1), (-1, -1, 1)),        # +z
    ((-1, -1, 1), (-1, 1, 1), (-1, 1, -1), (-1, -1, -1)),    # -x
    ((1, 1, -1), (1, -1, -1), (-1, -1, -1), (-1, 1, -1)),    # -z
)
_CUBE_UV = ((0, 1), (1, 1), (1, 0), (0, 0))


def cube_mesh() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = np.array(_CUBE_FACES, np.float64).reshape(-1, 3)
    uv = np.tile(np.array(_CUBE_UV, np.float64), (6, 1))
    base = 4 * np.arange(6)[:, None]
    f = np.concatenate([base + [0, 1, 2], base + [3, 0, 2]], axis=1).reshape(-1, 3)
    return v, f.astype(np.int64), uv


# ---------------------------------------------------------------------------
# Analytic shapes (Mitsuba's sphere, disk and cylinder) and vertex normals
# ---------------------------------------------------------------------------

SPHERE, DISK, CYLINDER = kshapes.KIND["sphere"], kshapes.KIND["disk"], kshapes.KIND["cylinder"]
SHAPE_ROW = layout.SHAPE_ROW


@dataclass
class AnalyticShape:
    """A sphere, disk or cylinder in world space, as Mitsuba 3 defines it.

    ``to_world`` is the full object-to-world matrix: for a sphere
    ``to_world @ translate(center) @ scale(radius)`` (the unit sphere in
    object space; its UVs come from ``to_object``), for a disk the unit disk
    in the object z = 0 plane (with ``flip_normals`` folded in as Mitsuba
    does: ``to_world @ scale(1, 1, -1)``), for a cylinder the unit-radius
    tube from z = 0 to 1 (``to_world @ translate(p0) @ to_frame(axis) @
    scale(radius, radius, length)``). That matrix is what ``mitsuba.traverse``
    calls the shape's ``to_world``; ``param`` is its parameter key (None:
    not a parameter, e.g. an instance's copy)."""
    kind: int
    to_world: np.ndarray      # (4, 4) float64
    flip: bool                # sphere: normals point inwards
    key: str
    param: str | None = None

    @property
    def to_object(self) -> np.ndarray:
        return np.linalg.inv(self.to_world)

    @property
    def center(self) -> np.ndarray:
        return self.to_world[:3, 3]

    @property
    def radius(self) -> float:
        """Mitsuba's sphere radius: the length of to_world's x axis."""
        return float(np.linalg.norm(self.to_world[:3, 0]))

    @property
    def normal(self) -> np.ndarray:
        """A disk's world normal: to_world applied to the normal (0, 0, 1),
        i.e. the inverse transpose, normalized (Mitsuba's m_frame.n)."""
        n = np.linalg.inv(self.to_world[:3, :3])[2]
        return n / np.linalg.norm(n)

    @property
    def area(self) -> float:
        return float(shape_row(self.kind, self.to_world, self.flip)[layout.SHAPE_AREA])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """World-space box, widened by a relative 1e-6 so that float32 hits
        at the silhouette never fall outside it."""
        return shape_bounds(self.kind, self.to_world)

    def row(self) -> np.ndarray:
        """The shape's ``shape_data`` row (see :func:`shape_row`)."""
        return shape_row(self.kind, self.to_world, self.flip)

    @property
    def flips_with_mirror(self) -> bool:
        """Whether a to_world that mirrors flips the normals (spheres and
        cylinders, as Mitsuba's update does; a disk's flip is in to_world)."""
        return self.kind != DISK


def shape_row(kind: int, m, flip, xp=np):
    """The ``shape_data`` row of a shape of ``kind`` with full to_world ``m``
    (4 x 4): to_world (3 x 4, row-major), to_object (3 x 4), the disk's
    normal, the sphere's radius, the normal sign (-1: ``flip``), the area,
    the kind. ``xp``: numpy, or jax.numpy for traced values."""
    lin = m[:3, :3]
    inv = xp.linalg.inv(m)
    radius = xp.linalg.norm(lin[:, 0])
    if kind == SPHERE:
        area = 4.0 * np.pi * radius ** 2
    elif kind == CYLINDER:
        # (Mitsuba's: 2 pi radius length, radius the x axis's length)
        area = 2.0 * np.pi * radius * xp.linalg.norm(lin[:, 2])
    else:
        area = np.pi * xp.linalg.norm(xp.cross(lin[:, 0], lin[:, 1]))
    normal = inv[2, :3] / xp.linalg.norm(inv[2, :3]) if kind == DISK else xp.zeros(3)
    scalars = xp.stack([radius, xp.where(flip, -1.0, 1.0), area, xp.asarray(float(kind))])
    pad = xp.zeros(layout.SHAPE_ROW - layout.SHAPE_KIND - 1)
    return xp.concatenate([m[:3].reshape(12), inv[:3].reshape(12), normal, scalars.astype(m.dtype), pad])


def shape_bounds(kind: int, m, xp=np):
    """World-space box of a shape of ``kind`` with full to_world ``m``,
    widened by a relative 1e-6 so that float32 hits at the silhouette never
    fall outside it."""
    c = m[:3, 3]
    lin = m[:3, :3]
    if kind == SPHERE:
        e = xp.full(3, 1.0) * xp.linalg.norm(lin[:, 0])
    else:
        e = xp.sqrt(lin[:, 0] ** 2 + lin[:, 1] ** 2)
    lo, hi = c - e, c + e
    if kind == CYLINDER:   # the rims at both ends
        lo, hi = xp.minimum(lo, lo + lin[:, 2]), xp.maximum(hi, hi + lin[:, 2])
    pad = 1e-6 * (1.0 + xp.maximum(xp.abs(lo), xp.abs(hi)) + e)
    return lo - pad, hi + pad


def _nonsingular(m: np.ndarray, where: str) -> float:
    lin = m[:3, :3]
    det = float(np.linalg.det(lin))
    scale = float(np.max(np.abs(lin))) if lin.size else 0.0
    if not np.isfinite(det) or scale == 0.0 or abs(det) <= 1e-12 * scale ** 3:
        raise SceneError(f"{where}: the transform is singular")
    return det


def sphere_shape(to_world: np.ndarray, center: np.ndarray, radius: float, flip_normals: bool,
                 key: str) -> AnalyticShape:
    """Mitsuba's ``sphere`` of ``center`` and ``radius`` (positive: Mitsuba
    would silently flip a negative one's normals) under ``to_world``; a
    to_world with a reflection flips the normals, as in Mitsuba. A
    non-uniform scale is accepted with a warning, as in Mitsuba (radius: the
    length of the transformed x axis)."""
    det = _nonsingular(to_world, f"{key}.to_world")
    m = to_world @ _translate(center) @ np.diag([radius, radius, radius, 1.0])
    lin = m[:3, :3]
    gram = lin.T @ lin
    if not np.allclose(gram, gram[0, 0] * np.eye(3), rtol=1e-5, atol=1e-6 * abs(gram[0, 0])):
        warnings.warn(f"{key}.to_world: a sphere's transform should not contain non-uniform scaling or "
                      "shearing (the radius is the length of its x axis, as in Mitsuba)", stacklevel=4)
    return AnalyticShape(SPHERE, m, bool(flip_normals) != (det < 0), key)


def disk_shape(to_world: np.ndarray, flip_normals: bool, key: str) -> AnalyticShape:
    """Mitsuba's ``disk``: the unit disk at z = 0 facing +z under
    ``to_world``, with ``flip_normals`` folded into the transform as in
    Mitsuba."""
    _nonsingular(to_world, f"{key}.to_world")
    m = to_world.copy()
    if flip_normals:
        m = m @ np.diag([1.0, 1.0, -1.0, 1.0])
    return AnalyticShape(DISK, m, False, key)


def cylinder_shape(to_world: np.ndarray, p0: np.ndarray, p1: np.ndarray, radius: float, flip_normals: bool,
                   key: str) -> AnalyticShape:
    """Mitsuba's ``cylinder`` from ``p0`` to ``p1`` of ``radius`` under
    ``to_world``: the axis frame is Mitsuba's (``Frame3f(axis)``: its UVs'
    angle starts where Mitsuba's does), and a reflecting transform flips
    the normals, as in Mitsuba."""
    axis = np.asarray(p1, np.float64) - np.asarray(p0, np.float64)
    length = float(np.linalg.norm(axis))
    if not length > 0.0:
        raise SceneError(f"{key}: p0 and p1 must differ")
    s, t = _coordinate_system(axis / length)
    frame = np.eye(4)
    frame[:3, 0], frame[:3, 1], frame[:3, 2] = s, t, axis / length
    m = to_world @ _translate(p0) @ frame @ np.diag([radius, radius, length, 1.0])
    det = _nonsingular(m, f"{key}.to_world")
    return AnalyticShape(CYLINDER, m, bool(flip_normals) != (det < 0), key)


def _coordinate_system(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors completing ``n`` to an orthonormal basis, as
    Mitsuba's ``coordinate_system`` (Duff et al. 2017) makes them."""
    sign = 1.0 if n[2] >= 0.0 else -1.0
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    return (np.array([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]]),
            np.array([b, sign + n[1] * n[1] * a, -n[1]]))


def _translate(v: np.ndarray) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = v
    return m


# ---------------------------------------------------------------------------
# Instances: a shapegroup's shapes moved by an instance's to_world
# ---------------------------------------------------------------------------
# Vertex order (0, 2, 1) of a triangle's 9 coordinates / 6 texture coordinates.
_REVERSE_XYZ = [0, 1, 2, 6, 7, 8, 3, 4, 5]
_REVERSE_UV = [0, 1, 4, 5, 2, 3]


def check_instance_transform(m: np.ndarray, key: str) -> float:
    """The determinant of an instance's linear part; a SceneError where it
    is singular (Mitsuba would intersect through its inverse)."""
    return _nonsingular(m, f"{key}.to_world")


def instance_mesh(tris: np.ndarray, uvs: np.ndarray, normals: np.ndarray | None,
                  m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A group-space mesh (``SceneBuilder.add_triangles`` rows) as an
    instance with to_world ``m`` shows it, as Mitsuba's instance does: points
    by ``m``, vertex normals by its inverse transpose, and where
    ``m`` mirrors, the vertex order reversed, because Mitsuba transforms the
    group-space face normal as a normal (it keeps pointing the same way)
    where a cross product of mirrored edges would turn round."""
    lin, off = m[:3, :3], m[:3, 3]
    out = (tris.reshape(-1, 3) @ lin.T + off).reshape(-1, 9)
    nw = None
    if normals is not None:
        # Rows (M^-T n)^T, not renormalised: Mitsuba interpolates the group's
        # normals and transforms the result, and the kernel normalises after
        # interpolating, so per-vertex lengths must keep M^-T's ratios (one
        # common factor, |det|^(1/3), keeps a uniform scale's unit length).
        nw = (normals.reshape(-1, 3) @ np.linalg.inv(lin) * abs(np.linalg.det(lin)) ** (1 / 3)).reshape(-1, 9)
    if np.linalg.det(lin) < 0:
        out, uvs = out[:, _REVERSE_XYZ], uvs[:, _REVERSE_UV]
        nw = None if nw is None else nw[:, _REVERSE_XYZ]
    return out, uvs, nw


def instance_shape(shape: AnalyticShape, m: np.ndarray, key: str) -> AnalyticShape:
    """A group-space analytic shape under an instance's to_world ``m``, with
    the normals Mitsuba's instance gives (the group-space normal transformed
    as a normal). Disks and cylinders are intersected in their object space,
    so any affine ``m`` is exact; a sphere is a centre and one radius, so
    ``m`` must be a similarity (rotation, uniform scale, mirror, translation):
    Mitsuba shows a sphere under a non-uniform instance scale as an
    ellipsoid, which jaxrender cannot represent, so that is a SceneError."""
    det = check_instance_transform(m, key)
    to_world = m @ shape.to_world
    if shape.kind == SPHERE:
        lin = m[:3, :3]
        gram = lin.T @ lin
        if not np.allclose(gram, gram[0, 0] * np.eye(3), rtol=1e-5, atol=1e-6 * abs(gram[0, 0])):
            raise SceneError(f"{key}.to_world: the instance scales non-uniformly or shears the sphere "
                             f"{shape.key!r}, which Mitsuba then renders as an ellipsoid; jaxrender's analytic "
                             "sphere has one radius, so this is not supported yet (scale uniformly, or "
                             "instance a sphere mesh)")
        # R (p - c) / |.| is the mirrored outward normal: the sign stays.
        return AnalyticShape(SPHERE, to_world, shape.flip, key)
    if shape.kind == CYLINDER:
        # The kernel's normal is a cross product of world tangents, which a
        # mirror turns round; Mitsuba's instance normal does not turn.
        return AnalyticShape(CYLINDER, to_world, shape.flip != (det < 0), key)
    return AnalyticShape(shape.kind, to_world, shape.flip, key)
