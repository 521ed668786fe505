"""The JAX contract of rendering: primal, forward-mode and adjoint kernels.

``render_image(config, inputs)`` is a ``jax.custom_jvp`` function over the
input buffers of the integrator in ``config`` (any
``kernels.integrators.Integrator``). Its jvp rule binds
:data:`render_jvp_p`, a primitive *linear in the tangents* of the
integrator's differentiable buffers that runs its forward-mode megakernel;
the transpose of that primitive runs its adjoint megakernel (path replay
backpropagation by default). So ``jax.jvp``, ``jax.linearize``,
``jax.vjp`` and ``jax.grad`` all work, under ``jax.jit`` and ``jax.vmap``,
and the only residuals are the primal inputs.

Random numbers: the tangent / adjoint kernels run with ``seed_grad`` and
``spp_grad`` (decorrelated from the primal's ``seed``), and the forward and
adjoint kernels use the *same* ``seed_grad``, so for one seed the adjoint is
exactly the transpose of the forward kernel's linear map.

The kernels write per-item splat blocks (``kernels/sensors/film.py``); the
image is developed from them in JAX (:mod:`.film`), with the filter
weights of the same samples: the primal's for the image, ``seed_grad``'s
for the tangent. JAX transposes that linear step, so the adjoint kernel
receives each item's gathered block of cotangents.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive
from jax._src.interpreters.batching import BatchTracer
from jax.interpreters import ad
from jax.interpreters import partial_eval as pe
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..kernels import layout
from ..kernels.context import MOVING, Structure, moves_geometry
from ..kernels.integrators import Integrator, PathIntegrator
from ..ir.graph import NUMPY_DTYPE
from . import boundary as boundary_terms
from .boundary import (boundary_tangent, canvas_shape, favour_moving_shadows, film_segments,
                       instance_edge_rows, lens_edge_cdf, lens_film_sides, moving_instance_corners,
                       shadow_edges)
from .film import FilmGeometry, crop_canvas, develop, expected_weights, normalize, prefetch_kernels, splat_canvas
from .film import canvas_shape as film_canvas_shape
from .kernel_call import launch, prefetch
from .levels import register, sum_unmapped, vmap_levels
from .staged import staged


class NotDifferentiableError(ValueError):
    """A derivative was requested with respect to something the renderer
    cannot differentiate (yet); the message names it."""


@dataclasses.dataclass(frozen=True)
class PixelSplit:
    """How one image's work items are split into launches. ``shards``
    launches side by side, each a band of whole rows of the sample grid,
    one per device of ``mesh`` (all its axes) when a mesh is given; or
    ``tiles`` launches one after another (bands of ``tile_rows`` rows), each
    splatted onto the image before the next, so that only one band's
    per-item buffers exist at a time. Each launch covers items from its
    ``item_offset`` on, so random numbers and positions are those of the
    whole image's launch."""
    shards: int = 1
    mesh: Any = None
    tiles: int = 1
    tile_rows: int = 0

    def __post_init__(self):
        if self.shards > 1 and self.tiles > 1:
            raise ValueError("an image is split into shards or into tiles, not both")

    def items_per_launch(self, grid: tuple) -> int:
        """Whole rows of the grid per launch, so that each device's part of
        the image is a band of rows (developing it exchanges only the
        filter's reach across band edges)."""
        return -(-grid[0] // self.shards) * grid[1]

    def padded_rows(self, grid: tuple) -> int:
        """Rows of the grid the side-by-side launches cover together (the
        last band may run past the grid's end)."""
        return -(-grid[0] // self.shards) * self.shards

    def rows(self, x):
        """``x`` (rows first) split by rows across the mesh's devices (where
        they divide evenly; else as XLA places it)."""
        if self.mesh is None or x.shape[0] % self.shards:
            return x
        return jax.lax.with_sharding_constraint(
            x, NamedSharding(self.mesh, P(self.mesh.axis_names, *[None] * (x.ndim - 1))))


class MovingRows:
    """What geometry parameters move, as host arrays: ``leaf``, the leaf
    rows of their triangles; ``shapes``, their ``shape_data`` rows, and
    ``shape_leaf`` the leaf rows of those; ``items``, the items of the
    derivative kernels' edge samples that move with them
    (``primitives/boundary.moving_items``); ``instances``, the rows of the
    ``instances`` buffer (shared instances) they move, and
    ``instance_boxes`` (one per row: lo, hi) the group-space box of each
    one's shapegroup. A static of :class:`RenderConfig`, compared by
    identity (render.py keeps one per scene and parameter)."""
    FIELDS = ("leaf", "shapes", "shape_leaf", "items", "instances")

    def __init__(self, leaf: np.ndarray, shapes: np.ndarray, shape_leaf: np.ndarray, items: np.ndarray,
                 instances: np.ndarray | None = None, instance_boxes: np.ndarray | None = None):
        self.leaf, self.shapes, self.shape_leaf, self.items = leaf, shapes, shape_leaf, items
        self.instances = np.zeros(0, np.int32) if instances is None else instances
        self.instance_boxes = np.zeros((len(self.instances), 6), np.float32) if instance_boxes is None \
            else instance_boxes

    def __repr__(self) -> str:      # (jaxprs print it among the primitive's params)
        return "MovingRows(" + ", ".join(f"{f}: {len(getattr(self, f))}" for f in self.FIELDS) + ")"

    @classmethod
    def union(cls, rows: list) -> "MovingRows":
        fields = {f: np.unique(np.concatenate([np.zeros(0, np.int32)] + [getattr(r, f) for r in rows]))
                  .astype(np.int32) for f in cls.FIELDS}
        boxes = {int(i): b for r in rows for i, b in zip(r.instances, r.instance_boxes)}
        return cls(**fields, instance_boxes=np.asarray([boxes[int(i)] for i in fields["instances"]],
                                                       np.float32).reshape(-1, 6))


@dataclasses.dataclass(frozen=True)
class RenderConfig:
    """Static (trace-time) settings of one render call."""
    film: FilmGeometry         # the sample grid, its border and the splat footprint
    method: str = "prb"        # adjoint: one of integrator.adjoint_methods
    # Float inputs that must not receive tangents, with the reason shown.
    why_not: tuple = ()
    # Trace-time scene features the kernels are specialised on.
    structure: Structure = Structure()
    integrator: Integrator = PathIntegrator()
    split: PixelSplit = PixelSplit()
    # The scene's point, spot and directional lights: (emitter row, whether
    # directional), whose hard shadows' edges the boundary term samples.
    delta_lights: tuple = ()
    # (geometry parameter, MovingRows or None: it moves what rows do not
    # name) for the parameters a render was given (render._motion)
    motion: tuple = ()

    def __post_init__(self):
        if self.structure.footprint != self.film.footprint:
            raise ValueError(f"the kernels' footprint {self.structure.footprint} is not the film's "
                             f"{self.film.footprint}")

    @property
    def launch_shape(self) -> tuple:
        return (self.film.items,)

    @property
    def lanes(self) -> int | None:
        """The integrator's preferred SIMD packet width for these kernels."""
        return self.integrator.simd_lanes(self.structure)

    @property
    def input_names(self) -> tuple:
        return tuple(self.integrator.inputs(self.structure))

    def derivative_input_names(self, active: tuple) -> tuple:
        """The inputs of the derivative kernels for ``active`` (moving
        triangles add the welded ``edges``)."""
        return tuple(self.integrator.kernel_inputs(active, self.structure))


def _is_zero(t) -> bool:
    return t is None or isinstance(t, SymbolicZero) or type(t) is ad.Zero


def _kernel_inputs(config: RenderConfig, inputs: Mapping[str, Any]) -> dict:
    return {k: inputs[k] for k in config.input_names}


def _launch(config: RenderConfig, kernel, inputs: Mapping[str, Any], accum_rows=None,
            per_item: Mapping[str, Any] | None = None) -> dict:
    """Launch ``kernel`` over the film's items, split as ``config.split``
    says: per-item outputs come back for every item of the grid in order
    (side-by-side launches: of the padded grid, ``PixelSplit.padded_rows``,
    so that each device keeps its band), accumulators summed over the
    launches (an all-reduce when the launches are on several devices).
    ``per_item``: inputs with one row per item (of the padded grid)."""
    split = config.split
    inputs = {k: inputs[k] for k in kernel.inputs if k not in (per_item or {})}
    if split.shards == 1:
        return launch(kernel, (config.film.items,), accum_rows, preferred_lanes=config.lanes, **inputs,
                      **(per_item or {}))
    n = split.items_per_launch(config.film.grid)
    total = n * split.shards
    first = inputs.pop("item_offset")
    offsets = jnp.arange(split.shards, dtype=jnp.uint32) * jnp.uint32(n) + first
    rows = {k: jnp.pad(v, [(0, total - v.shape[0])] + [(0, 0)] * (v.ndim - 1)).reshape((split.shards, n) + v.shape[1:])
            for k, v in (per_item or {}).items()}
    offsets = split.rows(offsets)
    rows = {k: split.rows(v) for k, v in rows.items()}

    def one(offset, item_rows):
        return launch(kernel, (n,), accum_rows, preferred_lanes=config.lanes, **inputs, item_offset=offset,
                      **item_rows)

    out = jax.vmap(one)(offsets, rows)
    per_item_out = set(kernel.item_outputs)
    return {k: v.reshape((total,) + v.shape[2:]) if k in per_item_out else jnp.sum(v, axis=0)
            for k, v in out.items()}


def _over_tiles(config: RenderConfig, kernel, inputs: Mapping[str, Any], accum_rows=None,
                per_item=None) -> dict:
    """Launch ``kernel`` band after band of ``config.split`` (a
    ``lax.scan``): each per-item output is splatted onto a canvas of the
    whole grid (``film.splat_canvas``; items past the grid's last row
    dropped), accumulators are summed. ``per_item(band_canvas_slice)``:
    per-item inputs of a band from a canvas-shaped array (the transpose of
    the splat), given as ``(name, canvas)``."""
    geom, split = config.film, config.split
    (gh, gw), k, rows = geom.grid, geom.footprint, split.tile_rows
    inputs = {n: inputs[n] for n in kernel.inputs if n != (per_item[0] if per_item else None)}
    first = inputs.pop("item_offset")
    valid_rows = lambda t: (t * rows + jnp.arange(rows) < gh)[:, None, None]  # noqa: E731

    def splat(blocks, t):
        width = blocks.shape[-1]
        x = jnp.where(valid_rows(t), blocks.reshape(rows, gw, width), 0.0)
        return splat_canvas(x, rows, gw, k, width // (k * k))

    canvases = {n: jnp.zeros(film_canvas_shape(split.tiles * rows, gw, k) + (spec.item_shape[0] // (k * k),),
                             jnp.float32)
                for n, spec in kernel.item_outputs.items()}
    sums = {n: jnp.zeros((accum_rows[n],) + spec.item_shape, NUMPY_DTYPE[spec.dtype])
            for n, spec in kernel.accumulators.items()}

    def step(carry, t):
        canvases, sums = carry
        extra = {}
        if per_item is not None:
            name, canvas = per_item
            band = jax.lax.dynamic_slice_in_dim(canvas, t * rows, rows + k - 1)
            width = kernel.inputs[name].item_shape[0]
            zeros = jnp.zeros((rows * gw, width), band.dtype)
            extra[name] = jax.linear_transpose(lambda b: splat(b, t), zeros)(band)[0].reshape(rows * gw, width)
        offset = first + (t * rows * gw).astype(jnp.uint32)
        out = launch(kernel, (rows * gw,), accum_rows, preferred_lanes=config.lanes, **inputs, item_offset=offset,
                     **extra)
        new = {}
        for n, c in canvases.items():
            band = jax.lax.dynamic_slice_in_dim(c, t * rows, rows + k - 1) + splat(out[n], t)
            new[n] = jax.lax.dynamic_update_slice_in_dim(c, band, t * rows, 0)
        return (new, {n: v + out[n] for n, v in sums.items()}), None

    (canvases, sums), _ = jax.lax.scan(step, (canvases, sums), jnp.arange(split.tiles, dtype=jnp.int32))
    return {**canvases, **sums}


def _film_weights(config: RenderConfig, inputs: Mapping[str, Any]):
    """What an image kernel's sums are divided by: with a one-pixel
    footprint every sample has weight one, so the sample count; else the
    weight kernel's blocks for the same samples (the primal kernel writes
    its own, so this launches only for the tangent)."""
    if config.film.footprint == 1:
        return jnp.asarray(inputs["spp"], jnp.float32)
    kernel = config.integrator.weights_kernel(config.structure)
    if config.split.tiles > 1:
        return _over_tiles(config, kernel, inputs)["weights"]
    return _launch(config, kernel, inputs)["weights"]


def _develop(config: RenderConfig, blocks, weights, extra=None, extra_weights=None):
    """The image from the kernels' blocks, or, for a tiled render, from
    the canvases they were splatted onto (and the weights' canvas);
    ``extra``: a canvas over ``extra_weights``, added to the image (one
    launch only; ``develop``)."""
    split = config.split
    if split.tiles > 1:
        w = weights if jnp.ndim(weights) == 0 else crop_canvas(weights, config.film)
        image = normalize(crop_canvas(blocks, config.film), w)
        # (the boundary term's canvas covers the grid, the bands' canvas their padded rows)
        return image if extra is None else image + normalize(crop_canvas(extra, config.film), extra_weights)
    rows = split.padded_rows(config.film.grid) if split.shards > 1 else None
    return split.rows(_develop_jit(blocks, weights, config.film, config.integrator.channels, rows, extra,
                                   extra_weights))


# One compiled step instead of dozens of dispatches when rendering eagerly
# (its executable kept on disk: staged.py).
_develop_jit = staged(develop)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def render_image(config: RenderConfig, inputs: dict) -> jax.Array:
    """The primal image, (height, width, channels) of the crop window.
    ``inputs`` holds the integrator's buffers plus ``seed_grad`` and
    ``spp_grad`` for its derivatives."""
    kernel = config.integrator.primal_kernel(config.structure)
    if not _batched(inputs.values()):
        _prefetch_film_kernels(config)
    out = (_over_tiles if config.split.tiles > 1 else _launch)(config, kernel, inputs)
    weights = out["weights"] if "weights" in out else _film_weights(config, inputs)
    return _develop(config, out["image"], weights)


def render(config: RenderConfig, inputs: dict) -> jax.Array:
    """:func:`render_image`, called as a plain function where no JAX
    transformation traces ``inputs`` (eagerly nothing can ask for its
    derivative, and ``custom_jvp``'s per-call bookkeeping, the names of
    every input leaf, was a third of an eager render's host time)."""
    return render_image(config, inputs) if _traces(inputs) else render_image.fun(config, inputs)


def _traces(*values) -> bool:
    """Whether any leaf of ``values`` is traced by a JAX transformation."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(values))


def _prefetch_film_kernels(config: RenderConfig, transpose: bool = False) -> None:
    """Start compiling the film's develop kernels (not used when the image
    is split across devices, see ``film.splat_canvas``)."""
    if config.split.shards == 1:
        prefetch_kernels(config.film.footprint, config.integrator.channels, transpose)


def _batched(values) -> bool:
    """Whether any of ``values`` is batched by ``vmap`` (whose launches are
    other kernels than the ones a prefetch would compile)."""
    return any(isinstance(x, BatchTracer) for x in values)


def _prefetch_derivative_kernel(config: RenderConfig, inputs, tin) -> None:
    """Start compiling the derivative kernels this jvp leads to while the
    primal compiles and runs: the adjoint under reverse mode (``grad``,
    ``vjp``: the tangents are staged, to be transposed), else the forward
    kernel, and the film-weights kernel of a splatting film. Not under
    ``vmap`` (its launches are batched kernels)."""
    integrator = config.integrator
    active = tuple(n for n in integrator.differentiable if n in tin and not _is_zero(tin[n]))
    if not active or _batched((*inputs.values(), *tin.values())):
        return
    if config.film.footprint > 1:  # the tangent's film weights (_film_weights)
        prefetch(integrator.weights_kernel(config.structure), preferred_lanes=config.lanes)
    if any(isinstance(tin[n], pe.JaxprTracer) for n in active):
        if config.method in integrator.adjoint_methods:  # (else the transpose will say why)
            prefetch(integrator.adjoint_kernel(active, config.method, config.structure), preferred_lanes=config.lanes)
            _prefetch_film_kernels(config, transpose=True)
    else:
        prefetch(integrator.forward_kernel(active, config.structure), preferred_lanes=config.lanes)


def _render_jvp(config: RenderConfig, primals, tangents):
    (inputs,), (tin,) = primals, tangents
    _prefetch_derivative_kernel(config, inputs, tin)
    out = render_image(config, inputs)
    integrator = config.integrator
    reasons = dict(config.why_not)
    for name, t in tin.items():
        if name in integrator.differentiable or name == "motion_probes" or _is_zero(t):
            continue
        if jnp.issubdtype(jnp.result_type(inputs[name]), jnp.floating):
            if not integrator.differentiable:
                raise NotDifferentiableError(f"the {integrator.name} integrator is not differentiable: "
                                             f"{integrator.primal_only}")
            raise NotDifferentiableError(
                reasons.get(name, f"the renderer cannot differentiate its input {name!r}"))
    active = tuple(n for n in integrator.differentiable if n in tin and not _is_zero(tin[n]))
    if not active:
        return out, jnp.zeros_like(out)
    prim = _kernel_inputs(config, inputs)
    prim["seed"], prim["spp"] = inputs["seed_grad"], inputs["spp_grad"]
    moved = _moved(config, tin, active)
    if moves_geometry(active, config.structure):
        prim["edges"] = inputs["edges"]
        if config.structure.instanced:
            prim["instance_edges"] = instance_edge_rows(inputs["instance_topology"], inputs["instance_owner"])
        if config.structure.delta_lights:
            prim["shadow_edges"], prim["shadow_cdf"] = _shadow_edges(config, inputs, prim, moved)
        prim["moving_edges"], prim["edge_moves"], prim["leaf_moves"] = _moving_edges(config, prim, moved)
    args = [jnp.asarray(prim[k]) for k in config.derivative_input_names(active)] + [tin[n] for n in active]
    t_blocks = render_jvp_p.bind(*args, config=config, active=active, batch_shape=(),
                                 in_batch=tuple(() for _ in args))
    moving = tuple(n for n in MOVING if n in active)
    extra = extra_weights = None
    weights = jax.lax.stop_gradient(_film_weights(config, prim))
    if moving:
        extra = _film_boundary(config, inputs, prim, {n: tin[n] for n in moving}, moved)
        # (its own samples: over the weight expected of the tangent's, film.expected_weights)
        extra_weights = weights if config.film.footprint == 1 else jnp.asarray(
            expected_weights(config.film)) * jnp.asarray(prim["spp"], jnp.float32)
    # The tangent's samples are seed_grad's, so are its weights (constants:
    # JAX transposes the develop step for the adjoint).
    return out, _develop(config, t_blocks, weights, extra, extra_weights)


def _moved(config: RenderConfig, tin, active) -> "MovingRows | None":
    """What moves of the geometry whose parameters have tangents here
    (``motion_probes``: render.py), all of it together, or None where
    anything may: the camera moves, a parameter moves what the rows do not
    name (``config.motion``), or the render did not say."""
    if "camera" in active or "motion_probes" not in tin or not config.motion:
        return None
    rows = dict(config.motion)
    moving = [rows[k] for k, t in tin["motion_probes"].items() if not _is_zero(t)]
    if any(r is None for r in moving):
        return None
    return MovingRows.union(moving)


def _moving_edges(config: RenderConfig, prim, moved):
    """(``moving_edges``, ``edge_moves``, ``leaf_moves``) of the
    derivative kernels (``integrators/material.edge_point``): the items of
    edges and outlines that move, a flag per item, and one per leaf
    primitive; where anything may move, every item and primitive (then
    the edge samples are uniform, as without them)."""
    n_items = int(np.shape(prim["edges"])[0])
    if "instance_edges" in prim:
        n_items += int(np.shape(prim["instance_edges"])[0])
    if config.structure.analytic:
        n_items += int(np.shape(prim["shape_data"])[0])
    n_leaf = max(int(np.shape(prim["tris"])[0]), 1)
    # (host arrays: all of it is known on the host, and eager JAX operations
    # here were a few dozen XLA compilations, ~0.6 s, per scene's sizes)
    if moved is None:
        items = np.arange(n_items, dtype=np.int32)
        leaf = np.ones(n_leaf, np.int32)
    else:
        items = moved.items
        leaf = np.zeros(n_leaf, np.int32)
        leaf[np.concatenate([moved.leaf, moved.shape_leaf]).astype(np.int64)] = 1
    flags = np.zeros(max(n_items, 1), np.int32)
    flags[np.asarray(items, np.int64)] = 1
    # (never an empty buffer: one item that does not move)
    return (items if len(items) else np.zeros(1, np.int32)), flags, leaf


def _shadow_edges(config: RenderConfig, inputs, prim, moved=None):
    """The edges of the hard shadows of the scene's delta lights
    (``primitives/boundary.shadow_edges``), drawn favouring those of the
    geometry ``moved`` where it is not None (``favour_moving_shadows``)."""
    records, cdf = shadow_edges(prim["tris"], inputs["edge_topology"], prim["emitter_geom"], config.delta_lights,
                                prim.get("shape_data"), _instanced(inputs, prim))
    if moved is not None:
        n_shapes = int(np.shape(prim["shape_data"])[0]) if "shape_data" in prim else 0
        n_instances = int(np.shape(prim["instances"])[0]) if "instances" in prim else 0
        cdf = favour_moving_shadows(records, cdf, moved.leaf, moved.shapes, int(np.shape(prim["tris"])[0]), n_shapes,
                                    moved.instances, n_instances, moving_share=boundary_terms.SHADOW_MOVING_SHARE)
    return records, cdf


def _instanced(inputs, prim):
    """(the shared shapegroups' edge copies and their instances, the
    ``instances`` buffer) where the render passes them, else None."""
    if "instance_topology" not in inputs:
        return None
    return (inputs["instance_topology"], inputs["instance_owner"]), prim["instances"]


def _film_boundary(config: RenderConfig, inputs, prim, tangents: dict, moved=None):
    """The boundary term on the film (``primitives/boundary.py``) along the
    camera's and / or the triangles' ``tangents``, on the film canvas,
    scaled as the image kernels' sums are (spp samples per pixel).
    ``moved``: the only geometry that moves (``_moved``), or None."""
    if "edge_topology" not in inputs:
        raise NotDifferentiableError("camera and geometry derivatives need the scene's edge topology "
                                     "(jaxrender.render passes it)")
    hidden = None
    if "hide_emitters" in prim:
        # (camera rays pass through emitters under hide_emitters: they have no silhouettes)
        # (numpy unless traced: eager JAX operations here compiled one by one)
        xp = jnp if _traces(prim["tri_attr"], prim["hide_emitters"]) else np
        hidden = (xp.asarray(prim["tri_attr"])[:, layout.ATTR_EMITTER] >= 0) & (xp.asarray(prim["hide_emitters"]) != 0)
    lens = {}
    instanced = _instanced(inputs, prim)
    corners = None      # (of the moving shared instances)
    if moved is not None and len(moved.instances):
        corners = moving_instance_corners(prim["instances"], moved.instances, moved.instance_boxes)
    if config.structure.sensor == "thinlens":
        # (its silhouettes depend on the aperture point: the kernel samples them per point)
        segments, cdf = lens_film_sides(prim["tris"], prim["camera"], (prim["film_width"], prim["film_height"]),
                                        (prim["grid_x0"], prim["grid_y0"]), config.film.grid, prim.get("shape_data"),
                                        None if moved is None else (moved.leaf, moved.shapes, corners))
        lens["lens_edge_cdf"] = lens_edge_cdf(prim["tris"], inputs["edge_topology"], prim["camera"],
                                              prim.get("shape_data"), hidden, prim.get("prim_shape"), instanced)
        if config.structure.instanced and "instance_edges" not in prim:     # (a camera moving alone)
            lens["instance_edges"] = instance_edge_rows(inputs["instance_topology"], inputs["instance_owner"])
    else:
        segments, cdf = film_segments(prim["tris"], inputs["edge_topology"], prim["camera"],
                                      (prim["film_width"], prim["film_height"]), (prim["grid_x0"], prim["grid_y0"]),
                                      config.film.grid, prim.get("shape_data"), hidden, prim.get("prim_shape"),
                                      config.structure.sensor == "orthographic", instanced,
                                      None if moved is None else (moved.leaf, moved.items, moved.shapes, corners))
    seed = (jnp.asarray(prim["seed"], jnp.uint32) * jnp.uint32(747796405) + jnp.uint32(2891336453)).astype(jnp.uint32)
    # (its own sample count: its estimates are normalised by it, then scaled as the image kernels' sums are)
    kw = dict(prim, segments=segments, segment_cdf=cdf, canvas_width=np.uint32(canvas_shape(config)[1]), seed=seed,
              spp=inputs["spp_boundary"], spp_pixels=inputs["spp_boundary_pixels"], edges=inputs["edges"], **lens)
    if config.structure.delta_lights and "shadow_edges" not in kw:
        kw["shadow_edges"], kw["shadow_cdf"] = _shadow_edges(config, inputs, prim, moved)
    spp = jnp.asarray(prim["spp"], jnp.float32)
    return boundary_tangent(config, kw, tangents) * spp


render_image.defjvp(_render_jvp, symbolic_zeros=True)

# ---------------------------------------------------------------------------
# The forward-mode primitive and its transpose
# ---------------------------------------------------------------------------

render_jvp_p = Primitive("jaxrender_render_jvp")


def _forward_unbatched(config, active, *args):
    names = config.derivative_input_names(active)
    kw = dict(zip(names, args[:len(names)]))
    kw.update({"d_" + a: t for a, t in zip(active, args[len(names):])})
    kernel = config.integrator.forward_kernel(active, config.structure)
    return (_over_tiles if config.split.tiles > 1 else _launch)(config, kernel, kw)["image"]


def _jvp_impl_fn(*args, config, active, batch_shape, in_batch):
    fn = vmap_levels(functools.partial(_forward_unbatched, config, active), in_batch, len(batch_shape))
    return fn(*args)


def _jvp_abstract(*args, config, active, batch_shape, in_batch):
    """The tangent's blocks, or a tiled render's canvas of them."""
    width = config.integrator.block_width(config.structure)
    split, k = config.split, config.film.footprint
    if split.tiles > 1:
        shape = film_canvas_shape(split.tiles * split.tile_rows, config.film.grid[1], k) + (width // (k * k),)
    elif split.shards > 1:
        shape = (split.padded_rows(config.film.grid) * config.film.grid[1], width)
    else:
        shape = tuple(config.launch_shape) + (width,)
    return jax.core.ShapedArray(batch_shape + shape, np.float32)


register(render_jvp_p, _jvp_impl_fn, _jvp_abstract)


def _jvp_of_jvp(primals, tangents, *, config, active, batch_shape, in_batch):
    n = len(config.derivative_input_names(active))
    if any(type(t) is not ad.Zero for t in tangents[:n]):
        raise NotDifferentiableError("second derivatives of renders (a derivative of the tangent image "
                                     "with respect to scene parameters) are not supported")
    params = dict(config=config, active=active, batch_shape=batch_shape, in_batch=in_batch)
    out = render_jvp_p.bind(*primals, **params)
    dt = [ad.instantiate_zeros(t) for t in tangents[n:]]
    return out, render_jvp_p.bind(*primals[:n], *dt, **params)


ad.primitive_jvps[render_jvp_p] = _jvp_of_jvp


def _adjoint_unbatched(config, active, *args):
    names = config.derivative_input_names(active)
    n = len(names)
    kw = dict(zip(names, args[:n]))
    rows = {"grad_" + a: int(np.shape(kw[a])[0]) for a in active}
    kernel = config.integrator.adjoint_kernel(active, config.method, config.structure)
    if config.split.tiles > 1:
        grads = _over_tiles(config, kernel, kw, rows, ("grad_image", args[n]))
    else:
        grads = _launch(config, kernel, kw, rows, {"grad_image": args[n]})
    return tuple(grads["grad_" + a] for a in active)


def _jvp_transpose(ct, *args, config, active, batch_shape, in_batch):
    n = len(config.derivative_input_names(active))
    primals, tangents = args[:n], args[n:]
    if any(ad.is_undefined_primal(p) for p in primals):
        raise NotDifferentiableError("the tangent image is linear only in the parameter tangents")
    if type(ct) is ad.Zero:
        return [None] * n + [ad.Zero(t.aval) for t in tangents]
    nb = len(batch_shape)
    # The cotangent carries every batch level; each gradient comes back per
    # batch element and is summed over the levels its tangent is not mapped in.
    fn = vmap_levels(functools.partial(_adjoint_unbatched, config, active),
                      list(in_batch[:n]) + [(True,) * nb], nb)
    grads = fn(*primals, ct)
    return [None] * n + sum_unmapped(grads, in_batch[n:], nb)


ad.primitive_transposes[render_jvp_p] = _jvp_transpose


def nondifferentiable(x: Any, reason: str) -> Any:
    """``x`` unchanged, but asking for a derivative through it raises
    :class:`NotDifferentiableError` with ``reason`` (never a silent zero)."""
    # A numpy array captured under jit must become a jax array before it
    # enters the custom_jvp call (JAX asserts canonical constants there).
    return _guard(reason, jnp.asarray(x))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _guard(reason, x):
    return x


@functools.partial(_guard.defjvp, symbolic_zeros=True)
def _guard_jvp(reason, primals, tangents):
    if not _is_zero(tangents[0]):
        raise NotDifferentiableError(reason)
    return primals[0], jnp.zeros_like(primals[0])


__all__ = ["render_image", "render_jvp_p", "RenderConfig", "NotDifferentiableError", "nondifferentiable"]
