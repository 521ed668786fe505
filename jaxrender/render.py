"""The public rendering entry point."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from .kernels import integrators, layout
from .kernels.bsdfs.surface import samples_null
from .kernels.integrators import ADJOINT_METHODS
from .kernels.integrators.aov import channel_names, parse_aovs
from .primitives.boundary import edge_topology as boundary_topology, instance_edges, moving_items
from .primitives.bsdf_tables import bsdf_table
from .primitives.film import FilmGeometry, has_alpha, to_pixel_format
from .primitives.render_rules import MovingRows, PixelSplit, RenderConfig, nondifferentiable
from .primitives import render_rules
from .kernels import spectrum
from .kernels import textures as ktex
from .scene.arrays import is_traced, xla_aligned
from .scene.camera import fov_key
from .scene import variants
from .scene.errors import SceneError

_GEOMETRY_WHY = ("gradients with respect to scene geometry are implemented for meshes and analytic shapes under "
                 "the path and direct integrators so far")


# A launch's per-item buffers (splat blocks, weights) above this many bytes
# make a render tiled (render's max_launch_bytes).
DEFAULT_MAX_LAUNCH_BYTES = 1 << 30


def _check_film_fits(cam, floats_per_item: int, split: PixelSplit, channels: int) -> None:
    """A SceneError, before any work, for a film whose buffers (the
    kernels' per-item outputs, ``floats_per_item`` per pixel of the sample
    grid, or for a tiled render one band of them and the image canvases)
    cannot fit in the memory of the device that renders it, or whose pixels
    a 32-bit work-item index cannot count."""
    gw, gh = cam.grid_size
    items = gw * gh
    if items >= 2 ** 31:
        raise SceneError(f"a {gw}x{gh} film has {items} pixels, more than the 2**31 a render can index")
    launched = (split.tile_rows if split.tiles > 1 else gh) * gw * floats_per_item
    if split.shards == 1 and launched >= 2 ** 31:
        # (the film's develop kernels index one launch's blocks with 32 bits)
        raise SceneError(f"a {gw}x{gh} film's launch writes {launched} floats ({floats_per_item} a pixel), more "
                         f"than the 2**31 a kernel can index: lower max_launch_bytes to render it in bands")
    if split.tiles > 1:
        k = cam.footprint
        need = (split.tile_rows * gw * floats_per_item + (gh + k) * (gw + k) * (channels + 1)) * 4
    else:
        need = items * floats_per_item * 4 // split.shards
    have = _device_memory()
    if have is not None and need > have:
        raise SceneError(f"a {gw}x{gh} film needs {need / 2 ** 30:.1f} GiB for its image buffers "
                         f"({floats_per_item} floats a pixel), more than the {have / 2 ** 30:.1f} GiB "
                         f"of memory of the device that renders it")


_AUTO_ONLY = ("jaxrender partitions its launches over meshes whose axes are Auto (XLA propagates the "
              "sharding); make the mesh with axis_types=(jax.sharding.AxisType.Auto, ...) or jax.sharding.Mesh")


def _check_auto_axes(params, mesh) -> None:
    """A SceneError for explicitly sharded inputs (jax.make_mesh's default
    axis type), which JAX cannot yet carry through the buffers' assembly."""
    def explicit(m) -> bool:
        return any(t == jax.sharding.AxisType.Explicit for t in getattr(m, "axis_types", ()) or ())

    if mesh is not None and explicit(mesh):
        raise SceneError(f"mesh has Explicit axes: {_AUTO_ONLY}")
    for k, v in (params or {}).items():
        try:
            sharding = jax.typeof(v).sharding
        except Exception:   # a value JAX gives no type (the type checks come later)
            continue
        if explicit(getattr(sharding, "mesh", None)):
            raise SceneError(f"parameter {k!r} is sharded over a mesh with Explicit axes: {_AUTO_ONLY}")


def _pixel_split(mesh, cam, floats_per_item: int, max_launch_bytes) -> PixelSplit:
    """Launches side by side on the devices of ``mesh``, or, for a film
    whose per-item buffers exceed ``max_launch_bytes``, bands of rows one
    after another."""
    if mesh is not None:
        if not isinstance(mesh, jax.sharding.Mesh):
            raise SceneError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        return PixelSplit(int(mesh.size), mesh) if mesh.size > 1 else PixelSplit()
    if max_launch_bytes is None:
        max_launch_bytes = os.environ.get("JAXRENDER_MAX_LAUNCH_BYTES", DEFAULT_MAX_LAUNCH_BYTES)
        what = "$JAXRENDER_MAX_LAUNCH_BYTES"
    else:
        what = "max_launch_bytes"
    try:
        budget = int(max_launch_bytes)
    except (TypeError, ValueError):
        raise SceneError(f"{what} must be a whole number of bytes, got {max_launch_bytes!r}") from None
    if isinstance(max_launch_bytes, (bool, float)) or budget < 1:
        raise SceneError(f"{what} must be a positive whole number of bytes, got {max_launch_bytes!r}")
    gw, gh = cam.grid_size
    row_bytes = gw * floats_per_item * 4
    if gh * row_bytes <= budget:
        return PixelSplit()
    tiles = -(-gh // max(1, budget // row_bytes))
    return PixelSplit(tiles=tiles, tile_rows=-(-gh // tiles))


def _device_memory() -> int | None:
    """Bytes of memory of JAX's default device (None when it does not say)."""
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    stats = dev.memory_stats() or {}
    return stats.get("bytes_limit")


# By default the film's boundary term draws spp_grad / BOUNDARY_CURVE_SHARE
# samples per pixel along its curves (silhouettes, the film's sides, hard
# shadows' edges). Stratified along them, those are many more per pixel of
# curve than the other terms draw per pixel: on bench_geometry's scenes and
# the Cornell box's camera a quarter, even a sixteenth, left the variance
# of a derivative unchanged to three digits, at less time.
BOUNDARY_CURVE_SHARE = 4


def _default_count(v) -> bool:
    """None or 0: the default sample count (Mitsuba's ``render(spp=0)``)."""
    return v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v == 0)


def _positive_int(v, what: str) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise SceneError(f"{what} must be a positive integer, got {v!r}")
    return int(v)


def _seed(v, what: str):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if not 0 <= int(v) < 2 ** 32:
            raise SceneError(f"{what} must be in [0, 2**32), got {v}")
        return np.uint32(v)
    if hasattr(v, "dtype") and jnp.issubdtype(v.dtype, jnp.integer) and np.shape(v) == ():
        return jnp.asarray(v).astype(jnp.uint32)
    raise SceneError(f"{what} must be an integer scalar (Python int or integer jax array), got {v!r}")


def _offset(seed, by: int):
    if by == 0:
        return seed
    if isinstance(seed, np.uint32):
        return np.uint32((int(seed) + by) % 2 ** 32)
    return (seed + jnp.uint32(by)).astype(jnp.uint32)


def _decorrelated(seed):
    # An affine bijection of uint32 with no fixed point (odd multiplier,
    # odd increment): seed_grad differs from seed for every seed.
    if isinstance(seed, np.uint32):  # a Python seed: no eager JAX op (an XLA compile each)
        return np.uint32((int(seed) * 2654435761 + 0x632BE5AB) % 2 ** 32)
    return (jnp.asarray(seed, jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(0x632BE5AB)).astype(jnp.uint32)


def kernel_inputs(scene, params: Mapping[str, Any] | None = None, sensor: int = 0, media: bool = False) -> dict:
    """The scene's buffers (``Scene.kernel_inputs``) plus the BSDF tables
    computed from them."""
    inputs = scene.kernel_inputs(params, sensor, media)
    rows = inputs["bsdf_data"]
    if params and is_traced(rows):
        # Tables read only their BSDFs' alpha and eta: unless those are
        # traced, compute them from concrete rows, once (bsdf_table's cache)
        # rather than in every call of a jitted function.
        concrete = {k: v for k, v in params.items() if not is_traced(v)}
        if not (set(params) - set(concrete)) & scene.bsdf_table_keys():
            rows = scene.bsdf_rows({**scene.params, **concrete})
    inputs["bsdf_table"] = bsdf_table(scene.bsdf_types, rows)
    return inputs


def render(scene, params: Mapping[str, Any] | None = None, *, sensor: int = 0, spp: int | None = None, seed: Any = 0,
           seed_grad: Any = None, spp_grad: int | None = None, method: str | None = None,
           spp_boundary: int | None = None, mesh: jax.sharding.Mesh | None = None,
           max_launch_bytes: int | None = None) -> jax.Array:
    """Render ``scene`` to a linear-RGB image of shape (height, width, 3) (the
    film's crop window; other channels where the film's ``pixel_format``
    asks: rgba, luminance, luminance_alpha, xyz, xyza), or, for an ``aov``
    integrator, to its AOV channels, (height, width, C) in the order
    :func:`aov_names` lists them (as ``mitsuba.render`` does). Samples are
    splatted through the film's reconstruction filter and normalised by
    their summed weights, as Mitsuba's film does.

    ``sensor`` picks the scene's sensor (index in file order, as in
    ``mitsuba.render(scene, sensor=1)``), with its own film size, filter
    and sampler. ``params`` overrides values of ``scene.params`` (same keys as
    ``mitsuba.traverse``; the loaded values there are read-only). The image
    is differentiable with respect to those values (``jax.grad``,
    ``jax.jvp``, ``jax.vjp``, ``jax.linearize``):
    derivatives are computed by a forward-mode kernel and its transpose, an
    adjoint kernel (``method``: ``"prb"`` path replay backpropagation, the
    default, ``"rb"`` radiative backpropagation, the default and only
    method of polarized variants, ``"rb_biased"`` radiative
    backpropagation with incident radiance taken as 1), which run with
    ``seed_grad`` / ``spp_grad`` (defaults: a hash of ``seed`` / ``spp``),
    decorrelated from the primal image as unbiased gradients of non-linear
    losses require. ``seed`` may be a traced value under ``jax.jit``;
    changing parameters, spp or seeds never recompiles the kernels. ``spp``
    (default, or 0 as in ``mitsuba.render``: the sampler's ``sample_count``)
    and ``spp_grad`` (default or 0: ``spp``) are rounded as the sensor's
    sampler requires, as Mitsuba does (with a warning; e.g. up to a square
    for ``stratified``). ``spp_boundary``: the samples per pixel of the
    film's boundary term of camera and geometry derivatives (silhouettes
    the camera sees, the film's edges, hard shadows' edges, a thin lens's
    silhouettes and with the box filter the pixels' edges), rounded the
    same way. By default (or 0) a quarter of ``spp_grad`` along the curves
    (rounded up as the sampler requires, at least 1), stratified along
    them, and ``spp_grad`` for the thin lens's silhouettes and the pixels'
    edges, drawn per pixel: measure the variance over seeds where a
    derivative's noise is its silhouettes' (scenes dense with edges).
    Parameter values must be finite: a concrete NaN or
    inf is a ``SceneError`` naming its key (a traced one cannot be checked
    before the launch).

    ``mesh``: split the image by rows of pixels into one launch per device
    of this ``jax.sharding.Mesh`` (all of its axes), for the primal and the
    derivative kernels alike; the image is bit for bit the one-device
    image, as random numbers depend on the pixel and sample only. Without
    it, a render under a sharded ``jit`` splits where its inputs are split:
    ``jax.vmap`` over views whose parameters are sharded along the view
    axis launches each device's views on that device (scene buffers
    replicated, gradients of shared parameters summed across devices).
    A film whose kernels' per-item buffers (the splat blocks: footprint²
    x channels floats a pixel) exceed ``max_launch_bytes`` (default
    ``$JAXRENDER_MAX_LAUNCH_BYTES`` or 1 GiB) is rendered in bands of rows
    one after another, each splatted onto the image before the next, so
    only one band's buffers exist at a time (derivatives too); the image
    equals the one-launch image up to float rounding where the filter
    reaches across band edges (bit for bit with the box filter).

    Example::

        scene = jaxrender.load_dict(jaxrender.cornell_box())
        image = jaxrender.render(scene, spp=16, seed=1)

        key = "red.reflectance.value"
        loss = lambda x: jnp.mean(jaxrender.render(scene, {key: x}, spp=16) ** 2)
        g = jax.grad(loss)(scene.params[key])
    """
    cam_key, cam = scene.sensor(sensor)
    # Sample counts are rounded as the scene's sampler type requires (as
    # Mitsuba's render(spp=...) does; a warning says so).
    spp = cam.spp if _default_count(spp) else cam.sampler.sample_count(_positive_int(spp, "spp"), "spp")
    spp_grad = spp if _default_count(spp_grad) else cam.sampler.sample_count(_positive_int(spp_grad, "spp_grad"),
                                                                              "spp_grad")
    if _default_count(spp_boundary):
        spp_boundary_pixels = spp_grad
        spp_boundary = min(spp_grad, cam.sampler.rounded_count(max(1, spp_grad // BOUNDARY_CURVE_SHARE)))
    else:
        spp_boundary = spp_boundary_pixels = cam.sampler.sample_count(
            _positive_int(spp_boundary, "spp_boundary"), "spp_boundary")
    polarized = spectrum.BY_NAME[scene.variant].polarized
    if method is None:
        method = "rb" if polarized else "prb"
    if method not in ADJOINT_METHODS:
        raise SceneError(f"method must be one of {ADJOINT_METHODS}, got {method!r}")
    if polarized and method != "rb":
        raise SceneError(f"method {method!r} in the {scene.variant} variant: its adjoint divides by each vertex's "
                         "BSDF weight, and a Mueller matrix (a polarizer, a depolarizing surface) need not be "
                         "invertible; polarized variants use 'rb' (the default there)")
    try:
        integrator = integrators.create(scene.integrator)
        settings = integrator.settings(scene.integrator)
        kernels_of = transport_settings(scene)
        if kernels_of is not scene.integrator:
            integrator = integrators.create(kernels_of)
            settings = integrator.settings(kernels_of)
    except ValueError as exc:
        raise SceneError(str(exc)) from None
    sheets = sorted({t.plugin for t in scene.bsdf_types if t.plugin in _SHEETS})
    if sheets and _transport(scene) in ("volpath", "prbvolpath"):
        # (volpath's shadow rays cross pass-through surfaces by their null
        # transmission, which for these is a colour or a Mueller matrix)
        raise SceneError(f"the {sheets[0]} BSDF under the {_transport(scene)} integrator is not supported "
                         "yet (path, direct, stokes)")
    if scene.variant != "rgb":
        _check_variant(scene, cam)
        integrator = dataclasses.replace(integrator, spectrum=spectrum.BY_NAME[scene.variant])
    if cam.pixel_format != "rgb":
        if scene.integrator["type"] == "aov":
            raise SceneError(f"pixel_format {cam.pixel_format!r} with an aov integrator is not supported yet (rgb)")
        integrator = dataclasses.replace(integrator, alpha=has_alpha(cam.pixel_format))
    _check_auto_axes(params, mesh)
    structure = scene.sensor_structure(sensor)
    if scene.integrator["type"] in _REPLAY_ONLY and samples_null(structure):
        # (Mitsuba's path tracer counts a path that only passed through null
        # components and left the scene as no sample; its prb counts it)
        raise SceneError(f"the {scene.integrator['type']} integrator with pass-through (null, mask) BSDFs is not "
                         "supported yet: Mitsuba's prb counts paths that the path tracer does not (use path)")
    floats_per_item = integrator.block_width(structure) + (cam.footprint ** 2 if cam.footprint > 1 else 0)
    split = _pixel_split(mesh, cam, floats_per_item, max_launch_bytes)
    _check_film_fits(cam, floats_per_item, split, integrator.channels)
    # The scene's sampler seed offsets every seed, as Mitsuba's (its "seed
    # offset" is added to the seed a render is given).
    seed = _offset(_seed(seed, "seed"), cam.seed)
    seed_grad = _decorrelated(seed) if seed_grad is None else _offset(_seed(seed_grad, "seed_grad"), cam.seed)
    scene.check_params(params)
    camera_keys = [k for k in (cam_key, fov_key(cam_key)) if params and k in params]
    geometry_keys = [k for k in _geometry_keys(scene) if params and k in params]
    uv_keys = [p.uv_key for p in (scene.moving.placements if scene.moving is not None else ())
               if p is not None and p.uv_key is not None and params and p.uv_key in params]
    if params:
        nondiff = {**scene.nondifferentiable, **integrator.nondifferentiable_params(scene)}
        why_camera = _camera_why(scene, integrator, settings, structure) if camera_keys else None
        if why_camera is not None:
            nondiff.update({k: f"{k}: {why_camera}" for k in camera_keys if k not in nondiff})
        if geometry_keys:
            _decide(nondiff, geometry_keys, _geometry_why(scene, cam, integrator, settings, structure))
        if uv_keys:
            _decide(nondiff, uv_keys, _texcoords_why(scene, cam, integrator, settings, structure))
        params = {k: nondifferentiable(v, nondiff[k]) if k in nondiff else v for k, v in params.items()}
    inputs = kernel_inputs(scene, params, sensor, media="medium_data" in integrator.inputs())
    inputs.update(settings, spp=np.uint32(spp), seed=seed, seed_grad=seed_grad, spp_grad=np.uint32(spp_grad),
                  spp_boundary=np.uint32(spp_boundary), spp_boundary_pixels=np.uint32(spp_boundary_pixels))
    if integrator.spectrum.spectral:
        inputs["spectral_data"] = variants.spectral_tables()
        inputs["spectral_curves"] = scene.spectral_curves.reshape(-1)
    # (moving texture coordinates turn tangent frames: the geometry kernels follow them)
    if (camera_keys and cam_key not in scene.nondifferentiable) or geometry_keys or (uv_keys and structure.tangents):
        inputs["edge_topology"] = inputs["edges"] = edge_topology(scene)
        if structure.instanced and instance_topology(scene) is not None:
            inputs["instance_topology"], inputs["instance_owner"] = instance_topology(scene)
    motion = ()
    if geometry_keys:
        inputs["motion_probes"], motion = _motion(scene, structure, params, geometry_keys)
    # The camera's reason is the scene's, for its to_world parameter.
    why = (("camera", scene.nondifferentiable.get(cam_key, "")), ("tris", _GEOMETRY_WHY),
           ("shape_data", _GEOMETRY_WHY), ("tri_normals", _GEOMETRY_WHY), ("tri_uv", _GEOMETRY_WHY),
           ("instances", _GEOMETRY_WHY))
    film = FilmGeometry(grid=cam.grid_size[::-1], border=cam.border, footprint=cam.footprint, rfilter=cam.filter_spec)
    config = RenderConfig(film, method, why, structure, integrator, split, scene.delta_lights, motion)
    image = render_rules.render(config, inputs)
    # mono: the film's one colour channel is the luminance, whatever the format (as Mitsuba's)
    if scene.integrator["type"] == "stokes" or variants.color_base(scene.variant) == "mono":
        return image  # (mono: the film's one colour channel is the luminance, whatever the format, as Mitsuba's)
    return to_pixel_format(image, cam.pixel_format)


_SHEETS = ("polarizer", "retarder", "circular")


# Mitsuba's path replay integrators, which render with the path tracer's
# kernels (loaders/integrators.load_prb)
_REPLAY_ONLY = ("prb", "prb_projective", "direct_projective")


def _transport(scene) -> str:
    """The integrator type that traces the scene's paths (a stokes integrator's nested one)."""
    settings = transport_settings(scene)
    return settings["nested"]["type"] if settings["type"] == "stokes" else settings["type"]


def transport_settings(scene) -> Mapping[str, Any]:
    """The integrator settings whose kernels render ``scene``: its own
    (``scene.integrator``, that very object), except that ``volpath`` and
    ``prbvolpath`` (a stokes integrator's nested one too) render a scene
    without participating media or pass-through (null, mask) surfaces with
    the path tracer's kernels. There their paths are the path tracer's,
    the same estimate in expectation (Russian roulette aside, which moves
    the noise only), and the path tracer's kernels take camera and
    geometry derivatives and follow dispersive refractions.

    Example::

        scene = jaxrender.load_dict({**jaxrender.cornell_box(), "integrator": {"type": "prbvolpath"}})
        transport_settings(scene)["type"]      # "path" (max_depth 6, prbvolpath's default)
    """
    props = scene.integrator
    if props["type"] == "stokes":
        nested = _medium_free(scene, props["nested"])
        return props if nested is props["nested"] else {**props, "nested": nested}
    return _medium_free(scene, props)


def _medium_free(scene, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """``props``, or the path tracer's settings where ``props`` is a
    volumetric path tracer with nothing volumetric to trace in ``scene``."""
    if props["type"] not in ("volpath", "prbvolpath") or scene.media or samples_null(scene.structure):
        return props
    # (prbvolpath's own default depth is Mitsuba's ADIntegrator's)
    return {**({"max_depth": 6} if props["type"] == "prbvolpath" else {}), **props, "type": "path"}


def _check_variant(scene, cam) -> None:
    """What the scene's variant (mono, spectral, polarized) cannot render yet: a SceneError."""
    name = variants.color_base(scene.variant)
    if scene.variant.endswith("_polarized"):
        _check_polarized(scene, cam)
    if name == "mono":
        if cam.pixel_format.startswith("xyz"):
            raise SceneError(f"pixel_format {cam.pixel_format!r} in the mono variant: Mitsuba's mono film "
                             "writes luminance (use luminance or luminance_alpha)")
        if scene.sunsky is not None:
            raise SceneError("the sunsky emitter in the mono variant is not supported yet")
        return
    why = variants.spectral_why(scene)
    if scene.dispersive and _transport(scene) not in ("path", "direct", "aov"):
        why = (f"a dispersive index of refraction under the {_transport(scene)} integrator "
               "(path and direct follow one wavelength after a dispersive refraction; volpath does not yet)")
    if why is not None:
        raise SceneError(f"the spectral variant cannot render this scene yet: {why}")
    # (every pixel format: the film's linear sRGB is a linear map of the
    # spectrum's XYZ, so xyz and luminance follow from it exactly, as
    # Mitsuba's spectral film gives them)


def _check_polarized(scene, cam) -> None:
    """What a polarized variant cannot render yet: a SceneError."""
    kind = scene.integrator["type"]
    if kind not in ("path", "direct", "volpath", "prbvolpath", "stokes", "aov"):
        raise SceneError(f"the {kind} integrator in the {scene.variant} variant is not supported yet "
                         "(path, direct, volpath, prbvolpath, stokes, aov)")
    if kind == "stokes" and cam.pixel_format != "rgb":
        raise SceneError(f"pixel_format {cam.pixel_format!r} with the stokes integrator is not supported yet (rgb)")


def _decide(nondiff: dict, keys: list, why: str | None) -> None:
    """Mark ``keys`` differentiable in ``nondiff`` (the reasons by key), or
    not differentiable for ``why``."""
    for k in keys:
        if why is None:
            nondiff.pop(k, None)
        else:
            nondiff[k] = f"{k}: {why}"


def _moving_why(what: str, moves: str, scene, settings, structure) -> str | None:
    """What stops derivatives of ``what`` (the camera's, the meshes') in
    every form this renderer takes them (``moves``: what a reflection moves
    with), or None. Shared instances' silhouettes are their groups' edges
    per instance, up to ``MAX_INSTANCE_EDGES`` copies."""
    if any(t.delta for t in structure.bsdf_types):
        return ("the scene has BSDFs with Dirac lobes (" + ", ".join(t.name for t in structure.bsdf_types if t.delta)
                + f"): what they reflect moves with {moves}, a derivative detached sampling cannot take")
    if structure.instanced and instance_topology(scene) is None:
        return (f"{what} derivatives sample every instance's copy of its shapegroup's edges, more than "
                f"{MAX_INSTANCE_EDGES} here: load the scene with expand_instances=True")
    if samples_null(structure):
        return f"{what} derivatives of scenes with pass-through (null, mask) BSDFs are not supported yet"
    return None


def _camera_why(scene, integrator, settings, structure) -> str | None:
    """Why this render cannot differentiate its camera, or None."""
    if "camera" not in integrator.differentiable:
        return (f"camera derivatives are implemented for the path and direct integrators, not "
                f"{scene.integrator['type']!r}" + _VOLUMETRIC_NOTE.get(integrator.name, ""))
    return _moving_why("camera", "the camera", scene, settings, structure)


def _geometry_keys(scene) -> list:
    """The parameters that move geometry the kernels can follow: a mesh's
    triangles (``vertex_positions``, a rectangle's ``to_world``) and
    ``vertex_normals``, an analytic shape's ``to_world``, a shared
    instance's ``to_world``."""
    g = scene.moving
    if g is None:
        return []
    return ([k for p in g.placements if p is not None for k in (p.key, p.normals_key) if k is not None]
            + [s.param for s in g.shapes if s.param is not None]
            + list(g.instances.keys if g.instances is not None else ()))


# (volpath's kernels differentiate neither; transport_settings)
_VOLUMETRIC_NOTE = {"volpath": " in a scene with participating media or pass-through (null, mask) surfaces "
                               "(without them it renders with the path tracer's kernels, which do)"}


def _surface_why(what: str, buffer: str, integrator) -> str | None:
    """Why ``what`` derivatives (of the input ``buffer``) are unsupported by
    this integrator, or None."""
    if buffer not in integrator.differentiable:
        return (f"{what} derivatives are implemented for the path and direct integrators, not {integrator.name!r}"
                + _VOLUMETRIC_NOTE.get(integrator.name, ""))
    return None


def _geometry_why(scene, cam, integrator, settings, structure) -> str | None:
    """Why this render cannot differentiate its geometry, or None."""
    why = _surface_why("geometry", "tris", integrator)
    if why is not None:
        return why
    return _followed_why("geometry", "their surface", scene, cam, settings, structure)


def _followed_why(what: str, moves: str, scene, cam, settings, structure) -> str | None:
    """What stops the kernels of moving geometry (which ``what``
    derivatives run in) in this render, or None."""
    if cam.kind not in ("perspective", "orthographic", "thinlens"):
        return f"{what} derivatives are implemented for the perspective, thinlens and orthographic sensors only"
    return _moving_why(what, moves, scene, settings, structure)


def _texcoords_why(scene, cam, integrator, settings, structure) -> str | None:
    """Why this render cannot differentiate its meshes' texture
    coordinates, or None: where a point's UVs move, what its textures read
    must change continuously (bilinear bitmaps); where the scene has
    tangent frames, they turn, and the kernels of moving geometry follow
    them (with those kernels' limits)."""
    why = _surface_why("texture-coordinate", "tri_uv", integrator)
    if why is not None:
        return why
    if structure.tangents:
        why = _followed_why("texture-coordinate", "the tangent frames", scene, cam, settings, structure)
        if why is not None:
            return why
    jumps = [t for t in scene.textures if t.kind == ktex.CHECKERBOARD or t.plugin is not None
             or (t.kind == ktex.BITMAP and t.filter == ktex.FILTER_NEAREST)]
    if jumps:
        return ("texture-coordinate derivatives need bilinear bitmaps: a checkerboard's, a procedural texture's or "
                "a nearest-filtered bitmap's value jumps where the UVs move (boundaries these kernels do not sample)")
    return None


def _motion(scene, structure, params, keys):
    """({key: a scalar that carries ``params[key]``'s tangent}, ((key,
    MovingRows or None), ...)) for the geometry ``keys``: the derivative
    rules see which of them have tangents, and favour what those move
    (``render_rules._moved``). A concrete value has no tangent, and no
    eager op is spent on it. In scenes with shared instances, what moves
    is favoured where it is the scene's own geometry or an instance (its
    to_world); a shapegroup's mesh moves copies the rows do not name."""
    probes = {k: jnp.sum(params[k]) * 0.0 if is_traced(params[k]) else np.float32(0.0) for k in keys}
    cache = scene.__dict__.setdefault("_moving_rows", {})
    for k in keys:
        if k not in cache:
            cache[k] = _moving_rows(scene, structure, k)
    return probes, tuple((k, cache[k]) for k in keys)


def _moving_rows(scene, structure, key: str) -> MovingRows | None:
    """What parameter ``key`` moves (``_motion``): the scene's own
    triangles and shapes, and a shared instance's copies of its
    shapegroup's edges (placed by its to_world); None where it moves what
    the rows cannot name (a shapegroup's own mesh, whose copies every
    instance shares, or more copies than ``instance_topology`` keeps)."""
    rows = scene.moving.moved_rows(key)
    if not structure.instanced:
        return MovingRows(*rows, moving_items(edge_topology(scene), *rows[:2]))
    topo = instance_topology(scene)
    if topo is None or np.any(rows[0] >= own_rows(scene)):
        return None
    placement = scene.moving.instances
    params = [] if placement is None else placement.params
    mine = np.asarray([i for i, p in enumerate(params) if p == key], np.int32)
    theirs = np.nonzero(np.isin(np.asarray(topo[1]), mine))[0]
    boxes = (np.zeros((0, 6), np.float32) if not len(mine) else
             np.concatenate([placement.group_lo[mine], placement.group_hi[mine]], axis=1).astype(np.float32))
    return MovingRows(*rows, moving_items(edge_topology(scene), *rows[:2], len(topo[1]), theirs), mine, boxes)


def own_rows(scene) -> int:
    """How many leaf rows of ``tris`` are the scene's own triangles: the
    rows of shared shapegroups follow them, in group space
    (``instance_topology``)."""
    if scene.instancing is None:
        return len(scene.triangles)
    return int(scene.instancing["groups"][0, layout.GROUP_FIRST_ROW])


def edge_topology(scene):
    """The welded edges of the scene's triangles (``primitives.boundary
    .edge_topology``, emitters' triangles after the others of an edge),
    computed once per scene."""
    topo = scene.__dict__.get("_edge_topology")
    if topo is None:
        tris, own = kernel_inputs(scene)["tris"], own_rows(scene)
        topo = xla_aligned(boundary_topology(tris[:own], scene.tri_attr[:own, layout.ATTR_EMITTER] >= 0))
        scene.__dict__["_edge_topology"] = topo
    return topo


# Edges of shared shapegroups, one copy per instance, that a camera's
# boundary term projects (more: camera derivatives raise rather than run
# out of memory; expand_instances copies the meshes instead).
MAX_INSTANCE_EDGES = 1 << 24


def instance_topology(scene):
    """The welded edges of the scene's shared shapegroups, one copy per
    instance, and the instance of each (``primitives.boundary
    .instance_edges``), computed once per scene; None where there are more
    than ``MAX_INSTANCE_EDGES``."""
    if "_instance_topology" not in scene.__dict__:
        inst = scene.instancing
        topo = instance_edges(kernel_inputs(scene)["tris"], inst["groups"], inst["instance_group"],
                              MAX_INSTANCE_EDGES)
        scene.__dict__["_instance_topology"] = None if topo is None else tuple(xla_aligned(t) for t in topo)
    return scene.__dict__["_instance_topology"]


def aov_names(scene) -> list[str]:
    """Channel names of an aov integrator's image (Mitsuba's, e.g. ``dd.T``)."""
    if scene.integrator["type"] != "aov":
        raise SceneError(f"the scene's integrator is {scene.integrator['type']!r}, not 'aov'")
    return channel_names(parse_aovs(scene.integrator["aovs"]))
