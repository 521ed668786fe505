"""Dispersion: a dielectric whose index of refraction is a tabulated
spectrum (spectral variants only; Mitsuba 3.9.1 has no dispersive
dielectric, so the checks are closed forms).

A camera looks straight down at a large dispersive interface under a
uniform white sky: what it sees is, per wavelength, the sky reflected with
F(n) = ((n - 1) / (n + 1))^2 plus the sky below refracted with (1 - F) /
n^2 (Mitsuba's radiance scaling), through the film's colour matching. The
refracted part is only right if a path keeps the one wavelength whose
direction it followed (with the others' it would use the first
wavelength's n for all four).
"""
from __future__ import annotations

import numpy as np
import pytest

import jaxrender
from jaxrender import SceneError
from jaxrender.scene import variants
from jaxrender.scene.transform import Transform as T

WAVELENGTHS = np.linspace(360.0, 830.0, 48)


def n_of(lam):
    """A strongly dispersive glass: 2.5 at 360 nm down to 1.3 at 830 nm."""
    return 1.3 + 1.2 * ((830.0 - lam) / 470.0) ** 2


CURVE = {"type": "spectrum", "value": [(float(w), float(n_of(w))) for w in WAVELENGTHS]}


def slab(int_ior, bsdf="dielectric", integrator="path") -> dict:
    return {"type": "scene", "integrator": {"type": integrator, "max_depth": 3},
            "sensor": {"type": "perspective", "fov": 1.0,
                       "to_world": T().look_at(origin=[0, 0, 5], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": 4, "height": 4, "rfilter": {"type": "box"}}},
            "sky": {"type": "constant", "radiance": {"type": "spectrum", "value": 1.0}},
            "slab": {"type": "rectangle", "to_world": T().scale(10), "bsdf": {"type": bsdf, "int_ior": int_ior}}}


def in_fog(d: dict) -> dict:
    """``d`` with its sensor in a thin homogeneous medium."""
    d["sensor"]["medium"] = {"type": "homogeneous", "sigma_t": 0.01}
    return d


def expected_rgb(n_at) -> np.ndarray:
    """The film's RGB of the spectrum F(n) + (1 - F(n)) / n^2 (normal incidence)."""
    tables = variants.spectral_tables()          # every 5 nm: the film's r, g, b weights, ...
    lam = np.linspace(360.0, 830.0, len(tables))
    n = n_at(lam)
    f = ((n - 1) / (n + 1)) ** 2
    return np.trapezoid(tables[:, :3] * (f + (1 - f) / n ** 2)[:, None], lam, axis=0)


@pytest.mark.parametrize("variant, integrator", [("spectral", "path"), ("spectral_polarized", "path"),
                                                 ("spectral", "volpath")])
def test_dispersive_interface_matches_the_closed_form(variant, integrator):
    # (volpath without media renders with the path tracer's kernels)
    scene = jaxrender.load_dict(slab(CURVE, integrator=integrator), variant=variant)
    assert scene.structure.dispersion
    renders = np.stack([np.asarray(jaxrender.render(scene, spp=512, seed=k), np.float64).mean((0, 1))
                        for k in range(8)])
    mean, se = renders.mean(0), renders.std(0, ddof=1) / np.sqrt(len(renders))
    want = expected_rgb(n_of)
    assert np.all(np.abs(mean - want) < 4 * se + 2e-3), (mean, want, se)
    # the control: the same glass without dispersion (n at 550 nm) is visibly another colour
    flat = expected_rgb(lambda lam: np.full_like(lam, n_of(550.0)))
    assert np.max(np.abs(flat - want)) > 0.02


def test_dispersive_ior_parameter_is_a_frozen_curve_reference():
    scene = jaxrender.load_dict(slab(CURVE), variant="spectral")
    assert scene.params["slab.bsdf.eta"] == -1.0         # -(index + 1) of the scene's curves
    air = 1.000277       # (the default ext_ior: the curve is the relative IOR)
    np.testing.assert_allclose(scene.spectral_curves[0][[0, -1]], [n_of(360.0) / air, n_of(830.0) / air], rtol=1e-5)
    with pytest.raises(SceneError, match="refers to its curve"):
        jaxrender.render(scene, {"slab.bsdf.eta": np.float32(1.5)}, spp=1)
    # a float IOR keeps its plain value and the kernels without dispersion
    plain = jaxrender.load_dict(slab(1.5), variant="spectral")
    assert not plain.structure.dispersion and plain.params["slab.bsdf.eta"] == pytest.approx(1.5 / 1.000277)


@pytest.mark.parametrize("edit, variant, says", [
    (lambda: slab(CURVE), "rgb", "needs the spectral variant"),
    (lambda: slab(CURVE), "mono_polarized", "needs the spectral variant"),
    (lambda: slab(CURVE, bsdf="thindielectric"), "spectral", "supported by dielectric only"),
    (lambda: slab(CURVE, bsdf="roughdielectric"), "spectral", "supported by dielectric only"),
    (lambda: in_fog(slab(CURVE, integrator="volpath")), "spectral", "volpath does not yet"),
    (lambda: slab({"type": "spectrum", "value": [(400.0, 1.5), (700.0, -0.5)]}), "spectral", "positive"),
])
def test_what_dispersion_does_not_do_is_an_error(edit, variant, says):
    with pytest.raises(SceneError, match=says):
        jaxrender.render(jaxrender.load_dict(edit(), variant=variant), spp=1)
