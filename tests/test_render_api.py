"""The public rendering API and command line: jit with a traced seed, parameter
overrides, recompile-free reuse, clear errors for unsupported or bad input."""
from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxpr_util import kernel_launches
from test_mesh_io import write_ply
from jaxrender import cli
from jaxrender.lowering import stats


def small_cbox(size=16, **integrator):
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = size
    d["sensor"]["film"]["height"] = size
    if integrator:
        d["integrator"] = {"type": "path", **integrator}
    return d


def test_render_shape_jit_and_seed():
    scene = jaxrender.load_dict(small_cbox())
    img = jaxrender.render(scene, spp=2, seed=1)
    assert img.shape == (16, 16, 3) and img.dtype == np.float32
    f = jax.jit(lambda s: jaxrender.render(scene, spp=2, seed=s))
    a = np.asarray(f(np.uint32(1)))
    np.testing.assert_array_equal(a, np.asarray(img))          # same seed, same image
    assert not np.array_equal(a, np.asarray(f(np.uint32(2))))  # another seed, other noise


def test_parameters_and_sizes_do_not_recompile():
    scene = jaxrender.load_dict(small_cbox())
    jaxrender.render(scene, spp=1).block_until_ready()
    before = stats["compiled"] + stats["disk_hits"]
    dark = jaxrender.render(scene, {"light.emitter.radiance.value": np.zeros(3, np.float32)}, spp=2)
    # Only the light emits: turning it off leaves a black image.
    assert float(np.asarray(dark).max()) == 0.0
    red = jaxrender.render(scene, {"white.reflectance.value": np.array([0.9, 0.0, 0.0], np.float32)}, spp=4)
    assert np.asarray(red)[..., 1:].mean() < np.asarray(jaxrender.render(scene, spp=4))[..., 1:].mean()
    jaxrender.render(jaxrender.load_dict(small_cbox(24, max_depth=3)), spp=1).block_until_ready()
    assert stats["compiled"] + stats["disk_hits"] == before


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["white"].update(type="hair"), "'white': plugin type 'hair' is not supported"),
    (lambda d: d["floor"].update(bsdf={"type": "hair"}), "floor.bsdf: bsdf type 'hair' is not supported"),
    (lambda d: d["floor"].update(bsdf={"type": "dielectric", "int_ior": "unobtainium"}),
     "floor.bsdf.int_ior: unknown index of refraction 'unobtainium'"),
    (lambda d: d["floor"].update(bsdf={"type": "plastic", "ext_ior": -1.0}),
     "floor.bsdf.ext_ior: an index of refraction must be positive"),
    (lambda d: d["floor"].update(bsdf={"type": "roughconductor", "alpha": [0.1, 0.2]}),
     "floor.bsdf.alpha.value: expected a finite float"),
    (lambda d: d["floor"].update(bsdf={"type": "roughplastic", "alpha": 0.0}),
     "floor.bsdf.alpha: roughness must be in (0, 4]"),
    (lambda d: d["floor"].update(bsdf={"type": "roughplastic", "alpha_u": 0.1, "alpha_v": 0.2}),
     "floor.bsdf: roughplastic does not support anisotropic roughness"),
    (lambda d: d["floor"].update(bsdf={"type": "roughplastic", "sample_visible": False}),
     "floor.bsdf.sample_visible: roughplastic without visible-normal sampling"),
    (lambda d: d["floor"].update(bsdf={"type": "twosided", "b": {"type": "roughplastic", "int_ior": 1.0,
                                                                  "ext_ior": 1.0}}),
     "floor.bsdf.brdf_0: int_ior and ext_ior must differ"),
    (lambda d: d["floor"].update(bsdf={"type": "roughplastic", "distribution": "phong"}),
     "floor.bsdf.distribution: unknown microfacet distribution 'phong'"),
    (lambda d: d.update(integrator={"type": "ptracer"}), "integrator 'ptracer' is not supported"),
    (lambda d: d["floor"].update(bsdf={"type": "ref", "id": "nope"}), "unknown id 'nope'"),
    (lambda d: d["floor"].update(to_world=np.full((4, 4), np.nan)), "floor: to_world must be a finite"),
    (lambda d: d["sensor"]["film"].update(rfilter={"type": "lanczos", "lobes": 2.5}), "lobes"),
    (lambda d: d.pop("sensor"), "the scene has no sensor"),
])
def test_unsupported_or_bad_scene_input_is_a_scene_error(edit, message):
    d = small_cbox()
    edit(d)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_bad_render_arguments():
    scene = jaxrender.load_dict(small_cbox())
    with pytest.raises(jaxrender.SceneError, match="unknown scene parameter"):
        jaxrender.render(scene, {"nope.value": np.zeros(3)}, spp=1)
    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(jaxrender.SceneError, match="spp must be a positive integer"):
            jaxrender.render(scene, spp=bad)
    with pytest.raises(jaxrender.SceneError, match=r"'white.reflectance.value' must have shape \(3,\)"):
        jaxrender.render(scene, {"white.reflectance.value": np.zeros(2, np.float32)}, spp=1)
    # Non-finite values would be NaN pixels: an error naming the key instead.
    for value, what in (([np.nan, 0.5, 0.5], "NaN"), ([0.5, np.inf, 0.5], "inf")):
        for wrap in (np.asarray, jnp.asarray):
            with pytest.raises(jaxrender.SceneError, match=f"'white.reflectance.value' has 1 non-finite.*{what}"):
                jaxrender.render(scene, {"white.reflectance.value": wrap(value)}, spp=1)
    for bad in (np.zeros((4, 4)), np.diag([2.0, 2.0, 2.0, 1.0])):    # singular; scaled
        with pytest.raises(jaxrender.SceneError, match="'sensor.to_world': a camera's to_world must be a rotation"):
            jaxrender.render(scene, {"sensor.to_world": bad}, spp=1)
    with pytest.raises(jaxrender.SceneError, match="'white.reflectance.value' must be numeric"):
        jaxrender.render(scene, {"white.reflectance.value": np.array(["a", "b", "c"], object)}, spp=1)


def test_zero_spp_means_the_scenes_sample_count_as_in_mitsuba():
    scene = jaxrender.load_dict(small_cbox())
    count = scene.sensor(0)[1].spp
    a = np.asarray(jaxrender.render(scene, spp=0, seed=3))
    np.testing.assert_array_equal(a, np.asarray(jaxrender.render(scene, seed=3)))
    np.testing.assert_array_equal(a, np.asarray(jaxrender.render(scene, spp=count, seed=3)))


def test_cli_render_png_exr_and_info(tmp_path, capsys):
    cli.main(["render", "-o", str(tmp_path / "c.png"), "--spp", "2", "--passes", "2", "-q"])
    from PIL import Image
    assert Image.open(tmp_path / "c.png").size == (256, 256)
    xml = tmp_path / "s.xml"
    xml.write_text("""<scene version="3.0.0">
      <default name="res" value="8"/>
      <integrator type="path"><integer name="max_depth" value="3"/></integrator>
      <sensor type="perspective">
        <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="$res"/><integer name="height" value="$res"/></film>
      </sensor>
      <shape type="rectangle" id="lamp"><emitter type="area"><rgb name="radiance" value="2"/></emitter></shape>
    </scene>""")
    cli.main(["render", str(xml), "-o", str(tmp_path / "s.exr"), "--spp", "1", "-D", "res=6", "-q"])
    import OpenEXR
    img = OpenEXR.File(str(tmp_path / "s.exr")).channels()["RGB"].pixels
    assert img.shape == (6, 6, 3)
    assert np.allclose(img[3, 3], 2.0)  # the lamp seen straight on
    cli.main(["info", str(xml)])
    assert "lamp.emitter.radiance.value" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", str(tmp_path / "missing.xml"), "-o", str(tmp_path / "m.png"), "-q"])
    assert exc.value.code == 2


@pytest.mark.parametrize("args, message", [
    (["-o", "{tmp}/out.jpg"], "unsupported output format '.jpg'"),
    (["-o", "{tmp}"], "unsupported output format"),
    (["-o", "{tmp}/missing/out.png"], "output directory"),
    (["-o", "{tmp}/dir.png"], "is a directory"),
    (["-o", "{tmp}/out.png", "--spp", "-2"], "--spp must be positive"),
    (["-o", "{tmp}/out.png", "--sensor", "3"], "sensor must be an index"),
    (["-o", "{tmp}/out.png", "-D", "x=1"], "-D overrides need a scene file"),
    (["{tmp}/missing.xml", "-o", "{tmp}/out.png"], "scene file not found"),
])
def test_cli_user_errors_are_one_line_and_exit_2_before_rendering(tmp_path, capsys, monkeypatch, args, message):
    (tmp_path / "dir.png").mkdir()
    rendered = []
    monkeypatch.setattr(jaxrender, "render", lambda *a, **k: rendered.append(1))
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", *[a.format(tmp=tmp_path) for a in args], "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not rendered and not (tmp_path / "out.png").exists()


def test_a_film_too_large_for_memory_is_an_error_before_any_work():
    d = small_cbox()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 200_000
    with pytest.raises(jaxrender.SceneError, match="more than the 2\\*\\*31 a render can index"):
        jaxrender.render(jaxrender.load_dict(d), spp=1)
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 40_000     # 600 GiB of splat blocks
    with pytest.raises(jaxrender.SceneError, match=r"needs \d+\.\d GiB for its image buffers"):
        jaxrender.render(jaxrender.load_dict(d), spp=1)


def test_vmap_over_cameras_is_one_launch():
    scene = jaxrender.load_dict(small_cbox(12))
    base = np.asarray(scene.params["sensor.to_world"])
    views = []
    for dx in (-0.3, 0.0, 0.4):
        m = base.copy()
        m[0, 3] += dx
        views.append(m)
    views = np.stack(views).astype(np.float32)
    f = jax.vmap(lambda m: jaxrender.render(scene, {"sensor.to_world": m}, spp=2, seed=3))
    jaxpr = jax.make_jaxpr(f)(views)
    # The image kernel (it also writes the film's weights), once for all views.
    launches = kernel_launches(jaxpr)
    assert list(launches.values()) == [1], launches
    batched = np.asarray(f(views))
    for k in range(3):
        single = np.asarray(jaxrender.render(scene, {"sensor.to_world": views[k]}, spp=2, seed=3))
        np.testing.assert_array_equal(batched[k], single)
    assert not np.array_equal(batched[0], batched[2])


def test_new_plugins_use_mitsubas_parameter_keys():
    """roughplastic's alpha / eta are Mitsuba scalars (no '.value'); a spot's
    intensity is a texture: the same keys as mitsuba.traverse."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    d = small_cbox()
    d["floor"]["bsdf"] = {"type": "roughplastic", "distribution": "ggx", "alpha": 0.2,
                          "specular_reflectance": 0.9}
    d["spot"] = {"type": "spot", "intensity": 3.0}
    ours = {k for k in jaxrender.load_dict(d).params if k.startswith(("floor", "spot"))}
    d["sensor"]["to_world"] = mi.ScalarTransform4f(np.asarray(d["sensor"]["to_world"].matrix).tolist())
    for k, v in d.items():
        if isinstance(v, dict) and "to_world" in v:
            v["to_world"] = mi.ScalarTransform4f(np.asarray(v["to_world"].matrix).tolist())
    theirs = set(mi.traverse(mi.load_dict(d)).keys())
    assert ours == {"floor.bsdf.alpha", "floor.bsdf.eta", "floor.bsdf.diffuse_reflectance.value",
                    "floor.bsdf.specular_reflectance.value", "spot.intensity.value", "floor.to_world"}
    assert ours <= theirs


def test_sensor_selects_among_the_scenes_sensors():
    d = small_cbox(8)
    second = dict(d["sensor"])
    second["film"] = {"type": "hdrfilm", "width": 6, "height": 4, "rfilter": {"type": "box"}}
    second["to_world"] = np.asarray(d["sensor"]["to_world"], np.float64) @ np.diag([1.0, 1.0, 1.0, 1.0])
    second["to_world"][0, 3] += 0.3
    d["cam2"] = second
    scene = jaxrender.load_dict(d)
    assert "cam2.to_world" in scene.params and "sensor.to_world" in scene.params
    a = np.asarray(jaxrender.render(scene, spp=2, seed=1))
    b = np.asarray(jaxrender.render(scene, sensor=1, spp=2, seed=1))
    assert a.shape == (8, 8, 3) and b.shape == (4, 6, 3)
    # Same as a scene whose only sensor is the second one.
    only = small_cbox(8)
    only["sensor"] = second
    c = np.asarray(jaxrender.render(jaxrender.load_dict(only), spp=2, seed=1))
    np.testing.assert_array_equal(b, c)
    with pytest.raises(jaxrender.SceneError, match="sensor"):
        jaxrender.render(scene, sensor=2)
    # the selected sensor's camera is the one differentiated (tests/test_camera_gradients.py)
    g = jax.grad(lambda m: jaxrender.render(scene, {"cam2.to_world": m}, sensor=1, spp=1).sum())(
        jax.numpy.asarray(scene.params["cam2.to_world"]))
    assert np.all(np.isfinite(np.asarray(g))) and float(np.abs(np.asarray(g)).sum()) > 0.0


def _grid_ply(path, n: int) -> str:
    """A binary PLY of an n x n grid of quads (2 n² triangles) on the box's floor."""
    u = np.linspace(-0.5, 0.5, n + 1)
    x, z = np.meshgrid(u, u)
    i = (np.arange(n)[:, None] * (n + 1) + np.arange(n)).ravel()
    write_ply(path, [("x", x.ravel()), ("y", np.full(x.size, -0.5)), ("z", z.ravel())],
              np.stack([i, i + 1, i + n + 2, i + n + 1], 1).tolist(), comments=False)
    return str(path)


def test_a_scenes_large_buffers_reach_xla_without_a_copy(tmp_path):
    # XLA copies a host array into a buffer of its own at every call unless
    # its data is 64-byte aligned: a million-triangle scene spent a fifth of
    # each frame copying its buffers.
    d = jaxrender.cornell_box()
    d["grid"] = {"type": "ply", "filename": _grid_ply(tmp_path / "grid.ply", 80), "bsdf": {"type": "diffuse"}}
    scene = jaxrender.load_dict(d)
    first, again = scene.kernel_inputs(), scene.kernel_inputs()
    large = {k: v for k, v in first.items() if isinstance(v, np.ndarray) and v.nbytes >= 1 << 16}
    assert {"tris", "tri_attr", "wide_leaves"} <= set(large)
    for name, value in large.items():
        assert again[name] is value, name            # no copy per render either
        assert jax.device_put(value).unsafe_buffer_pointer() == value.ctypes.data, name
    image = np.asarray(jaxrender.render(scene, spp=4))
    assert np.isfinite(image).all() and image.mean() > 0.01


def test_under_jit_jaxs_simplified_constants_pass_the_scene_as_arguments(tmp_path):
    """What the README advises for large scenes under jax.jit: by default JAX
    embeds the scene's buffers, which the jitted function closes over, in
    the compiled program; with ``jax_use_simplified_jaxpr_constants`` set
    when the program starts they are arguments, and the image is the same."""
    import subprocess
    import sys
    script = f"""
import sys, jax, numpy as np, jaxrender
d = jaxrender.cornell_box()
d["grid"] = {{"type": "ply", "filename": {_grid_ply(tmp_path / "grid.ply", 80)!r}, "bsdf": {{"type": "diffuse"}}}}
d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 16
scene = jaxrender.load_dict(d)
f = jax.jit(lambda seed: jaxrender.render(scene, spp=4, seed=seed))
np.save(sys.argv[1], np.asarray(f(2)))
print(len(f.lower(2).as_text()), scene.kernel_inputs()["tris"].nbytes)
"""
    sizes = {}
    for flag in ("0", "1"):
        env = dict(os.environ, JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=flag)
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"{flag}.npy")], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        sizes[flag], tris = map(int, out.stdout.split()[-2:])
    assert sizes["0"] > tris > 10 * sizes["1"], (sizes, tris)
    np.testing.assert_array_equal(np.load(tmp_path / "1.npy"), np.load(tmp_path / "0.npy"))
