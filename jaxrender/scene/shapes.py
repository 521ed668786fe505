"""Built-in shapes as triangle meshes, in the object-space conventions of
Mitsuba 3 (rectangle: [-1, 1]^2 at z = 0 facing +z; cube: [-1, 1]^3 with
outward faces)."""
from __future__ import annotations

import numpy as np


def rectangle_mesh() -> tuple[np.ndarray, np.ndarray]:
    v = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float64)
    f = np.array([[0, 1, 2], [2, 3, 0]], np.int64)
    return v, f


def cube_mesh() -> tuple[np.ndarray, np.ndarray]:
    verts, faces = [], []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            # Two tangent axes ordered so that (t1 x t2) points along sign * axis.
            t1, t2 = (axis + 1) % 3, (axis + 2) % 3
            if sign < 0:
                t1, t2 = t2, t1
            base = len(verts)
            for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
                p = [0.0, 0.0, 0.0]
                p[axis] = sign
                p[t1] = a
                p[t2] = b
                verts.append(p)
            faces += [[base, base + 1, base + 2], [base + 2, base + 3, base]]
    return np.array(verts, np.float64), np.array(faces, np.int64)
