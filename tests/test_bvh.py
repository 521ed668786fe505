"""Binned-SAH BVH (jaxrender.scene.bvh): structural invariants of the flat
pre-order skip-link layout, closest hits of the stackless traversal against
brute force, degenerate inputs and input validation.

The 1M-triangle build timing is a benchmark, not a test:
``python -m jaxrender.scene.bvh``."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxrender.scene import bvh as B
from jaxrender.scene.bvh import BVH, build_bvh, build_bvh_from_bounds, intersect_triangles

F32 = np.float32


# ---------------------------------------------------------------------------
# Independent checks
# ---------------------------------------------------------------------------

def tri_boxes(v, f):
    t = np.asarray(v, F32)[np.asarray(f, np.int64)]
    return t.min(axis=1), t.max(axis=1)


def check_tree(bvh: BVH, lo, hi, max_leaf_size):
    """Walk the pre-order layout recursively and check every invariant."""
    lo = np.asarray(lo, F32)
    hi = np.asarray(hi, F32)
    N = lo.shape[0]
    nb, links, pidx = bvh.node_bounds, bvh.node_links, bvh.prim_index
    assert nb.dtype == np.float32 and links.dtype == np.int32 and pidx.dtype == np.int32
    M = links.shape[0]
    assert nb.shape == (M, 6) and links.shape == (M, 3) and pidx.shape == (N,)
    if N == 0:
        assert M == 0
        return
    assert 1 <= M <= 2 * N - 1
    seen = np.zeros(N, np.int64)
    next_prim = [0]
    leaf_order = []

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))

    def walk(i):
        """Returns (end of subtree, union box of its primitives)."""
        assert 0 <= i < M
        skip, start, count = (int(x) for x in links[i])
        if count > 0:
            assert count <= max_leaf_size
            assert start == next_prim[0], "leaves must tile prim_index in pre-order"
            next_prim[0] += count
            ids = pidx[start:start + count]
            assert np.all((ids >= 0) & (ids < N))
            seen[ids] += 1
            leaf_order.append(i)
            box_lo, box_hi = lo[ids].min(axis=0), hi[ids].max(axis=0)
            end = i + 1
        else:
            assert start == next_prim[0], "interior prim_start = start of its subtree's range"
            e1, l1, h1 = walk(i + 1)
            assert e1 < M, "interior node needs a second child"
            e2, l2, h2 = walk(e1)
            # Children inside the parent.
            assert np.all(nb[i, :3] <= nb[i + 1, :3]) and np.all(nb[i, 3:] >= nb[i + 1, 3:])
            assert np.all(nb[i, :3] <= nb[e1, :3]) and np.all(nb[i, 3:] >= nb[e1, 3:])
            box_lo, box_hi = np.minimum(l1, l2), np.maximum(h1, h2)
            end = e2
        assert skip == end, f"node {i}: skip {skip} but subtree ends at {end}"
        # Bounds contain (and here equal) the union of the subtree's primitive boxes.
        assert np.array_equal(nb[i, :3], box_lo) and np.array_equal(nb[i, 3:], box_hi)
        return end, box_lo, box_hi

    try:
        end, _, _ = walk(0)
    finally:
        sys.setrecursionlimit(old)
    assert end == M, "root subtree must cover every node"
    assert np.all(seen == 1), "every primitive in exactly one leaf"
    assert next_prim[0] == N


def brute_force(o, d, v, f, t_max=np.inf, t_min=0.0):
    tris = np.asarray(v, F32)[np.asarray(f, np.int64)]
    def col(x):  # per-ray ranges as a column
        return np.asarray(x, F32).reshape(-1, 1) if np.ndim(x) else x

    t = intersect_triangles(o[:, None, :], d[:, None, :], tris[None, :, 0], tris[None, :, 1], tris[None, :, 2],
                            col(t_min), col(t_max))
    return t.min(axis=1), t


def box_accepts(lo, hi, o, d, t_lo, t_hi):
    """The documented kernel box test, written out independently (broadcasts)."""
    with np.errstate(all="ignore"):
        inv = F32(1) / (d + F32(0))
        a = (lo - o) * inv
        b = (hi - o) * inv
    sw = b < a
    near, far = np.where(sw, b, a), np.where(sw, a, b)
    tn = np.full(near.shape[:-1], -np.inf, F32)
    tf = np.full(near.shape[:-1], np.inf, F32)
    for k in range(3):
        tn = np.where(near[..., k] > tn, near[..., k], tn)
        tf = np.where(far[..., k] < tf, far[..., k], tf)
    lo_t = np.maximum(tn, t_lo)
    hi_t = np.minimum(tf, t_hi)
    with np.errstate(all="ignore"):
        return lo_t <= hi_t + np.abs(hi_t) * B.BOX_PAD


def check_hits(bvh, o, d, v, f, t_max=np.inf, t_min=0.0, exact=True):
    """Closest hits of the traversal against brute force over all triangles.

    ``exact``: the traversal must return exactly the brute-force closest
    distance.  Otherwise (hypothesis' near-degenerate soups) the guarantee is
    the one the conservative box test gives: every hit whose triangle box the
    kernel box test accepts at that distance ("admissible") is found, so the
    traversal's distance lies between the closest hit and the closest
    admissible hit, and equals it whenever those agree."""
    o = np.asarray(o, F32)
    d = np.asarray(d, F32)
    t_bf, tall = brute_force(o, d, v, f, t_max, t_min)
    t, tid = bvh.traverse_numpy(o, d, (v, f), t_max=t_max, t_min=t_min)
    assert t.dtype == np.float32 and tid.dtype == np.int32
    hit = tid >= 0
    assert np.array_equal(np.isfinite(t), hit)
    r = np.flatnonzero(hit)
    # The reported triangle really is hit at the reported distance.
    assert np.array_equal(tall[r, tid[r]], t[r])
    if exact:
        bad = np.flatnonzero(t != t_bf)
        assert bad.size == 0, f"rays {bad[:10]}: traversal {t[bad[:5]]} vs brute force {t_bf[bad[:5]]}"
        return t, tid
    lo, hi = tri_boxes(v, f)
    tmin_col = np.asarray(t_min, F32).reshape(-1, 1) if np.ndim(t_min) else F32(t_min)
    adm = np.isfinite(tall) & box_accepts(lo[None], hi[None], o[:, None], d[:, None], tmin_col, tall)
    t_adm = np.where(adm, tall, np.inf).min(axis=1)
    assert np.all(t >= t_bf) and np.all(t <= t_adm)
    same = t_adm == t_bf
    assert np.array_equal(t[same], t_bf[same])
    return t, tid


def unit(x):
    x = np.asarray(x, np.float64)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(F32)


# ---------------------------------------------------------------------------
# Scenes
# ---------------------------------------------------------------------------

def soup(n, size, seed):
    return B.random_soup(n, size=size, seed=seed)


def rays_mixed(n, lo, hi, seed):
    """Camera rays from outside, rays from inside the scene's boxes, axis-aligned
    rays (zero direction components, both signs of zero) and rays pointing away."""
    rng = np.random.default_rng(seed)
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    c = (lo + hi) / 2
    ext = (hi - lo).max()
    k = n // 4
    # From a sphere around the scene towards random points in it.
    o1 = c + unit(rng.normal(size=(k, 3))) * 2 * ext
    d1 = unit(lo + rng.random((k, 3)) * (hi - lo) - o1)
    # From inside the scene, random directions.
    o2 = lo + rng.random((k, 3)) * (hi - lo)
    d2 = unit(rng.normal(size=(k, 3)))
    # Axis-aligned, through the scene, with -0.0 and +0.0 components.
    o3 = lo + rng.random((k, 3)) * (hi - lo)
    ax = rng.integers(0, 3, k)
    d3 = np.zeros((k, 3))
    d3[np.arange(k), ax] = rng.choice([-1.0, 1.0], k)
    d3[rng.random((k, 3)) < 0.3] *= -1.0  # some -0.0
    d3 = np.where(d3 == 0, rng.choice([0.0, -0.0], (k, 3)), d3)
    # From outside pointing away: miss everything.
    m = n - 3 * k
    o4 = c + unit(rng.normal(size=(m, 3))) * 2 * ext
    d4 = unit(o4 - c)
    o = np.concatenate([o1, o2, o3, o4]).astype(F32)
    d = np.concatenate([d1, d2, d3, d4]).astype(F32)
    return o, d


# ---------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 100, 1000, 5000])
@pytest.mark.parametrize("max_leaf", [1, 2, 4, 8])
def test_structure_random_soup(n, max_leaf):
    v, f = soup(n, 0.05, seed=n + max_leaf)
    bvh = build_bvh(v, f, max_leaf_size=max_leaf)
    check_tree(bvh, *tri_boxes(v, f), max_leaf)
    bvh.check(*tri_boxes(v, f), max_leaf)


@pytest.mark.parametrize("bins", [2, 3, 7, 16, 32])
@pytest.mark.parametrize("axis", ["largest", "all"])
@pytest.mark.parametrize("child_order", ["area", "count", "small", "split"])
def test_structure_options(bins, axis, child_order):
    v, f = B.sphere_mesh(12, 20)
    bvh = build_bvh(v, f, max_leaf_size=3, bins=bins, axis=axis, child_order=child_order)
    check_tree(bvh, *tri_boxes(v, f), 3)


def test_child_order_by_area_and_count():
    v, f = soup(3000, 0.05, seed=1)
    for order, cmp in [("area", np.greater_equal), ("small", np.less_equal)]:
        bvh = build_bvh(v, f, child_order=order)
        inner = np.flatnonzero(bvh.node_links[:, 2] == 0)
        first, second = inner + 1, bvh.node_links[inner + 1, 0]
        b = bvh.node_bounds.astype(np.float64)
        e = b[:, 3:] - b[:, :3]
        area = e[:, 0] * e[:, 1] + e[:, 1] * e[:, 2] + e[:, 2] * e[:, 0]
        assert np.all(cmp(area[first], area[second]))
    bvh = build_bvh(v, f, child_order="count")
    inner = np.flatnonzero(bvh.node_links[:, 2] == 0)
    first, second = inner + 1, bvh.node_links[inner + 1, 0]
    def size(i):  # primitives under node i: its subtree's prim_index range
        last = bvh.node_links[i, 0] - 1
        return bvh.node_links[last, 1] + bvh.node_links[last, 2] - bvh.node_links[i, 1]

    assert np.all(size(first) >= size(second))


def test_cost_constants_shape_leaves():
    v, f = soup(4000, 0.05, seed=3)
    lo, hi = tri_boxes(v, f)
    cheap = build_bvh(v, f, max_leaf_size=8)  # C_TRAV = C_ISECT = 1: splits pay off almost always
    costly = build_bvh(v, f, max_leaf_size=8, c_trav=8.0)  # expensive traversal: fuller leaves
    check_tree(costly, lo, hi, 8)
    assert costly.num_leaves < 0.6 * cheap.num_leaves
    assert costly.sah_cost(c_trav=8.0) <= cheap.sah_cost(c_trav=8.0)
    assert cheap.sah_cost() <= costly.sah_cost()
    with pytest.raises(ValueError, match="c_isect"):
        build_bvh(v, f, c_isect=0.0)


def test_default_child_order_is_small_first():
    v, f = B.sphere_mesh(20, 20)
    assert np.array_equal(build_bvh(v, f).node_links, build_bvh(v, f, child_order="small").node_links)


def test_sah_beats_median_split(monkeypatch):
    # Clustered scene: SAH separates clusters, median splits cut through them.
    rng = np.random.default_rng(5)
    centres = rng.random((8, 3)) * 10
    v, f = B.random_soup(4000, size=0.05, seed=2)
    v = (v.reshape(-1, 3, 3) + centres[rng.integers(0, 8, 4000)][:, None]).reshape(-1, 3).astype(F32)
    sah = build_bvh(v, f)
    monkeypatch.setattr(B, "SAH_DEPTH_LIMIT", 0)
    med = build_bvh(v, f)
    check_tree(med, *tri_boxes(v, f), 4)
    assert np.all(med.node_links[:, 2] <= 4)
    assert sah.sah_cost() < 0.8 * med.sah_cost()
    # And both trees give the same closest hits.
    o, d = rays_mixed(200, v.min(0), v.max(0), seed=9)
    t1, _ = check_hits(sah, o, d, v, f)
    t2, _ = check_hits(med, o, d, v, f)
    assert np.array_equal(t1, t2)


def test_sah_cost_and_depth_reasonable():
    v, f = B.grid_mesh(60, 60)
    bvh = build_bvh(v, f)
    n = f.shape[0]
    assert bvh.depth() <= 2 * np.log2(n) + 4
    assert bvh.num_leaves <= n and bvh.num_nodes == 2 * bvh.num_leaves - 1
    # A height field of n triangles: a good tree costs O(log n), far below n.
    assert bvh.sah_cost() < 60


# ---------------------------------------------------------------------------
# Traversal vs brute force
# ---------------------------------------------------------------------------

def test_intersect_triangles_against_float64():
    rng = np.random.default_rng(0)
    n = 2000
    tri = rng.normal(size=(n, 3, 3))
    o = rng.normal(size=(n, 3)) * 3
    target = tri[:, 0] + (tri[:, 1] - tri[:, 0]) * rng.random((n, 1)) * 1.2 \
        + (tri[:, 2] - tri[:, 0]) * rng.random((n, 1)) * 0.6
    d = target - o
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    t = intersect_triangles(o, d, tri[:, 0], tri[:, 1], tri[:, 2])
    # float64 reference: solve o + t d = v0 + u e1 + v e2.
    A = np.stack([-d, tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]], axis=2)
    tuv = np.linalg.solve(A, (o - tri[:, 0])[..., None])[..., 0]
    inside = (tuv[:, 1] >= 0) & (tuv[:, 2] >= 0) & (tuv[:, 1] + tuv[:, 2] <= 1) & (tuv[:, 0] > 0)
    margin = np.minimum(np.minimum(tuv[:, 1], tuv[:, 2]), 1 - tuv[:, 1] - tuv[:, 2])
    clear = np.abs(margin) > 1e-4  # away from edges where float32 may round either way
    assert np.array_equal(np.isfinite(t)[clear], inside[clear])
    nrm = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    cos = np.abs((nrm * d).sum(1)) / np.linalg.norm(nrm, axis=1)
    ok = inside & clear & (cos > 0.05)  # grazing hits are ill-conditioned
    assert ok.sum() > 500
    np.testing.assert_allclose(t[ok], tuv[ok, 0], rtol=1e-4, atol=1e-5)
    assert t.dtype == np.float32


@pytest.mark.parametrize("n,size,seed", [(300, 0.3, 0), (2000, 0.05, 1), (2000, 1.0, 2)])
def test_traversal_random_soup(n, size, seed):
    v, f = soup(n, size, seed)
    bvh = build_bvh(v, f)
    o, d = rays_mixed(800, v.min(0), v.max(0), seed)
    t, tid = check_hits(bvh, o, d, v, f)
    assert np.isfinite(t).sum() > 50
    assert np.all(tid[-(800 - 3 * 200):] == -1), "rays pointing away must miss"


@pytest.mark.parametrize("child_order", ["area", "count", "small", "split"])
@pytest.mark.parametrize("max_leaf", [1, 4])
def test_traversal_mesh(child_order, max_leaf):
    v, f = B.sphere_mesh(24, 32)  # poles hold zero-area triangles
    gv, gf = B.grid_mesh(20, 20)
    v = np.concatenate([v, (gv - [0.5, 0.5, 1.3]) * 3]).astype(F32)
    f = np.concatenate([f, gf + len(B.sphere_mesh(24, 32)[0])]).astype(np.int32)
    bvh = build_bvh(v, f, max_leaf_size=max_leaf, child_order=child_order)
    check_tree(bvh, *tri_boxes(v, f), max_leaf)
    o, d = rays_mixed(800, v.min(0), v.max(0), seed=3)
    o2, d2 = B.camera_rays(300, (0.2, -4, 0.7), (0, 0, 0))
    check_hits(bvh, np.concatenate([o, o2]), np.concatenate([d, d2]), v, f)


def test_traversal_t_range():
    v, f = B.sphere_mesh(16, 16)
    bvh = build_bvh(v, f)
    o, d = B.camera_rays(400, (0, -3, 0), (0, 0, 0), fov=0.3)
    t_full, _ = check_hits(bvh, o, d, v, f)
    assert np.isfinite(t_full).all()
    # t_max below the front hit: nothing; per-ray t_max arrays work.
    t, tid = bvh.traverse_numpy(o, d, (v, f), t_max=t_full * 0.99)
    assert np.all(tid == -1) and np.all(np.isinf(t))
    tmax = np.where(np.arange(400) % 2 == 0, np.inf, 1.0).astype(F32)
    check_hits(bvh, o, d, v, f, t_max=tmax)
    # t_min beyond the front hit finds the back of the sphere.
    t_back, _ = check_hits(bvh, o, d, v, f, t_min=t_full * 1.01)
    assert np.all(t_back > t_full)
    # Rays starting inside the sphere (inside every box on the way).
    oi = np.zeros((200, 3), F32)
    di = unit(np.random.default_rng(1).normal(size=(200, 3)))
    t_in, _ = check_hits(bvh, oi, di, v, f)
    assert np.isfinite(t_in).all() and np.all(t_in <= 1.0001)


def test_traversal_triangles_as_array_and_stats():
    v, f = soup(500, 0.1, 4)
    bvh = build_bvh(v, f)
    o, d = rays_mixed(200, v.min(0), v.max(0), seed=4)
    t1, i1 = bvh.traverse_numpy(o, d, (v, f))
    t2, i2, stats = bvh.traverse_numpy(o, d, v[f], return_stats=True)
    assert np.array_equal(t1, t2) and np.array_equal(i1, i2)
    assert np.all(stats["nodes"] >= 1) and np.all(stats["nodes"] <= bvh.num_nodes)
    assert stats["tris"].sum() > 0


def test_axis_aligned_rays_on_box_planes():
    # Rays with zero direction components that run exactly in the planes of
    # triangle boxes (0 * inf = NaN in the slab test) and hit edges/vertices.
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0],
                  [0, 0, 1], [1, 0, 1], [0, 1, 1],
                  [1, 1, 2], [2, 1, 2], [1, 2, 2]], F32)
    f = np.arange(9, dtype=np.int32).reshape(3, 3)
    bvh = build_bvh(v, f, max_leaf_size=1)
    g = np.array([0.0, 0.25, 0.5, 1.0, 1.5, 2.0], F32)
    ox, oy = np.meshgrid(g, g, indexing="ij")
    o_up = np.stack([ox.ravel(), oy.ravel(), np.full(ox.size, -1.0)], 1).astype(F32)
    for dz, oz in [(1.0, -1.0), (-1.0, 3.0)]:
        o = o_up.copy()
        o[:, 2] = oz
        for zero in (0.0, -0.0):
            d = np.tile(np.array([zero, zero, dz], F32), (len(o), 1))
            t, _ = check_hits(bvh, o, d, v, f)
            assert np.isfinite(t).sum() >= 6
    # Along x inside the plane z == 0 of the first triangle (parallel: det == 0).
    o = np.array([[-1, 0.25, 0], [-1, 0, 0], [-1, 0.25, 1]], F32)
    d = np.array([[1, 0, 0], [1, 0, 0], [1, -0.0, 0.0]], F32)
    check_hits(bvh, o, d, v, f)


# ---------------------------------------------------------------------------
# Hypothesis: small random soups
# ---------------------------------------------------------------------------

coord = st.one_of(
    st.floats(-10, 10, allow_nan=False, width=32),
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]),
)


@st.composite
def soups(draw):
    n = draw(st.integers(1, 24))
    nv = draw(st.integers(3, 3 * n))
    verts = draw(st.lists(st.tuples(coord, coord, coord), min_size=nv, max_size=nv))
    faces = draw(st.lists(st.tuples(*[st.integers(0, nv - 1)] * 3), min_size=n, max_size=n))
    return np.array(verts, F32), np.array(faces, np.int32)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(soups(), st.integers(1, 5), st.sampled_from([2, 4, 16]), st.sampled_from(["largest", "all"]),
       st.integers(0, 2**31 - 1))
def test_hypothesis_small_soups(s, max_leaf, bins, axis, seed):
    v, f = s
    bvh = build_bvh(v, f, max_leaf_size=max_leaf, bins=bins, axis=axis)
    check_tree(bvh, *tri_boxes(v, f), max_leaf)
    lo, hi = v.min(0), v.max(0)
    o, d = rays_mixed(64, lo - 0.5, hi + 0.5, seed)
    # Rays aimed at triangle centroids hit something.
    rng = np.random.default_rng(seed)
    tgt = v[f].mean(axis=1)
    oc = (tgt + unit(rng.normal(size=tgt.shape)) * 5).astype(F32)
    dc = unit(tgt - oc)
    check_hits(bvh, np.concatenate([o, oc]), np.concatenate([d, dc]), v, f, exact=False)


grid = st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(*[st.tuples(grid, grid, grid)] * 3), min_size=1, max_size=20),
       st.lists(st.tuples(st.tuples(grid, grid, grid), st.integers(0, 5)), min_size=1, max_size=30),
       st.integers(1, 3))
def test_hypothesis_grid_soups_axis_rays(tris, rays, max_leaf):
    """Coordinates on a coarse grid: shared vertices, coplanar, degenerate and
    axis-aligned triangles; axis-aligned rays starting on box planes."""
    v = np.array(tris, F32).reshape(-1, 3)
    f = np.arange(v.shape[0], dtype=np.int32).reshape(-1, 3)
    bvh = build_bvh(v, f, max_leaf_size=max_leaf)
    check_tree(bvh, *tri_boxes(v, f), max_leaf)
    o = np.array([r[0] for r in rays], F32) + F32(0.25) * np.array([0, 1, 0], F32)
    axes = np.array([r[1] for r in rays])
    d = np.zeros((len(rays), 3), F32)
    d[np.arange(len(rays)), axes % 3] = np.where(axes < 3, 1, -1)
    o = np.concatenate([o, np.array([r[0] for r in rays], F32)])  # exactly on grid planes
    d = np.concatenate([d, d])
    check_hits(bvh, o, d, v, f, exact=False)


def test_sliver_triangles_inadmissible_hits():
    """Nearly collinear triangles: float32 Moller-Trumbore reports some hits
    outside the triangle's own box.  The traversal still returns a real hit
    no farther than the closest admissible one."""
    rng = np.random.default_rng(0)
    n_inadmissible = 0
    for _ in range(20):
        n = 50
        p, q = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
        m = (p + q) / 2 + rng.normal(size=(n, 3)) * 10.0 ** rng.integers(-12, -5, (n, 1))
        v = np.stack([p, q, m], 1).astype(F32).reshape(-1, 3)
        f = np.arange(3 * n, dtype=np.int32).reshape(-1, 3)
        bvh = build_bvh(v, f, max_leaf_size=2)
        tgt = p + (q - p) * rng.random((n, 1))
        o = (tgt + unit(rng.normal(size=(n, 3))) * 3).astype(F32)
        d = unit(tgt - o)
        check_hits(bvh, o, d, v, f, exact=False)
        _, tall = brute_force(o, d, v, f)
        lo, hi = tri_boxes(v, f)
        adm = box_accepts(lo[None], hi[None], o[:, None], d[:, None], F32(0), tall)
        n_inadmissible += int((np.isfinite(tall) & ~adm).sum())
    assert n_inadmissible > 0  # the scenario really is exercised


# ---------------------------------------------------------------------------
# Degenerate inputs
# ---------------------------------------------------------------------------

def test_single_triangle():
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32)
    f = np.array([[0, 1, 2]], np.int32)
    bvh = build_bvh(v, f)
    assert bvh.node_links.tolist() == [[1, 0, 1]]
    assert bvh.prim_index.tolist() == [0]
    assert bvh.node_bounds.tolist() == [[0, 0, 0, 1, 1, 0]]
    t, tid = bvh.traverse_numpy([[0.2, 0.2, 1]], [[0, 0, -1]], (v, f))
    assert t[0] == 1 and tid[0] == 0


def test_empty_input():
    bvh = build_bvh(np.zeros((0, 3), F32), np.zeros((0, 3), np.int32))
    assert bvh.num_nodes == 0 and bvh.prim_index.size == 0
    t, tid = bvh.traverse_numpy(np.zeros((3, 3)), np.ones((3, 3)), np.zeros((0, 3, 3)))
    assert np.all(np.isinf(t)) and np.all(tid == -1)


@pytest.mark.parametrize("n", [2, 5, 100, 1000])
def test_identical_triangles(n):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32)
    f = np.zeros((n, 3), np.int32) + [0, 1, 2]
    bvh = build_bvh(v, f, max_leaf_size=4)
    check_tree(bvh, *tri_boxes(v, f), 4)
    assert bvh.depth() <= int(np.ceil(np.log2(n))) + 1
    t, tid = bvh.traverse_numpy([[0.2, 0.2, 1]] * 2, [[0, 0, -1], [0, 0, 1]], (v, f))
    assert t[0] == 1 and 0 <= tid[0] < n and tid[1] == -1


def test_all_centroids_equal_different_boxes():
    # Nested, concentric triangles: every centroid the same, boxes differ.
    s = np.geomspace(1e-3, 1e3, 300)[:, None, None]
    base = np.array([[-1, -1, 0], [1, -1, 0], [0, 2, 0]], np.float64)  # bbox centre (0, 0.5, 0)
    v = (base[None] * s).reshape(-1, 3).astype(F32)
    v[:, 1] -= (0.5 * s.repeat(3, axis=1).reshape(-1)).astype(F32)
    f = np.arange(v.shape[0], dtype=np.int32).reshape(-1, 3)
    lo, hi = tri_boxes(v, f)
    bvh = build_bvh(v, f, max_leaf_size=2)
    check_tree(bvh, lo, hi, 2)
    o = np.array([[0.0, 0.0, 5.0]] * 3, F32)
    d = np.array([[0, 0, -1], [0.001, 0, -1], [0.3, 0.1, -1]], F32)
    check_hits(bvh, o, d, v, f)


def test_zero_area_triangles():
    rng = np.random.default_rng(0)
    p = rng.random((200, 3)).astype(F32)
    q = rng.random((200, 3)).astype(F32)
    points = np.stack([p, p, p], 1)  # point triangles
    lines = np.stack([p, q, p], 1)  # segment triangles
    colinear = np.stack([p, q, (p + q) / 2], 1)
    v = np.concatenate([points, lines, colinear]).reshape(-1, 3).astype(F32)
    f = np.arange(v.shape[0], dtype=np.int32).reshape(-1, 3)
    bvh = build_bvh(v, f)
    check_tree(bvh, *tri_boxes(v, f), 4)
    o, d = rays_mixed(200, [0, 0, 0], [1, 1, 1], 0)
    _, tid = check_hits(bvh, o, d, v, f)
    # det == 0 exactly for points and segments; the rounded midpoints of
    # "collinear" triangles may leave a sliver that a ray can hit.
    assert np.all((tid == -1) | (tid >= 400))


def test_flat_and_collinear_scenes():
    # All triangles in the plane z = 0.5; all boxes on one line (x axis).
    v, f = B.grid_mesh(15, 15, amplitude=0.0)
    v[:, 2] = 0.5
    bvh = build_bvh(v, f)
    check_tree(bvh, *tri_boxes(v, f), 4)
    o, d = rays_mixed(400, [0, 0, 0], [1, 1, 1], 1)
    check_hits(bvh, o, d, v, f)
    x = np.sort(np.random.default_rng(2).random(500)).astype(F32)
    lo = np.stack([x, np.zeros_like(x), np.zeros_like(x)], 1)
    bvh = build_bvh_from_bounds(lo, lo, max_leaf_size=3)
    check_tree(bvh, lo, lo, 3)


def test_exponentially_spaced_primitives_stay_shallow():
    # Binning along x puts all but the largest in the first bin, level after
    # level; the depth limit switches to median splits.
    k = 400
    x = np.float32(1.2) ** np.arange(k, dtype=F32)  # 1 ... ~1e31
    lo = np.stack([x, np.zeros(k, F32), np.zeros(k, F32)], 1).astype(F32)
    hi = lo + np.float32(1e-3) * lo
    bvh = build_bvh_from_bounds(lo, hi, max_leaf_size=2)
    check_tree(bvh, lo, hi, 2)
    assert bvh.depth() <= B.SAH_DEPTH_LIMIT + int(np.ceil(np.log2(k))) + 1


@pytest.mark.parametrize("scale", [1e-38, 1e-20, 1e20, 1e37])
def test_huge_and_tiny_coordinates(scale):
    v, f = soup(400, 0.1, 7)
    v = ((v - 0.5) * 2 * scale).astype(F32)
    if scale == 1e37:
        v = v * F32(8)  # close to the float32 limit: |x| up to ~1e38
    assert np.isfinite(v).all()
    bvh = build_bvh(v, f)
    check_tree(bvh, *tri_boxes(v, f), 4)
    assert np.isfinite(bvh.sah_cost())
    assert bvh.depth() < 40
    if scale >= 1e-20:
        o, d = rays_mixed(300, v.min(0), v.max(0), 3)
        check_hits(bvh, o, d, v, f)


def test_huge_range_mixed_with_subnormals():
    rng = np.random.default_rng(3)
    mags = F32(10.0) ** rng.integers(-44, 38, size=(600, 3)).astype(F32)
    pts = (mags * rng.choice([-1, 1], size=mags.shape)).astype(F32)
    assert np.isfinite(pts).all()
    v = np.concatenate([pts, pts * F32(0.5), pts * F32(0.25)])
    f = np.stack([np.arange(600), np.arange(600) + 600, np.arange(600) + 1200], 1).astype(np.int32)
    bvh = build_bvh(v, f, axis="all")
    check_tree(bvh, *tri_boxes(v, f), 4)


def test_duplicate_and_shared_vertices_mesh():
    v, f = B.sphere_mesh(10, 10)
    f = np.concatenate([f, f, f[::-1]])
    bvh = build_bvh(v, f, max_leaf_size=2)
    check_tree(bvh, *tri_boxes(v, f), 2)
    o, d = rays_mixed(300, v.min(0), v.max(0), 5)
    check_hits(bvh, o, d, v, f)


def test_generic_bounds_spheres():
    rng = np.random.default_rng(1)
    c = rng.random((3000, 3))
    r = rng.random((3000, 1)) * 0.01 + 1e-9
    lo, hi = c - r, c + r  # float64: rounded outwards to float32
    bvh = build_bvh_from_bounds(lo, hi, centroids=c, max_leaf_size=4)
    lo32 = lo.astype(F32)
    lo32 = np.where(lo32 > lo, np.nextafter(lo32, F32(-np.inf)), lo32)
    hi32 = hi.astype(F32)
    hi32 = np.where(hi32 < hi, np.nextafter(hi32, F32(np.inf)), hi32)
    check_tree(bvh, lo32, hi32, 4)
    leaf = bvh.node_links[:, 2] > 0
    owner = np.repeat(np.flatnonzero(leaf), bvh.node_links[leaf, 2])
    p = bvh.prim_index
    assert np.all(bvh.node_bounds[owner, :3].astype(np.float64) <= lo[p])
    assert np.all(bvh.node_bounds[owner, 3:].astype(np.float64) >= hi[p])
    # Default centroids: box centres.
    bvh2 = build_bvh_from_bounds(lo32, hi32)
    check_tree(bvh2, lo32, hi32, 4)


def test_input_types():
    v, f = B.sphere_mesh(6, 6)
    b1 = build_bvh(v, f)
    b2 = build_bvh(v.astype(np.float64).tolist(), f.astype(np.int64).tolist())
    b3 = build_bvh(v, f.astype(np.uint16))
    for b in (b2, b3):
        assert np.array_equal(b.node_bounds, b1.node_bounds)
        assert np.array_equal(b.node_links, b1.node_links)
        assert np.array_equal(b.prim_index, b1.prim_index)


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

def test_rejects_nan_and_inf_vertices():
    v, f = B.sphere_mesh(4, 4)
    for bad in (np.nan, np.inf, -np.inf):
        w = v.copy()
        w[7, 1] = bad
        with pytest.raises(ValueError, match=r"vertices\[7\]"):
            build_bvh(w, f)
    with pytest.raises(ValueError, match=r"vertices\[2\] overflows float32"):
        build_bvh(np.array([[0, 0, 0], [1, 0, 0], [1e300, 0, 0]]), [[0, 1, 2]])


def test_rejects_bad_faces():
    v, f = B.sphere_mesh(4, 4)
    g = f.copy()
    g[5, 2] = v.shape[0]
    with pytest.raises(ValueError, match=rf"faces\[5\].*vertex {v.shape[0]}"):
        build_bvh(v, g)
    g = f.copy()
    g[3, 0] = -1
    with pytest.raises(ValueError, match=r"faces\[3\].*-1"):
        build_bvh(v, g)
    with pytest.raises(ValueError, match="faces"):
        build_bvh(v, f.astype(np.float32))
    with pytest.raises(ValueError, match="faces"):
        build_bvh(v, f[:, :2])
    with pytest.raises(ValueError, match="vertices"):
        build_bvh(v[:, :2], f)


def test_rejects_bad_bounds_and_parameters():
    lo = np.zeros((5, 3))
    hi = np.ones((5, 3))
    h = hi.copy()
    h[2, 0] = -1
    with pytest.raises(ValueError, match=r"lo\[2\] > hi\[2\]"):
        build_bvh_from_bounds(lo, h)
    h = hi.copy()
    h[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"hi\[4\]"):
        build_bvh_from_bounds(lo, h)
    c = (lo + hi) / 2
    c[1, 1] = np.inf
    with pytest.raises(ValueError, match=r"centroids\[1\]"):
        build_bvh_from_bounds(lo, hi, c)
    with pytest.raises(ValueError, match="shape"):
        build_bvh_from_bounds(lo, hi[:4])
    v, f = B.sphere_mesh(4, 4)
    with pytest.raises(ValueError, match="max_leaf_size"):
        build_bvh(v, f, max_leaf_size=0)
    with pytest.raises(ValueError, match="bins"):
        build_bvh(v, f, bins=1)
    with pytest.raises(ValueError, match="axis"):
        build_bvh(v, f, axis="x")
    with pytest.raises(ValueError, match="child_order"):
        build_bvh(v, f, child_order="near")


def test_moderate_build_is_fast():
    # Smoke-level timing guard (the 1M benchmark lives in `python -m jaxrender.scene.bvh`).
    import time
    v, f = soup(100_000, 0.01, 0)
    t0 = time.perf_counter()
    bvh = build_bvh(v, f)
    dt = time.perf_counter() - t0
    assert bvh.prim_index.size == 100_000
    bvh.check(*tri_boxes(v, f), 4)
    assert dt < 10.0
