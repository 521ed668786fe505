"""Mitsuba's thin principled BSDF (``kernels/bsdfs/principledthin.py``)
against Mitsuba 3.9.1's scalar_rgb plugin: eval / pdf for random direction
pairs (wi on both sides), sample() for identical random numbers, chi-square
fits of sample() vs pdf() (its exact density), the loader's keys and rules,
and a render and a gradient through the whole renderer.

Tolerances (float32 on both sides, same inputs), as the principled tests:
eval / pdf within 2e-4 relative (floor 1e-3); sampled directions within
1e-4; sampled pdf and weight within 2e-4 for 99% of samples and 1e-2 for all.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bsdf_harness import (assert_params_are_traverse, bsdf_kernel, cbox_with, check_chi2, compare_with_mitsuba,
                          glossy_pairs, mitsuba_plugin, param_row, rgb, wi_at)

import jaxrender
from jaxrender.kernels.bsdfs import principledthin
from jaxrender.kernels.bsdfs.base import ParamView
from test_film import _agree, _mitsuba_renders, _ours_renders
from test_gradients import _check_exact_fd, _loss_fn, _weights
from test_scene_parsing import to_mitsuba

mi = pytest.importorskip("mitsuba")

N_PAIRS = 1200
TOL = 2e-4
T = principledthin.TYPE

# Parameter sets, as Mitsuba properties (floats, or rgb triples for base_color).
SETS = [
    {},
    {"spec_trans": 0.8, "eta": 1.33, "roughness": 0.15, "spec_tint": 0.1, "anisotropic": 0.5,
     "diff_trans": 0.3, "base_color": (0.7, 0.1, 0.1)},
    {"spec_trans": 1.0, "eta": 1.5, "roughness": 0.4},
    {"diff_trans": 1.2, "sheen": 0.7, "sheen_tint": 0.5, "flatness": 0.6, "roughness": 0.7,
     "base_color": (0.3, 0.8, 0.4)},
    {"spec_trans": 0.4, "eta": 2.0, "roughness": 0.6, "anisotropic": 0.8, "spec_tint": 0.9, "diff_trans": 2.0,
     "base_color": (0.2, 0.5, 0.9), "diffuse_reflectance_sampling_rate": 0.5,
     "specular_reflectance_sampling_rate": 2.0, "specular_transmittance_sampling_rate": 3.0,
     "diffuse_transmittance_sampling_rate": 0.7},
    {"spec_trans": 0.5, "eta": 0.8, "roughness": 0.3, "sheen": 1.0, "flatness": 1.0, "diff_trans": 0.5},
]


def row(props: dict) -> np.ndarray:
    return param_row(T, props)


def mitsuba(props: dict):
    return mitsuba_plugin("principledthin", props)


def _make(r):
    return T.make(ParamView(T, list(r)))


def kernel():
    return bsdf_kernel(principledthin, _make, sum(p.width() for p in T.params), "principledthin")


PAIRS = glossy_pairs(N_PAIRS, 11, below=0.4, through=0.5)


@pytest.mark.parametrize("j", range(len(SETS)))
def test_principledthin_matches_mitsuba(j):
    errs = compare_with_mitsuba(kernel(), row(SETS[j]), mitsuba(SETS[j]), *PAIRS, TOL, f"set {j}")
    assert errs["valid"] > 0.5


# (set, theta of wi in degrees; above 90: wi below the sheet). Rough
# enough for the harness's quadrature of pdf() over its cells.
GLOSSY = {"spec_trans": 0.7, "eta": 1.6, "roughness": 0.6, "anisotropic": 0.3, "diff_trans": 0.6,
          "spec_tint": 0.5}
CHI2 = [(SETS[3], 50.0), (SETS[4], 120.0), (GLOSSY, 60.0), (GLOSSY, 160.0)]


@pytest.mark.parametrize("j", range(len(CHI2)))
def test_principledthin_sampling_chi2(j):
    props, theta = CHI2[j]
    check_chi2(kernel(), row(props), wi_at(theta), seed=j, label=f"set {j}")


# ------------------------------------------------------- scene side ----
def thin_cbox(size=16, spp=16, **integrator):
    large = {"type": "principledthin", "roughness": 0.35, "sheen": 0.5, "sheen_tint": 0.4, "flatness": 0.3,
             "diff_trans": 0.8, "base_color": {"type": "checkerboard", "color0": rgb([0.8, 0.3, 0.1]),
                                               "color1": rgb([0.1, 0.4, 0.8])}}
    small = {"type": "principledthin", "spec_trans": 0.7, "eta": 1.4, "roughness": 0.3, "spec_tint": 0.3,
             "anisotropic": 0.4, "base_color": rgb([0.9, 0.8, 0.5])}
    return cbox_with(large, small, size, spp, **integrator)


def test_loaded_parameters_are_mitsubas_traverse():
    """Keys and values of every principledthin parameter, as mi.traverse lists them."""
    d = thin_cbox()
    d["large-box"]["bsdf"]["eta"] = {"type": "checkerboard", "color0": 1.2, "color1": 1.7}
    # (the checkerboards' own keys are the texture tests' business)
    assert_params_are_traverse(d, lambda k: k.startswith(("large-box.bsdf.", "small-box.bsdf.")) and ".color" not in k)
    scene = jaxrender.load_dict(d)
    assert "small-box.bsdf.specular_transmittance_sampling_rate" in scene.params
    assert "principledthin" in {t.name for t in scene.bsdf_types}


@pytest.mark.parametrize("bsdf, message", [
    ({"type": "principledthin", "metallic": 0.3}, "metallic"),      # principled's, not read by principledthin
    ({"type": "principledthin", "specular": 0.5}, "specular"),
    ({"type": "twosided", "b": {"type": "principledthin"}}, "transmissive BSDF \\(principledthin\\)"),
])
def test_what_mitsuba_refuses_is_refused(bsdf, message):
    d = thin_cbox()
    d["floor"]["bsdf"] = bsdf
    with pytest.raises(Exception):
        mi.load_dict(to_mitsuba(mi, d))
    with pytest.raises(jaxrender.SceneError, match=message):
        jaxrender.load_dict(d)


def test_render_matches_mitsuba_within_noise():
    # (Russian roulette from depth 2: a thin sheet's sampled eta is 1; a
    # textured eta scales the floor's transmission roughness.)
    # The white walls are thin sheets too (what they transmit is lost).
    d = thin_cbox(size=24, rr_depth=2)
    d["white"] = {"type": "principledthin", "roughness": 0.6, "diff_trans": 0.4, "sheen": 0.3, "flatness": 0.5,
                  "base_color": rgb([0.75, 0.75, 0.7])}
    d["floor"]["bsdf"] = {"type": "principledthin", "spec_trans": 0.5, "diff_trans": 1.5, "roughness": 0.5,
                          "eta": {"type": "checkerboard", "color0": 1.1, "color1": 1.9},
                          "base_color": rgb([0.6, 0.7, 0.5])}
    _agree(_ours_renders(d, 32, 8), _mitsuba_renders(d, 32, 8, seed0=50))


def test_albedo_aov_is_mitsubas():
    """Mitsuba's eval_diffuse_reflectance: base_color (a texture on the large box)."""
    d = thin_cbox(size=16)
    d["integrator"] = {"type": "aov", "aovs": "a:albedo"}
    _agree(_ours_renders(d, 4, 4), _mitsuba_renders(d, 4, 4, seed0=50))


def test_gradients_match_finite_differences():
    # base_color and sheen enter eval only, not the lobe selection: exact
    # against FD with the same random numbers (roulette off).
    d = thin_cbox(size=8, rr_depth=100)
    d["large-box"]["bsdf"]["base_color"] = rgb([0.7, 0.4, 0.2])
    scene = jaxrender.load_dict(d)
    _check_exact_fd(scene, "large-box.bsdf.base_color.value", min_fd=1e-3)
    # (sheen's derivative is small beside the loss, ~44: a step of 0.01
    # leaves float32 rounding of the sum at ~2% of the difference; the
    # loss is a low-degree polynomial in sheen, so a wide central step is exact enough)
    key = "large-box.bsdf.sheen.value"
    loss = _loss_fn(scene, key, _weights(scene), spp=4)
    x0, h = jnp.float32(0.5), 0.2
    g = float(jax.grad(loss)(x0, 7, 7))
    fd = (float(loss(x0 + h, 7, 0)) - float(loss(x0 - h, 7, 0))) / (2 * h)
    assert abs(fd) > 1e-3 and abs(g - fd) <= 2e-3 * abs(fd) + 1e-4, (g, fd)
