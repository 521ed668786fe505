"""The film against Mitsuba 3: reconstruction filter values, splatting (the
noise of an image at equal samples, not only its mean), crop windows with
and without border sampling, and pixel formats with alpha.

Mitsuba's film splats every sample into all pixels its filter reaches and
divides by the summed weights; a film that instead draws each sample's
position from the filter has the same mean but several times the per-pixel
variance (5.6x with the default Gaussian): the variance test tells the two
apart.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.kernels import layout
from jaxrender.kernels.sensors import film as film_kernels, filters
from jaxrender.primitives import launch
from jaxrender.scene.camera import filter_constants
from test_scene_parsing import to_mitsuba

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

FILTERS = [({"type": "box"}, "box", ()),
           ({"type": "tent"}, "tent", (("radius", 1.0),)),
           ({"type": "tent", "radius": 1.7}, "tent", (("radius", 1.7),)),
           ({"type": "gaussian"}, "gaussian", (("stddev", 0.5),)),
           ({"type": "gaussian", "stddev": 0.8}, "gaussian", (("stddev", 0.8),)),
           ({"type": "lanczos"}, "lanczos", (("lobes", 3),)),
           ({"type": "lanczos", "lobes": 2}, "lanczos", (("lobes", 2),)),
           ({"type": "mitchell"}, "mitchell", (("B", 1 / 3), ("C", 1 / 3))),
           ({"type": "mitchell", "B": 0.5, "C": 0.25}, "mitchell", (("B", 0.5), ("C", 0.25))),
           ({"type": "catmullrom"}, "catmullrom", ())]


@functools.cache
def _filter_kernel():
    """The kernels' filter (``film.filter_weights``) at distances ``x``."""
    inputs = {"x": ir.In("f32"), **{k: layout.scene_inputs()[k]
                                    for k in ("filter_kind", "filter_radius", "filter_a", "filter_b")}}

    def body(x, **b):
        ctx = SimpleNamespace(b=b)
        return {"w": film_kernels.filter_weights(ctx, [x[ir.item_index()]])[0]}
    return ir.trace(body, inputs, {"w": ir.Out("f32")}, name="test_filter_weights")


@pytest.mark.parametrize("spec,kind,params", FILTERS, ids=[str(f[0]) for f in FILTERS])
def test_filter_values_and_radius_match_mitsuba(spec, kind, params):
    """Mitsuba's filter against ``filters.value`` (the host's, in double)
    and the kernels' (the same code in the kernel language, float32)."""
    f = mi.load_dict(spec)
    radius, shape = filter_constants(kind, params)
    assert radius == pytest.approx(f.radius(), abs=1e-4)
    x = np.linspace(-radius - 0.5, radius + 0.5, 301) + 1.234e-3    # off the support's ends
    theirs = np.array([f.eval(float(v)) for v in x])
    ours = filters.value(kind, radius, shape, x)
    # Mitsuba's CPU Gaussian is a polynomial fit of exp: 8e-4 from ours.
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
    kernel = launch(_filter_kernel(), (len(x),), x=x.astype(np.float32),
                    filter_kind=np.int32(filters.KINDS.index(kind)), filter_radius=np.float32(radius),
                    filter_a=np.float32(shape[0]), filter_b=np.float32(shape[1]))
    # (float32: the cubics cancel to ~4e-7 near their zeros)
    np.testing.assert_allclose(np.asarray(kernel["w"]), ours, rtol=1e-5, atol=1e-6)


def _scene(size=24, **film):
    d = jaxrender.cornell_box()
    d["sensor"]["film"].update(width=size, height=size, **film)
    d["integrator"] = {"type": "path", "max_depth": 3}
    return d


def _stack(renders):
    return np.stack([np.asarray(r, np.float64) for r in renders])


def _ours_renders(d, spp, n, seed0=0):
    scene = jaxrender.load_dict(d)
    return _stack(jaxrender.render(scene, spp=spp, seed=seed0 + k) for k in range(n))


def _mitsuba_renders(d, spp, n, seed0=0):
    scene = mi.load_dict(to_mitsuba(mi, d))
    return _stack(mi.render(scene, spp=spp, seed=seed0 + k) for k in range(n))


def _agree(ours, theirs, z_max=5.0):
    """Per-pixel means agree within their combined standard errors, and so
    does the whole image's mean."""
    se = np.sqrt(ours.var(0, ddof=1) / len(ours) + theirs.var(0, ddof=1) / len(theirs)) + 1e-4
    z = (ours.mean(0) - theirs.mean(0)) / se
    assert np.mean(np.abs(z) > z_max) < 0.01, np.abs(z).max()
    m_o, m_t = ours.mean(axis=(1, 2)), theirs.mean(axis=(1, 2))
    se_m = np.sqrt(m_o.var(0, ddof=1) / len(m_o) + m_t.var(0, ddof=1) / len(m_t)) + 1e-6
    assert np.all(np.abs(m_o.mean(0) - m_t.mean(0)) < z_max * se_m), (m_o.mean(0), m_t.mean(0))


@pytest.mark.parametrize("rfilter", [{"type": "gaussian"}, {"type": "tent"}, {"type": "lanczos"}])
def test_pixel_noise_equals_mitsubas_at_equal_samples(rfilter):
    """Splatting: the per-pixel variance over seeds is Mitsuba's (importance
    sampling the filter instead gives 3.5x with tent, 5.6x with the
    Gaussian), and the images agree within noise."""
    d = _scene(rfilter=rfilter)
    ours, theirs = _ours_renders(d, 4, 12), _mitsuba_renders(d, 4, 12, seed0=50)
    _agree(ours, theirs)
    ratio = ours.var(0, ddof=1).mean() / theirs.var(0, ddof=1).mean()
    assert 0.75 < ratio < 1.33, ratio


@pytest.mark.parametrize("film", [
    dict(crop_offset_x=3, crop_offset_y=5, crop_width=11, crop_height=9),
    dict(crop_offset_x=3, crop_offset_y=5, crop_width=11, crop_height=9, sample_border=True),
    dict(sample_border=True, rfilter={"type": "mitchell"}),
], ids=["crop", "crop_border", "border_mitchell"])
def test_crop_window_and_border_sampling_match_mitsuba(film):
    d = _scene(**film)
    ours, theirs = _ours_renders(d, 16, 6), _mitsuba_renders(d, 16, 6, seed0=50)
    assert ours.shape == theirs.shape
    _agree(ours, theirs)


def test_crop_window_is_that_region_of_the_full_image():
    """With border sampling a crop window sees exactly what the whole film
    sees there (without it, its edge pixels lose the samples outside)."""
    full = _ours_renders(_scene(), 16, 6).mean(0)[5:14, 3:14]
    crop = _ours_renders(_scene(crop_offset_x=3, crop_offset_y=5, crop_width=11, crop_height=9,
                                sample_border=True), 16, 6, seed0=20)
    se = crop.std(0, ddof=1) / np.sqrt(len(crop)) * np.sqrt(2) + 1e-4
    assert np.mean(np.abs(crop.mean(0) - full) > 5 * se) < 0.01


@pytest.mark.parametrize("fmt,channels", [("rgba", 4), ("luminance", 1), ("luminance_alpha", 2),
                                          ("xyz", 3), ("xyza", 4)])
def test_pixel_formats_match_mitsuba(fmt, channels):
    d = _scene(pixel_format=fmt)
    d["sensor"]["fov"] = 70.0      # sees past the box: alpha 0 there
    ours, theirs = _ours_renders(d, 16, 6), _mitsuba_renders(d, 16, 6, seed0=50)
    assert ours.shape[-1] == theirs.shape[-1] == channels
    _agree(ours, theirs)
    if fmt.endswith("a"):
        alpha = ours.mean(0)[..., -1]
        assert alpha.min() == 0.0 and alpha.max() == 1.0


def test_alpha_and_luminance_gradients_are_those_of_the_rgb_image():
    """Luminance is linear in RGB, alpha does not depend on materials."""
    import jax
    import jax.numpy as jnp
    key = "red.reflectance.value"
    scenes = {fmt: jaxrender.load_dict(_scene(12, pixel_format=fmt)) for fmt in ("rgb", "luminance_alpha")}
    x0 = jnp.asarray(scenes["rgb"].params[key])
    y = jnp.asarray([0.212671, 0.715160, 0.072169])

    def loss(fmt, x):
        img = jaxrender.render(scenes[fmt], {key: x}, spp=4, seed=1)
        return jnp.sum(img @ y) if fmt == "rgb" else jnp.sum(img[..., 0]) + jnp.sum(img[..., 1])
    g_rgb = np.asarray(jax.grad(lambda x: loss("rgb", x))(x0))
    g_la = np.asarray(jax.grad(lambda x: loss("luminance_alpha", x))(x0))
    np.testing.assert_allclose(g_la, g_rgb, rtol=1e-4, atol=1e-6)
    assert np.all(np.abs(g_rgb) > 1e-3)


@pytest.mark.parametrize("film,match", [
    (dict(crop_offset_x=20, crop_width=8), "invalid crop window"),
    (dict(crop_width=0), "invalid crop window"),
    (dict(component_format="float16"), "component_format 'float16' is not supported"),
    (dict(rfilter={"type": "lanczos", "lobes": 0}), "lobes"),
    (dict(rfilter={"type": "catmullrom", "radius": 1.0}), "radius"),
])
def test_bad_film_settings_raise(film, match):
    with pytest.raises(jaxrender.SceneError, match=match):
        jaxrender.load_dict(_scene(**film))


def test_pixel_format_other_than_rgb_with_an_aov_integrator_raises():
    d = _scene(pixel_format="rgba")
    d["integrator"] = {"type": "aov", "aovs": "d:depth"}
    scene = jaxrender.load_dict(d)
    with pytest.raises(jaxrender.SceneError, match="pixel_format 'rgba' with an aov integrator is not supported"):
        jaxrender.render(scene, spp=1)


def test_film_weights_kernel_is_shared_by_scene_structures_and_integrators():
    """The film's weights read only the film and the sampler: scenes that
    differ elsewhere share one kernel (and so one compile)."""
    from jaxrender.kernels.context import Structure
    from jaxrender.kernels.integrators import PathIntegrator, VolpathIntegrator

    def graph(integrator, **fields):
        k = integrator.weights_kernel(Structure(**fields))
        return k.text

    plain = graph(PathIntegrator(), footprint=5)
    assert graph(PathIntegrator(), footprint=5, envmap=True, analytic=True, sensor="thinlens", instanced=True,
                 bsdfs=("diffuse",), delta_lights=True) == plain
    assert graph(VolpathIntegrator(), footprint=5) == plain
    assert graph(PathIntegrator(), footprint=3) != plain
    assert graph(PathIntegrator(), footprint=5, sampler="stratified") != plain


@pytest.mark.parametrize("rfilter, crop", [({"type": "gaussian"}, {}),
                                           ({"type": "tent"}, {"crop_offset_x": 3, "crop_offset_y": 2,
                                                               "crop_width": 7, "crop_height": 5}),
                                           ({"type": "lanczos"}, {"sample_border": True})])
def test_expected_film_weights_are_the_weight_kernels_mean(rfilter, crop, monkeypatch):
    """``film.expected_weights`` (what the boundary term of camera and
    geometry derivatives is divided by) is the mean over seeds of the
    weights the film divides an image's sums by, per pixel, at the crop
    window's borders too; and for the tent filter (radius 1) the closed
    form: per axis 0.75 + 0.125 + 0.125 in the interior, 0.875 at the
    samples' edge."""
    from jaxrender.primitives import render_rules
    from jaxrender.primitives.film import expected_weights
    seen = []

    def capture(config, inputs):
        seen.append((config, inputs))
        raise StopIteration
    monkeypatch.setattr(render_rules, "render", capture)
    d = {"type": "scene", "ball": {"type": "sphere"},
         "sensor": {"type": "perspective", "film": {"type": "hdrfilm", "width": 12, "height": 9, "rfilter": rfilter,
                                                    **crop}}}
    scene = jaxrender.load_dict(d)
    with pytest.raises(StopIteration):
        jaxrender.render(scene, spp=64)
    config, inputs = seen[0]
    weights = []
    for s in range(48):
        w = render_rules._film_weights(config, dict(inputs, seed=np.uint32(s)))
        weights.append(np.asarray(render_rules.crop_canvas(render_rules.splat_canvas(
            w, *config.film.grid, config.film.footprint, 1), config.film)))
    measured = np.mean(weights, axis=0) / 64.0
    expected = np.asarray(expected_weights(config.film))
    assert expected.shape == measured.shape == (*config.film.crop, 1)
    spread = np.std(weights, axis=0) / 64.0 / np.sqrt(len(weights))
    assert np.all(np.abs(measured - expected) < 5.0 * spread + 1e-4), np.abs(measured - expected).max()
    if rfilter["type"] == "tent":
        # (the crop window without a border: its edges are the samples' too)
        assert np.allclose(expected[1:-1, 1:-1], 1.0, atol=1e-5)
        assert abs(float(expected[0, 0, 0]) - 0.875 ** 2) < 1e-5
