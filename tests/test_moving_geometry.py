"""Meshes placed by parameters (``<mesh>.vertex_positions``, a rectangle's
``to_world``): the geometry buffers rebuilt inside the call (``scene/refit.py``).

* with the loaded positions the refit buffers are the loaded ones, bit for
  bit (8-wide BVH and the skip-link BVH of scenes with analytic shapes);
* hits on a deformed mesh (distance, normals, recomputed vertex normals)
  equal Mitsuba 3's ``ray_intersect`` after writing the same
  ``vertex_positions`` and ``params.update()``;
* a mesh moved far from its load-time neighbours is still hit where brute
  force hits it (the refit BVH keeps every box exact);
* images with moved geometry equal images of a scene loaded with it there
  (a moved emitter's area included); under ``jax.jit`` new positions
  neither retrace nor recompile; ``vmap`` over positions;
* spheres, disks and cylinders moved through their ``to_world`` are hit
  as Mitsuba hits them after the same update, and render as if loaded there;
* derivatives raise NotDifferentiableError naming the key; bad values
  raise SceneError.
"""
from __future__ import annotations

import copy
import dataclasses

import jax
import numpy as np
import pytest

import jaxrender
from jaxrender.primitives import launch
from jaxrender.render import kernel_inputs
from jaxrender.scene.bvh import intersect_triangles
from jaxrender.scene.transform import Transform as T
from test_shapes import MESHES, _rays, _scalars, _sensor, _to_mitsuba, hit_kernel, mitsuba_hits

SIZE, SPP = 24, 4


def hits(scene, o, d, params=None) -> dict:
    """Closest hits of rays (o, d) through the kernels' own intersection."""
    structure = dataclasses.replace(scene.structure, tex_slots=1)
    inputs = kernel_inputs(scene, params)
    if not len(inputs["tri_uv"]):
        inputs["tri_uv"] = scene.tri_uv       # (UVs even without textures)
    out = launch(hit_kernel(structure), (len(o),), **inputs, **_scalars(), pts=np.asarray(o, np.float32),
                 dirs=np.asarray(d, np.float32))
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def _cornell():
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = SIZE
    return d


def _render(scene, params=None):
    return np.asarray(jaxrender.render(scene, params, spp=SPP, seed=3))


def test_loaded_positions_give_the_loaded_buffers():
    """The triangles' 8-wide BVH, alone and beside a sphere's skip-link
    BVH: every buffer a refit makes from the loaded positions is the loaded
    one."""
    for extra in ({}, {"ball": {"type": "sphere", "radius": 0.2, "center": [0.3, 0.0, 0.2]}}):
        scene = jaxrender.load_dict({**_cornell(), **extra})
        keys = ["small-box.vertex_positions", "large-box.vertex_positions"]
        loaded = scene.kernel_inputs()
        refit = scene.kernel_inputs({k: scene.params[k] for k in keys})
        changed = [k for k in loaded if not np.array_equal(np.asarray(loaded[k]), np.asarray(refit[k]))]
        assert changed == []
        assert len(loaded["wide_nodes"]) > 0
        assert len(loaded["bvh_bounds"]) == (1 if extra else 0)     # (the sphere's own BVH: one leaf)


def test_deformed_mesh_hits_equal_mitsuba():
    """A smooth OBJ mesh (file normals) and a PLY (computed normals),
    deformed at random: t, point, face and shading normals equal Mitsuba's
    after it writes the same vertex_positions (which recomputes normals)."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    rng = np.random.default_rng(0)
    for name, spec in (("obj", {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"),
                                "to_world": T().rotate([0.6, 0.0, 0.8], 50.0).scale(0.8)}),
                       ("ply", {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"), "face_normals": True,
                                "to_world": T().scale([0.7, 1.2, 0.7])})):
        scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), name: spec})
        key = f"{name}.vertex_positions"
        v = scene.params[key]
        moved = (v + rng.normal(0.0, 0.03, v.shape) + np.tile([0.1, -0.05, 0.0], len(v) // 3)).astype(np.float32)
        o, d = _rays(400, seed=1)
        ours = hits(scene, o, d, {key: moved})
        ref_scene = mi.load_dict({"type": "scene", name: _to_mitsuba(mi, spec)})
        params = mi.traverse(ref_scene)
        params[key] = type(params[key])(moved.tolist())
        params.update()
        _assert_hits_agree(ours, _mitsuba_hits_of(mi, ref_scene, o, d), d, shading=True)
        unmoved = hits(scene, o, d)
        assert np.mean(np.abs(unmoved["t"] - ours["t"]) > 1e-3) > 0.3     # (the deformation shows)


def _assert_hits_agree(ours, ref, d, shading):
    """The same rays hit (all but grazing ones), at the same distances, with
    the same face normals (and shading normals if ``shading``)."""
    hit = ref["t"] > 0
    agree = (ours["t"] > 0) == hit
    assert agree.mean() > 0.99 and hit.mean() > 0.2
    # (rays within a degree of grazing: see test_shapes' cylinders)
    both = agree & hit & (np.abs(np.sum(d * ref["ng"], axis=1)) > 0.02)
    np.testing.assert_allclose(ours["t"][both], ref["t"][both], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["ng"][both], ref["ng"][both], atol=2e-5)
    if shading:
        np.testing.assert_allclose(ours["ns"][both], ref["ns"][both], atol=1e-4)


def test_vertex_normals_and_texcoords_are_mitsubas_parameters():
    """A textured smooth mesh's ``vertex_normals`` and ``vertex_texcoords``
    (Mitsuba's keys and values), written with or without new positions:
    shading normals and UVs of hits equal Mitsuba's after the same update."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    spec = {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "to_world": T().scale(0.8),
            "bsdf": {"type": "diffuse", "reflectance": {"type": "checkerboard"}}}
    scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), "ball": spec})
    ref_scene = mi.load_dict({"type": "scene", "ball": _to_mitsuba(mi, spec)})
    params = mi.traverse(ref_scene)
    keys = ["ball.vertex_positions", "ball.vertex_normals", "ball.vertex_texcoords"]
    for k in keys:
        np.testing.assert_allclose(scene.params[k], np.array(params[k]), atol=1e-6)
    rng = np.random.default_rng(5)

    def normals():
        n = scene.params[keys[1]].reshape(-1, 3) + rng.normal(0.0, 0.3, (len(scene.params[keys[1]]) // 3, 3))
        return (n / np.linalg.norm(n, axis=1, keepdims=True)).astype(np.float32).reshape(-1)
    o, d = _rays(400, seed=3)
    # (Mitsuba's update skips keys written with their current value: each write is new)
    for written in ([keys[1], keys[2]], [keys[0], keys[1], keys[2]]):
        values = {keys[0]: scene.params[keys[0]] * np.float32(1.05), keys[1]: normals(),
                  keys[2]: (scene.params[keys[2]] * rng.uniform(1.2, 1.8) + 0.2).astype(np.float32)}
        values = {k: values[k] for k in written}
        ours = hits(scene, o, d, values)
        for k in written:
            params[k] = type(params[k])(values[k].tolist())
        params.update()
        ref = _mitsuba_hits_of(mi, ref_scene, o, d)
        _assert_hits_agree(ours, ref, d, shading=True)
        hit = (ref["t"] > 0) & (ours["t"] > 0)
        np.testing.assert_allclose(ours["uv"][hit], ref["uv"][hit], atol=1e-4)
    assert np.abs(hits(scene, o, d)["ns"] - ours["ns"]).max() > 0.1


def _mitsuba_hits_of(mi, scene, o, d):
    # (test_shapes.mitsuba_hits loads its own scene; this one was updated)
    out = {k: [] for k in ("t", "ng", "ns", "uv")}
    for oo, dd in zip(o, d):
        si = scene.ray_intersect(mi.Ray3f(mi.Point3f(*map(float, oo)), mi.Vector3f(*map(float, dd))))
        out["t"].append(float(si.t) if si.is_valid() else -1.0)
        out["ng"].append(np.array(si.n))
        out["ns"].append(np.array(si.sh_frame.n))
        out["uv"].append(np.array(si.uv))
    return {k: np.array(v, np.float64) for k, v in out.items()}


@pytest.mark.parametrize("with_sphere", [False, True])
def test_far_moved_triangles_are_found(with_sphere):
    """Triangles of a soup moved far from their load-time neighbours (a
    permutation of their positions): closest hits through the refit BVH
    equal brute force over the moved triangles."""
    rng = np.random.default_rng(2)
    n = 300
    centres = rng.uniform(-1, 1, (n, 1, 3))
    tris = centres + rng.normal(0.0, 0.08, (n, 3, 3))
    v, f = tris.reshape(-1, 3), np.arange(3 * n).reshape(-1, 3)
    ply = _write_ply(v, f)
    shapes = {"soup": {"type": "ply", "filename": ply, "face_normals": True}}
    if with_sphere:
        shapes["ball"] = {"type": "sphere", "radius": 0.05, "center": [3.0, 3.0, 3.0]}
    scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), **shapes})
    perm = rng.permutation(n)
    moved = (tris[perm] + rng.normal(0.0, 0.01, (n, 1, 3))).astype(np.float32)
    o, d = _rays(2000, seed=4)
    ours = hits(scene, o, d, {"soup.vertex_positions": moved.reshape(-1)})
    m = moved.reshape(-1, 9)
    t_all = np.stack([intersect_triangles(o[i], d[i], m[:, 0:3], m[:, 3:6], m[:, 6:9]) for i in range(len(o))])
    best = np.where(np.isfinite(t_all), t_all, np.inf).min(axis=1)
    hit = np.isfinite(best)
    assert hit.mean() > 0.3
    assert np.array_equal(ours["t"] > 0, hit)
    np.testing.assert_allclose(ours["t"][hit], best[hit], rtol=1e-5)


def _write_ply(v, f) -> str:
    import tempfile
    path = tempfile.NamedTemporaryFile(suffix=".ply", delete=False).name
    with open(path, "w") as out:
        out.write(f"ply\nformat ascii 1.0\nelement vertex {len(v)}\nproperty float x\nproperty float y\n"
                  f"property float z\nelement face {len(f)}\nproperty list uchar int vertex_indices\nend_header\n")
        out.writelines(f"{a} {b} {c}\n" for a, b, c in v)
        out.writelines(f"3 {a} {b} {c}\n" for a, b, c in f)
    return path


def test_moved_box_and_light_render_as_loaded_there():
    """The small box moved and the light made larger through params give the
    image of the scene loaded with them there (the light's area and so its
    power follow its to_world)."""
    d = _cornell()
    scene = jaxrender.load_dict(d)
    shift = np.array([0.2, 0.0, 0.1])
    v = scene.params["small-box.vertex_positions"]
    light = scene.params["light.to_world"] @ np.diag([1.5, 1.5, 1.0, 1.0]).astype(np.float32)
    ours = _render(scene, {"small-box.vertex_positions": (v.reshape(-1, 3) + shift).reshape(-1).astype(np.float32),
                           "light.to_world": light})
    moved = copy.deepcopy(d)
    moved["small-box"]["to_world"] = T().translate(shift.tolist()) @ d["small-box"]["to_world"]
    moved["light"]["to_world"] = T(light.astype(np.float64))
    want = _render(jaxrender.load_dict(moved))
    np.testing.assert_allclose(ours, want, atol=2e-5)
    assert np.abs(ours - _render(scene)).max() > 0.1


def test_jit_and_vmap_over_positions():
    """New positions under jit reuse the traced function (and its kernel);
    vmap over positions equals one render each."""
    scene = jaxrender.load_dict(_cornell())
    key = "small-box.vertex_positions"
    v = scene.params[key]
    shifted = v + np.tile(np.float32([0.1, 0.0, -0.1]), len(v) // 3)
    traces = []

    @jax.jit
    def image(positions):
        traces.append(1)
        return jaxrender.render(scene, {key: positions}, spp=SPP, seed=3)

    a, b = np.asarray(image(v)), np.asarray(image(shifted))
    assert len(traces) == 1
    np.testing.assert_array_equal(a, _render(scene))
    np.testing.assert_array_equal(b, _render(scene, {key: shifted}))
    both = jax.vmap(lambda p: jaxrender.render(scene, {key: p}, spp=SPP, seed=3))(np.stack([v, shifted]))
    np.testing.assert_array_equal(np.asarray(both), np.stack([a, b]))


def test_geometry_derivatives_and_bad_values_raise():
    scene = jaxrender.load_dict(_cornell())
    key = "small-box.vertex_positions"
    v = scene.params[key]
    # (the path tracer differentiates them: tests/test_geometry_gradients.py; volpath's kernels, in a scene
    # with a medium, do not)
    assert np.all(np.isfinite(np.asarray(jax.grad(lambda p: jaxrender.render(scene, {key: p}, spp=1).mean())(v))))
    d = _cornell()
    d["sensor"]["medium"] = {"type": "homogeneous", "sigma_t": 0.1}
    volpath = jaxrender.load_dict(dict(d, integrator={"type": "volpath"}))
    with pytest.raises(jaxrender.NotDifferentiableError, match=key):
        jax.grad(lambda p: jaxrender.render(volpath, {key: p}, spp=1).mean())(v)
    with pytest.raises(jaxrender.NotDifferentiableError, match="light.to_world"):
        jax.jvp(lambda m: jaxrender.render(volpath, {"light.to_world": m}, spp=1),
                (scene.params["light.to_world"],), (np.ones((4, 4), np.float32),))
    bad = v.copy()
    bad[4] = np.nan
    with pytest.raises(jaxrender.SceneError, match=key):
        jaxrender.render(scene, {key: bad})
    with pytest.raises(jaxrender.SceneError, match="shape"):
        jaxrender.render(scene, {key: v[:-3]})
    flat = scene.params["light.to_world"] @ np.diag([1.0, 0.0, 1.0, 1.0]).astype(np.float32)
    with pytest.raises(jaxrender.SceneError, match="zero area"):
        jaxrender.render(scene, {"light.to_world": flat})


def test_shapegroup_meshes_are_not_parameters():
    d = {"type": "scene", "sensor": _sensor(),
         "group": {"type": "shapegroup", "box": {"type": "cube"}},
         "copy": {"type": "instance", "shape": {"type": "ref", "id": "group"}}}
    scene = jaxrender.load_dict(d)
    assert scene.moving.keys == ("copy.to_world",)          # (the instance moves; its group's meshes do not)
    with pytest.raises(jaxrender.SceneError, match="shapegroup"):
        jaxrender.render(scene, {"group.box.vertex_positions": np.zeros(72, np.float32)})


ANALYTIC = {
    "ball": {"type": "sphere", "center": [0.3, 0.1, -0.2], "radius": 0.4},
    "plate": {"type": "disk", "flip_normals": True, "to_world": T().translate([-0.4, 0.0, 0.3]).scale(0.5)},
    "tube": {"type": "cylinder", "p0": [0.0, -0.5, 0.0], "p1": [0.1, 0.5, 0.2], "radius": 0.2},
}


def _moved_transforms(scene):
    """New to_world values: a rigid motion and a uniform scale per shape."""
    motion = T().translate([0.1, -0.2, 0.15]).rotate([0.3, 0.9, 0.1], 35.0).scale(1.2).matrix
    return {f"{k}.to_world": (motion @ scene.params[f"{k}.to_world"]).astype(np.float32) for k in ANALYTIC}


def test_moved_analytic_shapes_hit_as_mitsuba_after_its_update():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), **ANALYTIC})
    new = _moved_transforms(scene)
    o, d = _rays(600, seed=7)
    ours = hits(scene, o, d, new)
    ref_scene = mi.load_dict({"type": "scene", **_to_mitsuba(mi, ANALYTIC)})
    params = mi.traverse(ref_scene)
    for k, v in new.items():
        params[k] = mi.ScalarTransform4f(v.astype(np.float64).tolist())
    params.update()
    _assert_hits_agree(ours, _mitsuba_hits_of(mi, ref_scene, o, d), d, shading=False)
    assert np.mean(np.abs(hits(scene, o, d)["t"] - ours["t"]) > 1e-3) > 0.2


def test_moved_sphere_light_renders_as_loaded_there():
    """A sphere light moved and enlarged: its area (and power) and box follow."""
    d = _cornell()
    d.pop("light")
    d["lamp"] = {"type": "sphere", "center": [0.0, 0.6, 0.0], "radius": 0.1,
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [8.0, 8.0, 8.0]}}}
    scene = jaxrender.load_dict(d)
    m = T().translate([0.3, -0.2, 0.1]).matrix @ scene.params["lamp.to_world"] @ np.diag([2.0, 2.0, 2.0, 1.0])
    ours = _render(scene, {"lamp.to_world": m.astype(np.float32)})
    moved = copy.deepcopy(d)
    moved["lamp"]["center"], moved["lamp"]["radius"] = [0.3, 0.4, 0.1], 0.2
    np.testing.assert_allclose(ours, _render(jaxrender.load_dict(moved)), atol=5e-5)
    traced = jax.jit(lambda m: jaxrender.render(scene, {"lamp.to_world": m}, spp=SPP, seed=3))(m.astype(np.float32))
    np.testing.assert_allclose(np.asarray(traced), ours, atol=1e-5)
    assert np.abs(ours - _render(scene)).max() > 0.1
    with pytest.raises(jaxrender.SceneError, match="singular"):
        jaxrender.render(scene, {"lamp.to_world": np.diag([0.0, 1.0, 1.0, 1.0]).astype(np.float32)})


def test_field_of_view_is_mitsubas_x_fov_parameter():
    """``<sensor>.x_fov`` is Mitsuba's value (the horizontal angle in degrees,
    whatever fov_axis the scene used); a new value renders as a scene loaded
    with it, traced or not, and is not differentiable."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    d = _cornell()
    d["sensor"]["film"]["width"] = 2 * SIZE                      # (an aspect ratio that is not 1)
    d["sensor"]["fov_axis"] = "y"
    scene = jaxrender.load_dict(d)
    ref = copy.deepcopy(d)
    ref["sensor"]["to_world"] = _to_mitsuba(mi, ref["sensor"]["to_world"])
    ref["sensor"]["film"] = {k: v for k, v in ref["sensor"]["film"].items() if k != "rfilter"}
    theirs = mi.traverse(mi.load_dict({"type": "scene", "sensor": ref["sensor"]}))["sensor.x_fov"]
    np.testing.assert_allclose(scene.params["sensor.x_fov"], float(np.ravel(theirs)[0]), rtol=1e-6)
    wide = copy.deepcopy(d)
    wide["sensor"]["fov"], wide["sensor"]["fov_axis"] = 60.0, "x"
    want = _render(jaxrender.load_dict(wide))
    np.testing.assert_allclose(_render(scene, {"sensor.x_fov": np.float32(60.0)}), want, atol=1e-5)
    traced = jax.jit(lambda f: jaxrender.render(scene, {"sensor.x_fov": f}, spp=SPP, seed=3))(np.float32(60.0))
    np.testing.assert_allclose(np.asarray(traced), want, atol=1e-5)
    # (its derivative: tests/test_camera_gradients.py)
    assert np.isfinite(float(jax.grad(lambda f: jaxrender.render(scene, {"sensor.x_fov": f}, spp=1).mean())(
        np.float32(50.0))))
    with pytest.raises(jaxrender.SceneError, match="180"):
        jaxrender.render(scene, {"sensor.x_fov": np.float32(180.0)})


def _instanced(to_world_b):
    """Two instances of a shared group of meshes (the second at ``to_world_b``)."""
    d = _cornell()
    del d["small-box"], d["large-box"]
    d["things"] = {"type": "shapegroup",
                   "torus": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"), "to_world": T().scale(0.3),
                             "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.7, 0.5, 0.2]}}}}
    d["a"] = {"type": "instance", "shape": {"type": "ref", "id": "things"}, "to_world": T().translate([-0.4, -0.6, 0.2])}
    d["b"] = {"type": "instance", "shape": {"type": "ref", "id": "things"}, "to_world": to_world_b}
    return d


def test_moved_instances_render_as_loaded_there():
    """An instance's to_world (Mitsuba's key) moves its row and its box in
    the hierarchy over the instances: the image of the scene loaded with
    the instance there, concrete or under jit; its group is not copied."""
    start = T().translate([0.3, -0.5, -0.2])
    moved = T().translate([0.1, 0.2, 0.1]).rotate([0.2, 1.0, 0.3], 70.0).scale([1.4, 0.9, 1.1])
    scene = jaxrender.load_dict(_instanced(start))
    assert scene.structure.instanced and "b.to_world" in scene.params and "b.to_world" in scene.nondifferentiable
    m = np.asarray(moved.matrix, np.float32)
    ours = _render(scene, {"b.to_world": m})
    want = _render(jaxrender.load_dict(_instanced(moved)))
    np.testing.assert_allclose(ours, want, atol=2e-5)
    assert np.abs(ours - _render(scene)).max() > 0.1
    traced = jax.jit(lambda x: jaxrender.render(scene, {"b.to_world": x}, spp=SPP, seed=3))(m)
    np.testing.assert_allclose(np.asarray(traced), ours, atol=2e-5)
    with pytest.raises(jaxrender.SceneError, match="singular"):
        jaxrender.render(scene, {"b.to_world": np.diag([1.0, 0.0, 1.0, 1.0]).astype(np.float32)})
