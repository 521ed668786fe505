"""The envmap emitter: radiance lookup and data layout against Mitsuba 3,
chi-square test of its direction sampling against its pdf, the pdf's
integral, bad input, and gradients with respect to its texels and scale.

The image against Mitsuba is in test_render_reference.py (env_lit)."""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import emitters, layout
from jaxrender.kernels.emitters.envmap import EnvMap
from jaxrender.primitives import launch
from jaxrender.scene.transform import Transform
from test_gradients import _check_jvp_vjp_dot
from test_sampling import chi2_reject

DATA = Path(__file__).parent / "data" / "textures"
SKY = str(DATA / "sky32x16.exr")
ENV_INPUTS = ("texels", "tex_meta", "emitter_meta", "env_frame", "env_dist")
SCENE_INPUTS = layout.scene_inputs()
LUM = np.array([0.212671, 0.715160, 0.072169])
AXIS = np.array([0.3, 1.0, 0.2]) / np.linalg.norm([0.3, 1.0, 0.2])


def env_scene(to_world=None, size=8, **env):
    T = Transform()
    d = {"type": "scene", "integrator": {"type": "path", "max_depth": 2},
         "sensor": {"type": "perspective", "fov": 50.0,
                    "to_world": T.look_at(origin=[0, 1.5, 1.5], target=[0, 0, 0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}},
         "sky": {"type": "envmap", **({} if "bitmap" in env else {"filename": SKY}), **env},
         "floor": {"type": "rectangle", "to_world": T.rotate([1, 0, 0], -90).scale(3.0),
                   "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.7, 0.6, 0.5]}}}}
    if to_world is not None:
        d["sky"]["to_world"] = to_world
    return d


def env_buffers(scene) -> dict:
    inputs = scene.kernel_inputs()
    return {k: np.asarray(inputs[k]) for k in ENV_INPUTS}


def env_index(scene) -> int:
    return int(np.nonzero(scene.emitter_meta[:, 0] == emitters.TYPE_ID["envmap"])[0][0])


@functools.cache
def eval_kernel(view=EnvMap, buffers=ENV_INPUTS, name="envmap_eval") -> ir.Kernel:
    """Radiance ``v`` and density ``pdf`` of directions ``d`` from the
    kernel-side view ``view(b, emitter)`` of environment emitter ``em``
    (an :class:`EnvMap`, or a sunsky's), reading the scene ``buffers``."""
    def body(d, em, **b):
        i = ir.item_index()
        e = view(b, em.value)
        w = Vec(d.read(i, 0), d.read(i, 1), d.read(i, 2))
        return {"v": tuple(e.eval(w)), "pdf": e.pdf(w)}
    inputs = {k: SCENE_INPUTS[k] for k in buffers}
    inputs.update(d=ir.In("f32", (3,)), em=ir.Scalar("i32"))
    return ir.trace(body, inputs, {"v": ir.Out("f32", (3,)), "pdf": ir.Out("f32")}, name=name)


@functools.cache
def sample_kernel() -> ir.Kernel:
    def body(seed, em, **b):
        i = ir.item_index()
        u = ir.rng.uniform4(seed.value, i, 0)
        e = EnvMap(b, em.value)
        w, pdf = e.sample(u[0], u[1])
        return {"d": tuple(w), "pdf": pdf, "pdf_again": e.pdf(w)}
    inputs = {k: SCENE_INPUTS[k] for k in ENV_INPUTS}
    inputs.update(seed=ir.Scalar("u32"), em=ir.Scalar("i32"))
    return ir.trace(body, inputs, {"d": ir.Out("f32", (3,)), "pdf": ir.Out("f32"), "pdf_again": ir.Out("f32")},
                    name="envmap_sample")


def evaluate(scene, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = launch(eval_kernel(), (len(d),), d=np.asarray(d, np.float32), em=np.int32(env_index(scene)),
                 **env_buffers(scene))
    return np.asarray(out["v"], np.float64), np.asarray(out["pdf"], np.float64)


def sample(scene, n: int, seed: int = 1) -> dict:
    out = launch(sample_kernel(), (n,), seed=np.uint32(seed), em=np.int32(env_index(scene)), **env_buffers(scene))
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def uniform_dirs(r, n):
    d = r.standard_normal((n, 3))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


# ---------------------------------------------------------------------------
# Against Mitsuba
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["exr", "png"])
def test_data_layout_and_radiance_match_mitsuba(source):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    f = SKY if source == "exr" else str(DATA / "albedo16.png")
    T = Transform().rotate(AXIS, 40.0)
    scene = jaxrender.load_dict(env_scene(T, filename=f, scale=1.7))
    e = mi.load_dict({"type": "envmap", "filename": f, "scale": 1.7, "to_world": mi.ScalarTransform4f(T.matrix)})
    p = mi.traverse(e)
    ref_data = np.array(p["data"])
    assert scene.params["sky.data"].shape == ref_data.shape          # (H, W + 2, 3), Mitsuba's halo
    np.testing.assert_allclose(scene.params["sky.data"], ref_data, rtol=1e-6, atol=1e-7)
    assert scene.params["sky.scale"].shape == () and float(scene.params["sky.scale"]) == pytest.approx(1.7)
    d = uniform_dirs(np.random.default_rng(0), 1500)
    ours, ours_pdf = evaluate(scene, d)
    si = mi.SurfaceInteraction3f()
    it, ds = mi.Interaction3f(), mi.DirectionSample3f()
    ref, ref_pdf = [], []
    for q in d:
        si.wi = [-float(q[0]), -float(q[1]), -float(q[2])]
        ref.append(np.array(e.eval(si), np.float64) / 1.7)   # our eval is before scale
        ds.d = [float(v) for v in q]
        ref_pdf.append(e.pdf_direction(it, ds))
    np.testing.assert_allclose(ours, np.array(ref), rtol=2e-5, atol=2e-5)
    # The sampling density is Mitsuba's too (its bilinear warp of the luminance).
    np.testing.assert_allclose(ours_pdf, np.array(ref_pdf), rtol=2e-4)


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------

def expected_weights(img: np.ndarray) -> np.ndarray:
    """Independent model of the sampling density: the luminance of each
    texel times sin(theta) of its row, interpolated bilinearly between the
    texel positions (columns texel-centred and periodic, rows corner
    aligned), normalised to integrate to one over the (u, v) square."""
    h, w, _ = img.shape
    lum = np.maximum(img.astype(np.float64) @ LUM, 0) * np.sin(np.pi * np.arange(h) / (h - 1))[:, None]
    rows = lum[:-1] + lum[1:]
    mass = 0.25 * (rows + np.roll(rows, -1, axis=1)).sum() / (w * (h - 1))
    return lum / mass


def patch_coords(d: np.ndarray, w: int, h: int):
    """(x, y, s, t): the patch of each direction (emitter frame) and the
    position in it."""
    u = (np.arctan2(d[:, 0], -d[:, 2]) / (2 * np.pi)) % 1.0
    px = u * w - 0.5
    x = np.floor(px).astype(int) % w
    py = np.arccos(np.clip(d[:, 1], -1, 1)) / np.pi * (h - 1)
    y = np.clip(np.floor(py).astype(int), 0, h - 2)
    return x, y, px - np.floor(px), np.clip(py - y, 0, 1)


def bilinear_density(f: np.ndarray, x, y, s, t):
    """The model's density on the (u, v) square in patch (x, y) at (s, t)."""
    x1 = (x + 1) % f.shape[1]
    return ((1 - t) * ((1 - s) * f[y, x] + s * f[y, x1]) + t * ((1 - s) * f[y + 1, x] + s * f[y + 1, x1]))


def test_sampling_matches_pdf_chi2():
    """Histogram of N sampled directions (emitter frame) on the patches, each
    cut 2 x 2 in (u, v), against the independent model (a bilinear
    function integrates exactly by the midpoint rule); each sample's pdf is
    the model's, converted to solid angle."""
    scene = jaxrender.load_dict(env_scene())
    n = 400_000
    s = sample(scene, n)
    d = s["d"]
    assert np.allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
    img = scene.params["sky.data"][:, 1:-1]
    h, w, _ = img.shape
    f = expected_weights(img)
    x, y, ps, pt = patch_coords(d, w, h)
    sin_theta = np.sqrt(np.maximum(0, 1 - d[:, 1] ** 2))
    model_pdf = bilinear_density(f, x, y, ps, pt) / (2 * np.pi ** 2 * sin_theta)
    inside = sin_theta > 1e-3
    np.testing.assert_allclose(s["pdf"][inside], model_pdf[inside], rtol=2e-3)
    np.testing.assert_allclose(s["pdf_again"][inside], s["pdf"][inside], rtol=2e-3)
    sx, sy = np.minimum((2 * ps).astype(int), 1), np.minimum((2 * pt).astype(int), 1)
    hist = np.zeros((h - 1, 2, w, 2))
    np.add.at(hist, (y, sy, x, sx), 1)
    X, SY, Y, SX = np.meshgrid(np.arange(w), [0, 1], np.arange(h - 1), [0, 1], indexing="ij")
    mid = bilinear_density(f, X, Y, (SX + 0.5) / 2, (SY + 0.5) / 2) / (4 * w * (h - 1))
    expected = mid.transpose(2, 1, 0, 3) * n                  # (y, sy, x, sx)
    assert abs(expected.sum() - n) < 1e-6 * n
    _, _, z = chi2_reject(hist.ravel(), expected.ravel())
    assert z < 4.5
    # Control: the same histogram against a density uniform in (u, v) is rejected.
    assert chi2_reject(hist.ravel(), np.full(hist.size, n / hist.size))[2] > 4.5


def test_pdf_integrates_to_one_and_rotates_with_the_map():
    T = Transform().rotate(AXIS, 65.0)
    scene = jaxrender.load_dict(env_scene(T))
    # Midpoint rule on a fine (cos theta, phi) grid of the world sphere.
    nz, nphi = 400, 800
    z = -1 + (np.arange(nz) + 0.5) * 2 / nz
    phi = (np.arange(nphi) + 0.5) * 2 * np.pi / nphi
    Z, P = np.meshgrid(z, phi, indexing="ij")
    r = np.sqrt(1 - Z ** 2)
    d = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3)
    v, pdf = evaluate(scene, d)
    integral = pdf.sum() * (2 / nz) * (2 * np.pi / nphi)
    assert abs(integral - 1.0) < 2e-3, integral
    # Rotating the map rotates the density and the radiance with it.
    plain = jaxrender.load_dict(env_scene())
    v0, pdf0 = evaluate(plain, d @ T.matrix[:3, :3])      # world d -> emitter frame: R^T d
    # The kernel rotates in float32, the test in float64: a direction within
    # rounding distance of a texel edge may look up either texel (1 of the
    # 320000 did with the inline atan2/acos of lowering/vmath.py).
    close_pdf = np.isclose(pdf, pdf0, rtol=1e-4, atol=1e-6 * pdf0.max())
    close_v = np.isclose(v, v0, rtol=1e-4, atol=1e-5).all(axis=-1)
    assert (~close_pdf).sum() <= 8 and (~close_v).sum() <= 8, ((~close_pdf).sum(), (~close_v).sum())
    # Samples of the rotated map are rotated samples of the plain one.
    a, b = sample(scene, 1000, seed=7), sample(plain, 1000, seed=7)
    np.testing.assert_allclose(a["d"], b["d"] @ T.matrix[:3, :3].T, atol=2e-5)


def test_black_map_samples_the_whole_sphere():
    """A black map is sampled as a uniformly bright one: a density close to
    uniform (exactly sin(theta) interpolated over sin(theta)), consistent
    with pdf(), and a black image."""
    scene = jaxrender.load_dict(env_scene(bitmap=np.zeros((4, 8, 3), np.float32)))
    s = sample(scene, 2000)
    inside = np.abs(s["d"][:, 1]) < 0.999
    assert np.all((s["pdf"][inside] > 0.8 / (4 * np.pi)) & (s["pdf"][inside] < 1.25 / (4 * np.pi)))
    np.testing.assert_allclose(s["pdf_again"][inside], s["pdf"][inside], rtol=1e-4)
    assert float(np.asarray(jaxrender.render(scene, spp=2)).max()) == 0.0


# ---------------------------------------------------------------------------
# Rendering and bad input
# ---------------------------------------------------------------------------

def test_background_and_hide_emitters():
    T = Transform().rotate([0, 1, 0], 20.0)
    d = env_scene(T, size=8)
    d.pop("floor")
    d["floor"] = {"type": "rectangle", "to_world": Transform().translate([0, -50, 0]).rotate([1, 0, 0], -90)}
    scene = jaxrender.load_dict(d)
    img = np.asarray(jaxrender.render(scene, spp=1), np.float64)
    # Camera rays (box filter, one sample) see the map itself, bilinear, times scale.
    assert img.min() > 0
    d["integrator"]["hide_emitters"] = True
    hidden = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=1))
    assert float(hidden.max()) == 0.0


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["sky"].update(filename="/nope/sky.exr"), "sky.filename: image file '/nope/sky.exr' not found"),
    (lambda d: d["sky"].pop("filename"), "sky: an envmap needs exactly one of 'filename' and 'bitmap'"),
    (lambda d: (d["sky"].pop("filename"), d["sky"].update(bitmap=np.ones((2, 8, 3), np.float32))),
     "sky: the environment map must be at least 2 x 3 pixels"),
    (lambda d: d["sky"].update(to_world=Transform().scale([1.0, 2.0, 1.0])),
     "sky: to_world of an envmap must be a rotation"),
    (lambda d: d["sky"].update(scale=[1.0, 2.0]), "sky.scale: expected a finite float"),
    (lambda d: d.update(sky2={"type": "constant"}), "sky2: only one environment emitter is supported"),
    (lambda d: d.update(sky2={"type": "envmap", "filename": SKY}), "sky2: only one environment emitter is supported"),
])
def test_bad_envmap_input_is_a_scene_error(edit, message):
    d = env_scene()
    edit(d)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_wrong_envmap_data_shape_is_a_scene_error():
    scene = jaxrender.load_dict(env_scene())
    with pytest.raises(jaxrender.SceneError, match=re.escape("parameter 'sky.data' must have shape (16, 34, 3)")):
        jaxrender.render(scene, {"sky.data": np.zeros((16, 32, 3), np.float32)}, spp=1)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

SPP = 16


def test_envmap_gradients_match_finite_differences():
    """Direct lighting (max_depth 2) is linear in the texels. Perturbations
    that keep each texel's luminance leave the sampling tables unchanged, so
    for one seed central differences are exact up to rounding; the halo
    columns get no gradient (Mitsuba refreshes them from the image)."""
    scene = jaxrender.load_dict(env_scene(Transform().rotate([0, 1, 0], 25.0), size=8))
    key = "sky.data"
    x0 = jnp.asarray(scene.params[key])
    loss = lambda x: jnp.mean(jaxrender.render(scene, {key: x}, spp=SPP, seed=0, seed_grad=0))
    g = np.asarray(jax.grad(loss)(x0), np.float64)
    assert np.all(g[:, 0] == 0) and np.all(g[:, -1] == 0)
    assert np.abs(g).max() > 0
    mag = np.abs(g[..., 0] * LUM[1] - g[..., 1] * LUM[0])
    order = np.argsort(-mag.ravel())
    h = 0.5
    for i in order[[0, 3, 20, 60]]:
        y, x = np.unravel_index(i, mag.shape)
        dx = np.zeros(x0.shape, np.float32)
        dx[y, x, :2] = [LUM[1], -LUM[0]]                    # luminance-neutral
        fd = (float(loss(x0 + h * dx)) - float(loss(x0 - h * dx))) / (2 * h)
        an = float(np.sum(g * dx))
        assert abs(fd - an) <= 1e-3 * abs(an) + 5e-7, ((y, x), fd, an)   # 5e-7: float32 loss rounding
    # The scale does not move the sampling tables either.
    skey = "sky.scale"
    s0 = jnp.asarray(scene.params[skey])
    sloss = lambda s: jnp.mean(jaxrender.render(scene, {skey: s}, spp=SPP, seed=0, seed_grad=0))
    gs = float(jax.grad(sloss)(s0))
    fd = (float(sloss(s0 + 0.1)) - float(sloss(s0 - 0.1))) / 0.2
    assert gs > 0 and abs(fd - gs) <= 1e-4 * gs


def test_envmap_dot_product_test():
    scene = jaxrender.load_dict(env_scene(size=8))
    key = "sky.data"
    x0 = jnp.asarray(scene.params[key])
    f = lambda x: jaxrender.render(scene, {key: x}, spp=4, seed=0, seed_grad=5)
    lhs = _check_jvp_vjp_dot(f, x0, (8, 8, 3), seed=8)
    assert math.isfinite(lhs) and lhs != 0.0


def test_envmap_gradient_in_expectation_when_sampling_moves():
    """A perturbation that changes luminance also changes the sampling tables
    (they follow the data): finite differences then differ per seed from
    the detached-sampling gradient, but agree in expectation."""
    from test_textures import compare_in_expectation
    scene = jaxrender.load_dict(env_scene(Transform().rotate([0, 1, 0], 25.0), size=8))
    v = np.zeros(scene.params["sky.data"].shape, np.float32)
    v[3:5, 8:10] = 1.0          # the sun (image columns 7, 8 sit at data columns 8, 9)
    compare_in_expectation(scene, "sky.data", v, spp=16, spp_fd=64, h=0.5)


def test_the_sampling_tables_are_built_once_for_unchanged_values():
    """A render without new values reuses the tables built from the loaded
    ones (rebuilding them was most of a small render's time with a large
    map); a new value rebuilds them, and the loaded values are read-only,
    so the kept tables cannot go stale."""
    scene = jaxrender.load_dict(env_scene())
    first = scene.kernel_inputs()
    assert scene.kernel_inputs()["env_dist"] is first["env_dist"]
    assert scene.kernel_inputs()["texels"] is first["texels"]
    data = scene.params["sky.data"]
    with pytest.raises(ValueError, match="read-only"):
        data[0, 0, 0] = 1.0
    brighter = data * np.float32(2.0)
    moved = scene.kernel_inputs({"sky.data": brighter})
    assert not np.array_equal(moved["texels"], first["texels"])
    np.testing.assert_allclose(np.asarray(jaxrender.render(scene, {"sky.data": brighter}, spp=4, seed=3)),
                               2 * np.asarray(jaxrender.render(scene, spp=4, seed=3)), rtol=1e-5, atol=1e-6)
    again = scene.kernel_inputs()
    assert np.array_equal(again["env_dist"], first["env_dist"]) and np.array_equal(again["texels"], first["texels"])
