"""Spectral data and RGB -> spectrum upsampling for the ``spectral`` variant (numpy only).

* CIE 1931 2-degree colour matching functions and the CIE D65 illuminant,
  tabulated at 5 nm on [360, 830] nm (``jaxrender/data/cie.npz``, made by
  ``tools/make_cie_data.py``; see ``data/cie_SOURCES.txt``), linearly
  interpolated and zero outside that range, as in Mitsuba 3.
* Integrals over wavelength use the trapezoid rule on the table's 5 nm grid.
  ``Y_NORMALIZATION`` = 1 / integral of y-bar, so a unit spectrum has Y = 1;
  ``d65`` is scaled to unit luminance (integral of D65 y-bar = integral of y-bar).
* Jakob & Hanika 2019 ("A Low-Dimensional Function Space for Efficient
  Spectral Upsampling"): a linear-sRGB reflectance becomes
  s(λ) = sigmoid(c0 λ² + c1 λ + c2), sigmoid(x) = 1/2 + x / (2 sqrt(1 + x²)),
  λ in nm, with (c0, c1, c2) looked up in ``jaxrender/data/srgb_spectrum.npz``
  (made by ``tools/rgb2spec_opt.py``).
* Wavelength importance sampling of Radziszewski et al. 2009 ("An improved
  technique for full spectral rendering"): pdf(λ) ∝ 1 / cosh²(0.0072 (λ − 538))
  on [360, 830], as Mitsuba's ``sample_rgb_spectrum``.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = [
    "CIE_MIN", "CIE_MAX", "CIE_WAVELENGTHS", "Y_NORMALIZATION", "D65_NORMALIZATION",
    "SRGB_TO_XYZ", "XYZ_TO_SRGB", "cie_xyz", "d65", "trapezoid_weights", "spectrum_to_xyz",
    "xyz_to_srgb", "srgb_to_xyz", "srgb_to_coeffs", "eval_coeffs", "sample_rgb_spectrum",
    "pdf_rgb_spectrum",
]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
CIE_FILE = DATA_DIR / "cie.npz"
TABLE_FILE = DATA_DIR / "srgb_spectrum.npz"

CIE_MIN: float = 360.0
CIE_MAX: float = 830.0

with np.load(CIE_FILE) as _f:
    CIE_WAVELENGTHS: np.ndarray = _f["wavelengths"].astype(np.float64)   # (95,) 360, 365, ..., 830
    _CIE_XYZ: np.ndarray = _f["xyz"].astype(np.float64)                  # (95, 3) x-bar, y-bar, z-bar
    _D65_RAW: np.ndarray = _f["d65"].astype(np.float64)                  # (95,) CIE D65, 100 at 560 nm
for _a in (CIE_WAVELENGTHS, _CIE_XYZ, _D65_RAW):
    _a.flags.writeable = False


def trapezoid_weights(wavelengths: np.ndarray) -> np.ndarray:
    """Trapezoid-rule weights w with ∫ f dλ ≈ Σ w f(λ) over sorted ``wavelengths`` (N,).

    Example: ``trapezoid_weights(np.array([360., 365., 370.]))`` -> ``[2.5, 5., 2.5]``.
    """
    lam = np.asarray(wavelengths, dtype=np.float64)
    d = np.diff(lam)
    w = np.zeros_like(lam)
    w[:-1] += 0.5 * d
    w[1:] += 0.5 * d
    return w


_W_CIE = trapezoid_weights(CIE_WAVELENGTHS)
_Y_INTEGRAL = float(_W_CIE @ _CIE_XYZ[:, 1])           # ∫ y-bar dλ on the table, trapezoid rule
Y_NORMALIZATION: float = 1.0 / _Y_INTEGRAL
# Scale of the raw CIE D65 table (100 at 560 nm) that gives it unit luminance.
D65_NORMALIZATION: float = _Y_INTEGRAL / float(_W_CIE @ (_D65_RAW * _CIE_XYZ[:, 1]))

# Mitsuba's matrices (Rec. 709 primaries, D65 white).
XYZ_TO_SRGB = np.array([[3.240479, -1.537150, -0.498535],
                        [-0.969256, 1.875991, 0.041556],
                        [0.055648, -0.204043, 1.057311]])
SRGB_TO_XYZ = np.array([[0.412453, 0.357580, 0.180423],
                        [0.212671, 0.715160, 0.072169],
                        [0.019334, 0.119193, 0.950227]])
XYZ_TO_SRGB.flags.writeable = False
SRGB_TO_XYZ.flags.writeable = False


def cie_xyz(wavelengths: np.ndarray | float) -> np.ndarray:
    """CIE 1931 2-degree x-bar, y-bar, z-bar at ``wavelengths`` (nm): (..., 3), 0 outside [360, 830].

    Example: ``cie_xyz(550.0)`` -> ``[0.43345, 0.99495, 0.00875]``.
    """
    lam = np.asarray(wavelengths, dtype=np.float64)
    return np.stack([np.interp(lam, CIE_WAVELENGTHS, _CIE_XYZ[:, k], left=0.0, right=0.0) for k in range(3)],
                    axis=-1)


def d65(wavelengths: np.ndarray | float) -> np.ndarray:
    """CIE D65 at ``wavelengths`` (nm), scaled by ``D65_NORMALIZATION`` to unit luminance; 0 outside [360, 830].

    Example: ``d65(560.0)`` -> ``100 * D65_NORMALIZATION`` (about 1.0101).
    """
    lam = np.asarray(wavelengths, dtype=np.float64)
    return np.interp(lam, CIE_WAVELENGTHS, _D65_RAW * D65_NORMALIZATION, left=0.0, right=0.0)


def spectrum_to_xyz(values: np.ndarray, wavelengths: np.ndarray) -> np.ndarray:
    """XYZ of a spectrum sampled at sorted ``wavelengths`` (N,): ``values`` (..., N) -> (..., 3).

    Y_NORMALIZATION times the trapezoid-rule integral of values times the CIE
    functions over the given wavelengths, so that on ``CIE_WAVELENGTHS`` a unit
    spectrum has Y = 1 exactly. (Mitsuba's Monte-Carlo ``spectrum_to_xyz`` is
    instead the mean over sampled wavelengths of cmf(λ) times a value that
    already carries the 1/pdf weight.)
    Example: ``spectrum_to_xyz(np.ones(95), CIE_WAVELENGTHS)[1]`` -> ``1.0``.
    """
    lam = np.asarray(wavelengths, dtype=np.float64)
    k = cie_xyz(lam) * trapezoid_weights(lam)[:, None] * Y_NORMALIZATION     # (N, 3)
    return np.asarray(values, dtype=np.float64) @ k


def xyz_to_srgb(xyz: np.ndarray) -> np.ndarray:
    """CIE XYZ (..., 3) -> linear sRGB (..., 3) with Mitsuba's matrix.

    Example: ``xyz_to_srgb(srgb_to_xyz(np.array([0.2, 0.5, 0.7])))`` ≈ ``[0.2, 0.5, 0.7]``.
    """
    return np.asarray(xyz, dtype=np.float64) @ XYZ_TO_SRGB.T


def srgb_to_xyz(rgb: np.ndarray) -> np.ndarray:
    """Linear sRGB (..., 3) -> CIE XYZ (..., 3) with Mitsuba's matrix.

    Example: ``srgb_to_xyz(np.ones(3))`` -> ``[0.950456, 1.0, 1.088754]``.
    """
    return np.asarray(rgb, dtype=np.float64) @ SRGB_TO_XYZ.T


@lru_cache(maxsize=1)
def _table() -> tuple[np.ndarray, np.ndarray]:
    with np.load(TABLE_FILE) as f:
        scale = f["scale"].astype(np.float64)
        coeffs = f["coeffs"].astype(np.float64)
    return scale, coeffs


def srgb_to_coeffs(rgb: np.ndarray) -> np.ndarray:
    """Sigmoid-polynomial coefficients (..., 3) (nm convention, float64) of linear-sRGB reflectances (..., 3).

    Trilinear lookup in the Jakob-Hanika table ``coeffs[i, z, y, x]``: i is the
    index of the largest component (the later index wins ties), z = rgb[i] on
    the table's nonlinear ``scale`` grid (found by binary search), x and y =
    rgb[(i+1)%3] / z and rgb[(i+2)%3] / z on a uniform grid. For reflectances
    only: z is clamped to [0, 1] and x, y to [0, 1] (scale brighter colours
    down, and the spectra up, before using this for emission). Black
    (max <= 0) gives (0, 0, -inf), which evaluates to 0; white or brighter grey
    (all equal and >= 1) gives (0, 0, +inf), which evaluates to 1.
    Example: ``eval_coeffs(srgb_to_coeffs([0.2, 0.5, 0.7]), 550.0)`` -> about 0.48.
    """
    scale, table = _table()
    res = scale.shape[0]
    rgb = np.asarray(rgb, dtype=np.float64)
    i = 2 - np.argmax(rgb[..., ::-1], axis=-1)                      # last index of the largest component
    z = np.take_along_axis(rgb, i[..., None], axis=-1)[..., 0]
    o1 = np.take_along_axis(rgb, ((i + 1) % 3)[..., None], axis=-1)[..., 0]
    o2 = np.take_along_axis(rgb, ((i + 2) % 3)[..., None], axis=-1)[..., 0]
    black = z <= 0.0
    white = (z >= 1.0) & (o1 == z) & (o2 == z)
    safe_z = np.where(black, 1.0, z)
    x = np.clip(o1 / safe_z, 0.0, 1.0) * (res - 1)
    y = np.clip(o2 / safe_z, 0.0, 1.0) * (res - 1)
    zc = np.clip(z, 0.0, 1.0)
    xi = np.minimum(x.astype(np.int64), res - 2)
    yi = np.minimum(y.astype(np.int64), res - 2)
    zi = np.clip(np.searchsorted(scale, zc, side="right") - 1, 0, res - 2)
    tx = (x - xi)[..., None]
    ty = (y - yi)[..., None]
    tz = ((zc - scale[zi]) / (scale[zi + 1] - scale[zi]))[..., None]

    def at(dz: int, dy: int, dx: int) -> np.ndarray:
        return table[i, zi + dz, yi + dy, xi + dx]

    c = ((1 - tz) * ((1 - ty) * ((1 - tx) * at(0, 0, 0) + tx * at(0, 0, 1))
                     + ty * ((1 - tx) * at(0, 1, 0) + tx * at(0, 1, 1)))
         + tz * ((1 - ty) * ((1 - tx) * at(1, 0, 0) + tx * at(1, 0, 1))
                 + ty * ((1 - tx) * at(1, 1, 0) + tx * at(1, 1, 1))))
    special = np.zeros_like(c)
    special[..., 2] = np.where(black, -np.inf, np.inf)
    return np.where((black | white)[..., None], special, c)


def eval_coeffs(coeffs: np.ndarray, wavelengths: np.ndarray | float) -> np.ndarray:
    """The reflectance sigmoid((c0 λ + c1) λ + c2) in [0, 1]; c2 = ±inf gives 0 or 1.

    ``coeffs`` (..., 3) and ``wavelengths`` broadcast against ``coeffs[..., 0]``
    (use ``coeffs[..., None, :]`` for a spectrum per colour on a wavelength grid).
    Example: ``eval_coeffs(np.array([0., 0., 0.]), 500.0)`` -> ``0.5``.
    """
    c = np.asarray(coeffs, dtype=np.float64)
    lam = np.asarray(wavelengths, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        v = (c[..., 0] * lam + c[..., 1]) * lam + c[..., 2]
        s = 0.5 + 0.5 * v / np.sqrt(1.0 + v * v)
    return np.where(np.isinf(v), 0.5 + 0.5 * np.sign(v), s)


# Radziszewski et al. 2009: pdf(λ) = K / cosh²(A (λ − 538)) on [CIE_MIN, CIE_MAX].
# Its CDF is (tanh(A (λ − 538)) − T_min) / (T_max − T_min), T_min/max = tanh(A (CIE_MIN/MAX − 538)),
# so K = A / (T_max − T_min) and λ(u) = 538 − atanh(T_A − T_B u) / A with T_A = −T_min, T_B = T_max − T_min.
_RGB_PDF_A = 0.0072
_RGB_PDF_CENTER = 538.0
_T_MIN = float(np.tanh(_RGB_PDF_A * (CIE_MIN - _RGB_PDF_CENTER)))
_T_MAX = float(np.tanh(_RGB_PDF_A * (CIE_MAX - _RGB_PDF_CENTER)))
_RGB_SAMPLE_A = -_T_MIN                       # 0.85691062546982...
_RGB_SAMPLE_B = _T_MAX - _T_MIN               # 1.82750197240922...
_RGB_PDF_K = _RGB_PDF_A / _RGB_SAMPLE_B       # 0.00393980422932...


def pdf_rgb_spectrum(wavelengths: np.ndarray | float) -> np.ndarray:
    """Density (1/nm) of ``sample_rgb_spectrum``: K / cosh²(0.0072 (λ − 538)) on [360, 830], else 0.

    Example: ``pdf_rgb_spectrum(538.0)`` -> about 0.0039398.
    """
    lam = np.asarray(wavelengths, dtype=np.float64)
    p = _RGB_PDF_K / np.cosh(_RGB_PDF_A * (lam - _RGB_PDF_CENTER)) ** 2
    return np.where((lam >= CIE_MIN) & (lam <= CIE_MAX), p, 0.0)


def sample_rgb_spectrum(u: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Wavelengths (nm) for uniform ``u`` in [0, 1] by inverting the CDF of ``pdf_rgb_spectrum``: (λ, 1/pdf(λ)).

    Example: ``sample_rgb_spectrum(0.0)`` -> ``(360.0, about 955.27)``.
    """
    u = np.asarray(u, dtype=np.float64)
    lam = _RGB_PDF_CENTER - np.arctanh(_RGB_SAMPLE_A - _RGB_SAMPLE_B * u) / _RGB_PDF_A
    lam = np.clip(lam, CIE_MIN, CIE_MAX)
    weight = np.cosh(_RGB_PDF_A * (lam - _RGB_PDF_CENTER)) ** 2 / _RGB_PDF_K
    return lam, weight


# ---------------------------------------------------------------------------
# Tabulated spectra: <spectrum value="400:0.1, 500:0.2"/> and .spd files
# ---------------------------------------------------------------------------
# The grid tabulated spectra are resampled onto for the kernels (1 nm).
CURVE_STEP: float = 1.0
CURVE_SAMPLES: int = int(round((CIE_MAX - CIE_MIN) / CURVE_STEP)) + 1
CURVE_WAVELENGTHS: np.ndarray = np.linspace(CIE_MIN, CIE_MAX, CURVE_SAMPLES)


def read_spd(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(wavelengths, values) of an ASCII spectral power distribution file:
    one "wavelength value" pair per line, ``#`` starts a comment (Mitsuba's
    ``.spd``). Raises ValueError for a malformed file.

    Example: ``read_spd("Au.eta.spd")`` -> ``(array([298.7570554, ...]), array([1.795, ...]))``.
    """
    wl, vals = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                if len(parts) != 2:
                    raise ValueError
                wl.append(float(parts[0]))
                vals.append(float(parts[1]))
            except ValueError:
                raise ValueError(f"{path}:{n}: expected 'wavelength value', got {line!r}") from None
    return check_list(np.array(wl), np.array(vals), path)


def check_list(wavelengths, values, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(wavelengths, values)`` as float64 arrays if they make a spectrum
    (as many of each, at least one, finite, wavelengths increasing), else
    ValueError naming ``where``."""
    wl, v = np.asarray(wavelengths, np.float64).reshape(-1), np.asarray(values, np.float64).reshape(-1)
    if wl.size == 0 or wl.size != v.size:
        raise ValueError(f"{where}: a spectrum needs as many wavelengths as values, at least one")
    if not (np.all(np.isfinite(wl)) and np.all(np.isfinite(v))):
        raise ValueError(f"{where}: a spectrum's wavelengths and values must be finite")
    if np.any(np.diff(wl) <= 0):
        raise ValueError(f"{where}: a spectrum's wavelengths must increase")
    return wl, v


def resample(wavelengths: np.ndarray, values: np.ndarray, grid: np.ndarray = CURVE_WAVELENGTHS) -> np.ndarray:
    """A tabulated spectrum at ``grid``: linear between its samples, 0
    outside them (Mitsuba's irregular spectrum). One sample: that value at
    its wavelength only, so 0 on any grid that misses it.

    Example: ``resample(np.array([400., 500.]), np.array([0., 1.]), np.array([450.]))`` -> ``[0.5]``.
    """
    return np.interp(grid, wavelengths, values, left=0.0, right=0.0) if len(wavelengths) > 1 else \
        np.where(grid == wavelengths[0], values[0], 0.0)


def spectrum_list_to_srgb(wavelengths: np.ndarray, values: np.ndarray, bounded: bool, d65_weighted: bool
                          ) -> np.ndarray:
    """Linear sRGB of a tabulated spectrum, as Mitsuba's RGB and mono
    variants convert one at load: its XYZ (times D65 for a reflectance,
    ``d65_weighted``), then sRGB clamped to [0, 1] (``bounded``) or to >= 0.

    Example: ``spectrum_list_to_srgb(np.array([360., 830.]), np.ones(2), True, True)`` ≈ ``[1, 1, 1]``.
    """
    grid = np.linspace(CIE_MIN, CIE_MAX, 4701)            # 0.1 nm: the tables' kinks integrate exactly enough
    v = resample(wavelengths, values, grid) * (d65(grid) if d65_weighted else 1.0)
    rgb = xyz_to_srgb(spectrum_to_xyz(v, grid))
    return np.clip(rgb, 0.0, 1.0) if bounded else np.maximum(rgb, 0.0)
