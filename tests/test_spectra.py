"""Spectral data and RGB -> spectrum upsampling (jaxrender.scene.spectra): no rendering."""
from __future__ import annotations

import numpy as np
import pytest

from jaxrender.scene import spectra as sp

LAM = sp.CIE_WAVELENGTHS                      # 360, 365, ..., 830 nm


def reflectance_to_srgb(s: np.ndarray) -> np.ndarray:
    """Linear sRGB of reflectances (..., 95) on LAM under unit-luminance D65 (trapezoid rule)."""
    return sp.xyz_to_srgb(sp.spectrum_to_xyz(s * sp.d65(LAM), LAM))


def upsample(rgb: np.ndarray, lam: np.ndarray = LAM) -> np.ndarray:
    return sp.eval_coeffs(sp.srgb_to_coeffs(rgb)[..., None, :], lam)


def test_cie_tables():
    assert LAM.shape == (95,) and LAM[0] == sp.CIE_MIN == 360.0 and LAM[-1] == sp.CIE_MAX == 830.0
    np.testing.assert_allclose(np.diff(LAM), 5.0)
    np.testing.assert_allclose(sp.cie_xyz(550.0), [0.43345, 0.99495, 0.00875], rtol=1e-6)
    np.testing.assert_allclose(sp.cie_xyz(552.5), 0.5 * (sp.cie_xyz(550.0) + sp.cie_xyz(555.0)))
    np.testing.assert_array_equal(sp.cie_xyz(np.array([359.9, 830.1])), 0.0)
    np.testing.assert_array_equal(sp.d65(np.array([359.9, 830.1])), 0.0)
    assert sp.cie_xyz(np.zeros((4, 5))).shape == (4, 5, 3)
    np.testing.assert_allclose(sp.d65(560.0), 100.0 * sp.D65_NORMALIZATION)


def test_normalizations():
    one = sp.spectrum_to_xyz(np.ones_like(LAM), LAM)
    assert one[1] == pytest.approx(1.0, abs=1e-14)
    # ∫ y-bar dλ of the CIE 1931 table (1 nm sum: 106.856895)
    assert 1.0 / sp.Y_NORMALIZATION == pytest.approx(106.857, abs=1e-3)
    assert sp.spectrum_to_xyz(sp.d65(LAM), LAM)[1] == pytest.approx(1.0, abs=1e-14)
    # D65 white: chromaticity (0.3127, 0.3290), and the sRGB matrices map it to about (1, 1, 1)
    xyz = sp.spectrum_to_xyz(sp.d65(LAM), LAM)
    np.testing.assert_allclose(xyz[:2] / xyz.sum(), [0.3127, 0.3290], atol=2e-4)
    np.testing.assert_allclose(sp.xyz_to_srgb(xyz), 1.0, atol=5e-4)
    np.testing.assert_allclose(sp.xyz_to_srgb(sp.srgb_to_xyz(np.eye(3))), np.eye(3), atol=1e-6)


def test_round_trip():
    rgb = np.random.default_rng(0).uniform(0.02, 0.98, (200, 3))
    err = np.abs(reflectance_to_srgb(upsample(rgb)) - rgb).max()
    assert err < 2e-3          # measured 1.8e-3 (R = 48 table)


def test_lookup_special_values_and_range():
    c = sp.srgb_to_coeffs(np.zeros(3))
    assert c[0] == 0 and c[1] == 0 and c[2] == -np.inf
    np.testing.assert_array_equal(sp.eval_coeffs(c, LAM), 0.0)
    c = sp.srgb_to_coeffs(np.ones(3))
    assert c[0] == 0 and c[1] == 0 and c[2] == np.inf
    np.testing.assert_array_equal(sp.eval_coeffs(c, LAM), 1.0)
    np.testing.assert_array_equal(upsample(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])), [[0.0] * 95, [1.0] * 95])
    # greys are flat: all three coordinates equal
    grey = upsample(np.array([0.5, 0.5, 0.5]))
    np.testing.assert_allclose(grey, 0.5, atol=1e-3)   # measured 2.7e-4
    # random colours over the whole cube, and out-of-range ones (clamped): spectra within [0, 1]
    rgb = np.random.default_rng(1).uniform(0.0, 1.0, (500, 3))
    rgb[:50] *= np.random.default_rng(2).uniform(-0.5, 3.0, (50, 1))
    s = upsample(rgb)
    assert np.all(np.isfinite(s)) and s.min() >= 0.0 and s.max() <= 1.0


def test_lookup_continuous_across_tables():
    # The largest component switches table (later index wins ties) at r = g; the spectrum must not jump.
    base = np.random.default_rng(3).uniform(0.05, 0.95, (50, 3))
    for a, b in ((0, 1), (1, 2), (0, 2)):
        rgb = base.copy()
        rgb[:, b] = rgb[:, a]
        other = 3 - a - b
        rgb[:, other] = np.minimum(rgb[:, other], rgb[:, a])
        lo, hi = rgb.copy(), rgb.copy()
        lo[:, a] -= 1e-7
        hi[:, b] -= 1e-7
        np.testing.assert_allclose(upsample(lo), upsample(hi), atol=1e-3)
    # and within a table, colours off the nodes land between their neighbours' colours
    rgb = np.array([[0.3, 0.6, 0.9], [0.9, 0.2, 0.1], [0.15, 0.7, 0.3]])
    np.testing.assert_allclose(reflectance_to_srgb(upsample(rgb)), rgb, atol=2e-3)


def test_rgb_spectrum_sampling():
    lam = np.arange(360.0, 830.0 + 1e-9, 0.01)
    pdf = sp.pdf_rgb_spectrum(lam)
    assert np.trapezoid(pdf, lam) == pytest.approx(1.0, abs=1e-6)
    assert sp.pdf_rgb_spectrum(359.0) == 0.0 and sp.pdf_rgb_spectrum(831.0) == 0.0
    lam0, w0 = sp.sample_rgb_spectrum(0.0)
    lam1, w1 = sp.sample_rgb_spectrum(1.0)
    assert lam0 == pytest.approx(360.0, abs=1e-9) and lam1 == pytest.approx(830.0, abs=1e-9)
    # inverse CDF: λ(u) is increasing and the CDF at λ(u) is u
    u = np.linspace(0.0, 1.0, 101)
    lu, w = sp.sample_rgb_spectrum(u)
    assert np.all(np.diff(lu) > 0)
    np.testing.assert_allclose(w, 1.0 / sp.pdf_rgb_spectrum(lu), rtol=1e-12)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(lam))])
    np.testing.assert_allclose(np.interp(lu, lam, cdf), u, atol=1e-6)
    # histogram of 200k samples against the pdf: chi-square over 47 bins of 10 nm
    samples, _ = sp.sample_rgb_spectrum(np.random.default_rng(4).random(200_000))
    edges = np.arange(360.0, 830.0 + 1e-9, 10.0)
    counts, _ = np.histogram(samples, edges)
    expected = len(samples) * np.diff(np.interp(edges, lam, cdf))
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 100.0        # 46 degrees of freedom; p(chi2 > 100) ~ 1e-5
    assert np.abs((counts - expected) / np.sqrt(expected)).max() < 4.5


@pytest.fixture(scope="module")
def mi():
    mitsuba = pytest.importorskip("mitsuba")
    try:
        mitsuba.set_variant("scalar_spectral")
    except Exception as e:                                  # pragma: no cover
        pytest.skip(f"mitsuba variant scalar_spectral unavailable: {e}")
    return mitsuba


def mitsuba_upsample(mi, rgb: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Mitsuba's srgb_model_eval(srgb_model_fetch(rgb)) at ``lam`` (padded to its Spectrum width 4)."""
    n = len(lam)
    lam = np.concatenate([lam, np.full(-n % 4, lam[-1])])
    out = []
    for c in rgb:
        coeffs = mi.srgb_model_fetch(mi.Color3f(*map(float, c)))
        out.append([v for j in range(0, len(lam), 4)
                    for v in mi.srgb_model_eval(coeffs, mi.Spectrum(*map(float, lam[j:j + 4])))][:n])
    return np.array(out)


def test_against_mitsuba_upsampling(mi):
    rgb = np.random.default_rng(5).uniform(0.02, 0.98, (50, 3))
    lam = np.linspace(360.0, 830.0, 471)
    diff = np.abs(upsample(rgb, lam) - mitsuba_upsample(mi, rgb, lam)).max()
    # measured 0.018, at 720 nm (0.011 over 400..700 nm): metamers differ most where the eye barely sees
    assert diff < 0.02
    # Mitsuba's spectra have the same colours in our integration (its table was fitted with another one)
    np.testing.assert_allclose(reflectance_to_srgb(mitsuba_upsample(mi, rgb, LAM)), rgb, atol=2e-3)   # measured 9.8e-4
    # black and white (Mitsuba: c2 = -8192 / +8192, here -inf / +inf)
    np.testing.assert_array_equal(mitsuba_upsample(mi, np.array([[0.0] * 3, [1.0] * 3]), LAM),
                                  upsample(np.array([[0.0] * 3, [1.0] * 3])))


def test_against_mitsuba_cie_and_sampling(mi):
    for lam in (380.0, 412.3, 455.0, 502.5, 550.0, 601.7, 650.0, 700.0, 760.2):
        # measured 1.1e-6 (Mitsuba's float32)
        np.testing.assert_allclose(sp.cie_xyz(lam), np.array(mi.cie1931_xyz(lam)), rtol=1e-5, atol=1e-7)
        # same D65 shape; only the normalisation constant differs (Mitsuba integrates differently)
        assert sp.d65(lam) / sp.D65_NORMALIZATION == pytest.approx(mi.cie_d65(lam) / mi.MI_CIE_D65_NORMALIZATION,
                                                                   rel=1e-5)
    assert sp.Y_NORMALIZATION == pytest.approx(mi.MI_CIE_Y_NORMALIZATION, rel=2e-3)        # -1.0e-3
    assert sp.D65_NORMALIZATION == pytest.approx(mi.MI_CIE_D65_NORMALIZATION, rel=2e-3)    # +1.1e-3
    for u in (0.0, 0.01, 0.2, 0.5, 0.77, 0.99, 1.0):
        lam_ref, w_ref = mi.sample_rgb_spectrum(u)
        lam, w = sp.sample_rgb_spectrum(u)
        assert lam == pytest.approx(lam_ref, abs=2e-4)       # measured 6e-5 (float32)
        assert w == pytest.approx(w_ref, rel=1e-5)            # measured 1.7e-6
        assert sp.pdf_rgb_spectrum(lam) == pytest.approx(mi.pdf_rgb_spectrum(lam), rel=1e-6)
