"""Run as ``python tests/sharding_checks.py N``: with N forced CPU devices,
compare sharded renders and gradients with one-device ones and inspect the
compiled HLO; prints one JSON object (read by ``test_sharding.py``). A
separate process because XLA's device count is fixed when JAX starts."""
from __future__ import annotations

import json
import os
import re
import sys

N = int(sys.argv[1])
# (after the tests' own XLA flags, which test_sharding passes on: conftest.py)
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={N}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxrender  # noqa: E402

KEY = "red.reflectance.value"


def launches(hlo: str) -> list:
    """Leading dimension of each kernel launch's first result, per device."""
    dims = []
    for line in hlo.splitlines():
        if "custom-call(" in line and "ffi_call" in line:
            m = re.search(r"= \(?f32\[(\d+),", line)
            dims.append(int(m.group(1)) if m else None)
    return dims


def collectives(hlo: str, name: str) -> int:
    return len(re.findall(rf"\b{name}(?:-start)?\(", hlo))


def main() -> dict:
    assert jax.device_count() == N
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"], d["sensor"]["film"]["height"] = 20, 16   # rows split evenly over 2 or 4
    d["integrator"]["max_depth"] = 3
    scene = jaxrender.load_dict(d)
    x0 = jnp.asarray(scene.params[KEY])
    mesh = Mesh(np.array(jax.devices()), ("d",))
    out = {}

    # One image split by rows of pixels (gaussian filter: splats cross shard edges).
    def image(x, m=None):
        return jaxrender.render(scene, {KEY: x}, spp=4, seed=5, mesh=m)

    whole, split = image(x0), image(x0, mesh)
    out["pixels_identical"] = bool(jnp.all(whole == split))
    out["pixels_sharded"] = len(split.sharding.device_set) == N
    t_whole = jax.jvp(image, (x0,), (jnp.ones(3),))[1]
    t_split = jax.jvp(lambda x: image(x, mesh), (x0,), (jnp.ones(3),))[1]
    out["pixels_jvp_identical"] = bool(jnp.all(t_whole == t_split))

    def loss(x, m=None):
        return jnp.sum(image(x, m) ** 2)

    grad_split = jax.jit(jax.grad(loss), static_argnums=1)
    out["pixels_grad"] = [np.asarray(jax.grad(loss)(x0)).tolist(), np.asarray(grad_split(x0, mesh)).tolist()]
    hlo = grad_split.lower(x0, mesh).compile().as_text()
    out["pixels_launch_rows"] = launches(hlo)
    out["pixels_all_gathers"] = collectives(hlo, "all-gather")

    # Rows that do not divide evenly: the last band runs past the grid.
    d["sensor"]["film"]["height"] = 17
    odd = jaxrender.load_dict(d)

    def odd_loss(x, m=None):
        return jnp.sum(jaxrender.render(odd, {KEY: x}, spp=4, seed=5, mesh=m) ** 2)

    out["uneven_identical"] = bool(jnp.all(jaxrender.render(odd, spp=4, seed=5, mesh=mesh)
                                           == jaxrender.render(odd, spp=4, seed=5)))
    out["uneven_grad"] = [np.asarray(jax.grad(odd_loss)(x0)).tolist(),
                          np.asarray(jax.jit(jax.grad(odd_loss), static_argnums=1)(x0, mesh)).tolist()]
    out["uneven_all_gathers"] = collectives(
        jax.jit(jax.grad(odd_loss), static_argnums=1).lower(x0, mesh).compile().as_text(), "all-gather")

    # Many views, vmapped, with the view axis sharded: each device its views.
    base = np.asarray(scene.params["sensor.to_world"], np.float32)
    views = np.stack([base + np.pad(np.array([[0, 0, 0, 0.1 * i - 0.2]], np.float32), ((0, 3), (0, 0)))
                      for i in range(2 * N)])

    def multiview(x, v):
        return jax.vmap(lambda m: jaxrender.render(scene, {KEY: x, "sensor.to_world": m}, spp=4, seed=5))(v)

    def mv_loss(x, v):
        return jnp.sum(multiview(x, v) ** 2)

    sharded = jax.device_put(views, NamedSharding(mesh, P("d")))
    f = jax.jit(multiview)
    one_device = f(x0, views)                      # uncommitted inputs: one device
    many = f(x0, sharded)
    out["views_identical"] = bool(jnp.all(one_device == many))
    out["views_sharded"] = len(many.sharding.device_set) == N
    g = jax.jit(jax.grad(mv_loss))
    out["views_grad"] = [np.asarray(g(x0, views)).tolist(), np.asarray(g(x0, sharded)).tolist()]
    hlo = g.lower(x0, sharded).compile().as_text()
    out["views_launch_rows"] = launches(hlo)
    out["views_all_gathers"] = collectives(hlo, "all-gather")
    out["views_all_reduces"] = collectives(hlo, "all-reduce")

    if N != 2:   # what follows does not depend on the device count
        return out

    # The same views under shard_map: each device's body launches directly.
    from jax import shard_map
    by_device = jax.jit(shard_map(lambda v: multiview(x0, v), mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    out["shard_map_identical"] = bool(jnp.all(by_device(sharded) == one_device))

    # A moving camera and a moving light on one image split by rows: the
    # film's boundary term (one launch over the grid) joins the bands.
    out["moving"] = {}
    for key in ("sensor.to_world", "light.to_world"):
        m0 = jnp.asarray(scene.params[key])
        along = jnp.zeros((4, 4), jnp.float32).at[0, 3].set(1.0)
        weights = jnp.asarray(np.random.default_rng(1).uniform(size=whole.shape).astype(np.float32))

        def moved(m, mm=None, key=key):
            return jnp.sum(jaxrender.render(scene, {key: m}, spp=4, seed=5, mesh=mm) * weights)

        # (jitted: one compile; eagerly the first call compiles several computations)
        grad = jax.jit(jax.grad(moved), static_argnums=1)
        tangent = jax.jit(lambda m, mm: jax.jvp(lambda x: moved(x, mm), (m,), (along,))[1], static_argnums=1)
        out["moving"][key] = [[float(jnp.sum(grad(m0, mm) * along)) for mm in (None, mesh)],
                              [float(tangent(m0, mm)) for mm in (None, mesh)]]

    # Explicit mesh axes (jax.make_mesh's default): a clear error, not JAX's.
    explicit = jax.make_mesh((N,), ("e",), axis_types=(jax.sharding.AxisType.Explicit,))
    errors = []
    for attempt in (lambda: image(x0, explicit),
                    lambda: jax.jit(multiview)(x0, jax.device_put(views, NamedSharding(explicit, P("e"))))):
        try:
            attempt()
            errors.append("no error")
        except jaxrender.SceneError as exc:
            errors.append("Auto" in str(exc))
    out["explicit_axes_errors"] = errors
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
