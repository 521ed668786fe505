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
from ..kernels.context import MOVING
from ..kernels.integrators import boundary as kernels
from ..kernels.shapes import KIND as SHAPE_KIND
from . import film
from .kernel_call import launch
from .levels import register, sum_unmapped, vmap_levels
from .staged import staged


def edge_topology(tris: np.ndarray, last: np.ndarray | None = None) -> np.ndarray:
    """(edges, 6) int32 of the triangles ``tris`` (n, 9), welded by exact
    position: per edge its first triangle, the slots (0..2) of its two ends
    there and of that triangle's third vertex, then the second triangle
    (-1: a boundary edge) and its third vertex's slot. An edge of more than
    two triangles becomes one edge per further triangle, boundary edges.
    Triangles flagged in ``last`` (per triangle; the scene's emitters) come
    after the others of their edge: under ``hide_emitters`` the film
    boundary follows an edge's first triangle, the shown one."""
    tris = np.asarray(tris, np.float32).reshape(-1, 9)
    n = len(tris)
    if n == 0:
        return np.zeros((0, 6), np.int32)
    order = np.zeros(n, np.int64) if last is None else np.asarray(last, bool).astype(np.int64)
    _, vid = np.unique(tris.reshape(n * 3, 3), axis=0, return_inverse=True)
    vid = vid.reshape(n, 3)
    rows = []
    for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        rows.append(np.stack([np.minimum(vid[:, a], vid[:, b]), np.maximum(vid[:, a], vid[:, b]),
                              np.arange(n), np.full(n, a), np.full(n, b), np.full(n, c), order], axis=1))
    e = np.concatenate(rows)
    e = e[e[:, 0] != e[:, 1]]                      # a degenerate triangle's collapsed edge
    e = e[np.lexsort((e[:, 2], e[:, 6], e[:, 1], e[:, 0]))]
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


def instance_edges(tris: np.ndarray, groups: np.ndarray, instance_group: np.ndarray, limit: int) -> tuple | None:
    """The welded edges (:func:`edge_topology` rows, triangle indices into
    ``tris``) of each shared shapegroup's triangles, in group space, one
    copy per instance, and the instance (row of ``instances``) of each:
    (topology (P, 6), instance (P,)); None where P would exceed ``limit``.
    A group's rows run from its first (``layout.GROUP_FIRST_ROW``) to the
    next group's."""
    first = np.asarray(groups, np.int64)[:, layout.GROUP_FIRST_ROW]
    end = np.r_[first[1:], len(tris)]
    per_group = []
    for lo, hi in zip(first, end):
        topo = edge_topology(np.asarray(tris)[lo:hi]).astype(np.int64)
        topo[:, 0] += lo
        topo[:, 4] = np.where(topo[:, 4] >= 0, topo[:, 4] + lo, -1)
        per_group.append(topo.astype(np.int32))
    groups_of = np.asarray(instance_group, np.int64)
    if sum(len(per_group[g]) for g in groups_of) > limit:
        return None
    topology = [per_group[g] for g in groups_of]
    owner = [np.full(len(per_group[g]), i, np.int32) for i, g in enumerate(groups_of)]
    if not topology:
        return np.zeros((0, 6), np.int32), np.zeros(0, np.int32)
    return np.concatenate(topology), np.concatenate(owner)


def instance_edge_rows(topology, owner) -> np.ndarray:
    """The kernels' ``instance_edges`` buffer: :func:`instance_edges`'s
    rows (P, 6) with each one's instance appended (P, 7)."""
    return np.concatenate([np.asarray(topology, np.int32).reshape(-1, 6),
                           np.asarray(owner, np.int32).reshape(-1, 1)], axis=1)


def _placed_copies(tris, instanced):
    """(the two ends, the first triangle's third vertex, the second's) of
    the shared shapegroups' edge copies ``instanced`` (((topology, owner),
    the ``instances`` buffer), :func:`film_segments`'), in world space."""
    (itopo, owner), rows = instanced
    itopo = jnp.asarray(itopo)
    to_world = jax.lax.stop_gradient(jnp.asarray(rows, jnp.float32))[:, layout.INSTANCE_TO_WORLD:
                                                                     layout.INSTANCE_TO_WORLD + 12]
    m_inst = _rows(to_world, len(to_world))[jnp.asarray(owner)]
    return tuple(_apply(m_inst, v) for v in _edge_vertices(tris, itopo))


def _vertex(tris, tri, slot):
    """The vertex in ``slot`` (0..2) of triangles ``tri``: (n, 3)."""
    cols = slot[:, None] * 3 + jnp.arange(3)[None, :]
    return jnp.take_along_axis(tris[tri], cols, axis=1)


def _edge_vertices(tris, topo):
    """(the two ends, the first triangle's third vertex, the second's) of
    the welded edges ``topo`` (:func:`edge_topology` rows; a boundary edge's
    second triangle reads triangle 0)."""
    return (_vertex(tris, topo[:, 0], topo[:, 1]), _vertex(tris, topo[:, 0], topo[:, 2]),
            _vertex(tris, topo[:, 0], topo[:, 3]), _vertex(tris, jnp.maximum(topo[:, 4], 0), topo[:, 5]))


def _shown_shapes(n: int, hidden, prim_shape):
    """Per analytic shape (of ``n``), whether camera rays meet it: not where
    its leaf primitive is ``hidden`` (``prim_shape``: each leaf's shape row, -1 none)."""
    ps = jnp.asarray(prim_shape, jnp.int32)
    return jnp.ones(n, bool).at[jnp.where(ps >= 0, ps, n)].set(~jnp.asarray(hidden, bool), mode="drop")


def _rows(matrix_block, n):
    """A (shapes, 12) block of 3x4 matrices as (shapes, 3, 4)."""
    return matrix_block.reshape(n, 3, 4)


def _apply(m, p):
    """Affine 3x4 matrices ``m`` (n, 3, 4) applied to points ``p`` (n, ..., 3)."""
    return jnp.einsum("nij,n...j->n...i", m[:, :, :3], p) + m[:, None, :, 3] if p.ndim == 3 else \
        jnp.einsum("nij,nj->ni", m[:, :, :3], p) + m[:, :, 3]


def _curve_points(shape_data, which, origin, phi):
    """World points (n, k, 3) of curve records (``kernels/integrators/
    boundary.curve_point``) at angles ``phi`` (k,)."""
    n = shape_data.shape[0]
    to_world = _rows(shape_data[:, layout.SHAPE_TO_WORLD:layout.SHAPE_TO_WORLD + 12], n)
    c = to_world[:, :, 3]
    r = shape_data[:, layout.SHAPE_RADIUS]
    axis = jnp.broadcast_to(origin, c.shape) - c
    d2 = jnp.maximum(jnp.sum(axis * axis, axis=1), 1e-30)
    k = r * r / d2
    rho = r * jnp.sqrt(jnp.maximum(1.0 - k, 0.0))
    a = axis / jnp.sqrt(d2)[:, None]
    helper = jnp.where(jnp.abs(a[:, :1]) > 0.9, jnp.array([[0.0, 1.0, 0.0]]), jnp.array([[1.0, 0.0, 0.0]]))
    e1 = jnp.cross(a, helper)
    e1 = e1 / jnp.linalg.norm(e1, axis=1, keepdims=True)
    e2 = jnp.cross(a, e1)
    cos, sin = jnp.cos(phi)[None, :, None], jnp.sin(phi)[None, :, None]
    sphere = (c + axis * k[:, None])[:, None, :] + (e1[:, None, :] * cos + e2[:, None, :] * sin) * rho[:, None, None]
    z = jnp.where(which == 3, 1.0, 0.0)[:, None, None] * jnp.ones_like(cos)
    rim = _apply(to_world, jnp.concatenate([cos * jnp.ones((n, 1, 1)), sin * jnp.ones((n, 1, 1)), z], axis=2))
    # a cylinder's silhouette lines (4 / 5): the tube's tangents through the
    # origin's projection on its cross-section, at height phi / 2 pi
    to_object = _rows(shape_data[:, layout.SHAPE_TO_OBJECT:layout.SHAPE_TO_OBJECT + 12], n)
    o = _apply(to_object, jnp.broadcast_to(origin, (n, 3)))
    r2 = o[:, 0] ** 2 + o[:, 1] ** 2
    half = jnp.arccos(jnp.clip(1.0 / jnp.sqrt(jnp.maximum(r2, 1.0)), -1.0, 1.0))
    angle = jnp.arctan2(o[:, 1], o[:, 0]) + jnp.where(which == 4, half, -half)
    ring = jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=1)[:, None, :] * jnp.ones_like(cos)
    line = _apply(to_world, jnp.concatenate([ring, phi[None, :, None] / (2.0 * np.pi) * jnp.ones((n, 1, 1))],
                                            axis=2))
    out = jnp.where((which >= 4)[:, None, None], line, rim)
    return jnp.where((which == 0)[:, None, None], sphere, out)


CURVE_POINTS = 64      # the polygon whose film length apportions samples to a curve record
# The shape kind each curve record (its ``which``, 0-5) belongs to: a
# sphere's silhouette, a disk's rim, a cylinder's two rims and two
# silhouette lines (``kernels/integrators/boundary.curve_point``).
_CURVE_KINDS = ("sphere", "disk", "cylinder", "cylinder", "cylinder", "cylinder")


def film_edges(grid: tuple):
    """(segments (4, layout.SEGMENT_ROW), cumulative lengths) of the four
    sides of the sample grid (``grid``: (height, width) pixels) alone: a
    thin lens's silhouettes are sampled per aperture point, in the kernel."""
    f32 = jnp.float32
    gh, gw = grid
    sides = jnp.array([[0, 0, gw, 0], [gw, 0, gw, gh], [gw, gh, 0, gh], [0, gh, 0, 0]], f32)
    rows = jnp.concatenate([sides, jnp.zeros((4, 6), f32), jnp.ones((4, 1), f32),
                            jnp.full((4, 1), layout.SEG_FILM_EDGE, f32), jnp.full((4, 1), -1.0, f32),
                            jnp.zeros((4, 4), f32), jnp.full((4, 1), -1.0, f32)], axis=1)
    return rows, jnp.cumsum(jnp.array([gw, gh, gw, gh], f32))


@staged
def lens_edge_cdf(tris, topology: np.ndarray, camera, shape_data=None, hidden=None, prim_shape=None,
                  instanced=None):
    """Cumulative weights (edges + shapes,) by which a thin lens's boundary
    samples pick a welded edge (``topology`` rows) or an analytic shape's
    outline (``shape_data`` rows, after the edges): 0 for an edge that is a
    silhouette from no point of the aperture, else its length over its
    distance from the lens (about the angle it spans). Both third
    vertices' sides of the plane through the edge and an aperture point x
    are linear in x, so over the aperture disk each side is an interval:
    an edge whose two intervals keep opposite signs is never a silhouette.
    Outlines are always candidates (2 pi times the shape's largest scale,
    over its distance). ``hidden``, ``prim_shape``: as
    :func:`film_segments` has them (emitters camera rays pass through):
    an edge whose first triangle is hidden and a hidden shape's outline
    are none; the kernel takes a hidden second triangle for no triangle.
    ``instanced``: as :func:`film_segments` has it: the shared shapegroups'
    edge copies, weighed as the edges are, after them (before the shapes)."""
    f32 = jnp.float32
    cam = jax.lax.stop_gradient(jnp.asarray(camera, f32).reshape(-1))
    tris = jax.lax.stop_gradient(jnp.asarray(tris, f32))
    m = cam[layout.CAMERA_TO_WORLD:layout.CAMERA_TO_WORLD + 16].reshape(4, 4)
    origin, ax, ay = m[:3, 3], m[:3, 0], m[:3, 1]
    radius = cam[layout.CAMERA_APERTURE]
    topo = jnp.asarray(topology).reshape(-1, 6)
    v0, v1, a3, b3 = _edge_vertices(tris, topo)
    alone = topo[:, 4] < 0
    own = len(topo)
    if instanced is not None and len(instanced[0][0]):
        # (shapegroups hold no emitters: no copy is hidden)
        v0, v1, a3, b3 = (jnp.concatenate([a, c]) for a, c in zip((v0, v1, a3, b3), _placed_copies(tris, instanced)))
        alone = jnp.concatenate([alone, jnp.asarray(instanced[0][0])[:, 4] < 0])
    e = v1 - v0

    def side(third):
        """The interval over the aperture of the third vertex's side,
        -n . (x - v0) with n = e x (third - v0), widened by float error
        (an edge beside a degenerate triangle stays a candidate)."""
        n = jnp.cross(e, third - v0)
        centre = -jnp.sum(n * (origin - v0), axis=1)
        spread = radius * jnp.sqrt(jnp.sum(n * ax, axis=1) ** 2 + jnp.sum(n * ay, axis=1) ** 2)
        # (relative to the lengths, not to n: beside a degenerate triangle either side is rounding's)
        slack = 1e-5 * jnp.linalg.norm(e, axis=1) * jnp.linalg.norm(third - v0, axis=1) \
            * (jnp.linalg.norm(origin - v0, axis=1) + radius)
        return centre - spread - slack, centre + spread + slack

    a_lo, a_hi = side(a3)
    b_lo, b_hi = side(b3)
    apart = ((a_hi < 0) & (b_lo > 0)) | ((a_lo > 0) & (b_hi < 0))
    candidate = alone | ~apart
    if hidden is not None:
        hidden = jnp.asarray(hidden, bool)
        candidate = candidate.at[:own].set((candidate[:own] | hidden[jnp.maximum(topo[:, 4], 0)])
                                           & ~hidden[topo[:, 0]])
    mid = 0.5 * (v0 + v1)
    dist = jnp.maximum(jnp.linalg.norm(mid - origin, axis=1), 1e-6)
    weights = [jnp.where(candidate, jnp.linalg.norm(e, axis=1) / dist, 0.0)]
    if shape_data is not None and len(shape_data):
        sd = jax.lax.stop_gradient(jnp.asarray(shape_data, f32))
        m3 = _rows(sd[:, layout.SHAPE_TO_WORLD:layout.SHAPE_TO_WORLD + 12], len(sd))
        scale = jnp.max(jnp.linalg.norm(m3[:, :, :3], axis=1), axis=1)
        dist = jnp.maximum(jnp.linalg.norm(m3[:, :, 3] - origin, axis=1), 1e-6)
        shown = jnp.ones(len(sd), bool) if hidden is None else _shown_shapes(len(sd), hidden, prim_shape)
        weights.append(jnp.where(shown, 2.0 * np.pi * scale / dist, 0.0))
    w = jnp.concatenate(weights).astype(f32)
    if w.shape[0] == 0:     # (the kernel reads the last entry: at least one, a total of 0)
        w = jnp.zeros(1, f32)
    return jnp.cumsum(jnp.where(jnp.isfinite(w), w, 0.0)).astype(f32)


def _silhouettes(v0, v1, a3, b3, boundary, normal, rays):
    """Which welded edges (ends v0, v1; third vertices a3, b3 of their two
    triangles, ``boundary``: one triangle) are silhouettes seen along
    ``rays`` (per edge, towards it), ``normal`` the normal of the plane
    through the edge and the rays: both triangles on one side of it. And
    per edge the side value of the occluding triangle (its sign: where it
    lies) and whether that is the second one: a triangle seen edge-on (its
    third vertex in the plane: an axis-aligned box under rays along a
    diagonal) has no side, and of its two edges along the rays the one
    nearer their source bounds the outline, on its other triangle's side."""
    sa = jnp.sum(normal * (a3 - v0), axis=1)
    sb = jnp.sum(normal * (b3 - v0), axis=1)
    scale = jnp.linalg.norm(normal, axis=1)
    on_a = jnp.abs(sa) <= 1e-6 * scale * jnp.linalg.norm(a3 - v0, axis=1)
    on_b = ~boundary & (jnp.abs(sb) <= 1e-6 * scale * jnp.linalg.norm(b3 - v0, axis=1))
    along = (v1 - v0) / jnp.maximum(jnp.linalg.norm(v1 - v0, axis=1, keepdims=True), 1e-30)
    across = rays - along * jnp.sum(rays * along, axis=1, keepdims=True)    # (in the edge-on triangle's plane)
    nearer = jnp.sum(jnp.where(on_a[:, None], a3 - v0, b3 - v0) * across, axis=1) > 0
    crossing = jnp.where(on_a | on_b, (on_a != on_b) & nearer, sa * sb > 0)
    flip = on_a & ~on_b & ~boundary
    side = jnp.where(flip, sb, sa)
    return (side != 0) & ~(on_a & boundary) & (boundary | crossing), side, flip


@staged
def film_segments(tris, topology: np.ndarray, camera, film_size: tuple, grid_origin: tuple, grid: tuple,
                  shape_data=None, hidden=None, prim_shape=None, orthographic: bool = False, instanced=None,
                  moved=None):
    """(segments (m, layout.SEGMENT_ROW), cumulative film lengths (m,)) of
    the silhouettes seen by ``camera`` (its kernel row) and the four sides
    of the sample grid (``grid``: (height, width) pixels, its first pixel
    at ``grid_origin`` on a film of ``film_size`` (width, height)).
    ``shape_data``: the analytic shapes' rows (their silhouettes and rims
    are curve records, ``shapes.curve_point``'s). ``hidden``: per leaf
    primitive, whether camera rays pass through it (emitters under
    hide_emitters), so it has no silhouette and a neighbour's edge along it
    is a boundary (``prim_shape``: each leaf primitive's analytic shape row
    or -1, needed with ``shape_data``). An edge whose first triangle is
    hidden is not followed: the topology puts the shown one first
    (:func:`edge_topology`'s ``last``). ``orthographic``: the camera
    projects along its axis (``kernels/sensors/orthographic.py``), its
    to_world may scale, and silhouettes are those seen along the axis.
    ``instanced``: (the shared shapegroups' edges per instance and their
    instances, :func:`instance_edges`; the ``instances`` buffer), whose
    group-space edges are placed by each instance's to_world (their
    segments follow the group's triangle placed by the instance).
    ``moved``: (leaf rows of triangles, items as :func:`moving_items`
    numbers them, ``shape_data`` rows, the world corners of moving shared
    instances' boxes or None, :func:`moving_instance_corners`) of the
    only geometry that moves (the camera does not), or None (anything may).
    The term vanishes wherever the film sees no moving point on either
    side of a curve (both velocities are zero there), so segments of
    static edges and the film's sides keep only their parts inside the
    film box of the moving geometry (:func:`_moving_box`), and a static
    shape's outline is kept whole or dropped by its own box."""
    f32 = jnp.float32
    tris = jax.lax.stop_gradient(jnp.asarray(tris, f32))
    gh, gw = grid
    film_rows, _ = film_edges(grid)
    origin, view, to_cam, project, near = _camera_maps(camera, film_size, grid_origin, orthographic)

    # straight edges: the triangles' welded edges
    topo = jnp.asarray(topology).reshape(-1, 6)
    # what the term can see move: the film box of the moving geometry (the whole film: None)
    box = None
    if moved is not None:
        items, moving_shapes = np.asarray(moved[1]), np.asarray(moved[2])
        box = _moving_box(tris, shape_data, (moved[0], moving_shapes, moved[3]), to_cam, project, near)
    v0, v1, a3, b3 = _edge_vertices(tris, topo)
    boundary = topo[:, 4] < 0
    usable = jnp.ones(len(topology), bool)
    if hidden is not None:
        hidden = jnp.asarray(hidden, bool)
        usable = ~hidden[topo[:, 0]]
        boundary = boundary | hidden[jnp.maximum(topo[:, 4], 0)]
    refs = jnp.stack([topo[:, 0], topo[:, 1], topo[:, 2]], axis=1).astype(f32)     # triangle, slots of the ends
    instance = jnp.full(len(topo), -1.0, f32)
    if instanced is not None and len(instanced[0][0]):
        (itopo, owner), _ = instanced
        itopo = jnp.asarray(itopo)
        v0, v1, a3, b3 = (jnp.concatenate([a, c]) for a, c in zip((v0, v1, a3, b3), _placed_copies(tris, instanced)))
        boundary = jnp.concatenate([boundary, itopo[:, 4] < 0])
        usable = jnp.concatenate([usable, jnp.ones(len(itopo), bool)])
        refs = jnp.concatenate([refs, itopo[:, :3].astype(f32)])
        instance = jnp.concatenate([instance, jnp.asarray(owner, f32)])
    curves = []
    if shape_data is not None and shape_data.shape[0] > 0:
        shape_data = jax.lax.stop_gradient(jnp.asarray(shape_data, f32))
        kind = shape_data[:, layout.SHAPE_KIND].astype(jnp.int32)
        shown = jnp.ones(len(kind), bool) if hidden is None else _shown_shapes(len(kind), hidden, prim_shape)
        # curve records: (shape row, which curve) for each sphere, disk, a
        # cylinder's rims and silhouette lines; every shape row under each
        # of the six curves (one array, so XLA compiles the curve code once),
        # present where its kind has that curve
        curves = _CURVE_KINDS
        which_of = np.repeat(np.arange(len(curves)), len(kind))
        idx = jnp.asarray(np.tile(np.arange(len(kind)), len(curves)))
        present = jnp.concatenate([(kind == SHAPE_KIND[wanted]) & shown for wanted in curves])
    n_edges = v0.shape[0]

    # the plane of the edge and the rays that graze it
    normal = jnp.cross(v1 - v0, jnp.broadcast_to(view, v0.shape)) if orthographic else jnp.cross(v0 - origin,
                                                                                                  v1 - origin)
    silhouette, sa, _ = _silhouettes(v0, v1, a3, b3, boundary, normal,
                                     jnp.broadcast_to(view, v0.shape) if orthographic else v0 - origin)
    silhouette = usable & silhouette
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

    # clipped to the grid [0, gw] x [0, gh], a static edge to the moving geometry's box too
    clip = (0.0, 0.0, gw, gh)
    if box is not None:
        edge_moves = np.zeros(n_edges, bool)      # (the own edges, then the shared instances' copies)
        edge_moves[items[items < n_edges]] = True
        clip = tuple(jnp.where(edge_moves, g, c) for g, c in zip(clip, _within_grid(box, gw, gh)))
    t0, t1, inside = _clip_to_box(s0, e, clip)
    # world points of the clipped ends (perspective-correct along the edge)
    za, zb = (jnp.ones_like(c0[:, 2]),) * 2 if orthographic else (c0[:, 2], c1[:, 2])

    def along(tau):
        """The parameter along the near-clipped edge of film position tau."""
        den = (1.0 - tau) * zb + tau * za
        return jnp.where(den != 0, tau * za / jnp.where(den != 0, den, 1.0), 0.0)

    a0, a1 = along(t0), along(t1)
    p0, p1 = w0 + (w1 - w0) * a0[:, None], w0 + (w1 - w0) * a1[:, None]
    # where the segment's ends lie along the whole edge
    e_lo, e_hi = lo + (hi - lo) * a0, lo + (hi - lo) * a1
    s0c, s1c = s0 + e * t0[:, None], s0 + e * t1[:, None]
    keep = silhouette & front & inside & (side != 0) & jnp.all(jnp.isfinite(s0c) & jnp.isfinite(s1c), axis=1)
    length = jnp.where(keep, jnp.linalg.norm(s1c - s0c, axis=1), 0.0)
    rows = jnp.concatenate([s0c, s1c, p0, p1, side[:, None],
                            jnp.full((n_edges, 1), layout.SEG_SILHOUETTE, f32), refs,
                            e_lo[:, None], e_hi[:, None], instance[:, None]], axis=1)
    parts, lengths = [jnp.where(keep[:, None], rows, 0.0)], [length]

    phi = jnp.linspace(0.0, 2.0 * np.pi, CURVE_POINTS + 1)
    centres = None if shape_data is None else shape_data[:, layout.SHAPE_TO_WORLD + 3:layout.SHAPE_TO_WORLD + 12:4]
    # where the outlines are seen from: the camera, or far back along an orthographic one's axis
    eye = centres - view * 1e6 if orthographic and centres is not None else origin
    if curves:
        which = jnp.asarray(which_of)
        shape_rows = shape_data[idx]
        from_eye = eye[idx] if eye.ndim == 2 else eye      # (an orthographic camera's: per shape)
        pts = _curve_points(shape_rows, which, from_eye, phi)
        c = to_cam(pts)
        s = project(c)
        ok = (c[..., 2] > near)
        seg_ok = ok[:, 1:] & ok[:, :-1]
        inside = lambda v: (v[..., 0] >= 0) & (v[..., 0] <= gw) & (v[..., 1] >= 0) & (v[..., 1] <= gh)  # noqa: E731
        seg_ok &= inside(s[:, 1:]) | inside(s[:, :-1])
        seg_len = jnp.where(seg_ok, jnp.linalg.norm(s[:, 1:] - s[:, :-1], axis=-1), 0.0)
        valid_curve = present & jnp.all(jnp.isfinite(seg_len), axis=1)
        # the camera inside a sphere sees no silhouette
        r = shape_rows[:, layout.SHAPE_RADIUS]
        valid_curve &= (which != 0) | (jnp.sum((from_eye - centres[idx]) ** 2, axis=1) > r * r * (1.0 + 1e-4))
        # nor inside a cylinder's (infinite) tube its silhouette lines
        to_object = _rows(shape_rows[:, layout.SHAPE_TO_OBJECT:layout.SHAPE_TO_OBJECT + 12], len(which_of))
        o = _apply(to_object, jnp.broadcast_to(from_eye, (len(which_of), 3)))
        valid_curve &= (which < 4) | (o[:, 0] ** 2 + o[:, 1] ** 2 > 1.0 + 1e-4)
        if box is not None:
            # a static outline is sampled whole where its polygon's box meets the moving box
            moves = np.zeros(shape_data.shape[0], bool)
            moves[moving_shapes] = True
            moves = np.tile(moves, len(curves))
            s_lo, s_hi = jnp.min(s, axis=1), jnp.max(s, axis=1)
            meets = ((s_hi[:, 0] >= box[0]) & (s_lo[:, 0] <= box[2]) & (s_hi[:, 1] >= box[1]) & (s_lo[:, 1] <= box[3])
                     & jnp.all(ok, axis=1))
            valid_curve &= moves | meets | ~jnp.all(ok, axis=1)
        curve_len = jnp.where(valid_curve, jnp.sum(jnp.where(jnp.isfinite(seg_len), seg_len, 0.0), axis=1), 0.0)
        record = jnp.zeros((len(which_of), layout.SEGMENT_ROW), f32)
        record = record.at[:, layout.SEG_SHAPE].set(idx.astype(f32)).at[:, layout.SEG_CURVE].set(which.astype(f32))
        record = record.at[:, layout.SEG_SIDE].set(1.0).at[:, layout.SEG_KIND].set(layout.SEG_CURVE_KIND)
        record = record.at[:, layout.SEG_TRI].set(-1.0).at[:, layout.SEG_INSTANCE].set(-1.0)
        parts.append(record)
        lengths.append(curve_len)
    film_rows, side_lengths = _sides_within(film_rows, grid, box)
    segments = jnp.concatenate(parts + [film_rows]).astype(f32)
    lengths = jnp.concatenate(lengths + [side_lengths])
    return segments, jnp.cumsum(lengths).astype(f32)


def _camera_maps(camera, film_size: tuple, grid_origin: tuple, orthographic: bool = False):
    """(position, unit axis, to camera space, camera space to grid pixels,
    near clip) of ``camera`` (its kernel row), without derivatives: the
    pinhole's projection (a thin lens's from its aperture's centre)."""
    f32 = jnp.float32
    cam = jax.lax.stop_gradient(jnp.asarray(camera, f32).reshape(-1))
    m = cam[layout.CAMERA_TO_WORLD:layout.CAMERA_TO_WORLD + 16].reshape(4, 4)
    rot, origin = m[:3, :3], m[:3, 3]
    tan_x, tan_y, near = cam[layout.CAMERA_TAN_X], cam[layout.CAMERA_TAN_Y], cam[layout.CAMERA_NEAR_CLIP]
    fw, fh = film_size
    inv = jnp.linalg.inv(rot) if orthographic else rot.T
    view = rot[:, 2] / jnp.linalg.norm(rot[:, 2])      # (an orthographic camera's unit axis)

    def to_cam(p):
        return (p - origin) @ inv.T        # to_world^-1 (p - o) for rows p

    def project(c):
        z = jnp.where(c[..., 2] > 0, c[..., 2], 1.0) if not orthographic else 1.0
        x = 0.5 * (1.0 - c[..., 0] / (z * tan_x)) * fw - grid_origin[0]
        y = 0.5 * (1.0 - c[..., 1] / (z * tan_y)) * fh - grid_origin[1]
        return jnp.stack([x, y], axis=-1)
    return origin, view, to_cam, project, near


def _sides_within(film_rows, grid: tuple, box):
    """(the film's sides ``film_rows``, their lengths): where ``box`` is
    not None, only their parts inside it."""
    gh, gw = grid
    side_lengths = jnp.array([gw, gh, gw, gh], jnp.float32)
    if box is None:
        return film_rows, side_lengths
    a, e_side = film_rows[:, 0:2], film_rows[:, 2:4] - film_rows[:, 0:2]
    u0, u1, seen = _clip_to_box(a, e_side, box)
    film_rows = film_rows.at[:, 0:2].set(a + e_side * u0[:, None]).at[:, 2:4].set(a + e_side * u1[:, None])
    return film_rows, jnp.where(seen, (u1 - u0) * side_lengths, 0.0)


@staged
def lens_film_sides(tris, camera, film_size: tuple, grid_origin: tuple, grid: tuple, shape_data=None,
                    moved=None):
    """(segments, cumulative lengths) of a thin lens's film boundary on
    its curves: the sample grid's sides (:func:`film_edges`; its
    silhouettes are sampled per aperture point, in the kernel). Where
    only the geometry ``moved`` moves ((leaf rows, shape rows, instance
    corners or None), as :func:`_moving_box` takes it),
    the sides keep their parts inside that geometry's film box grown by
    the widest blur of its points: seen from aperture point e, a point at
    depth z lands e (1 / focus - 1 / z) / tan from where the pinhole sees
    it, and the hull of the points' images from e holds what e sees of the
    geometry."""
    film_rows, _ = film_edges(grid)
    box = None
    if moved is not None:
        f32 = jnp.float32
        cam = jax.lax.stop_gradient(jnp.asarray(camera, f32).reshape(-1))
        radius, focus = cam[layout.CAMERA_APERTURE], cam[layout.CAMERA_FOCUS]
        tan = jnp.stack([cam[layout.CAMERA_TAN_X], cam[layout.CAMERA_TAN_Y]])
        _, _, to_cam, project, near = _camera_maps(camera, film_size, grid_origin)

        def blur(c):
            """How far (grid pixels, per axis) from its pinhole image an
            aperture point may see each camera-space point of ``c``."""
            z = jnp.where(c[..., 2] > 0, c[..., 2], 1.0)
            return 0.5 * radius * jnp.abs(1.0 / focus - 1.0 / z)[..., None] / tan * jnp.asarray(film_size, f32)
        box = _moving_box(jax.lax.stop_gradient(jnp.asarray(tris, f32)), shape_data, moved, to_cam, project, near,
                          blur)
    film_rows, lengths = _sides_within(film_rows, grid, box)
    return film_rows, jnp.cumsum(lengths)


def moving_items(topology: np.ndarray, leaf: np.ndarray, shapes: np.ndarray, copies: int = 0,
                 moving_copies=()) -> np.ndarray:
    """The items of the derivative kernels' edge samples (the welded edges
    ``topology``, then ``copies`` shared instances' edge copies, then the
    analytic shapes' outlines) that move with the scene's own triangles of
    leaf rows ``leaf``, the shapes of rows ``shapes`` and the copies
    ``moving_copies`` (those of moving instances): an edge of a moving
    triangle moves."""
    topo = np.asarray(topology).reshape(-1, 6)
    leaf = np.asarray(leaf, np.int64)
    moves = np.zeros(max(int(topo[:, [0, 4]].max(initial=-1)), int(leaf.max(initial=-1))) + 1, bool)
    moves[leaf] = True
    second = topo[:, 4]
    edge = moves[topo[:, 0]] | ((second >= 0) & moves[np.maximum(second, 0)])
    return np.concatenate([np.nonzero(edge)[0], len(topo) + np.asarray(moving_copies, np.int64),
                           len(topo) + copies + np.asarray(shapes, np.int64)]).astype(np.int32)


# Film margin (pixels) of the moving geometry's box: the boundary kernel
# traces a film distance INSIDE off its curves, and float rounding.
MOVING_BOX_MARGIN = 1.0


_CORNERS = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], np.float32)


def _placed_corners(m, lo, hi):
    """The eight corners of each box [lo, hi] (k, 3) placed by the 3 x 4
    matrices ``m`` (k, 3, 4): (8 k, 3)."""
    c = lo[:, None, :] + (hi - lo)[:, None, :] * _CORNERS[None]
    return jnp.reshape(jnp.einsum("sij,scj->sci", m[:, :, :3], c) + m[:, None, :, 3], (-1, 3))


@staged
def moving_instance_corners(instances, rows: np.ndarray, boxes: np.ndarray):
    """The world corners of the shapegroup boxes ``boxes`` (k, 6: lo, hi;
    group space) of the shared instances of ``rows`` of the ``instances``
    buffer, placed by each one's to_world: what :func:`_moving_box` bounds
    of a moving instance."""
    m = jax.lax.stop_gradient(jnp.asarray(instances, jnp.float32))[
        np.asarray(rows, np.int32), layout.INSTANCE_TO_WORLD:layout.INSTANCE_TO_WORLD + 12].reshape(-1, 3, 4)
    boxes = np.asarray(boxes, np.float32).reshape(-1, 6)
    return _placed_corners(m, jnp.asarray(boxes[:, :3]), jnp.asarray(boxes[:, 3:]))


def _moving_box(tris, shape_data, moved, to_cam, project, near, blur=None):
    """(x0, y0, x1, y1): a film box (grid pixels) around everything the
    camera can see of the moving triangles (leaf rows ``moved[0]``),
    analytic shapes (``shape_data`` rows ``moved[1]``: their object boxes,
    [-1, 1]^3, placed by their to_world) and world points ``moved[2]``
    unless None (moving instances' corners, :func:`moving_instance_corners`):
    the box of the points' projections
    when all lie in front of the near plane (a convex hull in front of the
    camera projects into the hull of its points' projections), else
    unbounded; an empty box where nothing moves. ``blur(c)``: how far
    (per point and axis) from its projection each point may also land."""
    points = [jnp.reshape(tris[moved[0]], (-1, 3))]
    if shape_data is not None and shape_data.shape[0] > 0:
        m = jnp.asarray(shape_data)[moved[1], layout.SHAPE_TO_WORLD:layout.SHAPE_TO_WORLD + 12].reshape(-1, 3, 4)
        k = m.shape[0]
        points.append(_placed_corners(m, jnp.full((k, 3), -1.0, jnp.float32), jnp.full((k, 3), 1.0, jnp.float32)))
    if moved[2] is not None:
        points.append(jnp.reshape(moved[2], (-1, 3)))
    points = jnp.concatenate(points)
    if points.shape[0] == 0:
        return (1.0, 1.0, 0.0, 0.0)
    c = to_cam(points)
    s = project(c)
    bounded = jnp.all(c[:, 2] >= near) & jnp.all(jnp.isfinite(s))
    spread = 0.0 if blur is None else blur(c)
    lo = jnp.min(s - spread, axis=0) - MOVING_BOX_MARGIN
    hi = jnp.max(s + spread, axis=0) + MOVING_BOX_MARGIN
    big = jnp.float32(np.inf)
    return (jnp.where(bounded, lo[0], -big), jnp.where(bounded, lo[1], -big),
            jnp.where(bounded, hi[0], big), jnp.where(bounded, hi[1], big))


def _within_grid(box, gw, gh):
    """``box`` less what lies off the grid [0, gw] x [0, gh]."""
    return (jnp.maximum(box[0], 0.0), jnp.maximum(box[1], 0.0), jnp.minimum(box[2], gw), jnp.minimum(box[3], gh))


def _clip_to_box(s0, e, box):
    """Liang-Barsky: (t0, t1, whether any part is inside) of the segments
    ``s0 + t e``, t in [0, 1], clipped to ``box`` (x0, y0, x1, y1; scalars
    or one per segment)."""
    t0, t1 = jnp.zeros_like(e[:, 0]), jnp.ones_like(e[:, 0])
    x0, y0, x1, y1 = box
    for p_, q_ in ((-e[:, 0], s0[:, 0] - x0), (e[:, 0], x1 - s0[:, 0]), (-e[:, 1], s0[:, 1] - y0),
                   (e[:, 1], y1 - s0[:, 1])):
        safe = jnp.where(p_ != 0, p_, 1.0)
        r = q_ / safe
        t0 = jnp.where(p_ < 0, jnp.maximum(t0, r), t0)
        t1 = jnp.where(p_ > 0, jnp.minimum(t1, r), t1)
        t0 = jnp.where((p_ == 0) & (q_ < 0), 1.0, t0)
    return t0, t1, t1 > t0


@staged
def shadow_edges(tris, topology: np.ndarray, emitter_geom, lights: tuple, shape_data=None, instanced=None):
    """(records (m, layout.SHADOW_ROW), cumulative lengths (m,)) of the
    welded edges that are silhouettes seen from each of ``lights`` ((emitter
    row, whether directional) of the scene's point, spot and directional
    lights: ``emitter_geom`` holds a position, or a directional light's
    direction of travel), and of the analytic shapes' outlines seen from
    them (``shape_data``'s rows; a record with triangle -1, the shape's row
    and which curve, ``shapes.curve_point``'s): the edges of the hard
    shadows they cast, each weighted by its length (the kernels sample
    them by it). ``instanced``: as :func:`film_segments` has it: the shared
    shapegroups' edge copies, after the scene's edges, each record with
    its instance. At least one record: a zero-length one where there is none."""
    f32 = jnp.float32
    tris = jax.lax.stop_gradient(jnp.asarray(tris, f32))
    geom = jax.lax.stop_gradient(jnp.asarray(emitter_geom, f32))
    topo = jnp.asarray(topology).reshape(-1, 6)
    v0, v1, a3, b3 = _edge_vertices(tris, topo)
    instance = jnp.full(len(topo), -1.0, f32)
    if instanced is not None and len(instanced[0][0]):
        (itopo, owner), _ = instanced
        topo = jnp.concatenate([topo, jnp.asarray(itopo).reshape(-1, 6)])
        v0, v1, a3, b3 = (jnp.concatenate([a, c]) for a, c in zip((v0, v1, a3, b3), _placed_copies(tris, instanced)))
        instance = jnp.concatenate([instance, jnp.asarray(owner, f32)])
    length = jnp.linalg.norm(v1 - v0, axis=1)
    # the record from the second triangle (its slots of the ends, its third
    # vertex's), where the first is seen edge-on: the kernel takes the side
    # of the occluding surface from the third vertex
    flipped = jnp.stack([topo[:, 4], (topo[:, 5] + 1) % 3, (topo[:, 5] + 2) % 3, topo[:, 5], topo[:, 0]], axis=1)
    rows, lengths = [], []
    for row, directional in lights:
        g = geom[row, :3]
        # the plane through the edge and the light's rays: both triangles on
        # one side of it (or one triangle) make the edge a shadow's edge
        travel = jnp.broadcast_to(g, v0.shape) if directional else v0 - g
        casts, _, flip = _silhouettes(v0, v1, a3, b3, topo[:, 4] < 0, jnp.cross(v1 - v0, travel), travel)
        rows.append(jnp.concatenate([jnp.where(flip[:, None], flipped, topo[:, :5]).astype(f32),
                                     jnp.full((len(topo), 1), float(row), f32), instance[:, None]], axis=1))
        lengths.append(jnp.where(casts, length, 0.0))
        if shape_data is not None and shape_data.shape[0] > 0:
            origin = -g * 1e6 if directional else g
            curve_rows, curve_lengths = _shadow_curves(shape_data, origin, row)
            rows.append(curve_rows)
            lengths.append(curve_lengths)
    rows.append(jnp.zeros((1, layout.SHADOW_ROW), f32).at[0, layout.SHADOW_TRI_B].set(-1.0)
                .at[0, layout.SHADOW_INSTANCE].set(-1.0))
    lengths.append(jnp.zeros(1, f32))
    return jnp.concatenate(rows), jnp.cumsum(jnp.concatenate(lengths)).astype(f32)


# Share of the hard shadows' edge samples drawn among the records of the
# geometry that moves (the rest by length among all; integrators/material
# .MOVING_SHARE is the same for the edges path vertices see).
SHADOW_MOVING_SHARE = 0.5


@staged
def favour_moving_shadows(records, cdf, leaf, shapes, n_leaf: int, n_shapes: int, instances=(),
                          n_instances: int = 0, *, moving_share: float):
    """``shadow_edges``' cumulative weights, redrawn so that a share
    ``moving_share`` (the renderer passes SHADOW_MOVING_SHARE; an argument,
    not read here, so that the staged computation is keyed by it) of the
    samples falls on the records of the moving
    geometry by their length (an edge of the leaf rows ``leaf``, an
    outline of the shape rows ``shapes``, an edge copy of the shared
    instances of rows ``instances``) and the rest on all by length:
    the kernels divide by each record's share of the total, whatever it
    is (``integrators/shadows.sample``). Unchanged where nothing moving
    casts a shadow."""
    lengths = jnp.diff(jnp.concatenate([jnp.zeros(1, cdf.dtype), cdf]))
    tri = records[:, layout.SHADOW_TRI].astype(jnp.int32)
    tri_b = records[:, layout.SHADOW_TRI_B].astype(jnp.int32)
    instance = records[:, layout.SHADOW_INSTANCE].astype(jnp.int32)
    leaf_moves = jnp.zeros(max(n_leaf, 1), bool).at[leaf].set(True)
    shape_moves = jnp.zeros(max(n_shapes, 1), bool).at[shapes].set(True)
    instance_moves = jnp.zeros(max(n_instances, 1), bool).at[np.asarray(instances, np.int32)].set(True)
    shape = jnp.clip(records[:, layout.SHADOW_SLOT0].astype(jnp.int32), 0, max(n_shapes, 1) - 1)
    # (a copy's triangles are its shapegroup's, in every instance: its own instance moves it)
    own = leaf_moves[jnp.maximum(tri, 0)] | ((tri_b >= 0) & leaf_moves[jnp.maximum(tri_b, 0)])
    copy = instance_moves[jnp.clip(instance, 0, max(n_instances, 1) - 1)]
    moves = jnp.where(tri >= 0, jnp.where(instance >= 0, copy, own), shape_moves[shape])
    moving = jnp.where(moves, lengths, 0.0)
    total, total_moving = jnp.sum(lengths), jnp.sum(moving)
    share = jnp.where(total_moving > 0, moving_share, 0.0)
    weights = (share * moving / jnp.where(total_moving > 0, total_moving, 1.0)
               + (1.0 - share) * lengths / jnp.where(total > 0, total, 1.0))
    return jnp.where(total > 0, jnp.cumsum(weights), cdf).astype(cdf.dtype)


def _shadow_curves(shape_data, origin, light: int):
    """The shadow records of the analytic shapes' outlines seen from
    ``origin`` (the light ``light``'s position, or a point far up a
    directional light's rays), weighted by their length (a polygon's)."""
    f32 = jnp.float32
    shape_data = jax.lax.stop_gradient(jnp.asarray(shape_data, f32))
    n = shape_data.shape[0]
    kind = shape_data[:, layout.SHAPE_KIND].astype(jnp.int32)
    phi = jnp.linspace(0.0, 2.0 * np.pi, CURVE_POINTS + 1)
    rows, lengths = [], []
    for which, wanted in ((0, "sphere"), (1, "disk"), (2, "cylinder"), (3, "cylinder"), (4, "cylinder"),
                          (5, "cylinder")):
        pts = _curve_points(shape_data, jnp.full(n, which), origin, phi)
        length = jnp.sum(jnp.linalg.norm(pts[:, 1:] - pts[:, :-1], axis=-1), axis=1)
        ok = (kind == SHAPE_KIND[wanted]) & jnp.isfinite(length)
        if which == 0:         # a light inside a sphere sees no outline
            r = shape_data[:, layout.SHAPE_RADIUS]
            centre = shape_data[:, layout.SHAPE_TO_WORLD + 3:layout.SHAPE_TO_WORLD + 12:4]
            ok &= jnp.sum((origin - centre) ** 2, axis=1) > r * r * (1.0 + 1e-4)
        if which >= 4:         # nor inside a cylinder's (infinite) tube its silhouette lines
            to_object = _rows(shape_data[:, layout.SHAPE_TO_OBJECT:layout.SHAPE_TO_OBJECT + 12], n)
            o = _apply(to_object, jnp.broadcast_to(origin, (n, 3)))
            ok &= o[:, 0] ** 2 + o[:, 1] ** 2 > 1.0 + 1e-4
        record = jnp.zeros((n, layout.SHADOW_ROW), f32).at[:, layout.SHADOW_TRI].set(-1.0)
        record = record.at[:, layout.SHADOW_SLOT0].set(jnp.arange(n, dtype=f32)).at[:, layout.SHADOW_SLOT1].set(
            float(which)).at[:, layout.SHADOW_TRI_B].set(-1.0).at[:, layout.SHADOW_LIGHT].set(float(light)).at[
            :, layout.SHADOW_INSTANCE].set(-1.0)
        rows.append(record)
        lengths.append(jnp.where(ok, length, 0.0))
    return jnp.concatenate(rows), jnp.concatenate(lengths)


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
    return film.canvas_shape(*config.film.grid, config.film.footprint)


def _forward_unbatched(config, active, *args):
    kw, tangents = _named(config, args)
    kernel = kernels.forward_kernel(config.integrator, config.structure, active)
    rows = int(np.prod(canvas_shape(config)))
    out = launch(kernel, (config.film.items,), {"canvas": rows}, preferred_lanes=config.lanes, **kw,
                 **{"d_" + a: t for a, t in zip(active, tangents)})
    return out["canvas"].reshape(canvas_shape(config) + (config.integrator.channels,))


def _impl_fn(*args, config, active, batch_shape, in_batch):
    return vmap_levels(functools.partial(_forward_unbatched, config, active), in_batch, len(batch_shape))(*args)


def _abstract(*args, config, active, batch_shape, in_batch):
    return jax.core.ShapedArray(batch_shape + canvas_shape(config) + (config.integrator.channels,),
                                np.float32)


register(boundary_jvp_p, _impl_fn, _abstract)


def _adjoint_unbatched(config, active, *args):
    kw, (ct,) = _named(config, args)
    kernel = kernels.adjoint_kernel(config.integrator, config.structure, active)
    rows = {"grad_" + a: int(np.shape(kw[a])[0]) for a in active}
    out = launch(kernel, (config.film.items,), rows, preferred_lanes=config.lanes, **kw,
                 ct_canvas=ct.reshape(-1, ct.shape[-1]))
    return tuple(out["grad_" + a] for a in active)


def _transpose(ct, *args, config, active, batch_shape, in_batch):
    n = len(args) - len(active)
    if any(ad.is_undefined_primal(p) for p in args[:n]):
        raise ValueError("the boundary term is linear only in the camera's and triangles' tangents")
    tangents = args[n:]
    if type(ct) is ad.Zero:
        return [None] * n + [ad.Zero(t.aval) for t in tangents]
    nb = len(batch_shape)
    fn = vmap_levels(functools.partial(_adjoint_unbatched, config, active), list(in_batch[:n]) + [(True,) * nb], nb)
    grads = fn(*args[:n], ct)
    return [None] * n + sum_unmapped(grads, in_batch[n:], nb)


ad.primitive_transposes[boundary_jvp_p] = _transpose


def boundary_tangent(config, kernel_inputs: dict, tangents: dict):
    """The boundary term's canvas along ``tangents`` (of ``camera`` and / or
    ``tris``; ``kernel_inputs``: the integrator's inputs plus ``segments``,
    ``segment_cdf`` and ``canvas_width``)."""
    active = tuple(n for n in MOVING if n in tangents)
    names = kernels_inputs_names(config)
    args = [jnp.asarray(kernel_inputs[k]) for k in names] + [tangents[n] for n in active]
    return boundary_jvp_p.bind(*args, config=config, active=active, batch_shape=(),
                               in_batch=tuple(() for _ in args))
