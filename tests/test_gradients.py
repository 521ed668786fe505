"""Gradients through render: forward mode, the PRB / RB adjoints, and the JAX contract.

What we compare with, that we did not write:
* central finite differences of the primal renderer. Where sampling does
  not depend on the parameter and Russian roulette is off, the derivative
  kernels with ``seed_grad == seed`` differentiate exactly the estimator the
  primal evaluates, so they must match finite differences to FD accuracy.
  Otherwise (roughness, lobe selection, roulette) the detached-sampling
  gradient and finite differences are different unbiased estimators of the
  same derivative: we compare their means over independent seeds against
  the standard error of the difference;
* linear algebra: the adjoint must be the transpose of the forward kernel
  (dot-product test) and linear in the cotangent; PRB and unbiased RB must
  agree sample by sample.
"""
from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.kernels.integrators import base as integrator_base
from jaxrender.lowering import stats
from jaxrender.primitives.render_rules import NotDifferentiableError
from jaxrender.scene.transform import Transform as T

MESHES = Path(__file__).resolve().parent / "data" / "meshes"


def cbox(size=8, **integrator):
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    d["integrator"] = {"type": "path", "max_depth": 5, **integrator}
    return d


def material_cbox(size=8, **integrator):
    """Cornell box whose boxes are a GGX rough conductor and a plastic, plus a glass panel."""
    d = cbox(size, **integrator)
    d["small-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.3}
    d["large-box"]["bsdf"] = {"type": "plastic", "diffuse_reflectance": {"type": "rgb", "value": [0.2, 0.5, 0.7]}}
    d["glass"] = {"type": "rectangle", "to_world": T().translate([0.0, -0.2, 0.6]).scale([0.3, 0.3, 0.3]),
                  "bsdf": {"type": "dielectric"}}
    return d


def highlight_scene(alpha=0.15, size=8):
    """A GGX floor reflecting a small area light towards the camera: the image
    depends strongly on roughness."""
    return {
        "type": "scene",
        "integrator": {"type": "path", "max_depth": 2},
        "sensor": {"type": "perspective", "fov": 30,
                   "to_world": T().look_at(origin=[0, 1.5, 3], target=[0, 0, 0], up=[0, 1, 0]),
                   "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}},
        "floor": {"type": "rectangle", "to_world": T().rotate([1, 0, 0], -90).scale([2, 2, 2]),
                  "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": alpha}},
        "light": {"type": "rectangle",
                  "to_world": T().look_at(origin=[0, 1.5, -3], target=[0, 0, 0], up=[0, 1, 0]).scale([0.6, 0.6, 1]),
                  "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 8.0, 6.0]}}},
    }


def _loss_fn(scene, key, weights, spp, **kw):
    def loss(x, seed, seed_grad):
        img = jaxrender.render(scene, {key: x}, spp=spp, seed=seed, seed_grad=seed_grad, **kw)
        return jnp.sum(img * weights)
    return loss


def _weights(scene, seed=0):
    h, w = scene.camera.height, scene.camera.width
    return jnp.asarray(np.random.default_rng(seed).uniform(0.5, 1.5, (h, w, 3)), jnp.float32)


# ---------------------------------------------------------------------------
# Exact agreement with finite differences (same random numbers, no roulette)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["red.reflectance.value", "white.reflectance.value",
                                 "light.emitter.radiance.value"])
def test_gradient_matches_finite_differences_exactly(key):
    scene = jaxrender.load_dict(cbox(rr_depth=100))
    _check_exact_fd(scene, key)


def _check_exact_fd(scene, key, min_fd=None):
    """jax.grad of an RGB parameter against central differences of the
    primal with the same random numbers (seed_grad == seed): equal to FD
    accuracy where sampling does not depend on the parameter and roulette is
    off. ``min_fd``: each FD derivative must exceed it (the test's power)."""
    loss = _loss_fn(scene, key, _weights(scene), spp=4)
    x0 = jnp.asarray(scene.params[key])
    g = np.asarray(jax.grad(loss)(x0, 7, 7))
    # (a wide step: the loss is a low-degree polynomial
    # in a reflectance, and at 1e-2 rounding of the loss reached 0.4% of a
    # derivative of 0.27)
    h = 3e-2 * float(jnp.max(x0))
    for c in range(3):
        e = jnp.zeros(3).at[c].set(h)
        fd = (float(loss(x0 + e, 7, 0)) - float(loss(x0 - e, 7, 0))) / (2 * h)
        if min_fd is not None:
            assert abs(fd) > min_fd, (key, c, fd)
        assert abs(g[c] - fd) <= 2e-3 * abs(fd) + 1e-4, (key, c, g[c], fd)


def _check_jvp_vjp_dot(f, x0, image_shape, seed):
    """<jvp(dx), dy> == <dx, vjp(dy)> for random dx, dy: the adjoint kernel
    is the transpose of the forward-mode one. Returns the product."""
    r = np.random.default_rng(seed)
    dx = jnp.asarray(r.standard_normal(x0.shape), jnp.float32)
    dy = jnp.asarray(r.standard_normal(image_shape), jnp.float32)
    _, jdx = jax.jvp(f, (x0,), (dx,))
    _, pullback = jax.vjp(f, x0)
    (jtdy,) = pullback(dy)
    lhs, rhs = float(jnp.sum(jdx * dy)), float(jnp.sum(dx * jtdy))
    assert abs(lhs - rhs) <= 1e-4 * max(abs(lhs), abs(rhs)) + 1e-7, (lhs, rhs)
    return lhs


def shapes_cbox(size=8):
    """Cornell box with an analytic diffuse sphere, a sphere light, a disk and
    a smooth-shaded mesh in place of the boxes."""
    d = cbox(size, rr_depth=100)
    del d["small-box"], d["large-box"]
    d["ball"] = {"type": "sphere", "center": [0.3, -0.6, 0.2], "radius": 0.35,
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.3, 0.6, 0.4]}}}
    d["bulb"] = {"type": "sphere", "center": [-0.4, 0.5, 0.0], "radius": 0.1,
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [4.0, 3.0, 2.0]}}}
    d["mat"] = {"type": "disk", "to_world": T().translate([-0.3, -0.99, 0.2]).rotate([1, 0, 0], -90).scale(0.4),
                "bsdf": {"type": "ref", "id": "red"}}
    d["torus"] = {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                  "to_world": T().translate([-0.4, -0.8, -0.4]).scale(0.3), "bsdf": {"type": "ref", "id": "green"}}
    return d


@pytest.mark.parametrize("key", ["ball.bsdf.reflectance.value", "bulb.emitter.radiance.value",
                                 "green.reflectance.value"])
def test_gradient_with_analytic_shapes_matches_finite_differences(key):
    """Reflectances of a sphere and of a smooth mesh, and a sphere light's
    radiance: the adjoint equals central differences of the primal for the
    same random numbers."""
    scene = jaxrender.load_dict(shapes_cbox())
    assert scene.structure.analytic and scene.structure.shading_normals
    loss = _loss_fn(scene, key, _weights(scene), spp=4)
    x0 = jnp.asarray(scene.params[key])
    g = np.asarray(jax.grad(loss)(x0, 7, 7))
    assert np.all(np.abs(g) > 1e-3)
    # The image is nearly linear in these values (a polynomial through
    # inter-reflections), so a wide step keeps float32 rounding of the
    # loss (~1e-6 relative) well below the tolerance.
    h = 5e-2 * float(jnp.max(x0))
    for c in range(3):
        e = jnp.zeros(3).at[c].set(h)
        fd = (float(loss(x0 + e, 7, 0)) - float(loss(x0 - e, 7, 0))) / (2 * h)
        assert abs(g[c] - fd) <= 2e-3 * abs(fd) + 1e-4, (key, c, g[c], fd)


def test_jvp_matches_finite_differences_and_linearize():
    scene = jaxrender.load_dict(cbox(rr_depth=100))
    key = "green.reflectance.value"
    f = lambda x: jaxrender.render(scene, {key: x}, spp=4, seed=3, seed_grad=3)
    x0 = jnp.asarray(scene.params[key])
    dx = jnp.asarray([0.3, -1.0, 0.5], jnp.float32)
    _, t = jax.jvp(f, (x0,), (dx,))
    h = 1e-2
    fd = (f(x0 + h * dx) - f(x0 - h * dx)) / (2 * h)
    np.testing.assert_allclose(np.asarray(t), np.asarray(fd), rtol=3e-3, atol=3e-5)
    _, lin = jax.linearize(f, x0)
    np.testing.assert_allclose(np.asarray(lin(dx)), np.asarray(t), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------
# Agreement in expectation (different estimators of the same derivative)
# ---------------------------------------------------------------------------

def _compare_in_expectation(scene, key, direction, spp, spp_fd, h, n_seeds=8, method="prb"):
    loss = _loss_fn(scene, key, _weights(scene), spp=spp, method=method)
    loss_fd = _loss_fn(scene, key, _weights(scene), spp=spp_fd)
    x0 = jnp.asarray(scene.params[key])
    v = jnp.asarray(direction, jnp.float32).reshape(x0.shape)
    grad = jax.jit(jax.grad(loss))
    g = np.array([float(jnp.vdot(grad(x0, s, 1000 + s), v)) for s in range(n_seeds)])
    fd = np.array([(float(loss_fd(x0 + h * v, s, 0)) - float(loss_fd(x0 - h * v, s, 0))) / (2 * h)
                   for s in range(n_seeds)])
    se = np.sqrt(g.var(ddof=1) / n_seeds + fd.var(ddof=1) / n_seeds)
    z = abs(g.mean() - fd.mean()) / se
    assert z < 4.0, (key, g.mean(), fd.mean(), se)
    # ... and the test has power: the derivative is clearly nonzero.
    assert abs(g.mean()) > 4 * g.std(ddof=1) / np.sqrt(n_seeds), (key, g)
    return g.mean(), fd.mean()


def test_roughness_gradient_in_expectation():
    scene = jaxrender.load_dict(highlight_scene())
    _compare_in_expectation(scene, "floor.bsdf.alpha.value", 1.0, spp=16, spp_fd=64, h=0.02)


def test_plastic_diffuse_gradient_in_expectation():
    # The plastic's lobe-selection probability depends on diffuse_reflectance.
    scene = jaxrender.load_dict(material_cbox())
    _compare_in_expectation(scene, "large-box.bsdf.diffuse_reflectance.value", [1.0, 1.0, 1.0],
                            spp=16, spp_fd=64, h=0.03)


def test_gradient_with_russian_roulette_in_expectation():
    scene = jaxrender.load_dict(cbox(rr_depth=1))
    _compare_in_expectation(scene, "white.reflectance.value", [1.0, 1.0, 1.0], spp=16, spp_fd=64, h=0.03)


# ---------------------------------------------------------------------------
# Transposition, replay and linearity
# ---------------------------------------------------------------------------

DIFF_KEYS = ["white.reflectance.value", "light.emitter.radiance.value",
             "small-box.bsdf.alpha.value", "small-box.bsdf.specular_reflectance.value",
             "large-box.bsdf.diffuse_reflectance.value", "large-box.bsdf.specular_reflectance.value",
             "glass.bsdf.specular_transmittance.value"]


def _random_like(tree, seed):
    rng = np.random.default_rng(seed)
    return {k: jnp.asarray(rng.normal(size=np.shape(v)), jnp.float32) for k, v in tree.items()}


@pytest.mark.parametrize("method", ["prb", "rb", "rb_biased"])
def test_adjoint_is_transpose_of_forward_mode(method):
    scene = jaxrender.load_dict(material_cbox(rr_depth=2))
    p0 = {k: jnp.asarray(scene.params[k]) for k in DIFF_KEYS}
    f = lambda p: jaxrender.render(scene, p, spp=2, seed=1, seed_grad=5, method=method)
    dx = _random_like(p0, 1)
    dy = jnp.asarray(np.random.default_rng(2).normal(size=(8, 8, 3)), jnp.float32)
    if method == "rb_biased":
        # Positive directions, so that "the same sign" is a real check
        # rather than the luck of a random projection near zero.
        dx, dy = jax.tree.map(jnp.abs, dx), jnp.abs(dy)
    _, t = jax.jvp(f, (p0,), (dx,))
    _, vjp = jax.vjp(f, p0)
    (g,) = vjp(dy)
    lhs = float(jnp.vdot(t, dy))
    rhs = sum(float(jnp.vdot(dx[k], g[k])) for k in DIFF_KEYS)
    if method == "rb_biased":
        # Not the transpose of the forward mode (it approximates incident
        # radiance by 1), but finite and in the same ballpark.
        assert np.isfinite(rhs) and np.sign(rhs) == np.sign(lhs)
    else:
        assert abs(lhs - rhs) <= 1e-4 * (abs(lhs) + 1e-3), (lhs, rhs)


def test_prb_equals_unbiased_rb_and_is_linear_in_the_cotangent():
    scene = jaxrender.load_dict(material_cbox(rr_depth=2))
    p0 = {k: jnp.asarray(scene.params[k]) for k in DIFF_KEYS}
    rng = np.random.default_rng(3)
    dy1, dy2 = (jnp.asarray(rng.normal(size=(8, 8, 3)), jnp.float32) for _ in range(2))

    def grads(method, dy):
        f = lambda p: jaxrender.render(scene, p, spp=2, seed=1, seed_grad=9, method=method)
        return jax.vjp(f, p0)[1](dy)[0]

    prb, rb = grads("prb", dy1), grads("rb", dy1)
    for k in DIFF_KEYS:
        np.testing.assert_allclose(np.asarray(prb[k]), np.asarray(rb[k]), rtol=2e-4,
                                   atol=2e-4 * float(jnp.max(jnp.abs(prb[k]))) + 1e-7, err_msg=k)
    mixed = grads("prb", 2.0 * dy1 - 0.5 * dy2)
    prb2 = grads("prb", dy2)
    for k in DIFF_KEYS:
        want = 2.0 * np.asarray(prb[k]) - 0.5 * np.asarray(prb2[k])
        np.testing.assert_allclose(np.asarray(mixed[k]), want, rtol=1e-4,
                                   atol=1e-4 * float(np.max(np.abs(want))) + 1e-7, err_msg=k)


def _prb_gradient(scene, dy):
    p0 = {k: jnp.asarray(scene.params[k]) for k in DIFF_KEYS}
    f = lambda p: jaxrender.render(scene, p, spp=2, seed=1, seed_grad=9)
    g = jax.vjp(f, p0)[1](dy)[0]
    return np.concatenate([np.asarray(g[k]).ravel() for k in DIFF_KEYS])


@pytest.mark.parametrize("tamper", ["hits", "shadows", "keys"])
def test_prb_replay_takes_its_first_pass_answers_for_the_same_rays(tamper, monkeypatch):
    """PRB's replay answers its ray queries from the first pass's log
    (kernels/integrators/base.QueryLog) where a ray's key matches: logged
    hits moved along their rays, or shadow rays' verdicts flipped, change
    the gradient; with the rays' keys changed as well the replay queries
    the scene again and the gradient is the right one."""
    scene = jaxrender.load_dict(material_cbox(rr_depth=2))
    dy = jnp.asarray(np.random.default_rng(4).normal(size=(8, 8, 3)), jnp.float32)
    right = _prb_gradient(scene, dy)
    at = integrator_base.QueryLog.at

    def tampered(self, step, empty):
        hit_key, t, prim, b1, b2, shadow, *rest = at(self, step, empty)
        if tamper != "shadows":
            t = t * 0.9
        if tamper != "hits":
            shadow = shadow ^ 1            # the blocked bit
        if tamper == "keys":
            hit_key, shadow = hit_key ^ 1, shadow ^ 4
        return (hit_key, t, prim, b1, b2, shadow, *rest)

    monkeypatch.setattr(integrator_base.QueryLog, "at", tampered)
    integrator_base._KERNELS.clear()
    try:
        got = _prb_gradient(scene, dy)
    finally:
        monkeypatch.undo()
        integrator_base._KERNELS.clear()
    if tamper != "keys":
        assert np.max(np.abs(got - right)) > 1e-3 * np.max(np.abs(right))
    else:
        np.testing.assert_array_equal(got, right)


def test_ray_keys_tell_rays_apart():
    """interaction.ray_key: a change of one ulp in any of a ray's eight
    numbers changes its key; the same ray keeps it."""
    from jaxrender import ir
    from jaxrender.kernels.interaction import ray_key
    from jaxrender.primitives import launch

    def body(rays):
        r = [rays.read(ir.item_index(), k) for k in range(8)]
        return {"key": ray_key(ir.Vec(*r[:3]), ir.Vec(*r[3:6]), r[6], r[7])}

    kernel = ir.trace(body, {"rays": ir.In("f32", (8,))}, {"key": ir.Out("u32")}, name="ray_keys")
    base = np.array([0.5, -1.25, 3.0, 0.0, 0.6, -0.8, 0.0, np.inf], np.float32)
    rays = np.repeat(base[None], 10, 0)
    for k in range(8):
        rays[k + 1, k] = np.nextafter(rays[k + 1, k], np.float32(1.0))
    keys = np.asarray(launch(kernel, (10,), rays=rays)["key"])
    assert keys[0] == keys[9] and len(set(keys[:9].tolist())) == 9, keys


def test_zero_cotangent_and_symbolic_zero_tangents():
    scene = jaxrender.load_dict(cbox())
    key = "light.emitter.radiance.value"
    f = lambda p: jaxrender.render(scene, p, spp=1)
    p0 = {key: jnp.asarray(scene.params[key]), "red.reflectance.value": jnp.asarray(scene.params["red.reflectance.value"])}
    (g,) = jax.vjp(f, p0)[1](jnp.zeros((8, 8, 3), jnp.float32))
    assert all(not np.any(np.asarray(v)) for v in g.values())
    # Only the emitter's tangent is nonzero: the forward kernel differentiates only emitter radiance.
    jaxpr = jax.make_jaxpr(lambda r: jax.jvp(lambda x: jaxrender.render(scene, {key: x}, spp=1),
                                             (r,), (jnp.ones(3),))[1])(p0[key])
    eqns = [e for e in _all_eqns(jaxpr.jaxpr) if e.primitive.name == "jaxrender_render_jvp"]
    assert len(eqns) == 1 and eqns[0].params["active"] == ("emitter_radiance",)


def _all_eqns(jaxpr):
    for e in jaxpr.eqns:
        yield e
        for v in e.params.values():
            for x in (v if isinstance(v, (tuple, list)) else (v,)):
                inner = getattr(x, "jaxpr", x)
                if hasattr(inner, "eqns"):
                    yield from _all_eqns(inner)


# ---------------------------------------------------------------------------
# The JAX contract
# ---------------------------------------------------------------------------

def test_optax_loop_compiles_each_kernel_once():
    optax = pytest.importorskip("optax")
    scene = jaxrender.load_dict(cbox(size=8))
    keys = ["red.reflectance.value", "green.reflectance.value"]
    target = jaxrender.render(scene, spp=256, seed=99)  # nearly noise-free
    opt = optax.adam(0.02)
    params = {k: jnp.full(3, 0.3, jnp.float32) for k in keys}
    state = opt.init(params)

    @jax.jit
    def step(params, state, i):
        def loss(p):
            return jnp.mean((jaxrender.render(scene, p, spp=2, seed=i) - target) ** 2)
        value, g = jax.value_and_grad(loss)(params)
        updates, state = opt.update(g, state)
        return optax.apply_updates(params, updates), state, value

    losses = []
    for i in range(20):
        if i == 1:
            compiled_after_first = stats["compiled"] + stats["disk_hits"]
            jit_cache = step._cache_size()
        params, state, value = step(params, state, jnp.uint32(i))
        losses.append(float(value))
    assert stats["compiled"] + stats["disk_hits"] == compiled_after_first
    assert step._cache_size() == jit_cache == 1
    assert all(np.isfinite(losses)) and set(params) == set(keys)
    # The noisy loss is no clear signal at 2 spp; the parameters are.
    for k, start in ((k, 0.3) for k in keys):
        truth = np.asarray(scene.params[k])
        assert np.abs(np.asarray(params[k]) - truth).sum() < np.abs(start - truth).sum() - 0.1, (k, params[k])


def test_vmap_over_cameras_multi_view_gradient_in_one_launch_per_kernel():
    scene = jaxrender.load_dict(cbox(size=8))
    base = np.asarray(scene.params["sensor.to_world"])
    views = np.stack([base + np.pad(np.array([[0, 0, 0, dx]]), ((0, 3), (0, 0))) for dx in (-0.3, 0.0, 0.4)])
    # A jax array: JAX itself (0.10) fails on numpy arrays vmapped into a
    # custom_jvp function under grad + jit.
    views = jnp.asarray(views, jnp.float32)
    key = "white.reflectance.value"
    x0 = jnp.asarray(scene.params[key])
    w = _weights(scene)

    def one_view(m, x):
        return jnp.sum(w * jaxrender.render(scene, {key: x, "sensor.to_world": m}, spp=2, seed=4, seed_grad=8) ** 2)

    multi = lambda x: jnp.sum(jax.vmap(one_view, in_axes=(0, None))(views, x))
    # For all views together: one launch of the primal image kernel, of the
    # film's weight kernel for the gradient's samples, and of the adjoint;
    # and of the film's overlap-adds (the image's and the primal's and the
    # gradient's weights) and of the gather of the cotangents.
    hlo = jax.jit(jax.grad(multi)).lower(x0).as_text()
    # (targets are jaxrender_<kernel name>_<20 hex digits of its key>)
    calls = re.findall(r"stablehlo.custom_call @jaxrender_(\w+?)_[0-9a-f]{20}\b", hlo)
    film = sorted(re.sub(r"_\dx\dx\d$", "", c) for c in calls if c.startswith(("film_overlap_add", "film_block_gather")))
    assert len(calls) - len(film) == 3 and film == ["film_block_gather"] + ["film_overlap_add"] * 3, calls
    assert sum(c.startswith("film_weights") for c in calls) == 1, calls
    g = np.asarray(jax.grad(multi)(x0))
    separate = sum(np.asarray(jax.grad(lambda x: one_view(views[k], x))(x0)) for k in range(3))
    np.testing.assert_allclose(g, separate, rtol=1e-4)


def test_not_differentiable_parameters_raise():
    scene = jaxrender.load_dict(material_cbox())
    cam = scene.camera_key
    with pytest.raises(NotDifferentiableError, match="camera"):
        jax.grad(lambda m: jnp.sum(jaxrender.render(scene, {cam: m}, spp=1)))(jnp.asarray(scene.params[cam]))
    with pytest.raises(NotDifferentiableError, match="glass.bsdf.eta"):
        jax.grad(lambda e: jnp.sum(jaxrender.render(scene, {"glass.bsdf.eta": e}, spp=1)))(jnp.float32(1.5))
    # A camera that is only a (non-differentiated) input is fine under jit.
    img = jax.jit(lambda m: jaxrender.render(scene, {cam: m}, spp=1))(jnp.asarray(scene.params[cam]))
    assert img.shape == (8, 8, 3)


def test_seed_grad_is_decorrelated_from_seed():
    scene = jaxrender.load_dict(cbox(rr_depth=100))
    key = "light.emitter.radiance.value"
    x0 = jnp.asarray(scene.params[key])
    f = lambda s, sg: jax.jvp(lambda x: jaxrender.render(scene, {key: x}, spp=1, seed=s, seed_grad=sg),
                              (x0,), (jnp.ones(3),))
    img, t_same = f(3, 3)
    _, t_default = f(3, None)
    # The image is linear in the radiance: with the primal's own random
    # numbers the tangent along x0 reproduces the image exactly...
    _, t_x0 = jax.jvp(lambda x: jaxrender.render(scene, {key: x}, spp=1, seed=3, seed_grad=3), (x0,), (x0,))
    np.testing.assert_allclose(np.asarray(t_x0), np.asarray(img), rtol=1e-5, atol=1e-6)
    # ...while the default seed_grad gives different samples.
    assert not np.allclose(np.asarray(t_same), np.asarray(t_default))


def test_bad_gradient_arguments():
    scene = jaxrender.load_dict(cbox())
    with pytest.raises(jaxrender.SceneError, match="method"):
        jaxrender.render(scene, spp=1, method="adjoint")
    with pytest.raises(jaxrender.SceneError, match="spp_grad"):
        jaxrender.render(scene, spp=1, spp_grad=-2)
    with pytest.raises(jaxrender.SceneError, match="seed_grad"):
        jaxrender.render(scene, spp=1, seed_grad=-1)


def test_vmap_of_grad_and_jacobians_agree_with_loops():
    scene = jaxrender.load_dict(cbox(rr_depth=100))
    key = "red.reflectance.value"
    X = jnp.asarray(np.random.default_rng(0).uniform(0.2, 0.8, (3, 3)), jnp.float32)
    loss = lambda x: jnp.sum(jaxrender.render(scene, {key: x}, spp=2, seed=1, seed_grad=2) ** 2)
    per_example = jax.vmap(jax.grad(loss))(X)           # transpose rule under a batch trace
    looped = jnp.stack([jax.grad(loss)(x) for x in X])
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(looped), rtol=1e-5)
    tangents = jax.vmap(lambda x: jax.jvp(loss, (x,), (jnp.ones(3),))[1])(X)
    np.testing.assert_allclose(np.asarray(tangents), np.asarray(looped.sum(axis=1)), rtol=1e-4)
    # A pixel on the red wall: reverse and forward Jacobians agree.
    pixel = lambda x: jaxrender.render(scene, {key: x}, spp=2, seed=1, seed_grad=2)[4, 0]
    jr, jf = jax.jacrev(pixel)(X[0]), jax.jacfwd(pixel)(X[0])
    assert np.abs(np.asarray(jr)).max() > 0
    np.testing.assert_allclose(np.asarray(jr), np.asarray(jf), rtol=1e-4, atol=1e-6)
