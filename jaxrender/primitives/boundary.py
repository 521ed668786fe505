"""The camera's boundary term in JAX: the film segments it is estimated
on, and the linear primitive running its kernels
(``kernels/integrators/boundary.py``).

Silhouettes come from the edges of every triangle, welded by position
(:func:`edge_topology`, once per scene): two triangles that meet along an
edge share it whether or not their vertices are shared, so a mesh whose
vertices are split at seams (``cube``, UV seams) has each silhouette once.
Per render, :func:`film_segments` keeps the edges that are silhouettes from
the camera's position (both triangles on one side of the plane through
the camera and the edge, or a boundary edge), clips them to the near plane
and to the sample grid, and adds the grid's four sides.

``boundary_jvp_p`` is linear in the camera's tangent and returns the term
on the film canvas (``primitives/film.py``); its transpose runs the adjoint
kernel. Both batch under ``vmap`` like the image's forward primitive.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad

from ..kernels import layout
from ..kernels.integrators import boundary as kernels
from .kernel_call import launch
from .levels import register, vmap_levels


def edge_topology(tris: np.ndarray) -> np.ndarray:
    """(edges, 6) int32 of the triangles ``tris`` (n, 9), welded by exact
    position: per edge its first triangle, the slots (0..2) of its two ends
    there and of that triangle's third vertex, then the second triangle
    (-1: a boundary edge) and its third vertex's slot. An edge of more than
    two triangles becomes one edge per further triangle, boundary edges."""
    tris = np.asarray(tris, np.float32).reshape(-1, 9)
    n = len(tris)
    if n == 0:
        return np.zeros((0, 6), np.int32)
    _, vid = np.unique(tris.reshape(n * 3, 3), axis=0, return_inverse=True)
    vid = vid.reshape(n, 3)
    rows = []
    for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        rows.append(np.stack([np.minimum(vid[:, a], vid[:, b]), np.maximum(vid[:, a], vid[:, b]),
                              np.arange(n), np.full(n, a), np.full(n, b), np.full(n, c)], axis=1))
    e = np.concatenate(rows)
    e = e[e[:, 0] != e[:, 1]]                      # a degenerate triangle's collapsed edge
    e = e[np.lexsort((e[:, 2], e[:, 1], e[:, 0]))]
    same = np.r_[False, (e[1:, 0] == e[:-1, 0]) & (e[1:, 1] == e[:-1, 1])]
    run_start = np.maximum.accumulate(np.where(~same, np.arange(len(e)), 0))
    rank = np.arange(len(e)) - run_start
    out = np.full((len(e), 6), -1, np.int64)
    out[:, :4] = e[:, 2:6]
    # the second of a run pairs with the first; every other one stands alone
    paired = rank == 1
    first = run_start[paired]
    out[first, 4] = e[paired, 2]
    out[first, 5] = e[paired, 5]
    keep = ~paired
    out = out[keep]
    out[out[:, 4] < 0, 5] = 0
    return out.astype(np.int32)


def _vertex(tris, tri, slot):
    """The vertex in ``slot`` (0..2) of triangles ``tri``: (n, 3)."""
    cols = slot[:, None] * 3 + jnp.arange(3)[None, :]
    return jnp.take_along_axis(tris[tri], cols, axis=1)


def film_segments(tris, topology: np.ndarray, camera, film_size: tuple, grid_origin: tuple, grid: tuple):
    """(segments (m, layout.SEGMENT_ROW), cumulative film lengths (m,)) of
    the silhouettes seen by ``camera`` (its kernel row) and the four sides
    of the sample grid (``grid``: (height, width) pixels, its first pixel
    at ``grid_origin`` on a film of ``film_size`` (width, height))."""
    f32 = jnp.float32
    cam = jax.lax.stop_gradient(jnp.asarray(camera, f32).reshape(-1))
    tris = jax.lax.stop_gradient(jnp.asarray(tris, f32))
    gh, gw = grid
    sides = jnp.array([[0, 0, gw, 0], [gw, 0, gw, gh], [gw, gh, 0, gh], [0, gh, 0, 0]], f32)
    film_rows = jnp.concatenate([sides, jnp.zeros((4, 6), f32), jnp.ones((4, 1), f32),
                                 jnp.full((4, 1), layout.SEG_FILM_EDGE, f32)], axis=1)
    if len(topology) == 0:
        return film_rows, jnp.cumsum(jnp.array([gw, gh, gw, gh], f32))
    m = cam[layout.CAMERA_TO_WORLD:layout.CAMERA_TO_WORLD + 16].reshape(4, 4)
    rot, origin = m[:3, :3], m[:3, 3]
    tan_x, tan_y, near = cam[layout.CAMERA_TAN_X], cam[layout.CAMERA_TAN_Y], cam[layout.CAMERA_NEAR_CLIP]
    topo = jnp.asarray(topology)
    boundary = topo[:, 4] < 0
    v0 = _vertex(tris, topo[:, 0], topo[:, 1])
    v1 = _vertex(tris, topo[:, 0], topo[:, 2])
    a3 = _vertex(tris, topo[:, 0], topo[:, 3])
    b3 = _vertex(tris, jnp.maximum(topo[:, 4], 0), topo[:, 5])
    normal = jnp.cross(v0 - origin, v1 - origin)
    sa = jnp.sum(normal * (a3 - origin), axis=1)
    sb = jnp.sum(normal * (b3 - origin), axis=1)
    silhouette = (sa != 0) & (boundary | (sa * sb > 0))

    to_cam = lambda p: (p - origin) @ rot          # noqa: E731 - R^T (p - o) for rows p
    c0, c1 = to_cam(v0), to_cam(v1)
    # clip to the near plane
    z0, z1 = c0[:, 2], c1[:, 2]
    front = (z0 >= near) | (z1 >= near)
    dz = jnp.where(z1 != z0, z1 - z0, 1.0)
    tn = jnp.clip((near - z0) / dz, 0.0, 1.0)
    lo = jnp.where(z0 < near, tn, 0.0)
    hi = jnp.where(z1 < near, tn, 1.0)
    w0, w1 = v0 + (v1 - v0) * lo[:, None], v0 + (v1 - v0) * hi[:, None]
    c0, c1 = to_cam(w0), to_cam(w1)
    fw, fh = film_size

    def project(c):
        z = jnp.where(c[:, 2] > 0, c[:, 2], 1.0)
        x = 0.5 * (1.0 - c[:, 0] / (z * tan_x)) * fw - grid_origin[0]
        y = 0.5 * (1.0 - c[:, 1] / (z * tan_y)) * fh - grid_origin[1]
        return jnp.stack([x, y], axis=1)

    s0, s1 = project(c0), project(c1)
    e = s1 - s0
    # which side of the projected edge the first triangle lies on: a point
    # just off the edge's middle on the positive side of the plane
    mid = 0.5 * (w0 + w1)
    off = mid + normal / jnp.maximum(jnp.linalg.norm(normal, axis=1, keepdims=True), 1e-30) \
        * (1e-3 * jnp.linalg.norm(mid - origin, axis=1, keepdims=True))
    q = project(to_cam(off)) - s0
    positive = jnp.sign(e[:, 0] * q[:, 1] - e[:, 1] * q[:, 0])
    side = -jnp.sign(sa) * positive               # the region behind the edge: away from the triangle

    # Liang-Barsky clipping to the grid [0, gw] x [0, gh]
    t0, t1 = jnp.zeros_like(e[:, 0]), jnp.ones_like(e[:, 0])
    for p_, q_ in ((-e[:, 0], s0[:, 0]), (e[:, 0], gw - s0[:, 0]), (-e[:, 1], s0[:, 1]), (e[:, 1], gh - s0[:, 1])):
        safe = jnp.where(p_ != 0, p_, 1.0)
        r = q_ / safe
        t0 = jnp.where(p_ < 0, jnp.maximum(t0, r), t0)
        t1 = jnp.where(p_ > 0, jnp.minimum(t1, r), t1)
        t0 = jnp.where((p_ == 0) & (q_ < 0), 1.0, t0)
    inside = t1 > t0
    # world points of the clipped ends (perspective-correct along the edge)
    za, zb = c0[:, 2], c1[:, 2]

    def world(tau):
        den = (1.0 - tau) * zb + tau * za
        t = jnp.where(den != 0, tau * za / jnp.where(den != 0, den, 1.0), 0.0)
        return w0 + (w1 - w0) * t[:, None]

    p0, p1 = world(t0), world(t1)
    s0c, s1c = s0 + e * t0[:, None], s0 + e * t1[:, None]
    keep = silhouette & front & inside & (side != 0) & jnp.all(jnp.isfinite(s0c) & jnp.isfinite(s1c), axis=1)
    length = jnp.where(keep, jnp.linalg.norm(s1c - s0c, axis=1), 0.0)
    rows = jnp.concatenate([s0c, s1c, p0, p1, side[:, None],
                            jnp.full((len(topology), 1), layout.SEG_SILHOUETTE, f32)], axis=1)
    rows = jnp.where(keep[:, None], rows, 0.0)
    segments = jnp.concatenate([rows, film_rows]).astype(f32)
    lengths = jnp.concatenate([length, jnp.array([gw, gh, gw, gh], f32)])
    return segments, jnp.cumsum(lengths).astype(f32)


# ---------------------------------------------------------------------------
# The linear primitive: camera tangent -> boundary term on the film canvas
# ---------------------------------------------------------------------------

boundary_jvp_p = Primitive("jaxrender_boundary_jvp")


def _named(config, args):
    names = kernels_inputs_names(config)
    return dict(zip(names, args[:len(names)])), args[len(names):]


def kernels_inputs_names(config) -> tuple:
    return tuple(kernels.inputs(config.integrator, config.structure))


def canvas_shape(config) -> tuple:
    (gh, gw), k = config.film.grid, config.film.footprint
    return (gh + k - 1, gw + k - 1)


def _forward_unbatched(config, *args):
    kw, (d_camera,) = _named(config, args)
    kernel = kernels.forward_kernel(config.integrator, config.structure)
    rows = int(np.prod(canvas_shape(config)))
    out = launch(kernel, (config.film.items,), {"canvas": rows}, preferred_lanes=config.lanes, **kw,
                 d_camera=d_camera)
    return out["canvas"].reshape(canvas_shape(config) + (config.integrator.spectrum.channels,))


def _impl_fn(*args, config, batch_shape, in_batch):
    return vmap_levels(functools.partial(_forward_unbatched, config), in_batch, len(batch_shape))(*args)


def _abstract(*args, config, batch_shape, in_batch):
    return jax.core.ShapedArray(batch_shape + canvas_shape(config) + (config.integrator.spectrum.channels,),
                                np.float32)


register(boundary_jvp_p, _impl_fn, _abstract)


def _adjoint_unbatched(config, *args):
    kw, (ct,) = _named(config, args)
    kernel = kernels.adjoint_kernel(config.integrator, config.structure)
    out = launch(kernel, (config.film.items,), {"grad_camera": 1}, preferred_lanes=config.lanes, **kw,
                 ct_canvas=ct.reshape(-1, ct.shape[-1]))
    return out["grad_camera"]


def _transpose(ct, *args, config, batch_shape, in_batch):
    n = len(args) - 1
    if any(ad.is_undefined_primal(p) for p in args[:n]):
        raise ValueError("the boundary term is linear only in the camera's tangent")
    tangent = args[n]
    if type(ct) is ad.Zero:
        return [None] * n + [ad.Zero(tangent.aval)]
    nb = len(batch_shape)
    fn = vmap_levels(functools.partial(_adjoint_unbatched, config), list(in_batch[:n]) + [(True,) * nb], nb)
    g = fn(*args[:n], ct)
    axes = tuple(k for k in range(nb) if not in_batch[n][k])
    return [None] * n + [jnp.sum(g, axis=axes) if axes else g]


ad.primitive_transposes[boundary_jvp_p] = _transpose


def boundary_tangent(config, kernel_inputs: dict, d_camera):
    """The boundary term's canvas along camera tangent ``d_camera``
    (``kernel_inputs``: the integrator's inputs plus ``segments``,
    ``segment_cdf`` and ``canvas_width``)."""
    names = kernels_inputs_names(config)
    args = [jnp.asarray(kernel_inputs[k]) for k in names] + [d_camera]
    return boundary_jvp_p.bind(*args, config=config, batch_shape=(), in_batch=tuple(() for _ in args))
