"""Ray queries against the scene's triangles through a stackless BVH.

The BVH (``jaxrender.scene.bvh``) is stored depth-first with skip links:
visiting node ``i``, a ray that hits its box continues at ``i + 1`` (the first
child) unless it is a leaf, and at ``skip[i]`` otherwise. No stack, so the
loop state is three scalars per ray, which suits SIMD packets and GPUs.
"""
from __future__ import annotations

from .. import ir
from ..ir import Vec

RAY_EPSILON = 1e-4
INF = float("inf")


class SceneGeometry:
    """Kernel-side handles of the geometry buffers."""

    def __init__(self, tris, bvh_bounds, bvh_links):
        self.tris = tris              # (N, 9): p0, p1, p2 per triangle, in BVH leaf order
        self.bounds = bvh_bounds      # (M, 6): box min, box max
        self.links = bvh_links        # (M, 3): skip, first triangle, triangle count (0: interior)

    def triangle(self, i) -> tuple[Vec, Vec, Vec]:
        c = [self.tris.read(i, k) for k in range(9)]
        return Vec(c[0], c[1], c[2]), Vec(c[3], c[4], c[5]), Vec(c[6], c[7], c[8])


def intersect_triangle(o: Vec, d: Vec, p0: Vec, p1: Vec, p2: Vec):
    """Moller-Trumbore: (t, b1, b2); t = inf when the ray misses."""
    e1 = p1 - p0
    e2 = p2 - p0
    pv = ir.cross(d, e2)
    det = ir.dot(e1, pv)
    inv_det = 1.0 / det
    tv = o - p0
    u = ir.dot(tv, pv) * inv_det
    qv = ir.cross(tv, e1)
    v = ir.dot(d, qv) * inv_det
    t = ir.dot(e2, qv) * inv_det
    ok = (det != 0.0) & (u >= 0.0) & (v >= 0.0) & (u + v <= 1.0)
    return ir.select(ok, t, INF), u, v


def _fmin(a, b):
    # One instruction (minps) where _box_entry needs no NaN handling.
    return ir.select(a < b, a, b)


def _fmax(a, b):
    return ir.select(a > b, a, b)


def _safe_inv(d: Vec) -> Vec:
    """1/d with components of magnitude below 1e-20 replaced by +-1e-20, so
    slab distances (lo - o) * inv_d are never 0 * inf = NaN: the box test
    then needs no NaN handling (it is most of the traversal's time)."""
    def inv(x):
        return 1.0 / ir.select(ir.abs(x) < 1e-20, ir.copysign(1e-20, x), x)
    return Vec(inv(d.x), inv(d.y), inv(d.z))


def _box_entry(o: Vec, inv_d: Vec, geo: SceneGeometry, node, t_max):
    """Whether the ray segment [0, t_max] meets node's box (slab test)."""
    lo = Vec(*(geo.bounds.read(node, k) for k in range(3)))
    hi = Vec(*(geo.bounds.read(node, k) for k in range(3, 6)))
    t0 = (lo - o) * inv_d
    t1 = (hi - o) * inv_d
    near = _fmax(_fmax(_fmin(t0.x, t1.x), _fmin(t0.y, t1.y)), _fmin(t0.z, t1.z))
    far = _fmin(_fmin(_fmax(t0.x, t1.x), _fmax(t0.y, t1.y)), _fmax(t0.z, t1.z))
    return _fmax(near, 0.0) <= _fmin(far * 1.0000004, t_max)


def closest_hit(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    """(t, triangle index in leaf order, b1, b2); t == inf and index -1 on a miss."""
    inv_d = _safe_inv(d)
    n_nodes = ir.cast(geo.bounds.len, "i32")

    def step(s):
        node, best_t, best_i, bu, bv = s
        hit_box = _box_entry(o, inv_d, geo, node, best_t)
        skip = geo.links.read(node, 0)
        first = geo.links.read(node, 1)
        count = geo.links.read(node, 2)
        is_leaf = count > 0

        def leaf():
            def tri(k, st):
                bt, bi, u0, v0 = st
                idx = first + k
                p0, p1, p2 = geo.triangle(idx)
                t, u, v = intersect_triangle(o, d, p0, p1, p2)
                closer = (t > t_min) & (t < bt)
                return (ir.select(closer, t, bt), ir.select(closer, idx, bi),
                        ir.select(closer, u, u0), ir.select(closer, v, v0))
            return ir.fori_loop(ir.Int(0), count, tri, (best_t, best_i, bu, bv))

        visit_leaf = hit_box & is_leaf
        best_t, best_i, bu, bv = ir.cond(visit_leaf, leaf, lambda: (best_t, best_i, bu, bv))
        nxt = ir.select(hit_box & ~is_leaf, node + 1, skip)
        return nxt, best_t, best_i, bu, bv

    _, t, idx, u, v = ir.while_loop(lambda s: s[0] < n_nodes, step,
                                    (ir.Int(0), ir.Float(t_max) if not isinstance(t_max, ir.Var) else t_max,
                                     ir.Int(-1), ir.Float(0.0), ir.Float(0.0)))
    return t, idx, u, v


def occluded(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    """Whether anything lies on the ray between t_min and t_max (stops at the first hit)."""
    inv_d = _safe_inv(d)
    n_nodes = ir.cast(geo.bounds.len, "i32")

    def step(s):
        node, _ = s
        hit_box = _box_entry(o, inv_d, geo, node, t_max)
        skip = geo.links.read(node, 0)
        first = geo.links.read(node, 1)
        count = geo.links.read(node, 2)
        is_leaf = count > 0

        def leaf():
            def tri(st):
                k, found = st
                p0, p1, p2 = geo.triangle(first + k)
                t, _, _ = intersect_triangle(o, d, p0, p1, p2)
                return k + 1, (t > t_min) & (t < t_max)
            return ir.while_loop(lambda st: (st[0] < count) & ~st[1], tri, (ir.Int(0), ir.Bool(False)))[1]

        found = ir.cond(hit_box & is_leaf, leaf, lambda: ir.Bool(False))
        nxt = ir.select(found, n_nodes, ir.select(hit_box & ~is_leaf, node + 1, skip))
        return nxt, found

    return ir.while_loop(lambda s: s[0] < n_nodes, step, (ir.Int(0), ir.Bool(False)))[1]
