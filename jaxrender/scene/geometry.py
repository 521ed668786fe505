"""From what the loaders collected (a :class:`~.builder.SceneBuilder`) to
the arrays of a :class:`~.scene.Scene`: every primitive in BVH leaf order
(triangles, then analytic shapes boxed by their extent), the BVH the
kernels traverse, and the emitter tables (emissive triangles grouped by
emitter with their area CDFs).

Example::

    fields = scene_fields(SceneBuilder().load_scene(d))
    Scene(**fields)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels import emitters as kemitters
from ..kernels import layout
from .bvh import BVH, build_bvh_from_bounds, triangle_bounds
from .errors import SceneError
from .refit import MovingGeometry
from .instancing import instance_tables
from .wide_bvh import kernel_buffers, triangle_bvh

if TYPE_CHECKING:
    from .builder import SceneBuilder

# Scenes with analytic shapes and at most this many triangles keep the
# triangles in the shapes' skip-link BVH: a second query (the 8-wide
# traversal's call) cost more than it saved there (a sphere over a
# 4-triangle floor and light: 10-12 -> 11-14 ms), while the Cornell box's
# 36 triangles beside a sphere ran 2.5x faster in the wide BVH.
SKIP_LINK_TRIANGLES = 16

# Without texture coordinates an analytic hit reports its (u, v) where a
# triangle reports (b1, b2): its UV row is the identity map.
_IDENTITY_UV = (0.0, 0.0, 1.0, 0.0, 0.0, 1.0)


def scene_fields(b: SceneBuilder) -> dict:
    """The keyword arguments of ``Scene`` for everything ``b`` loaded."""
    if not b.meshes and not b.shapes and not b.instances:
        raise SceneError("the scene has no shapes")
    prims, order, bvh, shape_bvh = _primitives(b)
    own = dict(tris=prims["tris"][order].astype(np.float32), attrs=prims["attrs"][order],
               uvs=prims["uvs"][order].astype(np.float32),
               normals=None if prims["normals"] is None else prims["normals"][order].astype(np.float32))
    prim_shape = prims["prim_shape"]
    n_wide = len(bvh.prim_index)          # (the first rows: the triangles in the wide BVH)
    wide = kernel_buffers(bvh, own["tris"][:n_wide])
    instancing = instance_tables(b.groups, b.instances, len(order))
    rows = own if instancing is None else _with_group_rows(own, instancing.rows)
    if prim_shape is not None:
        prim_shape = np.concatenate([prim_shape[order], np.full(len(rows["tris"]) - len(order), -1, np.int32)])
    tri, attr, media = rows["tris"], rows["attrs"][:, :layout.ATTR_ROW], rows["attrs"][:, layout.ATTR_ROW:]
    if not np.all(np.isfinite(rows["uvs"])):
        raise SceneError("scene texture coordinates have NaN or infinite values")
    normals = rows["normals"]
    camera_key, camera = b.sensors[0]
    emitters = _emitter_tables(b, tri, attr)
    return dict(camera=camera, integrator=b.integrator, triangles=tri, tri_attr=attr,
                # (the shapes' skip-link BVH; no rows without analytic shapes)
                bvh_bounds=(np.zeros((0, 6), np.float32) if shape_bvh is None else
                            shape_bvh.node_bounds.astype(np.float32)),
                bvh_links=(np.zeros((0, 3), np.int32) if shape_bvh is None else
                           shape_bvh.node_links.astype(np.int32)),
                **emitters, env_emitter=b.env, camera_key=camera_key, params=b.params,
                prim_media=media if (media >= 0).any() else np.zeros((0, layout.PRIM_MEDIA_ROW), np.int32),
                media=b.media, bsdfs=b.bsdfs, emitter_keys=b.emitter_keys, nondifferentiable=b.nondiff, frozen=b.frozen,
                unexposed=b.unexposed,
                tri_uv=rows["uvs"], textures=b.textures, bsdf_slots=b.bsdf_slots,
                bsdf_nesting=max(b.bsdf_depth, default=0), env_texture=b.env_texture, sunsky=b.sunsky,
                env_frame=b.env_frame.astype(np.float32),
                tri_normals=normals if normals is not None else np.zeros((0, 9), np.float32),
                prim_shape=prim_shape if prim_shape is not None else np.zeros((0,), np.int32),
                shape_data=np.array([s.row() for s in b.shapes], np.float32).reshape(-1, layout.SHAPE_ROW),
                shapes=b.shapes, sensors=b.sensors, wide_bvh=wide,
                instancing=None if instancing is None else instancing.buffers,
                moving=_moving(b, prims, order, shape_bvh, wide, attr, emitters["emitter_meta"], rows, instancing))


def _with_group_rows(own: dict, group: dict) -> dict:
    """The scene's own primitive rows followed by the shapegroups' (normals
    where either has them, zero rows elsewhere: face normals)."""
    out = {k: np.concatenate([own[k], group[k]]) for k in ("tris", "attrs", "uvs")}
    if own["normals"] is None and group["normals"] is None:
        return dict(out, normals=None)
    out["normals"] = np.concatenate([np.zeros((len(rows), 9), np.float32) if n is None else n
                                     for n, rows in ((own["normals"], own["tris"]), (group["normals"], group["tris"]))])
    return out


def _moving(b: SceneBuilder, prims: dict, order: np.ndarray, shape_bvh, wide, attr: np.ndarray,
            meta: np.ndarray, rows: dict, instancing) -> MovingGeometry | None:
    """The refit plan of a scene with meshes placed by parameters (None without)."""
    placed_instances = None if instancing is None or not instancing.placement.keys else instancing.placement
    if (not any(m[4] is not None for m in b.meshes) and not any(s.param is not None for s in b.shapes)
            and placed_instances is None):
        return None
    lights = [(e, np.nonzero(attr[:, layout.ATTR_EMITTER] == e)[0]) for e in range(len(meta))
              if meta[e, layout.META_TYPE] == _AREA]
    n_tris = sum(len(m[0]) for m in b.meshes)
    normals = prims["normals"]
    shape_lights = [(e, int(meta[e, layout.META_FIRST])) for e in range(len(meta))
                    if meta[e, layout.META_TYPE] in _AREA_ANALYTIC]
    # (the shapegroups' rows after the scene's own are static: instances move by their tables)
    group_rows = {"tris": rows["tris"][len(order):], "tri_uv": rows["uvs"][len(order):],
                  "tri_normals": None if rows["normals"] is None else rows["normals"][len(order):]}
    return MovingGeometry.plan([m[0] for m in b.meshes], [m[4] for m in b.meshes],
                               None if normals is None else normals[:n_tris].astype(np.float32), prims["uvs"],
                               order, n_tris,
                               b.shapes, shape_bvh, wide, lights, shape_lights, group_rows, placed_instances)


def _primitives(b: SceneBuilder) -> tuple:
    """Every primitive's rows in load order (tris, attrs, uvs; normals and
    prim_shape or None when no primitive needs them), the leaf order of
    the rows (leaf row -> load-order row), the BVH over the triangles (the
    first rows) and, with analytic shapes, the skip-link BVH over them,
    whose leaves name their leaf rows (after the triangles') (else None)."""
    tri = np.concatenate([m[0] for m in b.meshes]).astype(np.float64) if b.meshes else np.zeros((0, 9))
    width = layout.ATTR_ROW + layout.PRIM_MEDIA_ROW
    attr = np.concatenate([m[1] for m in b.meshes]).astype(np.int32) if b.meshes else np.zeros((0, width), np.int32)
    if not np.all(np.isfinite(tri)):
        raise SceneError("scene geometry has NaN or infinite coordinates")
    uvs = np.concatenate([m[2] for m in b.meshes]) if b.meshes else np.zeros((0, 6))
    smooth = any(m[3] is not None for m in b.meshes)
    normals = np.concatenate([np.zeros((len(m[0]), 9)) if m[3] is None else m[3] for m in b.meshes]) \
        if smooth else None
    if not b.shapes:
        bvh = triangle_bvh(tri)
        return (dict(tris=tri, attrs=attr, uvs=uvs, normals=normals, prim_shape=None), bvh.prim_index, bvh, None)
    # The analytic shapes, boxed by their extent, in a BVH of their own: one
    # sphere among triangles no longer sends every ray of the scene through
    # a skip-link walk (the triangles' 8-wide traversal is ~2x faster). Few
    # triangles join the shapes there instead (the wide BVH stays empty).
    n_t, n_s = len(tri), len(b.shapes)
    boxes = [sh.bounds() for sh in b.shapes]
    lo, hi = np.array([bx[0] for bx in boxes]), np.array([bx[1] for bx in boxes])
    if n_t <= SKIP_LINK_TRIANGLES:
        verts = tri.reshape(-1, 3).astype(np.float32)
        lo_t, hi_t = triangle_bounds(verts, np.arange(len(verts), dtype=np.int32).reshape(-1, 3))
        skip_link = build_bvh_from_bounds(np.concatenate([lo_t, lo]), np.concatenate([hi_t, hi]))
        bvh, order = triangle_bvh(np.zeros((0, 9))), skip_link.prim_index
    else:
        bvh, skip_link = triangle_bvh(tri), build_bvh_from_bounds(lo, hi)
        links = skip_link.node_links.copy()
        links[:, 1] += np.int32(n_t)          # (leaf entries are leaf rows: the shapes follow the triangles)
        skip_link = BVH(skip_link.node_bounds, links, skip_link.prim_index)
        order = np.concatenate([bvh.prim_index, n_t + skip_link.prim_index]).astype(np.int32)
    return dict(tris=np.concatenate([tri, np.zeros((n_s, 9))]),
                attrs=np.concatenate([attr, np.array(b.shape_attrs, np.int32).reshape(-1, width)]),
                uvs=np.concatenate([uvs, np.tile(_IDENTITY_UV, (n_s, 1))]),
                normals=None if normals is None else np.concatenate([normals, np.zeros((n_s, 9))]),
                prim_shape=np.concatenate([np.full(n_t, -1), np.arange(n_s)]).astype(np.int32)), order, bvh, skip_link


def _emitter_tables(b: SceneBuilder, tri: np.ndarray, attr: np.ndarray) -> dict:
    """emitter_meta, emitter_geom, emitter_frame, and the emissive triangles
    (leaf order) grouped by emitter with each group's area CDF."""
    meta = np.zeros((len(b.emitters), layout.EMITTER_META_ROW), np.int32)
    geom = np.zeros((len(b.emitters), layout.EMITTER_GEOM_ROW), np.float32)
    light, cdf = [], []
    for e, (kind, g, extra) in enumerate(b.emitters):
        meta[e, layout.META_TYPE] = kind
        meta[e, layout.META_TEXTURE] = extra
        geom[e] = g
        if kind in _AREA_ANALYTIC:
            # the shape's row of shape_data; its area is in geom
            meta[e, layout.META_FIRST], meta[e, layout.META_COUNT], meta[e, layout.META_TEXTURE] = extra, 1, 0
            continue
        if kind != _AREA:
            continue
        idx = np.nonzero(attr[:, layout.ATTR_EMITTER] == e)[0]
        area = 0.5 * np.linalg.norm(np.cross(tri[idx, 3:6] - tri[idx, 0:3], tri[idx, 6:9] - tri[idx, 0:3]), axis=1)
        total = float(area.sum())
        if total <= 0:
            raise SceneError(f"{b.emitter_keys[e]}: the emitting shape has zero area")
        meta[e, layout.META_FIRST], meta[e, layout.META_COUNT] = sum(len(x) for x in light), len(idx)
        geom[e, layout.GEOM_AREA] = total
        light.append(idx.astype(np.int32))
        cdf.append(np.cumsum(area) / total)
    frame = np.zeros((len(b.emitters), layout.EMITTER_FRAME_ROW), np.float32)
    for e, row in b.frames.items():
        frame[e] = row
    return dict(light_tris=np.concatenate(light).astype(np.int32) if light else np.zeros(0, np.int32),
                light_cdf=np.concatenate(cdf).astype(np.float32) if cdf else np.zeros(0, np.float32),
                emitter_meta=meta, emitter_geom=geom, emitter_frame=frame)


_AREA = kemitters.TYPE_ID["area"]
_AREA_ANALYTIC = {kemitters.TYPE_ID[n] for n in ("area_sphere", "area_disk", "area_cylinder")}
