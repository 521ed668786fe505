"""Gradients through the newer plugins: spot intensity (read in _shade like a
point light's, so exact against finite differences with the same random
numbers), roughplastic parameters (its tables are detached, as in Mitsuba)
in the adjoint's dot-product test and, for the diffuse reflectance, in
expectation against finite differences."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxrender
from jaxrender.scene.transform import Transform as T
from test_gradients import _check_exact_fd, _compare_in_expectation


def plugin_cbox(size=8, **integrator):
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    d["integrator"] = {"type": "path", "max_depth": 4, **integrator}
    d["spot"] = {"type": "spot", "cutoff_angle": 35.0,
                 "to_world": T().look_at(origin=[0.0, 0.9, 0.3], target=[0.1, -1.0, 0.0], up=[0, 0, 1]),
                 "intensity": {"type": "rgb", "value": [2.0, 1.5, 1.0]}}
    d["large-box"]["bsdf"] = {"type": "roughplastic", "distribution": "ggx", "alpha": 0.3,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.2, 0.5, 0.7]}}
    return d


def test_spot_intensity_gradient_matches_finite_differences_exactly():
    _check_exact_fd(jaxrender.load_dict(plugin_cbox(rr_depth=100)), "spot.intensity.value", min_fd=1e-3)


KEYS = ["spot.intensity.value", "large-box.bsdf.diffuse_reflectance.value", "large-box.bsdf.alpha",
        "large-box.bsdf.eta", "large-box.bsdf.specular_reflectance.value", "light.emitter.radiance.value"]


def check_adjoint_transpose(scene, keys, size=8) -> dict:
    """<jvp(dx), dy> == <dx, vjp(dy)> over the parameters ``keys`` of an
    8x8 render: the adjoint is the transpose of forward mode. Returns the gradient."""
    p0 = {k: jnp.asarray(scene.params[k]) for k in keys}
    f = lambda p: jaxrender.render(scene, p, spp=2, seed=1, seed_grad=5)
    rng = np.random.default_rng(1)
    dx = {k: jnp.asarray(rng.normal(size=np.shape(v)), jnp.float32) for k, v in p0.items()}
    dy = jnp.asarray(rng.normal(size=(size, size, 3)), jnp.float32)
    _, t = jax.jvp(f, (p0,), (dx,))
    (g,) = jax.vjp(f, p0)[1](dy)
    lhs = float(jnp.vdot(t, dy))
    rhs = sum(float(jnp.vdot(dx[k], g[k])) for k in keys)
    assert abs(lhs - rhs) <= 1e-4 * (abs(lhs) + 1e-3), (lhs, rhs)
    assert all(np.all(np.isfinite(np.asarray(g[k]))) for k in keys)
    return g


def test_adjoint_is_transpose_of_forward_mode_with_new_plugins():
    g = check_adjoint_transpose(jaxrender.load_dict(plugin_cbox(rr_depth=2)), KEYS)
    assert float(jnp.max(jnp.abs(g["large-box.bsdf.alpha"]))) > 0


def test_roughplastic_diffuse_gradient_in_expectation():
    # The lobe-selection probability depends on diffuse_reflectance.
    scene = jaxrender.load_dict(plugin_cbox())
    _compare_in_expectation(scene, "large-box.bsdf.diffuse_reflectance.value", [1.0, 1.0, 1.0],
                            spp=16, spp_fd=64, h=0.03)
