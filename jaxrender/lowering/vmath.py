"""sin and cos for the CPU code generators, in double precision, inline.

The C library's ``sinf``/``cosf`` are scalar calls: a SIMD packet makes one
per lane, which profiles showed to be 10-15% of a path-tracing kernel
(sampling warps and envmap lookups are full of them). These are straight-line
LLVM IR over the code generator's own shape (a scalar or a vector of lanes),
so the one-lane and the packet code compute the same bits.

Method: the argument is widened to double and reduced by the nearest
multiple of pi/2 with a two-part pi/2 whose first part has 25 bits, so the
product with the multiple (< 2^20) is exact; the reduced argument is in
[-pi/4, pi/4], where the Taylor polynomials below have a relative error
under 2^-44. The double result is rounded once to float, so the error is at
most 0.5 ulp plus that, within ``ir.ULP_BOUND``. Arguments of magnitude
2^20 * pi/2 or more (and inf/NaN) take the C library for their lanes.
"""
from __future__ import annotations

from fractions import Fraction
from math import factorial

from llvmlite import ir as ll

f32, f64, i32, i64, i1 = ll.FloatType(), ll.DoubleType(), ll.IntType(32), ll.IntType(64), ll.IntType(1)

INV_PIO2 = 6.36619772367581382433e-01    # 2/pi, rounded to double
PIO2_HI = 1.57079631090164184570e+00     # the first 25 bits of pi/2
PIO2_LO = 1.58932547735281966916e-08     # pi/2 - PIO2_HI, rounded to double
FAST_LIMIT = 2.0 ** 20 * 1.5707963267948966  # |x| below this: exact k * PIO2_HI
# Taylor coefficients: sin r = r (1 + r^2 (S[0] + r^2 (S[1] + ...))), cos r = 1 + r^2 (C[0] + ...).
SIN_COEF = [float(Fraction((-1) ** k, factorial(2 * k + 1))) for k in range(1, 8)]
COS_COEF = [float(Fraction((-1) ** k, factorial(2 * k))) for k in range(1, 9)]
FUNCS = ("sinf", "cosf")


def emit(cg, name: str, x):
    """``name`` ("sinf" or "cosf") of ``x``, a float value of ``cg``'s shape
    (cg: an ItemCodegen; its builder ``cg.b`` is positioned where the result
    is needed)."""
    b = cg.b
    n = cg.lanes
    dt = f64 if n == 1 else ll.VectorType(f64, n)
    it = i32 if n == 1 else ll.VectorType(i32, n)

    def c64(v):
        c = ll.Constant(f64, v)
        return c if n == 1 else ll.Constant(dt, [c] * n)

    def ci(v):
        c = ll.Constant(i32, v)
        return c if n == 1 else ll.Constant(it, [c] * n)

    def horner(z, coef):
        acc = c64(coef[-1])
        for c in reversed(coef[:-1]):
            acc = b.fadd(b.fmul(acc, z), c64(c))
        return acc

    xd = b.fpext(x, dt)
    rint = cg.decl("llvm.rint.f64" if n == 1 else f"llvm.rint.v{n}f64", dt, [dt])
    k = b.call(rint, [b.fmul(xd, c64(INV_PIO2))])
    r = b.fsub(b.fsub(xd, b.fmul(k, c64(PIO2_HI))), b.fmul(k, c64(PIO2_LO)))
    r = b.select(b.fcmp_ordered("==", k, c64(0.0)), xd, r)  # -0 - (-0) would be +0
    q = b.fptosi(k, it)
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
    big = b.fcmp_unordered(">=", fabs, cg.cf32(FAST_LIMIT))
    any_big = big if n == 1 else cg.any(big)
    entry = b.block
    slow_bb = cg.fn.append_basic_block(f"{name}.large")
    join = cg.fn.append_basic_block(f"{name}.join")
    b.cbranch(any_big, slow_bb, join)
    b.position_at_end(slow_bb)
    slow = b.select(big, cg.libm_scalar_lanes(name, [x]), fast)
    slow_end = b.block
    b.branch(join)
    b.position_at_end(join)
    out = b.phi(cg.T("f32"))
    out.add_incoming(fast, entry)
    out.add_incoming(slow, slow_end)
    return out
