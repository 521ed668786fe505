"""Rendering across devices: the kernel launches partitioned by XLA (views
of a vmap, or one image's rows via ``render(mesh=...)``) give the
one-device images bit for bit and the same gradients, each device launching
on its own shard with no all-gather; and the multi-host recipe
(``examples/multiview_sharded.py``) runs as two processes of one machine.
Each check runs in its own process: XLA fixes the device count at start."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # XLA_FLAGS (conftest.py's) stay: the processes add their device count to them
    return env


def _checks(n: int) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "sharding_checks.py"), str(n)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("devices", [2, 4])
def test_sharded_renders_equal_one_device_and_launch_per_shard(devices):
    r = _checks(devices)
    # One image split by rows: the same pixels and tangents bit for bit,
    # the image left sharded, each device launching one shard.
    assert r["pixels_identical"] and r["pixels_jvp_identical"] and r["pixels_sharded"]
    np.testing.assert_allclose(r["pixels_grad"][1], r["pixels_grad"][0], rtol=1e-5)
    assert r["pixels_launch_rows"] and all(n == 1 for n in r["pixels_launch_rows"]), r["pixels_launch_rows"]
    assert r["pixels_all_gathers"] == 0
    # 17 rows over 2 or 4 devices: the same pixels, no gathering in the step.
    assert r["uneven_identical"] and r["uneven_all_gathers"] == 0
    np.testing.assert_allclose(r["uneven_grad"][1], r["uneven_grad"][0], rtol=1e-5)
    # 2 views per device: each device launches its two (not all 2N), the
    # scene buffers are not gathered, the shared gradient is all-reduced.
    assert r["views_identical"] and r["views_sharded"]
    np.testing.assert_allclose(r["views_grad"][1], r["views_grad"][0], rtol=1e-5)
    assert r["views_launch_rows"] and all(n == 2 for n in r["views_launch_rows"]), r["views_launch_rows"]
    assert r["views_all_gathers"] == 0 and r["views_all_reduces"] >= 1
    if devices == 2:
        assert r["shard_map_identical"]
        for key, (rev, fwd) in r["moving"].items():   # [one device, split by rows]
            assert abs(rev[0]) > 1e-2, (key, rev)
            np.testing.assert_allclose([rev[1], fwd[0], fwd[1]], rev[0], rtol=1e-4, err_msg=key)
        assert r["explicit_axes_errors"] == [True, True]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _example(*args: str, timeout: int = 600) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "examples" / "multiview_sharded.py"), "--views", "4",
                             "--res", "12", "--spp", "2", "--target-spp", "8", "--steps", "3", *args],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _losses(out: str) -> list:
    return [float(m) for m in re.findall(r"loss ([0-9.e+-]+)", out)]


def test_multihost_recipe_two_processes_match_one_process():
    """Two processes with one CPU device each, joined by jax.distributed on
    localhost, optimise exactly as one process with two devices."""
    try:
        port = _free_port()
    except OSError as exc:
        pytest.skip(f"cannot bind a localhost port for the coordinator: {exc}")
    coord = f"localhost:{port}"
    procs = [_example("--devices", "1", "--coordinator", coord, "--num-processes", "2", "--process-id", str(i))
             for i in range(2)]
    outs = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, stderr[-3000:]
        outs.append(stdout)
    single = _example("--devices", "2")
    stdout, stderr = single.communicate(timeout=600)
    assert single.returncode == 0, stderr[-3000:]
    ref = _losses(stdout)
    assert len(ref) == 3
    for i, out in enumerate(outs):
        assert f"process {i} device" in out
        np.testing.assert_allclose(_losses(out), ref, rtol=1e-5)


# ---------------------------------------------------------------------------
# Large images in bounded memory: bands of rows one after another
# ---------------------------------------------------------------------------
KEY = "red.reflectance.value"


def _scene(rfilter: str, integrator: dict | None = None):
    import jaxrender
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"], d["sensor"]["film"]["height"] = 21, 17   # 17 rows: a partial last band
    d["sensor"]["film"]["rfilter"] = {"type": rfilter}
    d["integrator"] = integrator or {"type": "path", "max_depth": 3}
    return jaxrender.load_dict(d)


@pytest.mark.parametrize("rfilter", ["box", "gaussian"])
def test_tiled_render_equals_one_launch_with_its_derivatives(rfilter):
    import jax
    import jax.numpy as jnp
    import jaxrender
    scene = _scene(rfilter)
    x0 = jnp.asarray(scene.params[KEY])
    # 3000 bytes: bands of 11 rows with the box filter (3 floats a pixel),
    # of one row with the gaussian's 5x5 splat blocks (100 floats a pixel).
    def image(x, budget=None):
        return jaxrender.render(scene, {KEY: x}, spp=4, seed=5, max_launch_bytes=budget)

    whole, tiled = image(x0), image(x0, 3000)
    t_whole = jax.jvp(image, (x0,), (jnp.ones(3),))[1]
    t_tiled = jax.jvp(lambda x: image(x, 3000), (x0,), (jnp.ones(3),))[1]
    if rfilter == "box":      # bands do not overlap: the same sums
        assert bool(jnp.all(whole == tiled)) and bool(jnp.all(t_whole == t_tiled))
    else:                     # splats across band edges are summed in another order
        np.testing.assert_allclose(tiled, whole, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(t_tiled, t_whole, rtol=1e-5, atol=1e-6)
    assert float(jnp.mean(whole)) > 0.01

    def loss(x, budget=None):
        return jnp.sum(image(x, budget) ** 2)

    np.testing.assert_allclose(jax.grad(loss)(x0, 3000), jax.grad(loss)(x0), rtol=1e-5)


def test_tiled_render_bounds_the_compiled_memory():
    import jax
    import jax.numpy as jnp
    import jaxrender
    scene = _scene("gaussian")

    def temp_bytes(budget, grad):
        def loss(x):
            return jnp.sum(jaxrender.render(scene, {KEY: x}, spp=1, max_launch_bytes=budget) ** 2)
        f = jax.grad(loss) if grad else loss
        return jax.jit(f).lower(jnp.asarray(scene.params[KEY])).compile().memory_analysis().temp_size_in_bytes

    for grad in (False, True):
        whole, tiled = temp_bytes(None, grad), temp_bytes(3000, grad)
        # 21 x 17 items x 100 floats of blocks in one launch; one row's in a band.
        assert tiled * 3 < whole, (grad, tiled, whole)


@pytest.mark.parametrize("case", ["camera", "camera box filter", "geometry"])
def test_tiled_camera_and_geometry_derivatives_equal_one_launch(case):
    """Bands of rows carry moving cameras and geometry too: the film's
    boundary term (one launch over the grid: it has no per-item buffers)
    is added to the bands' canvas."""
    import jax
    import jax.numpy as jnp
    import jaxrender
    from jaxrender.primitives import render_rules
    from test_camera_gradients import WEIGHTS, _scene as camera_scene
    from test_geometry_gradients import _translate_x, shadow_scene
    if case == "geometry":
        scene, key = jaxrender.load_dict(shadow_scene()), "occluder.to_world"
    else:
        scene, key = jaxrender.load_dict(camera_scene(filt="box" if "box" in case else "gaussian")), "sensor.to_world"
    x0 = jnp.asarray(scene.params[key])
    tangent = _translate_x(x0)

    def loss(x, budget=None):
        # (seed_grad 4: each case's derivative far from 0 at this seed, so that equal is not trivially so)
        return jnp.sum(jaxrender.render(scene, {key: x}, spp=4, seed=1, seed_grad=4, max_launch_bytes=budget)
                       * WEIGHTS)

    bands = []
    over_tiles = render_rules._over_tiles
    def counted(config, *args, **kw):
        bands.append(config.split.tiles)
        return over_tiles(config, *args, **kw)
    render_rules._over_tiles = counted
    try:
        rev = [float(jnp.sum(jax.grad(loss)(x0, b) * tangent)) for b in (None, 4000)]
        fwd = [float(jax.jvp(lambda x: loss(x, b), (x0,), (tangent,))[1]) for b in (None, 4000)]
    finally:
        render_rules._over_tiles = over_tiles
    assert bands and min(bands) >= 2
    assert abs(rev[0]) > 1.0
    np.testing.assert_allclose(rev[1], rev[0], rtol=1e-5)
    np.testing.assert_allclose(fwd[1], fwd[0], rtol=1e-5)


def test_tiled_aov_render_equals_one_launch():
    import jaxrender
    scene = _scene("box", {"type": "aov", "aovs": "dd:depth,nn:sh_normal"})
    np.testing.assert_array_equal(jaxrender.render(scene, spp=2, max_launch_bytes=500), jaxrender.render(scene, spp=2))


@pytest.mark.parametrize("bad", [0, -5, 1.5, "lots", True])
def test_bad_launch_budget_is_a_scene_error(bad):
    import jaxrender
    with pytest.raises(jaxrender.SceneError, match="max_launch_bytes"):
        jaxrender.render(_scene("box"), spp=1, max_launch_bytes=bad)


def test_a_launch_too_large_to_index_is_a_scene_error_before_any_work():
    import jaxrender
    d = jaxrender.cornell_box()
    d["sensor"]["film"].update(width=20000, height=20000)   # gaussian: 100 floats a pixel
    scene = jaxrender.load_dict(d)
    with pytest.raises(jaxrender.SceneError, match="lower max_launch_bytes"):
        jaxrender.render(scene, spp=1, max_launch_bytes=2 ** 45)
