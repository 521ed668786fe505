"""Derivatives of volpath (Mitsuba's prbvolpath) with respect to a
heterogeneous medium's grids (``<id>.sigma_t.data``, ``<id>.albedo.data``)
and ``scale``: the null-scattering estimator (delta tracking, ratio-tracking
shadow rays, a constant detached majorant).

What we compare with, that we did not write:
* central finite differences of the primal renderer. The albedo moves no
  sampling decision (roulette off), so with the same random numbers the
  derivative kernels differentiate exactly the estimator the primal
  evaluates. sigma_t and scale move the majorant, the free-flight
  distances and the null-or-real choices, which the derivative kernels
  hold fixed: two unbiased estimators of the same derivative, compared in
  the mean over seeds against the standard error of their difference;
* linear algebra: the adjoint (path replay) is the transpose of the
  forward mode (dot-product test);
* Mitsuba 3.9.1's prbvolpath (llvm_ad_rgb), in the mean over seeds, per
  grid cell. Its majorant is the grid's maximum, ours 1/8 above it
  (loaders.media.grid_majorant): different null-collision rates, the same
  derivative in expectation.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.primitives.render_rules import NotDifferentiableError
from jaxrender.scene.transform import Transform as T
from test_gradients import _compare_in_expectation
from test_media_gradients import (_loss, check_agrees_with_mitsuba, check_rb_equals_prb, check_transpose,  # noqa: F401
                                  mitsuba_llvm, scene_dict, zscores)

M = "box.interior_medium."
SIGMA_T, ALBEDO, SCALE = M + "sigma_t.data", M + "albedo.data", M + "scale"
# The grids' unit cube onto scene_dict's box (a cube rotated by 30 degrees, half size 0.8).
BOX = T().rotate([0, 1, 0], 30).scale(0.8).translate([-1, -1, -1]).scale(2)


def grid_scene(**kw) -> dict:
    """scene_dict's null box holding a 4^3 extinction grid and a 4^3 albedo grid."""
    r = np.random.default_rng(4)
    d = scene_dict(**kw)
    d["box"]["interior"] = {
        "type": "heterogeneous", "scale": 2.0, "phase": {"type": "hg", "g": 0.4},
        "sigma_t": {"type": "gridvolume", "data": (0.2 + r.random((4, 4, 4))).astype(np.float32), "to_world": BOX},
        "albedo": {"type": "gridvolume", "data": (0.3 + 0.6 * r.random((4, 4, 4))).astype(np.float32),
                   "to_world": BOX}}
    return d


def _direction(key, scene, seed=2):
    """A random direction, mostly positive (a clear signal over the noise)."""
    x0 = np.asarray(scene.params[key])
    return np.random.default_rng(seed).uniform(-0.5, 1.5, x0.shape).astype(np.float32)


def test_albedo_grid_gradient_matches_finite_differences_exactly():
    """The albedo grid moves no sampling decision: the adjoint with the
    primal's random numbers is the derivative of the primal's estimator."""
    scene = jaxrender.load_dict(grid_scene())
    loss = _loss(scene, ALBEDO)
    x0 = jnp.asarray(scene.params[ALBEDO])
    v = jnp.asarray(_direction(ALBEDO, scene))
    g = float(jnp.vdot(jax.grad(loss)(x0, 7, 7), v))
    h = 1e-2
    fd = (float(loss(x0 + h * v, 7, 0)) - float(loss(x0 - h * v, 7, 0))) / (2 * h)
    assert abs(fd) > 1.0, fd
    assert abs(g - fd) <= 3e-3 * abs(fd) + 1e-3, (g, fd)


@pytest.mark.parametrize("key", [SIGMA_T, SCALE])
def test_gradient_in_expectation(key):
    """Extinction and scale move the sampling: the replay's estimator
    against finite differences, in the mean over seeds."""
    scene = jaxrender.load_dict(grid_scene())
    direction = _direction(SIGMA_T, scene) if key == SIGMA_T else 1.0
    g, fd = _compare_in_expectation(scene, key, direction, spp=32, spp_fd=128, h=0.05, n_seeds=10)
    print(f"{key}: replay {g:.4f}, finite differences {fd:.4f}")


def test_gradient_where_the_grid_is_flat_at_its_peak():
    """The extinction grid's upper half at its largest value, that half
    differentiated: with a majorant equal to the peak the null density is
    0 there and the replay misses the attenuation's derivative (the
    majorant's headroom, loaders.media.MAJORANT_HEADROOM, is what makes
    this pass)."""
    d = grid_scene()
    sigma_t = d["box"]["interior"]["sigma_t"]["data"]
    sigma_t[:, 2:, :] = sigma_t.max()            # (z, y, x): the half nearer the light
    direction = np.zeros_like(sigma_t)
    direction[:, 2:, :] = 1.0
    scene = jaxrender.load_dict(d)
    g, fd = _compare_in_expectation(scene, SIGMA_T, direction, spp=32, spp_fd=128, h=0.05, n_seeds=10)
    print(f"peak plateau: replay {g:.4f}, finite differences {fd:.4f}")


def test_adjoint_is_transpose_of_forward_mode():
    """<jvp(dx), dy> == <dx, vjp(dy)> over both grids and the scale at once."""
    check_transpose(jaxrender.load_dict(grid_scene(rr_depth=2)), (SIGMA_T, ALBEDO, SCALE))


def test_radiative_backpropagation_equals_path_replay():
    check_rb_equals_prb(jaxrender.load_dict(grid_scene(rr_depth=2)), (SIGMA_T, ALBEDO, SCALE))


def test_more_homogeneous_media_than_followed_raise_clearly():
    """A shadow ray's derivatives follow two homogeneous media: with three,
    their parameters' derivatives are a NotDifferentiableError naming them,
    while the grid (tracked by ratio tracking, any number of media) stays
    differentiable."""
    d = grid_scene()
    for name, x in (("ball1", -0.5), ("ball2", 0.5), ("ball3", 0.0)):
        d[name] = {"type": "sphere", "center": [x, 1.0, 0.0], "radius": 0.15, "bsdf": {"type": "null"},
                   "interior": {"type": "homogeneous", "sigma_t": 0.5}}
    scene = jaxrender.load_dict(d)
    key = "ball1.interior_medium.albedo.value.value"
    with pytest.raises(NotDifferentiableError, match="albedo.*at most 2"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(jnp.asarray(scene.params[key]))
    from jaxrender.kernels.integrators.volpath import VolpathIntegrator
    blocked = VolpathIntegrator().nondifferentiable_params(scene)
    assert key in blocked and not {SIGMA_T, ALBEDO, SCALE} & set(blocked)


@pytest.mark.parametrize("key", [SIGMA_T, ALBEDO])
def test_gradient_agrees_with_mitsuba_prbvolpath(mitsuba_llvm, key):
    """Each of the 64 grid cells' gradients against Mitsuba's prbvolpath,
    in the mean over 16 seeds (4.5 standard errors: 64 comparisons), and
    the sum over the cells (4); a control: ours 30% too large is rejected.
    (Mitsuba's heterogeneous ``scale`` is a plain float, flagged
    non-differentiable: nothing to compare ours with.)"""
    ours, theirs = check_agrees_with_mitsuba(mitsuba_llvm, grid_scene(), key, n=16, limit=4.5)
    total = zscores(ours.sum(1, keepdims=True), theirs.sum(1, keepdims=True))[0]
    wrong = zscores(1.3 * ours.sum(1, keepdims=True), theirs.sum(1, keepdims=True))[0]
    print(f"{key}: sum over the cells z = {total:.2f}, 1.3 x ours z = {wrong:.2f}")
    assert abs(total) < 4 and abs(wrong) >= 4, (key, total, wrong)
