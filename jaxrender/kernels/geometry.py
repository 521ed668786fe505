"""Ray queries against the scene's primitives.

Triangles are in an 8-wide BVH that the engine's traversal routine walks
(``ir.bvh_query``, ``jaxrender.scene.wide_bvh``). Mitsuba's analytic
shapes (spheres, disks, cylinders), in scenes that have them, are in a
binary BVH of their own (with the triangles where there are at most
``scene.geometry.SKIP_LINK_TRIANGLES``: then one walk is cheaper than
two), stored depth-first with skip links (``jaxrender.scene.bvh``):
visiting node ``i``, a ray that hits its box continues at ``i + 1`` (the
first child) unless it is a leaf, and at ``skip[i]`` otherwise, so the
loop state is three scalars per ray. A query walks it first, then the
triangles' query up to the nearest shape hit: a scene with one sphere
among its triangles pays for a walk over one box, not for walking every
triangle through skip links. Where it holds few rows
(``ALL_ROWS_AT_MOST``), a query tests each of them instead, every lane of
a packet the same row at a time.

Every primitive has a row of ``tris`` (an analytic one's is unused; the
shapes' rows follow the triangles'), and ``prim_shape`` says, per row, -1
for a triangle or the row of ``shape_data`` (``jaxrender.scene.shapes
.AnalyticShape.row``) of the shape; the skip-link BVH's leaves name rows.
A scene without analytic shapes passes no ``prim_shape``.

In scenes whose instances share shapegroups (``Instances``,
``jaxrender.scene.instancing``), a query then walks the skip-link BVH over
the instances and queries each reached group's own hierarchy with the ray
in group space; a hit reports the instance's row.
"""
from __future__ import annotations

from .. import ir
from ..ir import Vec
from . import layout, shapes
from .shapes import triangle

RAY_EPSILON = 1e-4
INF = float("inf")




class SceneGeometry:
    """Kernel-side handles of the geometry buffers; ``bvh_bounds`` /
    ``bvh_links`` (the shapes' skip-link BVH), ``prim_shape`` and
    ``shape_data`` only for scenes with analytic shapes."""

    def __init__(self, tris, bvh_bounds, bvh_links, prim_shape=None, shape_data=None, wide=None, instances=None,
                 kinds: tuple | None = None):
        self.tris = tris              # (N, 9): p0, p1, p2 per triangle, in BVH leaf order
        self.bounds = bvh_bounds      # analytic shapes' BVH (M, 6): box min, box max
        self.links = bvh_links        # (M, 3): skip, first row, row count (0: interior)
        self.prim_shape = prim_shape  # (N,): -1 (triangle) or analytic shape index
        self.shape_data = shape_data  # (S, SHAPE_ROW)
        self.analytic = prim_shape is not None
        # The analytic kinds the scene has (``shapes.ANALYTIC`` ids, sorted;
        # None: all): code for the others is not traced, one kind is a constant.
        every = tuple(range(len(shapes.ANALYTIC)))
        self.kinds = (every if kinds is None else tuple(kinds)) if self.analytic else ()
        # The triangles' 8-wide BVH (nodes, leaves; ir.bvh_query), queried by
        # the engine's traversal routine.
        self.wide = wide
        self.instances = instances    # Instances, in scenes that share shapegroups

    def triangle(self, i) -> tuple[Vec, Vec, Vec]:
        return triangle.vertices(self.tris, i)

    def shape_value(self, s, k):
        return self.shape_data.read(s, k)

    def shape_kind(self, s):
        if len(self.kinds) == 1:
            return ir.Int(self.kinds[0])
        return ir.cast(self.shape_value(s, layout.SHAPE_KIND), "i32")

    def center(self, s) -> Vec:
        return Vec(*(self.shape_value(s, layout.SHAPE_TO_WORLD + 4 * k + 3) for k in range(3)))

    def _shape_matrix(self, s, start):
        return [self.shape_value(s, start + k) for k in range(12)]

    def to_object(self, s, p: Vec) -> Vec:
        """Object-space coordinates of the world point ``p``."""
        return _affine(self._shape_matrix(s, layout.SHAPE_TO_OBJECT), p, point=True)

    def to_object_dir(self, s, d: Vec) -> Vec:
        return _affine(self._shape_matrix(s, layout.SHAPE_TO_OBJECT), d, point=False)

    def to_world_dir(self, s, v: Vec) -> Vec:
        """World vector of the object-space vector ``v``."""
        return _affine(self._shape_matrix(s, layout.SHAPE_TO_WORLD), v, point=False)

    def to_world_point(self, s, p: Vec) -> Vec:
        """World point of the object-space point ``p``."""
        return _affine(self._shape_matrix(s, layout.SHAPE_TO_WORLD), p, point=True)

    def to_world(self, s, x, y) -> Vec:
        """World point of the object-space point (x, y, 0)."""
        m = [self.shape_value(s, layout.SHAPE_TO_WORLD + k) for k in range(12)]
        return Vec(*(m[4 * k] * x + m[4 * k + 1] * y + m[4 * k + 3] for k in range(3)))


class Instances:
    """Kernel-side handles of the instance tables (``layout.instance_inputs``,
    ``jaxrender.scene.instancing``): the shapegroups' concatenated 8-wide
    BVHs, the group table, per instance its transforms and group, and the
    skip-link BVH over the instances' world boxes."""

    def __init__(self, b: dict):
        self.hierarchies = (b["group_nodes"], b["group_leaves"])
        self.groups = b["groups"]
        self.transforms = b["instances"]
        self.group_of = b["instance_group"]
        self.bounds = b["instance_bounds"]
        self.links = b["instance_links"]

    def _matrix(self, i, start):
        return [self.transforms.read(i, start + k) for k in range(12)]

    def to_group(self, i, p: Vec) -> Vec:
        return _affine(self._matrix(i, layout.INSTANCE_TO_GROUP), p, point=True)

    def to_group_dir(self, i, v: Vec) -> Vec:
        return _affine(self._matrix(i, layout.INSTANCE_TO_GROUP), v, point=False)

    def to_world(self, i, p: Vec) -> Vec:
        return _affine(self._matrix(i, layout.INSTANCE_TO_WORLD), p, point=True)

    def placed(self, i, p: Vec) -> Vec:
        """The point ``p`` placed by instance ``i``'s to_world where ``i``
        >= 0 (a shapegroup's point in group space), else ``p`` itself."""
        w = self.to_world(ir.maximum(i, 0), p)
        return Vec(*(ir.select(i >= 0, a, c) for a, c in zip(w, p)))

    def to_world_dir(self, i, v: Vec) -> Vec:
        return _affine(self._matrix(i, layout.INSTANCE_TO_WORLD), v, point=False)

    def normal_to_world(self, i, n: Vec) -> Vec:
        """A group-space normal in world space (by the inverse transpose of
        to_world, i.e. the transpose of world-to-group), normalised."""
        m = self._matrix(i, layout.INSTANCE_TO_GROUP)
        return ir.normalize(Vec(*(m[c] * n.x + m[4 + c] * n.y + m[8 + c] * n.z for c in range(3))))

    def group_range(self, i):
        """((node start, node count, block start, block count), first primitive row) of instance i's group."""
        g = self.group_of[i]
        row = [self.groups.read(g, k) for k in range(layout.GROUP_ROW)]
        return tuple(row[:layout.GROUP_FIRST_ROW]), row[layout.GROUP_FIRST_ROW]


def _affine(m, v: Vec, point: bool):
    """The 3 x 4 row-major ``m`` applied to the point or vector ``v``."""
    rows = [m[4 * k] * v.x + m[4 * k + 1] * v.y + m[4 * k + 2] * v.z for k in range(3)]
    return Vec(*(r + m[4 * k + 3] for k, r in enumerate(rows))) if point else Vec(*rows)


def _intersect_row(geo: SceneGeometry, row, o: Vec, d: Vec, t_min):
    """(t, b1, b2) of a row of the skip-link BVH: an analytic shape (b1 = b2
    = 0) or, in scenes of few triangles, a triangle."""
    s = geo.prim_shape[row]
    return ir.cond(s < 0, lambda: triangle.intersect(o, d, *geo.triangle(row)),
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


def _box_entry(o: Vec, inv_d: Vec, bounds, node, t_max):
    """Whether the ray segment [0, t_max] meets node's box (slab test)."""
    lo = Vec(*(bounds.read(node, k) for k in range(3)))
    hi = Vec(*(bounds.read(node, k) for k in range(3, 6)))
    t0 = (lo - o) * inv_d
    t1 = (hi - o) * inv_d
    near = _fmax(_fmax(_fmin(t0.x, t1.x), _fmin(t0.y, t1.y)), _fmin(t0.z, t1.z))
    far = _fmin(_fmin(_fmax(t0.x, t1.x), _fmax(t0.y, t1.y)), _fmax(t0.z, t1.z))
    return _fmax(near, 0.0) <= _fmin(far * 1.0000004, t_max)


def _walk_nearest(bounds, links, o: Vec, inv_d: Vec, best: tuple, test) -> tuple:
    """Walk a skip-link BVH keeping the nearest hit: ``best`` is the state
    (its first value the nearest t so far), ``test(entry, best)`` the state
    after testing leaf entry ``entry``. Boxes beyond the nearest t are skipped."""
    n_nodes = ir.cast(bounds.len, "i32")

    def step(s):
        node, best = s[0], s[1:]
        hit_box = _box_entry(o, inv_d, bounds, node, best[0])
        skip = links.read(node, layout.LINK_SKIP)
        first = links.read(node, layout.LINK_FIRST)
        count = links.read(node, layout.LINK_COUNT)
        is_leaf = count > 0

        def leaf():
            return ir.fori_loop(ir.Int(0), count, lambda k, st: test(first + k, st), best)

        visit_leaf = hit_box & is_leaf
        best = ir.cond(visit_leaf, leaf, lambda: best)
        nxt = ir.select(hit_box & ~is_leaf, node + 1, skip)
        return (nxt, *best)

    return ir.while_loop(lambda s: s[0] < n_nodes, step, (ir.Int(0), *best))[1:]


def _walk_any(bounds, links, o: Vec, inv_d: Vec, t_max, probe, accept=lambda x: x):
    """Whether ``accept(probe(entry))`` holds for a leaf entry of a
    skip-link BVH whose boxes the ray meets before ``t_max`` (stops at the
    first). (Two steps, so that the scene's own walk emits its operations
    in the order it always has: its kernels stay the same bit for bit.)"""
    n_nodes = ir.cast(bounds.len, "i32")

    def step(s):
        node, _ = s
        hit_box = _box_entry(o, inv_d, bounds, node, t_max)
        skip = links.read(node, layout.LINK_SKIP)
        first = links.read(node, layout.LINK_FIRST)
        count = links.read(node, layout.LINK_COUNT)
        is_leaf = count > 0

        def leaf():
            def entry(st):
                k, _ = st
                got = probe(first + k)
                return k + 1, accept(got)
            return ir.while_loop(lambda st: (st[0] < count) & ~st[1], entry, (ir.Int(0), ir.Bool(False)))[1]

        found = ir.cond(hit_box & is_leaf, leaf, lambda: ir.Bool(False))
        nxt = ir.select(found, n_nodes, ir.select(hit_box & ~is_leaf, node + 1, skip))
        return nxt, found

    return ir.while_loop(lambda s: s[0] < n_nodes, step, (ir.Int(0), ir.Bool(False)))[1]


def _walked_rows(geo: SceneGeometry):
    """(first, end): the rows the skip-link BVH holds (where they are at most
    ``ALL_ROWS_AT_MOST``, a query tests each, all lanes the same row at a
    time), contiguous and in its depth-first leaf order (the scene's own triangles where the wide BVH is
    empty, then the analytic shapes; shapegroups' rows may follow): the
    root's first row, and the end of the last node's (a leaf's)."""
    last = ir.cast(geo.links.len, "i32") - 1
    return (geo.links.read(0, layout.LINK_FIRST),
            geo.links.read(last, layout.LINK_FIRST) + geo.links.read(last, layout.LINK_COUNT))


# Rows up to which a query tests every row of the skip-link BVH instead of
# walking it: the lanes of a packet walk to different nodes, and each step
# gathers its box per lane, while a row read by all lanes at once is one
# load, and the row's kind (triangle or shape) one branch. (The volpath fog
# of bench_volume.py, 12 triangles and a sphere: the walk was 42% of its
# samples in a profile. Spheres of radius 0.12 scattered in a Cornell box
# beside 10 triangles, 96^2 at 32 spp: walk / each row 48 / 31 ms with 12
# rows, 98 / 67 with 30, 148 / 118 with 55, 206 / 183 with 80, 259 / 286
# with 120.)
ALL_ROWS_AT_MOST = 64


def _scene_closest(geo: SceneGeometry, o: Vec, d: Vec, inv_d: Vec, t_min, t_max):
    """(t, primitive, b1, b2) of the nearest of the scene's own primitives:
    in scenes with analytic shapes the shapes' skip-link BVH first (a few
    boxes; or each of its rows, where they are few), then the triangles'
    8-wide BVH up to the nearest shape hit."""
    if not geo.analytic:
        return ir.bvh_query.closest_hit(geo.wide, o, d, inv_d, t_min, t_max)

    def shape(row, st):
        bt, bi, u0, v0 = st
        t, u, v = _intersect_row(geo, row, o, d, t_min)
        closer = (t > t_min) & (t < bt)
        return (ir.select(closer, t, bt), ir.select(closer, row, bi),
                ir.select(closer, u, u0), ir.select(closer, v, v0))

    start = (ir.Float(t_max) if not isinstance(t_max, ir.Var) else t_max, ir.Int(-1), ir.Float(0.0), ir.Float(0.0))
    first, end = _walked_rows(geo)
    near = ir.cond(end - first <= ALL_ROWS_AT_MOST, lambda: ir.fori_loop(first, end, shape, start),
                   lambda: _walk_nearest(geo.bounds, geo.links, o, inv_d, start, shape))
    # (no call where the wide BVH is empty: its few triangles are in the walk)
    hit = ir.cond(_has_wide(geo), lambda: ir.bvh_query.closest_hit(geo.wide, o, d, inv_d, t_min, near[0]),
                  lambda: (near[0], ir.Int(-1), ir.Float(0.0), ir.Float(0.0)))
    triangle_nearer = hit[1] >= 0
    return tuple(ir.select(triangle_nearer, a, b) for a, b in zip(hit, near))


def _has_wide(geo: SceneGeometry):
    return ir.cast(geo.wide[0].len, "i32") > 0


def _walks_inline(geo: SceneGeometry) -> bool:
    """Whether a query walks a hierarchy in the kernel's own code (analytic
    shapes, instances), not only in the engine's traversal routines: then
    each query is a subroutine, which the code of a kernel that queries from
    several places shares (a derivative kernel's passes, its shadow rays)."""
    return geo.analytic or geo.instances is not None


def closest_hit(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    """(t, primitive index in leaf order, b1, b2, instance); t == t_max and
    index -1 on a miss. b1, b2: a triangle's barycentrics (0 for an analytic
    shape). instance: the row of ``instances`` whose shapegroup holds the
    primitive, -1 for the scene's own primitives (and in scenes without
    instances)."""
    if _walks_inline(geo):
        return ir.subroutine(lambda *ray: _closest_hit(geo, *ray), o, d, t_min, t_max, name="closest_hit")
    return _closest_hit(geo, o, d, t_min, t_max)


def _closest_hit(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    inv_d = _safe_inv(d)
    hit = _scene_closest(geo, o, d, inv_d, t_min, t_max)
    inst = geo.instances
    if inst is None:
        return (*hit, ir.Int(-1))

    def instance(i, st):
        # The ray in group space, its direction not renormalised: t stays the world t.
        og, dg = inst.to_group(i, o), inst.to_group_dir(i, d)
        rng, first_row = inst.group_range(i)
        t, prim, b1, b2 = ir.bvh_query.closest_hit(inst.hierarchies, og, dg, _safe_inv(dg), t_min, st[0],
                                                   group=rng)
        closer = prim >= 0
        return tuple(ir.select(closer, new, old) for new, old in zip((t, first_row + prim, b1, b2, i), st))

    return _walk_nearest(inst.bounds, inst.links, o, inv_d, (*hit, ir.Int(-1)), instance)


def occluded(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    """Whether anything lies on the ray between t_min and t_max (stops at the first hit)."""
    if _walks_inline(geo):
        return ir.subroutine(lambda *ray: _occluded(geo, *ray), o, d, t_min, t_max, name="occluded")
    return _occluded(geo, o, d, t_min, t_max)


def _occluded(geo: SceneGeometry, o: Vec, d: Vec, t_min, t_max):
    inv_d = _safe_inv(d)
    if geo.analytic:     # (the shapes' few boxes first)
        def hits(row):
            t = _intersect_row(geo, row, o, d, t_min)[0]
            return (t > t_min) & (t < t_max)

        first, end = _walked_rows(geo)

        def each_row():
            # (every lane on the same row: a lane that found a hit waits for the others, untested)
            return ir.fori_loop(first, end, lambda row, found: ir.cond(
                found, lambda: found, lambda: hits(row)), ir.Bool(False))

        found = ir.cond(end - first <= ALL_ROWS_AT_MOST, each_row,
                        lambda: _walk_any(geo.bounds, geo.links, o, inv_d, t_max, hits))
        found = ir.cond(found | ~_has_wide(geo), lambda: found,
                        lambda: ir.bvh_query.any_hit(geo.wide, o, d, inv_d, t_min, t_max))
    else:
        found = ir.bvh_query.any_hit(geo.wide, o, d, inv_d, t_min, t_max)
    inst = geo.instances
    if inst is None:
        return found

    def instance(i):
        og, dg = inst.to_group(i, o), inst.to_group_dir(i, d)
        rng, _ = inst.group_range(i)
        return ir.bvh_query.any_hit(inst.hierarchies, og, dg, _safe_inv(dg), t_min, t_max, group=rng)

    return ir.cond(found, lambda: ir.Bool(True), lambda: _walk_any(inst.bounds, inst.links, o, inv_d, t_max, instance))
