"""Polarized variants (spectral_polarized, mono_polarized): Mueller matrices
through the same kernels, the polarizer and retarder sheets, the stokes
integrator.

What we compare with, that we did not write:
* Mitsuba 3 images of the same scenes in ``llvm_ad_spectral_polarized`` /
  ``llvm_ad_mono_polarized`` (tests/data/references, made by
  tests/references/make_references.py): S0-S3 of reflections off glass,
  smooth and rough gold, a blend and a twosided rough mirror, linear and
  circular polarizers and retarders at several angles, crossed polarizers
  in the path tracer,
  judged against Monte Carlo noise as tests/test_render_reference.py does;
* closed forms: Malus's law, a quarter-wave plate turning linear light
  circular, the derivative of Malus's law;
* central finite differences with common random numbers, and the
  forward-mode derivative against the reverse-mode one (the dot-product
  test).
"""
from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import SceneError
from jaxrender.scene.transform import Transform as T

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "references"))

from scenes import POLARIZED_VARIANTS  # noqa: E402
from test_render_reference import disagreements  # noqa: E402

OUR_SPP, OUR_RENDERS = 64, 8


@functools.cache
def our_renders(name: str, variant: str | None = None) -> np.ndarray:
    """OUR_RENDERS renders of reference scene ``name`` (read-only: shared by the tests)."""
    default, make = POLARIZED_VARIANTS[name]
    scene = jaxrender.load_dict(make(jaxrender.cornell_box()), variant=variant or default)
    renders = np.stack([np.asarray(jaxrender.render(scene, spp=OUR_SPP, seed=100 + k), np.float64)
                        for k in range(OUR_RENDERS)])
    renders.flags.writeable = False
    return renders


def reference(name: str):
    return np.load(HERE / "data" / "references" / f"{name}.npz")


@pytest.mark.parametrize("name", sorted(POLARIZED_VARIANTS))
def test_matches_mitsuba_within_noise(name):
    ref = reference(name)
    renders = our_renders(name)
    assert renders.shape[1:] == ref["mean"].shape     # stokes: 3 + 12 channels (mono: 1 + 12), as Mitsuba's
    assert np.all(np.isfinite(renders))
    assert disagreements(renders, ref) == []


def test_wrong_polarization_is_detected():
    """Controls: the sheets' Stokes images with S2 negated (a mirrored
    frame), or depolarized (S1-S3 zero), disagree with Mitsuba's; so does
    the crossed-polarizer image rendered without polarization, where each
    sheet is a filter passing half of any light."""
    ref = reference("spectral_polarized_sheets")
    renders = our_renders("spectral_polarized_sheets")
    flipped = renders.copy()
    flipped[..., 9:12] *= -1.0
    assert disagreements(flipped, ref) != []
    depolarized = renders.copy()
    depolarized[..., 6:] = 0.0
    assert disagreements(depolarized, ref) != []
    unpolarized = our_renders("spectral_polarized_path", variant="spectral")
    assert disagreements(unpolarized, reference("spectral_polarized_path")) != []


# ---------------------------------------------------------------------------
# Closed forms: a camera looking through sheets at a uniform white sky
# ---------------------------------------------------------------------------

def sheets(angles, kinds=None, stokes=False, size=4) -> dict:
    """Sheets at z = 1, 2, ... (the first one nearest the sky) seen along -z
    with a 1 degree field of view (normal incidence to 1e-4)."""
    path = {"type": "path", "max_depth": len(angles) + 2}
    d = {"type": "scene", "integrator": {"type": "stokes", "nested": path} if stokes else path,
         "sensor": {"type": "perspective", "fov": 1.0,
                    "to_world": T().look_at(origin=[0, 0, 9], target=[0, 0, 0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}},
         "sky": {"type": "constant", "radiance": {"type": "rgb", "value": [1.0, 1.0, 1.0]}}}
    for k, theta in enumerate(angles):
        kind = (kinds or ["polarizer"] * len(angles))[k]
        bsdf = {"type": kind} if kind == "circular" else {"type": kind, "theta": float(theta)}
        d[f"sheet{k}"] = {"type": "rectangle", "to_world": T().translate([0.0, 0.0, 1.0 + k]), "bsdf": bsdf}
    return d


@pytest.mark.parametrize("theta", [0.0, 30.0, 45.0, 72.0, 90.0])
def test_malus_law(theta):
    """Unpolarized light through two polarizers at theta: 1/2 cos^2 theta of it."""
    scene = jaxrender.load_dict(sheets([10.0, 10.0 + theta]), variant="mono_polarized")
    image = np.asarray(jaxrender.render(scene, spp=4))
    np.testing.assert_allclose(image, 0.5 * math.cos(math.radians(theta)) ** 2, atol=2e-5)


def test_polarizers_are_half_filters_without_polarization():
    """In rgb and spectral a polarizer passes half of any light (Mitsuba's
    unpolarized polarizer), whatever its angle; a retarder passes all."""
    for variant in ("rgb", "mono"):
        scene = jaxrender.load_dict(sheets([0.0, 90.0, 45.0], ["polarizer", "polarizer", "retarder"]),
                                    variant=variant)
        np.testing.assert_allclose(np.asarray(jaxrender.render(scene, spp=4)), 0.25, atol=1e-5)


def test_stokes_vectors_of_linear_and_circular_light():
    """A polarizer makes fully linearly polarized light (S1^2 + S2^2 = S0^2,
    S3 = 0, its angle following the polarizer's at twice the rate); a
    quarter-wave retarder at 45 degrees to it makes circular light (S3 =
    +-S0, S1 = S2 = 0) of opposite handedness at -45 degrees."""
    def stokes(angles, kinds=None):
        scene = jaxrender.load_dict(sheets(angles, kinds, stokes=True), variant="mono_polarized")
        image = np.asarray(jaxrender.render(scene, spp=4))
        assert image.shape == (4, 4, 13)
        return image[..., 1::3].mean((0, 1))     # S0 .. S3 (each written thrice)

    phases = []
    for theta in (0.0, 20.0, 65.0):
        s = stokes([theta])
        np.testing.assert_allclose(s[0], 0.5, atol=1e-5)
        np.testing.assert_allclose(math.hypot(s[1], s[2]), 0.5, atol=1e-4)
        assert abs(s[3]) < 1e-5
        phases.append(math.atan2(s[2], s[1]))
    # the angle of polarization turns with the polarizer (twice as fast in S1, S2)
    turns = [math.remainder(p - phases[0], 2 * math.pi) for p in phases[1:]]
    np.testing.assert_allclose(np.abs(turns), [math.radians(40.0), math.radians(130.0)], atol=1e-3)
    right = stokes([0.0, 45.0], ["polarizer", "retarder"])
    left = stokes([0.0, -45.0], ["polarizer", "retarder"])
    np.testing.assert_allclose([abs(right[3]), abs(left[3])], [0.5, 0.5], atol=1e-4)
    assert right[3] * left[3] < 0
    np.testing.assert_allclose(right[1:3], 0.0, atol=3e-4)   # (oblique rays within the 1 degree view)


def test_circular_polarizers():
    """Linear light through a circular polarizer: half of it passes, fully
    circular, of opposite handedness for the two kinds; unpolarized light
    through crossed circular polarizers (right, then left) does not pass."""
    def stokes(kinds, left=False):
        d = sheets([0.0] * len(kinds), kinds, stokes=True)
        if left:
            d[f"sheet{len(kinds) - 1}"]["bsdf"]["left_handed"] = True
        image = np.asarray(jaxrender.render(jaxrender.load_dict(d, variant="mono_polarized"), spp=4))
        return image[..., 1::3].mean((0, 1))

    right, left = stokes(["polarizer", "circular"]), stokes(["polarizer", "circular"], left=True)
    np.testing.assert_allclose([right[0], abs(right[3]), left[0], abs(left[3])], 0.25, atol=1e-5)
    np.testing.assert_allclose(np.r_[right[1:3], left[1:3]], 0.0, atol=1e-5)
    assert right[3] * left[3] < 0
    np.testing.assert_allclose(stokes(["circular", "circular"], left=True), 0.0, atol=1e-6)
    scene = jaxrender.load_dict(sheets([0.0, 0.0], ["circular", "circular"]), variant="rgb")
    np.testing.assert_allclose(np.asarray(jaxrender.render(scene, spp=4)), 0.25, atol=1e-5)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

def test_gradient_of_malus_law():
    """d/dtheta of 1/2 cos^2(theta - theta0) (theta in degrees): reverse
    and forward mode equal each other and the closed form."""
    scene = jaxrender.load_dict(sheets([0.0, 30.0]), variant="mono_polarized")
    key = "sheet1.bsdf.theta.value"

    def f(x):
        return jnp.mean(jaxrender.render(scene, {key: x}, spp=4))

    x = scene.params[key]
    g = jax.grad(f)(x)
    _, t = jax.jvp(f, (x,), (jnp.ones_like(x),))
    closed = -0.5 * math.sin(math.radians(60.0)) * math.pi / 180.0
    np.testing.assert_allclose(g, closed, rtol=1e-4)
    np.testing.assert_allclose(t, g, rtol=1e-5)


def _small(name, rr_depth=None):
    _, make = POLARIZED_VARIANTS[name]
    d = make(jaxrender.cornell_box())
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 12
    if rr_depth is not None:
        d["integrator"]["rr_depth"] = rr_depth
    return d


def _weighted_sum(scene, key, index, spp=64):
    """(f, v): f(v) a weighted sum of the image with entry ``index`` of
    parameter ``key`` set to v (the whole parameter if it is a scalar)."""
    x0 = jnp.asarray(scene.params[key])
    w = jnp.asarray(np.random.default_rng(3).uniform(0.5, 1.5, (12, 12, 3)), jnp.float32)

    def f(v):
        x = v if x0.ndim == 0 else x0.at[index].set(v)
        return jnp.sum(w * jaxrender.render(scene, {key: x}, spp=spp, seed=5, seed_grad=5))

    return f, (x0 if x0.ndim == 0 else x0[index])


def check_gradient(f, v, step, what, rtol=0.02):
    """Reverse mode matches central differences (same random numbers) of
    ``f`` at ``v`` and forward mode matches reverse mode."""
    g = float(jax.grad(f)(v))
    fd = float((f(v + step) - f(v - step)) / (2 * step))
    assert abs(fd) > 1e-3, what
    np.testing.assert_allclose(g, fd, rtol=rtol, err_msg=what)
    _, t = jax.jvp(f, (v,), (jnp.ones_like(v),))
    np.testing.assert_allclose(float(t), g, rtol=1e-4, err_msg=what)


@pytest.mark.parametrize("key, index, step", [
    ("red.reflectance.value", 2, 0.5),     # a wall's colour (a sigmoid coefficient), seen past glass and gold
    ("left.bsdf.theta.value", 0, 1.0),     # a polarizer's angle (degrees)
])
def test_gradients_match_finite_differences(key, index, step):
    """The crossed-polarizer scene in spectral_polarized: the derivative of a
    weighted image sum by reverse mode (rb) matches central differences
    with the same random numbers (Russian roulette off: its decisions move
    with the parameters), and forward mode."""
    scene = jaxrender.load_dict(_small("spectral_polarized_path", rr_depth=100), variant="spectral_polarized")
    check_gradient(*_weighted_sum(scene, key, index), step, key)


def test_forward_and_reverse_mode_agree_with_russian_roulette():
    """The dot-product test where Russian roulette weighs continuations: the
    adjoint's incident radiance carries the roulette's factor."""
    scene = jaxrender.load_dict(_small("spectral_polarized_path"), variant="spectral_polarized")
    f, v = _weighted_sum(scene, "red.reflectance.value", 1)
    _, t = jax.jvp(f, (v,), (jnp.ones_like(v),))
    np.testing.assert_allclose(float(jax.grad(f)(v)), float(t), rtol=1e-4)


# ---------------------------------------------------------------------------
# What is refused
# ---------------------------------------------------------------------------

def test_variant_names():
    assert jaxrender.variants() == ["mono", "rgb", "spectral", "mono_polarized", "spectral_polarized"]
    assert jaxrender.load_dict(sheets([0.0]), variant="spectral_polarized").variant == "spectral_polarized"
    with pytest.raises(SceneError, match="no rgb_polarized"):
        jaxrender.load_dict(sheets([0.0]), variant="rgb_polarized")


def test_prb_is_refused_and_rb_is_the_default():
    scene = jaxrender.load_dict(sheets([0.0, 30.0]), variant="mono_polarized")
    key = "sheet1.bsdf.theta.value"
    x = scene.params[key]
    with pytest.raises(SceneError, match="need not be invertible"):
        jax.grad(lambda v: jnp.mean(jaxrender.render(scene, {key: v}, spp=1, method="prb")))(x)
    assert np.isfinite(jax.grad(lambda v: jnp.mean(jaxrender.render(scene, {key: v}, spp=1, method="rb")))(x))


@pytest.mark.parametrize("edit, variant, says", [
    (lambda d: d["floor"].update(bsdf={"type": "pplastic", "int_ior": 1.2, "ext_ior": 1.2}), "spectral_polarized",
     "int_ior and ext_ior must differ"),
    (lambda d: d.update(integrator={"type": "volpath"}, sheet={"type": "rectangle", "bsdf": {"type": "polarizer"}}),
     "rgb", "polarizer BSDF under the volpath integrator"),
    (lambda d: d.update(integrator={"type": "prbvolpath"}, sheet={"type": "rectangle", "bsdf": {"type": "circular"}}),
     "spectral", "circular BSDF under the prbvolpath integrator"),
    (lambda d: d.update(integrator={"type": "stokes", "nested": {"type": "path"}}), "spectral",
     "stokes integrator needs a polarized variant"),
    (lambda d: d.update(integrator={"type": "stokes", "nested": {"type": "aov", "aovs": "dd:depth"}}),
     "spectral_polarized", "nested 'aov' integrator"),
    (lambda d: d.update(integrator={"type": "stokes", "nested": {"type": "volpath"}},
                        sheet={"type": "rectangle", "bsdf": {"type": "retarder"}}),
     "spectral_polarized", "retarder BSDF under the volpath integrator"),
    (lambda d: d.update(integrator={"type": "stokes", "hide_emitters": True, "nested": {"type": "path"}}),
     "spectral_polarized", "give hide_emitters to the nested integrator"),
])
def test_what_polarized_variants_cannot_render_yet_is_an_error(edit, variant, says):
    d = jaxrender.cornell_box()
    edit(d)
    with pytest.raises(SceneError, match=says):
        jaxrender.render(jaxrender.load_dict(d, variant=variant), spp=1)


def test_stokes_images_are_differentiable():
    """The derivative of a weighted sum of all Stokes channels (S1-S3
    included) by a polarizer's angle and gold's tint: reverse mode matches
    central differences with the same random numbers (Russian roulette off)
    and forward mode."""
    d = _small("spectral_polarized_sheets")
    d["large-box"]["bsdf"] = {"type": "conductor", "material": "Au"}
    d["integrator"]["nested"]["rr_depth"] = 100
    scene = jaxrender.load_dict(d, variant="spectral_polarized")
    w = jnp.asarray(np.random.default_rng(4).uniform(-1.0, 1.0, (12, 12, 15)), jnp.float32)
    for key, step in (("left.bsdf.theta.value", 1.0), ("right.bsdf.theta.value", 1.0)):
        def f(v, key=key):
            return jnp.sum(w * jaxrender.render(scene, {key: v}, spp=64, seed=5, seed_grad=5))

        check_gradient(f, jnp.asarray(scene.params[key]), step, key)


def test_volpath_gradients_match_finite_differences():
    """volpath in spectral_polarized (a medium inside a glass ball): the
    derivative by the medium's albedo and the glass's tint, reverse mode (rb)
    against central differences with the same random numbers (Russian
    roulette off), and against forward mode."""
    d = _small("spectral_polarized_medium_in_glass")
    d["integrator"]["rr_depth"] = 100
    scene = jaxrender.load_dict(d, variant="spectral_polarized")
    albedo = [k for k in scene.params if k.startswith("ball.interior_medium.albedo")][0]
    for key, index, step in ((albedo, 2, 0.1), ("red.reflectance.value", 2, 0.25)):
        check_gradient(*_weighted_sum(scene, key, index), step, key)


def _facing(center, normal, size) -> np.ndarray:
    """to_world of a rectangle of half-size ``size`` at ``center`` whose +z faces ``normal``."""
    n = np.asarray(normal, float) / np.linalg.norm(normal)
    x = np.cross([1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0], n)
    x /= np.linalg.norm(x)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = x * size, np.cross(n, x) * size, n, center
    return m.astype(np.float32)


def brewster_plates(size=16, point_light=False, front_card=False) -> dict:
    """A small light seen in two glossy plates (pplastic without its diffuse
    layer, IOR 1.49) at Brewster's angle each, whose planes of incidence are
    at right angles: what the first reflects is mostly s-polarized, which is
    p at the second, and mostly stops there. A small card between the light
    and the first plate shades part of what the camera sees (with a point
    light, a hard shadow); ``front_card``: another between the camera and
    the second plate, whose edge the camera sees across the light."""
    theta = math.atan(1.49)
    a = np.zeros(3)
    to_light = np.array([math.sin(theta), math.cos(theta), 0.0])
    u = np.array([-math.sin(theta), math.cos(theta), 0.0])
    b = a + 1.5 * u
    normal_b = math.cos(theta) * -u + math.sin(theta) * np.array([0.0, 0.0, 1.0])
    eye = b + 2.5 * (u - 2.0 * np.dot(u, normal_b) * normal_b)
    plate = {"type": "pplastic", "diffuse_reflectance": {"type": "rgb", "value": [0.0, 0.0, 0.0]}, "alpha": 0.15}
    light = ({"type": "point", "position": list(a + 2.0 * to_light), "intensity": {"type": "rgb", "value": [8.0] * 3}}
             if point_light else
             {"type": "rectangle", "to_world": _facing(a + 2.0 * to_light, -to_light, 0.25),
              "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [50.0, 50.0, 50.0]}}})
    extra = {}
    if front_card:
        forward = (b - eye) / np.linalg.norm(b - eye)
        right = np.cross(forward, [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        extra["front"] = {"type": "rectangle", "to_world": _facing(eye + 1.5 * forward + 0.1 * right, -forward, 0.1),
                          "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.2, 0.2]}}}
    return {**extra, "type": "scene", "integrator": {"type": "path", "max_depth": 4}, "light": light,
            "first": {"type": "rectangle", "to_world": _facing(a, [0, 1, 0], 0.5), "bsdf": plate},
            "second": {"type": "rectangle", "to_world": _facing(b, normal_b, 0.4), "bsdf": plate},
            "card": {"type": "rectangle", "to_world": _facing(a + 0.6 * to_light, -to_light, 0.06),
                     "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.2, 0.2]}}},
            "sensor": {"type": "perspective", "fov": 30.0,
                       "to_world": T().look_at(origin=list(eye), target=list(b), up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": size, "height": size}, "sampler": {"type": "independent"}}}


def test_crossed_brewster_plates_stop_most_light():
    """The scene of the tests below depends on polarization: without it
    the plates pass over five times as much."""
    plain, polarized = (float(np.sum(jaxrender.render(jaxrender.load_dict(brewster_plates(), variant=v), spp=128)))
                        for v in ("mono", "mono_polarized"))
    assert plain > 5.0 * polarized > 0.0, (plain, polarized)


def _shift(axis: int) -> np.ndarray:
    """The tangent of a to_world translated along ``axis``."""
    tangent = np.zeros((4, 4), np.float32)
    tangent[axis, 3] = 1.0
    return tangent


def _moving_matches_finite_differences(scene, key: str, tangent, weights) -> None:
    """The derivative of ``sum(weights * image)`` along ``tangent`` of
    ``key`` (a to_world): reverse mode within noise of central differences
    with common random numbers (and clearly nonzero), forward mode equal to
    it for each seed (the dot-product test)."""
    from test_camera_gradients import _z
    value = jnp.asarray(scene.params[key])
    tangent = jnp.asarray(tangent, jnp.float32)

    def loss(v, seed):
        return jnp.sum(jaxrender.render(scene, {key: v}, spp=64, seed=seed, seed_grad=seed) * weights)
    f = jax.jit(loss)
    h = 0.01
    fd = np.array([(float(f(value + h * tangent, jnp.uint32(s))) - float(f(value - h * tangent, jnp.uint32(s))))
                   / (2 * h) for s in range(1000, 1192)])
    reverse = jax.jit(lambda v, s: jnp.sum(jax.grad(loss)(v, s) * tangent))
    rev = np.array([float(reverse(value, jnp.uint32(s))) for s in range(64)])
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(rev.mean()) > 4.0 * rev.std() / np.sqrt(len(rev)), rev.mean()
    forward = jax.jit(lambda v, s: jax.jvp(lambda x: loss(x, s), (v,), (tangent,))[1])
    np.testing.assert_allclose([float(forward(value, jnp.uint32(s))) for s in range(4)], rev[:4], rtol=1e-3)


@pytest.mark.parametrize("key, axis, point_light, variant", [
    ("first.to_world", 1, False, "mono_polarized"), ("light.to_world", 1, False, "mono_polarized"),
    ("sensor.to_world", 1, False, "mono_polarized"), ("card.to_world", 2, False, "mono_polarized"),
    ("card.to_world", 2, True, "mono_polarized"), ("first.to_world", 1, False, "spectral_polarized")])
def test_moving_geometry_and_cameras_match_finite_differences(key, axis, point_light, variant):
    """Derivatives of moving plates, the light, the camera and the shading
    card through the crossed plates' Mueller matrices (the previous vertex's
    Mueller matrix towards a moving point, the edges seen after a bounce,
    the first plate's continuation seen from a moving camera, a point
    light's hard shadow seen after a bounce), as
    :func:`_moving_matches_finite_differences` checks them."""
    scene = jaxrender.load_dict(brewster_plates(point_light=point_light), variant=variant)
    # (a ramp across the image: the card's shade moves over the plate's light, which a flat weight sums out)
    rows, cols = np.mgrid[0:16, 0:16]
    weights = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (16, 16, 1)) + ((cols + 2 * rows) / 24.0 - 1.0)[
        ..., None], jnp.float32)
    _moving_matches_finite_differences(scene, key, _shift(axis), weights)


def _roll(to_world) -> np.ndarray:
    """The tangent of ``to_world`` turned about its own z axis (a camera's
    view direction)."""
    turn = np.zeros((4, 4), np.float32)
    turn[0, 1], turn[1, 0] = -1.0, 1.0
    return np.asarray(to_world, np.float32) @ turn


@pytest.mark.parametrize("key, motion, scene_options", [("second.to_world", 1, {}),
                                                        ("front.to_world", 0, {"front_card": True}),
                                                        ("sensor.to_world", 1, {}),
                                                        ("sensor.to_world", "roll", {})])
def test_stokes_images_of_moving_geometry_and_cameras_match_finite_differences(key, motion, scene_options):
    """Stokes images (S2 weighed most) of the crossed plates under moving
    geometry and cameras: the moving splat weights of the second plate's
    points carry every Stokes channel; a card the camera sees in front of
    the polarized reflection turns what lies past its edge into the
    sensor's frame along that edge's own camera rays; the sensor's frame
    follows the camera and the direction it sees each point from (a roll
    turns it outright)."""
    d = brewster_plates(**scene_options)
    d["integrator"] = {"type": "stokes", "nested": d["integrator"]}
    scene = jaxrender.load_dict(d, variant="mono_polarized")
    weights = np.random.default_rng(1).uniform(-1.0, 1.0, (16, 16, 13))
    weights[..., 7:10] += 2.0     # S2 (mono_polarized's channels: the image, then S0..S3 thrice each)
    tangent = _roll(scene.params[key]) if motion == "roll" else _shift(motion)
    _moving_matches_finite_differences(scene, key, tangent, weights)
