"""Regenerate the polynomial coefficients of ``jaxrender/lowering/vmath.py``
(``SIN_COEF``, ``COS_COEF``, ``ATAN_COEF``) and the relative error bounds
its docstring states.

    pip install mpmath && python tools/make_vmath_polynomials.py [--check]

Each polynomial P in z = x^2 approximates, over the reduced range,

* sin:  (sin x / x - 1) / z     for |x| <= pi/4 (5 coefficients),
* cos:  (cos x - 1) / z         for |x| <= pi/4 (5),
* atan: (atan x / x - 1) / z    for |x| <= tan(pi/8) (7),

so that sin x = x (1 + z P), cos x = 1 + z P, atan x = x + x (z P). P
interpolates the function at Chebyshev nodes of z over the range (widened by
1e-6 for the rounding of the reduction), solved in 60-digit arithmetic and
rounded to double: within a small factor of the minimax error at that
degree. The error reported is the largest relative error, against mpmath, of
the Horner form evaluated in double precision (as the generated code does)
at 1000 points of the range.

``--check`` compares the coefficients with the module's and exits with
status 1 if they differ.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
mp.mp.dps = 60


def chebyshev_interpolant(f, hi, n: int) -> list[float]:
    """Monomial coefficients (lowest first) of the degree n - 1 polynomial
    interpolating f at n Chebyshev nodes of [0, hi], rounded to double."""
    nodes = [hi / 2 + hi / 2 * mp.cos(mp.pi * (2 * k + 1) / (2 * n)) for k in range(n)]
    a = mp.matrix([[x ** j for j in range(n)] for x in nodes])
    return [float(c) for c in mp.lu_solve(a, mp.matrix([f(x) for x in nodes]))]


def horner(coef, z: float) -> float:
    acc = coef[-1]
    for c in reversed(coef[:-1]):
        acc = acc * z + c
    return acc


def _ratio(g, at0):
    return lambda z: (g(mp.sqrt(z)) / mp.sqrt(z) - 1) / z if z != 0 else mp.mpf(at0)


FITS = {  # name: (function of z, reduced range of x, coefficients, the approximation of g(x) in double)
    "SIN_COEF": (_ratio(mp.sin, "-1/6"), mp.pi / 4, 5, mp.sin, lambda x, z, c: x * (1.0 + z * horner(c, z))),
    "COS_COEF": (lambda z: (mp.cos(mp.sqrt(z)) - 1) / z if z != 0 else mp.mpf("-0.5"), mp.pi / 4, 5, mp.cos,
                 lambda x, z, c: 1.0 + z * horner(c, z)),
    "ATAN_COEF": (_ratio(mp.atan, "-1/3"), mp.tan(mp.pi / 8), 7, mp.atan, lambda x, z, c: x + x * (z * horner(c, z))),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    from jaxrender.lowering import vmath
    same = True
    for name, (f, x_max, n, g, approx) in FITS.items():
        x_hi = x_max * (1 + mp.mpf("1e-6"))
        coef = chebyshev_interpolant(f, x_hi ** 2, n)
        xs = np.linspace(0.0, float(x_hi), 1001)[1:]
        err = max(abs((mp.mpf(approx(x, x * x, coef)) - g(x)) / g(x)) for x in xs)
        print(f"{name} = {coef!r}  # relative error 2^{float(mp.log(err, 2)):.1f}")
        same &= coef == getattr(vmath, name)
    if args.check and not same:
        print("differs from jaxrender/lowering/vmath.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
