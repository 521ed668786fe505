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
from typing import Any, Mapping

import numpy as np

from .errors import SceneError

VARIANTS = ("mono", "rgb", "spectral")
# Mitsuba's names jaxrender knows but does not implement.
NOT_YET = {"spectral_polarized": "polarized rendering (Stokes vectors, Mueller matrices) is not implemented yet",
           "mono_polarized": "polarized rendering (Stokes vectors, Mueller matrices) is not implemented yet"}
# Rec. 709 luminance weights (Mitsuba's luminance()).
LUMINANCE = np.array([0.212671, 0.715160, 0.072169])
# What a sigmoid coefficient of +-infinity is stored as (exactly 0 or 1 in float32).
BIG = 1e18

_selected = ["rgb"]
_loading: contextvars.ContextVar = contextvars.ContextVar("jaxrender_variant", default=None)


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
    token = _loading.set(check(variant() if name is None else name))
    try:
        yield _loading.get()
    finally:
        _loading.reset(token)


def current() -> str:
    """The variant of the scene being loaded (the selected one outside a load)."""
    return _loading.get() or variant()


def _uniform(value: Any) -> float | None:
    """The value of a uniform ``spectrum`` (None for anything else)."""
    if isinstance(value, Mapping) and value.get("type") == "spectrum":
        v = value.get("value")
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            return float(v)
    return None


def encode_color(value: Any, rgb: np.ndarray, where: str, illuminant: bool = False) -> np.ndarray:
    """How the current variant stores a colour given as ``value`` whose
    RGB-variant meaning is ``rgb`` (``properties.parse_rgb``)."""
    name = current()
    if name == "rgb":
        return rgb
    if name == "mono":
        return np.array([float(LUMINANCE @ rgb)])
    from . import spectra
    uniform = _uniform(value)
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
        if not 0.0 <= uniform <= 1.0:
            raise SceneError(f"{where}: the spectral variant stores colours as reflectance spectra in [0, 1]; "
                             f"{uniform} is outside (unbounded spectra are not supported yet)")
        return np.array([0.0, 0.0, _inverse_sigmoid(uniform)])
    if np.any(rgb < 0) or np.any(rgb > 1):
        raise SceneError(f"{where}: the spectral variant stores colours as reflectance spectra, RGB in [0, 1]; "
                         f"got {rgb.tolist()} (unbounded spectra are not supported yet)")
    return _finite(spectra.srgb_to_coeffs(rgb))


def _inverse_sigmoid(v: float) -> float:
    """c with 1/2 + c / (2 sqrt(1 + c^2)) = v."""
    y = 2.0 * v - 1.0
    if abs(y) >= 1.0:
        return float(np.copysign(BIG, y))
    return y / np.sqrt(1.0 - y * y)


def _finite(c: np.ndarray) -> np.ndarray:
    c = np.array(c, np.float64)
    c[~np.isfinite(c)] = np.copysign(BIG, c[~np.isfinite(c)])
    return c


def emitter_width(name: str) -> int:
    """Floats of an emitter's radiance row in variant ``name``."""
    return {"rgb": 3, "mono": 1, "spectral": 5}[name]


def spectral_tables() -> np.ndarray:
    """The ``spectral_data`` kernel input (``kernels/spectrum.py``): per 5 nm
    from 360 to 830 nm, the CIE 1931 colour matching functions turned into
    linear sRGB and scaled so that a unit spectrum has luminance 1, D65
    scaled to unit luminance, and y-bar. (95, 5) float32."""
    if _TABLES:
        return _TABLES[0]
    from . import spectra
    lam = np.linspace(360.0, 830.0, 95)
    rgb = spectra.xyz_to_srgb(spectra.cie_xyz(lam)) * spectra.Y_NORMALIZATION
    ybar = spectra.cie_xyz(lam)[:, 1:2]
    table = np.concatenate([rgb, spectra.d65(lam)[:, None], ybar], axis=1).astype(np.float32)
    _TABLES.append(table)
    return table


_TABLES: list = []


def spectral_why(scene) -> str | None:
    """What of ``scene`` the spectral variant cannot render yet, or None."""
    if scene.media:
        return "participating media (their coefficients are unbounded spectra)"
    if scene.textures:
        return "textures (bitmap, checkerboard, envmap and texture plugins)"
    if scene.sunsky is not None:
        return "the sunsky emitter"
    return None


def refuse(where: str, what: str, in_variants: tuple = ("mono", "spectral")) -> None:
    """A SceneError when the scene being loaded is in one of ``in_variants``:
    ``what`` (at ``where``) is not implemented in it yet."""
    name = current()
    if name in in_variants:
        raise SceneError(f"{where}: {what} in the {name} variant is not supported yet (rgb only)")
