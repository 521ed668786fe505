"""Geometry placed by parameters: the triangle, BVH, vertex-normal and
emitter-area buffers as functions of vertex positions, so a render with
new positions (``<mesh>.vertex_positions``, a rectangle's ``to_world``)
neither reloads the scene nor recompiles a kernel.

The BVH is *refit*: its topology (which triangles share a leaf, which
nodes share a parent) stays the one built at load time and every box is
recomputed bottom-up from the new triangles, a level at a time. Boxes are
exact (min / max of float32 coordinates), so traversal finds the same hits
as a BVH built from scratch for the new positions; a refit tree may only be
slower to traverse where triangles moved far from their load-time
neighbours. With the load-time positions the refit buffers are bit for bit
the loaded ones.

Every function takes ``xp``: numpy for concrete values, ``jax.numpy`` for
traced ones (under ``jit``, ``vmap``), where the refit is part of the
computation (XLA gathers and scatters, no host round trip).

Example::

    scene = jaxrender.load_dict(d)                     # d has a mesh "bunny"
    v = scene.params["bunny.vertex_positions"] + 0.1   # (3V,) world space
    img = jaxrender.render(scene, {"bunny.vertex_positions": v})
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import layout
from .bvh import _to_f32_conservative
from .shapes import check_instance_transform, shape_bounds, shape_row
from .wide_bvh import LEAF_WIDTH, WIDTH

__all__ = ["MeshPlacement", "MovingGeometry", "vertex_normals"]

_F = np.float32


@dataclass(frozen=True)
class MeshPlacement:
    """How a parameter places one mesh: ``kind`` ``"vertex_positions"``
    (the value is the (3V,) world positions) or ``"to_world"`` (the value is
    a 4x4 matrix applied to the object-space ``local`` vertices); its
    ``faces`` (F, 3) and whether its vertex normals are recomputed from the
    positions (``smooth``; else it shades with face normals); the keys of
    its ``vertex_normals`` (smooth meshes) and ``vertex_texcoords`` (meshes
    with texture coordinates), None where it has none. ``local_normals``:
    the object-space vertex normals of a ``"to_world"`` mesh that has its
    own (an expanded instance's group mesh), which the matrix transforms as
    ``shapes.instance_mesh`` does instead of recomputing them."""
    key: str
    kind: str
    faces: np.ndarray
    smooth: bool
    local: np.ndarray | None = None
    normals_key: str | None = None
    uv_key: str | None = None
    local_normals: np.ndarray | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.key, self.normals_key, self.uv_key) if k is not None)

    def normal_rows(self, p, v, xp):
        """(F, 9) shading-normal rows for the values ``p``: the given
        ``vertex_normals``, else (new positions ``v``) recomputed as Mitsuba
        does when ``vertex_positions`` alone is written, else None (keep)."""
        f = self.faces
        if self.normals_key is not None and self.normals_key in p:
            return xp.reshape(xp.asarray(p[self.normals_key], _F), (-1, 3))[f].reshape(-1, 9)
        if self.local_normals is not None and self.key in p:
            lin = xp.reshape(xp.asarray(p[self.key], _F), (4, 4))[:3, :3]
            n = xp.asarray(self.local_normals, _F) @ xp.linalg.inv(lin) * xp.abs(xp.linalg.det(lin)) ** (1 / 3)
            return n[f].reshape(-1, 9).astype(_F)
        if v is not None and self.smooth:
            return vertex_normals(v, f, xp)[f].reshape(-1, 9).astype(_F)
        return None

    def uv_rows(self, p, xp):
        """(F, 6) texture-coordinate rows for the given ``vertex_texcoords``, or None."""
        if self.uv_key is None or self.uv_key not in p:
            return None
        return xp.reshape(xp.asarray(p[self.uv_key], _F), (-1, 2))[self.faces].reshape(-1, 6)

    def positions(self, value, xp):
        """The mesh's (V, 3) float32 world-space vertices for parameter value ``value``."""
        if self.kind == "vertex_positions":
            return xp.reshape(xp.asarray(value, _F), (-1, 3))
        m = xp.reshape(xp.asarray(value, _F), (4, 4))
        return xp.asarray(self.local, _F) @ m[:3, :3].T + m[:3, 3]


def vertex_normals(vertices, faces, xp=np):
    """Mitsuba's ``Mesh::recompute_vertex_normals``: the face normals of the
    faces around each vertex weighted by the face's angle at that vertex
    (Thuermer and Wuethrich 1998); zero-area faces are skipped and a vertex
    without a valid face gets (1, 0, 0)."""
    v = vertices if xp is not np else np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    p = v[f]                                              # (F, 3, 3)
    n = xp.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    ln = xp.linalg.norm(n, axis=1)
    ok = ln > 0
    n = n / xp.where(ok, ln, 1.0)[:, None]
    out = xp.zeros(v.shape, v.dtype)
    for j in range(3):
        d0 = p[:, (j + 1) % 3] - p[:, j]
        d1 = p[:, (j + 2) % 3] - p[:, j]
        lengths = xp.linalg.norm(d0, axis=1) * xp.linalg.norm(d1, axis=1)
        good = ok & (lengths > 0)
        c = xp.sum(d0 * d1, axis=1) / xp.where(good, lengths, 1.0)
        angle = xp.where(good, xp.arccos(xp.clip(c, -1.0, 1.0)), 0.0)
        out = _add_rows(xp, out, f[:, j], n * angle[:, None])
    ln = xp.linalg.norm(out, axis=1)
    good = ln > 0
    return xp.where(good[:, None], out / xp.where(good, ln, 1.0)[:, None], xp.asarray([1.0, 0.0, 0.0], v.dtype))


@dataclass
class MovingGeometry:
    """What a render needs to rebuild the geometry buffers from parameter
    values: every mesh's loaded triangles in load order (``placements``
    names the parameter of those a parameter places), the analytic shapes
    (``shapes``: those with a ``param`` move with its value), the leaf order, the static boxes of analytic
    shapes, the BVH topology and the emissive triangles.

    Built once by :func:`jaxrender.scene.geometry.scene_fields`."""
    triangles: list                      # (F, 9) float32 loaded world triangles per mesh (load order)
    placements: list                     # MeshPlacement or None per mesh
    loaded_normals: np.ndarray | None    # (T, 9) load-order normal rows (zero: face normals), None: none
    loaded_uvs: np.ndarray               # (T + S, 6) load-order texture-coordinate rows (analytic shapes' too)
    order: np.ndarray                    # leaf row -> load-order primitive (triangles first)
    n_tris: int
    analytic_lo: np.ndarray              # (S, 3) float32 boxes of the analytic shapes (load order)
    analytic_hi: np.ndarray
    shapes: list                         # shapes.AnalyticShape per shape_data row
    shape_data: np.ndarray               # their loaded rows
    wide: dict                           # refit plan of the triangles' 8-wide BVH
    binary: dict | None                  # refit plan of the analytic shapes' skip-link BVH (None: no shapes)
    lights: list                         # (emitter index, leaf rows of its triangles) per mesh emitter
    shape_lights: list                   # (emitter index, shape_data row) per emitter on an analytic shape
    # The rows after the scene's own (shapegroups shared by instances,
    # scene/instancing.py), static: "tris", "tri_uv" and "tri_normals" (None: none).
    group_rows: dict
    # Instances of shared shapegroups placed by their to_world
    # (instancing.InstancePlacement), or None.
    instances: object = None

    @property
    def own_keys(self) -> tuple[str, ...]:
        """The parameters that place the scene's own meshes and shapes."""
        return (tuple(k for p in self.placements if p is not None for k in p.keys)
                + tuple(s.param for s in self.shapes if s.param is not None))

    @property
    def keys(self) -> tuple[str, ...]:
        return self.own_keys + (self.instances.keys if self.instances is not None else ())

    def moved_rows(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(leaf rows of the triangles, ``shape_data`` rows and the leaf
        rows of those shapes) whose positions parameter ``key`` sets: none
        for vertex normals and texture coordinates, which move no point,
        nor for a shared instance's ``to_world`` (a parameter only where
        its group holds meshes, ``loaders/shapes.py``): the copies of its
        group's meshes these buffers do not name (``render._moving_rows``
        does)."""
        cache = self.__dict__.setdefault("_moved_rows_cache", {})
        if key not in cache:
            cache[key] = self._moved_rows(key)
        return cache[key]

    def _moved_rows(self, key: str):
        none = np.zeros(0, np.int32)
        leaf_of = np.empty(len(self.order), np.int64)
        leaf_of[self.order] = np.arange(len(self.order))      # load-order primitive -> leaf row
        start, rows = 0, [none]
        for tris, placement in zip(self.triangles, self.placements):
            # (an expanded instance's key places each mesh of its group)
            if placement is not None and placement.key == key:
                rows.append(leaf_of[start:start + len(tris)])
            start += len(tris)
        shapes = np.asarray([i for i, s in enumerate(self.shapes) if s.param == key], np.int64)
        return (np.sort(np.concatenate(rows)).astype(np.int32), shapes.astype(np.int32),
                np.sort(leaf_of[self.n_tris + shapes]).astype(np.int32))

    # -- load time -------------------------------------------------------------------------

    @classmethod
    def plan(cls, triangles, placements, loaded_normals, loaded_uvs, order, n_tris, shapes, shape_bvh, wide_nodes,
             emitter_rows, shape_lights, group_rows, instances=None) -> "MovingGeometry":
        """The refit plan of a loaded scene (see the class docstring)."""
        lo = np.array([s.bounds()[0] for s in shapes], np.float64).reshape(-1, 3)
        hi = np.array([s.bounds()[1] for s in shapes], np.float64).reshape(-1, 3)
        rows = np.array([s.row() for s in shapes], _F).reshape(-1, layout.SHAPE_ROW)
        return cls([np.asarray(t, _F) for t in triangles], placements,
                   loaded_normals, np.asarray(loaded_uvs, _F), np.asarray(order, np.int64), n_tris,
                   _to_f32_conservative("lo", lo, -1), _to_f32_conservative("hi", hi, +1), list(shapes), rows,
                   _wide_plan(wide_nodes), None if shape_bvh is None else _binary_plan(shape_bvh.node_links),
                   emitter_rows, shape_lights,
                   group_rows, instances)

    # -- render time -----------------------------------------------------------------------

    def buffers(self, p, xp, emitter_geom: np.ndarray) -> dict:
        """``tris``, the BVH buffers (``wide_nodes`` / ``wide_leaves``, and
        with analytic shapes ``bvh_bounds``), ``tri_normals``, and the mesh emitters' ``light_cdf``
        and areas in ``emitter_geom`` (the loaded one, updated), for the
        parameter values ``p``; a mesh whose key ``p`` does not have keeps
        its loaded vertices. Moved instances: ``instances`` and
        ``instance_bounds`` too."""
        out = self._own_buffers(p, xp, emitter_geom) if any(k in p for k in self.own_keys) else {}
        if self.instances is not None and any(k in p for k in self.instances.keys):
            out.update(self.instances.buffers(p, xp))
        return out

    def _own_buffers(self, p, xp, emitter_geom: np.ndarray) -> dict:
        world, normal_rows, uv_rows = [], [], []
        for loaded, placement in zip(self.triangles, self.placements):
            if placement is None:
                world.append(loaded)
                normal_rows.append(None)
                uv_rows.append(None)
                continue
            v = placement.positions(p[placement.key], xp) if placement.key in p else None
            world.append(loaded if v is None else v[placement.faces].reshape(-1, 9))
            normal_rows.append(placement.normal_rows(p, v, xp))
            uv_rows.append(placement.uv_rows(p, xp))
        out = {}
        if self.loaded_normals is not None and any(r is not None for r in normal_rows):
            rows = self._rows(self.loaded_normals, normal_rows, xp)
            out["tri_normals"] = _concat(xp, rows + [np.zeros((len(self.analytic_lo), 9), _F)])[self.order]
        if any(r is not None for r in uv_rows):
            rows = self._rows(self.loaded_uvs, uv_rows, xp)
            out["tri_uv"] = _concat(xp, rows + [self.loaded_uvs[self.n_tris:]])[self.order]
        analytic = self._analytic(p, xp)
        if analytic is None and all(w is loaded for w, loaded in zip(world, self.triangles)):
            return self._with_group_rows(out, xp)     # (only normals or UVs: the BVH and lights stand)
        tris = _concat(xp, world + [np.zeros((len(self.analytic_lo), 9), _F)])[self.order]
        out["tris"] = tris
        if analytic is not None:
            out["shape_data"] = analytic[0]
        out["wide_nodes"], out["wide_leaves"] = _refit_wide(self.wide, tris, xp)
        if self.binary is not None:
            out["bvh_bounds"] = _refit_binary(self.binary, self._prim_boxes(tris, analytic, xp), xp)
        out["light_cdf"], areas = self._light_tables(tris, xp)
        if analytic is not None:
            areas.update({e: analytic[0][row, layout.SHAPE_AREA] for e, row in self.shape_lights})
        if areas:
            emitters = np.array(list(areas))
            out["emitter_geom"] = _set(xp, xp.asarray(emitter_geom), (emitters, layout.GEOM_AREA),
                                       xp.stack(list(areas.values())).astype(_F))
        return self._with_group_rows(out, xp)

    def _with_group_rows(self, out: dict, xp) -> dict:
        """``out`` with the shared shapegroups' static rows after each rebuilt row buffer."""
        for name, rows in self.group_rows.items():
            if name in out and rows is not None and len(rows):
                out[name] = _concat(xp, [out[name], rows])
        return out

    def _rows(self, loaded, new, xp) -> list:
        """Each mesh's load-order rows of ``loaded``, or its ``new`` ones."""
        start, rows = 0, []
        for tris, moved in zip(self.triangles, new):
            rows.append(loaded[start:start + len(tris)] if moved is None else moved)
            start += len(tris)
        return rows

    def _analytic(self, p, xp):
        """(shape_data, box lo, box hi) of the analytic shapes for the values
        ``p``, or None when ``p`` moves none of them."""
        moved = [i for i, s in enumerate(self.shapes) if s.param is not None and s.param in p]
        if not moved:
            return None
        rows, lo, hi = self.shape_data, self.analytic_lo, self.analytic_hi
        for i in moved:
            shape = self.shapes[i]
            m = xp.reshape(xp.asarray(p[shape.param], _F), (4, 4))
            if xp is np:
                m = m.astype(np.float64)
                check_instance_transform(m, shape.key)
            flip = shape.flip
            if shape.flips_with_mirror:      # (Mitsuba's update: a mirroring to_world flips the normals)
                flip = (xp.linalg.det(m[:3, :3]) < 0) != (flip != (np.linalg.det(shape.to_world[:3, :3]) < 0))
            box_lo, box_hi = shape_bounds(shape.kind, m, xp)
            if xp is np:
                box_lo, box_hi = _to_f32_conservative("lo", box_lo, -1), _to_f32_conservative("hi", box_hi, +1)
            rows = _set(xp, rows, i, shape_row(shape.kind, m, flip, xp).astype(_F))
            lo, hi = _set(xp, lo, i, box_lo.astype(_F)), _set(xp, hi, i, box_hi.astype(_F))
        return rows, lo, hi

    def _prim_boxes(self, tris, analytic, xp):
        """(N, 3) lo and hi of every leaf row: triangles' from their
        vertices, analytic shapes' from their transforms."""
        t = tris.reshape(-1, 3, 3)
        lo, hi = t.min(axis=1), t.max(axis=1)
        is_analytic = self.order >= self.n_tris
        if is_analytic.any():
            a_lo, a_hi = (self.analytic_lo, self.analytic_hi) if analytic is None else analytic[1:]
            rows = np.maximum(self.order - self.n_tris, 0)
            lo = xp.where(is_analytic[:, None], a_lo[rows], lo)
            hi = xp.where(is_analytic[:, None], a_hi[rows], hi)
        return lo, hi

    def _light_tables(self, tris, xp):
        cdfs, areas = [], {}
        for emitter, rows in self.lights:
            t = tris[rows]
            area = 0.5 * xp.linalg.norm(xp.cross(t[:, 3:6] - t[:, 0:3], t[:, 6:9] - t[:, 0:3]), axis=1)
            total = xp.sum(area)
            # (a mesh collapsed to zero area under jit: a uniform CDF, no NaN;
            # concrete values are refused before, see Scene.check_params)
            safe = xp.where(total > 0, total, 1.0)
            cdfs.append(xp.where(total > 0, xp.cumsum(area) / safe, (np.arange(len(rows)) + 1.0) / len(rows)))
            areas[emitter] = total
        cdf = _concat(xp, cdfs).astype(_F) if cdfs else np.zeros(0, _F)
        return cdf, areas


# ---------------------------------------------------------------------------
# The 8-wide BVH (wide_bvh's layout)
# ---------------------------------------------------------------------------

def _wide_plan(packed: tuple) -> dict:
    """Static index arrays of a refit of the packed wide BVH: the blocks'
    rows, and per level (deepest first) where each slot's box comes from."""
    nodes, leaves = packed
    bounds = nodes[:, :6 * WIDTH].view(_F)
    children = nodes[:, 6 * WIDTH:].astype(np.int64)
    used = bounds[:, 0:WIDTH] <= bounds[:, 3 * WIDTH:4 * WIDTH]
    level = np.zeros(len(children), np.int64)
    frontier, depth = np.zeros(1 if len(children) else 0, np.int64), 0
    while frontier.size:                      # (one level at a time, from the root)
        level[frontier] = depth
        inner = used[frontier] & (children[frontier] >= 0)
        frontier, depth = children[frontier][inner], depth + 1
    leaf_rows, leaf_cols = np.nonzero(used & (children < 0))
    steps = []
    for depth in range(int(level.max(initial=0)), -1, -1):
        r, c = np.nonzero(used & (children >= 0) & (level[:, None] == depth))
        if r.size:
            steps.append((r, c, children[r, c]))
    return dict(prims=leaves[:, 9 * LEAF_WIDTH:].astype(np.int64), children=nodes[:, 6 * WIDTH:],
                leaf_slots=(leaf_rows, leaf_cols, ~children[leaf_rows, leaf_cols]), steps=steps,
                n_nodes=len(children))


def _refit_wide(plan: dict, tris, xp):
    prims = plan["prims"]
    B = prims.shape[0]
    valid = prims >= 0
    t = tris[np.maximum(prims, 0)].reshape(B, LEAF_WIDTH, 3, 3)     # (block, lane, vertex, axis)
    p0 = t[:, :, 0]
    q = xp.stack([p0, t[:, :, 1] - p0, t[:, :, 2] - p0], axis=1)    # (block, p0/e1/e2, lane, axis)
    q = xp.where(valid[:, None, :, None], q, _F(0)).transpose(0, 1, 3, 2).reshape(B, 9 * LEAF_WIDTH)
    inf = _F(np.inf)
    block_lo = xp.where(valid[:, :, None], t.min(axis=2), inf).min(axis=1)     # (B, 3)
    block_hi = xp.where(valid[:, :, None], t.max(axis=2), -inf).max(axis=1)
    W = plan["n_nodes"]
    lo = xp.full((W, WIDTH, 3), inf, _F)
    hi = xp.full((W, WIDTH, 3), -inf, _F)
    r, c, block = plan["leaf_slots"]
    lo, hi = _set(xp, lo, (r, c), block_lo[block]), _set(xp, hi, (r, c), block_hi[block])
    for r, c, child in plan["steps"]:
        lo = _set(xp, lo, (r, c), lo[child].min(axis=1))
        hi = _set(xp, hi, (r, c), hi[child].max(axis=1))
    bounds = _concat(xp, [lo[:, :, a] for a in range(3)] + [hi[:, :, a] for a in range(3)], axis=1)
    nodes = _concat(xp, [_bits(xp, bounds), plan["children"]], axis=1)
    leaves = _concat(xp, [_bits(xp, q), prims.astype(np.int32)], axis=1)
    return nodes, leaves


# ---------------------------------------------------------------------------
# The binary skip-link BVH of the analytic shapes (its leaves name leaf rows)
# ---------------------------------------------------------------------------

def _binary_plan(links: np.ndarray) -> dict:
    """Per depth (deepest first): the leaves with their primitive rows and
    the interior nodes with their two children (pre-order: the first child
    follows its parent, the second follows the first's subtree)."""
    links = np.asarray(links, np.int64)
    M = len(links)
    skip, first, count = links[:, layout.LINK_SKIP], links[:, layout.LINK_FIRST], links[:, layout.LINK_COUNT]
    depth = np.zeros(M, np.int64)
    frontier, d = np.zeros(1 if M else 0, np.int64), 0
    while frontier.size:                      # (one level at a time, from the root)
        depth[frontier] = d
        inner = frontier[count[frontier] == 0]
        frontier, d = np.concatenate([inner + 1, skip[inner + 1]]), d + 1
    steps = []
    width = int(count.max(initial=1))
    for d in range(int(depth.max(initial=0)), -1, -1):
        at = depth == d
        leaves = np.flatnonzero(at & (count > 0))
        lanes = np.arange(width)
        rows = np.where(lanes < count[leaves, None], first[leaves, None] + lanes, -1)
        inner = np.flatnonzero(at & (count == 0))
        steps.append((leaves, rows, inner, inner + 1, skip[inner + 1]))
    return dict(steps=steps, n_nodes=M)


def _refit_binary(plan: dict, boxes, xp):
    prim_lo, prim_hi = boxes
    inf = _F(np.inf)
    M = plan["n_nodes"]
    lo, hi = xp.zeros((M, 3), _F), xp.zeros((M, 3), _F)
    for leaves, rows, inner, left, right in plan["steps"]:
        valid = (rows >= 0)[:, :, None]
        safe = np.maximum(rows, 0)
        lo = _set(xp, lo, leaves, xp.where(valid, prim_lo[safe], inf).min(axis=1))
        hi = _set(xp, hi, leaves, xp.where(valid, prim_hi[safe], -inf).max(axis=1))
        lo = _set(xp, lo, inner, xp.minimum(lo[left], lo[right]))
        hi = _set(xp, hi, inner, xp.maximum(hi[left], hi[right]))
    return _concat(xp, [lo, hi], axis=1)


# ---------------------------------------------------------------------------
# numpy / jax.numpy
# ---------------------------------------------------------------------------

def _set(xp, a, index, values):
    if xp is np:
        a = a.copy()
        a[index] = values
        return a
    return xp.asarray(a).at[index].set(values)


def _add_rows(xp, a, index, values):
    if xp is np:
        a = a.copy()
        np.add.at(a, index, values)
        return a
    return xp.asarray(a).at[index].add(values)


def _bits(xp, a):
    if xp is np:
        return np.ascontiguousarray(a, _F).view(np.int32)
    import jax
    return jax.lax.bitcast_convert_type(a.astype(_F), np.int32)


def _concat(xp, parts, axis=0):
    parts = [p for p in parts if p is not None]
    return xp.concatenate([xp.asarray(p) for p in parts], axis=axis)
