"""``shapegroup`` and ``instance`` (one BVH per group shared by its
instances, ``jaxrender/scene/instancing.py``), against Mitsuba 3.9.1 and
against the instances expanded into copies (``expand_instances=True``):

* the inputs Mitsuba's ``load_dict`` rejects (emitters, nested groups or
  instances in a group, an instance without exactly one shapegroup, a
  non-shape in a group, ...) are SceneErrors here, and the ones it accepts
  load;
* ray hits (t, point, geometric and shading normals) on a group of meshes
  (file normals, computed normals, face normals) and analytic shapes under
  translated, rotated and scaled, mirrored and (without the sphere)
  non-uniformly scaled and sheared instances equal ``scene.ray_intersect``;
  the group by itself is never hit;
* a Cornell box with three instances of a group (a mesh and a sphere) is
  Mitsuba's image within noise;
* the gradient of an instanced shape's BSDF reflectance (one BSDF row that
  every instance shares) equals finite differences;
* the parameter keys are Mitsuba's, and an instance's to_world is not a
  parameter (a clear error);
* the shared hierarchy's hits (t, p, normals, UV) and occlusion equal the
  copies' for mirrored, non-uniformly scaled and sheared instances, beside
  analytic shapes, own triangles or nothing else; its buffers keep the
  group's rows once for 50 instances; instances holding a medium and a
  scene with a refit mesh render as their copies within noise.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.kernels import layout
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform as T
from test_render_reference import disagreements
from test_shapes import MESHES, _rays, _sensor, _to_mitsuba, mitsuba_hits, occluded, our_hits

mi = pytest.importorskip("mitsuba")


@pytest.fixture(autouse=True)
def _scalar_variant():
    mi.set_variant("scalar_rgb")


def _rgb(*v):
    return {"type": "diffuse", "reflectance": {"type": "rgb", "value": list(v)}}


def group(sphere=True):
    """Meshes with file, computed and face normals, a cylinder, a disk and
    (optionally) a sphere, around the origin."""
    g = {"type": "shapegroup",
         "mesh": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"),
                  "to_world": T().translate([0.8, 0.0, 0.0]).scale(0.5), "bsdf": _rgb(0.8, 0.2, 0.1)},
         "torus": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                   "to_world": T().translate([-0.6, 0.3, 0.0]).scale(0.4)},
         "box": {"type": "cube", "to_world": T().translate([0.0, 0.0, 0.7]).scale(0.2)},
         "tube": {"type": "cylinder", "p0": [0.0, -0.8, -0.3], "p1": [0.2, -0.4, 0.4], "radius": 0.2},
         "disk": {"type": "disk", "flip_normals": True, "to_world": T().translate([0.0, -0.2, -0.6]).scale(0.4)}}
    if sphere:
        g["ball"] = {"type": "sphere", "center": [0.0, 0.8, 0.2], "radius": 0.3, "bsdf": _rgb(0.2, 0.5, 0.8)}
    return g


def instance(to_world=None, ref="g"):
    d = {"type": "instance", "shapegroup": {"type": "ref", "id": ref}}
    if to_world is not None:
        d["to_world"] = to_world
    return d


def scene_dict(**shapes):
    return {"type": "scene", "sensor": _sensor(), **shapes}


# ---------------------------------------------------------------------------
# Loading: what Mitsuba rejects, rejected here
# ---------------------------------------------------------------------------
REJECTED = {
    "emitter in group": (dict(g={"type": "shapegroup", "a": {"type": "sphere", "e": {"type": "area"}}}),
                         "instancing of emitters"),
    "nested group": (dict(g={"type": "shapegroup", "h": {"type": "shapegroup", "a": {"type": "sphere"}}}),
                     "nested shapegroups"),
    "referenced group in group": (dict(g=group(), h={"type": "shapegroup", "x": {"type": "ref", "id": "g"}}),
                                  "nested shapegroups"),
    "instance in group": (dict(g=group(), h={"type": "shapegroup", "i": instance()}), "nested instancing"),
    "bsdf in group": (dict(g={"type": "shapegroup", "a": {"type": "sphere"}, "b": {"type": "diffuse"}}),
                      "holds only shapes"),
    "light in group": (dict(g={"type": "shapegroup", "a": {"type": "sphere"}, "b": {"type": "point"}}),
                       "holds only shapes"),
    "instance without group": (dict(i={"type": "instance"}), "reference to a 'shapegroup' must be given"),
    "instance of two groups": (dict(g=group(), h=group(), i={**instance(), "other": {"type": "ref", "id": "h"}}),
                               "only one shapegroup"),
    "instance of a bsdf": (dict(m={"type": "diffuse"}, i=instance(ref="m")), "only a shapegroup"),
    "instance of a sphere": (dict(i={"type": "instance", "s": {"type": "sphere"}}), "only a shapegroup"),
    "instance with a bsdf": (dict(g=group(), i={**instance(), "bsdf": {"type": "diffuse"}}), "only a shapegroup"),
    "instance of an inline group": (dict(i={"type": "instance", "s": group()}), "must be a reference"),
    "unknown id": (dict(i=instance(ref="nope")), "unknown id 'nope'"),
    "group property": (dict(g={**group(), "radius": 1.0}, i=instance()), "radius"),
    "instance property": (dict(g=group(), i={**instance(), "flip_normals": True}), "flip_normals"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_rejected_as_mitsuba_rejects(name):
    shapes, message = REJECTED[name]
    d = scene_dict(**shapes)
    with pytest.raises(Exception):
        mi.load_dict(_to_mitsuba(mi, d))
    with pytest.raises(SceneError, match=message):
        jaxrender.load_dict(d)


def test_accepted_as_mitsuba_accepts():
    """A group instanced before it is declared, silhouette_sampling_weight
    on both, a top-level shape also referenced into a group (shown by
    itself and through the instance, as in Mitsuba), a group nobody
    instances (checked, never shown), and a shapegroup's to_world, which
    Mitsuba ignores (so do we, with a warning)."""
    d = scene_dict(i={**instance(T().translate([3, 0, 0])), "silhouette_sampling_weight": 1.0},
                   ball={"type": "sphere", "radius": 0.5},
                   g={"type": "shapegroup", "silhouette_sampling_weight": 1.0, "b": {"type": "ref", "id": "ball"},
                      "to_world": T().translate([0, 0, 5])},
                   unused={"type": "shapegroup", "a": {"type": "rectangle"}})
    mi.load_dict(_to_mitsuba(mi, d))
    with pytest.warns(UserWarning, match="no effect"):
        scene = jaxrender.load_dict(d)
    o = np.array([[0, 0, -5], [3, 0, -5], [0, 0, 5 - 5]], np.float32)
    dirs = np.array([[0, 0, 1], [0, 0, 1], [0, 1e-3, 1]], np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    ours, ref = our_hits(scene, o, dirs), mitsuba_hits(mi, {k: v for k, v in d.items() if k != "sensor"}, o, dirs)
    np.testing.assert_allclose(ours["t"], ref["t"], atol=1e-5)
    assert ours["t"][0] > 0 and ours["t"][1] > 0


def test_group_alone_is_not_shown():
    """The group's own shapes are not in the scene: only the instance's
    copy, far away, is."""
    d = scene_dict(g=group(), i=instance(T().translate([20, 0, 0])))
    scene = jaxrender.load_dict(d)
    o, dirs = _rays(200, seed=3)
    assert np.all(our_hits(scene, o, dirs)["t"] < 0)
    assert np.all(mitsuba_hits(mi, {k: v for k, v in d.items() if k != "sensor"}, o, dirs)["t"] < 0)


def test_sphere_under_non_uniform_instance_is_refused():
    """Mitsuba shows it as an ellipsoid; our analytic sphere has one radius."""
    d = scene_dict(g=group(), i=instance(T().scale([1.0, 2.0, 1.0])))
    mi.load_dict(_to_mitsuba(mi, d))
    with pytest.raises(SceneError, match="i.to_world: the instance scales non-uniformly.*'g.ball'"):
        jaxrender.load_dict(d)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # (the Transform's own inverse)
def test_singular_instance_is_refused():
    with pytest.raises(SceneError, match="i.to_world: the transform is singular"):
        jaxrender.load_dict(scene_dict(g=group(), i=instance(T().scale([1.0, 0.0, 1.0]))))


# ---------------------------------------------------------------------------
# Ray hits against Mitsuba's ray_intersect
# ---------------------------------------------------------------------------
INSTANCES = {
    "translated": (True, T().translate([0.3, -0.2, 0.1])),
    "rotated-scaled": (True, T().translate([0.1, 0.2, -0.1]).rotate([0.6, 0.0, 0.8], 40).scale(1.3)),
    "mirrored": (True, T().rotate([0, 0, 1], 25).scale([-1.1, 1.1, 1.1])),
    "non-uniform": (False, T().rotate([0, 1, 0], 30).scale([1.4, 0.7, 1.0])),
    "sheared-mirrored": (False, T(np.array([[1.0, 0.4, 0.0, 0.1], [0.0, 0.9, 0.0, 0.0], [0.2, 0.0, -1.2, 0.0],
                                            [0.0, 0.0, 0.0, 1.0]]))),
}


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_hits_match_mitsuba(name):
    """t, p, geometric and shading normals of 400 rays at one instance
    (and the group's own space, where nothing is) of the group; two more
    instances sit elsewhere."""
    sphere, to_world = INSTANCES[name]
    shapes = dict(g=group(sphere), i=instance(to_world),
                  j=instance(T().translate([6, 0, 0]).scale(0.5)), k=instance(T().translate([0, 6, 0])))
    scene = jaxrender.load_dict(scene_dict(**shapes))
    o, d = _rays(400, seed=len(name), lo=-1.4, hi=1.4, dist=5.0)
    ours, ref = our_hits(scene, o, d), mitsuba_hits(mi, shapes, o, d)
    hit = ref["t"] > 0
    agree = (ours["t"] > 0) == hit
    assert agree.mean() > 0.99 and hit.mean() > 0.2, (agree.mean(), hit.mean())
    # Mitsuba solves the cylinder's quadratic in double precision, we in
    # float32: rays within a degree of grazing differ more.
    both = agree & hit & (np.abs(np.sum(d * ref["ng"], axis=1)) > 0.02)
    for k, tol in (("t", 1e-4), ("p", 5e-5), ("ng", 5e-5), ("ns", 2e-4)):
        err = np.max(np.abs(ours[k][both] - ref[k][both]))
        assert err < tol, (k, err)


# ---------------------------------------------------------------------------
# An image and a gradient
# ---------------------------------------------------------------------------
def instanced_cbox(size=32, spp=64):
    """The Cornell box whose boxes are three instances of a group of a
    smooth torus and a sphere (translated; rotated and scaled; mirrored)."""
    d = jaxrender.cornell_box()
    del d["small-box"], d["large-box"]
    d["sensor"]["film"].update(width=size, height=size, rfilter={"type": "box"})
    d["sensor"]["sampler"]["sample_count"] = spp
    d["integrator"] = {"type": "path", "max_depth": 4, "rr_depth": 100}
    d["things"] = {"type": "shapegroup",
                   "torus": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                             "to_world": T().scale(0.35), "bsdf": _rgb(0.7, 0.6, 0.2)},
                   "ball": {"type": "sphere", "center": [0.0, 0.3, 0.0], "radius": 0.2, "bsdf": _rgb(0.2, 0.4, 0.8)}}
    d["a"] = instance(T().translate([-0.45, -0.7, 0.3]), "things")
    d["b"] = instance(T().translate([0.4, -0.5, -0.3]).rotate([0, 1, 0], 60).rotate([1, 0, 0], 30).scale(1.3),
                      "things")
    d["c"] = instance(T().translate([0.0, 0.3, 0.2]).scale([-0.8, 0.8, 0.8]), "things")
    return d


def mitsuba_image(d, renders=4):
    """Mean and standard error of Mitsuba's pixels over ``renders`` seeds."""
    scene = mi.load_dict(_to_mitsuba(mi, d))
    imgs = np.stack([np.asarray(mi.render(scene, seed=s), np.float64) for s in range(renders)])
    return {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(renders)}


def test_image_matches_mitsuba_within_noise():
    d = instanced_cbox()
    ref = mitsuba_image(d)
    scene = jaxrender.load_dict(d)
    assert scene.structure.analytic and len(scene.shapes) == 3
    renders = np.stack([np.asarray(jaxrender.render(scene, seed=10 + k), np.float64) for k in range(4)])
    assert disagreements(renders, ref) == []
    # control: the middle instance moved by 0.1 is a different image
    d["c"]["to_world"] = T().translate([0.1, 0.3, 0.2]).scale([-0.8, 0.8, 0.8])
    wrong = jaxrender.load_dict(d)
    renders = np.stack([np.asarray(jaxrender.render(wrong, seed=10 + k), np.float64) for k in range(4)])
    assert disagreements(renders, ref) != []


def test_params_keys_are_mitsubas():
    d = instanced_cbox(size=4, spp=1)
    scene = jaxrender.load_dict(d)
    ours = {k for k in scene.params if k.startswith("things.")}
    theirs = {k for k in mi.traverse(mi.load_dict(_to_mitsuba(mi, d))).keys()
              if k.startswith("things.") and "reflectance" in k}
    assert ours == theirs == {"things.torus.bsdf.reflectance.value", "things.ball.bsdf.reflectance.value"}
    # (this group holds a sphere, so its instances are copied: their to_world is fixed at load time)
    with pytest.raises(SceneError, match="'b.to_world' is not a parameter.*copied into the scene when it is loaded"):
        jaxrender.render(scene, {"b.to_world": np.eye(4, dtype=np.float32)}, spp=1)
    with pytest.raises(SceneError, match="'things.ball.to_world' is not a parameter.*geometry"):
        jaxrender.render(scene, {"things.ball.to_world": np.eye(4, dtype=np.float32)}, spp=1)


@pytest.mark.parametrize("key, rfilter", [("things.torus.bsdf.reflectance.value", "box"),
                                          ("things.ball.bsdf.reflectance.value", "box"),
                                          ("things.torus.bsdf.reflectance.value", "gaussian")])
def test_instanced_bsdf_gradient_matches_finite_differences(key, rfilter):
    """The reflectance of the group's shape, shared by all three instances:
    the adjoint equals central differences of the primal with the same
    random numbers (with Mitsuba's default gaussian filter too, whose
    film-weights kernel once asked for the instance buffers)."""
    d = instanced_cbox(size=12, spp=4)
    d["sensor"]["film"]["rfilter"] = {"type": rfilter}
    scene = jaxrender.load_dict(d)
    weights = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (12, 12, 3)), jnp.float32)

    def loss(x, seed, seed_grad):
        return jnp.sum(jaxrender.render(scene, {key: x}, seed=seed, seed_grad=seed_grad) * weights)

    x0 = jnp.asarray(scene.params[key])
    g = np.asarray(jax.grad(loss)(x0, 7, 7))
    assert np.all(np.abs(g) > 1e-2), g
    h = 5e-2 * float(jnp.max(x0))
    for c in range(3):
        e = jnp.zeros(3).at[c].set(h)
        fd = (float(loss(x0 + e, 7, 0)) - float(loss(x0 - e, 7, 0))) / (2 * h)
        assert abs(g[c] - fd) <= 2e-3 * abs(fd) + 1e-4, (key, c, g[c], fd)


# ---------------------------------------------------------------------------
# Shared shapegroups (scene/instancing.py) against the expanded copies
# ---------------------------------------------------------------------------
def mesh_group():
    """The group's meshes (file, computed and face normals) without its analytic shapes."""
    return {k: v for k, v in group(sphere=False).items() if k not in ("tube", "disk")}


SPREAD = {"a": T().translate([0.3, -0.2, 0.1]).scale(0.6),
          "mirrored": T().translate([-1.0, 0.5, 0.0]).rotate([0, 0, 1], 25).scale([-0.6, 0.6, 0.6]),
          "non-uniform": T().translate([1.0, 0.8, -0.5]).rotate([0, 1, 0], 30).scale([0.7, 0.35, 0.5]),
          "sheared-mirrored": T(np.array([[0.5, 0.2, 0.0, 0.0], [0.0, 0.45, 0.0, -1.0], [0.1, 0.0, -0.6, 0.5],
                                          [0.0, 0.0, 0.0, 1.0]]))}
LAYOUTS = {
    # the scene's own primitives in the skip-link BVH (analytic shapes, expanded in both)
    "with analytic shapes": lambda: dict(g=group(sphere=False), **{k: instance(m) for k, m in SPREAD.items()}),
    # the scene's own triangles in the 8-wide BVH
    "with own triangles": lambda: dict(g=mesh_group(), floor={"type": "rectangle", "to_world": T().translate(
        [0, 0, -1.5]).scale(2.0)}, **{k: instance(m) for k, m in SPREAD.items()}),
    "instances only": lambda: dict(g=mesh_group(), **{k: instance(m) for k, m in SPREAD.items()}),
}


def shared_and_expanded(shapes: dict):
    return shared_and_expanded_scenes(scene_dict(**shapes))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_shared_hits_equal_the_expanded_copies(layout):
    """t, point, normals and UV of 4000 rays through mirrored, non-uniformly
    scaled and sheared instances: the two-level hierarchy's hit (computed in
    group space) is the copy's (computed in the world) up to float32
    rounding of the transforms."""
    shared, expanded = shared_and_expanded(LAYOUTS[layout]())
    o, d = _rays(4000, seed=3, lo=-1.6, hi=1.6, dist=5.0)
    ours, ref = our_hits(shared, o, d), our_hits(expanded, o, d)
    hit = ref["t"] > 0
    agree = (ours["t"] > 0) == hit
    assert agree.mean() > 0.998 and 0.1 < hit.mean() < 0.9, (agree.mean(), hit.mean())
    both = agree & hit & (ours["t"] > 0)
    same_t = np.abs(ours["t"] - ref["t"]) < 1e-4 * ref["t"]
    assert same_t[both].mean() > 0.998       # (the rest: the nearest of two surfaces within rounding)
    both &= same_t
    for k, tol in (("p", 1e-4), ("ng", 1e-5), ("ns", 2e-4), ("uv", 2e-4)):
        err = np.max(np.abs(ours[k][both] - ref[k][both]))
        assert err < tol, (k, err)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_shared_occlusion_equals_the_expanded_copies(layout):
    shared, expanded = shared_and_expanded(LAYOUTS[layout]())
    o, d = _rays(4000, seed=4, lo=-1.6, hi=1.6, dist=5.0)
    t_max = np.random.default_rng(1).uniform(3.0, 7.0, len(o)).astype(np.float32)
    ours, ref = occluded(shared, o, d, t_max), occluded(expanded, o, d, t_max)
    assert 0.05 < ref.mean() < 0.9
    assert (ours == ref).mean() > 0.999


def test_expanded_instances_are_placed_by_their_to_world():
    """An expanded instance's to_world (Mitsuba's key) places its copies of
    the group's meshes as loading the scene with that transform does:
    points and shading normals (from a file, computed, face normals) of
    mirrored, non-uniformly scaled and sheared instances."""
    shapes = LAYOUTS["instances only"]()
    expanded = jaxrender.load_dict(scene_dict(**shapes), expand_instances=True)
    keys = [f"{k}.to_world" for k in SPREAD]
    assert set(keys) <= set(expanded.params)
    shift = T().translate([0.1, -0.2, 0.3]).rotate([1, 1, 0], 20).matrix
    moved = {k: np.asarray(shift @ np.asarray(expanded.params[k], np.float64), np.float32) for k in keys}
    out = expanded.geometry_buffers({**expanded.params, **moved}, moved)
    loaded = jaxrender.load_dict(scene_dict(**{k: instance(T(moved[f"{k}.to_world"].astype(np.float64)))
                                               if k in SPREAD else v for k, v in shapes.items()}),
                                 expand_instances=True)
    ours = np.concatenate([out["tris"], out["tri_normals"]], axis=1).astype(np.float64)
    ref = np.concatenate([loaded.triangles, loaded.tri_normals], axis=1).astype(np.float64)
    # (the refit keeps the loaded scene's leaf order: rows matched by nearest neighbour)
    dist = np.abs(ours[:, None, :] - ref[None, :, :]).max(axis=2).min(axis=1)
    assert len(ours) == len(ref) > 500 and dist.max() < 1e-5, dist.max()
    assert not np.allclose(out["tris"], expanded.triangles)


def test_moved_rows_name_every_mesh_an_expanded_instance_places():
    """``MovingGeometry.moved_rows``, what the derivative rules favour
    (``render_rules.MovingRows``), names exactly the leaf rows whose
    triangles a parameter moves: for an expanded instance, those of every
    mesh of its group."""
    expanded = jaxrender.load_dict(scene_dict(**LAYOUTS["instances only"]()), expand_instances=True)
    for name in SPREAD:
        key = f"{name}.to_world"
        moved = {key: np.asarray(T().translate([0.1, 0.0, 0.0]).matrix @ np.asarray(expanded.params[key], np.float64),
                                 np.float32)}
        out = expanded.geometry_buffers({**expanded.params, **moved}, moved)
        changed = np.nonzero(np.any(np.asarray(out["tris"]) != expanded.triangles, axis=1))[0]
        leaf, shapes, _ = expanded.moving.moved_rows(key)
        assert len(changed) > 12 and np.array_equal(leaf, changed), (key, len(leaf), len(changed))
        assert len(shapes) == 0


def test_shared_instance_derivatives_equal_expanded_ones():
    """A shared instance's to_world is differentiable: its row of the
    instance table follows the parameter, and every point seen through it
    is placed by it (file, computed and face normals; a sheared, mirrored
    instance). Under a sky and an area light, the path
    tracer's reverse mode agrees with that of the scene's expanded copies
    (whose derivatives test_geometry_gradients holds against finite
    differences), and forward mode with reverse mode, seed for seed."""
    d = scene_dict(**LAYOUTS["with own triangles"]())
    d["sensor"] = {"type": "perspective", "fov": 60.0, "to_world": T().look_at([0.3, 0.2, 3.2], [0, 0, 0], [0, 1, 0]),
                   "film": {"type": "hdrfilm", "width": 24, "height": 24}}
    d["integrator"] = {"type": "path", "max_depth": 3}
    d["sky"] = {"type": "constant", "radiance": {"type": "rgb", "value": [0.05, 0.05, 0.05]}}
    d["lamp"] = {"type": "rectangle", "to_world": T().translate([1.0, 1.5, 3.0]).rotate([0, 1, 0], 180).scale(0.8),
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [8.0, 8.0, 8.0]}}}
    shared, expanded = shared_and_expanded_scenes(d)
    key = "sheared-mirrored.to_world"
    value = jnp.asarray(shared.params[key])
    tangent = jnp.zeros((4, 4), jnp.float32).at[0, 3].set(1.0)
    # (rising across the image: a sideways motion changes their sum one way)
    weights = jnp.asarray(np.broadcast_to(np.linspace(0.0, 1.0, 24)[None, :, None], (24, 24, 3)), jnp.float32)

    def loss(scene, v, s):
        return jnp.sum(jaxrender.render(scene, {key: v}, spp=32, seed=s, seed_grad=s) * weights)

    def reverse(scene, seeds):
        grad = jax.jit(lambda v, s: jnp.sum(jax.grad(lambda x: loss(scene, x, s))(v) * tangent))
        return np.array([float(grad(value, jnp.uint32(s))) for s in seeds])
    ours, copies = reverse(shared, range(32)), reverse(expanded, range(100, 132))
    z = (ours.mean() - copies.mean()) / np.sqrt(ours.var(ddof=1) / 32 + copies.var(ddof=1) / 32)
    assert abs(z) < 4.0 and abs(copies.mean()) > 4.0 * copies.std() / np.sqrt(32), (ours.mean(), copies.mean())
    jvp = jax.jit(lambda v, s: jax.jvp(lambda x: loss(shared, x, s), (v,), (tangent,))[1])
    np.testing.assert_allclose([float(jvp(value, jnp.uint32(s))) for s in range(2)], ours[:2], rtol=1e-3, atol=1e-3)


def shared_and_expanded_scenes(d: dict):
    """``d`` loaded with shared instances, and with them expanded."""
    shared, expanded = jaxrender.load_dict(d), jaxrender.load_dict(d, expand_instances=True)
    assert shared.structure.instanced and not expanded.structure.instanced
    return shared, expanded


def test_buffers_do_not_grow_with_the_instance_count():
    """50 instances of a group keep its triangle rows once (Mitsuba's
    sharing); the expanded scene has 50 copies."""
    torus = {"type": "shapegroup", "torus": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply")}}

    def load(n, expand=False):
        shapes = {f"i{k}": instance(T().translate([k % 10 - 4.5, k // 10 - 2.0, 0.0]).scale(0.3), "t")
                  for k in range(n)}
        return jaxrender.load_dict(scene_dict(t=torus, floor={"type": "rectangle"}, **shapes),
                                   expand_instances=expand)

    one, fifty, copies = load(1), load(50), load(50, expand=True)
    group_rows = len(one.triangles) - 2
    assert group_rows > 100
    assert len(fifty.triangles) == len(one.triangles) == 2 + group_rows
    for k in ("group_nodes", "group_leaves", "groups"):
        assert fifty.instancing[k].shape == one.instancing[k].shape
    assert len(fifty.instancing["instances"]) == 50 and len(one.instancing["instances"]) == 1
    assert len(copies.triangles) == 2 + 50 * group_rows and copies.instancing is None


def in_media(where: str) -> dict:
    """test_media's scene with two instances (one mirrored) of a group whose
    cube holds the medium ("holding"), or of a diffuse cube inside the
    medium's box, its exterior that medium ("inside")."""
    from test_media import medium_scene
    d = medium_scene(spp=16, sigma_t=2.0 if where == "holding" else 0.4)
    if where == "holding":
        box = d.pop("box")
        d["g"] = {"type": "shapegroup", "box": {**box, "to_world": T().scale(0.5)}}
        place = (T().translate([-0.6, 0.0, 0.0]).rotate([0, 1, 0], 30), T().translate([0.7, -0.3, 0.2]).scale(
            [-1.2, 0.8, 1.0]))
    else:
        d["fog"] = d["box"].pop("interior")
        d["box"]["interior"] = {"type": "ref", "id": "fog"}
        cube = {"type": "cube", "to_world": T().scale(0.25), "bsdf": _rgb(0.9, 0.9, 0.9),
                "exterior": {"type": "ref", "id": "fog"}}
        d["g"] = {"type": "shapegroup", "cube": cube}
        place = (T().translate([-0.3, 0.1, 0.0]).rotate([0, 1, 0], 30), T().translate([0.3, -0.3, 0.1]).scale(
            [-1.2, 0.8, 1.0]))
    d["a"], d["b"] = (instance(m, "g") for m in place)
    return d


@pytest.mark.parametrize("where", ["holding", "inside"])
def test_instances_with_media_render_as_their_copies(where):
    """volpath: the medium rows of the group's primitives are read by row;
    the image is the expanded scene's within noise."""
    d = in_media(where)
    shared, expanded = jaxrender.load_dict(d), jaxrender.load_dict(d, expand_instances=True)
    assert shared.structure.instanced and len(shared.prim_media) == len(shared.triangles)

    def renders(scene):
        return np.stack([np.asarray(jaxrender.render(scene, seed=10 + k), np.float64) for k in range(4)])

    ref = renders(expanded)
    ref = {"mean": ref.mean(0), "stderr": ref.std(0, ddof=1) / 2.0}
    assert disagreements(renders(shared), ref) == []
    # control: the second instance moved onto the first is a different image
    d["b"]["to_world"] = d["a"]["to_world"]
    assert disagreements(renders(jaxrender.load_dict(d)), ref) != []


def test_corrupt_instance_tables_stay_in_bounds():
    """The kernels read the instance tables through clamped gathers and the
    group ranges through the clamped ranged query: garbage in them gives
    wrong hits, never a wild read."""
    shared, _ = shared_and_expanded(LAYOUTS["with own triangles"]())
    rng = np.random.default_rng(3)
    tables = shared.instancing
    tables["groups"] = rng.integers(-2 ** 31, 2 ** 31 - 1, tables["groups"].shape).astype(np.int32)
    tables["instance_group"] = np.int32([10 ** 9, -5, 3, 0])
    o, d = _rays(500, seed=5, lo=-1.6, hi=1.6, dist=5.0)
    assert our_hits(shared, o, d)["t"].shape == (500,)


def test_refit_keeps_the_shared_groups():
    """A mesh placed by a parameter in a scene with instances: the refit
    geometry keeps the group rows after the scene's own, and the image with
    a moved mesh is the expanded scene's within noise."""
    d = instanced_cbox(size=16, spp=16)
    shared, expanded = jaxrender.load_dict(d), jaxrender.load_dict(d, expand_instances=True)
    key = "floor.to_world"
    moved = {key: np.asarray(T().translate([0, -0.9, 0]).rotate([1, 0, 0], -90).matrix, np.float32)}
    out = shared.geometry_buffers({**shared.params, **moved}, moved)
    own = int(shared.instancing["groups"][0, layout.GROUP_FIRST_ROW])
    assert out["tris"].shape == shared.triangles.shape and 0 < own < len(shared.triangles)
    assert np.array_equal(out["tris"][own:], shared.triangles[own:])
    assert not np.array_equal(out["tris"][:own], shared.triangles[:own])

    def renders(scene):
        return np.stack([np.asarray(jaxrender.render(scene, moved, seed=10 + k), np.float64) for k in range(4)])

    ref = renders(expanded)
    assert disagreements(renders(shared), {"mean": ref.mean(0), "stderr": ref.std(0, ddof=1) / 2.0}) == []


def test_only_instanced_scenes_get_the_instanced_kernels():
    """A scene without instances of meshes (also one whose groups hold only
    analytic shapes, which are copied) keeps the kernels it had: no
    instance inputs, no '_instanced' variant."""
    from jaxrender.kernels.integrators import PathIntegrator
    plain = jaxrender.load_dict(jaxrender.cornell_box())
    spheres = jaxrender.load_dict(scene_dict(g={"type": "shapegroup", "ball": {"type": "sphere"}}, i=instance()))
    shared = jaxrender.load_dict(instanced_cbox(size=4, spp=1))
    for scene in (plain, spheres):
        assert not scene.structure.instanced and scene.instancing is None
        kernel = PathIntegrator().primal_kernel(scene.structure)
        assert not set(layout.instance_inputs()) & set(kernel.inputs) and "_instanced" not in kernel.name
    kernel = PathIntegrator().primal_kernel(shared.structure)
    assert set(layout.instance_inputs()) <= set(kernel.inputs) and kernel.name.endswith("_instanced")
