"""Colour variants: mono and spectral rendering from the same kernels.

What we compare with, that we did not write:
* Mitsuba 3 images of the same scenes in its mono (``llvm_ad_mono``) and
  spectral (``scalar_spectral``) variants (tests/data/references, made by
  tests/references/make_references.py), judged against Monte Carlo noise
  as tests/test_render_reference.py does;
* Mitsuba's stored parameter values (a mono colour is its luminance);
* central finite differences with common random numbers for gradients,
  and the dot-product test between the forward and adjoint kernels.
The rgb variant's images are pinned by the rest of the suite.
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import NotDifferentiableError, SceneError
from jaxrender.scene import spectra, variants

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "references"))

from scenes import COLOR_VARIANTS  # noqa: E402
from test_render_reference import disagreements  # noqa: E402

OUR_SPP, OUR_RENDERS = 64, 8


def our_renders(name: str, scale: float = 1.0) -> np.ndarray:
    variant, make = COLOR_VARIANTS[name]
    scene = jaxrender.load_dict(make(jaxrender.cornell_box()), variant=variant)
    return scale * np.stack([np.asarray(jaxrender.render(scene, spp=OUR_SPP, seed=100 + k), np.float64)
                             for k in range(OUR_RENDERS)])


@pytest.mark.parametrize("name", sorted(COLOR_VARIANTS))
def test_matches_mitsuba_within_noise(name):
    ref = np.load(HERE / "data" / "references" / f"{name}.npz")
    renders = our_renders(name)
    assert renders.shape[1:] == ref["mean"].shape     # mono: one channel, as Mitsuba's film
    assert np.all(np.isfinite(renders))
    assert disagreements(renders, ref) == []


def test_a_wrong_spectral_image_is_detected():
    """Control: rendering the spectral Cornell box as rgb (what a missing
    variant would give) or 3% too bright disagrees with Mitsuba's spectral image."""
    ref = np.load(HERE / "data" / "references" / "spectral_cbox.npz")
    assert disagreements(our_renders("spectral_cbox", 1.03), ref) != []
    _, make = COLOR_VARIANTS["spectral_cbox"]
    scene = jaxrender.load_dict(make(jaxrender.cornell_box()), variant="rgb")
    rgb = np.stack([np.asarray(jaxrender.render(scene, spp=OUR_SPP, seed=100 + k), np.float64)
                    for k in range(OUR_RENDERS)])
    assert disagreements(rgb, ref) != []


# ---------------------------------------------------------------------------
# Choosing a variant
# ---------------------------------------------------------------------------

def test_set_variant_and_load_argument():
    assert jaxrender.variants() == ["mono", "rgb", "spectral", "mono_polarized", "spectral_polarized"]
    assert jaxrender.variant() == "rgb"
    try:
        jaxrender.set_variant("mono")
        assert jaxrender.variant() == "mono"
        assert jaxrender.load_dict(jaxrender.cornell_box()).variant == "mono"
        # the argument wins over the selected variant
        assert jaxrender.load_dict(jaxrender.cornell_box(), variant="spectral").variant == "spectral"
    finally:
        jaxrender.set_variant("rgb")
    assert jaxrender.load_dict(jaxrender.cornell_box()).variant == "rgb"


@pytest.mark.parametrize("name, says", [("llvm_ad_spectral", "use 'spectral'"), ("rgb_polarized", "no rgb_polarized"),
                                        ("llvm_ad_spectral_polarized", "use 'spectral_polarized'"),
                                        ("grey", "one of mono, rgb, spectral, mono_polarized, spectral_polarized")])
def test_unknown_or_unimplemented_variants_raise(name, says):
    with pytest.raises(SceneError, match=says):
        jaxrender.set_variant(name)
    with pytest.raises(SceneError, match=says):
        jaxrender.load_dict(jaxrender.cornell_box(), variant=name)
    assert jaxrender.variant() == "rgb"


def test_mono_parameters_are_luminances_as_in_mitsuba():
    """Mitsuba's mono traverse shows one value per colour, the Rec. 709
    luminance of the RGB value (llvm_ad_mono: red 0.155201; the named
    conductor Au: eta 0.402895, k 2.66884)."""
    scene = jaxrender.load_dict(COLOR_VARIANTS["mono_conductors"][1](jaxrender.cornell_box()), variant="mono")
    assert scene.params["red.reflectance.value"].shape == (1,)
    np.testing.assert_allclose(scene.params["red.reflectance.value"], [0.155201], rtol=1e-5)
    np.testing.assert_allclose(scene.params["large-box.bsdf.eta.value"], [0.402895], rtol=1e-5)
    np.testing.assert_allclose(scene.params["large-box.bsdf.k.value"], [2.66884], rtol=1e-5)


def test_spectral_parameters_are_model_coefficients():
    """As Mitsuba's spectral traverse: a reflectance's value is the three
    coefficients of its upsampled spectrum; Mitsuba 3.9.1 stores red
    (0.570068, 0.0430135, 0.0443706) as (0.000136671, -0.133598, 30.4047)."""
    scene = jaxrender.load_dict(jaxrender.cornell_box(), variant="spectral")
    red = scene.params["red.reflectance.value"]
    lam = np.linspace(360.0, 830.0, 95)
    np.testing.assert_allclose(spectra.eval_coeffs(red, lam),
                               spectra.eval_coeffs(np.array([0.000136671, -0.133598, 30.4047]), lam), atol=0.01)
    # an RGB light: coefficients of rgb / s, s = 2 max(rgb), and the D65 flag
    light = scene.params["light.emitter.radiance.value"]
    assert light.shape == (5,) and light[3] == pytest.approx(2 * 18.387) and light[4] == 1.0


def _floor_bitmap(**kw):
    return lambda d: d["floor"].update(bsdf={"type": "roughconductor", "alpha": {
        "type": "bitmap", "bitmap": np.full((4, 4, 3), 0.3, np.float32), **kw}})


@pytest.mark.parametrize("variant, edit, says", [
    ("spectral", lambda d: d["floor"].update(bsdf={"type": "conductor", "eta": {"type": "rgb", "value": [0.2, 0.5, 1.4]},
                                                   "k": 3.0}), "unbounded"),
    ("spectral", lambda d: d["large-box"].update(bsdf={"type": "null"}, interior={
        "type": "heterogeneous", "sigma_t": {"type": "gridvolume", "data": np.ones((2, 2, 2, 3), np.float32)}}),
     "RGB extinction in the spectral variant"),
    ("mono", lambda d: d.update(sky={"type": "sunsky"}), "sunsky"),
    ("spectral", _floor_bitmap(), "give raw=true"),
    ("spectral", lambda d: d["floor"].update(bsdf={"type": "diffuse", "reflectance": {
        "type": "bitmap", "raw": True, "bitmap": np.full((4, 4, 3), 0.3, np.float32)}}), "raw bitmap used as a colour"),
])
def test_what_a_variant_cannot_render_yet_is_an_error(variant, edit, says):
    d = jaxrender.cornell_box()
    edit(d)
    with pytest.raises(SceneError, match=says):
        jaxrender.render(jaxrender.load_dict(d, variant=variant), spp=1)


def test_a_raw_colour_bitmap_for_a_float_is_fine_in_spectral():
    d = jaxrender.cornell_box()
    _floor_bitmap(raw=True)(d)
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 8
    assert np.all(np.isfinite(np.asarray(jaxrender.render(jaxrender.load_dict(d, variant="spectral"), spp=2))))


@pytest.mark.parametrize("spectrum, says", [
    ({"type": "spectrum", "filename": "/nonexistent/x.spd"}, "cannot read the spectrum file"),
    ({"type": "spectrum", "value": [(500, 0.2), (400, 0.5)]}, "wavelengths must increase"),
    ({"type": "spectrum", "value": [(400, 0.2), (500, float("nan"))]}, "finite"),
])
@pytest.mark.parametrize("variant", ["rgb", "spectral"])
def test_bad_tabulated_spectra_are_errors(variant, spectrum, says):
    d = jaxrender.cornell_box()
    d["floor"]["bsdf"] = {"type": "diffuse", "reflectance": spectrum}
    with pytest.raises(SceneError, match=says):
        jaxrender.load_dict(d, variant=variant)


def test_a_malformed_spd_file_is_an_error(tmp_path):
    bad = tmp_path / "bad.spd"
    bad.write_text("# comment\n400 0.5\n450 0.6 0.7\n")
    d = jaxrender.cornell_box()
    d["floor"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "spectrum", "filename": str(bad)}}
    with pytest.raises(SceneError, match="bad.spd:3"):
        jaxrender.load_dict(d, variant="spectral")


def test_named_conductors_in_spectral_are_measured_spectra():
    """eta and k of a named conductor are its measured curves, those
    Mitsuba's spectral variant holds (its traverse: wavelengths and values),
    not an upsampled RGB colour."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_spectral")
    d = jaxrender.cornell_box()
    d["floor"]["bsdf"] = {"type": "conductor", "material": "Au"}
    scene = jaxrender.load_dict(d, variant="spectral")
    theirs = mi.traverse(mi.load_dict({"type": "conductor", "material": "Au"}))
    lam = spectra.CURVE_WAVELENGTHS
    for part in ("eta", "k"):
        stored = scene.params[f"floor.bsdf.{part}.value"]
        assert stored[0] == variants.TABULATED and stored[2] == 1.0
        expected = np.interp(lam, np.array(theirs[f"{part}.wavelengths"]), np.array(theirs[f"{part}.values"]))
        np.testing.assert_allclose(scene.spectral_curves[int(stored[1])], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

def _cbox(variant, size=8):
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    d["integrator"] = {"type": "path", "max_depth": 4, "rr_depth": 100}
    return jaxrender.load_dict(d, variant=variant)


@pytest.mark.parametrize("variant, key, components", [
    ("mono", "red.reflectance.value", (0,)),
    ("spectral", "red.reflectance.value", (0, 1, 2)),
    ("spectral", "light.emitter.radiance.value", (1, 3)),
])
def test_gradient_matches_finite_differences(variant, key, components):
    """Same random numbers (seed_grad == seed, no roulette): PRB's gradient
    is the derivative of the primal estimator, so it equals central
    differences to their accuracy. Spectral values are coefficients (and the
    light's scale): the path's wavelengths come from the same seed."""
    scene = _cbox(variant)
    h_, w_ = scene.camera.height, scene.camera.width
    weights = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (h_, w_, 1 if variant == "mono" else 3)),
                          jnp.float32)
    x0 = jnp.asarray(scene.params[key], jnp.float32)

    def loss(x, seed_grad):
        return jnp.sum(weights * jaxrender.render(scene, {key: x}, spp=4, seed=7, seed_grad=seed_grad))

    g = np.asarray(jax.grad(loss)(x0, 7))
    for c in components:
        h = 1e-3 * abs(float(x0[c]))      # (the coefficients span 1e-4 to 30; c0 multiplies lambda^2)
        e = jnp.zeros_like(x0).at[c].set(h)
        fd = (float(loss(x0 + e, 0)) - float(loss(x0 - e, 0))) / (2 * h)
        assert abs(fd) > 1e-3 * (1 + abs(g[c])), (c, fd)
        assert abs(g[c] - fd) <= 1e-2 * abs(fd) + 1e-4, (c, g[c], fd)


def test_spectral_forward_and_adjoint_are_transposes():
    """Dot-product test: <J t, w> from forward mode equals <t, J^T w> from
    the adjoint, for the same seed."""
    scene = _cbox("spectral")
    key = "green.reflectance.value"
    x0 = jnp.asarray(scene.params[key], jnp.float32)
    f = lambda x: jaxrender.render(scene, {key: x}, spp=2, seed=3, seed_grad=3)
    t = jnp.asarray([1e-4, -2e-2, 0.5], jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(8, 8, 3)), jnp.float32)
    _, jt = jax.jvp(f, (x0,), (t,))
    _, pullback = jax.vjp(f, x0)
    (jtw,) = pullback(w)
    a, b = float(jnp.sum(jt * w)), float(jnp.dot(t, jtw))
    assert abs(a - b) <= 1e-3 * max(abs(a), abs(b)), (a, b)


def test_camera_gradients_in_mono_and_spectral_follow_rgb():
    """A grey Cornell box lit by a white (D65) light looks the same in every
    variant, so its camera derivative (the boundary kernels and the camera's
    motion in the path kernels) does too: mono exactly (one channel, the
    same paths), spectral up to its wavelength noise (the same paths: the
    wavelengths have their own sampler dimension)."""
    def grey_box(variant):
        d = jaxrender.cornell_box()
        d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 12
        for k, v in (("white", 0.6), ("red", 0.3), ("green", 0.8)):
            d[k]["reflectance"] = v
        d["light"]["emitter"]["radiance"] = {"type": "rgb", "value": [10.0, 10.0, 10.0]}
        d["integrator"] = {"type": "path", "max_depth": 3}
        return jaxrender.load_dict(d, variant=variant)

    key = "sensor.to_world"
    grads = {}
    for variant in ("rgb", "mono", "spectral"):
        scene = grey_box(variant)
        m0 = jnp.asarray(scene.params[key])
        loss = lambda t: jnp.sum(jaxrender.render(scene, {key: m0.at[0, 3].add(t[0]).at[1, 3].add(t[1])},
                                                  spp=32, seed=1, seed_grad=2))
        grads[variant] = np.asarray(jax.grad(loss)(jnp.zeros(2)))
    rgb = grads["rgb"]
    assert np.all(np.abs(rgb) > 2.0), rgb
    np.testing.assert_allclose(grads["mono"] * 3.0, rgb, rtol=2e-3)     # (rgb sums three equal channels)
    np.testing.assert_allclose(grads["spectral"], rgb, rtol=0.1)

def test_spectral_kernels_use_the_wavelength_tables():
    """The film converts with the CIE tables the scene module builds: a
    white furnace (unit-radiance D65 light seen directly) is white."""
    d = {"type": "scene", "integrator": {"type": "path"},
         "sensor": {"type": "perspective", "film": {"type": "hdrfilm", "width": 4, "height": 4,
                                                    "rfilter": {"type": "box"}}},
         "env": {"type": "constant", "radiance": {"type": "rgb", "value": [1.0, 1.0, 1.0]}},
         "speck": {"type": "sphere", "center": [0, 0, -100], "radius": 0.01}}
    img = np.asarray(jaxrender.render(jaxrender.load_dict(d, variant="spectral"), spp=4096))
    np.testing.assert_allclose(img.mean(axis=(0, 1)), [1.0, 1.0, 1.0], atol=6e-3)
    assert variants.spectral_tables().shape == (95, 5)


def test_spectral_texture_gradient_matches_finite_differences():
    """A spectral bitmap's texels are coefficients; the gradient of a loss
    with respect to them (through the per-texel decode and the
    interpolation) equals central differences with the same random numbers."""
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 8
    d["integrator"] = {"type": "path", "max_depth": 3, "rr_depth": 100}
    rgb = np.random.default_rng(3).uniform(0.1, 0.9, (4, 4, 3)).astype(np.float32)
    d["back"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "bitmap", "bitmap": rgb}}
    scene = jaxrender.load_dict(d, variant="spectral")
    key = "back.bsdf.reflectance.data"
    x0 = jnp.asarray(scene.params[key])
    assert x0.shape == (4, 4, 3)
    loss = lambda x, sg: jnp.sum(jaxrender.render(scene, {key: x}, spp=4, seed=5, seed_grad=sg))
    g = np.asarray(jax.grad(loss)(x0, 5))
    for idx in [(1, 2, 1), (2, 1, 2)]:           # a texel's c1 and c2
        h = 1e-3 * abs(float(x0[idx]))
        e = jnp.zeros_like(x0).at[idx].set(h)
        fd = (float(loss(x0 + e, 0)) - float(loss(x0 - e, 0))) / (2 * h)
        assert abs(fd) > 1e-4, (idx, fd)
        assert abs(g[idx] - fd) <= 2e-2 * abs(fd) + 1e-4, (idx, g[idx], fd)


def test_spectral_medium_gradients():
    """prbvolpath in spectral: the albedo's coefficients (they move no
    sampling decision) against central differences with the same random
    numbers, and the dot-product test of forward and adjoint over the
    medium's parameters (a float extinction, its coefficients, scale, g)."""
    from test_media_gradients import SIZE, scene_dict
    d = scene_dict(sigma_t=1.5)
    scene = jaxrender.load_dict(d, variant="spectral")
    key = "box.interior_medium.albedo.value.value"
    keys = [k for k in scene.params if k.startswith("box.interior_medium.")]
    assert key in keys and scene.params["box.interior_medium.sigma_t.value.value"].shape == (1,)
    w = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (SIZE, SIZE, 3)), jnp.float32)
    x0 = jnp.asarray(scene.params[key])
    loss = lambda x, sg: jnp.sum(w * jaxrender.render(scene, {key: x}, spp=4, seed=7, seed_grad=sg))
    g = np.asarray(jax.grad(loss)(x0, 7))
    for c in (1, 2):
        h = 1e-3 * abs(float(x0[c]))
        e = jnp.zeros(3).at[c].set(h)
        fd = (float(loss(x0 + e, 0)) - float(loss(x0 - e, 0))) / (2 * h)
        assert abs(fd) > 1e-3, (c, fd)
        assert abs(g[c] - fd) <= 1e-2 * abs(fd) + 1e-4, (c, g[c], fd)
    x = {k: jnp.asarray(scene.params[k]) for k in keys}
    f = lambda p: jaxrender.render(scene, p, spp=4, seed=3, seed_grad=5)
    r = np.random.default_rng(1)
    dx = {k: jnp.asarray(r.standard_normal(np.shape(v)) * 1e-2 * (1e-3 + np.abs(v)), jnp.float32)
          for k, v in x.items()}
    dy = jnp.asarray(r.standard_normal((SIZE, SIZE, 3)), jnp.float32)
    _, t = jax.jvp(f, (x,), (dx,))
    (gx,) = jax.vjp(f, x)[1](dy)
    lhs, rhs = float(jnp.vdot(t, dy)), sum(float(jnp.vdot(dx[k], gx[k])) for k in keys)
    assert abs(lhs) > 1e-2 and abs(lhs - rhs) <= 1e-3 * abs(lhs), (lhs, rhs)


@pytest.mark.parametrize("variant", ["mono", "spectral"])
def test_a_bsdf_plugin_works_in_every_variant(variant):
    """A BSDF written in the kernel language (a Lambertian, with
    ``plugins.black``) renders in mono and spectral what the built-in
    diffuse BSDF renders: the same image for the same seed."""
    import math
    from jaxrender import ir, plugins
    from jaxrender.kernels import sampling

    def eval_(p, wi, wo):
        return ir.select((wi.z > 0.0) & (wo.z > 0.0), p.albedo * (wo.z / math.pi), plugins.black())

    def pdf(p, wi, wo):
        return ir.select((wi.z > 0.0) & (wo.z > 0.0), sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)

    def sample(p, wi, u1, u2):
        wo = sampling.square_to_cosine_hemisphere(u2)
        weight = ir.select((wi.z > 0.0) & (wo.z > 0.0), p.albedo, plugins.black())
        return wo, sampling.square_to_cosine_hemisphere_pdf(wo), weight, ir.Bool(False)

    plugins.register_bsdf("variant_matte", [plugins.Param("albedo", plugins.COLOR, 0.5)], eval_, pdf, sample,
                          albedo="albedo", replace=True)
    try:
        def scene(kind):
            d = jaxrender.cornell_box()
            d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 16
            colour = {"type": "rgb", "value": [0.2, 0.7, 0.3]}
            d["back"]["bsdf"] = {"type": kind, **({"albedo": colour} if kind == "variant_matte" else
                                                  {"reflectance": colour})}
            return jaxrender.load_dict(d, variant=variant)
        ours = np.asarray(jaxrender.render(scene("variant_matte"), spp=8, seed=2))
        builtin = np.asarray(jaxrender.render(scene("diffuse"), spp=8, seed=2))
        np.testing.assert_allclose(ours, builtin, rtol=1e-4, atol=1e-6)
    finally:
        from jaxrender.kernels.bsdfs import registry
        registry.TYPES.pop("variant_matte", None)
        for hook in registry._on_change:
            hook()


@pytest.mark.parametrize("name", ["mono_aovs", "spectral_aovs", "spectral_polarized_aovs"])
def test_aovs_match_mitsuba_in_mono_and_spectral(name):
    """The aov integrator: geometry channels as in rgb, the albedo as
    Mitsuba writes it (a mono value in all three channels, a spectrum
    through the film's conversion), against Mitsuba's aov in that variant
    (judged as tests/test_aov.py does; uv is 0 until jaxrender has UVs).
    The spectral albedo's green channel is nearly noiseless (the wavelength
    density follows y-bar), which exposes a 0.1-0.2% difference in the
    conversion (Mitsuba normalises y-bar with a constant 0.1% off its own
    5 nm table's integral, which we integrate to exactly 1, and its
    coefficient table is 64^3 to our 48^3): the albedo is compared with that
    allowance."""
    from scenes import COLOR_AOV_VARIANTS
    from test_aov import NAMES, UV, disagreements as aov_disagreements
    variant, make = COLOR_AOV_VARIANTS[name]
    scene = jaxrender.load_dict(make(jaxrender.cornell_box()), variant=variant)
    renders = np.stack([np.asarray(jaxrender.render(scene, spp=64, seed=10 + i), np.float64) for i in range(16)])
    ref = np.load(HERE / "data" / "references" / f"{name}.npz")
    assert renders.shape[1:] == ref["mean"].shape
    albedo = [NAMES.index(n) for n in ("al.R", "al.G", "al.B")]
    geometry = [c for c in range(len(NAMES)) if c not in UV + albedo]
    assert aov_disagreements(renders, ref, geometry) == []

    def albedo_off(images) -> float:
        ours, mean = images.mean(0)[..., albedo], ref["mean"][..., albedo].astype(np.float64)
        se = np.sqrt(ref["stderr"][..., albedo].astype(np.float64) ** 2 + images.var(0, ddof=1)[..., albedo] / 16)
        return float(np.mean(np.abs(ours - mean) > 5 * se + 3e-3 * np.abs(mean) + 1e-4))

    assert albedo_off(renders) < 0.02
    assert albedo_off(renders * np.where(np.isin(np.arange(len(NAMES)), albedo), 1.03, 1.0)) > 0.2


def test_mono_refuses_xyz_films_and_texture_plugins():
    """What mono cannot honour raises before any work: an xyz film (Mitsuba's
    mono film writes luminance) and a texture plugin (its texels are RGB)."""
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["pixel_format"] = "xyz"
    with pytest.raises(SceneError, match="pixel_format 'xyz' in the mono variant"):
        jaxrender.render(jaxrender.load_dict(d, variant="mono"), spp=1)
    from jaxrender import plugins
    from jaxrender.kernels import textures
    plugins.register_texture("variant_tint", [plugins.Param("color", plugins.COLOR, 0.5)], lambda p, uv: p.color,
                             replace=True)
    try:
        d = jaxrender.cornell_box()
        d["back"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "variant_tint"}}
        assert jaxrender.load_dict(d).variant == "rgb"          # (the plugin itself loads)
        with pytest.raises(SceneError, match="texture plugin 'variant_tint' in the mono variant"):
            jaxrender.load_dict(d, variant="mono")
    finally:
        textures.PLUGINS.pop("variant_tint", None)
        for hook in textures._on_change:
            hook()
