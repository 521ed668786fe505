"""Generate ``jaxrender/data/srgb_spectrum.npz``: the RGB -> spectrum coefficient
table of Jakob & Hanika 2019 ("A Low-Dimensional Function Space for Efficient
Spectral Upsampling") for linear-sRGB reflectances (Rec. 709 primaries, D65).

    python3 tools/rgb2spec_opt.py [--res R] [--check]

A reflectance is s(λ) = sigmoid(c0 λ² + c1 λ + c2), sigmoid(x) = 1/2 + x / (2 sqrt(1 + x²)).
For each table node the three coefficients are fitted so that the colour of s
under D65 (XYZ = ∫ s cmf D65 dλ / ∫ y-bar D65 dλ, trapezoid rule on the CIE
5 nm grid of ``jaxrender/data/cie.npz``, then ``XYZ_TO_SRGB``) matches the
node's colour, minimising the CIE76 ΔE in CIELAB (D65 white = the XYZ of a unit
reflectance) by damped Gauss-Newton with an analytic Jacobian. The fit works in
a normalised wavelength t = (λ − 360) / 470 in [0, 1] and converts the
coefficients to nanometres at the end.

Layout, as in the paper: ``coeffs[i, k, yj, xj, :]`` (3, R, R, R, 3) float32,
i = index of the largest RGB component, z = rgb[i] = ``scale[k]`` with
scale[k] = smoothstep(smoothstep(k / (R − 1))), smoothstep(x) = x²(3 − 2x);
rgb[(i+1)%3] = z · xj / (R − 1), rgb[(i+2)%3] = z · yj / (R − 1). Every
(xj, yj) plane of a table is solved at once (numpy, vectorised); planes are
solved from k = R // 5 upwards and then downwards, each starting from the
solution of its neighbour plane (k = R // 5 itself from c = 0).

R = 48 by default, the largest whose table ships small: compressed float32
npz of R = 32 / 48 / 64 are 1.1 / 3.8 / 8.9 MB (the coefficients barely
compress, and truncating their mantissas costs up to 0.04 in the spectra
already at 6 bits, as the nm-convention polynomial cancels). Worst round trip
|rgb - sRGB(spectrum(lookup(rgb)))| over 20000 random colours in
[0.02, 0.98]^3: R = 32 6.0e-3, R = 48 3.0e-3, R = 64 1.9e-3; and R = 32
differs from Mitsuba's (R = 64) spectra by up to 0.22 for bright yellows
(0.95, 0.99, 0.69), R = 48 by < 0.01 on the same test colours.
Prints the solve time, the worst node fit and the worst round trip through
the trilinear lookup of ``jaxrender.scene.spectra`` (random colours).
``--check`` compares with the committed file and exits 1 if the linear-sRGB
colours of their node spectra differ by more than 1e-5 (the spectra
themselves are ill-determined where the colour barely constrains them, e.g.
near black or at long wavelengths).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "jaxrender" / "data" / "srgb_spectrum.npz"


def _load_spectra():
    """``jaxrender/scene/spectra.py`` loaded by path (numpy only; avoids importing jaxrender and JAX)."""
    spec = importlib.util.spec_from_file_location("_jaxrender_spectra", ROOT / "jaxrender" / "scene" / "spectra.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sp = _load_spectra()
LAM = sp.CIE_WAVELENGTHS                                  # (95,) nm
LAM_MIN, LAM_RANGE = sp.CIE_MIN, sp.CIE_MAX - sp.CIE_MIN
T = (LAM - LAM_MIN) / LAM_RANGE                           # normalised wavelength in [0, 1]
BASIS = np.stack([T * T, T, np.ones_like(T)], axis=-1)    # (95, 3): d(poly)/d(c0, c1, c2)
# XYZ of a reflectance s sampled on LAM: s @ K, with K = w cmf D65 / Σ w y-bar D65 (trapezoid weights w).
_K = sp.trapezoid_weights(LAM)[:, None] * sp.cie_xyz(LAM) * sp.d65(LAM)[:, None]
K = _K / _K[:, 1].sum()                                   # (95, 3)
WHITE = K.sum(axis=0)                                     # XYZ of s = 1; Y = 1
RGB_TO_XYZ = np.linalg.inv(sp.XYZ_TO_SRGB)                # exact inverse, so XYZ_TO_SRGB round-trips
DELTA = 6.0 / 29.0


def smoothstep(x: np.ndarray) -> np.ndarray:
    return x * x * (3.0 - 2.0 * x)


def lab_and_jacobian(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CIELAB (N, 3) of XYZ (N, 3) under WHITE, and d(Lab)/d(XYZ) (N, 3, 3)."""
    t = xyz / WHITE
    lin = t <= DELTA ** 3
    tc = np.where(lin, 1.0, t)                             # keep cbrt away from t <= 0 where unused
    f = np.where(lin, t / (3 * DELTA ** 2) + 4.0 / 29.0, np.cbrt(tc))
    df = np.where(lin, 1.0 / (3 * DELTA ** 2), 1.0 / (3.0 * np.cbrt(tc) ** 2)) / WHITE   # d f / d XYZ
    lab = np.stack([116.0 * f[:, 1] - 16.0, 500.0 * (f[:, 0] - f[:, 1]), 200.0 * (f[:, 1] - f[:, 2])], axis=-1)
    jac = np.zeros(xyz.shape[:-1] + (3, 3))
    jac[:, 0, 1] = 116.0 * df[:, 1]
    jac[:, 1, 0] = 500.0 * df[:, 0]
    jac[:, 1, 1] = -500.0 * df[:, 1]
    jac[:, 2, 1] = 200.0 * df[:, 1]
    jac[:, 2, 2] = -200.0 * df[:, 2]
    return lab, jac


def spectrum(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reflectance (N, 95) of normalised-λ coefficients c (N, 3) and its derivative w.r.t. the polynomial."""
    x = c @ BASIS.T
    r = 1.0 / np.sqrt(1.0 + x * x)
    return 0.5 + 0.5 * x * r, 0.5 * r ** 3


def residual(c: np.ndarray, lab_target: np.ndarray, jacobian: bool = False):
    s, ds = spectrum(c)
    lab, dlab = lab_and_jacobian(s @ K)
    r = lab - lab_target
    if not jacobian:
        return r
    dxyz = np.einsum("nj,jk,jm->nmk", ds, BASIS, K)        # d XYZ_m / d c_k
    return r, dlab @ dxyz


def gauss_newton(c: np.ndarray, rgb: np.ndarray, iterations: int = 60,
                 tol: float = 1e-7) -> tuple[np.ndarray, np.ndarray]:
    """Fit normalised-λ coefficients (N, 3) from initial guesses c to linear-sRGB targets (N, 3); returns (c, ΔE)."""
    lab_target, _ = lab_and_jacobian(rgb @ RGB_TO_XYZ.T)
    c = c.copy()
    r = residual(c, lab_target)
    err = np.linalg.norm(r, axis=-1)
    for _ in range(iterations):
        act = err > tol
        if not act.any():
            break
        ca = c[act]
        ra, ja = residual(ca, lab_target[act], jacobian=True)
        jt = np.swapaxes(ja, -1, -2)
        # Gauss-Newton step (tiny Levenberg term for nearly singular Jacobians), then step halving.
        a = jt @ ja + 1e-12 * np.eye(3)
        step = -np.linalg.solve(a, (jt @ ra[..., None]))[..., 0]
        e_old = err[act]
        alpha = np.ones(len(ca))
        best_c, best_e = ca.copy(), e_old.copy()
        todo = np.ones(len(ca), dtype=bool)
        for _half in range(30):
            cand = ca[todo] + alpha[todo, None] * step[todo]
            e_new = np.linalg.norm(residual(cand, lab_target[act][todo]), axis=-1)
            ok = np.isfinite(e_new) & (e_new < e_old[todo])
            idx = np.nonzero(todo)[0]
            best_c[idx[ok]] = cand[ok]
            best_e[idx[ok]] = e_new[ok]
            todo[idx[ok]] = False
            alpha[todo] *= 0.5
            if not todo.any():
                break
        c[act], err[act] = best_c, best_e
        if np.all(best_e >= e_old * (1 - 1e-12)):           # no point improves any more
            break
    return c, err


def to_nanometres(c: np.ndarray) -> np.ndarray:
    """Coefficients of the polynomial in t = (λ − 360) / 470 -> coefficients in λ (nm)."""
    a, b, cc = c[..., 0], c[..., 1], c[..., 2]
    s, o = 1.0 / LAM_RANGE, LAM_MIN
    return np.stack([a * s * s, b * s - 2 * a * o * s * s, cc - b * o * s + a * (o * s) ** 2], axis=-1)


def build(res: int) -> tuple[np.ndarray, np.ndarray, float]:
    scale = smoothstep(smoothstep(np.linspace(0.0, 1.0, res)))
    g = np.linspace(0.0, 1.0, res)
    yy, xx = np.meshgrid(g, g, indexing="ij")               # plane[yj, xj]
    xf, yf = xx.ravel(), yy.ravel()
    coeffs = np.zeros((3, res, res, res, 3))
    worst = 0.0
    start = res // 5
    for i in range(3):
        for ks in (range(start, res), range(start, -1, -1)):
            c = np.zeros((res * res, 3))
            for k in ks:
                z = scale[k]
                rgb = np.empty((res * res, 3))
                rgb[:, i], rgb[:, (i + 1) % 3], rgb[:, (i + 2) % 3] = z, xf * z, yf * z
                c, err = gauss_newton(c, rgb)
                if k > 0:                                   # z = 0 (black) cannot be met; c2 just runs to -large
                    worst = max(worst, float(err.max()))
                coeffs[i, k] = to_nanometres(c).reshape(res, res, 3)
    return scale, coeffs, worst


def round_trip_error(n: int = 20000, lo: float = 0.0, hi: float = 1.0, seed: int = 1) -> float:
    """Max |sRGB(spectrum(lookup(rgb))) − rgb| over n random colours in [lo, hi]^3 (uses the written table)."""
    sp._table.cache_clear()
    rgb = np.random.default_rng(seed).uniform(lo, hi, (n, 3))
    s = sp.eval_coeffs(sp.srgb_to_coeffs(rgb)[:, None, :], LAM)
    back = sp.xyz_to_srgb(sp.spectrum_to_xyz(s * sp.d65(LAM), LAM))
    return float(np.abs(back - rgb).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--res", type=int, default=48, help="table resolution R (default 48)")
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.time()
    scale, coeffs, worst = build(args.res)
    print(f"R = {args.res}: solved in {time.time() - t0:.1f} s; worst node fit ΔE76 = {worst:.2e}")
    if args.check:
        old = np.load(args.out)

        def node_rgb(c: np.ndarray) -> np.ndarray:
            return sp.eval_coeffs(c.astype(np.float64).reshape(-1, 1, 3), LAM) @ K @ sp.XYZ_TO_SRGB.T

        a, b = np.load(args.out)["coeffs"], coeffs.astype(np.float32)
        diff = float(np.abs(node_rgb(a) - node_rgb(b)).max()) if a.shape == b.shape else np.inf
        print(f"max node colour difference to {args.out}: {diff:.2e}")
        sys.exit(0 if diff <= 1e-5 and np.array_equal(old["scale"], scale.astype(np.float32)) else 1)
    np.savez_compressed(args.out, scale=scale.astype(np.float32), coeffs=coeffs.astype(np.float32))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")
    sp.TABLE_FILE = args.out
    if True:
        print(f"worst round trip |rgb - sRGB(spectrum)|: {round_trip_error():.2e} over [0,1]^3, "
              f"{round_trip_error(lo=0.02, hi=0.98):.2e} over [0.02,0.98]^3 (20000 random colours each)")


if __name__ == "__main__":
    main()
