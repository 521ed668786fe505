"""Named conductor presets: the ``material`` parameter of Mitsuba's
``conductor`` and ``roughconductor`` plugins as an RGB complex index of
refraction ``eta + i k``.

    >>> from jaxrender.scene.conductors import complex_ior
    >>> eta, k = complex_ior("Au")
    >>> eta.round(3), k.round(3)
    (array([0.143, 0.375, 1.442]), array([3.983, 2.386, 1.603]))

The result goes straight into the kernels' ``ConductorParams(eta, k,
specular_reflectance)`` / ``RoughConductorParams``.

Where the numbers come from: Mitsuba 3 ships measured optical constants
(refractive index n and extinction coefficient k against wavelength) for a
few dozen metals and other solids, the same set PBRT distributes. They were
collected in the Luxpop database and rest mostly on Palik's Handbook of
Optical Constants of Solids and on the atomic scattering factors tabulated
by the Center for X-Ray Optics (LBNL) and LLNL. A material listed as both
``X`` and ``X_palik`` has two data sets from different measurements (some
pairs are in fact the same file). Mitsuba's RGB variants integrate each
spectrum to a linear sRGB colour when the BSDF is loaded, clamping negative
(out-of-gamut) components to 0. We do not
reimplement that conversion: ``tools/make_conductor_presets.py`` loads every
preset in Mitsuba 3.9.1 (``scalar_rgb``) and records the eta and k it
reports, in ``conductor_data.py``, so these values are Mitsuba's to the last
float32 bit (its ``llvm_ad_rgb`` variant reports the same).

Points worth knowing:

* ``"none"`` (Mitsuba's default) is not measured data: eta = 0, k = 1, for
  which the conductor Fresnel term is exactly 1, a perfect mirror.
* Names are case-sensitive (``"Au"``, not ``"au"``), as in Mitsuba, which
  looks them up as file names.
* ``Se-e``, ``Te-e``, ``TiO2-e`` (and their ``_palik`` forms) are the
  extraordinary-ray constants of those birefringent crystals. Mitsuba loads
  them although its documentation's preset table leaves them out.
* Several presets are dielectrics or semiconductors, not metals: for some
  the RGB k is 0 (e.g. ``CsI``, ``d-C``) and for ``AlSb`` even the red eta is
  0 after Mitsuba's clamping; they still only reflect. With eta = k = 0 the
  conductor Fresnel term is 0 / 0 at normal incidence: AlSb's red channel is
  NaN there, in Mitsuba and in jaxrender's kernels alike.
* Most ``X`` / ``X_palik`` pairs give identical RGB values; ``Cu`` and
  ``Cu_palik`` differ slightly.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import numpy as np

from .conductor_data import COMPLEX_IOR, MITSUBA_VERSION

# Every name Mitsuba accepts for ``material``, "none" first.
MATERIALS: tuple[str, ...] = tuple(COMPLEX_IOR)


def complex_ior(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(eta, k)`` of the preset ``name``: two new float64 arrays of shape
    (3,), linear sRGB, exactly as Mitsuba's RGB variants use them.

    Raises ``KeyError`` for a name Mitsuba does not know, suggesting the
    closest known names.
    """
    try:
        eta, k = COMPLEX_IOR[name]
    except (KeyError, TypeError):
        raise KeyError(_unknown_message(name)) from None
    return np.array(eta, np.float64), np.array(k, np.float64)


def measured_ior(name: str, part: str) -> tuple[np.ndarray, np.ndarray]:
    """(wavelengths in nm, values) of the measured ``part`` ("eta" or "k")
    of preset ``name`` (not "none"), what the spectral variant renders:
    Mitsuba's data/ior spectra (``data/conductor_spectra.npz``, made by
    ``tools/make_conductor_spectra.py``; sources in
    ``data/conductor_spectra_SOURCES.txt``)."""
    with np.load(Path(__file__).resolve().parent.parent / "data" / "conductor_spectra.npz") as f:
        return f[f"{name}.{part}.wavelengths"], f[f"{name}.{part}"]


def _unknown_message(name: object) -> str:
    # Match case-insensitively ("au" should still point at "Au"), and also
    # against each name without "_palik", so that "Ni" finds "Ni_palik".
    by_lower: dict[str, list[str]] = {}
    for m in MATERIALS:
        for key in {m.lower(), m.lower().removesuffix("_palik")}:
            by_lower.setdefault(key, []).append(m)
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=4, cutoff=0.6)
    suggestions = list(dict.fromkeys(m for key in close for m in by_lower[key]))
    hint = f"did you mean {', '.join(repr(m) for m in suggestions)}? " if suggestions else ""
    return (f"unknown conductor material {name!r}; {hint}Mitsuba {MITSUBA_VERSION} has "
            f"{len(MATERIALS)} names (see jaxrender.scene.conductors.MATERIALS)")
