"""Built-in shapes as triangle meshes, in the object-space conventions of
Mitsuba 3 (rectangle: [-1, 1]^2 at z = 0 facing +z; cube: [-1, 1]^3 with
outward faces), with Mitsuba's texture coordinates: the rectangle's
``uv = ((x + 1) / 2, (y + 1) / 2)``; the cube is Mitsuba's own 24-vertex
mesh (``mi.load_dict({"type": "cube"})``), each face mapped to [0, 1]^2.

Mitsuba's analytic ``sphere`` and ``disk`` stay analytic (exact silhouettes):
:class:`AnalyticShape` holds their world transform, and its :meth:`row` is
what the kernels read (``kernels/geometry.py``). :func:`vertex_normals` is
Mitsuba's smoothing of meshes whose files carry no normals."""
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
# Analytic shapes (Mitsuba's sphere and disk) and vertex normals
# ---------------------------------------------------------------------------

SPHERE, DISK = kshapes.KIND["sphere"], kshapes.KIND["disk"]
SHAPE_ROW = layout.SHAPE_ROW


@dataclass
class AnalyticShape:
    """A sphere or disk in world space, as Mitsuba 3 defines it.

    ``to_world`` is the full object-to-world matrix: for a sphere
    ``to_world @ translate(center) @ scale(radius)`` (the unit sphere in
    object space; its UVs come from ``to_object``), for a disk the unit disk
    in the object z = 0 plane (with ``flip_normals`` folded in as Mitsuba
    does: ``to_world @ scale(1, 1, -1)``)."""
    kind: int
    to_world: np.ndarray      # (4, 4) float64
    flip: bool                # sphere: normals point inwards
    key: str

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
        if self.kind == SPHERE:
            return 4.0 * np.pi * self.radius ** 2
        m = self.to_world[:3, :3]
        return float(np.pi * np.linalg.norm(np.cross(m[:, 0], m[:, 1])))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """World-space box, widened by a relative 1e-6 so that float32 hits
        at the silhouette never fall outside it."""
        c = self.center
        if self.kind == SPHERE:
            e = np.full(3, self.radius)
        else:
            m = self.to_world[:3, :3]
            e = np.sqrt(m[:, 0] ** 2 + m[:, 1] ** 2)
        pad = 1e-6 * (1.0 + np.abs(c) + e)
        return c - e - pad, c + e + pad

    def row(self) -> np.ndarray:
        """The shape's ``shape_data`` row: to_world (3 x 4, row-major),
        to_object (3 x 4), the disk's normal, the sphere's radius, the normal
        sign (-1: flipped), the area, the kind."""
        r = np.zeros(layout.SHAPE_ROW)
        r[layout.SHAPE_TO_WORLD:layout.SHAPE_TO_WORLD + 12] = self.to_world[:3].reshape(-1)
        r[layout.SHAPE_TO_OBJECT:layout.SHAPE_TO_OBJECT + 12] = self.to_object[:3].reshape(-1)
        if self.kind == DISK:
            r[layout.SHAPE_NORMAL:layout.SHAPE_NORMAL + 3] = self.normal
        r[layout.SHAPE_RADIUS] = self.radius
        r[layout.SHAPE_SIGN] = -1.0 if self.flip else 1.0
        r[layout.SHAPE_AREA] = self.area
        r[layout.SHAPE_KIND] = self.kind
        return r


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


def _translate(v: np.ndarray) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = v
    return m


def vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Mitsuba's ``Mesh::recompute_vertex_normals``: the face normals of the
    faces around each vertex weighted by the face's angle at that vertex
    (Thuermer and Wuethrich 1998); zero-area faces are skipped and a vertex
    without a valid face gets (1, 0, 0)."""
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    p = v[f]                                              # (F, 3, 3)
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    ln = np.linalg.norm(n, axis=1)
    ok = ln > 0
    n = n[ok] / ln[ok, None]
    p, f = p[ok], f[ok]
    out = np.zeros_like(v)
    for j in range(3):
        d0 = p[:, (j + 1) % 3] - p[:, j]
        d1 = p[:, (j + 2) % 3] - p[:, j]
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.sum(d0 * d1, axis=1) / (np.linalg.norm(d0, axis=1) * np.linalg.norm(d1, axis=1))
        angle = np.arccos(np.clip(c, -1.0, 1.0))
        angle = np.where(np.isfinite(angle), angle, 0.0)
        for k in range(3):
            out[:, k] += np.bincount(f[:, j], n[:, k] * angle, minlength=len(v))
    ln = np.linalg.norm(out, axis=1)
    good = ln > 0
    out[good] /= ln[good, None]
    out[~good] = (1.0, 0.0, 0.0)
    return out
