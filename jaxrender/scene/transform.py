"""4x4 affine transforms with Mitsuba 3's constructors and composition rules.

A :class:`Transform` holds a float64 4x4 ``matrix`` and its ``inverse_matrix``
(both read-only numpy arrays).  The constructors reproduce
``mitsuba.ScalarTransform4f`` exactly (up to Mitsuba's float32 rounding):

* ``translate(v)``, ``scale(v)`` (``v`` a scalar or a 3-vector),
  ``rotate(axis, angle)`` (``angle`` in **degrees**, Rodrigues' formula on the
  axis *as given*: Mitsuba does not normalize it, neither do we),
  ``look_at(origin, target, up)`` (alias ``lookat``): the columns of the
  matrix are ``left = normalize(cross(up, dir))``, ``new_up = cross(dir, left)``,
  ``dir = normalize(target - origin)`` and ``origin``.
* ``Transform(m)`` / ``Transform.from_matrix(m)``: a 4x4 row-major matrix from
  16 numbers, a nested 4x4 list, a numpy array, another ``Transform`` or any
  object with a ``.matrix`` attribute (e.g. a ``mitsuba.ScalarTransform4f``).
  A 3x3 matrix fills the linear part (as ``<matrix value="9 numbers"/>``).

Composition order
-----------------
* **Python / dictionaries** (``mi.ScalarTransform4f().translate(t).rotate(a, d)``):
  each *method call on an instance* right-multiplies, ``T.m(x) == T @ M(x)``,
  so the transform written **last is applied first** to points.  Called on the
  class, the same methods build a fresh transform (``Transform.translate(t)``),
  like ``mi.ScalarTransform4f.translate(t)``.  ``A @ B`` applies ``B`` first.
* **XML** (``<transform name="to_world"><scale/><rotate/><translate/></transform>``):
  successive child elements are applied **in document order**; each new one
  left-multiplies: ``M = T_k @ ... @ T_2 @ T_1``.  Use :meth:`Transform.then`
  for that order (``A.then(B) == B @ A``).

Degenerate input (a zero rotation axis, ``look_at`` with ``target == origin``
or ``up`` parallel to the view direction) raises ``ValueError`` where Mitsuba
would silently return NaNs.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

__all__ = ["Transform", "as_transform"]


def _vec3(v: Any, what: str) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        try:
            a = np.array([float(x) for x in v], dtype=np.float64)  # e.g. Dr.Jit scalar arrays
        except (TypeError, ValueError):
            raise ValueError(f"{what} must be a scalar or a 3-vector, got {v!r}") from None
    if a.ndim == 0:
        a = np.full(3, float(a))
    a = a.reshape(-1)
    if a.shape != (3,):
        raise ValueError(f"{what} must be a scalar or a 3-vector, got shape {a.shape}")
    return a


def _readonly(m: np.ndarray) -> np.ndarray:
    m = np.array(m, dtype=np.float64)
    m.setflags(write=False)
    return m


def _coordinate_system(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mitsuba's ``coordinate_system`` (Duff et al. 2017): two tangents of ``n``."""
    sign = math.copysign(1.0, n[2])
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    s = np.array([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])
    t = np.array([b, sign + n[1] * n[1] * a, -n[1]])
    return s, t


class _hybrid:
    """A method that, called on the class, acts on the identity transform.

    ``Transform.translate(v)`` == ``Transform().translate(v)`` — the same
    dual use that ``mitsuba.ScalarTransform4f`` supports.
    """

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, cls=None):
        target = cls() if obj is None else obj
        return functools.partial(self.fn, target)


class Transform:
    """An affine (or projective) 4x4 transform with its inverse, float64."""

    __slots__ = ("inverse_matrix", "matrix")
    __array_ufunc__ = None  # so ``ndarray @ Transform`` defers to __rmatmul__

    def __init__(self, value: Any = None, inverse: Any = None):
        if value is None:
            m = np.eye(4)
        else:
            m = _as_matrix(value)
        if inverse is None:
            if isinstance(value, Transform):
                inv = value.inverse_matrix
            else:
                inv = _safe_inverse(m)
        else:
            inv = _as_matrix(inverse)
        object.__setattr__(self, "matrix", _readonly(m))
        object.__setattr__(self, "inverse_matrix", _readonly(inv))

    def __setattr__(self, name, value):
        raise AttributeError("Transform is immutable")

    def __reduce__(self):
        return (Transform, (np.array(self.matrix), np.array(self.inverse_matrix)))

    # ----------------------------------------------------------------- basics
    @classmethod
    def from_matrix(cls, value: Any) -> Transform:
        """Transform from a 4x4 (or 3x3) row-major matrix, 16 (or 9) numbers."""
        return cls(value)

    @classmethod
    def _pair(cls, m: np.ndarray, inv: np.ndarray) -> Transform:
        t = cls.__new__(cls)
        object.__setattr__(t, "matrix", _readonly(m))
        object.__setattr__(t, "inverse_matrix", _readonly(inv))
        return t

    @property
    def inverse_transpose(self) -> np.ndarray:
        """Transpose of the inverse matrix (what Mitsuba applies to normals)."""
        return self.inverse_matrix.T

    def inverse(self) -> Transform:
        return Transform._pair(self.inverse_matrix, self.matrix)

    def __matmul__(self, other: Any) -> Transform:
        if not isinstance(other, Transform):
            try:
                other = Transform(other)
            except (TypeError, ValueError):
                return NotImplemented
        return Transform._pair(self.matrix @ other.matrix, other.inverse_matrix @ self.inverse_matrix)

    def __rmatmul__(self, other: Any) -> Transform:
        try:
            other = Transform(other)
        except (TypeError, ValueError):
            return NotImplemented
        return other @ self

    def then(self, other: Any) -> Transform:
        """``other @ self``: apply ``self`` first, then ``other`` (XML order)."""
        if not isinstance(other, Transform):
            other = Transform(other)
        return other @ self

    def __array__(self, dtype=None, copy=None):
        return np.array(self.matrix, dtype=dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Transform):
            return NotImplemented
        return bool(np.array_equal(self.matrix, other.matrix))

    def __hash__(self):
        return hash(self.matrix.tobytes())

    def allclose(self, other: Any, rtol: float = 1e-6, atol: float = 1e-6) -> bool:
        other_m = _as_matrix(other)
        return bool(np.allclose(self.matrix, other_m, rtol=rtol, atol=atol))

    def tolist(self) -> list[list[float]]:
        return self.matrix.tolist()

    def __repr__(self) -> str:
        rows = ",\n        ".join("[" + ", ".join(f"{x:.8g}" for x in r) + "]" for r in self.matrix)
        return f"Transform([{rows}])"

    # ------------------------------------------------------------ constructors
    @_hybrid
    def translate(self, v: Any) -> Transform:
        """``self @ T(v)`` (on the class: the translation ``T(v)`` itself)."""
        v = _vec3(v, "translation")
        m = np.eye(4)
        m[:3, 3] = v
        inv = np.eye(4)
        inv[:3, 3] = -v
        return self @ Transform._pair(m, inv)

    @_hybrid
    def scale(self, v: Any) -> Transform:
        """``self @ S(v)``; ``v`` is a scalar (uniform) or a 3-vector."""
        v = _vec3(v, "scale")
        m = np.diag([v[0], v[1], v[2], 1.0])
        with np.errstate(all="ignore"):
            inv = np.diag([1.0 / v[0] if v[0] else np.inf, 1.0 / v[1] if v[1] else np.inf,
                           1.0 / v[2] if v[2] else np.inf, 1.0])
        return self @ Transform._pair(m, inv)

    @_hybrid
    def rotate(self, axis: Any, angle: float) -> Transform:
        """``self @ R(axis, angle)``, ``angle`` in degrees, counter-clockwise.

        Like Mitsuba, the axis is used as given (not normalized):
        ``R = cos I + sin [axis]_x + (1 - cos) axis axis^T``.
        """
        a = _vec3(axis, "rotation axis")
        if not np.any(a):
            raise ValueError("rotation axis cannot be zero")
        theta = math.radians(float(angle))
        s, c = math.sin(theta), math.cos(theta)
        cross = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
        r = c * np.eye(3) + s * cross + (1.0 - c) * np.outer(a, a)
        m = np.eye(4)
        m[:3, :3] = r
        inv = np.eye(4)
        if abs(float(a @ a) - 1.0) < 1e-12:
            inv[:3, :3] = r.T
        else:
            inv = _safe_inverse(m)
        return self @ Transform._pair(m, inv)

    @_hybrid
    def look_at(self, origin: Any, target: Any, up: Any) -> Transform:
        """``self @ L``: a camera at ``origin`` looking at ``target`` (+z forward)."""
        o = _vec3(origin, "look_at origin")
        d = _vec3(target, "look_at target") - o
        u = _vec3(up, "look_at up")
        dn = float(np.linalg.norm(d))
        if not dn > 0.0 or not math.isfinite(dn):
            raise ValueError("invalid look_at: target coincides with origin")
        d = d / dn
        left = np.cross(u, d)
        ln = float(np.linalg.norm(left))
        if not ln > 1e-12 * max(float(np.linalg.norm(u)), 1e-300) or not math.isfinite(ln):
            raise ValueError("invalid look_at: 'up' is zero or parallel to the viewing direction")
        left = left / ln
        new_up = np.cross(d, left)
        m = np.eye(4)
        m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, new_up, d, o
        r = m[:3, :3]
        inv = np.eye(4)
        inv[:3, :3] = r.T
        inv[:3, 3] = -r.T @ o
        return self @ Transform._pair(m, inv)

    lookat = look_at

    # --------------------------------------------------------------- applying
    def transform_point(self, p: Any) -> np.ndarray:
        """Points (..., 3): ``M @ [p, 1]`` followed by the homogeneous divide."""
        p = np.asarray(p, dtype=np.float64)
        r = p @ self.matrix[:3, :3].T + self.matrix[:3, 3]
        w = p @ self.matrix[3, :3] + self.matrix[3, 3]
        if np.all(w == 1.0):
            return r
        return r / w[..., None]

    def transform_vector(self, v: Any) -> np.ndarray:
        """Directions (..., 3): the linear part only."""
        v = np.asarray(v, dtype=np.float64)
        return v @ self.matrix[:3, :3].T

    def transform_normal(self, n: Any) -> np.ndarray:
        """Normals (..., 3): the inverse transpose of the linear part (not renormalized)."""
        n = np.asarray(n, dtype=np.float64)
        return n @ self.inverse_matrix[:3, :3]


def _safe_inverse(m: np.ndarray) -> np.ndarray:
    try:
        with np.errstate(all="ignore"):
            inv = np.linalg.inv(m)
    except np.linalg.LinAlgError:
        inv = np.full((4, 4), np.nan)
    return inv


def _as_matrix(value: Any) -> np.ndarray:
    if isinstance(value, Transform):
        return np.array(value.matrix)
    if hasattr(value, "matrix") and not isinstance(value, np.ndarray):
        value = value.matrix  # e.g. mitsuba.ScalarTransform4f
    try:
        a = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a 4x4 matrix: {exc}") from None
    if a.shape == (16,):
        a = a.reshape(4, 4)
    elif a.shape == (9,):
        a = a.reshape(3, 3)
    if a.shape == (3, 3):
        m = np.eye(4)
        m[:3, :3] = a
        a = m
    if a.shape != (4, 4):
        raise ValueError(f"expected a 4x4 matrix (or 16 numbers), got shape {a.shape}")
    return a


def as_transform(value: Any) -> Transform:
    """Coerce a dict-style ``to_world`` value to a :class:`Transform`.

    Accepts what ``mitsuba.load_dict`` accepts: a ``Transform``, a
    ``mitsuba.ScalarTransform4f`` (anything with ``.matrix``), a 4x4 numpy
    array or nested list, or 16 numbers (row-major).
    """
    if isinstance(value, Transform):
        return value
    return Transform(value)
