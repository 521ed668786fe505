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

from ..ir import bvh_query
from ..kernels import emitters as kemitters
from ..kernels import layout
from .bvh import build_bvh, build_bvh_from_bounds, triangle_bounds
from .errors import SceneError
from .refit import MovingGeometry
from .wide_bvh import build_wide_bvh

if TYPE_CHECKING:
    from .builder import SceneBuilder

# SAH traversal cost (relative to one triangle test) of the BVH that
# triangle-only scenes collapse into their 8-wide BVH. Measured on a 1M
# triangle mesh in the Cornell box (random rays): 1 -> 2 gave 8.5 -> 10.3
# Mrays/s; 1.5 and 3 were slower than 2.
WIDE_BVH_C_TRAV = 2.0
# Without texture coordinates an analytic hit reports its (u, v) where a
# triangle reports (b1, b2): its UV row is the identity map.
_IDENTITY_UV = (0.0, 0.0, 1.0, 0.0, 0.0, 1.0)


def scene_fields(b: SceneBuilder) -> dict:
    """The keyword arguments of ``Scene`` for everything ``b`` loaded."""
    if not b.meshes and not b.shapes:
        raise SceneError("the scene has no shapes")
    prims, bvh = _primitives(b)
    order = bvh.prim_index
    tri = prims["tris"][order].astype(np.float32)
    attr = prims["attrs"][order, :layout.ATTR_ROW]
    media = prims["attrs"][order, layout.ATTR_ROW:]
    tri_uv = prims["uvs"][order].astype(np.float32)
    if not np.all(np.isfinite(tri_uv)):
        raise SceneError("scene texture coordinates have NaN or infinite values")
    normals, prim_shape = prims["normals"], prims["prim_shape"]
    camera_key, camera = b.sensors[0]
    emitters = _emitter_tables(b, tri, attr)
    wide = None if b.shapes else _wide_bvh(bvh, tri)
    return dict(camera=camera, integrator=b.integrator, triangles=tri, tri_attr=attr,
                bvh_bounds=bvh.node_bounds.astype(np.float32), bvh_links=bvh.node_links.astype(np.int32),
                **emitters, env_emitter=b.env, camera_key=camera_key, params=b.params,
                prim_media=media if (media >= 0).any() else np.zeros((0, layout.PRIM_MEDIA_ROW), np.int32),
                media=b.media, bsdfs=b.bsdfs, emitter_keys=b.emitter_keys, nondifferentiable=b.nondiff, frozen=b.frozen,
                unexposed=b.unexposed,
                tri_uv=tri_uv, textures=b.textures, bsdf_slots=b.bsdf_slots,
                bsdf_nesting=max(b.bsdf_depth, default=0), env_texture=b.env_texture, sunsky=b.sunsky,
                env_frame=b.env_frame.astype(np.float32),
                tri_normals=normals[order].astype(np.float32) if normals is not None else np.zeros((0, 9), np.float32),
                prim_shape=prim_shape[order] if prim_shape is not None else np.zeros((0,), np.int32),
                shape_data=np.array([s.row() for s in b.shapes], np.float32).reshape(-1, layout.SHAPE_ROW),
                shapes=b.shapes, sensors=b.sensors, wide_bvh=wide,
                moving=_moving(b, prims, order, bvh, wide, attr, emitters["emitter_meta"]))


def _moving(b: SceneBuilder, prims: dict, order: np.ndarray, bvh, wide, attr: np.ndarray,
            meta: np.ndarray) -> MovingGeometry | None:
    """The refit plan of a scene with meshes placed by parameters (None without)."""
    if not any(m[4] is not None for m in b.meshes) and not any(s.param is not None for s in b.shapes):
        return None
    lights = [(e, np.nonzero(attr[:, layout.ATTR_EMITTER] == e)[0]) for e in range(len(meta))
              if meta[e, layout.META_TYPE] == _AREA]
    n_tris = sum(len(m[0]) for m in b.meshes)
    normals = prims["normals"]
    shape_lights = [(e, int(meta[e, layout.META_FIRST])) for e in range(len(meta))
                    if meta[e, layout.META_TYPE] in _AREA_ANALYTIC]
    return MovingGeometry.plan([m[0] for m in b.meshes], [m[4] for m in b.meshes],
                               None if normals is None else normals[:n_tris].astype(np.float32), order, n_tris,
                               b.shapes, bvh, wide, lights, shape_lights)


def _primitives(b: SceneBuilder) -> tuple[dict, object]:
    """Every primitive's rows in load order (tris, attrs, uvs; normals and
    prim_shape or None when no primitive needs them) and the BVH over them."""
    tri = np.concatenate([m[0] for m in b.meshes]).astype(np.float64) if b.meshes else np.zeros((0, 9))
    width = layout.ATTR_ROW + layout.PRIM_MEDIA_ROW
    attr = np.concatenate([m[1] for m in b.meshes]).astype(np.int32) if b.meshes else np.zeros((0, width), np.int32)
    if not np.all(np.isfinite(tri)):
        raise SceneError("scene geometry has NaN or infinite coordinates")
    verts = tri.reshape(-1, 3).astype(np.float32)
    faces = np.arange(len(verts), dtype=np.int32).reshape(-1, 3)
    uvs = np.concatenate([m[2] for m in b.meshes]) if b.meshes else np.zeros((0, 6))
    smooth = any(m[3] is not None for m in b.meshes)
    normals = np.concatenate([np.zeros((len(m[0]), 9)) if m[3] is None else m[3] for m in b.meshes]) \
        if smooth else None
    if not b.shapes:
        # The kernels test a leaf's (up to 4) triangles in one 4-wide step,
        # so a traversal step is priced at two triangle tests: fuller leaves,
        # a smaller tree (and fewer cache misses) than the default 1:1.
        bvh = build_bvh(verts, faces, c_trav=WIDE_BVH_C_TRAV)
        return dict(tris=tri, attrs=attr, uvs=uvs, normals=normals, prim_shape=None), bvh
    # Analytic shapes are BVH primitives after the triangles, boxed by their extent.
    lo_t, hi_t = triangle_bounds(verts, faces)
    boxes = [sh.bounds() for sh in b.shapes]
    bvh = build_bvh_from_bounds(np.concatenate([lo_t, [bx[0] for bx in boxes]]),
                                np.concatenate([hi_t, [bx[1] for bx in boxes]]))
    n_t, n_s = len(tri), len(b.shapes)
    return dict(tris=np.concatenate([tri, np.zeros((n_s, 9))]),
                attrs=np.concatenate([attr, np.array(b.shape_attrs, np.int32).reshape(-1, width)]),
                uvs=np.concatenate([uvs, np.tile(_IDENTITY_UV, (n_s, 1))]),
                normals=None if normals is None else np.concatenate([normals, np.zeros((n_s, 9))]),
                prim_shape=np.concatenate([np.full(n_t, -1), np.arange(n_s)]).astype(np.int32)), bvh


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


def _wide_bvh(bvh, tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The buffers of the 8-wide BVH the kernels query (ir.bvh_query),
    checked here because the traversal routine reads its indices through
    raw pointers."""
    wide = build_wide_bvh(bvh, tris)
    wide.check()
    stack = bvh_query.STACK_SIZE      # read at each call: tests shrink it to reach this error
    if wide.stack_need > stack:
        raise SceneError(f"the scene's BVH needs a traversal stack of {wide.stack_need} entries, more than "
                         f"the {stack} the kernels have: the geometry is too degenerate to build a usable BVH")
    return wide.packed()


_AREA = kemitters.TYPE_ID["area"]
_AREA_ANALYTIC = {kemitters.TYPE_ID[n] for n in ("area_sphere", "area_disk", "area_cylinder")}
