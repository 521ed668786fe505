"""8-wide BVH (jaxrender.scene.wide_bvh): layout invariants, the collapse's
cost against an exhaustive search (tiny trees) and a memoized recursion,
closest hits of the reference traversal against the binary BVH and brute
force, degenerate inputs, and check() rejecting corrupted trees."""
from __future__ import annotations

import time

import numpy as np
import pytest

from jaxrender.scene import bvh as B
from jaxrender.scene import wide_bvh as W
from jaxrender.scene.wide_bvh import WideBVH, build_wide_bvh, exact_stack_need, leaf_order_tris

F32 = np.float32


def wide_of(v, f, **kw):
    b = B.build_bvh(v, f, **kw)
    tris = leaf_order_tris(b, v, f)
    return b, tris, build_wide_bvh(b, tris)


def brute_force(tris, o, d, t_min=0.0, t_max=np.inf):
    """Closest hit over all rows with the same (p0, e1, e2) Moller-Trumbore."""
    t = tris.reshape(-1, 3, 3).astype(F32)
    p0, e1, e2 = t[:, 0], t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]
    best_t = np.full(len(o), np.inf, F32)
    best_r = np.full(len(o), -1, np.int64)
    with np.errstate(all="ignore"):
        for s in range(0, len(o), 16):
            oo, dd = o[s:s + 16, None, :], d[s:s + 16, None, :]
            pv = np.cross(dd, e2)
            det = (e1 * pv).sum(-1, dtype=F32)
            inv = F32(1) / det
            tv = oo - p0
            u = (tv * pv).sum(-1, dtype=F32) * inv
            qv = np.cross(tv, e1)
            v = (dd * qv).sum(-1, dtype=F32) * inv
            tt = (e2 * qv).sum(-1, dtype=F32) * inv
            ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (tt > t_min) & (tt < t_max)
            tt = np.where(ok, tt, np.inf)
            best_t[s:s + 16] = tt.min(1)
            best_r[s:s + 16] = np.where(np.isfinite(tt.min(1)), tt.argmin(1), -1)
    return best_t, best_r


def rays(tris, n, seed=0):
    """Half the rays aimed at random triangles' centroids (mostly hits), half
    random through the scene's box (mixed), all from outside-ish origins."""
    rng = np.random.default_rng(seed)
    pts = tris.reshape(-1, 3)
    lo, hi = pts.min(0), pts.max(0)
    c, ext = (lo + hi) / 2, np.maximum(hi - lo, 1e-3)
    o = c + ext * (rng.random((n, 3)) * 3 - 1.5)
    m = n // 2
    tgt = np.empty((n, 3))
    rows = rng.integers(0, len(tris), m)
    tgt[:m] = tris[rows].reshape(m, 3, 3).mean(1)
    tgt[m:] = lo + ext * rng.random((n - m, 3))
    d = tgt - o
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return o.astype(F32), d.astype(F32)


def assert_hits_agree(w, b, tris, o, d):
    t, row, b1, b2 = w.traverse_numpy(o, d)
    assert t.dtype == F32 and row.dtype == np.int32
    bt, br = brute_force(tris, o, d)
    np.testing.assert_array_equal(np.isfinite(t), np.isfinite(bt))
    h = np.isfinite(t)
    assert np.all((row[h] == br[h]) | np.isclose(t[h], bt[h], rtol=1e-5, atol=0))
    assert np.all(row[~h] == -1)
    assert np.all((b1[h] >= 0) & (b2[h] >= 0) & (b1[h] + b2[h] <= 1))
    # Binary BVH (ids are original triangle ids: row i is prim_index[i]).
    vt = tris.reshape(-1, 3, 3)[np.argsort(b.prim_index)]
    tt, tid = b.traverse_numpy(o, d, vt)
    np.testing.assert_array_equal(np.isfinite(t), np.isfinite(tt))
    same = np.where(h, b.prim_index[np.maximum(row, 0)] == tid, True)
    assert np.all(same | np.isclose(t, tt, rtol=1e-5, atol=0))
    return h.mean()


def assert_rows_once(w, n):
    lp = w.leaf_prims
    assert np.array_equal(np.sort(lp[lp >= 0]), np.arange(n))
    # Blocks in binary leaf order: row-major lanes list the rows in order.
    assert np.array_equal(lp[lp >= 0], np.arange(n))


# ---------------------------------------------------------------------------
# The collapse is the cheapest: against exhaustive search and a recursion
# ---------------------------------------------------------------------------

def half_area(lo, hi):
    e = np.maximum(np.asarray(hi, np.float64) - lo, 0.0)
    return float(e[0] * e[1] + e[1] * e[2] + e[2] * e[0])


def tree_cost(w):
    """The expected cost of a wide BVH, read from its own arrays: each wide
    node's test (1) and each block's (BLOCK_COST + BLOCK_TRIANGLE_COST per
    triangle), times its box's half area (a wide node's box: its slots')."""
    lo = w.bounds[:, :24].reshape(-1, 3, 8)
    hi = w.bounds[:, 24:].reshape(-1, 3, 8)
    total = 0.0
    for n in range(w.num_nodes):
        used = lo[n, 0] <= hi[n, 0]
        total += half_area(lo[n][:, used].min(1), hi[n][:, used].max(1))
        for k in np.flatnonzero(used & (w.children[n] < 0)):
            count = int((w.leaf_prims[~w.children[n, k]] >= 0).sum())
            total += (W.BLOCK_COST + W.BLOCK_TRIANGLE_COST * count) * half_area(lo[n, :, k], hi[n, :, k])
    return total


class BinaryTree:
    def __init__(self, b):
        self.links, self.bounds = b.node_links, b.node_bounds

    def leaf(self, n):
        return self.links[n, 2] > 0

    def kids(self, n):
        return n + 1, int(self.links[n + 1, 0])

    def prims(self, n):
        return int(self.links[n, 2]) if self.leaf(n) else sum(self.prims(c) for c in self.kids(n))

    def area(self, n):
        return half_area(self.bounds[n, :3], self.bounds[n, 3:])


def exhaustive_cost(b):
    """The least cost over every wide BVH of the binary tree, by listing
    each wide node's every choice of slots (cuts of its subtree into at
    most 8 subtrees) and each slot's as a block or a wide node."""
    t = BinaryTree(b)

    def cuts(n):            # every cut of n's subtree, as lists of subtrees
        out = [[n]]
        if not t.leaf(n):
            a, c = t.kids(n)
            out += [x + y for x in cuts(a) for y in cuts(c) if len(x) + len(y) <= 8]
        return out

    def as_block(n):
        return (W.BLOCK_COST + W.BLOCK_TRIANGLE_COST * t.prims(n)) * t.area(n) if t.prims(n) <= 4 else np.inf

    def as_node(n):
        if t.leaf(n):
            return np.inf
        a, c = t.kids(n)
        return t.area(n) + min(sum(min(as_block(m), as_node(m)) for m in x + y)
                               for x in cuts(a) for y in cuts(c) if len(x) + len(y) <= 8)

    # (a tiny tree's root block sits in a wide node of its own)
    return min(as_block(0) + t.area(0), as_node(0))


def recursive_cost(b):
    """The same least cost by the recursion on slot counts the collapse
    runs level by level, here per node and memoized."""
    import functools
    t = BinaryTree(b)

    @functools.lru_cache(maxsize=None)
    def in_slots(n, i):
        best = as_slot(n)
        if i > 1 and not t.leaf(n):
            a, c = t.kids(n)
            best = min(best, min(in_slots(a, k) + in_slots(c, i - k) for k in range(1, i)))
        return best

    def as_block(n):
        return (W.BLOCK_COST + W.BLOCK_TRIANGLE_COST * t.prims(n)) * t.area(n) if t.prims(n) <= 4 else np.inf

    @functools.lru_cache(maxsize=None)
    def as_node(n):
        if t.leaf(n):
            return np.inf
        a, c = t.kids(n)
        return t.area(n) + min(in_slots(a, k) + in_slots(c, 8 - k) for k in range(1, 8))

    def as_slot(n):
        return min(as_block(n), as_node(n))

    return min(as_block(0) + t.area(0), as_node(0))


@pytest.mark.parametrize("n,size,seed", [(2, 0.02, 0), (4, 0.02, 1), (3, 0.3, 0), (6, 0.3, 1), (9, 0.3, 2),
                                         (12, 0.3, 3)])
def test_collapse_is_cheapest_of_all(n, size, seed):
    """(Two or four small triangles far apart: the root is a wide node of
    blocks, not a block, which would cost the root's test as well.)"""
    v, f = B.random_soup(n, size=size, seed=seed)
    b, tris, w = wide_of(v, f, max_leaf_size=1)
    w.check(n_tris=n, tris=tris)
    assert tree_cost(w) == pytest.approx(exhaustive_cost(b), rel=1e-9)


@pytest.mark.parametrize("leaf", [1, 4])
def test_collapse_reaches_the_least_cost(leaf):
    v, f = B.random_soup(3000, size=0.05, seed=3)
    b, tris, w = wide_of(v, f, max_leaf_size=leaf)
    w.check(n_tris=3000, tris=tris)
    assert tree_cost(w) == pytest.approx(recursive_cost(b), rel=1e-9)


def test_cornell_box_walls_and_light_are_blocks_of_their_own():
    """The Cornell box's 36 triangles: two wide levels, each wall, the
    light and each face of the boxes a block (faces at right angles
    share no box)."""
    import jaxrender
    scene = jaxrender.load_dict(jaxrender.cornell_box())
    nodes, leaves = scene.wide_bvh
    children = nodes[:, 48:]
    assert len(nodes) == 3 and np.all(children[1:] < 0)
    rows = leaves[:, 36:]
    assert len(rows) > 16 and (rows >= 0).sum(1).max() <= 2


# ---------------------------------------------------------------------------
# Scenes
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n,size,seed", [(200, 0.1, 0), (2000, 0.02, 1), (5000, 0.2, 2)])
def test_random_soup(n, size, seed):
    v, f = B.random_soup(n, size=size, seed=seed)
    b, tris, w = wide_of(v, f)
    w.check(n_tris=n, tris=tris)
    assert_rows_once(w, n)
    assert 1 <= w.depth <= b.depth()
    assert w.stack_need <= w.depth * 7 + 1
    o, d = rays(tris, 300, seed)
    assert assert_hits_agree(w, b, tris, o, d) > 0.3


def test_100k_mesh():
    v, f = B.sphere_mesh(200, 250)
    assert len(f) == 100_000
    b, tris, w = wide_of(v, f, axis="largest")
    w.check(n_tris=len(f), tris=tris)
    assert_rows_once(w, len(f))
    # Filled slots come first, each node has >= 2 children (root not a leaf).
    used = np.isfinite(w.bounds[:, :8])
    assert np.all(used.sum(1) >= 2) and np.all(np.diff(used.astype(int), axis=1) <= 0)
    assert w.stack_need == exact_stack_need(w.children, w.bounds)
    o, d = rays(tris, 300, 5)
    assert assert_hits_agree(w, b, tris, o, d) > 0.5


def test_grid_mesh_rays_from_above():
    v, f = B.grid_mesh(40, 40)
    b, tris, w = wide_of(v, f)
    w.check(n_tris=len(f), tris=tris)
    rng = np.random.default_rng(0)
    o = np.c_[rng.random((200, 2)), np.full(200, 2.0)].astype(F32)
    d = np.tile(F32([0, 0, -1]), (200, 1))
    assert assert_hits_agree(w, b, tris, o, d) == 1.0
    # t_min / t_max clip: nothing in front of t = 1 (the surface is at ~2).
    t, row, _, _ = w.traverse_numpy(o, d, 0.0, 1.0)
    assert np.all(row == -1) and np.all(t == np.inf)
    t2, _, _, _ = w.traverse_numpy(o, d, 0.0, np.inf)
    t3, row3, _, _ = w.traverse_numpy(o, d, t2 * F32(1.0001), np.inf)
    assert np.all(row3 == -1)  # single-layer height field: nothing behind the hit


def test_single_triangle():
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32)
    f = np.array([[0, 1, 2]])
    b, tris, w = wide_of(v, f)
    w.check(n_tris=1, tris=tris)
    assert w.num_nodes == 1 and w.num_blocks == 1 and w.depth == 1 and w.stack_need == 1
    assert w.children[0].tolist() == [-1] * 8
    assert w.leaf_prims.tolist() == [[0, -1, -1, -1]]
    q = w.leaf_tris.reshape(9, 4)
    assert np.all(q[:, 1:].view(np.uint32) == 0)  # +0.0, not -0.0
    assert q[:, 0].tolist() == [0, 0, 0, 1, 0, 0, 0, 1, 0]
    t, row, b1, b2 = w.traverse_numpy([[0.25, 0.5, 1.0], [0.8, 0.8, 1.0]], [[0, 0, -1], [0, 0, -1]])
    assert t.tolist() == [1.0, np.inf] and row.tolist() == [0, -1]
    assert (b1[0], b2[0]) == (F32(0.25), F32(0.5))


def test_five_triangles_root_is_leaf_or_small():
    v, f = B.random_soup(5, size=0.3, seed=7)
    # A huge traversal cost forces the binary root to be a leaf... which
    # max_leaf_size=4 forbids for 5 prims, so take 4 for the leaf-root case.
    b = B.build_bvh(v, f[:4], c_trav=1e6)
    assert b.num_nodes == 1
    tris = leaf_order_tris(b, v, f[:4])
    w = build_wide_bvh(b, tris)
    w.check(n_tris=4, tris=tris)
    assert w.num_nodes == 1 and w.depth == 1 and w.children[0].tolist() == [-1] * 8
    assert np.isfinite(w.bounds[0, 0::8]).all() and np.all(w.bounds[0, 24:].reshape(3, 8)[:, 1:] == -np.inf)
    o, d = rays(tris, 100, 1)
    assert_hits_agree(w, b, tris, o, d)
    # Five triangles: tiny tree, still all checks.
    b, tris, w = wide_of(v, f)
    w.check(n_tris=5, tris=tris)
    assert_rows_once(w, 5)
    o, d = rays(tris, 100, 2)
    assert_hits_agree(w, b, tris, o, d)


def test_empty():
    b = B.build_bvh(np.zeros((0, 3), F32), np.zeros((0, 3), np.int32))
    w = build_wide_bvh(b, np.zeros((0, 9), F32))
    assert w.bounds.shape == (0, 48) and w.children.shape == (0, 8)
    assert w.leaf_tris.shape == (0, 36) and w.leaf_prims.shape == (0, 4)
    assert (w.depth, w.stack_need) == (0, 0)
    w.check(n_tris=0)
    t, row, b1, b2 = w.traverse_numpy(np.zeros((3, 3)), np.ones((3, 3)))
    assert np.all(t == np.inf) and np.all(row == -1)


def test_rejects_big_leaves_and_bad_tris():
    v, f = B.random_soup(100, seed=1)
    b = B.build_bvh(v, f, max_leaf_size=16, c_trav=100.0)
    assert b.node_links[:, 2].max() > 4
    with pytest.raises(ValueError, match="max_leaf_size=4"):
        build_wide_bvh(b, leaf_order_tris(b, v, f))
    b = B.build_bvh(v, f)
    with pytest.raises(ValueError, match="rows"):
        build_wide_bvh(b, leaf_order_tris(b, v, f)[:-1])


# ---------------------------------------------------------------------------
# check() on corrupted trees
# ---------------------------------------------------------------------------

def _copy(w):
    return WideBVH(w.bounds.copy(), w.children.copy(), w.leaf_tris.copy(), w.leaf_prims.copy(), w.depth, w.stack_need)


def _first(mask):
    return tuple(np.argwhere(mask)[0])


def _c_oob(w): w.children[_first(w.children >= 1)] = w.num_nodes
def _c_cycle(w): w.children[_first(w.children >= 1)] = 0
def _c_backwards(w): n, k = _first(w.children[1:] >= 0); w.children[n + 1, k] = 1
def _c_dup_node(w): n, k = _first(w.children >= 1); w.children[n, k] = w.children[n, k] + 1
def _c_block_oob(w): w.children[_first(w.children <= -2)] = -w.num_blocks - 1
def _c_block_twice(w): n, k = _first(w.children <= -3); w.children[n, k] = -2
def _c_empty_slot_child(w): w.children[_first(~np.isfinite(w.bounds[:, :8]))] = 1
def _c_prim_oob(w): w.leaf_prims[0, 0] = w.leaf_prims.max() + 1
def _c_prim_dup(w): w.leaf_prims[1, 0] = w.leaf_prims[0, 0]
def _c_prim_neg(w): w.leaf_prims[0, 0] = -5
def _c_pad_nonzero(w): b, j = _first(w.leaf_prims < 0); w.leaf_tris.reshape(-1, 9, 4)[b, 3, j] = 1.0
def _c_shrink_box(w): w.bounds[0, 24] = w.bounds[0, 0] - 1.0
def _c_neg_zero_pad(w): b, j = _first(w.leaf_prims < 0); w.leaf_tris.reshape(-1, 9, 4)[b, 0, j] = -0.0


def _c_shrink_parent(w):
    k = int(np.flatnonzero(w.children[0] >= 1)[0])
    w.bounds[0, 24 + k] = (w.bounds[0, k] + w.bounds[0, 24 + k]) / 2


def _c_shrink_tri(w): w.leaf_tris.reshape(-1, 9, 4)[0, 0, 0] += 10.0
def _c_nan(w): w.bounds[0, 0] = np.nan
def _c_stack(w): w.stack_need = exact_stack_need(w.children, w.bounds) - 1
def _c_depth(w): w.depth += 1
def _c_dtype(w): w.children = w.children.astype(np.int64)


CORRUPTIONS = [_c_oob, _c_cycle, _c_backwards, _c_dup_node, _c_block_oob, _c_block_twice, _c_empty_slot_child,
               _c_prim_oob, _c_prim_dup, _c_prim_neg, _c_pad_nonzero, _c_neg_zero_pad, _c_shrink_parent,
               _c_shrink_box, _c_shrink_tri, _c_nan, _c_stack, _c_depth, _c_dtype]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[c.__name__[3:] for c in CORRUPTIONS])
def test_check_rejects_corruption(corrupt, soup_wide):
    _, tris, w = soup_wide
    w.check(n_tris=len(tris), tris=tris)
    bad = _copy(w)
    corrupt(bad)
    with pytest.raises(ValueError, match="invalid WideBVH"):
        bad.check()


def test_check_rejects_wrong_tris(soup_wide):
    _, tris, w = soup_wide
    with pytest.raises(ValueError, match="n_tris"):
        w.check(n_tris=len(tris) + 1)
    t2 = tris.copy()
    t2[3, 4] += 1e-3
    with pytest.raises(ValueError, match="does not hold"):
        w.check(tris=t2)


@pytest.fixture(scope="module")
def soup_wide():
    v, f = B.random_soup(3000, size=0.05, seed=11)
    return wide_of(v, f)


# ---------------------------------------------------------------------------
# Speed
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_convert_1m_triangles_fast():
    v, f = B.sphere_mesh(500, 1000)
    b = B.build_bvh(v, f, axis="largest")  # the binary build is not what is timed
    tris = leaf_order_tris(b, v, f)
    t0 = time.perf_counter()
    w = build_wide_bvh(b, tris)
    dt = time.perf_counter() - t0
    print(f"1M-triangle conversion: {dt:.3f} s, W={w.num_nodes}, depth={w.depth}, stack_need={w.stack_need}")
    assert dt < 5.0
    w.check(n_tris=len(f))
