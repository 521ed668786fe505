"""Derivatives of volpath (Mitsuba's prbvolpath) with respect to a
homogeneous medium's parameters: sigma_t, scale, albedo and the HG phase
function's g.

What we compare with, that we did not write:
* central finite differences of the primal renderer. Albedo moves no
  sampling decision (roulette is off), so with the same random numbers the
  derivative kernels differentiate exactly the estimator the primal
  evaluates. sigma_t (and scale) move the sampled free-flight distances and
  g the sampled phase directions, which the derivative kernels hold fixed
  (detached sampling): there the two are different unbiased estimators of
  the same derivative, compared in the mean over seeds against the
  standard error of their difference;
* linear algebra: the adjoint (path replay) is the transpose of the
  forward mode (dot-product test);
* Mitsuba 3.9.1's prbvolpath (llvm_ad_rgb), in the mean over seeds.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.primitives.render_rules import NotDifferentiableError
from jaxrender.scene.transform import Transform as T
from test_gradients import _compare_in_expectation
from test_shapes import _to_mitsuba

SIZE = 16
M = "box.interior_medium."
SIGMA_T, ALBEDO, SCALE, G = M + "sigma_t.value.value", M + "albedo.value.value", M + "scale", M + "phase_function.g"


def rgb(*v):
    return {"type": "rgb", "value": list(v)}


def scene_dict(integrator="prbvolpath", rr_depth=100, max_depth=6, sigma_t=rgb(0.75, 0.5, 0.3)):
    """A medium cube (null boundary, HG phase) on a diffuse floor under an
    area light."""
    return {"type": "scene",
            "integrator": {"type": integrator, "max_depth": max_depth, "rr_depth": rr_depth},
            "sensor": {"type": "perspective", "fov": 40.0,
                       "to_world": T().look_at(origin=[0, 0, 4], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": SIZE, "height": SIZE, "rfilter": {"type": "box"}},
                       "sampler": {"type": "independent", "sample_count": 4}},
            "light": {"type": "rectangle",
                      "to_world": T().translate([0, 1.6, 0]).rotate([1, 0, 0], 90).scale(1.2),
                      "emitter": {"type": "area", "radiance": rgb(6.0, 6.0, 6.0)}},
            "floor": {"type": "rectangle", "to_world": T().translate([0, -1.2, 0]).rotate([1, 0, 0], -90).scale(3),
                      "bsdf": {"type": "diffuse", "reflectance": rgb(0.5, 0.5, 0.5)}},
            "box": {"type": "cube", "to_world": T().rotate([0, 1, 0], 30).scale(0.8), "bsdf": {"type": "null"},
                    "interior": {"type": "homogeneous", "sigma_t": sigma_t, "scale": 2.0, "albedo": rgb(0.8, 0.6, 0.4),
                                 "phase": {"type": "hg", "g": 0.4}}}}



def _weights(seed=0):
    return jnp.asarray(np.random.default_rng(seed).uniform(0.5, 1.5, (SIZE, SIZE, 3)), jnp.float32)


def _loss(scene, key, spp=4, **kw):
    w = _weights()

    def loss(x, seed, seed_grad):
        return jnp.sum(jaxrender.render(scene, {key: x}, spp=spp, seed=seed, seed_grad=seed_grad, **kw) * w)
    return loss


def test_albedo_gradient_matches_finite_differences_exactly():
    """Albedo moves no sampling decision: the adjoint with the primal's
    random numbers is the derivative of the primal's estimator."""
    scene = jaxrender.load_dict(scene_dict())
    loss = _loss(scene, ALBEDO)
    x0 = jnp.asarray(scene.params[ALBEDO])
    g = np.asarray(jax.grad(loss)(x0, 7, 7))
    h = 1e-2
    for c in range(3):
        e = jnp.zeros(3).at[c].set(h)
        fd = (float(loss(x0 + e, 7, 0)) - float(loss(x0 - e, 7, 0))) / (2 * h)
        assert abs(fd) > 1.0, (c, fd)
        assert abs(g[c] - fd) <= 3e-3 * abs(fd) + 1e-3, (c, g[c], fd)


@pytest.mark.parametrize("key, direction", [(SIGMA_T, [1.0, -0.5, 0.8]), (SCALE, 1.0), (G, 1.0)])
def test_gradient_in_expectation(key, direction):
    """sigma_t and scale move the sampled distances, g the phase
    directions: the replay's detached-sampling estimator against finite
    differences, in the mean."""
    scene = jaxrender.load_dict(scene_dict())
    _compare_in_expectation(scene, key, direction, spp=64, spp_fd=256, h=0.05, n_seeds=12)


def test_adjoint_is_transpose_of_forward_mode():
    """<jvp(dx), dy> == <dx, vjp(dy)> over every medium parameter at once:
    the replay adjoint is exactly the transpose of the forward mode."""
    check_transpose(jaxrender.load_dict(scene_dict(rr_depth=2)),
                    (SIGMA_T, ALBEDO, SCALE, G, "floor.bsdf.reflectance.value"))


def check_transpose(scene, keys):
    """The dot-product test of the forward mode and the adjoint over ``keys``."""
    x0 = {k: jnp.asarray(scene.params[k]) for k in keys}
    f = lambda x: jaxrender.render(scene, x, spp=4, seed=3, seed_grad=5)  # noqa: E731
    r = np.random.default_rng(1)
    dx = {k: jnp.asarray(r.standard_normal(np.shape(v)), jnp.float32) for k, v in x0.items()}
    dy = jnp.asarray(r.standard_normal((SIZE, SIZE, 3)), jnp.float32)
    _, t = jax.jvp(f, (x0,), (dx,))
    _, pullback = jax.vjp(f, x0)
    (g,) = pullback(dy)
    lhs = float(jnp.vdot(t, dy))
    rhs = sum(float(jnp.vdot(dx[k], g[k])) for k in keys)
    assert abs(lhs) > 1.0
    assert abs(lhs - rhs) <= 1e-4 * abs(lhs), (lhs, rhs)


def check_rb_equals_prb(scene, keys):
    """Radiative backpropagation (the incident radiance re-estimated at each
    vertex by tracing the rest of the path with the same random numbers)
    gives path replay's gradient for every seed, so the same expectation."""
    x0 = {k: jnp.asarray(scene.params[k]) for k in keys}
    dy = jnp.asarray(np.random.default_rng(3).uniform(0.5, 1.5, (SIZE, SIZE, 3)), jnp.float32)

    def grads(method):
        f = lambda x: jaxrender.render(scene, x, spp=4, seed=3, seed_grad=5, method=method)  # noqa: E731
        return jax.vjp(f, x0)[1](dy)[0]

    prb, rb = grads("prb"), grads("rb")
    for k in keys:
        scale = float(jnp.max(jnp.abs(prb[k])))
        assert scale > 0.1, k
        np.testing.assert_allclose(np.asarray(rb[k]), np.asarray(prb[k]), rtol=1e-4, atol=1e-5 * scale, err_msg=k)


def test_radiative_backpropagation_equals_path_replay():
    check_rb_equals_prb(jaxrender.load_dict(scene_dict(rr_depth=2)), (SIGMA_T, ALBEDO, SCALE, G))


def test_more_media_than_followed_raise_clearly():
    """Three media (a shadow ray's derivatives follow two): a medium
    parameter's derivative is a NotDifferentiableError naming it, not a
    silent error; surface parameters stay differentiable."""
    d = scene_dict()
    for name, x in (("ball1", -0.5), ("ball2", 0.5)):
        d[name] = {"type": "sphere", "center": [x, 1.0, 0.0], "radius": 0.2, "bsdf": {"type": "null"},
                   "interior": {"type": "homogeneous", "sigma_t": 0.5}}
    scene = jaxrender.load_dict(d)
    x = jnp.asarray(scene.params[ALBEDO])
    with pytest.raises(NotDifferentiableError, match="albedo.*at most 2"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {ALBEDO: v}, spp=1)))(x)


@pytest.fixture(scope="module")
def mitsuba_llvm():
    """Mitsuba 3.9.1's llvm_ad_rgb variant (its prbvolpath), or a skip."""
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")
    mi = pytest.importorskip("mitsuba")
    previous = mi.variant()
    try:
        mi.set_variant("llvm_ad_rgb")
    except Exception as exc:       # no LLVM: nothing to compare with
        pytest.skip(f"mitsuba's llvm_ad_rgb variant does not run here: {exc}")
    yield mi
    if previous is not None:
        mi.set_variant(previous)


def mitsuba_gradients(mi, d: dict, key: str, n: int, spp: int) -> np.ndarray:
    """(n, k): Mitsuba's prbvolpath gradient of the weighted image sum with
    respect to ``key`` (flattened), seeds 0..n-1 (adjoint seeds 100 + s)."""
    import drjit as dr
    w = mi.TensorXf(np.asarray(_weights()))
    ms = mi.load_dict(_to_mitsuba(mi, d))
    out = []
    for s in range(n):
        p = mi.traverse(ms)
        dr.enable_grad(p[key])
        p.update()
        dr.backward(dr.sum(mi.render(ms, p, spp=spp, seed=s, seed_grad=100 + s) * w, axis=None))
        out.append(np.array(dr.grad(p[key])).ravel())
        dr.clear_grad(p[key])
    return np.array(out)


def our_gradients(d: dict, key: str, n: int, spp: int) -> np.ndarray:
    """(n, k): ours for the same loss, seeds and adjoint seeds."""
    scene = jaxrender.load_dict(d)
    x0 = jnp.asarray(scene.params[key])
    grad = jax.jit(jax.grad(_loss(scene, key, spp)))
    return np.array([np.asarray(grad(x0, s, 100 + s)).ravel() for s in range(n)])


def zscores(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per component, the difference of the means over seeds over its
    standard error (from both spreads)."""
    n = len(ours)
    return (ours.mean(0) - theirs.mean(0)) / np.sqrt(ours.var(0, ddof=1) / n + theirs.var(0, ddof=1) / n)


def check_agrees_with_mitsuba(mi, d: dict, key: str, n: int = 8, spp: int = 64, limit: float = 4.0):
    """Every component's mean over seeds within ``limit`` standard errors
    of Mitsuba's, and ours clearly nonzero somewhere (power). Returns both
    (n, k) samples."""
    theirs = mitsuba_gradients(mi, d, key, n, spp)
    ours = our_gradients(d, key, n, spp)
    z = zscores(ours, theirs)
    print(f"{key}: ours {ours.mean(0)[:4]}, Mitsuba {theirs.mean(0)[:4]}, |z| max {np.abs(z).max():.2f}")
    assert np.all(np.abs(z) < limit), (key, ours.mean(0), theirs.mean(0), z)
    assert np.any(np.abs(ours.mean(0)) > 4 * ours.std(0, ddof=1) / np.sqrt(n)), (key, ours)   # power
    return ours, theirs


@pytest.mark.parametrize("key", [ALBEDO, SIGMA_T, G])
def test_gradient_agrees_with_mitsuba_prbvolpath(mitsuba_llvm, key):
    """The same loss's gradient from Mitsuba's prbvolpath, in the mean over
    seeds: a sanity check within noise (Mitsuba is another estimator, not
    ground truth)."""
    check_agrees_with_mitsuba(mitsuba_llvm, scene_dict(), key)
