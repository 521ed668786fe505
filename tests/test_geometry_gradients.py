"""Derivatives with respect to moving geometry (``<mesh>.vertex_positions``,
a rectangle's, a sphere's or a disk's ``to_world``) under the path and
direct integrators: points follow their surfaces
(``kernels/integrators/material.py``), the film's boundary term follows
moving silhouettes, and every path vertex sees edges and outlines move
(shadows, a light's edges, silhouettes after a bounce). Checked against
central finite differences with common random numbers; forward against
reverse mode.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxrender
from jaxrender import NotDifferentiableError
from jaxrender.kernels.integrators import base as integrator_base
from jaxrender.kernels import integrators
from jaxrender.kernels import layout
from jaxrender.kernels.integrators import PathIntegrator, material
from jaxrender.primitives import render_rules

from test_camera_gradients import WEIGHTS, _look_at, _z, uv_sphere_obj

import jitted


def _placed(sx, sy, sz, t, facing=None):
    """Scale, then turn a rectangle's +z to +y ("up") or -y ("down"), then translate."""
    m = np.diag([sx, sy, sz, 1.0]).astype(np.float32)
    turn = {"up": [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]],
            "down": [[1, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]}
    if facing:
        m = m @ np.array(turn[facing], np.float32)
    m[:3, 3] = t
    return m


def shadow_scene(occluder_type="rectangle", **changes) -> dict:
    """A floor lit by a small area light, with an occluder between them
    casting a shadow, seen from above at an angle; no environment."""
    d = {"type": "scene", "integrator": {"type": "direct"},
         "floor": {"type": "rectangle", "to_world": _placed(2, 2, 1, (0, 0, 0), "up"),
                   "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.7, 0.7, 0.7]}}},
         "light": {"type": "rectangle", "to_world": _placed(0.4, 0.4, 1, (0.2, 2.0, 0), "down"),
                   "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 10.0, 10.0]}}},
         "occluder": {"type": occluder_type,
                      "to_world": _placed(0.35, 0.35, 0.35, (0.0, 0.8, 0.0),
                                          "up" if occluder_type == "rectangle" else None),
                      "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.5, 0.4, 0.3]}}},
         "sensor": {"type": "perspective", "fov": 50.0, "to_world": _look_at((0.0, 3.0, 3.0), (0, 0, 0)),
                    "film": {"type": "hdrfilm", "width": 24, "height": 24}, "sampler": {"type": "independent"}}}
    d.update(changes)
    return d


def _with_obj_occluder(tmp_path, text: str):
    """The shadow scene with the occluder an OBJ mesh of ``text``, flat shaded."""
    obj = tmp_path / "occluder.obj"
    obj.write_text(text)
    d = shadow_scene()
    d["occluder"] = {"type": "obj", "filename": str(obj), "face_normals": True, "bsdf": d["occluder"]["bsdf"]}
    return jaxrender.load_dict(d)


def _loss(scene, key, value, seed, spp=64, weights=WEIGHTS, spp_boundary=None):
    kw = {} if spp_boundary is None else {"spp_boundary": spp_boundary}
    return jnp.sum(jaxrender.render(scene, {key: value}, spp=spp, seed=seed, seed_grad=seed, **kw) * weights)


def _fd(scene, key, value, tangent, h=0.01, seeds=range(1000, 1256), **loss):
    """Central differences of ``_loss`` (``loss``: its spp and weights)."""
    f = jax.jit(lambda v, s: _loss(scene, key, v, s, **loss))
    return np.array([(float(f(value + h * tangent, jnp.uint32(s))) - float(f(value - h * tangent, jnp.uint32(s))))
                     / (2 * h) for s in seeds])


def _reverse(scene, key, value, tangent, seeds=range(64), **loss):
    grad = jax.jit(lambda v, s: jnp.sum(jax.grad(lambda x: _loss(scene, key, x, s, **loss))(v) * tangent))
    return np.array([float(grad(value, jnp.uint32(s))) for s in seeds])


def _without_edges(fn, *args):
    """``fn(*args)`` with the camera point's edge term left out."""
    term = material.edge_term
    material.edge_term = lambda ctx, rec, x: rec.coef * 0.0
    integrator_base._KERNELS.clear()
    try:
        return fn(*args)
    finally:
        material.edge_term = term
        integrator_base._KERNELS.clear()


def _agrees_only_with_edges(scene, key, value, tangent):
    """Reverse mode within noise of finite differences; without the edges
    seen from path vertices, rejected."""
    fd = _fd(scene, key, value, tangent)
    rev = _reverse(scene, key, value, tangent)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    without = _without_edges(_reverse, scene, key, value, tangent, range(32))
    assert abs(_z(without, fd)) > 6.0, (without.mean(), fd.mean())


def _translate_x(value):
    """The tangent moving a to_world (4x4) or a vertex array (flat) along x."""
    t = np.zeros(np.shape(value), np.float32)
    if t.shape == (4, 4):
        t[0, 3] = 1.0
    else:
        t.reshape(-1, 3)[:, 0] = 1.0
    return jnp.asarray(t)


@pytest.mark.parametrize("occluder, key", [("rectangle", "occluder.to_world"),
                                           ("cube", "occluder.vertex_positions"),
                                           ("rectangle", "light.to_world")])
def test_moving_occluders_and_lights_match_finite_differences(occluder, key):
    """An occluder casting a shadow and seen against the floor, as a
    rectangle and as a split-vertex cube (its edges welded), and a moving
    light: reverse mode within noise of finite differences; without the
    edges seen from the floor (the shadow's and the light's boundaries) the
    derivative is rejected."""
    scene = jaxrender.load_dict(shadow_scene(occluder))
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    _agrees_only_with_edges(scene, key, value, tangent)


@pytest.mark.parametrize("occluder", ["rectangle", "cube"])
def test_path_tracer_with_indirect_light_matches_finite_differences(occluder):
    """The path tracer (four vertices) with a wall that bounces light back:
    the pair factor at every vertex, and the edges seen from every vertex
    with the radiance behind them traced on."""
    wall = {"type": "rectangle", "to_world": np.array([[2, 0, 0, 0], [0, 1.5, 0, 1.5], [0, 0, 1, -0.8], [0, 0, 0, 1]],
                                                      np.float32),
            "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.8, 0.8]}}}
    scene = jaxrender.load_dict(shadow_scene(occluder, integrator={"type": "path", "max_depth": 4}, wall=wall))
    key = "occluder.to_world" if occluder == "rectangle" else "occluder.vertex_positions"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    _agrees_only_with_edges(scene, key, value, tangent)


def test_one_vertex_moved_alone(tmp_path):
    """A pyramid's apex moved up alone: its four faces tilt, its silhouette
    and its shadow change shape."""
    scene = _with_obj_occluder(tmp_path, "v -0.4 0.5 -0.4\nv 0.4 0.5 -0.4\nv 0.4 0.5 0.4\nv -0.4 0.5 0.4\nv 0 1.0 0\n"
                               "f 1 2 5\nf 2 3 5\nf 3 4 5\nf 4 1 5\nf 1 4 3\nf 1 3 2\n")
    key = "occluder.vertex_positions"
    value = jnp.asarray(scene.params[key])
    apex = int(np.argmax(np.asarray(value).reshape(-1, 3)[:, 1]))
    tangent = np.zeros(value.shape, np.float32)
    tangent.reshape(-1, 3)[apex] = (0.3, 1.0, 0.2)
    tangent = jnp.asarray(tangent)
    fd = _fd(scene, key, value, tangent)
    rev = _reverse(scene, key, value, tangent)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _matches_finite_differences(scene, key, seeds=range(128), fd_seeds=range(1000, 1256)):
    """Reverse mode along x within noise of finite differences: (the
    finite differences, the reverse-mode estimates)."""
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=fd_seeds)
    rev = _reverse(scene, key, value, tangent, seeds)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    return fd, rev


def _beats_the_setting(monkeypatch, scene, key, seeds, setting: str, setting_value, bound: float):
    """Reverse mode along x (``seeds``) within noise of finite
    differences, with ``material.<setting>`` at ``setting_value`` as well (its
    kernels traced anew, and again after), and at under ``bound`` times
    that setting's variance."""
    fd, rev = _matches_finite_differences(scene, key, seeds)
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    monkeypatch.setattr(material, setting, setting_value)
    integrator_base._KERNELS.clear()
    try:
        other = _reverse(scene, key, value, tangent, seeds)
    finally:
        monkeypatch.undo()
        integrator_base._KERNELS.clear()
    assert abs(_z(other, fd)) < 4.0, (other.mean(), fd.mean())
    assert rev.var() < bound * other.var(), (rev.var(), other.var())


def test_edge_samples_favour_moving_geometry_beside_shared_instances(tmp_path, monkeypatch):
    """The same among shared instances: two instances of a shapegroup's UV
    sphere of 960 triangles, static, beside the moving occluder (the
    scene's own). The floor points' edge candidates are drawn half among
    the occluder's edges, not uniformly among the ~2900 instances' edge
    copies: within noise of finite differences, at under 0.2x the
    variance of uniform draws (MOVING_SHARE = 0: 1/118 here, 64 seeds;
    before the favouring took shared instances in, both read alike)."""
    clutter = tmp_path / "clutter.obj"
    clutter.write_text(uv_sphere_obj(32, 0.25))
    d = shadow_scene()
    d["g"] = {"type": "shapegroup", "ball": {"type": "obj", "filename": str(clutter), "face_normals": True,
                                             "bsdf": {"type": "diffuse"}}}
    for name, t in (("left", (-0.9, 0.25, -0.5)), ("back", (0.6, 0.25, -0.9))):
        d[name] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"}, "to_world": _placed(1, 1, 1, t)}
    scene = jaxrender.load_dict(d)
    assert scene.structure.instanced
    _beats_the_setting(monkeypatch, scene, "occluder.to_world", range(64), "MOVING_SHARE", 0.0, 0.2)


def test_edge_samples_favour_a_moving_shared_instance(tmp_path, monkeypatch):
    """A shared instance moved by its to_world among seven static
    instances of its shapegroup (a UV sphere of 960 triangles), one of them
    in front of it on the film: its edge copies are the items the floor's
    edge samples favour, and its world box (the group's, placed by its
    to_world) bounds the film boundary's static edges, which the front
    ball's silhouette is, with the moving ball seen past it. Within noise
    of finite differences, at under 0.5x the variance of the samples with
    nothing favoured (render_rules._moved None: uniform among the ~11500
    edge copies, the film's static edges kept whole, as every shared
    instance was before: 0.20x over 128 seeds). Without the instance's box
    (an empty one) the front ball's silhouette was dropped: 14.1 +- 0.5
    against finite differences' -5.7 +- 0.4."""
    from jaxrender.primitives import render_rules
    ball = tmp_path / "ball.obj"
    ball.write_text(uv_sphere_obj(32, 0.25))
    d = shadow_scene()
    del d["occluder"]
    d["g"] = {"type": "shapegroup", "ball": {"type": "obj", "filename": str(ball), "face_normals": True,
                                             "bsdf": {"type": "diffuse"}}}
    spots = [(0.22, 2.0, 1.6), (-0.9, 0.25, -0.5), (0.6, 0.25, -0.9), (-0.9, 0.25, 0.6), (0.9, 0.25, 0.5), (-0.3, 0.25, -1.1),
             (1.1, 0.25, -0.2), (0.0, 0.8, 0.0)]
    for i, t in enumerate(spots):
        d[f"ball{i}"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"}, "to_world": _placed(1, 1, 1, t)}
    scene = jaxrender.load_dict(d)
    assert scene.structure.instanced
    key = f"ball{len(spots) - 1}.to_world"
    fd, rev = _matches_finite_differences(scene, key)
    value = jnp.asarray(scene.params[key])
    monkeypatch.setattr(render_rules, "_moved", lambda *a: None)
    other = _reverse(scene, key, value, _translate_x(value), range(128))
    monkeypatch.undo()
    assert abs(_z(other, fd)) < 4.0, (other.mean(), fd.mean())
    assert rev.var() < 0.5 * other.var(), (rev.var(), other.var())


def test_vertex_edges_are_resampled_among_silhouettes(tmp_path, monkeypatch):
    """A sphere mesh of 224 triangles casting a shadow: from a floor point
    few of its 336 edges are silhouettes, and each vertex's edge sample
    resamples material.EDGE_CANDIDATES candidates by the angle they span
    where they are. Within noise of finite differences, and at well under
    the variance of one edge picked uniformly (EDGE_CANDIDATES = 1, the
    estimator it replaced: 0.24x over 512 seeds)."""
    scene = _with_obj_occluder(tmp_path, uv_sphere_obj(16, 0.3, (0.0, 0.8, 0.0)))
    # (heavy-tailed: 64 seeds can read 2x the mean)
    _beats_the_setting(monkeypatch, scene, "occluder.vertex_positions", range(256), "EDGE_CANDIDATES", 1, 0.5)


# Small lights above the shadow scene's occluder, of about its area light's
# power: a rectangle (a mesh emitter) and a sphere (an analytic one).
_SMALL_LIGHTS = {
    "rectangle": {"type": "rectangle", "to_world": _placed(0.15, 0.15, 0.15, (0.2, 2.0, 0.0), "down"),
                  "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [150.0] * 3}}},
    "sphere": {"type": "sphere", "center": [0.2, 2.0, 0.0], "radius": 0.12,
               "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [300.0] * 3}}}}


@pytest.mark.parametrize("light", sorted(_SMALL_LIGHTS))
def test_edges_with_an_emitter_behind_them_are_favoured(light, monkeypatch):
    """Under a small light the occluder's edges matter from a floor point
    only where the light lies behind them (``direct``: the path ends
    there), and each vertex's candidates are weighed by whether an emitter
    may (material._emission_guide: the rectangle's two triangles, the
    sphere's cone). Within noise of finite differences, and at well under
    the variance of the candidates unweighed (GUIDE_EMITTERS = -1; over
    128 seeds 0.44x under the rectangle, 0.21x under the sphere). The
    sphere also makes this a scene of moving triangles beside an analytic
    shape, where a triangle edge's point was once rebuilt from the
    outlines' angle (-3.8 +- 0.7 against finite differences' -10.8 +-
    0.6)."""
    scene = jaxrender.load_dict(shadow_scene("rectangle", light=_SMALL_LIGHTS[light]))
    _beats_the_setting(monkeypatch, scene, "occluder.to_world", range(128), "GUIDE_EMITTERS", -1, 0.65)


@pytest.mark.parametrize("light", ["disk", "cylinder"])
def test_shadows_under_disk_and_cylinder_lights_match_finite_differences(light):
    """A cube's shadow under a disk or a cylinder light: the vertices'
    edge candidates weighed by the light's bounding sphere, the cube's
    triangle edges sampled among the light's outline curves (before the
    triangle edges kept their fraction and density beside analytic shapes:
    2.4 +- 0.8 against finite differences' -15.5 +- 1.2 under the disk,
    18.0 +- 1.2 against 2.7 +- 0.5 under the cylinder)."""
    shape = ({"type": "disk", "to_world": _placed(0.3, 0.3, 0.3, (0.2, 2.0, 0.0), "down")} if light == "disk" else
             {"type": "cylinder", "to_world": _placed(0.1, 0.1, 0.6, (-0.1, 1.9, -0.3))})
    d = shadow_scene("cube", light=dict(shape, emitter={"type": "area", "radiance": {
        "type": "rgb", "value": [60.0 if light == "disk" else 30.0] * 3}}))
    _matches_finite_differences(jaxrender.load_dict(d), "occluder.vertex_positions")


def test_moving_meshes_beside_a_cylinder_match_finite_differences():
    """A static cylinder beside the shadow scene: the occluder's triangle
    edges are drawn among the cylinder's four outline curves, and keep a
    triangle edge's density (a cylinder's curves share its pick four ways;
    once the first shape's kind weighed the edges too, 4x: -54.4 +- 1.0
    against finite differences' -11.1 +- 0.4)."""
    d = shadow_scene("rectangle", tube={
        "type": "cylinder", "to_world": _placed(0.1, 0.1, 0.6, (-0.9, 0.3, -0.3)),
        "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.5, 0.5, 0.5]}}})
    _matches_finite_differences(jaxrender.load_dict(d), "occluder.to_world")


def _edge_on(case: str) -> dict:
    """A cube with faces seen exactly edge-on: by an orthographic camera
    looking down the diagonal of two of its axes (under a sky, no floor),
    or by a directional light shining straight down its sides."""
    if case == "orthographic":
        d = shadow_scene("cube", sky={"type": "constant", "radiance": {"type": "rgb", "value": [1.0] * 3}})
        del d["light"], d["floor"]
        d["sensor"] = dict(d["sensor"], type="orthographic",
                           to_world=d["sensor"]["to_world"] @ np.diag([1.5, 1.5, 1.0, 1.0]).astype(np.float32))
        del d["sensor"]["fov"]
        return d
    return shadow_scene("cube", light={"type": "directional", "direction": [0.0, -1.0, 0.0],
                                       "irradiance": {"type": "rgb", "value": [3.0] * 3}})


@pytest.mark.parametrize("case", ["orthographic", "directional"])
def test_faces_seen_edge_on_bound_the_outline(case):
    """Of the two edges of a face seen edge-on (no side of its plane to
    lie on) the one nearer the camera or light bounds the outline or the
    shadow, on its other face's side: within noise of finite differences
    (with neither, the orthographic cube read -1.1 +- 0.1 against 3.6 +-
    0.5, the directional light's shadow -6.4 +- 0.2 against -8.3 +- 0.5)."""
    # (the shadow's share of the derivative is small: more seeds for it)
    _matches_finite_differences(jaxrender.load_dict(_edge_on(case)), "occluder.vertex_positions",
                                range(128 if case == "orthographic" else 384),
                                range(1000, 1256 if case == "orthographic" else 1768))


def test_silhouette_against_the_sky_and_forward_equals_reverse():
    """A rectangle in front of a wall under a constant sky: finite
    differences agree, and the forward kernel is the adjoint's transpose
    (dot-product test along a random vertex tangent, the film's boundary
    kernels included)."""
    from test_camera_gradients import _scene
    d = _scene()
    d["integrator"] = {"type": "direct"}
    scene = jaxrender.load_dict(d)
    key = "front.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, h=0.02, seeds=range(1000, 1128))
    rev = _reverse(scene, key, value, tangent)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())

    t = jnp.asarray(np.random.default_rng(4).normal(size=(4, 4)).astype(np.float32)).at[3].set(0.0)
    image = lambda v: jaxrender.render(scene, {key: v}, spp=8, seed=2, seed_grad=5)   # noqa: E731
    c = jnp.asarray(np.random.default_rng(5).normal(size=(24, 24, 3)).astype(np.float32))
    jt = jitted.jvp(image, value, t)
    jtc = jitted.vjp(image, value, c)
    lhs, rhs = float(jnp.sum(jt * c)), float(jnp.sum(t * jtc))
    assert abs(lhs - rhs) <= 1e-3 * max(abs(lhs), abs(rhs), 1.0), (lhs, rhs)


@pytest.mark.parametrize("moving, hide_emitters", [(False, False), (True, True)])
def test_direct_adjoint_retracing_one_ray_equals_the_first_pass_form(monkeypatch, moving, hide_emitters):
    """``direct``'s PRB adjoint re-traces the one ray after a path's first
    vertex instead of running a first pass (``short_paths``): the same
    gradients as the first-pass form, for materials (whose continuation
    weights carry that ray's radiance; hide_emitters: camera rays passing
    through the light, whose rest is the whole path), and for geometry,
    the camera and a material together."""
    d = shadow_scene(integrator={"type": "direct", "hide_emitters": hide_emitters})
    d["sensor"]["to_world"] = _look_at((0.2, 1.1, 2.4), (0, 0.9, 0))          # the light in view
    d["light"]["to_world"] = _placed(0.8, 0.8, 1, (0.2, 2.0, 0), "down")      # often met by BSDF samples
    d["sensor"]["film"]["rfilter"] = {"type": "gaussian"}
    scene = jaxrender.load_dict(d)
    keys = ["floor.bsdf.reflectance.value", "occluder.bsdf.reflectance.value"]
    if moving:
        keys += ["occluder.to_world", scene.camera_key]
    p0 = {k: jnp.asarray(scene.params[k]) for k in keys}
    c = jnp.asarray(np.random.default_rng(7).normal(size=(24, 24, 3)).astype(np.float32))

    def grads():
        f = lambda p: jaxrender.render(scene, p, spp=4, seed=1, seed_grad=3)   # noqa: E731
        return jitted.vjp(f, p0, c)

    short = grads()
    monkeypatch.setitem(integrators.BY_TYPE, "direct", lambda props: PathIntegrator())
    first_pass = grads()
    for k in keys:
        want = np.asarray(first_pass[k])
        assert np.any(want != 0.0), k
        np.testing.assert_allclose(np.asarray(short[k]), want, rtol=1e-4,
                                   atol=1e-4 * float(np.max(np.abs(want))), err_msg=k)


def test_degenerate_triangles_give_finite_derivatives(tmp_path):
    """A moving mesh with a zero-area face and a collapsed one."""
    scene = _with_obj_occluder(tmp_path, "v -0.3 0.6 -0.3\nv 0.3 0.6 -0.3\nv 0.3 0.6 0.3\nv -0.3 0.6 0.3\n"
                               "v -0.2 0.9 0\nv 0 0.9 0\nv 0.2 0.9 0\nf 1 3 2\nf 1 4 3\nf 5 6 7\nf 5 5 6\n")
    key = "occluder.vertex_positions"
    value = jnp.asarray(scene.params[key])
    g = jitted.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=4) * WEIGHTS), value)
    assert np.all(np.isfinite(np.asarray(g)))
    t = jitted.jvp(lambda v: jaxrender.render(scene, {key: v}, spp=4), value, _translate_x(value))
    assert np.all(np.isfinite(np.asarray(t)))


def test_volumetric_path_tracers_without_media_take_geometry_derivatives():
    """prbvolpath in a scene without media renders with the path tracer's
    kernels: its geometry derivative (shadow, silhouette, a bounce off a
    wall) is within noise of its own finite differences."""
    wall = {"type": "rectangle", "to_world": np.array([[2, 0, 0, 0], [0, 1.5, 0, 1.5], [0, 0, 1, -0.8], [0, 0, 0, 1]],
                                                      np.float32),
            "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.8, 0.8]}}}
    scene = jaxrender.load_dict(shadow_scene(integrator={"type": "prbvolpath", "max_depth": 4}, wall=wall))
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent)
    rev = _reverse(scene, key, value, tangent)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(fd.mean()) > 4 * fd.std(ddof=1) / np.sqrt(len(fd))     # (a derivative that is not 0)


# a sensor in a medium: volpath's own kernels, which take no geometry derivatives
_IN_FOG = {"integrator": {"type": "volpath"},
           "sensor": dict(shadow_scene()["sensor"], medium={"type": "homogeneous", "sigma_t": 0.1})}


@pytest.mark.parametrize("changes, message", [
    (_IN_FOG, "path and direct"),
    ({"occluder": {"type": "rectangle", "bsdf": {"type": "conductor"}}}, "Dirac"),
])
def test_unsupported_geometry_derivatives_raise(changes, message):
    scene = jaxrender.load_dict(shadow_scene(**changes))
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    with pytest.raises(NotDifferentiableError, match=message):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(value)


def _disk_facing_up(d: dict) -> dict:
    """``d`` (a shadow scene) with its disk occluder turned to face the light."""
    d["occluder"]["to_world"] = d["occluder"]["to_world"] @ np.array(
        [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]], np.float32)
    return d


@pytest.mark.parametrize("occluder", ["sphere", "cylinder"])
def test_moving_analytic_occluders_match_finite_differences(occluder):
    """A sphere moving above the floor: its shadow's edge is its circle of
    tangency seen from the floor's points (sampled among the scene's
    outlines), its silhouette against the floor the film's; a lying tube's
    are its silhouette lines and rims. Without the outlines seen from the
    floor the derivative is rejected."""
    scene = jaxrender.load_dict(shadow_scene(occluder))
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    _agrees_only_with_edges(scene, key, value, _translate_x(value))


@pytest.mark.parametrize("shape, integrator", [("disk", "path"), ("tube", "path")])
def test_moving_disk_and_tube_match_finite_differences(shape, integrator):
    """A disk's rim: its shadow and its silhouette, and, with the path
    tracer and a wall bouncing light back, seen after a bounce. An open
    tube standing on the floor: its rims (the floor inside it sees them too)
    and its silhouette lines, from the camera and from the floor."""
    if shape == "disk":
        d = _disk_facing_up(shadow_scene("disk"))
    else:
        d = shadow_scene("cylinder")
        d["occluder"]["to_world"] = np.array([[0.35, 0, 0, 0.1], [0, 0, 0.5, 0], [0, -0.35, 0, 0], [0, 0, 0, 1]],
                                             np.float32)
    if integrator == "path":
        d["integrator"] = {"type": "path", "max_depth": 4}
        d["wall"] = {"type": "rectangle", "bsdf": {"type": "diffuse"}, "to_world": np.array(
            [[2, 0, 0, 0], [0, 1.5, 0, 1.5], [0, 0, 1, -0.8], [0, 0, 0, 1]], np.float32)}
    scene = jaxrender.load_dict(d)
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1128))
    # (the tube's estimate is heavy-tailed: its rims, seen from the floor inside it)
    rev = _reverse(scene, key, value, tangent, range(256 if shape == "tube" else 32))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _sphere_in_the_sky(reflectance) -> dict:
    return {"type": "scene", "integrator": {"type": "direct"},
            "sky": {"type": "constant", "radiance": {"type": "rgb", "value": [0.5, 0.6, 0.8]}},
            "ball": {"type": "sphere", "center": [0.1, 0.0, 0.0], "radius": 0.6,
                     "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": reflectance}}},
            "sensor": {"type": "perspective", "fov": 40.0, "to_world": _look_at((0.0, 0.5, 3.0), (0, 0, 0)),
                       "film": {"type": "hdrfilm", "width": 24, "height": 24}, "sampler": {"type": "independent"}}}


@pytest.mark.parametrize("key, motion", [("ball.to_world", "x"), ("ball.to_world", "grow")])
def test_sphere_silhouette_against_the_sky(key, motion):
    """A dark sphere against a bright sky, its image changed by its
    silhouette only: moved, grown about its centre. (A camera moved the
    other way is the same change, through the same film curves.) The film's boundary term on its circle of
    tangency, whose film normal is not the direction to the circle grown
    (it projects to an ellipse: that direction read 0.67x the derivative).
    The film's boundary samples are stratified along its curves and their
    sums divided by the film's expected weights: where the radiance on
    either side is exact, so is each seed's estimate (moved: its spread
    over seeds read 18% of the mean over the samples' own weights, 20%
    with the points drawn at random along the curves)."""
    scene = jaxrender.load_dict(_sphere_in_the_sky([0.0, 0.0, 0.0]))
    value = jnp.asarray(scene.params[key])
    if motion == "grow":
        tangent = jnp.zeros((4, 4), jnp.float32).at[:3, :3].set(value[:3, :3])
    else:
        tangent = _translate_x(value) * (-1.0 if motion == "-x" else 1.0)
    # (the sphere moved: tight enough to reject the old normal, z -6)
    tight = motion == "x"
    fd = _fd(scene, key, value, tangent, h=0.04 if tight else 0.02, seeds=range(1000, 1768 if tight else 1256))
    rev = _reverse(scene, key, value, tangent, range(16))
    assert rev.std() < 1e-3 * abs(rev.mean()), (rev.std(), rev.mean())
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _ball_among_cards(cx: float) -> dict:
    """The sphere in the sky at x = ``cx``, a static card in front of its
    right side and one in the film's top corner, far from it."""
    d = _sphere_in_the_sky([0.9, 0.5, 0.1])
    d["ball"]["center"] = [cx, 0.0, 0.0]
    card = {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.9, 0.8, 0.2]}}
    d["near_card"] = {"type": "rectangle", "to_world": _placed(0.3, 0.3, 1.0, (cx + 0.5, 0.3, 1.0)), "bsdf": card}
    d["far_card"] = {"type": "rectangle", "to_world": _placed(0.2, 0.2, 1.0, (0.9, 1.2, 0.0)), "bsdf": card}
    return d


def _film_curves(monkeypatch, scene, key, builder="film_segments"):
    """(segments, cumulative lengths) that ``render_rules.<builder>`` gives
    the film's boundary term of a gradient along ``key``."""
    seen = []
    original = getattr(render_rules, builder)
    monkeypatch.setattr(render_rules, builder, lambda *a, **k: seen.append(original(*a, **k)) or seen[-1])
    value = jnp.asarray(scene.params[key])
    jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(value)
    monkeypatch.undo()
    return tuple(np.asarray(x) for x in seen[-1])


def _boundary_lengths(monkeypatch, scene, key) -> dict:
    """The film lengths, by kind of segment, that the film's boundary term
    of a gradient along ``key`` samples."""
    segments, cdf = _film_curves(monkeypatch, scene, key)
    lengths, kind = np.diff(np.concatenate([[0.0], cdf])), segments[:, layout.SEG_KIND]
    return {name: float(lengths[kind == k].sum()) for name, k in
            (("silhouettes", layout.SEG_SILHOUETTE), ("film sides", layout.SEG_FILM_EDGE),
             ("outlines", layout.SEG_CURVE_KIND))}


def test_film_boundary_samples_only_where_moving_geometry_is_seen(monkeypatch):
    """With geometry alone moving, both velocities of the film's boundary
    term vanish wherever the film sees no moving point, so it samples the
    film's sides and static silhouettes only inside the film box of what
    moves (``primitives/boundary._moving_box``): the ball's outline, the
    near card's edges in front of it, no film side and not the far card.
    A moving camera moves everything: all of them. The ball across the
    film's side: that side's part beside it, and a gradient within noise
    of finite differences (the near card's edges and that side are where
    the ball's image changes besides its outline)."""
    inside = jaxrender.load_dict(_ball_among_cards(0.1))
    ball = _boundary_lengths(monkeypatch, inside, "ball.to_world")
    camera = _boundary_lengths(monkeypatch, inside, inside.camera_key)
    assert ball["film sides"] == 0.0 and camera["film sides"] == pytest.approx(96.0)
    assert ball["outlines"] == pytest.approx(camera["outlines"]) and ball["outlines"] > 20.0
    # (the far card's four edges, ~8 pixels, are gone; the near card's stay)
    assert 4.0 < ball["silhouettes"] < camera["silhouettes"] - 6.0, (ball, camera)

    across = jaxrender.load_dict(_ball_among_cards(-1.1))
    lengths = _boundary_lengths(monkeypatch, across, "ball.to_world")
    assert 4.0 < lengths["film sides"] < 24.0, lengths
    key = "ball.to_world"
    value = jnp.asarray(across.params[key])
    tangent = _translate_x(value)
    fd = _fd(across, key, value, tangent, h=0.02, seeds=range(1000, 1128))
    rev = _reverse(across, key, value, tangent, range(64))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _lens_sides(monkeypatch, scene, key) -> np.ndarray:
    """The thin lens's film sides (rows: top, right, bottom, left; start
    and end points; NaN where dropped) that the film's boundary term of a
    gradient along ``key`` samples."""
    segments, cdf = _film_curves(monkeypatch, scene, key, "lens_film_sides")
    lengths = np.diff(np.concatenate([[0.0], cdf]))
    return np.where(lengths[:, None] > 0.0, segments[:, :4], np.nan)


def test_thin_lens_film_sides_only_where_moving_geometry_is_seen(monkeypatch):
    """Through a thin lens, geometry alone moving, the film's sides are
    sampled only inside the film box of what moves grown by how far an
    aperture point sees its points from where the pinhole does. A ball
    whose pinhole image ends 3 pixels short of the film's right side,
    blurred 1.2 pixels across it: that side's part where some aperture point sees the
    ball beyond it (64 points on the aperture's rim, 4000 on the ball, the
    lens's projection as ``kernels/sensors/motion.film_position``), and no
    other side; in focus with a small aperture, no side; a moving camera:
    all four whole."""
    def scene_of(radius, focus):
        d = _sphere_in_the_sky([0.0, 0.0, 0.0])
        d["ball"].update(center=[0.5, 0.0, 0.0], radius=0.3)
        d["sensor"] = dict(d["sensor"], type="thinlens", aperture_radius=radius, focus_distance=focus)
        return jaxrender.load_dict(d)

    blurred = scene_of(0.2, 1.0)
    sides = _lens_sides(monkeypatch, blurred, "ball.to_world")
    cam = np.asarray(blurred.kernel_inputs()["camera"], np.float64).reshape(-1)
    m = cam[layout.CAMERA_TO_WORLD:layout.CAMERA_TO_WORLD + 16].reshape(4, 4)
    tan_x, tan_y = cam[layout.CAMERA_TAN_X], cam[layout.CAMERA_TAN_Y]
    v = np.random.default_rng(0).normal(size=(4000, 3))
    c = (np.array([0.5, 0.0, 0.0]) + 0.3 * v / np.linalg.norm(v, axis=1, keepdims=True) - m[:3, 3]) @ m[:3, :3]
    pinhole_x = 0.5 * (1.0 - c[:, 0] / (c[:, 2] * tan_x)) * 24
    assert pinhole_x.max() < 21.0
    beyond = []
    for a in np.linspace(0.0, 2.0 * np.pi, 64, endpoint=False):
        e = 0.2 * np.array([np.cos(a), np.sin(a)])
        x = 0.5 * (1.0 - (e[0] / 1.0 + (c[:, 0] - e[0]) / c[:, 2]) / tan_x) * 24
        y = 0.5 * (1.0 - (e[1] / 1.0 + (c[:, 1] - e[1]) / c[:, 2]) / tan_y) * 24
        beyond.append(y[x > 24.0])
    beyond = np.concatenate(beyond)
    assert len(beyond) > 100
    right = sides[1]      # (24, y0) -> (24, y1)
    assert np.all(np.isnan(sides[[0, 2, 3]])), sides
    assert min(right[1], right[3]) <= beyond.min() and max(right[1], right[3]) >= beyond.max(), (right, beyond)

    assert np.all(np.isnan(_lens_sides(monkeypatch, scene_of(0.02, 3.0), "ball.to_world")))
    whole = _lens_sides(monkeypatch, blurred, blurred.camera_key)
    np.testing.assert_allclose(np.abs(whole[:, 2:] - whole[:, :2]).sum(), 96.0)


def test_edge_samples_favour_the_moving_geometry(tmp_path, monkeypatch):
    """Beside a static UV sphere of 960 triangles, whose edges outnumber
    the moving occluder's 5 by ~290 to 1, a floor point's edge candidates
    are drawn half among the moving occluder's (material.MOVING_SHARE).
    Within noise of finite differences, and at a small fraction of the
    variance of uniform draws (MOVING_SHARE = 0: 1/53 here over 64 seeds,
    1/159 on bench_geometry's sphere scene beside a static 3968-triangle
    mesh, a one-off script's)."""
    clutter = tmp_path / "clutter.obj"
    clutter.write_text(uv_sphere_obj(32, 0.25, (-0.9, 0.25, -0.5)))
    d = shadow_scene()
    d["clutter"] = {"type": "obj", "filename": str(clutter), "face_normals": True, "bsdf": {"type": "diffuse"}}
    scene = jaxrender.load_dict(d)
    _beats_the_setting(monkeypatch, scene, "occluder.to_world", range(64), "MOVING_SHARE", 0.0, 0.2)


def test_hard_shadow_samples_favour_the_moving_geometry(tmp_path, monkeypatch):
    """Under a point light, among six static UV spheres whose shadows'
    edges are most of the shadows' length, half the hard shadows' edge
    samples fall on the moving occluder's (``primitives/boundary
    .SHADOW_MOVING_SHARE``). Within noise of finite differences, and at
    less variance than samples by length alone (SHADOW_MOVING_SHARE = 0).
    One boundary sample per pixel: with the film's spp the samples'
    strata along the edges are so short that neither adds variance worth
    measuring (favoured 0.17x of by length with one; 0.996x with 64)."""
    from jaxrender.primitives import boundary
    d = shadow_scene(light=_DELTA["point"])
    for i, (x, z) in enumerate([(-1.2, -0.9), (1.3, -0.9), (-1.3, 0.9), (1.2, 1.0), (0.0, -1.5), (-1.6, 0.0)]):
        obj = tmp_path / f"clutter{i}.obj"
        obj.write_text(uv_sphere_obj(16, 0.3, (x, 0.3, z)))
        d[f"clutter{i}"] = {"type": "obj", "filename": str(obj), "face_normals": True, "bsdf": {"type": "diffuse"}}
    scene = jaxrender.load_dict(d)
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1128))
    rev = _reverse(scene, key, value, tangent, range(64), spp_boundary=1)
    monkeypatch.setattr(boundary, "SHADOW_MOVING_SHARE", 0.0)
    by_length = _reverse(scene, key, value, tangent, range(64), spp_boundary=1)
    for estimate in (rev, by_length):
        assert abs(_z(estimate, fd)) < 4.0, (estimate.mean(), fd.mean())
    assert rev.var() < 0.5 * by_length.var(), (rev.var(), by_length.var())


@pytest.mark.parametrize("light", ["rectangle", "sphere"])
def test_forward_equals_reverse_for_moving_lights(light):
    """The forward kernel is the adjoint's transpose with a moving light:
    its emitter samples are taken in transport (the forward kernel once
    differentiated their densities too, 4 off at a value of 3 for the
    rectangle), and, for a sphere light, follow it at their material points."""
    d = shadow_scene()
    if light == "sphere":
        d["light"] = {"type": "sphere", "center": [0.2, 2.0, 0.0], "radius": 0.25,
                      "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 10.0, 10.0]}}}
    scene = jaxrender.load_dict(d)
    key = "light.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    image = lambda v: jaxrender.render(scene, {key: v}, spp=8, seed=2, seed_grad=5)   # noqa: E731
    jt = jitted.jvp(image, value, tangent)
    jtc = jitted.vjp(image, value, jnp.asarray(WEIGHTS))
    lhs, rhs = float(jnp.sum(jt * WEIGHTS)), float(jnp.sum(tangent * jtc))
    assert abs(lhs - rhs) <= 1e-3 * max(abs(lhs), abs(rhs), 1.0), (lhs, rhs)
    if light == "sphere":
        fd = _fd(scene, key, value, tangent, h=0.02, seeds=range(1000, 1128))
        rev = _reverse(scene, key, value, tangent, range(32))
        assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _quad_against_nothing(pixel_format="rgba", light=None) -> dict:
    """A lit quad with nothing behind it (no environment): where its
    silhouette is, alpha steps from 1 to 0."""
    light = light or {"type": "sphere", "center": [1.5, 1.5, 2.0], "radius": 0.3,
                      "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [20.0, 20.0, 20.0]}}}
    return {"type": "scene", "integrator": {"type": "direct"}, "light": light,
            "front": {"type": "rectangle", "to_world": np.diag([0.6, 0.6, 0.6, 1.0]).astype(np.float32),
                      "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.7, 0.6]}}},
            "sensor": {"type": "perspective", "fov": 40.0, "to_world": _look_at((0.3, 0.2, 3.0), (0, 0, 0)),
                       "film": {"type": "hdrfilm", "width": 24, "height": 24, "pixel_format": pixel_format}}}


def test_alpha_follows_moving_silhouettes():
    """An rgba film's alpha under a moving quad, partly over a wall (alpha
    1 on both sides: no change) and partly over nothing. Finite
    differences for the quad (without the alpha of the film boundary's
    side, reverse mode read 89.8 against 118.8 +- 1.2); for the camera,
    forward mode equals reverse mode sample for sample (the adjoint gives
    the moving splat weights each sample's alpha)."""
    d = _quad_against_nothing()
    d["wall"] = {"type": "rectangle", "bsdf": {"type": "diffuse"},
                 "to_world": np.array([[1.5, 0, 0, -1.5], [0, 3, 0, 0], [0, 0, 1, -1.0], [0, 0, 0, 1]], np.float32)}
    scene = jaxrender.load_dict(d)
    alpha_only = np.zeros((24, 24, 4), np.float32)
    alpha_only[..., 3] = np.linspace(0.0, 1.0, 24)[None, :]   # (random weights cancel between the sides)

    loss = dict(spp=32, weights=alpha_only)
    key = "front.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1096), **loss)
    rev = _reverse(scene, key, value, tangent, seeds=range(32), **loss)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())

    cam = "sensor.to_world"
    cam_value = jnp.asarray(scene.params[cam])
    along = _translate_x(cam_value)
    cam_jvp = jax.jit(lambda v, s: jax.jvp(lambda x: _loss(scene, cam, x, s, **loss), (v,), (along,))[1])
    rev = _reverse(scene, cam, cam_value, along, seeds=range(3), **loss)
    fwd = np.array([float(cam_jvp(cam_value, jnp.uint32(s))) for s in range(3)])
    assert np.all(np.abs(rev) > 10.0) and np.all(np.abs(rev - fwd) <= 1e-3 * np.abs(rev)), (rev, fwd)


@pytest.mark.parametrize("key, lens", [("sensor.to_world", False), ("occluder.to_world", False),
                                       ("sensor.to_world", True)])
def test_hidden_area_light_in_view(key, lens):
    """hide_emitters with an area light in view, the occluder (glossy) seen
    through it: camera rays pass through the light, so it has no
    silhouette on the film, and the camera's point is what lies behind it
    (finite differences). With the light's edges kept as silhouettes the
    camera's derivative read 2.38 against -7.67 +- 1.19 (a diffuse occluder);
    with the camera's point on the light the occluder's read -0.78 against
    11.76 +- 1.33. Through a thin lens (its boundary samples pick no edge
    of the light's, and take an edge it shares with a shown surface for
    a boundary) the camera's read -7.00 +- 0.65 against -6.56 +- 0.92;
    with the light's edges kept, 2.06."""
    d = shadow_scene()
    d["integrator"] = {"type": "path", "max_depth": 3, "hide_emitters": True}
    d["sensor"]["to_world"] = _look_at((0.0, 4.5, 1.5), (0, 0, 0))
    d["occluder"]["bsdf"] = {"type": "roughplastic", "alpha": 0.15,
                             "diffuse_reflectance": {"type": "rgb", "value": [0.5, 0.4, 0.3]}}
    d["sky"] = {"type": "constant", "radiance": {"type": "rgb", "value": [0.2, 0.2, 0.2]}}
    if lens:
        d["sensor"] = dict(d["sensor"], type="thinlens", aperture_radius=0.3, focus_distance=2.5)
    scene = jaxrender.load_dict(d)
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1192 if lens else 1064))
    rev = _reverse(scene, key, value, tangent, range(32))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(fd.mean()) > 6 * fd.std() / np.sqrt(len(fd))


@pytest.mark.parametrize("key", ["sensor.to_world", "front.to_world"])
def test_hidden_environment_behind_moving_silhouettes(key):
    """An object lit by an environment the camera does not see
    (hide_emitters), the usual inverse-rendering set-up: its silhouette
    against black, in colour and alpha, for a moving camera and a moving
    object (finite differences)."""
    from test_camera_gradients import _scene
    d = _scene(integrator="path")
    del d["back"]
    d["integrator"].update(hide_emitters=True, max_depth=3)
    d["sensor"]["film"]["pixel_format"] = "rgba"
    scene = jaxrender.load_dict(d)
    weights = np.random.default_rng(3).uniform(0.0, 1.0, (24, 24, 4)).astype(np.float32)
    weights *= np.linspace(0.0, 1.0, 24)[None, :, None]

    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1096), spp=32, weights=weights)
    rev = _reverse(scene, key, value, tangent, seeds=range(32), spp=32, weights=weights)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(rev.mean()) > 20.0


@pytest.mark.parametrize("bsdf", ["normalmap", "anisotropic"])
def test_tangent_frames_turn_with_moving_surfaces(bsdf, tmp_path):
    """A card filling the view, turned about its normal: no silhouette
    moves, the material points slide within the plane, and what changes is
    the tangent frame that a normal map or an anisotropic roughness turns
    with (finite differences; with the frame held, the normal map's
    derivative read 2.69 against 4.61 +- 0.01)."""
    from test_bsdfs_normalmap import lit_card, normal_image, normalmap_bsdf, write_png
    if bsdf == "normalmap":
        card = normalmap_bsdf(write_png(tmp_path / "n.png", normal_image(n=16, tilt=0.8)))
    else:
        card = {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.05, "alpha_v": 0.5}
    d = lit_card(card, size=24)
    d["integrator"]["max_depth"] = 2
    d["sensor"]["film"]["rfilter"] = {"type": "gaussian"}
    d["card"]["to_world"] = np.diag([5.0, 5.0, 1.0, 1.0]).astype(np.float32)
    scene = jaxrender.load_dict(d)
    key = "card.to_world"
    value = jnp.asarray(scene.params[key])
    turn = np.zeros((4, 4), np.float32)
    turn[0, 1], turn[1, 0] = -1.0, 1.0
    tangent = jnp.asarray(turn @ np.asarray(value))
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1096))
    rev = _reverse(scene, key, value, tangent, seeds=range(64))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(fd.mean()) > 6 * fd.std() / np.sqrt(len(fd))


def test_delta_lights_move_with_the_geometry_they_light():
    """A point light's samples, where a moving surface follows its
    material point: the direction and distance to the light, which no
    surface moves (they once came from an area light's triangle: forward
    mode read 0.57, reverse mode -0.63), on a scene without shadows."""
    light = {"type": "point", "position": [0.0, 0.0, 3.0], "intensity": {"type": "rgb", "value": [5.0, 5.0, 5.0]}}
    d = _quad_against_nothing("rgb", light)
    d["sky"] = {"type": "constant", "radiance": {"type": "rgb", "value": [0.1, 0.1, 0.1]}}
    scene = jaxrender.load_dict(d)
    key = "front.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    image = lambda v: jaxrender.render(scene, {key: v}, spp=8, seed=3, seed_grad=3)   # noqa: E731
    jt = jitted.jvp(image, value, tangent)
    jtc = jitted.vjp(image, value, jnp.asarray(WEIGHTS))
    lhs, rhs = float(jnp.sum(jt * WEIGHTS)), float(jnp.sum(tangent * jtc))
    assert abs(lhs) > 0.1
    assert abs(lhs - rhs) <= 1e-3 * max(abs(lhs), abs(rhs), 1.0), (lhs, rhs)


def _agrees_along_a_ramp(scene, key, value, tangent):
    """Reverse mode within noise of finite differences, and forward mode
    equal to it seed for seed, for weights rising across the image (a
    shadow moving sideways changes their sum one way): (the finite
    differences, the weights)."""
    ramp = np.broadcast_to(np.linspace(0.0, 1.0, 24)[None, :, None], (24, 24, 3)).astype(np.float32)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1064), weights=ramp)
    rev = _reverse(scene, key, value, tangent, range(32), weights=ramp)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(fd.mean()) > 6 * fd.std() / np.sqrt(len(fd))
    jvp = jax.jit(lambda v, s: jax.jvp(lambda x: _loss(scene, key, x, s, weights=ramp), (v,), (tangent,))[1])
    fwd = np.array([float(jvp(value, jnp.uint32(s))) for s in range(2)])
    np.testing.assert_allclose(fwd, rev[:2], rtol=1e-3, atol=1e-3)
    return fd, ramp


_DELTA = {"point": {"type": "point", "position": [0.2, 2.0, 0.0], "intensity": {"type": "rgb", "value": [3.0] * 3}},
          "spot": {"type": "spot", "to_world": _look_at((0.2, 2.0, 0.0), (0, 0, 0), (0, 0, 1)), "cutoff_angle": 25.0,
                   "beam_width": 5.0, "intensity": {"type": "rgb", "value": [3.0] * 3}},
          "directional": {"type": "directional", "direction": [-0.3, -1.0, 0.4],
                          "irradiance": {"type": "rgb", "value": [3.0] * 3}}}


@pytest.mark.parametrize("light, key", [("point", "occluder.to_world"), ("spot", "occluder.to_world"),
                                        ("directional", "occluder.to_world"), ("point", "occluder.vertex_positions"),
                                        ("point", "sphere"), ("directional", "cylinder")])
def test_hard_shadows_of_delta_lights_match_finite_differences(light, key, tmp_path):
    """The shadow a point, spot or directional light casts, moving with the
    occluder (a rectangle, a tilted OBJ quad's vertices, a sphere or a
    cylinder, whose outlines as the light sees them are curves): the film's
    boundary term samples the edges of the shadow on what the camera sees,
    the jump there being the light's direct term (finite differences,
    forward mode equal to reverse mode). Without them reverse mode read
    1.77 against finite differences' -2.9 (a point light, random weights),
    and with this test's weights 0.95 against -7.2 (directional),
    -0.009 against -3.16 (the quad's vertices) and, without the curves, 1.75
    against -5.42 (the sphere)."""
    d = shadow_scene(occluder_type=key if key in ("sphere", "cylinder") else "rectangle", light=_DELTA[light])
    if key in ("sphere", "cylinder"):
        key = "occluder.to_world"
    if key == "occluder.vertex_positions":
        obj = tmp_path / "quad.obj"
        obj.write_text("v -0.3 0.6 -0.3\nv 0.3 0.6 -0.3\nv 0.3 0.9 0.3\nv -0.3 0.9 0.3\nf 1 3 2\nf 1 4 3\n")
        d["occluder"] = {"type": "obj", "filename": str(obj), "face_normals": True, "bsdf": d["occluder"]["bsdf"]}
    scene = jaxrender.load_dict(d)
    value = jnp.asarray(scene.params[key])
    tangent = (_translate_x(value) if value.ndim == 2
               else jnp.zeros_like(value).reshape(-1, 3).at[:, 0].set(1.0).reshape(-1))
    _agrees_along_a_ramp(scene, key, value, tangent)


@pytest.mark.parametrize("case", ["sphere", "point light", "sphere light"])
def test_geometry_seen_through_a_thin_lens(case):
    """Moving geometry seen through a thin lens out of focus: a dark sphere
    against the sky (its blurred silhouette is all that changes), a
    point light's shadow under a moving occluder (path tracer) and a
    sphere light's (the occluder's edges sampled among the sphere's
    outline too), each boundary sample seen from an aperture point of its
    own. Reverse mode agrees with finite differences along a ramp, forward
    mode equals it; with the film boundary seen from the lens's centre the
    sphere's read -68.7 +- 0.4 against finite differences of -132.0 +- 1.7.
    (Under the sphere light the lens's boundary once rebuilt the
    occluder's edge points from the outlines' angle: +8.3 +- 0.7 against
    finite differences' -7.6 +- 0.7, weights uniform.)"""
    from test_camera_gradients import _lens_from_its_centre
    lens = {"type": "thinlens", "aperture_radius": 0.3}
    if case == "sphere":
        d = _sphere_in_the_sky([0.0, 0.0, 0.0])
        d["sensor"] = dict(d["sensor"], focus_distance=2.0, **lens)
        key = "ball.to_world"
    elif case == "sphere light":
        d = shadow_scene(light={"type": "sphere", "center": [0.2, 2.0, 0.0], "radius": 0.3,
                                "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [50.0] * 3}}})
        d["sensor"] = dict(d["sensor"], focus_distance=1.5, **lens)
        key = "occluder.to_world"
    else:
        # (the path tracer: its second vertex's pair factor reaches back to the aperture point)
        d = shadow_scene(light=_DELTA["point"], integrator={"type": "path", "max_depth": 3})
        d["floor"]["bsdf"] = {"type": "roughplastic", "alpha": 0.15,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.5, 0.5, 0.5]}}
        d["sensor"] = dict(d["sensor"], focus_distance=1.5, **lens)
        key = "occluder.to_world"
    scene = jaxrender.load_dict(d)
    value = jnp.asarray(scene.params[key])
    fd, ramp = _agrees_along_a_ramp(scene, key, value, _translate_x(value))
    if case == "sphere":
        centred = _lens_from_its_centre(_reverse, scene, key, value, _translate_x(value), range(16), weights=ramp)
        assert abs(_z(centred, fd)) > 6.0, (centred.mean(), fd.mean())


def test_thin_lens_silhouettes_are_stratified(monkeypatch):
    """A thin lens's boundary samples take one stratum each of the
    silhouette edges' total weight over the launch (``boundary.STRATIFY``):
    the blurred sphere against the sky reads the same derivative as with
    independent draws, at a small fraction of their variance (0.0085x
    over 48 seeds)."""
    from jaxrender.kernels.integrators import boundary as boundary_kernels
    d = _sphere_in_the_sky([0.0, 0.0, 0.0])
    d["sensor"] = dict(d["sensor"], type="thinlens", aperture_radius=0.3, focus_distance=2.0)
    scene = jaxrender.load_dict(d)
    key = "ball.to_world"
    value = jnp.asarray(scene.params[key])
    ramp = np.broadcast_to(np.linspace(0.0, 1.0, 24)[None, :, None], (24, 24, 3)).astype(np.float32)
    stratified = _reverse(scene, key, value, _translate_x(value), range(16), weights=ramp)
    monkeypatch.setattr(boundary_kernels, "STRATIFY", False)
    boundary_kernels._KERNELS.clear()
    try:
        independent = _reverse(scene, key, value, _translate_x(value), range(16), weights=ramp)
    finally:
        monkeypatch.undo()
        boundary_kernels._KERNELS.clear()
    assert abs(_z(stratified, independent)) < 4.0, (stratified.mean(), independent.mean())
    assert stratified.var() < 0.1 * independent.var(), (stratified.var(), independent.var())


@pytest.mark.parametrize("expand", [True, False])
def test_instance_to_world_matches_finite_differences(expand):
    """An instance of a shapegroup (a cube, split at its edges) as the
    occluder, shared or loaded with expand_instances: its to_world
    translated moves its copy of the group's mesh (a shared one: the
    points seen through it, its edges' copies), its silhouettes and its
    shadow (finite differences, forward mode equal to reverse mode)."""
    d = shadow_scene()
    bsdf = d["occluder"]["bsdf"]
    d["g"] = {"type": "shapegroup", "box": {"type": "cube", "bsdf": bsdf,
                                            "to_world": _placed(0.6, 0.6, 0.6, (0.0, 0.0, 0.0))}}
    d["occluder"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"},
                     "to_world": _placed(0.5, 0.5, 0.5, (0.1, 0.8, 0.0))}
    scene = jaxrender.load_dict(d, expand_instances=expand)
    assert scene.structure.instanced != expand
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    _agrees_along_a_ramp(scene, key, value, _translate_x(value))


def _shared_instance_scene(moving: str) -> tuple[dict, str]:
    """A shadow scene with shared instances of a shapegroup's cube (one of
    them mirrored) and what moves (its parameter): a light over an
    instanced cube, a rectangle behind one, a rectangle under one's
    point-light shadow."""
    d = shadow_scene()
    d["g"] = {"type": "shapegroup", "box": {"type": "cube", "bsdf": {
        "type": "diffuse", "reflectance": {"type": "rgb", "value": [0.3, 0.6, 0.3]}}}}
    d["above"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"},
                  "to_world": _placed(0.12, 0.05, 0.12, (0.1, 1.55, 0.05))}
    d["front"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"},
                  "to_world": _placed(-0.1, 0.1, 0.1, (0.25, 1.2, 0.8))}
    if moving == "light":
        del d["occluder"], d["front"]
        d["above"]["to_world"] = _placed(0.3, 0.3, 0.3, (0.0, 0.8, 0.0))
        return d, "light.to_world"
    if moving == "point":
        del d["front"]
        d["light"] = dict(_DELTA["point"])
        d["occluder"]["to_world"] = _placed(0.6, 0.6, 1, (0.0, 0.5, 0.0), "up")
        d["above"]["to_world"] = _placed(-0.15, 0.05, 0.15, (0.1, 1.2, 0.05))
    return d, "occluder.to_world"


@pytest.mark.parametrize("moving, copies_off", [("light", "instance_edge_rows"), ("rectangle", None),
                                                ("point", "shadow_edges")])
def test_shared_instances_beside_moving_geometry(moving, copies_off):
    """Shared instances do not move, but what moves is seen past their
    edges: a light moved above an instanced cube sweeps its shadow over the
    floor (the floor's points sample the instances' copies of the group's
    edges), a rectangle moved behind an instanced cube slides along its
    silhouette on the film, a rectangle moved under an instanced cube's
    point-light shadow slides under the shadow's edge. Against finite
    differences along a ramp (forward mode equal to reverse mode). Without
    the copies among the vertices' edges, or among the shadows' edges, the
    light's gradient read 30.4 against finite differences' 45.7, and the
    rectangle's under the point light -6.95 against -4.46 (z -29 and -12,
    when written)."""
    d, key = _shared_instance_scene(moving)
    scene = jaxrender.load_dict(d)
    assert scene.structure.instanced
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    fd, ramp = _agrees_along_a_ramp(scene, key, value, tangent)
    if copies_off is not None:
        from jaxrender.primitives import render_rules
        original = getattr(render_rules, copies_off)
        off = {"instance_edge_rows": lambda *a: np.zeros((0, 7), np.int32),
               "shadow_edges": lambda *a: original(*a[:5])}[copies_off]
        setattr(render_rules, copies_off, off)
        try:
            without = _reverse(scene, key, value, tangent, range(16), weights=ramp)
        finally:
            setattr(render_rules, copies_off, original)
        assert abs(_z(without, fd)) > 6.0, (without.mean(), fd.mean())


@pytest.mark.parametrize("front, light", [("sphere", None), ("cube", None), ("rectangle", "point")])
def test_orthographic_views_of_moving_geometry(front, light):
    """Geometry seen by an orthographic camera (its silhouettes and a
    sphere's outline seen along the axis, a point light's shadow on the
    wall behind): a sphere and a rectangle translated, a cube's vertices
    moved, against finite differences along a ramp (forward mode equal to
    reverse mode): 23.4 +- 0.2 against 25.1 +- 0.9, 34.4 +- 0.3 against
    34.9 +- 1.0, 33.1 +- 0.3 against 31.3 +- 0.9. With the film's
    silhouettes projected as a pinhole's, the cube read 56.3 and the
    rectangle 54.5."""
    from test_camera_gradients import _orthographic
    d = _orthographic(front)
    if light is not None:
        d["light"] = dict(_DELTA[light], position=[0.5, 0.8, 3.0])
    scene = jaxrender.load_dict(d)
    key = "front.vertex_positions" if front == "cube" else "front.to_world"
    value = jnp.asarray(scene.params[key])
    _agrees_along_a_ramp(scene, key, value, _translate_x(value))


def test_hard_shadows_seen_after_a_bounce():
    """A point light's shadow on a wall the camera sees only in a rough
    metal floor (path tracer, max_depth 3): each path vertex samples the
    edges of the shadows it sees (finite differences; forward mode equal to
    reverse mode). Without that term reverse mode read 0.44 against -1.51."""
    d = shadow_scene(light={"type": "point", "position": [0.0, 1.5, 1.0],
                            "intensity": {"type": "rgb", "value": [6.0, 6.0, 6.0]}})
    d["integrator"] = {"type": "path", "max_depth": 3}
    d["floor"]["bsdf"] = {"type": "roughconductor", "alpha": 0.3}
    d["wall"] = {"type": "rectangle", "to_world": np.array([[3, 0, 0, 0], [0, 2, 0, 2], [0, 0, 1, -2], [0, 0, 0, 1]],
                                                           np.float32),
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.8, 0.8]}}}
    d["occluder"]["to_world"] = np.array([[0.5, 0, 0, 0.1], [0, 0.5, 0, 1.5], [0, 0, 1, -1], [0, 0, 0, 1]], np.float32)
    d["sensor"]["to_world"] = _look_at((0.0, 3.0, 3.0), (0, 0, 1.2))
    scene = jaxrender.load_dict(d)
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    tangent = _translate_x(value)
    _agrees_along_a_ramp(scene, key, value, tangent)


MESHES = Path(__file__).resolve().parent / "data" / "meshes"


def _tilted_quad(tmp_path) -> jaxrender.Scene:
    """The shadow scene with a smooth-shaded quad whose vertex normals lean
    towards a light standing at the side, level with it."""
    obj = tmp_path / "quad.obj"
    n = np.array([0.6, 0.8, 0.0])
    obj.write_text("".join("v %g %g %g\nvn %g %g %g\n" % (*v, *n) for v in
                           [(-0.3, 0.5, -0.3), (0.3, 0.5, -0.3), (0.3, 0.5, 0.3), (-0.3, 0.5, 0.3)])
                   + "f 1//1 4//4 3//3\nf 1//1 3//3 2//2\n")
    d = shadow_scene()
    d["occluder"] = {"type": "obj", "filename": str(obj), "bsdf": d["floor"]["bsdf"]}
    d["light"]["to_world"] = np.array([[0, 0, -1, 1.5], [0, 0.4, 0, 0.55], [0.4, 0, 0, 0], [0, 0, 0, 1]], np.float32)
    return jaxrender.load_dict(d)


@pytest.mark.parametrize("case", ["moved", "normals", "tilted quad"])
def test_smooth_shaded_meshes_match_finite_differences(case, tmp_path):
    """Smooth-shaded meshes: a low-poly sphere moved, its vertex normals
    changed alone, and a quad turned about its middle with its vertex
    normals held, leaning towards a light level with it: a point of the
    quad sees its own edges on its horizon, where the shading normal leaves
    the BSDF nonzero, and they are no silhouettes (counting them read -5.8
    against -0.5). (Positions and normals are differentiated together, one
    kernel for the three.)"""
    if case == "tilted quad":
        scene = _tilted_quad(tmp_path)
    else:
        d = shadow_scene()
        d["occluder"] = {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"),
                         "to_world": _placed(0.35, 0.35, 0.35, (0.0, 0.8, 0.0)), "bsdf": d["floor"]["bsdf"]}
        scene = jaxrender.load_dict(d)
    keys = ("occluder.vertex_positions", "occluder.vertex_normals")
    value = tuple(jnp.asarray(scene.params[k]) for k in keys)
    v = value[0].reshape(-1, 3)
    if case == "tilted quad":
        moved = jnp.stack([0.5 - v[:, 1], v[:, 0], jnp.zeros(len(v))], axis=1).reshape(-1)
    else:
        moved = _translate_x(value[0]) if case == "moved" else jnp.zeros_like(value[0])
    turned = jnp.asarray(np.random.default_rng(1).normal(size=value[1].shape).astype(np.float32)) \
        if case == "normals" else jnp.zeros_like(value[1])
    tangent = (moved, turned)

    def loss(p, n, s):
        return jnp.sum(jaxrender.render(scene, dict(zip(keys, (p, n))), spp=64, seed=s, seed_grad=s) * WEIGHTS)

    value_at = jax.jit(loss)
    h = 0.01
    fd = np.array([(float(value_at(*(x + h * t for x, t in zip(value, tangent)), jnp.uint32(s))) -
                    float(value_at(*(x - h * t for x, t in zip(value, tangent)), jnp.uint32(s)))) / (2 * h)
                   for s in range(1000, 1256)])
    grad = jax.jit(lambda p, n, s: sum(jnp.sum(g * t) for g, t in zip(jax.grad(loss, (0, 1))(p, n, s), tangent)))
    rev = np.array([float(grad(*value, jnp.uint32(s))) for s in range(64)])
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


def _textured_floor(tmp_path, texture: dict) -> jaxrender.Scene:
    """The shadow scene with its floor an OBJ quad with texture coordinates."""
    obj = tmp_path / "floor.obj"
    obj.write_text("v -2 0 -2\nv 2 0 -2\nv 2 0 2\nv -2 0 2\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                   "f 1/1 4/4 3/3\nf 1/1 3/3 2/2\n")
    d = shadow_scene()
    d["floor"] = {"type": "obj", "filename": str(obj), "face_normals": True,
                  "bsdf": {"type": "diffuse", "reflectance": texture}}
    return jaxrender.load_dict(d)


def test_texture_coordinates_match_finite_differences(tmp_path):
    """A mesh's vertex_texcoords scaled about the texture's middle: a
    bilinear bitmap's value moves under each point, with the point held."""
    img = np.random.default_rng(2).uniform(0.1, 0.9, (8, 8, 3)).astype(np.float32)
    scene = _textured_floor(tmp_path, {"type": "bitmap", "bitmap": img})
    key = "floor.vertex_texcoords"
    value = jnp.asarray(scene.params[key])
    tangent = value - 0.5
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1064))
    rev = _reverse(scene, key, value, tangent, range(32))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(rev.mean()) > 10 * rev.std() / np.sqrt(len(rev))


@pytest.mark.parametrize("texture", [{"type": "checkerboard"},
                                     {"type": "bitmap", "bitmap": np.ones((2, 2, 3), np.float32),
                                      "filter_type": "nearest"}])
def test_texture_coordinates_under_jumping_textures_raise(tmp_path, texture):
    scene = _textured_floor(tmp_path, texture)
    key = "floor.vertex_texcoords"
    value = jnp.asarray(scene.params[key])
    with pytest.raises(NotDifferentiableError, match="bilinear"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(value)


def _uv_card(card: dict, tmp_path) -> jaxrender.Scene:
    """test_tangent_frames_turn_with_moving_surfaces' card filling the view,
    an OBJ quad with texture coordinates."""
    from test_bsdfs_normalmap import lit_card
    obj = tmp_path / "card.obj"
    obj.write_text("v -5 -5 0\nv 5 -5 0\nv 5 5 0\nv -5 5 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                   "f 1/1 2/2 3/3\nf 1/1 3/3 4/4\n")
    d = lit_card(card, size=24)
    d["integrator"]["max_depth"] = 2
    d["sensor"]["film"]["rfilter"] = {"type": "gaussian"}
    d["card"] = {"type": "obj", "filename": str(obj), "face_normals": True, "bsdf": card}
    return jaxrender.load_dict(d)


@pytest.mark.parametrize("bsdf", ["normalmap", "anisotropic"])
def test_texture_coordinates_turn_tangent_frames(bsdf, tmp_path):
    """The card's texture coordinates turned about the texture's middle:
    each point's dp_du turns the other way, and with it the normal map
    (which also reads other texels) or the anisotropic lobe. With the frame
    held, reverse mode read -0.265 against finite differences' -0.574 for
    the normal map, and 0 against -4.03 for the anisotropic lobe."""
    from test_bsdfs_normalmap import normal_image, normalmap_bsdf, write_png
    if bsdf == "normalmap":
        card = normalmap_bsdf(write_png(tmp_path / "n.png", normal_image(n=16, tilt=0.8)))
    else:
        card = {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.05, "alpha_v": 0.5}
    scene = _uv_card(card, tmp_path)
    key = "card.vertex_texcoords"
    value = jnp.asarray(scene.params[key])
    uv = value.reshape(-1, 2)
    tangent = jnp.stack([0.5 - uv[:, 1], uv[:, 0] - 0.5], axis=1).reshape(-1)
    fd = _fd(scene, key, value, tangent, seeds=range(1000, 1032))
    rev = _reverse(scene, key, value, tangent, seeds=range(24))
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    assert abs(fd.mean()) > 6 * fd.std() / np.sqrt(len(fd))


def test_texture_coordinates_under_tangent_frames_and_dirac_lobes_raise(tmp_path):
    """Turning tangent frames turn what a Dirac lobe reflects, which
    detached sampling cannot follow (as for moving geometry)."""
    scene = _uv_card({"type": "normalmap", "normalmap": {"type": "bitmap", "raw": True,
                                                          "bitmap": np.full((2, 2, 3), 0.5, np.float32)},
                      "bsdf": {"type": "conductor"}}, tmp_path)
    key = "card.vertex_texcoords"
    value = jnp.asarray(scene.params[key])
    with pytest.raises(NotDifferentiableError, match="Dirac"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(value)
