"""Ray queries against the scene's primitives through a stackless BVH.

The BVH (``jaxrender.scene.bvh``) is stored depth-first with skip links:
visiting node ``i``, a ray that hits its box continues at ``i + 1`` (the first
child) unless it is a leaf, and at ``skip[i]`` otherwise. No stack, so the
loop state is three scalars per ray, which suits SIMD packets and GPUs.

Primitives are triangles and, in scenes that have them, Mitsuba's analytic
spheres and disks. Every primitive has a row of ``tris`` (an analytic one's is
unused); with analytic shapes ``prim_shape`` says, per leaf entry, -1 for a
triangle or the row of ``shape_data`` (``jaxrender.scene.shapes.AnalyticShape
.row``) of the shape, and the leaf loop branches on it. A scene without them
passes no ``prim_shape`` and gets the triangle-only loop.
"""
from __future__ import annotations

from .. import ir
from ..ir import Vec
from . import layout, shapes
from .shapes import triangle

RAY_EPSILON = 1e-4
INF = float("inf")




class SceneGeometry:
    """Kernel-side handles of the geometry buffers; ``prim_shape`` and
    ``shape_data`` only for scenes with analytic shapes."""

    def __init__(self, tris, bvh_bounds, bvh_links, prim_shape=None, shape_data=None, wide=None):
        self.tris = tris              # (N, 9): p0, p1, p2 per triangle, in BVH leaf order
        self.bounds = bvh_bounds      # (M, 6): box min, box max
        self.links = bvh_links        # (M, 3): skip, first primitive, primitive count (0: interior)
        self.prim_shape = prim_shape  # (N,): -1 (triangle) or analytic shape index
        self.shape_data = shape_data  # (S, SHAPE_ROW)
        self.analytic = prim_shape is not None
        # Triangle-only scenes: the 8-wide BVH's buffers (nodes, leaves;
        # ir.bvh_query), queried by the builtin traversal instead of the
        # skip links.
        self.wide = wide

    def triangle(self, i) -> tuple[Vec, Vec, Vec]:
        return triangle.vertices(self.tris, i)

    def shape_value(self, s, k):
        return self.shape_data.read(s, k)

    def shape_kind(self, s):
        return ir.cast(self.shape_value(s, layout.SHAPE_KIND), "i32")

    def center(self, s) -> Vec:
        return Vec(*(self.shape_value(s, layout.SHAPE_TO_WORLD + 4 * k + 3) for k in range(3)))

    def to_object(self, s, p: Vec) -> Vec:
        """Object-space coordinates of the world point ``p``."""
        m = [self.shape_value(s, layout.SHAPE_TO_OBJECT + k) for k in range(12)]
        return Vec(*(m[4 * k] * p.x + m[4 * k + 1] * p.y + m[4 * k + 2] * p.z + m[4 * k + 3] for k in range(3)))

    def to_object_dir(self, s, d: Vec) -> Vec:
        m = [self.shape_value(s, layout.SHAPE_TO_OBJECT + k) for k in range(12)]
        return Vec(*(m[4 * k] * d.x + m[4 * k + 1] * d.y + m[4 * k + 2] * d.z for k in range(3)))

    def to_world_dir(self, s, v: Vec) -> Vec:
        """World vector of the object-space vector ``v``."""
        m = [self.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
        return Vec(*(m[4 * k] * v.x + m[4 * k + 1] * v.y + m[4 * k + 2] * v.z for k in range(3)))

    def to_world(self, s, x, y) -> Vec:
        """World point of the object-space point (x, y, 0)."""
        m = [self.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
        return Vec(*(m[4 * k] * x + m[4 * k + 1] * y + m[4 * k + 3] for k in range(3)))


def intersect_primitive(geo: SceneGeometry, idx, o: Vec, d: Vec, t_min):
    """(t, b1, b2) of leaf entry ``idx``: a triangle, or an analytic shape
    (then b1 = b2 = 0) where the scene has them."""
    if not geo.analytic:
        return triangle.intersect(o, d, *geo.triangle(idx))
    s = geo.prim_shape[idx]
    return ir.cond(s < 0, lambda: triangle.intersect(o, d, *geo.triangle(idx)),
                   lambda: (shapes.intersect(geo, s, o, d, t_min), ir.Float(0.0), ir.Float(0.0)))


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
    """(t, primitive index in leaf order, b1, b2); t == inf and index -1 on a
    miss. b1, b2: a triangle's barycentrics (0 for an analytic shape)."""
    inv_d = _safe_inv(d)
    if geo.wide is not None:
        return ir.bvh_query.closest_hit(geo.wide, o, d, inv_d, t_min, t_max)
    n_nodes = ir.cast(geo.bounds.len, "i32")

    def step(s):
        node, best_t, best_i, bu, bv = s
        hit_box = _box_entry(o, inv_d, geo, node, best_t)
        skip = geo.links.read(node, layout.LINK_SKIP)
        first = geo.links.read(node, layout.LINK_FIRST)
        count = geo.links.read(node, layout.LINK_COUNT)
        is_leaf = count > 0

        def leaf():
            def tri(k, st):
                bt, bi, u0, v0 = st
                idx = first + k
                t, u, v = intersect_primitive(geo, idx, o, d, t_min)
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
    if geo.wide is not None:
        return ir.bvh_query.any_hit(geo.wide, o, d, inv_d, t_min, t_max)
    n_nodes = ir.cast(geo.bounds.len, "i32")

    def step(s):
        node, _ = s
        hit_box = _box_entry(o, inv_d, geo, node, t_max)
        skip = geo.links.read(node, layout.LINK_SKIP)
        first = geo.links.read(node, layout.LINK_FIRST)
        count = geo.links.read(node, layout.LINK_COUNT)
        is_leaf = count > 0

        def leaf():
            def tri(st):
                k, found = st
                t, _, _ = intersect_primitive(geo, first + k, o, d, t_min)
                return k + 1, (t > t_min) & (t < t_max)
            return ir.while_loop(lambda st: (st[0] < count) & ~st[1], tri, (ir.Int(0), ir.Bool(False)))[1]

        found = ir.cond(hit_box & is_leaf, leaf, lambda: ir.Bool(False))
        nxt = ir.select(found, n_nodes, ir.select(hit_box & ~is_leaf, node + 1, skip))
        return nxt, found

    return ir.while_loop(lambda s: s[0] < n_nodes, step, (ir.Int(0), ir.Bool(False)))[1]
