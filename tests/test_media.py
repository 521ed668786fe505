"""Participating media and the volpath integrator, against Mitsuba 3.9.1 and
closed forms: the null BSDF, the phase functions' sampling, homogeneous
media in null and dielectric boundaries, transmittance, a furnace, the
loading rules and what is not supported (clear errors)."""
from __future__ import annotations

import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import media
from jaxrender.kernels.media import phase
from jaxrender.primitives import launch
from jaxrender.render import transport_settings
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform as T
from test_render_reference import disagreements
from test_sampling import chi2_reject
from test_shapes import _to_mitsuba

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

SIZE, SPP, RENDERS = 32, 64, 4


def rgb(*v):
    return {"type": "rgb", "value": list(v)}


def medium_scene(g=None, sigma_t=2.0, albedo=(0.8, 0.6, 0.4), max_depth=-1, boundary="null", shape="cube",
                 integrator="volpath", spp=SPP, light=(2.5, 0.8), sample_emitters=True):
    """A medium in a box (or sphere) on a diffuse floor under a rectangle
    light (at height light[0], half size light[1])."""
    med = {"type": "homogeneous", "sigma_t": sigma_t, "albedo": rgb(*albedo), "sample_emitters": sample_emitters}
    if g is not None:
        med["phase"] = {"type": "hg", "g": g}
    bsdf = {"type": "dielectric", "int_ior": 1.33} if boundary == "dielectric" else {"type": boundary}
    return {"type": "scene",
            "integrator": {"type": integrator, "max_depth": max_depth},
            "sensor": {"type": "perspective", "fov": 40.0,
                       "to_world": T().look_at(origin=[0, 0, 4], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": SIZE, "height": SIZE, "rfilter": {"type": "box"}},
                       "sampler": {"type": "independent", "sample_count": spp}},
            "light": {"type": "rectangle",
                      "to_world": T().translate([0, light[0], 0]).rotate([1, 0, 0], 90).scale(light[1]),
                      "emitter": {"type": "area", "radiance": rgb(6.0, 6.0, 6.0)}},
            "floor": {"type": "rectangle", "to_world": T().translate([0, -1.2, 0]).rotate([1, 0, 0], -90).scale(3),
                      "bsdf": {"type": "diffuse", "reflectance": rgb(0.5, 0.5, 0.5)}},
            "box": {"type": shape, "to_world": T().rotate([0, 1, 0], 30).scale(0.8), "bsdf": bsdf,
                    "interior": med}}


CASES = {"isotropic": {}, "hg-0.5": {"g": -0.5, "max_depth": 4}, "hg0.7": {"g": 0.7},
         "spectral": {"sigma_t": rgb(0.3, 0.6, 0.9), "g": 0.2},
         "dielectric": {"boundary": "dielectric", "shape": "sphere"},
         "near-light": {"light": (1.2, 1.5), "sigma_t": 1.0, "albedo": (0.95, 0.9, 0.9)},
         "no-emitter-sampling": {"light": (1.2, 1.5), "sample_emitters": False},
         "path-ignores-media": {"integrator": "path", "max_depth": 5}}


@functools.cache
def mitsuba_image(name):
    scene = mi.load_dict(_to_mitsuba(mi, medium_scene(**CASES[name])))
    imgs = np.stack([np.asarray(mi.render(scene, seed=s), np.float64) for s in range(RENDERS)])
    return {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(RENDERS)}


def our_renders(d):
    scene = jaxrender.load_dict(d)
    return np.stack([np.asarray(jaxrender.render(scene, seed=10 + k), np.float64) for k in range(RENDERS)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_image_matches_mitsuba_within_noise(name):
    assert disagreements(our_renders(medium_scene(**CASES[name])), mitsuba_image(name)) == []


def test_control_a_different_medium_disagrees():
    ref = mitsuba_image("isotropic")
    assert disagreements(our_renders(medium_scene(albedo=(0.75, 0.55, 0.35))), ref) != []
    assert disagreements(our_renders(medium_scene(sigma_t=2.3)), ref) != []


@pytest.mark.parametrize("integrator", ["volpath", "prbvolpath"])
def test_volumetric_tracers_without_media_are_the_path_tracer_and_match_mitsuba(integrator):
    """With no medium and no pass-through surface, volpath and prbvolpath
    render with the path tracer's kernels (which take camera and geometry
    derivatives); the image is Mitsuba's volpath's within noise. With a
    medium they keep their own kernels."""
    d = medium_scene(integrator=integrator, max_depth=5, shape="sphere")
    d["box"] = {**d["box"], "bsdf": {"type": "roughconductor", "alpha": 0.3}}
    del d["box"]["interior"]
    scene = jaxrender.load_dict(d)
    assert transport_settings(scene)["type"] == "path"
    # (Mitsuba's prbvolpath needs an AD variant: its volpath renders the same image)
    theirs = mi.load_dict(_to_mitsuba(mi, dict(d, integrator={"type": "volpath", "max_depth": 5})))
    imgs = np.stack([np.asarray(mi.render(theirs, seed=s), np.float64) for s in range(RENDERS)])
    assert disagreements(our_renders(d), {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(RENDERS)}) == []
    foggy = jaxrender.load_dict(medium_scene(integrator=integrator))
    assert transport_settings(foggy) is foggy.integrator


# -- surfaces that let part of the light through -----------------------------------------
GREY8 = str(Path(__file__).resolve().parent / "data" / "textures" / "grey8.png")


def _screen(bsdf) -> dict:
    """A rectangle between the light and the box."""
    return {"type": "rectangle", "to_world": T().translate([0, 1.5, 0]).rotate([1, 0, 0], 90).scale(1.5), "bsdf": bsdf}


def _mask(opacity, reflectance=0.7):
    return {"type": "mask", "opacity": opacity, "bsdf": {"type": "diffuse", "reflectance": reflectance}}


# Shadow rays pass a surface's null transmission (Mitsuba's eval_null_transmission):
# without it they were blocked, and the box and floor under the screen went dark.
PARTLY_NULL = {
    "mask-boundary": lambda d: d["box"].update(bsdf=_mask(0.5)),
    "blend-of-null-screen": lambda d: d.update(screen=_screen(
        {"type": "blendbsdf", "weight": 0.4, "bsdf_0": {"type": "null"}, "bsdf_1": {"type": "diffuse"}})),
    "textured-mask-screen": lambda d: d.update(screen=_screen(_mask({"type": "bitmap", "filename": GREY8}))),
    "twosided-masks-screen": lambda d: d.update(screen=_screen(
        {"type": "twosided", "allow_transmission": True, "bsdf_0": _mask(0.3, rgb(0.8, 0.2, 0.2)),
         "bsdf_1": _mask(0.8)})),
}


def _partly_null_scene(name) -> dict:
    d = medium_scene()
    PARTLY_NULL[name](d)
    return d


@pytest.mark.parametrize("name", sorted(PARTLY_NULL))
def test_surfaces_with_null_components_match_mitsuba(name):
    d = _partly_null_scene(name)
    scene = mi.load_dict(_to_mitsuba(mi, d))
    imgs = np.stack([np.asarray(mi.render(scene, seed=s), np.float64) for s in range(RENDERS)])
    ref = {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(RENDERS)}
    assert disagreements(our_renders(d), ref) == []


@pytest.mark.parametrize("name", ["mask-boundary", "blend-of-null-screen"])
def test_medium_albedo_gradient_through_partly_null_surfaces(name):
    """The derivative kernels trace the same partial shadow transmission:
    the albedo moves no sampling decision (roulette off), so path replay
    with the primal's seed is the derivative of its estimate."""
    d = _partly_null_scene(name)
    d["integrator"].update(type="prbvolpath", max_depth=6, rr_depth=100)
    scene = jaxrender.load_dict(d)
    key = "box.interior_medium.albedo.value.value"
    w = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (SIZE, SIZE, 3)), jnp.float32)

    def loss(x, seed_grad):
        return jnp.sum(jaxrender.render(scene, {key: x}, spp=4, seed=7, seed_grad=seed_grad) * w)

    x0, v, h = jnp.asarray(scene.params[key]), jnp.asarray([1.0, 0.5, -0.3]), 1e-2
    g = float(jnp.vdot(jax.grad(loss)(x0, 7), v))
    fd = (float(loss(x0 + h * v, 0)) - float(loss(x0 - h * v, 0))) / (2 * h)
    assert abs(fd) > 1.0 and abs(g - fd) <= 1e-3 * abs(fd), (g, fd)


def test_null_transmission_parameters_are_not_differentiable():
    """Shadow rays use a mask's opacity without its derivative: asking for
    one is a NotDifferentiableError naming it, not a wrong gradient."""
    d = _partly_null_scene("mask-boundary")
    d["sensor"]["film"].update(width=4, height=4)
    scene = jaxrender.load_dict(d)
    key = "box.bsdf.opacity.value"
    with pytest.raises(jaxrender.NotDifferentiableError, match="opacity.*null component"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(jnp.asarray(scene.params[key]))


# -- closed forms -------------------------------------------------------------------
def slab_scene(sigma_t, albedo, thickness, light="point"):
    """An orthographic camera looking down at a diffuse floor through an
    absorbing slab (y in [1, 1 + thickness]); the floor is lit by a point
    light above the slab, straight over the image centre."""
    d = {"type": "scene", "integrator": {"type": "volpath", "max_depth": 3},
         "sensor": {"type": "orthographic",
                    "to_world": T().look_at(origin=[0, 4, 0], target=[0, 0, 0], up=[0, 0, 1]).scale([0.05, 0.05, 1]),
                    "film": {"type": "hdrfilm", "width": 4, "height": 4, "rfilter": {"type": "box"}},
                    "sampler": {"type": "independent", "sample_count": 256}},
         "floor": {"type": "rectangle", "to_world": T().rotate([1, 0, 0], -90).scale(10),
                   "bsdf": {"type": "diffuse", "reflectance": 0.5}},
         "slab": {"type": "cube", "to_world": T().translate([0, 1 + thickness / 2, 0]).scale([10, thickness / 2, 10]),
                  "bsdf": {"type": "null"},
                  "interior": {"type": "homogeneous", "sigma_t": sigma_t, "albedo": albedo}},
         "light": {"type": "point", "position": [0, 3, 0], "intensity": 9.0}}
    return d


def test_slab_transmittance_is_the_closed_form():
    """Camera ray and shadow ray each cross the slab once: the floor's
    radiance is rho / pi * I / h^2 * exp(-sigma_t d)^2 (cos = 1 at the
    centre), for free-flight sampling and ratio tracking alike."""
    sigma_t, dz = 0.7, 1.0
    scene = jaxrender.load_dict(slab_scene(sigma_t, 0.0, dz))
    imgs = np.stack([np.asarray(jaxrender.render(scene, seed=k), np.float64) for k in range(8)])
    centre = imgs[:, 1:3, 1:3, 0].reshape(8, -1)     # within 0.05 of the axis: cos and 1/h^2 vary < 1e-3
    expected = 0.5 / math.pi * 9.0 / 9.0 * math.exp(-sigma_t * dz) ** 2
    mean, se = centre.mean(), centre.mean(1).std(ddof=1) / math.sqrt(8)
    assert abs(mean - expected) < 4 * se + 2e-3 * expected, (mean, expected, se)
    # control: without the medium it is the unattenuated value, far away
    assert abs(mean - expected / math.exp(-sigma_t * dz) ** 2) > 20 * se


def test_furnace_albedo_one_medium_conserves_light():
    """A non-absorbing medium (any phase function, spectral extinction) in a
    null sphere under a uniform environment of radiance 1: every path
    eventually leaves, so every pixel is 1."""
    d = {"type": "scene", "integrator": {"type": "volpath"},
         "sensor": {"type": "perspective", "fov": 30.0, "to_world": T().look_at(origin=[0, 0, 5], target=[0, 0, 0],
                                                                              up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": 8, "height": 8, "rfilter": {"type": "box"}},
                    "sampler": {"type": "independent", "sample_count": 64}},
         "env": {"type": "constant", "radiance": 1.0},
         "ball": {"type": "sphere", "bsdf": {"type": "null"},
                  "interior": {"type": "homogeneous", "sigma_t": rgb(0.3, 0.6, 0.9), "scale": 4.0, "albedo": 1.0,
                               "phase": {"type": "hg", "g": 0.6}}}}
    img = np.asarray(jaxrender.render(jaxrender.load_dict(d), seed=3), np.float64)
    assert abs(img.mean() - 1.0) < 0.01, img.mean()
    d["ball"]["interior"]["albedo"] = 0.9          # control: absorption loses light
    img = np.asarray(jaxrender.render(jaxrender.load_dict(d), seed=3), np.float64)
    assert img.mean() < 0.9


# -- phase functions ------------------------------------------------------------------
N = 200_000


@functools.cache
def phase_kernel(name):
    t = phase.TYPES[name]

    def body(seed, g):
        u = ir.rng.uniform4(seed.value, ir.item_index(), 0)
        wi = ir.normalize(Vec(0.3, -0.4, 0.8))
        wo, weight, pdf = t.sample(g.value, wi, Vec(u[0], u[1]))
        return {"wo": tuple(wo), "pdf": (pdf, t.eval(g.value, wi, wo), weight)}
    return ir.trace(body, {"seed": ir.Scalar("u32"), "g": ir.Scalar("f32")},
                    {"wo": ir.Out("f32", (3,)), "pdf": ir.Out("f32", (3,))}, name=f"phase_{name}")


@pytest.mark.parametrize("name,g", [("hg", 0.7), ("hg", -0.5), ("hg", 0.0), ("isotropic", 0.0)])
def test_phase_sampling_matches_its_pdf(name, g):
    out = launch(phase_kernel(name), (N,), seed=np.uint32(5), g=np.float32(g))
    wo, (pdf, value, weight) = np.asarray(out["wo"], np.float64), np.asarray(out["pdf"], np.float64).T
    assert np.allclose(pdf, value, rtol=1e-4) and np.allclose(weight, 1.0)
    wi = np.array([0.3, -0.4, 0.8]) / np.linalg.norm([0.3, -0.4, 0.8])
    cos = wo @ wi                                        # the density depends on this cosine only
    edges = np.linspace(-1, 1, 41)
    hist, _ = np.histogram(cos, edges)
    zz = np.linspace(-1, 1, 40 * 64 + 1)
    mid = 0.5 * (zz[1:] + zz[:-1])
    f = np.full_like(mid, 1 / (4 * math.pi)) if name == "isotropic" else \
        (1 - g * g) / (4 * math.pi * (1 + g * g + 2 * g * mid) ** 1.5)
    expected = (2 * math.pi * f * np.diff(zz)).reshape(40, 64).sum(1) * N
    assert abs(expected.sum() / N - 1) < 1e-3
    _, _, z = chi2_reject(hist.astype(float), expected)
    assert z < 4.5, z
    # and Mitsuba's sampled pdf for the same cosines
    if name == "hg":
        ref = mi.load_dict({"type": "hg", "g": g})
        ctx, mei = mi.PhaseFunctionContext(None), mi.MediumInteraction3f()
        mei.wi = mi.Vector3f(*wi)
        mei.sh_frame = mi.Frame3f(mei.wi)
        for w, p in zip(wo[:5], pdf[:5]):
            assert math.isclose(ref.eval_pdf(ctx, mei, mi.Vector3f(*w))[1], p, rel_tol=1e-3)


# -- free flights -----------------------------------------------------------------------
@functools.cache
def flight_kernel():
    def body(seed, channel):
        u = ir.rng.uniform4(seed.value, ir.item_index(), 0)
        majorant = Vec(0.5, 1.5, 3.0)
        t = media.free_flight(majorant, channel.value, u[0])
        limit = ir.Float(0.8)
        collided = t < limit
        weight = media.spectral_ratio(majorant, channel.value, ir.minimum(t, limit), collided)
        return {"t": t, "w": (*weight, ir.select(collided, 1.0, 0.0))}
    return ir.trace(body, {"seed": ir.Scalar("u32"), "channel": ir.Scalar("i32")},
                    {"t": ir.Out("f32"), "w": ir.Out("f32", (4,))}, name="free_flight")


@pytest.mark.parametrize("channel", [0, 2])
def test_free_flights_are_exponential_and_their_weights_unbiased(channel):
    """Distances drawn with a channel's majorant follow m exp(-m t)
    (chi-square over quantile bins), and the spectral ratio weights make
    every channel's estimate of P(pass 0.8) = exp(-0.8 m_c) and of the
    collision density's integral 1 - exp(-0.8 m_c) unbiased."""
    majorant = np.array([0.5, 1.5, 3.0])
    out = launch(flight_kernel(), (N,), seed=np.uint32(9), channel=np.int32(channel))
    t, w = np.asarray(out["t"], np.float64), np.asarray(out["w"], np.float64)
    m = majorant[channel]
    edges = np.append(-np.log1p(-np.linspace(0.0, 1.0, 41)[:-1]) / m, np.inf)   # 40 equally likely bins
    hist, _ = np.histogram(t, edges)
    _, _, z = chi2_reject(hist.astype(float), np.full(40, N / 40))
    assert z < 4.5, z
    collided = w[:, 3] > 0
    for c in range(3):
        # passing: weight exp(-m t) / P(pass); a collision: exp(-m t) / pdf, times m (the
        # collision density), which integrates to 1 - exp(-0.8 m)
        for est, want in ((np.where(~collided, w[:, c], 0.0), math.exp(-0.8 * majorant[c])),
                          (np.where(collided, w[:, c], 0.0) * majorant[c], 1.0 - math.exp(-0.8 * majorant[c]))):
            assert abs(est.mean() - want) < 5 * est.std() / math.sqrt(N), (c, est.mean(), want)


# -- loading -----------------------------------------------------------------------------
def test_params_keys_are_mitsubas():
    d = medium_scene(g=0.3)
    d["fog"] = {"type": "homogeneous", "sigma_t": {"type": "constvolume", "value": rgb(0.1, 0.2, 0.3)},
                "albedo": {"type": "constvolume", "value": 0.9}}
    d["ball"] = {"type": "sphere", "radius": 0.2, "bsdf": {"type": "null"}, "exterior": {"type": "ref", "id": "fog"}}
    ours = jaxrender.load_dict(d).params
    theirs = mi.traverse(mi.load_dict(_to_mitsuba(mi, d)))
    keys = {k for k in theirs.keys() if "medium" in k or k.startswith("fog.")}
    assert keys == {k for k in ours if "medium" in k or k.startswith("fog.")}
    for k in keys:
        assert np.allclose(np.ravel(ours[k]) * np.ones(1), np.ravel(theirs[k]) * np.ones(1), rtol=1e-6), k


@pytest.mark.parametrize("edit,match", [
    (lambda d: d["box"].update(interior={"type": "heterogeneous", "sigma_t": {"type": "gridvolume", "grid": 1}}),
     "a VolumeGrid object is not supported yet"),
    (lambda d: d["box"]["interior"].update(albedo={"type": "gridvolume", "filename": "a.vol"}),
     "'gridvolume' volume is not supported yet"),
    (lambda d: d["box"]["interior"].update(sigma_t=rgb(1.0, 2.0, 3.0)), r"must lie in \[0, 1\]"),
    (lambda d: d["box"]["interior"].update(phase={"type": "hg", "g": 1.0}), r"must lie in \(-1, 1\)"),
    (lambda d: d["box"]["interior"].update(phase={"type": "rayleigh"}), "rayleigh"),
    (lambda d: d["box"].update(inside={"type": "homogeneous"}), "named 'interior' or 'exterior'"),
])
def test_unsupported_media_are_clear_errors(edit, match):
    d = medium_scene()
    edit(d)
    with pytest.raises(SceneError, match=match):
        jaxrender.load_dict(d)


def test_medium_derivatives_where_not_computed_raise_clearly():
    """The path integrator ignores media: a derivative with respect to a
    medium's parameter is an error there, not a silent zero (volpath's
    derivatives: test_media_gradients.py)."""
    d = medium_scene(spp=1, integrator="path")
    d["sensor"]["film"].update(width=4, height=4)
    scene = jaxrender.load_dict(d)
    key = "box.interior_medium.albedo.value.value"
    x = jnp.asarray(scene.params[key])
    with pytest.raises(jaxrender.NotDifferentiableError, match="ignores participating media"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v})))(x)
