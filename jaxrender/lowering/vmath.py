"""sin, cos, atan, atan2, asin, acos, exp and log for the CPU code
generators, in double precision, inline.

The C library's ``sinf``/``cosf`` are scalar calls: a SIMD packet makes one
per lane, which profiles showed to be 10-15% of a path-tracing kernel
(sampling warps and envmap lookups are full of them). These are straight-line
LLVM IR over the code generator's own shape (a scalar or a vector of lanes),
so the one-lane and the packet code compute the same bits.

sin/cos: the argument is widened to double and reduced by the nearest
multiple of pi/2 with a two-part pi/2 whose first part has 25 bits, so the
product with the multiple (< 2^20) is exact; the reduced argument is in
[-pi/4, pi/4], where the polynomials below have a relative error under
2^-41. The double result is rounded once to float, so the error is at
most 0.5 ulp plus 2^-17 ulp, within ``ir.ULP_BOUND``. Arguments of magnitude
2^20 * pi/2 or more (and inf/NaN) take the C library for their lanes.

atan2 (and atan = atan2(x, 1)): with a = min(|y|, |x|), b = max(|y|, |x|),
t = a / b in [0, 1], or (a - b) / (a + b) where a / b > tan(pi/8) (then
atan(a / b) = pi/4 + atan(t)): one division leaves |t| <= tan(pi/8), where
the polynomial below has a relative error under 2^-38; the octant's
reflections follow. It runs in double (no overflow or underflow for float
inputs); asin and acos are atan2 of (x, sqrt((1 - x)(1 + x))) and its swap.
Each is rounded once to float. Inputs where a formula does not hold (0/0 and
inf/inf in atan2, |x| > 1 in asin/acos, NaN) take the C library for their lanes.

exp and log (constants below): a power of two times the exponential of
the remainder, the exponent field written directly; a power of two times
m in [sqrt(1/2), sqrt(2)), whose log is 2 atanh((m - 1) / (m + 1)). exp
clamps its argument where the float result is 0 or inf and passes NaN
through; log leaves 0, negative, inf and NaN arguments to the C library.

The polynomials are near-minimax: f(z) = (g(sqrt z) / sqrt z - 1) / z for
g = sin, atan (and (cos(sqrt z) - 1) / z) interpolated at Chebyshev nodes
of z over the reduced range in 60-digit arithmetic, rounded to double, the
error bounds above measured in the same arithmetic on the Horner form
evaluated in double (``tools/make_vmath_polynomials.py``). They replaced
Taylor series of twice the length (and atan's three divisions): atan2 and
acos took 2.5x and 1.9x less time in a kernel of a million of them, an
envmap's sample and lookup 20% less.
"""
from __future__ import annotations

import math

from llvmlite import ir as ll

f64 = ll.DoubleType()
i64 = ll.IntType(64)

INV_PIO2 = 6.36619772367581382433e-01    # 2/pi, rounded to double
PIO2_HI = 1.57079631090164184570e+00     # the first 25 bits of pi/2
PIO2_LO = 1.58932547735281966916e-08     # pi/2 - PIO2_HI, rounded to double
FAST_LIMIT = 2.0 ** 20 * 1.5707963267948966  # |x| below this: exact k * PIO2_HI
# sin r = r (1 + z S(z)), cos r = 1 + z C(z), z = r^2, |r| <= pi/4;
# atan t = t (1 + z A(z)), z = t^2, |t| <= tan(pi/8) (module docstring).
SIN_COEF = [-0.16666666666663885, 0.008333333331079206, -0.0001984126691696846, 2.7555990924268847e-06,
            -2.4805635751240042e-08]
COS_COEF = [-0.4999999999996389, 0.041666666637395836, -0.0013888885091376474, 2.479986218327299e-05,
            -2.723713978117992e-07]
ATAN_COEF = [-0.33333333331440707, 0.19999998917276623, -0.14285612510464937, 0.1110749511007188,
             -0.09028983181607796, 0.07135323312870018, -0.04043221003181974]
TAN_PI_8 = 0.41421356237309503   # tan(pi/8), rounded to double
PI = 3.141592653589793
# exp x = 2^k exp r, k = rint(x / ln 2), |r| <= ln(2) / 2: the Taylor series
# to r^11 (remainder under 2^-47 relative); arguments clamped to
# [EXP_LO, EXP_HI], beyond which the float result is 0 or inf (and k fits a
# double's exponent).
LN2 = 0.6931471805599453
INV_LN2 = 1.4426950408889634
EXP_LO, EXP_HI = -110.0, 100.0
EXP_COEF = [1.0 / math.factorial(n) for n in range(12)]
# log x = e ln 2 + 2 atanh s, s = (m - 1) / (m + 1), x = m 2^e with m in
# [sqrt(1/2), sqrt(2)): |s| <= 0.1716, 2 atanh s = 2 s (1 + z / 3 + z^2 / 5
# + ... + z^7 / 15), z = s^2 (remainder under 2^-44 relative).
SQRT2 = 1.4142135623730951
LOG_COEF = [1.0 / (2 * n + 1) for n in range(8)]
FUNCS = ("sinf", "cosf", "atanf", "atan2f", "asinf", "acosf", "expf", "logf")


class _Shape:
    """Constants and helpers in the code generator's shape (scalar or lanes)."""

    def __init__(self, cg):
        self.cg, self.b, self.n = cg, cg.b, cg.lanes
        self.dt = f64 if self.n == 1 else ll.VectorType(f64, self.n)
        self.it = i64 if self.n == 1 else ll.VectorType(i64, self.n)

    def c64(self, v):
        return self.cg.broadcast(ll.Constant(f64, v))

    def ci64(self, v: int):
        return self.cg.broadcast(ll.Constant(i64, v))

    def horner(self, z, coef):
        b = self.b
        acc = self.c64(coef[-1])
        for c in reversed(coef[:-1]):
            acc = b.fadd(b.fmul(acc, z), self.c64(c))
        return acc

    def f64_intrinsic(self, name: str, args):
        sfx = "f64" if self.n == 1 else f"v{self.n}f64"
        return self.b.call(self.cg.decl(f"llvm.{name}.{sfx}", self.dt, [self.dt] * len(args)), args)


def emit(cg, name: str, *args):
    """``name`` (one of FUNCS) of ``args``, float values of ``cg``'s shape
    (cg: an ItemCodegen; its builder ``cg.b`` is positioned where the result
    is needed)."""
    if name in ("sinf", "cosf"):
        fast, special = _sincos(cg, name, args[0])
    elif name == "expf":
        return _exp(cg, args[0])
    elif name == "logf":
        fast, special = _log(cg, args[0])
    else:
        fast, special = _arc(cg, name, args)
    return _with_fallback(cg, name, args, fast, special)


def _with_fallback(cg, name, args, fast, special):
    """``fast`` where ``special`` is false; the C library in the other lanes
    (a branch taken only when some lane needs it)."""
    b = cg.b
    any_special = special if cg.lanes == 1 else cg.any(special)
    entry = b.block
    slow_bb = cg.fn.append_basic_block(f"{name}.special")
    join = cg.fn.append_basic_block(f"{name}.join")
    b.cbranch(any_special, slow_bb, join)
    b.position_at_end(slow_bb)
    slow = b.select(special, cg.libm_scalar_lanes(name, list(args)), fast)
    slow_end = b.block
    b.branch(join)
    b.position_at_end(join)
    out = b.phi(cg.T("f32"))
    out.add_incoming(fast, entry)
    out.add_incoming(slow, slow_end)
    return out


def _atan2_d(sh: _Shape, y, x):
    """atan2 of doubles, except 0/0 and inf/inf (the caller's fallback)."""
    b = sh.b
    ay, ax = sh.f64_intrinsic("fabs", [y]), sh.f64_intrinsic("fabs", [x])
    steep = b.fcmp_ordered(">", ay, ax)
    lo, hi = b.select(steep, ax, ay), b.select(steep, ay, ax)
    mid = b.fcmp_ordered(">", lo, b.fmul(hi, sh.c64(TAN_PI_8)))
    t = b.fdiv(b.select(mid, b.fsub(lo, hi), lo), b.select(mid, b.fadd(lo, hi), hi))
    z = b.fmul(t, t)
    r = b.fadd(t, b.fmul(t, b.fmul(z, sh.horner(z, ATAN_COEF))))
    r = b.select(mid, b.fadd(sh.c64(PI / 4), r), r)
    r = b.select(steep, b.fsub(sh.c64(PI / 2), r), r)
    # x < 0 (or -0 on the y axis: atan2(+-0, -0) is the fallback's) reflects into the left half
    r = b.select(b.fcmp_ordered("<", x, sh.c64(0.0)), b.fsub(sh.c64(PI), r), r)
    return sh.f64_intrinsic("copysign", [r, y])


def _arc(cg, name: str, args):
    sh = _Shape(cg)
    b = sh.b
    d = [b.fpext(v, sh.dt) for v in args]
    isnan = [b.fcmp_unordered("uno", v, v) for v in args]
    if name == "atanf":
        return b.fptrunc(_atan2_d(sh, d[0], sh.c64(1.0)), cg.T("f32")), isnan[0]
    if name == "atan2f":
        y, x = d
        ay, ax = sh.f64_intrinsic("fabs", [y]), sh.f64_intrinsic("fabs", [x])
        both_zero = b.and_(b.fcmp_ordered("==", ay, sh.c64(0.0)), b.fcmp_ordered("==", ax, sh.c64(0.0)))
        inf = sh.c64(float("inf"))
        both_inf = b.and_(b.fcmp_ordered("==", ay, inf), b.fcmp_ordered("==", ax, inf))
        special = b.or_(b.or_(isnan[0], isnan[1]), b.or_(both_zero, both_inf))
        return b.fptrunc(_atan2_d(sh, y, x), cg.T("f32")), special
    x = d[0]
    root = sh.f64_intrinsic("sqrt", [b.fmul(b.fsub(sh.c64(1.0), x), b.fadd(sh.c64(1.0), x))])
    special = b.or_(isnan[0], b.fcmp_ordered(">", sh.f64_intrinsic("fabs", [x]), sh.c64(1.0)))
    r = _atan2_d(sh, x, root) if name == "asinf" else _atan2_d(sh, root, x)
    return b.fptrunc(r, cg.T("f32")), special


def _sincos(cg, name: str, x):
    sh = _Shape(cg)
    b, c64, ci, horner = sh.b, sh.c64, cg.ci32, sh.horner
    xd = b.fpext(x, sh.dt)
    k = sh.f64_intrinsic("rint", [b.fmul(xd, c64(INV_PIO2))])
    r = b.fsub(b.fsub(xd, b.fmul(k, c64(PIO2_HI))), b.fmul(k, c64(PIO2_LO)))
    r = b.select(b.fcmp_ordered("==", k, c64(0.0)), xd, r)  # -0 - (-0) would be +0
    q = b.fptosi(k, cg.T("i32"))
    if name == "cosf":  # cos x = sin(x + pi/2): one quadrant on
        q = b.add(q, ci(1))
    z = b.fmul(r, r)
    s = b.fmul(r, b.fadd(c64(1.0), b.fmul(z, horner(z, SIN_COEF))))  # r (...): keeps the sign of 0
    c = b.fadd(c64(1.0), b.fmul(z, horner(z, COS_COEF)))
    odd = b.icmp_unsigned("!=", b.and_(q, ci(1)), ci(0))
    neg = b.icmp_unsigned("!=", b.and_(q, ci(2)), ci(0))
    v = b.select(odd, c, s)
    v = b.select(neg, b.fneg(v), v)
    fast = b.fptrunc(v, cg.T("f32"))
    # Large, infinite or NaN arguments: the C library, for those lanes only.
    fabs = cg.intrinsic("llvm.fabs", "f32", ["f32"], [x])
    return fast, b.fcmp_unordered(">=", fabs, cg.cf32(FAST_LIMIT))


def _exp(cg, x):
    """exp of float ``x``, in double, rounded once (NaN passes through)."""
    sh = _Shape(cg)
    b, c64 = sh.b, sh.c64
    xd = b.fpext(x, sh.dt)
    # (minnum / maxnum would drop a NaN: it is put back at the end)
    xc = sh.f64_intrinsic("maxnum", [sh.f64_intrinsic("minnum", [xd, c64(EXP_HI)]), c64(EXP_LO)])
    k = sh.f64_intrinsic("rint", [b.fmul(xc, c64(INV_LN2))])
    r = sh.f64_intrinsic("fma", [b.fneg(k), c64(LN2), xc])
    scale = b.bitcast(b.shl(b.add(b.fptosi(k, sh.it), sh.ci64(1023)), sh.ci64(52)), sh.dt)
    fast = b.fptrunc(b.fmul(sh.horner(r, EXP_COEF), scale), cg.T("f32"))
    return b.select(b.fcmp_unordered("uno", x, x), x, fast)


def _log(cg, x):
    """(log of float ``x`` > 0 and finite in double, rounded once; the lanes
    that are not: 0, negative, inf and NaN, the C library's)."""
    sh = _Shape(cg)
    b, c64 = sh.b, sh.c64
    xd = b.fpext(x, sh.dt)
    bits = b.bitcast(xd, sh.it)          # (a positive float is a normal double)
    e = b.sub(b.lshr(bits, sh.ci64(52)), sh.ci64(1023))
    m = b.bitcast(b.or_(b.and_(bits, sh.ci64((1 << 52) - 1)), sh.ci64(1023 << 52)), sh.dt)
    big = b.fcmp_ordered(">", m, c64(SQRT2))
    m = b.select(big, b.fmul(m, c64(0.5)), m)
    e = b.select(big, b.add(e, sh.ci64(1)), e)
    s = b.fdiv(b.fsub(m, c64(1.0)), b.fadd(m, c64(1.0)))
    log_m = b.fmul(b.fmul(c64(2.0), s), sh.horner(b.fmul(s, s), LOG_COEF))
    fast = b.fptrunc(b.fadd(b.fmul(b.sitofp(e, sh.dt), c64(LN2)), log_m), cg.T("f32"))
    inf = cg.cf32(float("inf"))
    special = b.or_(b.fcmp_unordered("<=", x, cg.cf32(0.0)), b.fcmp_ordered("==", x, inf))
    return fast, special
