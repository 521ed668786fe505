"""The sunsky emitter (Mitsuba 3.9.1's Hosek-Wilkie sun and sky, RGB):
radiance against Mitsuba's ``eval``, the sun's position from a date and
place, images against Mitsuba renders within Monte Carlo noise, its sampling
against its pdf (chi-square), parameter keys and bad input."""
from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.kernels import emitters, layout
from jaxrender.kernels.emitters.sunsky import Sunsky
from jaxrender.primitives import launch
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform as T
from test_render_reference import disagreements
from test_envmap import eval_kernel
from test_sampling import chi2_reject
from test_shapes import _to_mitsuba

mi = pytest.importorskip("mitsuba")
SKY_INPUTS = ("texels", "tex_meta", "emitter_meta", "emitter_geom", "emitter_frame", "env_frame", "env_dist")
SCENE_INPUTS = layout.scene_inputs()
PARIS_EVENING = dict(year=2024, month=6, day=21, hour=20.0, minute=15.0, latitude=48.85, longitude=2.35, timezone=2.0)

# Emitters the tests render and evaluate: sun and sky at several elevations,
# turbidities and albedos, the sun from a date and place, sky only.
SUNSKIES = {
    "high_sun": {"sun_direction": [0.3, 0.2, 0.8]},
    "evening": {**PARIS_EVENING, "turbidity": 6.0, "albedo": {"type": "rgb", "value": [0.2, 0.5, 0.8]},
                "to_world": T().rotate([0, 0, 1], 30.0)},
    "sky_only": {"sun_direction": [-0.5, 0.4, 0.35], "sun_scale": 0.0, "turbidity": 2.0, "albedo": 0.8,
                 "sky_scale": 1.5},
    "wide_sun": {"sun_direction": [0.6, -0.3, 0.3], "sun_aperture": 4.0, "turbidity": 9.5, "sky_scale": 0.5,
                 "sun_scale": 0.7, "to_world": T().rotate([1, 0, 0], 15.0)},
    "complex_sun": {"sun_direction": [-0.2, 0.5, 0.4], "complex_sun": True, "sun_aperture": 3.0,
                    "turbidity": 4.5},
}


@pytest.fixture(autouse=True, scope="module")
def _scalar_variant():
    mi.set_variant("scalar_rgb")


def scene_dict(size=16, spp=32, **sky) -> dict:
    """A diffuse floor (z up, as the sunsky's frame) and a sphere under the sky."""
    def rgb(*v):
        return {"type": "diffuse", "reflectance": {"type": "rgb", "value": list(v)}}
    return {"type": "scene", "integrator": {"type": "path", "max_depth": 3},
            "sensor": {"type": "perspective", "fov": 60.0,
                       "to_world": T().look_at(origin=[0, -3, 1.2], target=[0, 0, 0.3], up=[0, 0, 1]),
                       "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}},
                       "sampler": {"type": "independent", "sample_count": spp}},
            "sky": {"type": "sunsky", **sky},
            "floor": {"type": "rectangle", "to_world": T().scale(3.0), "bsdf": rgb(0.5, 0.5, 0.5)},
            "ball": {"type": "sphere", "center": [0, 0, 0.5], "radius": 0.5, "bsdf": rgb(0.7, 0.4, 0.2)}}


def mitsuba_emitter(sky: dict):
    return mi.load_dict(_to_mitsuba(mi, {"type": "sunsky", **sky}))


# ---------------------------------------------------------------------------
# Radiance and density, kernel side
# ---------------------------------------------------------------------------

@functools.cache
def sample_kernel() -> ir.Kernel:
    def body(u, em, **b):
        i = ir.item_index()
        s = Sunsky(b, em.value)
        w, pdf = s.sample(u.read(i, 0), u.read(i, 1), u.read(i, 2))
        return {"d": tuple(w), "pdf": pdf}
    inputs = {k: SCENE_INPUTS[k] for k in SKY_INPUTS}
    inputs.update(u=ir.In("f32", (3,)), em=ir.Scalar("i32"))
    return ir.trace(body, inputs, {"d": ir.Out("f32", (3,)), "pdf": ir.Out("f32")}, name="sunsky_sample")


def sky_buffers(scene, params=None) -> dict:
    inputs = scene.kernel_inputs(params)
    em = int(np.nonzero(scene.emitter_meta[:, 0] == emitters.TYPE_ID["sunsky"])[0][0])
    return dict(em=np.int32(em), **{k: np.asarray(inputs[k]) for k in SKY_INPUTS})


def evaluate(scene, d: np.ndarray, params=None) -> tuple[np.ndarray, np.ndarray]:
    out = launch(eval_kernel(Sunsky, SKY_INPUTS, "sunsky_eval"), (len(d),), d=np.asarray(d, np.float32),
                 **sky_buffers(scene, params))
    return np.asarray(out["v"], np.float64), np.asarray(out["pdf"], np.float64)


def mitsuba_eval(emitter, d: np.ndarray) -> np.ndarray:
    """Mitsuba's radiance arriving from directions ``d`` (its ``eval`` at
    an interaction whose wi points back)."""
    si = mi.SurfaceInteraction3f()
    ref = []
    for q in np.asarray(d, np.float32):
        si.wi = [-float(v) for v in q]
        ref.append(np.array(emitter.eval(si), np.float64))
    return np.array(ref)


def assert_radiance_close(ours: np.ndarray, ref: np.ndarray) -> None:
    """Within 2e-3 of each direction's brightest channel (the sun is 1e5
    times the sky: a tolerance relative to the largest value would hide the
    sky's errors)."""
    excess = np.abs(ours - ref) / (2e-3 * np.abs(ref).max(axis=1, keepdims=True) + 1e-7)
    worst = excess.max(axis=1).argmax()
    assert excess.max() <= 1.0, (worst, ours[worst], ref[worst])


def around(axis: np.ndarray, angle: float, n: int, rng) -> np.ndarray:
    """``n`` directions at ``angle`` (radians) from ``axis``, random azimuths."""
    a = axis / np.linalg.norm(axis)
    t = np.cross(a, [1.0, 0.0, 0.0] if abs(a[0]) < 0.9 else [0.0, 1.0, 0.0])
    t /= np.linalg.norm(t)
    phi = rng.uniform(0, 2 * np.pi, n)[:, None]
    lateral = np.cos(phi) * t + np.sin(phi) * np.cross(a, t)
    return math.cos(angle) * a + math.sin(angle) * lateral


@pytest.mark.parametrize("name", sorted(SUNSKIES))
def test_radiance_matches_mitsuba_eval(name):
    """Random directions, directions near the sun (its glow) and inside its
    cone: our lookup equals Mitsuba's ``eval`` (both in single precision)."""
    sky = SUNSKIES[name]
    scene = jaxrender.load_dict(scene_dict(4, 1, **sky))
    e = mitsuba_emitter(sky)
    sun = np.asarray(scene.params["sky.sun_direction"], np.float64)
    rng = np.random.default_rng(3)
    d = rng.standard_normal((300, 3))
    half = math.radians(sky.get("sun_aperture", 0.5358) / 2)
    d = np.concatenate([d / np.linalg.norm(d, axis=1, keepdims=True), around(sun, 0.5 * half, 10, rng),
                        around(sun, 0.9 * half, 10, rng), around(sun, 3 * half, 20, rng), around(sun, 0.1, 20, rng)])
    ours, _ = evaluate(scene, d)
    ref = mitsuba_eval(e, d)
    assert np.count_nonzero(ref.max(1) > 0) > 150
    if sky.get("sun_scale", 1.0) > 0:
        assert ref[300:320].min() > 10 * ref[320:].max()      # the sun's cone is seen
    assert_radiance_close(ours, ref)


def test_sun_position_from_date_and_place_matches_mitsuba():
    for when in (PARIS_EVENING, {}, dict(latitude=-33.9, longitude=18.4, timezone=2.0, month=12, day=1, hour=9.5),
                 dict(year=1999, month=2, day=28, hour=12.0, minute=30.0, second=15.0, latitude=64.1,
                      longitude=-21.9, timezone=0.0)):
        scene = jaxrender.load_dict(scene_dict(4, 1, **when))
        ref = np.array(mi.traverse(mitsuba_emitter(when))["sun_direction"], np.float64)
        np.testing.assert_allclose(scene.params["sky.sun_direction"], ref, atol=2e-5)   # (parallax: 4e-5)


def test_sampling_density_is_the_pdf():
    """Sampled directions carry the density ``pdf`` gives them, and the sun
    cone gets its share of samples."""
    scene = jaxrender.load_dict(scene_dict(4, 1, **SUNSKIES["high_sun"]))
    u = np.random.default_rng(0).random((4000, 3), dtype=np.float32)
    out = launch(sample_kernel(), (len(u),), u=u, **sky_buffers(scene))
    d, pdf = np.asarray(out["d"], np.float64), np.asarray(out["pdf"], np.float64)
    _, again = evaluate(scene, d)
    np.testing.assert_allclose(pdf, again, rtol=1e-4)
    sun = np.asarray(scene.params["sky.sun_direction"])
    sky_prob = float(scene.emitter_frame[0, layout.FRAME_SKY_PROB])
    in_sun = np.mean(d @ sun > math.cos(math.radians(0.5358 / 2) * 1.001))
    assert 0.05 < sky_prob < 0.95 and in_sun == pytest.approx(1 - sky_prob, abs=0.03)


@pytest.mark.parametrize("part, sky", [
    ("sky", {"sun_direction": [-0.5, 0.4, 0.35], "sun_scale": 0.0, "turbidity": 8.0}),
    ("sun", {"sun_direction": [0.2, 0.5, 0.5], "sky_scale": 0.0, "sun_aperture": 20.0}),
])
def test_sampling_matches_pdf_chi2(part, sky):
    """Chi-square of the sky's samples over the sphere and of the (widened)
    sun's over its cone against the pdf integrated over each cell."""
    scene = jaxrender.load_dict(scene_dict(4, 1, **sky))
    n = 200_000
    u = np.random.default_rng(1).random((n, 3), dtype=np.float32)
    out = launch(sample_kernel(), (n,), u=u, **sky_buffers(scene))
    d = np.asarray(out["d"], np.float64)
    axis = np.asarray(scene.params["sky.sun_direction"]) if part == "sun" else np.array([0.0, 0.0, 1.0])
    cos_min = math.cos(math.radians(10.0 * 1.02)) if part == "sun" else -1.0
    t = np.cross(axis, [1.0, 0.0, 0.0])
    t /= np.linalg.norm(t)
    frame = np.stack([t, np.cross(axis, t), axis])
    local = d @ frame.T
    assert np.all(local[:, 2] >= cos_min)
    nz, nphi, sub = 16, 32, 12
    z_edges, phi_edges = np.linspace(cos_min, 1.0, nz + 1), np.linspace(-math.pi, math.pi, nphi + 1)
    hist, _, _ = np.histogram2d(local[:, 2], np.arctan2(local[:, 1], local[:, 0]), bins=[z_edges, phi_edges])
    zz = cos_min + (np.arange(nz * sub) + 0.5) * (1.0 - cos_min) / (nz * sub)
    pp = -math.pi + (np.arange(nphi * sub) + 0.5) * 2 * math.pi / (nphi * sub)
    Z, P = np.meshgrid(zz, pp, indexing="ij")
    r = np.sqrt(np.maximum(0.0, 1.0 - Z * Z))
    _, q = evaluate(scene, np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3) @ frame)
    cell = (1.0 - cos_min) / (nz * sub) * 2 * math.pi / (nphi * sub)
    expected = (q.reshape(Z.shape) * cell).reshape(nz, sub, nphi, sub).sum((1, 3))
    assert expected.sum() == pytest.approx(1.0, abs=0.01)
    _, _, z = chi2_reject(hist.ravel(), expected.ravel() * n)
    assert z < 4.5


# ---------------------------------------------------------------------------
# Images against Mitsuba
# ---------------------------------------------------------------------------

def mitsuba_image(d: dict, renders: int = 8, spp: int = 256) -> dict:
    """Mean and standard error of Mitsuba's pixels. Many samples: Mitsuba
    rarely samples a wide sun (its sky/sun choice divides the sun's share by
    the cone's area), so its pixels' errors are heavy-tailed at few samples."""
    scene = mi.load_dict(_to_mitsuba(mi, d))
    imgs = np.stack([np.asarray(mi.render(scene, seed=s, spp=spp), np.float64) for s in range(renders)])
    return {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(renders)}


def our_renders(d: dict, renders: int = 4) -> np.ndarray:
    scene = jaxrender.load_dict(d)
    return np.stack([np.asarray(jaxrender.render(scene, seed=20 + k), np.float64) for k in range(renders)])


@pytest.mark.parametrize("name", sorted(SUNSKIES))
def test_image_matches_mitsuba_within_noise(name):
    d = scene_dict(**SUNSKIES[name])
    ref = mitsuba_image(d)
    renders = our_renders(d)
    assert np.all(np.isfinite(renders)) and renders.mean() > 0.01
    assert disagreements(renders, ref) == []


def test_image_with_other_emitters_matches_mitsuba():
    """Beside a point light and an area light (emitters chosen uniformly)."""
    d = scene_dict(**SUNSKIES["sky_only"])
    d["lamp"] = {"type": "point", "position": [1.0, -1.0, 1.5], "intensity": 3.0}
    d["panel"] = {"type": "sphere", "center": [-1.2, 0.8, 0.4], "radius": 0.3,
                  "emitter": {"type": "area", "radiance": 2.0}}
    assert disagreements(our_renders(d), mitsuba_image(d)) == []


def test_a_wrong_sky_is_detected():
    """Control for the comparison: a turbidity off by 0.5 is seen."""
    ref = mitsuba_image(scene_dict(**SUNSKIES["sky_only"]))
    assert disagreements(our_renders(scene_dict(**{**SUNSKIES["sky_only"], "turbidity": 2.5})), ref) != []


# ---------------------------------------------------------------------------
# Parameters and bad input
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["high_sun", "evening"])
def test_params_keys_and_values_are_mitsubas(name):
    sky = SUNSKIES[name]
    scene = jaxrender.load_dict(scene_dict(4, 1, **sky))
    ours = {k.removeprefix("sky."): v for k, v in scene.params.items() if k.startswith("sky.")}
    theirs = mi.traverse(mitsuba_emitter(sky))
    # (jaxrender's emitters all take sampling_weight = 1 and do not expose it)
    assert set(ours) == set(theirs.keys()) - {"sampling_weight"}
    for k, v in ours.items():
        ref = theirs[k]
        # (a drjit Vector3f has a "matrix" attribute too: test for a transform's own)
        ref = np.array(ref.matrix if hasattr(ref, "inverse_transpose") else
                       [ref.x, ref.y, ref.z] if hasattr(ref, "x") else ref, np.float64)
        np.testing.assert_allclose(v, np.broadcast_to(ref, np.shape(v)), rtol=1e-5, atol=5e-5, err_msg=k)


XML = """<scene version="3.0.0">
    <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/>
        <integer name="height" value="4"/></film></sensor>
    <shape type="rectangle"/>
    <emitter type="sunsky" id="sky">
        <integer name="year" value="2021"/>
        <float name="hour" value="17.5"/>
        <float name="turbidity" value="4"/>
        <rgb name="albedo" value="0.1, 0.2, 0.3"/>
        <boolean name="complex_sun" value="true"/>
        <transform name="to_world"><rotate z="1" angle="40"/></transform>
    </emitter>
</scene>"""


def test_xml_scene_loads_as_in_mitsuba(tmp_path):
    path = tmp_path / "sky.xml"
    path.write_text(XML)
    ours = jaxrender.load_file(str(path)).params
    theirs = mi.traverse(mi.load_file(str(path)))
    assert {k for k in ours if k.startswith("sky.")} == {k for k in theirs.keys() if k.startswith("sky.")} - {
        "sky.sampling_weight"}
    assert ours["sky.year"] == 2021 and ours["sky.hour"] == 17.5
    sun = theirs["sky.sun_direction"]
    np.testing.assert_allclose(ours["sky.sun_direction"], [sun.x, sun.y, sun.z], atol=2e-5)


@pytest.mark.parametrize("name, change", [
    ("high_sun", {"turbidity": 6.5, "albedo.value": [0.1, 0.4, 0.9], "sun_direction": [-0.4, 0.1, 0.5],
                  "sky_scale": 0.7}),
    ("evening", {"hour": 18.0, "day": 3, "latitude": 40.0, "to_world": T().rotate([0, 0, 1], -20.0).matrix}),
    ("complex_sun", {"sun_scale": 0.4, "turbidity": 2.0, "to_world": T().rotate([1, 0, 0], 10.0).matrix,
                     "sun_direction": [0.1, 0.6, 0.5]}),
])
def test_changed_params_render_as_a_scene_loaded_with_them(name, change):
    """As Mitsuba's parameters_changed: a render given new sunsky values
    rebuilds the sky (the same image as loading them, same seed)."""
    scene = jaxrender.load_dict(scene_dict(8, 4, **SUNSKIES[name]))
    # (float32 values: a render's reach the builder as float32, a loader's as given)
    change = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in change.items()}
    params = {f"sky.{k}": v for k, v in change.items()}
    props = {k.removesuffix(".value"): v.tolist() for k, v in change.items()}
    reloaded = jaxrender.load_dict(scene_dict(8, 4, **{**SUNSKIES[name], **props}))
    changed = np.asarray(jaxrender.render(scene, params, seed=4))
    np.testing.assert_array_equal(changed, np.asarray(jaxrender.render(reloaded, seed=4)))
    assert not np.array_equal(changed, np.asarray(jaxrender.render(scene, seed=4)))


@pytest.mark.parametrize("name", ["high_sun", "evening"])
def test_changed_to_world_turns_the_sky_as_mitsuba_does(name):
    """A new to_world alone: Mitsuba keeps the sun's local direction (the
    sun turns with the sky, whether it came from sun_direction or a date)."""
    sky = SUNSKIES[name]
    scene = jaxrender.load_dict(scene_dict(4, 1, **sky))
    e = mitsuba_emitter(sky)
    to_world = T().rotate([1, 0, 0], 30.0).rotate([0, 0, 1], 50.0).matrix
    p = mi.traverse(e)
    p["to_world"] = mi.ScalarTransform4f(to_world.tolist())
    p.update()
    old = np.asarray(scene.params["sky.to_world"])[:3, :3]
    sun = to_world[:3, :3] @ old.T @ np.asarray(scene.params["sky.sun_direction"])
    rng = np.random.default_rng(9)
    d = rng.standard_normal((200, 3))
    d = np.concatenate([d / np.linalg.norm(d, axis=1, keepdims=True),
                        around(sun, 0.5 * math.radians(0.5358 / 2), 10, rng)])
    ours, _ = evaluate(scene, d, {"sky.to_world": np.asarray(to_world, np.float64)})
    ref = mitsuba_eval(e, d)
    assert ref[200:].min() > 1e3                     # the turned sun is where Mitsuba has it
    assert_radiance_close(ours, ref)


@pytest.mark.parametrize("name, key, value, message", [
    ("high_sun", "turbidity", 11.0, "sky.turbidity: must be in [1, 10]"),
    ("high_sun", "albedo.value", [0.2, 1.2, 0.2], "sky.albedo: must be in [0, 1] per channel"),
    ("high_sun", "sun_direction", [0.0, 0.0, 0.0], "sky.sun_direction: must be a nonzero vector"),
    ("high_sun", "to_world", np.diag([1.0, 2.0, 1.0, 1.0]), "sky: to_world of a sunsky must be a rotation"),
    ("evening", "sun_direction", [0.0, 0.0, 1.0], "'sky.sun_direction' is read-only: the sun follows the date"),
    ("evening", "month", 2.5, "sky.month: expected an integer"),
])
def test_bad_changed_params_raise(name, key, value, message):
    scene = jaxrender.load_dict(scene_dict(4, 1, **SUNSKIES[name]))
    with pytest.raises(SceneError, match=re.escape(message)):
        jaxrender.render(scene, {f"sky.{key}": np.asarray(value, np.float64)})


def test_traced_sunsky_params_raise():
    scene = jaxrender.load_dict(scene_dict(4, 1, **SUNSKIES["high_sun"]))
    with pytest.raises(SceneError, match="'sky.turbidity': a sunsky's parameters are read with numpy"):
        jax.jit(lambda t: jaxrender.render(scene, {"sky.turbidity": t}))(jnp.float32(3.0))


@pytest.mark.parametrize("props, message", [
    ({"turbidity": 0.5}, "sky.turbidity: must be in [1, 10]"),
    ({"turbidity": 11.0}, "sky.turbidity: must be in [1, 10]"),
    ({"sun_scale": -1.0}, "sky.sun_scale: must be nonnegative"),
    ({"sky_scale": -0.1}, "sky.sky_scale: must be nonnegative"),
    ({"sun_aperture": 0.0}, "sky.sun_aperture: must be in (0, 180) degrees"),
    ({"sun_aperture": 180.0}, "sky.sun_aperture: must be in (0, 180) degrees"),
    ({"albedo": 1.5}, "sky.albedo: must be in [0, 1] per channel"),
    ({"albedo": {"type": "bitmap", "filename": "x.png"}}, "sky.albedo: 'bitmap' values are not supported"),
    ({"complex_sun": 1}, "sky.complex_sun: expected a boolean"),
    ({"sun_direction": [0, 0, 1], "hour": 12.0}, "sky.sun_direction: give either sun_direction or the date"),
    ({"sun_direction": [0, 0, 0]}, "sky.sun_direction: must be a nonzero vector"),
    ({"to_world": T().scale([1.0, 2.0, 1.0])}, "sky: to_world of a sunsky must be a rotation"),
    ({"year": 2010.5}, "sky.year: expected an integer"),
    ({"colour": 1.0}, "colour"),
])
def test_bad_properties_raise(props, message):
    with pytest.raises(SceneError, match=re.escape(message)):
        jaxrender.load_dict(scene_dict(4, 1, **props))


def test_second_environment_is_refused():
    d = scene_dict(4, 1)
    d["env"] = {"type": "constant"}
    with pytest.raises(SceneError, match="only one environment emitter"):
        jaxrender.load_dict(d)


def test_surface_gradient_under_sunsky_matches_finite_differences():
    """The sunsky's radiance (the complex sun's too) sits in the
    differentiable shading: the floor's reflectance gradient equals central
    differences of the primal with the same random numbers."""
    scene = jaxrender.load_dict(scene_dict(8, 8, **SUNSKIES["complex_sun"]))
    key = "floor.bsdf.reflectance.value"
    x0 = jnp.asarray(scene.params[key])

    def loss(x):
        return jnp.sum(jaxrender.render(scene, {key: x}, seed=3, seed_grad=3))

    g = np.asarray(jax.grad(loss)(x0))
    eps = 0.02
    fd = np.array([(loss(x0.at[c].add(eps)) - loss(x0.at[c].add(-eps))) / (2 * eps) for c in range(3)])
    assert np.all(g > 1.0)
    np.testing.assert_allclose(g, fd, rtol=1e-3)


def test_sun_below_the_horizon_is_black_as_in_mitsuba():
    with pytest.warns(UserWarning, match="below the horizon"):
        scene = jaxrender.load_dict(scene_dict(8, 4, sun_direction=[0.3, 0.2, -0.1]))
    assert np.all(np.asarray(jaxrender.render(scene)) == 0)
