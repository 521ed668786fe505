"""Mueller calculus in the kernel language: Stokes vectors, Mueller matrices,
their reference frames and the polarized Fresnel equations, with the
conventions of Mitsuba 3's ``mitsuba.mueller``: what the polarized variants'
BSDFs and integrators compute with (``spectrum.py`` packs one matrix per
colour channel into a path spectrum).

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
times such a zero counts as zero). Frames and Fresnel need a trace.

Example::

    m = matmul(rotated_element(theta, linear_polarizer()), linear_polarizer())
    s = apply(m, Vec(1.0, 0.0, 0.0, 0.0))     # s[0] == cos(theta)**2 / 2
"""
from __future__ import annotations

import math

from .. import ir
from ..ir import Vec

Mueller = tuple  # tuple[Vec, Vec, Vec, Vec]: four rows of four entries
Complex = tuple  # (re, im) pair of IR values or Python floats

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


def rotate_stokes_basis(w: Vec, basis_current: Vec, basis_target: Vec, in_space: bool = False) -> Mueller:
    """The rotator that re-expresses a Stokes vector of light travelling
    along the unit vector ``w`` from ``basis_current`` in ``basis_target``
    (need not be unit): rotator(theta) with theta the angle between them
    seen along ``w`` (in the plane orthogonal to it), negative where
    (current x target) points against ``w``. ``in_space``: theta is their
    angle in space instead, Mitsuba's formula; the two agree for bases
    orthogonal to ``w``, as Mitsuba requires, but Mitsuba's retarder passes
    one that is not (``bsdfs/retarder.py``).
    ``apply(rotate_stokes_basis(w, stokes_basis(w), b), s)``."""
    cross = ir.cross(basis_current, basis_target)
    c = ir.dot(basis_current, basis_target)
    if in_space:
        s = ir.sqrt(ir.dot(cross, cross))
        s = ir.select(ir.dot(w, cross) < 0.0, -s, s)
    else:
        s = ir.dot(w, cross)
        c = c - ir.dot(w, basis_current) * ir.dot(w, basis_target)   # the bases projected along w
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


def rotate_mueller_basis_collinear(m: Mueller, forward: Vec, basis_current: Vec, basis_target: Vec,
                                   in_space: bool = False) -> Mueller:
    """:func:`rotate_mueller_basis` for an element whose input and output
    share the direction and frames: R @ m @ R^T (``in_space``: see
    :func:`rotate_stokes_basis`).
    ``rotate_mueller_basis_collinear(linear_polarizer(), w, b0, b1)``."""
    r = rotate_stokes_basis(forward, basis_current, basis_target, in_space)
    return matmul(r, matmul(m, transpose(r)))


def select(cond, a: Mueller, b: Mueller) -> Mueller:
    """Entry-wise ``a if cond else b`` (entries zero in both stay literal zeros)."""
    return tuple(Vec(*(_select(cond, x, y) for x, y in zip(ra, rb))) for ra, rb in zip(a, b))


def in_specular_bases(m: Mueller, wo_hat: Vec, wi_hat: Vec, normal: Vec | None = None) -> Mueller:
    """Fresnel matrix ``m`` (:func:`specular_reflection`,
    :func:`specular_transmission`: frames' x axes the s direction,
    perpendicular to the plane of incidence) in the implicit Stokes bases
    of light arriving along ``-wo_hat`` and leaving along ``wi_hat`` (local
    directions) at a surface of ``normal`` (None: +z; a microfacet's), as
    Mitsuba's conductors and dielectric turn theirs; where the light is
    collinear with the normal, the s axis is x. (Called per colour channel:
    the trace's value numbering computes the rotations once.)"""
    if normal is None:
        s_in = Vec(wo_hat.y, -wo_hat.x, 0.0)         # cross(n, -wo_hat)
        s_out = Vec(-wi_hat.y, wi_hat.x, 0.0)        # cross(n, wi_hat)
        collinear = (wo_hat.x == 0.0) & (wo_hat.y == 0.0)
    else:
        s_in, s_out = ir.cross(normal, -wo_hat), ir.cross(normal, wi_hat)
        collinear = (s_in.x == 0.0) & (s_in.y == 0.0) & (s_in.z == 0.0)
    s_in = Vec(*(ir.select(collinear, a, b) for a, b in zip((1.0, 0.0, 0.0), s_in)))
    s_out = Vec(*(ir.select(collinear, a, b) for a, b in zip((1.0, 0.0, 0.0), s_out)))
    return rotate_mueller_basis(m, -wo_hat, s_in, stokes_basis(-wo_hat), wi_hat, s_out, stokes_basis(wi_hat))


# ---------------------------------------------------------------------------
# Fresnel equations (complex numbers as (re, im) pairs)
# ---------------------------------------------------------------------------

def _cmul(a: Complex, b: Complex) -> Complex:
    return (_sub(_mul(a[0], b[0]), _mul(a[1], b[1])), _add(_mul(a[0], b[1]), _mul(a[1], b[0])))


def _cdiv(a: Complex, b: Complex) -> Complex:
    if _zero(b[1]):
        return (a[0] / b[0], 0.0 if _zero(a[1]) else a[1] / b[0])
    d = _add(_mul(b[0], b[0]), _mul(b[1], b[1]))
    re = _add(_mul(a[0], b[0]), _mul(a[1], b[1]))
    im = _sub(_mul(a[1], b[0]), _mul(a[0], b[1]))
    return (re / d, 0.0 if _zero(im) else im / d)


def _csqrt(z: Complex) -> Complex:
    """The square root with Re >= 0 and Im <= 0: the transmitted wave decays
    under the exp(+i omega t) convention; this also sets the sign of the
    phase shift under total internal reflection (as Mitsuba's)."""
    x, y = z
    if _zero(y):
        return (ir.safe_sqrt(x), -ir.safe_sqrt(-x))
    r = ir.sqrt(ir.fma(x, x, y * y))
    t = ir.sqrt(0.5 * (r + ir.abs(x)))          # the larger of |Re|, |Im|
    u = ir.abs(y) * 0.5 / ir.select(t > 0.0, t, 1.0)  # the smaller: |y| / (2 t)
    pos = x >= 0.0
    return (ir.select(pos, t, u), -ir.select(pos, u, t))


def _snell(cos_theta_i, eta) -> tuple[Complex, Complex, ir.Float]:
    """``eta_it`` (the IOR ratio seen by the incident side; eta inverted
    where ``cos_theta_i`` < 0, light arriving from inside), ``cos_theta_t``
    (complex, see :func:`_csqrt`) and |cos_theta_i|. Absorption is a
    negative imaginary index (Mitsuba's exp(+i omega t) convention), whichever
    sign eta_im is given with."""
    er, ei = eta if isinstance(eta, tuple) else (eta, 0.0)
    if not _zero(ei):
        ei = -ir.abs(ei)
    inv = _cdiv((1.0, 0.0), (er, ei))
    outside = cos_theta_i >= 0.0
    eta_it = tuple(_select(outside, a, b) for a, b in zip((er, ei), inv))
    eta_ti = tuple(_select(outside, a, b) for a, b in zip(inv, (er, ei)))
    sin2_i = 1.0 - cos_theta_i * cos_theta_i               # Snell: sin_t = eta_ti sin_i
    e2 = _cmul(eta_ti, eta_ti)
    cos_t = _csqrt((1.0 - e2[0] * sin2_i, _mul(-sin2_i, e2[1])))
    return eta_it, cos_t, ir.abs(cos_theta_i)


def _index_matched(eta):
    """Where eta is 0 or +-1 (real): Mitsuba's reflection amplitudes are 0."""
    er, ei = eta if isinstance(eta, tuple) else (eta, 0.0)
    mod2 = _add(er * er, _mul(ei, ei))
    matched = mod2 == 1.0
    if not _zero(ei):
        matched = matched & (ei == 0.0)
    return (mod2 == 0.0) | matched


def _fresnel_mueller(a_s: Complex, a_p: Complex) -> Mueller:
    """Mueller matrix of the field amplitudes ``a_s``, ``a_p``:
    1/2 [[A+B, A-B, 0, 0], [A-B, A+B, 0, 0], [0, 0, 2 Re C, 2 Im C], [0, 0, -2 Im C, 2 Re C]]
    with A = |a_s|^2, B = |a_p|^2, C = a_s conj(a_p)."""
    A = _add(_mul(a_s[0], a_s[0]), _mul(a_s[1], a_s[1]))
    B = _add(_mul(a_p[0], a_p[0]), _mul(a_p[1], a_p[1]))
    re = _add(_mul(a_s[0], a_p[0]), _mul(a_s[1], a_p[1]))
    im = _sub(_mul(a_s[1], a_p[0]), _mul(a_s[0], a_p[1]))
    p, q = 0.5 * (A + B), 0.5 * (A - B)
    return _mueller(p, q, 0.0, 0.0, q, p, 0.0, 0.0, 0.0, 0.0, re, im, 0.0, 0.0, _sub(0.0, im), re)


def specular_reflection(cos_theta_i: ir.Float, eta: ir.Float | float | Complex) -> Mueller:
    """Mueller matrix of specular reflection off an interface of relative IOR
    ``eta`` (interior / exterior): a real number (dielectric) or an
    ``(eta_re, eta_im)`` pair (conductor; the sign of eta_im does not
    matter). ``cos_theta_i`` < 0 means arriving from inside (eta is
    inverted); total internal reflection keeps M00 = 1 and turns linear
    into elliptical polarization. The frames' x axes are the s direction,
    as Mitsuba's. ``specular_reflection(cos_theta_i, (0.2, 3.6))``."""
    eta_it, cos_t, ci = _snell(cos_theta_i, eta)
    # r_s = (ci - eta ct) / (ci + eta ct), r_p = (eta ci - ct) / (eta ci + ct) (Verdet's sign)
    e_ct = _cmul(eta_it, cos_t)
    e_ci = (eta_it[0] * ci, _mul(eta_it[1], ci))
    r_s = _cdiv((ci - e_ct[0], -e_ct[1]), (ci + e_ct[0], e_ct[1]))
    r_p = _cdiv((e_ci[0] - cos_t[0], _sub(e_ci[1], cos_t[1])), (e_ci[0] + cos_t[0], _add(e_ci[1], cos_t[1])))
    off = _index_matched(eta)
    return _fresnel_mueller(tuple(ir.select(off, 0.0, x) for x in r_s), tuple(ir.select(off, 0.0, x) for x in r_p))


def specular_transmission(cos_theta_i: ir.Float, eta: ir.Float | float) -> Mueller:
    """Mueller matrix of specular refraction through a dielectric interface
    of real relative IOR ``eta`` (``cos_theta_i`` < 0: from inside). The
    amplitudes t_s = 2 ci / (ci + eta ct), t_p = 2 ci / (eta ci + ct) carry
    Mitsuba's power factor eta_it cos_theta_t / cos_theta_i, so
    M00(reflection) + M00(transmission) = 1 (no 1/eta^2 radiance scaling);
    zero under total internal reflection and at grazing incidence.
    ``specular_transmission(cos_theta_i, 1.5)``."""
    if isinstance(eta, tuple):
        raise TypeError("specular_transmission: eta must be real (a dielectric)")
    (eta_it, _), (ct, _), ci = _snell(cos_theta_i, eta)   # ct = 0 under total reflection
    # factor * t_s^2 = 4 eta ci ct / (ci + eta ct)^2 and so on: no division by ci
    ds, dp = ci + eta_it * ct, eta_it * ci + ct
    num = 4.0 * eta_it * ci * ct
    inv_s = ir.select(ds > 0.0, 1.0 / ds, 0.0)
    inv_p = ir.select(dp > 0.0, 1.0 / dp, 0.0)
    A, B, C = num * inv_s * inv_s, num * inv_p * inv_p, num * inv_s * inv_p
    p, q = 0.5 * (A + B), 0.5 * (A - B)
    return _mueller(p, q, 0.0, 0.0, q, p, 0.0, 0.0, 0.0, 0.0, C, 0.0, 0.0, 0.0, 0.0, C)
