"""White-furnace and analytic tests of the path integrator: scenes whose
radiance is known in closed form (or, for BSDFs that lose energy by
design, from Mitsuba's own directional albedo), judged against the Monte
Carlo standard error of the image mean (pixels are independent and, in
these scenes, share one expected value).

* A closed box seen from inside, every face an area light of radiance Le
  with a diffuse albedo rho: L = Le (1 + rho + ... + rho^(D-1)) for
  max_depth D, and Le / (1 - rho) with unbounded depth (Russian roulette
  must stay unbiased).
* A plane in a constant environment L seen from above with max_depth 2:
  diffuse rho -> rho L exactly; mirror conductor (reflectance 1) -> L
  exactly; for every other BSDF, L times its directional albedo
  E(wi) = E_u[sample weight], computed with Mitsuba's scalar plugin.
* A convex white object (a box) in a constant environment: 1 everywhere.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import jaxrender
from jaxrender.scene.transform import Transform as T


def _sensor(origin, target, fov, size, up=(0, 0, 1)):
    return {"type": "perspective", "fov": fov, "near_clip": 0.001,
            "to_world": T().look_at(origin=list(origin), target=list(target), up=list(up)),
            "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}}


def _image_mean_ok(img: np.ndarray, expected, rel_floor=1e-5):
    """Every channel's pixel mean agrees with ``expected`` within 4.5
    standard errors (pixels are i.i.d. here)."""
    x = np.asarray(img, np.float64).reshape(-1, img.shape[-1])
    mean = x.mean(0)
    se = x.std(0, ddof=1) / math.sqrt(len(x))
    expected = np.broadcast_to(np.asarray(expected, np.float64), mean.shape)
    tol = 4.5 * se + rel_floor * np.abs(expected) + 1e-7
    assert np.all(np.abs(mean - expected) <= tol), (mean, expected, se)
    return mean, se


# ---------------------------------------------------------------------------
# Closed emissive box seen from inside
# ---------------------------------------------------------------------------

def closed_box(le, rho, **integrator):
    return {"type": "scene",
            "integrator": {"type": "path", **integrator},
            "sensor": _sensor([0.1, -0.2, 0.05], [1.0, 0.7, -0.4], 70, 12),
            "box": {"type": "cube", "flip_normals": True, "to_world": T().scale([1.0, 1.3, 0.8]),
                    "bsdf": {"type": "diffuse", "reflectance": rho},
                    "emitter": {"type": "area", "radiance": le}}}


@pytest.mark.parametrize("rho, max_depth", [(1.0, 3), (0.6, 5), (0.8, 2), (1.0, 1)])
def test_closed_box_with_bounded_depth(rho, max_depth):
    le = 0.5
    scene = jaxrender.load_dict(closed_box(le, rho, max_depth=max_depth))
    img = jaxrender.render(scene, spp=64, seed=1)
    expected = le * sum(rho ** i for i in range(max_depth))
    _image_mean_ok(img, expected)


def test_closed_box_unbounded_depth_with_russian_roulette():
    le, rho = 0.5, 0.5
    scene = jaxrender.load_dict(closed_box(le, rho, max_depth=-1, rr_depth=2))
    img = jaxrender.render(scene, spp=128, seed=2)
    _image_mean_ok(img, le / (1 - rho))


def test_closed_box_detects_a_wrong_answer():
    """Control: the check has the power to see a 1% error."""
    scene = jaxrender.load_dict(closed_box(0.5, 0.6, max_depth=5))
    img = jaxrender.render(scene, spp=64, seed=1)
    with pytest.raises(AssertionError):
        _image_mean_ok(img, 1.01 * 0.5 * sum(0.6 ** i for i in range(5)))


# ---------------------------------------------------------------------------
# A plane in a constant environment
# ---------------------------------------------------------------------------

ELEVATION = 50.0   # degrees between the view ray and the plane


def plane_scene(bsdf, radiance=1.0, fov=1.0, size=8, integrator=None):
    t = math.radians(ELEVATION)
    origin = [2.0 * math.cos(t), 0.0, 2.0 * math.sin(t)]
    return {"type": "scene",
            "integrator": integrator or {"type": "path", "max_depth": 2},
            "sensor": _sensor(origin, [0, 0, 0], fov, size, up=(0, 1, 0)),
            "sky": {"type": "constant", "radiance": radiance},
            "plane": {"type": "rectangle", "to_world": T().scale(50.0), "bsdf": bsdf}}


@pytest.mark.parametrize("integrator", [{"type": "path", "max_depth": 2}, {"type": "direct"},
                                        {"type": "path", "max_depth": -1}])
def test_diffuse_plane_in_constant_environment_is_rho_l(integrator):
    """rho L: the plane sees only the sky, however deep the path."""
    rho, sky = [0.3, 0.6, 0.9], [2.0, 1.0, 0.5]
    bsdf = {"type": "diffuse", "reflectance": {"type": "rgb", "value": rho}}
    scene = jaxrender.load_dict(plane_scene(bsdf, {"type": "rgb", "value": sky}, fov=40, size=16,
                                            integrator=integrator))
    img = np.asarray(jaxrender.render(scene, spp=32, seed=3))
    _image_mean_ok(img, np.multiply(rho, sky))


def test_mirror_in_constant_environment_is_exact():
    """A conductor with reflectance 1 (Mitsuba's default 'none' material)
    returns the environment exactly: no noise at all."""
    scene = jaxrender.load_dict(plane_scene({"type": "conductor"}, 1.5, fov=40, size=8))
    img = np.asarray(jaxrender.render(scene, spp=4, seed=4))
    np.testing.assert_allclose(img, 1.5, rtol=1e-6)


def _mitsuba_albedo(bsdf, n=20_000, seed=0):
    """E_u[weight of Mitsuba's sample()] at the camera's wi: the radiance
    the plane returns under a unit constant environment."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    b = mi.load_dict(bsdf)
    t = math.radians(ELEVATION)
    si = mi.SurfaceInteraction3f()
    si.sh_frame = mi.Frame3f(mi.Vector3f(0, 0, 1))
    si.n = mi.Normal3f(0, 0, 1)
    si.wi = mi.Vector3f(math.cos(t), 0.0, math.sin(t))
    ctx = mi.BSDFContext()
    u = np.random.default_rng(seed).random((n, 3))
    w = np.array([list(b.sample(ctx, si, float(a), mi.Point2f(float(x), float(y)))[1]) for a, x, y in u])
    return w.mean(0), w.std(0, ddof=1) / math.sqrt(n)


FURNACE_BSDFS = {
    "diffuse-white": {"type": "diffuse", "reflectance": 1.0},
    "roughconductor-ggx": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.3},
    "roughconductor-beckmann": {"type": "roughconductor", "distribution": "beckmann", "alpha": 0.6},
    "plastic": {"type": "plastic", "diffuse_reflectance": 1.0},
    "roughplastic-ggx": {"type": "roughplastic", "distribution": "ggx", "alpha": 0.2,
                         "diffuse_reflectance": 1.0, "nonlinear": True},
    "roughplastic-beckmann": {"type": "roughplastic", "alpha": 0.4, "diffuse_reflectance": 0.8},
    "dielectric": {"type": "dielectric", "int_ior": 1.5},
    "thindielectric": {"type": "thindielectric"},
    "roughdielectric": {"type": "roughdielectric", "distribution": "ggx", "alpha": 0.3},
    "principledthin": {"type": "principledthin", "spec_trans": 0.5, "diff_trans": 0.8, "roughness": 0.4,
                       "base_color": 0.9, "sheen": 0.3},
}


@pytest.mark.parametrize("name", sorted(FURNACE_BSDFS))
def test_plane_returns_its_directional_albedo(name):
    """White furnace per BSDF: the constant environment (also below the
    plane, for transmission) times Mitsuba's directional albedo; 1 exactly
    for the white diffuse."""
    bsdf = FURNACE_BSDFS[name]
    scene = jaxrender.load_dict(plane_scene(bsdf))
    img = np.asarray(jaxrender.render(scene, spp=256, seed=5), np.float64)
    x = img.reshape(-1, 3)
    mean, se = x.mean(0), x.std(0, ddof=1) / math.sqrt(len(x))
    want, want_se = _mitsuba_albedo(bsdf)
    if name == "diffuse-white":
        want, want_se = np.ones(3), np.zeros(3)
    assert np.all(np.abs(mean - want) <= 4.5 * np.sqrt(se ** 2 + want_se ** 2) + 2e-3 * want), (mean, want)
    if "plastic" not in name:   # Mitsuba's plastics approximate internal scattering, may exceed 1
        assert np.all(mean <= 1.0 + 4.5 * se + 1e-6)   # no energy created


# ---------------------------------------------------------------------------
# A convex white object in a constant environment
# ---------------------------------------------------------------------------

def test_white_box_disappears_in_the_furnace():
    """Diffuse albedo 1 on a convex box under a unit sky: every pixel 1,
    object or not (paths off a convex object never meet it again)."""
    d = {"type": "scene", "integrator": {"type": "path", "max_depth": 3},
         "sensor": _sensor([2.5, 1.5, 2.0], [0, 0, 0], 45, 16),
         "sky": {"type": "constant"},
         "box": {"type": "cube", "to_world": T().rotate([0, 0, 1], 20).scale([0.8, 0.6, 0.7]),
                 "bsdf": {"type": "diffuse", "reflectance": 1.0}}}
    img = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=64, seed=6))
    hit = np.abs(img - 1.0).max(-1) > 0   # noisy pixels: the box; the sky alone is exact
    assert hit.mean() > 0.2
    _image_mean_ok(img[hit], 1.0)


def test_glass_box_in_the_furnace_and_russian_roulette_with_eta():
    """A glass box under a unit sky with unbounded depth returns exactly 1
    (a lossless dielectric; Russian roulette from the first bounce stays
    unbiased). Roulette runs on throughput * eta^2 as in Mitsuba: inside the
    glass the throughput carries 1 / eta^2, which would otherwise kill ~55%
    of the paths there and triple the pixel noise (std ~0.21 instead of
    ~0.07 at 16 spp for this scene)."""
    d = {"type": "scene", "integrator": {"type": "path", "max_depth": -1, "rr_depth": 1},
         "sensor": _sensor([2.5, 1.5, 2.0], [0, 0, 0], 30, 16),
         "sky": {"type": "constant"},
         "box": {"type": "cube", "to_world": T().rotate([0, 0, 1], 20).scale([0.8, 0.6, 0.7]),
                 "bsdf": {"type": "dielectric"}}}
    img = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=16, seed=6), np.float64)
    hit = np.abs(img - 1.0).max(-1) > 0
    assert hit.mean() > 0.5
    _image_mean_ok(img[hit], 1.0)
    assert img[hit].std(0).mean() < 0.12
