"""Shapegroups shared by their instances: Mitsuba's two-level hierarchy.

A ``shapegroup``'s meshes are stored once, in group space, with an 8-wide
BVH of their own (``wide_bvh``; child, block and primitive indices local to
the group); the groups' hierarchies are concatenated in the ``group_nodes``
/ ``group_leaves`` buffers and the table ``groups`` says where each one's
nodes and blocks start, how many there are and at which row its primitives
start. Those rows (``tris``, ``tri_attr``, ``tri_uv``, ``tri_normals``,
``prim_media``) come after the scene's own rows, so shading reads a hit on
a group's triangle by its row as usual. Each ``instance`` of a group with
meshes is a row of ``instances`` (world-to-group and group-to-world, 3 x 4
each) and of ``instance_group``, in the leaf order of a small skip-link BVH
over the instances' world boxes (``instance_bounds`` / ``instance_links``).
The kernels walk that BVH after the scene's own and query the group of
each instance the ray reaches (``kernels/geometry.py``), so memory grows
with the instance count by one row and a box, not by the group's triangles.

Analytic shapes inside a group are one primitive each and stay expanded
into the scene (``loaders/shapes.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import layout
from .bvh import build_bvh_from_bounds
from .refit import _binary_plan, _refit_binary, _set
from .shapes import check_instance_transform
from .wide_bvh import kernel_buffers, triangle_bvh

_F = np.float32


@dataclass
class InstanceTables:
    """The group primitives' rows (group leaf order, groups one after the
    other: ``tris``, ``attrs`` with the media columns, ``uvs``, ``normals``
    or None where no group mesh has vertex normals) and the kernel buffers
    of ``layout.instance_inputs``."""
    rows: dict
    buffers: dict
    placement: "InstancePlacement"


@dataclass
class InstancePlacement:
    """How instances' ``to_world`` parameters (Mitsuba's ``<id>.to_world``)
    rebuild the instance rows and refit the boxes of the hierarchy over them
    (its topology kept, as ``refit.py`` refits the scene's), with numpy or
    inside the jitted computation."""
    params: list                 # per instance row (leaf order): its parameter key, or None
    keys_of: list                # the owning instance's key per row (errors)
    group_lo: np.ndarray         # (n, 3) group-space box of each row's group
    group_hi: np.ndarray
    plan: dict                   # refit._binary_plan of the instance hierarchy
    instances: np.ndarray        # the loaded rows

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in self.params if k is not None)

    def buffers(self, p, xp) -> dict:
        """``instances`` and ``instance_bounds`` for the values ``p`` (rows
        whose key ``p`` lacks keep their loaded transform)."""
        loaded = np.concatenate([self.instances[:, 12:].reshape(-1, 3, 4),
                                 np.tile(np.array([[[0, 0, 0, 1]]], _F), (len(self.instances), 1, 1))], axis=1)
        moved = [i for i, key in enumerate(self.params) if key is not None and key in p]
        mats = [xp.reshape(xp.asarray(p[self.params[i]], _F), (4, 4)) if i in moved else loaded[i]
                for i in range(len(loaded))]
        if xp is np:
            for i in moved:
                check_instance_transform(np.asarray(mats[i], np.float64), self.keys_of[i])
        m = xp.stack(mats)
        idx = np.array(moved, np.int64)
        new_rows = xp.concatenate([xp.linalg.inv(m[idx])[:, :3].reshape(-1, 12), m[idx, :3].reshape(-1, 12)], axis=1)
        rows = _set(xp, self.instances, idx, new_rows.astype(_F))
        w_lo, w_hi = _world_boxes(self.group_lo, self.group_hi, m, xp)
        bounds = _refit_binary(self.plan, (w_lo.astype(_F), w_hi.astype(_F)), xp)
        return dict(instances=rows, instance_bounds=bounds)


def instance_tables(groups: dict, instances: list, first_row: int) -> InstanceTables | None:
    """The tables of ``instances`` ((shapegroup key, 4 x 4 to_world, its
    instance's key, its to_world parameter or None) per instance of a group
    with meshes) of the loaded ``groups`` (key ->
    ``loaders.shapes.ShapeGroup``), the group rows numbered from
    ``first_row`` (the scene's own primitives come first); None without
    instances."""
    if not instances:
        return None
    used = list(dict.fromkeys(inst[0] for inst in instances))
    rows = {k: [] for k in ("tris", "attrs", "uvs", "normals")}
    nodes, leaves, table, boxes = [], [], [], {}
    smooth = any(m[3] is not None for key in used for m in groups[key].meshes)
    row = first_row
    for key in used:
        meshes = groups[key].meshes
        tris = np.concatenate([m[0] for m in meshes]).astype(np.float64)
        bvh = triangle_bvh(tris)
        order = bvh.prim_index
        leaf_tris = tris[order].astype(_F)
        n, b = kernel_buffers(bvh, leaf_tris)
        table.append((sum(len(x) for x in nodes), len(n), sum(len(x) for x in leaves), len(b), row))
        nodes.append(n)
        leaves.append(b)
        row += len(tris)
        rows["tris"].append(leaf_tris)
        rows["attrs"].append(np.concatenate([m[1] for m in meshes]).astype(np.int32)[order])
        rows["uvs"].append(np.concatenate([m[2] for m in meshes]).astype(_F)[order])
        if smooth:
            rows["normals"].append(np.concatenate([np.zeros((len(m[0]), 9)) if m[3] is None else m[3]
                                                   for m in meshes]).astype(_F)[order])
        pts = tris.reshape(-1, 3)
        boxes[key] = (pts.min(0), pts.max(0))
    lo, hi = _world_boxes(np.array([boxes[inst[0]][0] for inst in instances]),
                          np.array([boxes[inst[0]][1] for inst in instances]),
                          np.array([inst[1] for inst in instances], np.float64))
    top = build_bvh_from_bounds(lo, hi)
    leaf = top.prim_index
    to_world = np.array([inst[1] for inst in instances], np.float64)[leaf]
    to_group = np.linalg.inv(to_world)
    index = {key: g for g, key in enumerate(used)}
    buffers = dict(group_nodes=np.concatenate(nodes), group_leaves=np.concatenate(leaves),
                   groups=np.array(table, np.int32).reshape(-1, layout.GROUP_ROW),
                   instances=np.concatenate([to_group[:, :3].reshape(-1, 12), to_world[:, :3].reshape(-1, 12)],
                                            axis=1).astype(_F),
                   instance_group=np.array([index[instances[i][0]] for i in leaf], np.int32),
                   instance_bounds=top.node_bounds.astype(_F), instance_links=top.node_links.astype(np.int32))
    placement = InstancePlacement([instances[i][3] for i in leaf], [instances[i][2] for i in leaf],
                                  np.array([boxes[instances[i][0]][0] for i in leaf]),
                                  np.array([boxes[instances[i][0]][1] for i in leaf]),
                                  _binary_plan(top.node_links), buffers["instances"])
    return InstanceTables({k: np.concatenate(v) if v else None for k, v in rows.items()}, buffers, placement)


def _world_boxes(lo: np.ndarray, hi: np.ndarray, m, xp=np):
    """World boxes of the group-space boxes [lo, hi] (n, 3) under the
    to_world matrices ``m`` (n, 4, 4): the boxes of their eight transformed
    corners, widened by a relative 1e-6 so that float32 rounding never
    shrinks one past a hit."""
    corners = np.stack([[[(a, b)[(k >> axis) & 1][axis] for axis in range(3)] for k in range(8)]
                        for a, b in zip(lo, hi)])                                # (n, 8, 3)
    world = xp.einsum("nkc,nrc->nkr", corners, m[:, :3, :3]) + m[:, None, :3, 3]
    w_lo, w_hi = world.min(axis=1), world.max(axis=1)
    pad = 1e-6 * (1.0 + xp.maximum(xp.abs(w_lo), xp.abs(w_hi)))
    return w_lo - pad, w_hi + pad
