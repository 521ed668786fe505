"""Derivatives with respect to the camera (``sensor.to_world``, ``sensor.x_fov``):
the material-form interior (``kernels/sensors/motion.py``) plus the
boundary term on silhouettes and the film's edges
(``kernels/integrators/boundary.py``), checked against central finite
differences with common random numbers, and forward against reverse mode.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxrender
from jaxrender import NotDifferentiableError
from jaxrender.kernels.integrators import boundary as boundary_kernels
from jaxrender.primitives import render_rules
from jaxrender.kernels import layout
from jaxrender.primitives.boundary import edge_topology
from jaxrender.render import kernel_inputs
import jitted


def _look_at(origin, target, up=(0.0, 1.0, 0.0)):
    """Mitsuba's look_at as a 4x4 (camera looking down +z in its frame)."""
    o, t, u = (np.asarray(v, np.float64) for v in (origin, target, up))
    d = (t - o) / np.linalg.norm(t - o)
    left = np.cross(u, d)
    left /= np.linalg.norm(left)
    new_up = np.cross(d, left)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, new_up, d, o
    return m.astype(np.float32)


def _scene(front="rectangle", filt="gaussian", res=24, integrator="direct"):
    """A front shape (white, diffuse) before a darker back wall, under a
    constant sky, seen by a perspective camera."""
    return {
        "type": "scene",
        "integrator": {"type": integrator},
        "sky": {"type": "constant", "radiance": {"type": "rgb", "value": [1.0, 1.0, 1.0]}},
        "front": {"type": front, "to_world": np.diag([0.6, 0.6, 0.6, 1.0]).astype(np.float32),
                  "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.7, 0.6]}}},
        "back": {"type": "rectangle",
                 "to_world": (np.array([[2.5, 0, 0, 0], [0, 2.5, 0, 0], [0, 0, 1, -2.0], [0, 0, 0, 1]], np.float32)),
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.3, 0.4]}}},
        "sensor": {"type": "perspective", "fov": 40.0,
                   "to_world": _look_at((0.3, 0.2, 4.0), (0.0, 0.0, 0.0)),
                   "film": {"type": "hdrfilm", "width": res, "height": res, "rfilter": {"type": filt}},
                   "sampler": {"type": "independent", "sample_count": 16}},
    }


WEIGHTS = np.random.default_rng(3).uniform(0.0, 1.0, (24, 24, 3)).astype(np.float32)


def _loss(scene, key, value, seed, spp):
    image = jaxrender.render(scene, {key: value}, spp=spp, seed=seed, seed_grad=seed)
    return jnp.sum(image * WEIGHTS)


def _fd(scene, key, value, tangent, h, seeds, spp):
    """Central differences with common random numbers, one per seed."""
    loss = jax.jit(lambda v, s: _loss(scene, key, v, s, spp))
    return np.array([(float(loss(value + h * tangent, jnp.uint32(s))) - float(loss(value - h * tangent, jnp.uint32(s))))
                     / (2 * h) for s in seeds])


def _forward(scene, key, value, tangent, seeds, spp):
    jvp = jax.jit(lambda v, s: jax.jvp(lambda x: _loss(scene, key, x, s, spp), (v,), (tangent,))[1])
    return np.array([float(jvp(value, jnp.uint32(s))) for s in seeds])


def _reverse(scene, key, value, tangent, seeds, spp):
    grad = jax.jit(lambda v, s: jnp.sum(jax.grad(lambda x: _loss(scene, key, x, s, spp))(v) * tangent))
    return np.array([float(grad(value, jnp.uint32(s))) for s in seeds])


def _interior_only(estimate, *args):
    """``estimate`` (``_forward`` / ``_reverse``) without the boundary term."""
    original = render_rules._film_boundary
    render_rules._film_boundary = lambda *a: None
    try:
        return estimate(*args)
    finally:
        render_rules._film_boundary = original


# Finite differences of these losses converge slowly in the step (the
# image's filter footprint is a fraction of a pixel's motion away from a
# kink): steps of 0.02 (0.01 with the box filter) are within noise of the
# limit, with 128 seeds of 64 samples; the estimates use 64 seeds.
FD_SEEDS, SEEDS = range(1000, 1128), range(64)


def _z(a, b):
    return (a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))


TRANSLATE_X = np.zeros((4, 4), np.float32)
TRANSLATE_X[0, 3] = 1.0
TRANSLATE_Z = np.zeros((4, 4), np.float32)
TRANSLATE_Z[2, 3] = 1.0


@pytest.mark.parametrize("front, tangent", [("rectangle", TRANSLATE_X), ("cube", TRANSLATE_Z)])
def test_translation_matches_finite_differences(front, tangent):
    """Reverse mode agrees with finite differences where silhouettes
    dominate; without the boundary term it does not. The cube's vertices
    are split at its edges: its silhouettes are welded, counted once."""
    scene = jaxrender.load_dict(_scene(front))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, tangent, 0.02, FD_SEEDS, 64)
    rev = _reverse(scene, key, m, tangent, SEEDS, 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    interior = _interior_only(_reverse, scene, key, m, tangent, range(16), 64)
    assert abs(_z(interior, fd)) > 6.0, (interior.mean(), fd.mean())


def test_boundary_sample_count_is_honoured(monkeypatch):
    """``spp_boundary``: the film boundary term's own sample count. With the
    box filter the boundary (pixel edges, silhouettes) carries the
    derivative, so a sixteenth of the samples spreads it several times
    wider over seeds, still centred on the finite differences. By default
    the term draws a quarter of spp_grad along its curves (stratified) and
    spp_grad on the pixels' edges: as narrow as spp_grad for all. A count
    that is not a positive integer raises."""
    from jaxrender.primitives import render_rules
    scene = jaxrender.load_dict(_scene("cube", filt="box"))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])

    def reverse(seeds, **counts):
        grad = jax.jit(lambda v, s: jnp.sum(jax.grad(lambda x: jnp.sum(jaxrender.render(
            scene, {key: x}, spp=64, seed=s, seed_grad=s, **counts) * WEIGHTS))(v) * TRANSLATE_X))
        return np.array([float(grad(m, jnp.uint32(s))) for s in seeds])

    counts = []
    tangent = render_rules.boundary_tangent
    monkeypatch.setattr(render_rules, "boundary_tangent",
                        lambda config, kw, t: counts.append((int(kw["spp"]), int(kw["spp_pixels"]))) or tangent(config, kw, t))
    default = reverse(SEEDS)
    full = reverse(SEEDS, spp_boundary=64)
    assert counts == [(16, 64), (64, 64)], counts
    fewer = reverse(SEEDS, spp_boundary=4)
    fd = _fd(scene, key, m, TRANSLATE_X, 0.01, FD_SEEDS, 64)
    for estimate in (default, fewer):
        assert abs(_z(estimate, fd)) < 4.0, (estimate.mean(), fd.mean())
    assert fewer.var() > 3.0 * full.var(), (fewer.var(), full.var())
    assert default.var() < 1.5 * full.var(), (default.var(), full.var())
    with pytest.raises(jaxrender.SceneError, match="spp_boundary"):
        jaxrender.render(scene, spp=4, spp_boundary=-1)


def test_pixel_edges_are_stratified(monkeypatch):
    """With the box filter an item's boundary samples alternate between
    its pixel's right and bottom edges and are stratified along each
    (``boundary.STRATIFY``): within noise of finite differences, as the
    independent draws they replaced, at under half their variance (0.11x
    here)."""
    scene = jaxrender.load_dict(_scene("cube", filt="box"))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.01, FD_SEEDS, 64)
    stratified = _reverse(scene, key, m, TRANSLATE_X, SEEDS, 64)
    monkeypatch.setattr(boundary_kernels, "STRATIFY", False)
    boundary_kernels._KERNELS.clear()
    try:
        independent = _reverse(scene, key, m, TRANSLATE_X, SEEDS, 64)
    finally:
        monkeypatch.undo()
        boundary_kernels._KERNELS.clear()
    for estimate in (stratified, independent):
        assert abs(_z(estimate, fd)) < 4.0, (estimate.mean(), fd.mean())
    assert stratified.var() < 0.5 * independent.var(), (stratified.var(), independent.var())


def test_shared_instances_move_on_the_film():
    """Two shared instances of a shapegroup (a cube, one instance mirrored)
    in front of the wall: their silhouettes are the group's edges placed by
    each instance. Reverse mode agrees with finite differences, and with
    forward mode; without the instances' edges (the scene's own only) the
    boundary term misses them."""
    d = _scene()
    del d["front"]
    d["g"] = {"type": "shapegroup", "box": {"type": "cube", "bsdf": {
        "type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.7, 0.6]}}}}
    for name, m in (("left", np.array([[0.4, 0, 0, -0.55], [0, 0.4, 0, 0.1], [0, 0, 0.4, 0], [0, 0, 0, 1]])),
                    ("right", np.array([[-0.35, 0, 0, 0.6], [0, 0.5, 0, -0.1], [0, 0, 0.3, 0.2], [0, 0, 0, 1]]))):
        d[name] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"}, "to_world": m.astype(np.float32)}
    scene = jaxrender.load_dict(d)
    assert scene.structure.instanced
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.02, FD_SEEDS, 64)
    rev = _reverse(scene, key, m, TRANSLATE_X, SEEDS, 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    np.testing.assert_allclose(_forward(scene, key, m, TRANSLATE_X, range(2), 64), rev[:2], rtol=1e-3, atol=1e-3)
    original = render_rules.film_segments
    render_rules.film_segments = lambda *a: original(*a[:10])
    try:
        own_only = _reverse(scene, key, m, TRANSLATE_X, range(48), 64)
    finally:
        render_rules.film_segments = original
    assert abs(_z(own_only, fd)) > 6.0, (own_only.mean(), fd.mean())


def test_too_many_instanced_edges_raise_under_a_derivative_only(monkeypatch):
    """Past ``render.MAX_INSTANCE_EDGES`` copies of group edges, a camera
    derivative says to expand the instances; the render itself, with the
    camera as a parameter, still runs."""
    monkeypatch.setattr(sys.modules["jaxrender.render"], "MAX_INSTANCE_EDGES", 10)
    d = _scene()
    del d["front"]
    d["g"] = {"type": "shapegroup", "box": {"type": "cube"}}
    d["i"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"}}
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    assert np.isfinite(np.asarray(jaxrender.render(scene, {key: m}, spp=1))).all()
    with pytest.raises(NotDifferentiableError, match="expand_instances=True"):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(m)


ANALYTIC = {
    "sphere": {"type": "sphere", "radius": 0.6},
    "disk": {"type": "disk", "to_world": np.array([[0.6, 0, 0, 0], [0, 0.5, 0.3, 0], [0, -0.3, 0.5, 0], [0, 0, 0, 1]],
                                                  np.float32)},
    "cylinder": {"type": "cylinder", "to_world": np.array([[0.5, 0, 0, 0], [0, 0, 0.5, 0], [0, -1.2, 0, 0.6],
                                                           [0, 0, 0, 1]], np.float32)},
}


@pytest.mark.parametrize("front", sorted(ANALYTIC))
def test_analytic_silhouettes_match_finite_differences(front):
    """A sphere's circle of tangency, a disk's rim, a cylinder's rims and
    its two silhouette lines are sampled exactly (curves in angle); without
    them the sphere's and the disk's derivatives are rejected."""
    d = _scene()
    d["front"] = dict(ANALYTIC[front], bsdf=d["front"]["bsdf"])
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.02, FD_SEEDS, 64)
    rev = _reverse(scene, key, m, TRANSLATE_X, SEEDS, 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    interior = _interior_only(_reverse, scene, key, m, TRANSLATE_X, range(16), 64)
    # (the cylinder's terms are smaller against this loss's noise: 4.6 standard errors)
    assert abs(_z(interior, fd)) > (4.0 if front == "cylinder" else 6.0), (interior.mean(), fd.mean())


def test_box_filter_matches_finite_differences():
    """With the box filter a pixel's weight jumps at its edges: the
    boundary term samples them too (interior alone is rejected)."""
    scene = jaxrender.load_dict(_scene("cube", filt="box"))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.01, FD_SEEDS, 64)
    fwd = _forward(scene, key, m, jnp.asarray(TRANSLATE_X), SEEDS, 64)
    assert abs(_z(fwd, fd)) < 4.0, (fwd.mean(), fd.mean())
    # (here the pixel edges' term and the silhouettes' nearly cancel: drop the former alone)
    kinds = boundary_kernels._pixel_kinds
    boundary_kernels._pixel_kinds = lambda ctx: []
    boundary_kernels._KERNELS.clear()
    try:
        without = _forward(scene, key, m, jnp.asarray(TRANSLATE_X), range(16), 64)
    finally:
        boundary_kernels._pixel_kinds = kinds
        boundary_kernels._KERNELS.clear()
    assert abs(_z(without, fd)) > 6.0, (without.mean(), fd.mean())


def test_field_of_view_matches_finite_differences():
    scene = jaxrender.load_dict(_scene())
    key = "sensor.x_fov"
    v = jnp.float32(scene.params[key])
    fd = _fd(scene, key, v, 1.0, 0.05, FD_SEEDS, 64)
    fwd = _forward(scene, key, v, jnp.float32(1.0), SEEDS, 64)
    assert abs(_z(fwd, fd)) < 4.0, (fwd.mean(), fd.mean())


def test_forward_is_the_transpose_of_reverse():
    """Dot-product test: <J t, c> = <t, J^T c> for one seed, the boundary
    kernels' included, up to float rounding."""
    scene = jaxrender.load_dict(_scene("cube"))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    t = jnp.asarray(np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32))
    t = t.at[3].set(0.0)
    image = lambda v: jaxrender.render(scene, {key: v}, spp=8, seed=2, seed_grad=5)   # noqa: E731
    c = jnp.asarray(np.random.default_rng(2).normal(size=(24, 24, 3)).astype(np.float32))
    jt = jitted.jvp(image, m, t)
    jtc = jitted.vjp(image, m, c)
    lhs, rhs = float(jnp.sum(jt * c)), float(jnp.sum(t * jtc))
    assert abs(lhs - rhs) <= 1e-3 * max(abs(lhs), abs(rhs), 1.0), (lhs, rhs)


def test_vmap_over_views_equals_a_loop():
    scene = jaxrender.load_dict(_scene())
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    views = jnp.stack([m, m.at[0, 3].add(0.2)])

    def loss(v):
        return jnp.sum(jaxrender.render(scene, {key: v}, spp=4, seed=1) * WEIGHTS)

    grad = jax.jit(jax.grad(loss))   # (one compile; eagerly the first call compiles several)
    batched = jax.jit(jax.vmap(grad))(views)
    for i in range(2):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(grad(views[i])), rtol=2e-3, atol=2e-3)


def test_split_vertex_cube_edges_are_welded():
    scene = jaxrender.load_dict(_scene("cube"))
    tris = np.asarray(kernel_inputs(scene)["tris"])
    topo = edge_topology(tris)
    # the back rectangle (4 boundary edges and a diagonal) and the cube (12 edges, 6 diagonals, none
    # open, although its 24 vertices are split at every edge)
    assert len(tris) == 14
    assert len(topo) == 5 + 18
    assert int(np.sum(topo[:, 4] < 0)) == 4


def _welded_lights_scene():
    """The front quad halved, with an area light welded to either side of
    it, under hide_emitters: camera rays pass through the lights."""
    d = _scene()
    d["front"]["to_world"] = np.diag([0.5, 0.5, 0.5, 1.0]).astype(np.float32)
    for name, x in (("left", -1.0), ("right", 1.0)):
        d[name] = {"type": "rectangle", "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [2.0] * 3}},
                   "to_world": np.array([[0.5, 0, 0, x], [0, 0.5, 0, 0], [0, 0, 0.5, 0], [0, 0, 0, 1]], np.float32)}
    d["integrator"]["hide_emitters"] = True
    return jaxrender.load_dict(d)


def test_hidden_lights_welded_to_a_shown_surface():
    """Under hide_emitters an area light has no silhouette, but the shown
    surface it is welded to ends at their common edge: the edge's row puts
    the shown triangle first (emitters last), so the film boundary follows
    the quad's side. Camera translation against finite differences
    (-4.66 +- 0.56 against -4.00 +- 0.55); with the triangles in index
    order one light comes first, its edge is dropped, and reverse mode read
    3.57 (z 9.5)."""
    scene = _welded_lights_scene()
    tris = np.asarray(kernel_inputs(scene)["tris"])
    emitter = scene.tri_attr[:, layout.ATTR_EMITTER] >= 0
    welded = edge_topology(tris)
    welded = welded[welded[:, 4] >= 0]
    assert np.sum(emitter[welded[:, 0]] & ~emitter[welded[:, 4]]) == 1   # in index order: one light first
    ordered = edge_topology(tris, emitter)
    ordered = ordered[ordered[:, 4] >= 0]
    assert not np.any(emitter[ordered[:, 0]] & ~emitter[ordered[:, 4]])
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.02, range(1000, 1064), 64)
    rev = _reverse(scene, key, m, TRANSLATE_X, range(32), 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())


@pytest.mark.parametrize("change, message", [
    ({"front": {"bsdf": {"type": "dielectric"}}}, "Dirac"),
    # (in a medium: volpath's own kernels; without one it renders with the path tracer's)
    ({"integrator": {"type": "volpath"}, "sensor": {"medium": {"type": "homogeneous", "sigma_t": 0.1}}},
     "path and direct"),
])
def test_unsupported_camera_derivatives_raise(change, message):
    d = _scene()
    for k, v in change.items():
        if k in ("front", "sensor"):
            d[k] = dict(d[k], **v)
        else:
            d[k] = v
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    with pytest.raises(NotDifferentiableError, match=message):
        jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1)))(m)


def test_degenerate_and_grazing_geometry_gives_finite_derivatives(tmp_path):
    """A zero-area face (collinear vertices), a collapsed one (two equal
    vertices) and a rectangle seen edge-on: camera derivatives stay finite."""
    obj = tmp_path / "degenerate.obj"
    obj.write_text("v -0.5 -0.5 0\nv 0.5 -0.5 0\nv 0.5 0.5 0\nv -0.5 0.5 0\n"
                   "v -0.2 0 0.3\nv 0 0 0.3\nv 0.2 0 0.3\nv 0.3 0.3 0.4\n"
                   "f 1 2 3\nf 1 3 4\nf 5 6 7\nf 8 8 6\n")
    d = _scene()
    d["front"] = {"type": "obj", "filename": str(obj), "bsdf": d["front"]["bsdf"]}
    # in the plane x = 0.3, which holds the camera's position: seen exactly edge-on
    d["edge_on"] = {"type": "rectangle", "bsdf": {"type": "diffuse"},
                    "to_world": np.array([[0, 0, 1, 0.3], [0, 0.3, 0, 0.2], [-0.3, 0, 0, 2.0], [0, 0, 0, 1]],
                                         np.float32)}
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    for method in ("prb", "rb"):
        g = jitted.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=4, method=method) * WEIGHTS), m)
        assert np.all(np.isfinite(np.asarray(g))), g
    t = jitted.jvp(lambda v: jaxrender.render(scene, {key: v}, spp=4), m, jnp.asarray(TRANSLATE_X))
    assert np.all(np.isfinite(np.asarray(t)))


def test_rotation_matches_finite_differences():
    """The camera turned about its vertical axis (yaw): the angle's
    derivative through an exactly rigid to_world."""
    scene = jaxrender.load_dict(_scene("cube"))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])

    def turned(a):
        c, s = jnp.cos(a), jnp.sin(a)
        r = jnp.eye(4).at[0, 0].set(c).at[0, 2].set(s).at[2, 0].set(-s).at[2, 2].set(c)
        return m @ r

    loss = jax.jit(lambda a, s: _loss(scene, key, turned(a), s, 64))
    grad = jax.jit(jax.grad(loss))
    h = 0.005
    fd = np.array([(float(loss(jnp.float32(h), jnp.uint32(s))) - float(loss(jnp.float32(-h), jnp.uint32(s))))
                   / (2 * h) for s in FD_SEEDS])
    rev = np.array([float(grad(jnp.float32(0.0), jnp.uint32(s))) for s in SEEDS])
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    # (a pure rotation moves every point on the film alike: silhouettes do not
    # sweep over what lies behind them, and only the film's edges add a term)


def _orthographic(front="rectangle"):
    """``_scene`` seen by an orthographic camera whose to_world scales its
    film to 3.2 x 3.2 scene units."""
    d = _scene(front)
    d["sensor"] = dict(d["sensor"], type="orthographic",
                       to_world=(d["sensor"]["to_world"] @ np.diag([1.6, 1.6, 1.0, 1.0])).astype(np.float32))
    del d["sensor"]["fov"]
    return d


RAMP = np.broadcast_to(np.linspace(0.0, 1.0, 24)[None, :, None], (24, 24, 3)).astype(np.float32)
YAW = np.zeros((4, 4), np.float32)
YAW[0, 2], YAW[2, 0] = 1.0, -1.0
EXTENT = np.diag([1.0, 1.0, 0.0, 0.0]).astype(np.float32)


@pytest.mark.parametrize("front, motion", [("rectangle", "translate"), ("rectangle", "extent"), ("sphere", "yaw")])
def test_orthographic_camera_matches_finite_differences(front, motion, monkeypatch):
    """An orthographic camera (parallel rays along its axis, a to_world
    that scales its film) translated sideways, its film's extent grown, and
    turned about its vertical axis with a sphere in view (whose outline, seen
    along the axis, turns with it): finite differences of a loss weighted
    by a ramp across the image agree with reverse mode, forward mode equals
    it, and the interior term alone is far off (finite differences against
    the interior: translation -29.7 +- 0.5 against -121, extent -91.3 +- 0.7
    against -384, the sphere under yaw 139 +- 1.4 against 945)."""
    monkeypatch.setitem(globals(), "WEIGHTS", RAMP)
    scene = jaxrender.load_dict(_orthographic(front))
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    tangent = {"translate": TRANSLATE_X, "extent": np.asarray(m) @ EXTENT, "yaw": np.asarray(m) @ YAW}[motion]
    fd = _fd(scene, key, m, tangent, 0.02, range(1000, 1064), 64)
    rev = _reverse(scene, key, m, tangent, range(32), 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    fwd = _forward(scene, key, m, tangent, range(2), 64)
    np.testing.assert_allclose(fwd, rev[:2], rtol=1e-3, atol=1e-3)
    interior = _interior_only(_reverse, scene, key, m, tangent, range(8), 64)
    assert abs(_z(interior, fd)) > 6.0, (interior.mean(), fd.mean())


def uv_sphere_obj(n: int = 32, radius: float = 0.6, centre=(0.0, 0.0, 0.0)) -> str:
    """OBJ text of a UV sphere: n meridians, n / 2 bands, one vertex per pole (n (n - 2) triangles)."""
    cx, cy, cz = centre
    rings = [(t, p) for t in np.linspace(0, np.pi, n // 2 + 1)[1:-1] for p in np.linspace(0, 2 * np.pi, n + 1)[:-1]]
    v = [(0.0, radius, 0.0)] + [(radius * np.sin(t) * np.cos(p), radius * np.cos(t), radius * np.sin(t) * np.sin(p))
                                for t, p in rings] + [(0.0, -radius, 0.0)]
    v = [(x + cx, y + cy, z + cz) for x, y, z in v]
    ring = lambda i, j: 1 + i * n + j % n      # noqa: E731
    f = [(0, ring(0, j + 1), ring(0, j)) for j in range(n)]
    for i in range(n // 2 - 2):
        for j in range(n):
            f += [(ring(i, j), ring(i + 1, j + 1), ring(i + 1, j)), (ring(i, j), ring(i, j + 1), ring(i + 1, j + 1))]
    f += [(len(v) - 1, ring(n // 2 - 2, j), ring(n // 2 - 2, j + 1)) for j in range(n)]
    return "".join(f"v {x} {y} {z}\n" for x, y, z in v) + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in f)


def _uv_sphere(path, n=32) -> str:
    """An OBJ sphere of radius 0.6 (:func:`uv_sphere_obj`) written to ``path``; the path."""
    path.write_text(uv_sphere_obj(n))
    return str(path)


def _thin_lens(front="rectangle", tmp_path=None) -> dict:
    """The scene through a thin lens focused in front of the front shape,
    whose silhouettes are blurred over several pixels (``front`` "mesh":
    a sphere of 960 triangles)."""
    d = _scene("rectangle" if front == "mesh" else front)
    if front == "mesh":
        d["front"] = {"type": "obj", "filename": _uv_sphere(tmp_path / "sphere.obj"), "face_normals": True,
                      "bsdf": d["front"]["bsdf"]}
    d["sensor"] = dict(d["sensor"], type="thinlens", aperture_radius=0.4, focus_distance=2.0)
    return d


def _lens_from_its_centre(estimate, *args, **kwargs):
    """``estimate(*args, **kwargs)`` with the film boundary seen from the lens's
    centre (its rays still leave the sampled aperture points): what a
    pinhole's film boundary would do."""
    lens = boundary_kernels._lens

    def centred(ctx, cam, s):
        uniforms, eye = lens(ctx, cam, s)
        return uniforms, None if eye is None else eye * 0.0
    boundary_kernels._lens = centred
    boundary_kernels._KERNELS.clear()
    try:
        return estimate(*args, **kwargs)
    finally:
        boundary_kernels._lens = lens
        boundary_kernels._KERNELS.clear()


@pytest.mark.parametrize("front, key", [("rectangle", "to_world"), ("sphere", "to_world"), ("mesh", "to_world"),
                                        ("rectangle", "x_fov")])
def test_thin_lens_camera_matches_finite_differences(front, key, tmp_path):
    """A thin lens is a pinhole per point of its aperture: samples move
    on the film as seen from their own aperture point, and each boundary
    sample takes an aperture point and the silhouettes seen from there
    (sampled on the scene's welded edges and outlines). The camera
    translated (a rectangle, a sphere, a sphere mesh) and its field of view widened (box filter)
    agree with finite differences, forward mode equals reverse mode, and
    the film boundary term matters: without it the rectangle's translation
    read -5.6 against finite differences of -42.0 +- 0.9 (reverse mode
    -41.9 +- 0.6); with the film boundary seen from the lens's centre,
    +11.0 +- 1.5."""
    d = _thin_lens(front, tmp_path)
    if key == "x_fov":
        # (and the box filter: pixel edges seen from each sample's aperture point)
        d["sensor"]["film"]["rfilter"] = {"type": "box"}
    scene = jaxrender.load_dict(d)
    name = scene.camera_key if key == "to_world" else "sensor.x_fov"
    value = jnp.asarray(scene.params[name])
    tangent = TRANSLATE_X if key == "to_world" else jnp.float32(1.0)
    h = 0.02 if key == "to_world" else 0.05
    fd = _fd(scene, name, value, tangent, h, range(1000, 1064), 64)
    rev = _reverse(scene, name, value, tangent, range(32), 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    fwd = _forward(scene, name, value, tangent, range(2), 64)
    np.testing.assert_allclose(fwd, rev[:2], rtol=1e-3, atol=1e-3)
    if front == "rectangle" and key == "to_world":
        interior = _interior_only(_reverse, scene, name, value, tangent, range(8), 64)
        assert abs(_z(interior, fd)) > 6.0, (interior.mean(), fd.mean())
        centred = _lens_from_its_centre(_reverse, scene, name, value, tangent, range(8), 64)
        assert abs(_z(centred, fd)) > 6.0, (centred.mean(), fd.mean())


def test_thin_lens_edges_are_drawn_among_silhouettes(tmp_path):
    """The thin lens's boundary samples pick edges by ``lens_edge_cdf``:
    every edge of a 960-triangle sphere that is a silhouette from one of
    4096 aperture points has a weight, and few others do (244 edges of
    1445 have one, 186 are silhouettes). Uniform edge sampling gave that
    sphere's camera derivative (-40.4 over 24 seeds) 100x the variance
    (1247 against 12.5), in 0.85x the time."""
    from jaxrender.primitives.boundary import lens_edge_cdf
    scene = jaxrender.load_dict(_thin_lens("mesh", tmp_path))
    tris = np.asarray(kernel_inputs(scene)["tris"], np.float64).reshape(-1, 9)
    topo = edge_topology(tris)
    camera = np.asarray(kernel_inputs(scene)["camera"]).reshape(-1)
    weights = np.diff(np.asarray(lens_edge_cdf(tris, topo, camera)), prepend=0.0)
    m = camera[layout.CAMERA_TO_WORLD:layout.CAMERA_TO_WORLD + 16].reshape(4, 4)
    r = np.sqrt(np.random.default_rng(0).uniform(0, 1, 4096)) * camera[layout.CAMERA_APERTURE]
    a = np.random.default_rng(1).uniform(0, 2 * np.pi, 4096)
    eyes = m[:3, 3] + np.outer(r * np.cos(a), m[:3, 0]) + np.outer(r * np.sin(a), m[:3, 1])
    v = lambda tri, slot: tris[tri].reshape(-1, 3, 3)[np.arange(len(tri)), slot]      # noqa: E731
    v0, v1, a3, b3 = v(topo[:, 0], topo[:, 1]), v(topo[:, 0], topo[:, 2]), v(topo[:, 0], topo[:, 3]), \
        v(np.maximum(topo[:, 4], 0), topo[:, 5])
    seen = np.zeros(len(topo), bool)
    for x in eyes:
        mx = np.cross(v0 - x, v1 - x)
        seen |= (topo[:, 4] < 0) | (np.sum(mx * (a3 - x), 1) * np.sum(mx * (b3 - x), 1) > 0)
    assert seen.sum() > 20
    assert np.all(weights[seen] > 0), np.flatnonzero(seen & (weights <= 0))
    assert (weights > 0).sum() < 1.5 * seen.sum(), ((weights > 0).sum(), seen.sum())


def test_thin_lens_sees_shared_instances_edges():
    """Seen from each aperture point, the silhouettes of shared instances
    are their shapegroup's edges placed by each instance (one mirrored),
    drawn among the scene's own edges. Reverse mode agrees with finite
    differences and with forward mode; with the copies' weights zeroed
    (the scene's own edges only) the boundary term misses them (-106.7 +-
    0.8 against finite differences' -89.8 +- 0.7 when written; two cubes
    cut by the film's left side, so that their silhouettes do not cancel)."""
    d = _thin_lens()
    del d["front"]
    d["sensor"]["aperture_radius"] = 0.2
    d["g"] = {"type": "shapegroup", "box": {"type": "cube", "bsdf": {
        "type": "diffuse", "reflectance": {"type": "rgb", "value": [0.8, 0.7, 0.6]}}}}
    for name, m in (("upper", np.array([[0.4, 0, 0, -1.3], [0, 0.4, 0, 0.5], [0, 0, 0.4, 0], [0, 0, 0, 1]])),
                    ("lower", np.array([[-0.35, 0, 0, -1.2], [0, 0.5, 0, -0.5], [0, 0, 0.3, 0.2], [0, 0, 0, 1]]))):
        d[name] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"}, "to_world": m.astype(np.float32)}
    scene = jaxrender.load_dict(d)
    assert scene.structure.instanced
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    fd = _fd(scene, key, m, TRANSLATE_X, 0.02, range(1000, 1064), 64)
    rev = _reverse(scene, key, m, TRANSLATE_X, range(32), 64)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    np.testing.assert_allclose(_forward(scene, key, m, TRANSLATE_X, range(2), 64), rev[:2], rtol=1e-3, atol=1e-3)
    original = render_rules.lens_edge_cdf

    def own_only(tris, topology, *args):
        cdf = original(tris, topology, *args)
        own = cdf[len(topology) - 1]
        return jnp.where(jnp.arange(len(cdf)) < len(topology), cdf, own)
    render_rules.lens_edge_cdf = own_only
    try:
        missed = _reverse(scene, key, m, TRANSLATE_X, range(16), 64)
    finally:
        render_rules.lens_edge_cdf = original
    assert abs(_z(missed, fd)) > 6.0, (missed.mean(), fd.mean())


@pytest.mark.parametrize("sky, motion", [("envmap", "yaw"), ("envmap", "translate"), ("sunsky", "yaw")])
def test_orthographic_camera_seeing_an_environment_matches_finite_differences(sky, motion, monkeypatch):
    """Every miss of an orthographic camera sees the one direction along its
    axis: turned, the camera shows another part of the environment at
    every such pixel (an interior term of the environment's gradient, not a
    motion on the film); translated, the same part. A sphere against an
    envmap, and against a sunsky seen from below: reverse mode agrees with
    finite differences, forward mode equals it (envmap). Without the environment's
    term (the misses' direction held still) the envmap's yaw derivative was
    -98.0 +- 1.8 against finite differences of 384.9 +- 0.8 (the
    translation's unchanged)."""
    monkeypatch.setitem(globals(), "WEIGHTS", RAMP)
    d = _orthographic("sphere")
    del d["back"]
    if sky == "envmap":
        d["sky"] = {"type": "envmap", "bitmap": np.random.default_rng(1).uniform(0.2, 1.0, (8, 16, 3)).astype(np.float32)}
    else:
        d["sky"] = {"type": "sunsky", "sun_direction": [0.3, 0.8, 0.5]}
        d["sensor"]["to_world"] = (_look_at((0.3, -1.5, 4.0), (0.0, 0.0, 0.0))
                                   @ np.diag([1.6, 1.6, 1.0, 1.0])).astype(np.float32)
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    tangent = {"translate": TRANSLATE_X, "yaw": np.asarray(m) @ YAW}[motion]
    fd = _fd(scene, key, m, tangent, 0.02, range(1000, 1064), 64)
    rev = _reverse(scene, key, m, tangent, range(32), 64)
    assert abs(fd.mean()) > 10 * fd.std(ddof=1) / np.sqrt(len(fd)), fd.mean()
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
    if sky == "envmap":   # (the sunsky's forward kernels would be the same code)
        fwd = _forward(scene, key, m, tangent, range(2), 64)
        np.testing.assert_allclose(fwd, rev[:2], rtol=1e-3, atol=1e-3)


def test_perfect_conductor_camera_derivatives_are_finite_and_right():
    """A rough conductor of Mitsuba's default material "none" (eta 0, k 1):
    its Fresnel term's square root sat at 0 (a cancellation rounding to 0
    or a few ulp), whose slope made 45 of 63 lit pixels' camera tangents
    NaN. Finite, forward equal to reverse, and within noise of finite
    differences."""
    d = _scene()
    d["front"]["bsdf"] = {"type": "roughconductor", "alpha": 0.2}
    d["light"] = {"type": "rectangle", "to_world": np.array([[0.5, 0, 0, 0.8], [0, 0.5, 0, 0.8], [0, 0, 1, 1.5],
                                                             [0, 0, 0, 1]], np.float32),
                  "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [4.0, 4.0, 4.0]}}}
    scene = jaxrender.load_dict(d)
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    t = jitted.jvp(lambda v: jaxrender.render(scene, {key: v}, spp=4), m, jnp.asarray(TRANSLATE_X))
    assert np.all(np.isfinite(np.asarray(t)))
    fwd = _forward(scene, key, m, TRANSLATE_X, range(4), 16)
    rev = _reverse(scene, key, m, TRANSLATE_X, range(48), 16)
    np.testing.assert_allclose(fwd, rev[:4], rtol=1e-3)
    fd = _fd(scene, key, m, TRANSLATE_X, 0.02, range(1000, 1096), 16)
    assert abs(_z(rev, fd)) < 4.0, (rev.mean(), fd.mean())
