"""Built-in shapes as triangle meshes, in the object-space conventions of
Mitsuba 3 (rectangle: [-1, 1]^2 at z = 0 facing +z; cube: [-1, 1]^3 with
outward faces), with Mitsuba's texture coordinates: the rectangle's
``uv = ((x + 1) / 2, (y + 1) / 2)``; the cube is Mitsuba's own 24-vertex
mesh (``mi.load_dict({"type": "cube"})``), each face mapped to [0, 1]^2."""
from __future__ import annotations

import numpy as np


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
