"""Mueller calculus in the kernel language: Stokes vectors, Mueller matrices,
and their reference frames, with the
conventions of Mitsuba 3's ``mitsuba.mueller`` (a building block of a
polarized variant; nothing in the renderer uses it yet).

Representation:

* A Stokes vector is an ``ir.Vec(S0, S1, S2, S3)``: intensity, horizontal
  minus vertical, +45 minus -45 degrees linear, right minus left circular
  polarization, measured in a reference frame (its *Stokes basis*, the unit
  vector of the frame's x axis, orthogonal to the direction of travel).
* A Mueller matrix is a tuple of four ``ir.Vec`` rows of four entries,
  ``m[row][col]`` (type :data:`Mueller`). It is a pytree, so it can be a
  branch result, loop state or a kernel output (16 values, row major). A
  matrix maps Stokes vectors of its input frame to its output frame.

Entries may be IR values or Python floats: the algebra (:func:`matmul`,
:func:`apply`, :func:`transpose`, :func:`scale`) and the optical elements
work on either (all-float arguments give Python floats, no trace needed);
entries that are the literal 0.0 are structural zeros that the algebra
skips, so products of sparse elements cost only their nonzero terms (a NaN
times such a zero counts as zero). Frames need a trace.

Example::

    m = matmul(rotated_element(theta, linear_polarizer()), linear_polarizer())
    s = apply(m, Vec(1.0, 0.0, 0.0, 0.0))     # s[0] == cos(theta)**2 / 2
"""
from __future__ import annotations

import math

from .. import ir
from ..ir import Vec

Mueller = tuple  # tuple[Vec, Vec, Vec, Vec]: four rows of four entries

# ---------------------------------------------------------------------------
# Scalar helpers: Python floats stay Python floats, literal zeros are elided
# ---------------------------------------------------------------------------


def _zero(x) -> bool:
    return not isinstance(x, ir.Var) and x == 0


def _mul(a, b):
    return 0.0 if _zero(a) or _zero(b) else a * b


def _add(a, b):
    return b if _zero(a) else a if _zero(b) else a + b


def _sub(a, b):
    return -b if _zero(a) else a if _zero(b) else a - b


def _sum_products(pairs) -> ir.Float | float:
    acc = None
    for a, b in pairs:
        if _zero(a) or _zero(b):
            continue
        if acc is None:
            acc = a * b
        elif any(isinstance(v, ir.Var) for v in (a, b, acc)):
            acc = ir.fma(a, b, acc)
        else:
            acc = acc + a * b
    return 0.0 if acc is None else acc


def _math(f_ir, f_py, x):
    return f_ir(x) if isinstance(x, ir.Var) else f_py(x)


def _select(cond, a, b):
    """Component-wise select that keeps a literal both sides agree on."""
    if not isinstance(a, ir.Var) and not isinstance(b, ir.Var) and a == b:
        return a
    return ir.select(cond, a, b)


def _mueller(*e) -> Mueller:
    return tuple(Vec(*e[4 * i:4 * i + 4]) for i in range(4))


# ---------------------------------------------------------------------------
# Matrix algebra
# ---------------------------------------------------------------------------

def matmul(a: Mueller, b: Mueller) -> Mueller:
    """Matrix product ``a @ b`` (``b`` acts first). ``matmul(rotator(x), rotator(y))``."""
    return tuple(Vec(*(_sum_products((a[i][k], b[k][j]) for k in range(4)) for j in range(4)))
                 for i in range(4))


def apply(m: Mueller, stokes: Vec) -> Vec:
    """``m`` applied to the Stokes vector ``stokes``. ``apply(linear_polarizer(), Vec(1.0, 0.0, 0.0, 0.0))``."""
    return Vec(*(_sum_products(zip(m[i], stokes)) for i in range(4)))


def transpose(m: Mueller) -> Mueller:
    """The transposed matrix (the inverse of a rotator). ``transpose(rotator(x))``."""
    return tuple(Vec(*(m[i][j] for i in range(4))) for j in range(4))


def identity() -> Mueller:
    """The identity (light passes unchanged). ``identity()[0][0] == 1.0``."""
    return _mueller(1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def scale(m: Mueller, s: ir.Float | float) -> Mueller:
    """Every entry of ``m`` times the scalar ``s``. ``scale(linear_polarizer(), 0.5)``."""
    return tuple(Vec(*(_mul(x, s) for x in row)) for row in m)


# ---------------------------------------------------------------------------
# Optical elements (frames: x axis = the Stokes basis)
# ---------------------------------------------------------------------------

def depolarizer(value: ir.Float | float = 1.0) -> Mueller:
    """Ideal depolarizer: only M00 = ``value``. ``depolarizer(0.5)``."""
    return _mueller(value, *(0.0,) * 15)


def absorber(value: ir.Float | float) -> Mueller:
    """Ideal absorber: ``value`` times the identity. ``absorber(0.3)``."""
    return scale(identity(), value)


def linear_polarizer(value: ir.Float | float = 1.0) -> Mueller:
    """Linear polarizer transmitting along the frame's x axis (0 degrees);
    ``value`` scales the whole matrix (1: ideal). ``linear_polarizer()``."""
    h = _mul(0.5, value)
    return _mueller(h, h, 0.0, 0.0, h, h, 0.0, 0.0, *(0.0,) * 8)


def linear_retarder(phase: ir.Float | float) -> Mueller:
    """Linear retarder with its fast axis along x, retarding the slow axis
    by ``phase`` (Goldstein's eq. 6.43, as Mitsuba). ``linear_retarder(math.pi / 2)``
    (a quarter-wave plate)."""
    c, s = _math(ir.cos, math.cos, phase), _math(ir.sin, math.sin, phase)
    return _mueller(1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, c, s, 0.0, 0.0, -s, c)


def diattenuator(x: ir.Float | float, y: ir.Float | float) -> Mueller:
    """Linear diattenuator transmitting the intensity of the x and y
    components by ``x`` and ``y`` (Mitsuba's parameters). ``diattenuator(1.0, 0.2)``."""
    a, b = 0.5 * (x + y), 0.5 * (x - y)
    c = _math(ir.sqrt, math.sqrt, x * y)
    return _mueller(a, b, 0.0, 0.0, b, a, 0.0, 0.0, 0.0, 0.0, c, 0.0, 0.0, 0.0, 0.0, c)


def _rotator_cs(c2, s2) -> Mueller:
    return _mueller(1.0, 0.0, 0.0, 0.0, 0.0, c2, s2, 0.0, 0.0, -s2, c2, 0.0, 0.0, 0.0, 0.0, 1.0)


def rotator(theta: ir.Float | float) -> Mueller:
    """Rotates the reference frame counter-clockwise by ``theta`` (facing the
    beam from the sensor): horizontal light (1, 1, 0, 0) becomes -45 degrees
    (1, 0, -1, 0) for theta = 45 degrees. ``rotator(0.3)``."""
    t = theta * 2.0
    return _rotator_cs(_math(ir.cos, math.cos, t), _math(ir.sin, math.sin, t))


def rotated_element(theta: ir.Float | float, m: Mueller) -> Mueller:
    """Element ``m`` turned counter-clockwise by ``theta``:
    rotator(-theta) @ m @ rotator(theta). ``rotated_element(0.3, linear_polarizer())``."""
    r = rotator(theta)
    return matmul(transpose(r), matmul(m, r))


def left_circular_polarizer() -> Mueller:
    """Ideal left circular polarizer (Chipman, table 6.2). ``left_circular_polarizer()``."""
    return _mueller(0.5, 0.0, 0.0, -0.5, *(0.0,) * 8, -0.5, 0.0, 0.0, 0.5)


def right_circular_polarizer() -> Mueller:
    """Ideal right circular polarizer (Chipman, table 6.2). ``right_circular_polarizer()``."""
    return _mueller(0.5, 0.0, 0.0, 0.5, *(0.0,) * 8, 0.5, 0.0, 0.0, 0.5)


# ---------------------------------------------------------------------------
# Reference frames
# ---------------------------------------------------------------------------

def stokes_basis(w: Vec) -> Vec:
    """The implicit Stokes basis of light travelling along the unit vector
    ``w``: the first tangent of Mitsuba's ``coordinate_system(w)`` (Duff et
    al. 2017), so stokes_basis((0, 0, 1)) = (1, 0, 0). ``stokes_basis(wo)``."""
    sign = ir.sign(w.z)
    a = -1.0 / (sign + w.z)
    return Vec(ir.fma(w.x * w.x, a * sign, 1.0), sign * (w.x * w.y * a), -sign * w.x)


def rotate_stokes_basis(w: Vec, basis_current: Vec, basis_target: Vec) -> Mueller:
    """The rotator that re-expresses a Stokes vector of light travelling
    along the unit vector ``w`` from ``basis_current`` in ``basis_target``
    (both orthogonal to ``w``, need not be unit): rotator(theta) with theta the angle between
    them, negative where (current x target) points against ``w``.
    ``apply(rotate_stokes_basis(w, stokes_basis(w), b), s)``."""
    c = ir.dot(basis_current, basis_target)
    s = ir.dot(w, ir.cross(basis_current, basis_target))
    # cos(2 theta), sin(2 theta) from cos theta ~ c and sin theta ~ s, normalised
    n2 = c * c + s * s
    ok = n2 > 0.0
    inv = 1.0 / ir.select(ok, n2, 1.0)
    c2 = ir.select(ok, (c * c - s * s) * inv, 1.0)
    s2 = ir.select(ok, 2.0 * c * s * inv, 0.0)
    return _rotator_cs(c2, s2)


def rotate_mueller_basis(m: Mueller, in_forward: Vec, in_basis_current: Vec, in_basis_target: Vec,
                         out_forward: Vec, out_basis_current: Vec, out_basis_target: Vec) -> Mueller:
    """``m``, which maps Stokes vectors from ``in_basis_current`` to
    ``out_basis_current``, re-expressed from ``in_basis_target`` to
    ``out_basis_target`` (light travelling along ``in_forward`` and
    ``out_forward``): R_out @ m @ R_in^T.
    ``rotate_mueller_basis(m, -wi, s_wi, stokes_basis(-wi), wo, s_wo, stokes_basis(wo))``."""
    r_in = rotate_stokes_basis(in_forward, in_basis_current, in_basis_target)
    r_out = rotate_stokes_basis(out_forward, out_basis_current, out_basis_target)
    return matmul(r_out, matmul(m, transpose(r_in)))


def rotate_mueller_basis_collinear(m: Mueller, forward: Vec, basis_current: Vec, basis_target: Vec) -> Mueller:
    """:func:`rotate_mueller_basis` for an element whose input and output
    share the direction and frames: R @ m @ R^T.
    ``rotate_mueller_basis_collinear(linear_polarizer(), w, b0, b1)``."""
    r = rotate_stokes_basis(forward, basis_current, basis_target)
    return matmul(r, matmul(m, transpose(r)))
