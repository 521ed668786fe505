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


def instance_tables(groups: dict, instances: list, first_row: int) -> InstanceTables | None:
    """The tables of ``instances`` ((shapegroup key, 4 x 4 to_world) per
    instance of a group with meshes) of the loaded ``groups`` (key ->
    ``loaders.shapes.ShapeGroup``), the group rows numbered from
    ``first_row`` (the scene's own primitives come first); None without
    instances."""
    if not instances:
        return None
    used = list(dict.fromkeys(key for key, _ in instances))
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
    lo, hi = zip(*(_world_box(*boxes[key], m) for key, m in instances))
    top = build_bvh_from_bounds(np.array(lo), np.array(hi))
    leaf = top.prim_index
    to_world = np.array([m for _, m in instances], np.float64)[leaf]
    to_group = np.linalg.inv(to_world)
    index = {key: g for g, key in enumerate(used)}
    buffers = dict(group_nodes=np.concatenate(nodes), group_leaves=np.concatenate(leaves),
                   groups=np.array(table, np.int32).reshape(-1, layout.GROUP_ROW),
                   instances=np.concatenate([to_group[:, :3].reshape(-1, 12), to_world[:, :3].reshape(-1, 12)],
                                            axis=1).astype(_F),
                   instance_group=np.array([index[instances[i][0]] for i in leaf], np.int32),
                   instance_bounds=top.node_bounds.astype(_F), instance_links=top.node_links.astype(np.int32))
    return InstanceTables({k: np.concatenate(v) if v else None for k, v in rows.items()}, buffers)


def _world_box(lo: np.ndarray, hi: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The world box of the group-space box [lo, hi] under to_world ``m``
    (the box of its eight transformed corners)."""
    corners = np.array([[(lo, hi)[(k >> a) & 1][a] for a in range(3)] for k in range(8)])
    world = corners @ m[:3, :3].T + m[:3, 3]
    return world.min(0), world.max(0)
