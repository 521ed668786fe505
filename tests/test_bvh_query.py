"""The builtin 8-wide BVH query (ir.bvh_query, lowering/bvh_traversal.py)
against the kernel-language skip-link traversal of the same triangles, in
the one-lane and the SIMD packet code, plus its guards against bad input."""
from __future__ import annotations

import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.kernels import geometry
from jaxrender.kernels.shapes import triangle
from jaxrender import SceneError
from jaxrender.scene import bvh as B
from jaxrender.scene.wide_bvh import build_wide_bvh, leaf_order_tris

from lanes import LANES, run

INPUTS = {"o": ir.In("f32", (3,)), "d": ir.In("f32", (3,)), "t_max": ir.In("f32"),
          "tris": ir.In("f32", (9,)), "bounds": ir.In("f32", (6,)), "links": ir.In("i32", (3,)),
          "wide_nodes": ir.In("i32", (56,)), "wide_leaves": ir.In("i32", (40,))}
OUTPUTS = {k: ir.Out(t) for k, t in (("t", "f32"), ("prim", "i32"), ("b1", "f32"), ("b2", "f32"),
                                     ("occluded", "i32"))}


def query_kernel(wide: bool) -> ir.Kernel:
    """The scene's queries (the 8-wide BVH, ``wide``) or the reference: the
    same triangles walked through the binary skip-link BVH in the kernel
    language, triangle by triangle (``geometry``'s walks, which the scene
    keeps for analytic shapes and instances)."""
    def body(o, d, t_max, tris, bounds, links, wide_nodes, wide_leaves):
        i = ir.item_index()
        ray_o, ray_d = ir.Vec(*o[i]), ir.Vec(*d[i])
        t_min = ir.Float(1e-4)
        if wide:
            geo = geometry.SceneGeometry(tris, bounds, links, wide=(wide_nodes, wide_leaves))
            t, prim, b1, b2, _ = geometry.closest_hit(geo, ray_o, ray_d, t_min, geometry.INF)
            occ = geometry.occluded(geo, ray_o, ray_d, t_min, t_max[i])
        else:
            t, prim, b1, b2 = skip_link_closest(tris, bounds, links, ray_o, ray_d, t_min)
            occ = skip_link_any(tris, bounds, links, ray_o, ray_d, t_min, t_max[i])
        return {"t": t, "prim": prim, "b1": b1, "b2": b2, "occluded": ir.cast(occ, "i32")}
    return ir.trace(body, INPUTS, OUTPUTS)


def skip_link_closest(tris, bounds, links, o, d, t_min):
    def primitive(idx, st):
        bt, bi, u0, v0 = st
        t, u, v = triangle.intersect(o, d, *triangle.vertices(tris, idx))
        closer = (t > t_min) & (t < bt)
        return (ir.select(closer, t, bt), ir.select(closer, idx, bi),
                ir.select(closer, u, u0), ir.select(closer, v, v0))
    return geometry._walk_nearest(bounds, links, o, geometry._safe_inv(d),
                                  (ir.Float(geometry.INF), ir.Int(-1), ir.Float(0.0), ir.Float(0.0)), primitive)


def skip_link_any(tris, bounds, links, o, d, t_min, t_max):
    return geometry._walk_any(bounds, links, o, geometry._safe_inv(d), t_max,
                              lambda idx: triangle.intersect(o, d, *triangle.vertices(tris, idx))[0],
                              lambda t: (t > t_min) & (t < t_max))


def scene_arrays(v, f):
    b = B.build_bvh(v, f)
    tris = leaf_order_tris(b, v, f)
    w = build_wide_bvh(b, tris)
    w.check(n_tris=len(f), tris=tris)
    nodes, leaves = w.packed()
    return dict(tris=tris, bounds=b.node_bounds, links=b.node_links, wide_nodes=nodes, wide_leaves=leaves)


def rays(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    pad = 0.3 * np.max(hi - lo)
    o = rng.uniform(lo - pad, hi + pad, (n, 3)).astype(np.float32)
    target = rng.uniform(lo, hi, (n, 3))
    d = (target - o).astype(np.float32)
    d[: n // 8, 0] = 0.0        # axis-parallel directions: the safe 1/d path
    t_max = rng.uniform(0.0, 2.0, n).astype(np.float32)
    return o, d, t_max


MESHES = {
    "soup": lambda: B.random_soup(3000, size=0.05, seed=3),
    "sphere": lambda: B.sphere_mesh(40, 80),
    "grid": lambda: B.grid_mesh(30, 30, amplitude=0.2, seed=1),
    "one triangle": lambda: (np.float32([[0, 0, 0], [1, 0, 0], [0, 1, 0]]), np.int32([[0, 1, 2]])),
}


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("mesh", sorted(MESHES))
def test_wide_query_equals_skip_link_traversal(mesh, lanes):
    """Same hit, same bits: the builtin intersects with the same arithmetic."""
    v, f = MESHES[mesh]()
    arrays = scene_arrays(v, f)
    o, d, t_max = rays(3000, v.min(0), v.max(0), seed=len(mesh))
    ref = run(query_kernel(False), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, **arrays)
    got = run(query_kernel(True), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, **arrays)
    ref = {k: np.asarray(x) for k, x in ref.items()}
    got = {k: np.asarray(x) for k, x in got.items()}
    hit = ref["prim"] >= 0
    assert hit.mean() > 0.2 and (~hit).mean() > 0.05        # both cases are exercised
    assert np.array_equal(got["occluded"], ref["occluded"])
    assert 0.05 < got["occluded"].mean() < 0.95
    # Where two triangles are hit at exactly the same t (shared edges), the
    # traversal orders may pick different ones; t agrees everywhere.
    assert got["t"].tobytes() == ref["t"].tobytes()
    same = got["prim"] == ref["prim"]
    assert same.mean() > 0.999
    for k in ("b1", "b2"):
        assert got[k][same].tobytes() == ref[k][same].tobytes()


def test_empty_hierarchy_misses():
    arrays = dict(tris=np.zeros((0, 9), np.float32), bounds=np.zeros((0, 6), np.float32),
                  links=np.zeros((0, 3), np.int32), wide_nodes=np.zeros((0, 56), np.int32),
                  wide_leaves=np.zeros((0, 40), np.int32))
    o, d, t_max = rays(64, np.zeros(3), np.ones(3), seed=0)
    got = run(query_kernel(True), (64,), o=o, d=d, t_max=t_max, **arrays)
    assert np.all(np.asarray(got["prim"]) == -1) and np.all(np.isinf(np.asarray(got["t"])))
    assert not np.asarray(got["occluded"]).any()


@pytest.mark.parametrize("lanes", LANES)
def test_corrupt_indices_are_clamped_not_followed(lanes):
    """The routine reads raw pointers: a wrong child or block index must stay
    inside its buffer (wrong answers, never a wild read or a hang)."""
    v, f = MESHES["sphere"]()
    arrays = scene_arrays(v, f)
    rng = np.random.default_rng(5)
    nodes = arrays["wide_nodes"].copy()
    ch = nodes[:, 48:]
    ch[rng.random(ch.shape) < 0.3] = 10 ** 9        # far past the last node
    ch[rng.random(ch.shape) < 0.3] = -10 ** 9       # far past the last leaf block
    ch[1:, 0] = 0                                    # cycles back to the root
    arrays["wide_nodes"] = nodes
    o, d, t_max = rays(2000, v.min(0), v.max(0), seed=1)
    got = run(query_kernel(True), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, **arrays)
    assert np.asarray(got["t"]).shape == (2000,)


def test_scene_refuses_a_hierarchy_deeper_than_the_stack(monkeypatch):
    monkeypatch.setattr(ir.bvh_query, "STACK_SIZE", 4)
    with pytest.raises(SceneError, match="traversal stack"):
        jaxrender.load_dict(jaxrender.cornell_box())


def test_query_has_no_derivative():
    """Hits are not differentiated through (callers recompute positions from
    differentiable data): d/dx (2 x + t(x)) is 2 where the ray hits."""
    v, f = MESHES["one triangle"]()
    arrays = scene_arrays(v, f)
    wide_keys = ("wide_nodes", "wide_leaves")

    def body(x, wide_nodes, wide_leaves):
        def fn(x):
            t, _, _, _ = ir.bvh_query.closest_hit((wide_nodes, wide_leaves),
                                                  ir.Vec(x, 0.25, -1.0), ir.Vec(0.0, 0.0, 1.0),
                                                  ir.Vec(1e20, 1e20, 1.0), ir.Float(0.0), ir.Float(10.0))
            return x * 2.0 + t
        y, dy = ir.jvp(fn, (x[ir.item_index()],), (ir.Float(1.0),))
        return {"y": y, "dy": dy}
    k = ir.trace(body, {"x": ir.In("f32"), **{n: INPUTS[n] for n in wide_keys}},
                 {"y": ir.Out("f32"), "dy": ir.Out("f32")})
    got = run(k, (2,), x=np.float32([0.25, 0.5]), **{n: arrays[n] for n in wide_keys})
    np.testing.assert_array_equal(np.asarray(got["y"]), [1.5, 2.0])
    np.testing.assert_array_equal(np.asarray(got["dy"]), [2.0, 2.0])


def test_bad_buffers_are_refused_at_trace_time():
    def body(a, c):
        ir.bvh_query.any_hit((a, c), ir.Vec(0.0, 0.0, 0.0), ir.Vec(0.0, 0.0, 1.0),
                             ir.Vec(1e20, 1e20, 1.0), 0.0, 1.0)
        return {"y": ir.Float(0.0)}
    with pytest.raises(ir.IRError, match="nodes buffer"):
        ir.trace(body, {"a": ir.In("f32", (56,)), "c": ir.In("i32", (40,))}, {"y": ir.Out("f32")})


RANGED_INPUTS = {"o": ir.In("f32", (3,)), "d": ir.In("f32", (3,)), "t_max": ir.In("f32"), "group": ir.In("i32", (4,)),
                 "wide_nodes": ir.In("i32", (56,)), "wide_leaves": ir.In("i32", (40,))}


def ranged_kernel() -> ir.Kernel:
    """The builtin query of the sub-range ``group[i]`` of the buffers (a
    shapegroup's hierarchy among the instanced scene's concatenated ones)."""
    def body(o, d, t_max, group, wide_nodes, wide_leaves):
        i = ir.item_index()
        ray_o, ray_d = ir.Vec(*o[i]), ir.Vec(*d[i])
        inv_d = geometry._safe_inv(ray_d)
        rng = tuple(group.read(i, k) for k in range(4))
        t, prim, b1, b2 = ir.bvh_query.closest_hit((wide_nodes, wide_leaves), ray_o, ray_d, inv_d, ir.Float(1e-4),
                                                   ir.Float(geometry.INF), group=rng)
        occ = ir.bvh_query.any_hit((wide_nodes, wide_leaves), ray_o, ray_d, inv_d, ir.Float(1e-4), t_max[i],
                                   group=rng)
        return {"t": t, "prim": prim, "b1": b1, "b2": b2, "occluded": ir.cast(occ, "i32")}
    return ir.trace(body, RANGED_INPUTS, OUTPUTS)


@pytest.mark.parametrize("lanes", LANES)
def test_ranged_query_traverses_one_group_of_concatenated_hierarchies(lanes):
    """Two meshes' hierarchies in one pair of buffers: a ray given the second
    one's range sees exactly what a query of that mesh alone sees."""
    first, second = scene_arrays(*MESHES["grid"]()), scene_arrays(*MESHES["sphere"]())
    nodes = np.concatenate([first["wide_nodes"], second["wide_nodes"]])
    leaves = np.concatenate([first["wide_leaves"], second["wide_leaves"]])
    v, _ = MESHES["sphere"]()
    o, d, t_max = rays(2000, v.min(0), v.max(0), seed=7)
    n1, b1 = len(first["wide_nodes"]), len(first["wide_leaves"])
    group = np.tile(np.int32([n1, len(second["wide_nodes"]), b1, len(second["wide_leaves"])]), (len(o), 1))
    got = run(ranged_kernel(), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, group=group,
              wide_nodes=nodes, wide_leaves=leaves)
    ref = run(query_kernel(True), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, **second)
    hit = np.asarray(ref["prim"]) >= 0
    assert 0.2 < hit.mean() < 0.95
    for k in ("t", "prim", "b1", "b2", "occluded"):
        assert np.asarray(got[k]).tobytes() == np.asarray(ref[k]).tobytes(), k


@pytest.mark.parametrize("lanes", LANES)
def test_ranged_query_clamps_ranges_to_the_buffers(lanes):
    """Ranges from a corrupt table (negative, past the end, too long) stay
    inside the buffers: a miss or some hit, never a wild read."""
    arrays = scene_arrays(*MESHES["sphere"]())
    n, b = len(arrays["wide_nodes"]), len(arrays["wide_leaves"])
    bad = np.int32([[-5, 3, 0, b], [n, 10, b, 10], [n - 1, 10 ** 9, b - 1, 10 ** 9], [0, -1, 0, -1],
                    [2 ** 31 - 1, 2 ** 31 - 1, 0, b], [0, n, 0, b]])
    o, d, t_max = rays(len(bad) * 50, np.full(3, -1.0), np.ones(3), seed=2)
    group = np.repeat(bad, 50, axis=0)
    got = run(ranged_kernel(), (len(o),), lanes=lanes, o=o, d=d, t_max=t_max, group=group,
              wide_nodes=arrays["wide_nodes"], wide_leaves=arrays["wide_leaves"])
    prim = np.asarray(got["prim"]).reshape(len(bad), 50)
    assert np.all(prim[1] == -1) and np.all(prim[3] == -1)      # empty ranges miss
    assert (prim[5] >= 0).any()                                    # the whole range is the mesh
