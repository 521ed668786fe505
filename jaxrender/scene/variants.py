"""Variants: the colour type a scene is loaded and rendered in (Mitsuba's
``set_variant``), and how each stores a colour given in a scene.

* ``rgb`` (default): colours are linear sRGB triples.
* ``mono``: one channel; a colour is stored as its luminance (Rec. 709
  weights), an array of one value, and the film writes luminance.
* ``spectral``: four wavelengths per path. A reflectance is stored as the
  three coefficients of its sigmoid-polynomial spectrum (Jakob & Hanika
  2019, ``spectra.py``), as Mitsuba exposes ``<id>.reflectance.value``; an
  emitter's RGB radiance as (coefficients of rgb / s, s, 1), s = 2 max(rgb),
  the spectrum then multiplied by D65 (Mitsuba's ``d65`` spectrum); a
  uniform ``<spectrum value=v>`` radiance as (0, 0, +big, v, 0), constant
  over wavelengths. The film receives linear sRGB, as Mitsuba's.

A scene remembers the variant it was loaded in; ``render`` uses it.

Example::

    jaxrender.set_variant("mono")
    scene = jaxrender.load_dict(jaxrender.cornell_box())   # loaded as mono
    scene.params["red.reflectance.value"]                  # array([0.15...])
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Mapping

import numpy as np

from ..kernels.spectrum import BY_NAME, CURVE_SAMPLES, TABULATED
from .errors import SceneError

# ("mono", "rgb", "spectral", "mono_polarized", "spectral_polarized"): the kernels' colour types
VARIANTS = tuple(BY_NAME)
# Mitsuba's names jaxrender knows but does not implement.
NOT_YET = {"rgb_polarized": "Mitsuba has no rgb_polarized variant either (polarized variants: mono_polarized, "
                            "spectral_polarized)"}
# Rec. 709 luminance weights (Mitsuba's luminance()).
LUMINANCE = np.array([0.212671, 0.715160, 0.072169])
# What a sigmoid coefficient of +-infinity is stored as (exactly 0 or 1 in float32).
BIG = 1e18


_selected = ["rgb"]
_loading: contextvars.ContextVar = contextvars.ContextVar("jaxrender_variant", default=None)


class Load:
    """What a load in progress collects besides parameters: its variant and
    (spectral) the tabulated spectra its colours refer to, each resampled on
    ``spectra.CURVE_WAVELENGTHS``."""

    def __init__(self, name: str):
        self.name = name
        self.curves: list[np.ndarray] = []
        self.dispersive = False       # some IOR is a curve (kernels' Structure.dispersion)

    def curve(self, values: np.ndarray) -> int:
        """The index of tabulated spectrum ``values`` (shared when equal)."""
        for i, c in enumerate(self.curves):
            if np.array_equal(c, values):
                return i
        self.curves.append(values)
        return len(self.curves) - 1

    def curve_table(self) -> np.ndarray:
        """(curves, CURVE_SAMPLES) float32: the ``spectral_curves`` kernel input."""
        return (np.stack(self.curves) if self.curves else np.zeros((0, CURVE_SAMPLES))).astype(np.float32)


def check(name: Any) -> str:
    """``name`` if it is a variant jaxrender renders, else a SceneError."""
    if name in VARIANTS:
        return name
    if name in NOT_YET:
        raise SceneError(f"variant {name!r}: {NOT_YET[name]}")
    prefix = next((p for p in ("scalar_", "llvm_ad_", "cuda_ad_", "llvm_", "cuda_") if str(name).startswith(p)), None)
    if prefix is not None:
        hint = f" (jaxrender picks the backend itself; use {str(name)[len(prefix):]!r})"
    else:
        hint = ""
    raise SceneError(f"unknown variant {name!r}{hint}: one of {', '.join(VARIANTS)}")


def set_variant(name: str) -> None:
    """Select the variant later loads use, as ``mitsuba.set_variant``.

    Example: ``jaxrender.set_variant("spectral")``."""
    _selected[0] = check(name)


def variants() -> list[str]:
    """The variants jaxrender renders, as ``mitsuba.variants()``."""
    return list(VARIANTS)


def variant() -> str:
    """The variant selected by :func:`set_variant` (``"rgb"`` unless set)."""
    return _selected[0]


@contextlib.contextmanager
def loading(name: str | None):
    """Load a scene in variant ``name`` (None: the selected one)."""
    token = _loading.set(Load(check(variant() if name is None else name)))
    try:
        yield _loading.get()
    finally:
        _loading.reset(token)


def current() -> str:
    """How the scene being loaded stores colours (the selected variant's,
    outside a load): its variant without polarization ("rgb", "mono" or
    "spectral"), which only changes what a path carries, not its colours."""
    load = _loading.get()
    return color_base(variant() if load is None else load.name)


def loading_name() -> str:
    """The full variant name of the scene being loaded (the selected one outside a load)."""
    load = _loading.get()
    return variant() if load is None else load.name


def color_base(name: str) -> str:
    """Variant ``name`` without polarization: ``color_base("spectral_polarized") == "spectral"``."""
    return name.removesuffix("_polarized")


def _tabulated(value: Any, where: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(wavelengths, values) of a tabulated ``spectrum`` (a wavelength:value
    list or an .spd file), None for any other value."""
    if not (isinstance(value, Mapping) and value.get("type") == "spectrum"):
        return None
    from . import spectra
    try:
        if "filename" in value:
            if set(value) - {"type", "filename"}:
                raise ValueError(f"{where}: a spectrum file takes no other property")
            return spectra.read_spd(value["filename"])
        v = value.get("value")
        if isinstance(v, (list, tuple)) and v and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in v):
            return spectra.check_list([p[0] for p in v], [p[1] for p in v], where)
    except OSError as exc:
        raise SceneError(f"{where}: cannot read the spectrum file: {exc}") from None
    except ValueError as exc:
        raise SceneError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    return None


def tabulated(value: Any, where: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(wavelengths, values) of ``value`` if it is a tabulated ``spectrum``
    (a wavelength:value list or an .spd file), else None."""
    return _tabulated(value, where)


def encode_dispersive_ior(int_ior: Any, ext_ior: Any, where: str) -> float:
    """How the spectral variant stores a relative IOR int_ior / ext_ior of
    which at least one side is a tabulated spectrum (dispersion; the other
    side a float, ``(wavelengths, values)`` pairs for curves): a curve of
    the ratio on the 1 nm grid (ends extended), stored as -(index + 1) of
    ``spectral_curves``. Other variants raise: Mitsuba's dielectrics take a
    float IOR only, and a colour variant has no wavelength to evaluate one at."""
    from . import spectra
    name = current()
    if name != "spectral":
        raise SceneError(f"{where}: an index of refraction given as a spectrum (dispersion) needs the spectral "
                         f"variant; in {name}, give a float or a material name")

    def on_grid(side):
        if isinstance(side, tuple):
            return np.interp(spectra.CURVE_WAVELENGTHS, *side)
        return np.full(len(spectra.CURVE_WAVELENGTHS), float(side))

    ratio = on_grid(int_ior) / on_grid(ext_ior)
    if not np.all(np.isfinite(ratio)) or np.any(ratio <= 0):
        raise SceneError(f"{where}: an index of refraction must be positive and finite at every wavelength")
    load = _loading.get()
    load.dispersive = True
    return -(load.curve(ratio) + 1.0)


def uniform_value(value: Any) -> float | None:
    """The value of a uniform ``spectrum`` (None for anything else)."""
    if isinstance(value, Mapping) and value.get("type") == "spectrum":
        v = value.get("value")
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            return float(v)
    return None


def encode_color(value: Any, where: str, illuminant: bool = False, parse=None, rgb: np.ndarray | None = None
                 ) -> np.ndarray:
    """How the current variant stores a colour given as ``value``: parsed
    by ``parse(value, where)`` (``properties.parse_rgb``) to its RGB meaning,
    or given as that meaning ``rgb``; a tabulated spectrum (wavelength:value
    pairs, an .spd file) as Mitsuba's variants take it: integrated to RGB
    (times D65 unless ``illuminant``) in rgb and mono, a curve in spectral."""
    from . import spectra
    name = current()
    listed = _tabulated(value, where)
    if listed is not None:
        if name == "spectral":
            index = _loading.get().curve(spectra.resample(*listed))
            stored = np.array([TABULATED, float(index), 1.0])
            return np.concatenate([stored, [1.0, 0.0]]) if illuminant else stored
        rgb = spectra.spectrum_list_to_srgb(*listed, bounded=not illuminant, d65_weighted=not illuminant)
    elif rgb is None:
        rgb = parse(value, where)
    if name == "rgb":
        return rgb
    if name == "mono":
        return np.array([float(LUMINANCE @ rgb)])
    uniform = uniform_value(value)
    if illuminant:
        if uniform is not None:
            return np.array([0.0, 0.0, BIG, uniform, 0.0])
        if np.any(rgb < 0):
            raise SceneError(f"{where}: a negative radiance {rgb.tolist()} has no spectrum")
        scale = 2.0 * float(rgb.max())
        if scale == 0.0:
            return np.array([0.0, 0.0, -BIG, 0.0, 1.0])
        return np.concatenate([_finite(spectra.srgb_to_coeffs(rgb / scale)), [scale, 1.0]])
    if uniform is None and not isinstance(value, Mapping) and np.ndim(value) == 0:
        uniform = float(rgb[0])      # a plain float: Mitsuba's uniform spectrum
    if uniform is not None:
        if uniform > 1.0:
            # beyond a reflectance spectrum (a conductor's eta, say): Mitsuba's
            # uniform spectrum, stored as a flat tabulated curve times the value
            index = _loading.get().curve(np.ones(CURVE_SAMPLES))
            return np.array([TABULATED, float(index), uniform])
        if uniform < 0.0:
            raise SceneError(f"{where}: a negative value {uniform} has no spectrum")
        return uniform_coeffs(np.array([uniform]))[0]
    if np.any(rgb < 0) or np.any(rgb > 1):
        # (Mitsuba's spectral variant fetches coefficients for such a colour
        # anyway, extrapolating its table: a reflectance in [0, 1] that is
        # not the colour; give a float or a spectrum instead)
        raise SceneError(f"{where}: the spectral variant stores RGB colours as reflectance spectra, in [0, 1]; "
                         f"got {rgb.tolist()} (unbounded RGB spectra are not supported yet: give a float, or a "
                         "wavelength:value spectrum)")
    return reflectance_coeffs(rgb)


def illuminant_texels(rgb: np.ndarray) -> np.ndarray:
    """(spectral) An RGB radiance image (H, W, 3) as Mitsuba's spectral
    envmap stores it: per texel the coefficients of rgb / s and s = 2 max(rgb),
    (H, W, 4) float32."""
    flat = np.maximum(np.asarray(rgb, np.float64).reshape(-1, 3), 0.0)
    scale = 2.0 * flat.max(axis=1)
    coeffs = reflectance_coeffs(flat / np.maximum(scale, 1e-8)[:, None])
    return np.concatenate([coeffs, scale[:, None]], axis=1).reshape(rgb.shape[:2] + (4,)).astype(np.float32)


def texel_luminance(data, xp=np):
    """Luminance of envmap texels (..., C): Rec. 709 of RGB (C = 3), or of
    spectral (coefficients, scale) texels (C = 4) the mean of the upsampled
    colour over 16 wavelengths times the scale (Mitsuba's, for sampling)."""
    f32 = np.float32
    if data.shape[-1] == 3:
        return data @ LUMINANCE.astype(f32)
    lam = np.linspace(360.0, 830.0, 16).astype(f32)
    c = [data[..., k:k + 1] for k in range(3)]
    v = (c[0] * lam + c[1]) * lam + c[2]
    s = f32(0.5) + f32(0.5) * v / xp.sqrt(f32(1.0) + v * v)
    return xp.mean(s, axis=-1) * data[..., 3]


def mono_or_rgb(rgb: np.ndarray) -> np.ndarray:
    """RGB values (..., 3) as the variant being loaded stores them where
    only rgb and mono are allowed (media): luminance (..., 1) in mono."""
    if current() != "mono":
        return rgb
    return (np.asarray(rgb) @ LUMINANCE.astype(np.asarray(rgb).dtype))[..., None]


def reflectance_coeffs(rgb: np.ndarray) -> np.ndarray:
    """Stored spectral colours (n, 3) of RGB reflectances (n, 3) in [0, 1]."""
    from . import spectra
    return _finite(spectra.srgb_to_coeffs(rgb))


def uniform_coeffs(values: np.ndarray) -> np.ndarray:
    """Stored spectral colours (n, 3) of constant spectra ``values`` (n,) in [0, 1]."""
    y = 2.0 * np.asarray(values, np.float64) - 1.0
    with np.errstate(divide="ignore"):
        c2 = np.where(np.abs(y) >= 1.0, np.copysign(BIG, y), y / np.sqrt(np.maximum(1.0 - y * y, 0.0)))
    return np.stack([np.zeros_like(c2), np.zeros_like(c2), c2], axis=-1)


def _finite(c: np.ndarray) -> np.ndarray:
    c = np.array(c, np.float64)
    c[~np.isfinite(c)] = np.copysign(BIG, c[~np.isfinite(c)])
    return c


@functools.cache
def spectral_tables() -> np.ndarray:
    """The ``spectral_data`` kernel input (``kernels/spectrum.py``): per 5 nm
    from 360 to 830 nm, the CIE 1931 colour matching functions turned into
    linear sRGB and scaled so that a unit spectrum has luminance 1, D65
    scaled to unit luminance, and y-bar. (95, 5) float32."""
    from . import spectra
    lam = np.linspace(360.0, 830.0, 95)
    xyz = spectra.cie_xyz(lam)
    rgb = spectra.xyz_to_srgb(xyz) * spectra.Y_NORMALIZATION
    ybar = xyz[:, 1:2]
    table = np.concatenate([rgb, spectra.d65(lam)[:, None], ybar], axis=1).astype(np.float32)
    table.flags.writeable = False
    return table


def spectral_why(scene) -> str | None:
    """What of ``scene`` the spectral variant cannot render yet, or None."""
    if scene.sunsky is not None:
        return "the sunsky emitter"
    return None


def refuse(where: str, what: str, in_variants: tuple = ("mono", "spectral")) -> None:
    """A SceneError when the scene being loaded is in one of ``in_variants``:
    ``what`` (at ``where``) is not implemented in it yet."""
    name = current()
    if name in in_variants:
        raise SceneError(f"{where}: {what} in the {name} variant is not supported yet (rgb only)")
