"""From a Mitsuba-style scene description to the buffers a kernel reads.

``Scene`` holds the static structure (which plugins, integrator settings,
film size) and the parameter arrays under the keys ``mitsuba.traverse``
uses (``red.reflectance.value``, ``light.emitter.radiance.value``, ...).
Geometry is flattened to world-space triangles in BVH leaf order, followed
by the rows of shapegroups shared by instances (group space, ``instancing.py``).

:func:`load_dict` drives the loading: ``builder.SceneBuilder`` walks the
dictionary and hands each plugin to its loader (``loaders/``: shapes,
emitters, BSDFs, textures, sensors, integrators, registered by Mitsuba
type name), reading properties strictly (``properties.py``: a property no
loader reads is an error, as in Mitsuba); ``geometry.py`` builds the
arrays. Supported so far: shapes rectangle, cube, obj, ply, serialized, sphere, disk,
cylinder, shapegroup and instance (one BVH per group shared by its
instances: ``instancing.py``);
the BSDFs of ``kernels.bsdfs.registry`` (also inside twosided, blendbsdf
and mask, which are composites of that registry), with
``bitmap`` or ``checkerboard`` textures; area, point, spot, directional,
constant and envmap emitters; perspective, thinlens and orthographic
sensors; hdrfilm with box, tent
and gaussian filters; independent, stratified, multijitter, orthogonal and
ldsampler samplers; path, direct, volpath, prbvolpath, aov and stokes
integrators, and Mitsuba's prb, prb_projective and direct_projective. Anything else raises
:class:`SceneError` naming the plugin, never a wrong image.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..kernels import emitters as kemitters
from ..kernels import layout
from ..kernels import spectrum as kspectrum
from ..kernels import textures as ktex
from ..kernels.bsdfs import registry as bsdf_registry
from ..kernels.context import GEOMETRY
from ..kernels.shapes import NAMES as SHAPE_NAMES
from . import sunsky as sunsky_model
from . import textures as tex_io
from .arrays import is_immutable, is_traced, xla_aligned
from . import variants
from .builder import SceneBuilder
from .camera import Camera, filter_constants, fov_key, is_rigid
from .errors import SceneError
from .plugin_names import did_you_mean
from .geometry import scene_fields
from .loaders.media import grid_majorant
from .refit import MovingGeometry
from .shapes import SHAPE_ROW

__all__ = ["Camera", "Scene", "SceneError", "filter_constants", "load_dict"]

(EMITTER_AREA, EMITTER_POINT, EMITTER_DIRECTIONAL, EMITTER_CONSTANT, EMITTER_SPOT, EMITTER_ENVMAP, EMITTER_SPHERE,
 EMITTER_DISK, EMITTER_CYLINDER, EMITTER_SUNSKY) = (kemitters.TYPE_ID[n] for n in kemitters.NAMES)
EMITTER_FRAME_WIDTH = layout.EMITTER_FRAME_ROW


def _kept(value: Any) -> Any:
    """A built buffer as :meth:`Scene._built` keeps it: aligned for XLA
    (``xla_aligned``) and read-only."""
    value = xla_aligned(value)
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def load_dict(d: Mapping, *, variant: str | None = None, expand_instances: bool = False) -> Scene:
    """Build a Scene from a ``mitsuba.load_dict``-style dictionary (or the
    dict ``xml_loader.parse_xml`` returns, whose errors then name the file
    and line).

    ``variant``: the colour type (``"mono"``, ``"rgb"``, ``"spectral"``;
    default: the one ``jaxrender.set_variant`` selected, else rgb), as
    Mitsuba's ``variant`` (``scene/variants.py``).
    ``expand_instances``: copy each instance's meshes into the scene
    instead of sharing its shapegroup (the same image from larger buffers;
    for comparisons).

    Example::

        scene = jaxrender.load_dict(jaxrender.cornell_box())
    """
    with variants.loading(variant) as load:
        fields = scene_fields(SceneBuilder(expand_instances=expand_instances).load_scene(d))
        return Scene(**fields, variant=load.name, spectral_curves=load.curve_table(), dispersive=load.dispersive)


@dataclass
class Scene:
    """Static structure plus differentiable parameters of a loaded scene."""
    camera: Camera
    integrator: dict
    # (N, 9) world space, leaf order (zero rows: analytic shapes), then the shared shapegroups' rows
    triangles: np.ndarray
    tri_attr: np.ndarray                   # (N, 2) bsdf index, emitter index (-1: none), per primitive
    bvh_bounds: np.ndarray                 # the analytic shapes' skip-link BVH (no rows without them)
    bvh_links: np.ndarray
    light_tris: np.ndarray                 # emissive triangles, grouped by emitter
    light_cdf: np.ndarray                  # area CDF within each emitter's group
    emitter_meta: np.ndarray               # (E, 4) type, first light triangle, count, texture (envmap)
    emitter_geom: np.ndarray               # (E, 4) position / direction, area
    env_emitter: int                       # index of the constant or envmap emitter, -1 if none
    camera_key: str = "sensor.to_world"      # the first sensor's (see sensors)
    params: dict = field(default_factory=dict)   # traverse-style key -> numpy array
    bsdfs: list = field(default_factory=list)    # (BSDF type name, [(param key | constant, width)], twosided)
    emitter_keys: list = field(default_factory=list)
    # Parameters the renderer cannot differentiate (key -> why); asking for
    # their derivative raises instead of returning a wrong number.
    nondifferentiable: dict = field(default_factory=dict)
    # Parameters whose loaded value a render may not change (key -> why).
    frozen: dict = field(default_factory=dict)
    # Keys Mitsuba's traverse has that are not parameters here (key -> why,
    # e.g. an instance's to_world): a params entry for one says why.
    unexposed: dict = field(default_factory=dict)
    # Every sensor of the scene, in file order: (to_world parameter key, Camera).
    sensors: list = field(default_factory=list)
    # (E, EMITTER_FRAME_WIDTH) per emitter: world-to-local 3x3 (row-major),
    # then per-type constants (spot: cos cutoff, cos beam width, cutoff in
    # radians, 1 / transition width in radians).
    emitter_frame: np.ndarray = field(default_factory=lambda: np.zeros((0, EMITTER_FRAME_WIDTH), np.float32))
    # Textures (see jaxrender.scene.textures and kernels.textures).
    tri_uv: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), np.float32))  # (N, 6) leaf order
    textures: list = field(default_factory=list)          # TextureSpec per texture (envmap included)
    bsdf_slots: list = field(default_factory=list)        # per BSDF: [(row start, width, texture, luminance)]
    bsdf_nesting: int = 0                                 # how deep composite BSDFs nest (Structure.bsdf_nesting)
    env_texture: int = -1                                 # texture index of the envmap, -1 if none
    env_frame: np.ndarray = field(default_factory=lambda: np.eye(3, dtype=np.float32))  # envmap to_world rotation
    sunsky: Any = None                                    # a sunsky's scene.sunsky.SunskySource, None if none
    # Shading normals: (N, 9) world vertex normals per triangle (leaf order;
    # a zero row: the face normal), or no rows when no mesh has any.
    tri_normals: np.ndarray = field(default_factory=lambda: np.zeros((0, 9), np.float32))
    # Analytic shapes: per leaf entry -1 (triangle) or the shape's row of
    # shape_data (shapes.AnalyticShape.row); no rows without such shapes.
    prim_shape: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int32))
    shape_data: np.ndarray = field(default_factory=lambda: np.zeros((0, SHAPE_ROW), np.float32))
    shapes: list = field(default_factory=list)            # AnalyticShape per shape_data row
    # The 8-wide BVH over the scene's triangles that the kernels traverse,
    # as the (nodes, leaves) buffers of wide_bvh.WideBVH.packed (set by
    # every loader); analytic shapes are in the skip-link BVH bvh_bounds /
    # bvh_links, whose leaves name their rows (with a few triangles', see
    # scene.geometry.SKIP_LINK_TRIANGLES).
    wide_bvh: tuple | None = None
    # Instanced shapegroups: the buffers of layout.instance_inputs
    # (scene/instancing.py), whose primitives' rows follow the scene's own
    # in triangles, tri_attr, ...; None without instances of meshes.
    instancing: dict | None = None
    # The variant it was loaded in (scene/variants.py): its colours' encoding.
    variant: str = "rgb"
    # spectral: the tabulated spectra its colours refer to, (n, kernels.spectrum.CURVE_SAMPLES)
    spectral_curves: np.ndarray = field(default_factory=lambda: np.zeros((0, kspectrum.CURVE_SAMPLES), np.float32))
    dispersive: bool = False          # (spectral) a dielectric's IOR is one of those curves
    # Participating media: loaders.media.MediumSpec per medium; per leaf
    # entry its interior and exterior medium (-1: none; no rows without media).
    media: list = field(default_factory=list)
    prim_media: np.ndarray = field(default_factory=lambda: np.zeros((0, layout.PRIM_MEDIA_ROW), np.int32))
    # Meshes placed by parameters (refit.MovingGeometry; None: no such mesh):
    # a render given one of their keys rebuilds the geometry buffers.
    moving: MovingGeometry | None = None
    # (buffer name, sensor, parameter keys) -> its jitted builder (see param_buffers)
    _jitted_param_buffers: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # builder key -> (the immutable values, the buffers built from them): see _built
    _concrete_builds: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        # The large buffers are stored as XLA uses them in place (xla_aligned),
        # so that no render copies them and no second copy is held.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                setattr(self, f.name, xla_aligned(value))
            elif isinstance(value, tuple) and all(isinstance(v, np.ndarray) for v in value):
                setattr(self, f.name, tuple(xla_aligned(v) for v in value))
        if self.instancing is not None:
            self.instancing = {k: xla_aligned(v) for k, v in self.instancing.items()}
        # The loaded values are read-only, so that the buffers built from them
        # can be kept (_built): a render changes them through its params.
        for value in self.params.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    @property
    def analytic_kinds(self) -> tuple:
        """The names of the analytic shapes the scene has (``kernels.shapes
        .NAMES`` order): its kernels trace those kinds' code only."""
        kinds = {int(k) for k in np.asarray(self.shape_data)[:, layout.SHAPE_KIND]}
        return tuple(n for i, n in enumerate(SHAPE_NAMES) if i in kinds)

    @functools.cached_property
    def structure(self):
        """The trace-time features the kernels are specialised on (computed
        once: a render asks for it several times)."""
        from ..kernels.context import Structure
        plugins = {t.plugin for t in self.textures if t.plugin is not None}
        return Structure(max((len(s) for s in self.bsdf_slots), default=0), self.env_texture >= 0,
                         self.analytic_kinds, len(self.tri_normals) > 0,
                         tuple(t for t, _, _ in self.bsdfs) or ("diffuse",),
                         textures=tuple(n for n in ktex.PLUGINS if n in plugins),
                         sensor=self.sensor(0)[1].kind, sampler=self.sensor(0)[1].sampler.type,
                         footprint=self.sensor(0)[1].footprint, bsdf_nesting=self.bsdf_nesting,
                         media=tuple(sorted({m.kind for m in self.media})),
                         phases=tuple(sorted({m.phase for m in self.media})),
                         sunsky=bool(np.any(self.emitter_meta[:, layout.META_TYPE] == EMITTER_SUNSKY)),
                         delta_lights=bool(self.delta_lights),
                         instanced=self.instancing is not None, spectral_curves=len(self.spectral_curves) > 0,
                         dispersion=self.dispersive)

    @functools.cached_property
    def delta_lights(self) -> tuple:
        """(emitter row, whether directional) of each point, spot and
        directional light: the lights whose shadows are hard."""
        kinds = self.emitter_meta[:, layout.META_TYPE]
        return tuple((int(k), bool(kinds[k] == EMITTER_DIRECTIONAL)) for k in range(len(kinds))
                     if kinds[k] in (EMITTER_POINT, EMITTER_SPOT, EMITTER_DIRECTIONAL))

    def sensor_structure(self, index: int = 0):
        """:attr:`structure` with sensor ``index``'s type, sampler type and
        filter footprint (sensors may differ in each)."""
        cam = self.sensor(index)[1]
        s = self.structure
        if (s.sensor, s.sampler, s.footprint) == (cam.kind, cam.sampler.type, cam.footprint):
            return s
        return dataclasses.replace(s, sensor=cam.kind, sampler=cam.sampler.type, footprint=cam.footprint)

    @property
    def bsdf_types(self) -> list:
        """The kernel-side BsdfType of each BSDF row."""
        return [bsdf_registry.TYPES[t] for t, _, _ in self.bsdfs]

    def bsdf_table_keys(self) -> frozenset:
        """The parameter keys that BSDF lookup tables read (a rough
        plastic's alpha and eta, ``BsdfType.table``)."""
        keys = set()
        for (_, fields, _), t in zip(self.bsdfs, self.bsdf_types):
            if t.table is None:
                continue
            slots = {t.slot(name) for name in t.table[1:]}
            start = 0
            for k, w in fields:
                if start in slots and isinstance(k, str):
                    keys.add(k)
                start += w
        return frozenset(keys)

    def bsdf_rows(self, p: Mapping[str, Any]) -> np.ndarray:
        """The ``bsdf_data`` buffer for concrete parameter values ``p``."""
        keys, build = self._param_buffer_builders(0, {})["bsdf_data"]
        return build({k: p[k] for k in keys}, np)

    def texture_inputs(self) -> dict:
        """The texture buffers of the path kernel that no parameter value
        changes (texels and envmap tables: :meth:`param_buffers`)."""
        slots, rows = [], []
        for s in self.bsdf_slots:
            rows.append((len(slots), len(s)))
            slots.extend(s)
        offsets = np.cumsum([0] + [t.size for t in self.textures])
        meta = np.zeros((len(self.textures), layout.TEX_META_ROW), np.int32)
        uv = np.zeros((len(self.textures), 6), np.float32)
        plugins = self.structure.textures
        for i, t in enumerate(self.textures):
            kind = t.kind if t.plugin is None else ktex.CUSTOM + plugins.index(t.plugin)
            meta[i] = (offsets[i], t.width, t.height, t.channels, kind, t.wrap, t.filter, t.depth)
            uv[i] = (t.to_uv if t.to_uv is not None else np.eye(3)[:2]).reshape(6)
        textured = bool(slots) or self.structure.tangents     # (a frame-perturbing BSDF needs UVs)
        env_frame = (self.env_frame.astype(np.float32).reshape(1, 9) if self.env_texture >= 0
                     else np.zeros((0, 9), np.float32))
        return dict(tri_uv=self.tri_uv if textured else np.zeros((0, 6), np.float32),
                    bsdf_tex=np.array(rows, np.int32).reshape(-1, 2),
                    tex_slots=np.array(slots, np.int32).reshape(-1, 4), tex_meta=meta, tex_uv=uv,
                    env_frame=env_frame)

    def medium_meta(self) -> np.ndarray:
        """Per medium: its kind and phase function, as indices of the structure's."""
        st = self.structure
        return np.array([(st.media.index(m.kind), st.phases.index(m.phase)) for m in self.media],
                        np.int32).reshape(-1, layout.MEDIUM_META_ROW)

    def sensor(self, index: int = 0) -> tuple[str, "Camera"]:
        """(to_world parameter key, Camera) of sensor ``index`` (file order)."""
        sensors = self.sensors or [(self.camera_key, self.camera)]
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(sensors):
            raise SceneError(f"sensor must be an index in [0, {len(sensors)}), got {index!r} "
                             f"(the scene has {len(sensors)} sensor(s))")
        return sensors[int(index)]

    def check_params(self, params: Mapping[str, Any] | None) -> None:
        """A SceneError, naming the key, for a ``params`` entry that is not a
        parameter of the scene or whose value has the wrong shape; for a
        concrete (not traced) value, also one that is not numeric or not
        finite, and a camera to_world that is not rigid."""
        if not params:
            return
        unknown = set(params) - set(self.params)
        for k in sorted(unknown & set(self.unexposed)):
            raise SceneError(f"parameter {k!r} is not a parameter of this scene: {self.unexposed[k]}")
        if unknown:
            hints = "".join(did_you_mean(k, self.params) for k in sorted(unknown))
            raise SceneError(f"unknown scene parameter(s) {sorted(unknown)}{hints}; known: {sorted(self.params)}")
        # (an orthographic camera's to_world may scale: its extent)
        cameras = {key for key, cam in (self.sensors or [(self.camera_key, self.camera)])
                   if cam.kind != "orthographic"}
        fovs = {fov_key(key) for key in cameras}
        for k, v in params.items():
            if not is_traced(v):
                _check_finite(k, v)
                if k in self.frozen and not np.array_equal(np.asarray(v, np.float32),
                                                           np.asarray(self.params[k], np.float32)):
                    raise SceneError(f"parameter {self.frozen[k]}")
            if tuple(np.shape(v)) != tuple(np.shape(self.params[k])):
                raise SceneError(f"parameter {k!r} must have shape {tuple(np.shape(self.params[k]))}, "
                                 f"got {tuple(np.shape(v))}")
            if k in cameras and not is_traced(v) and not is_rigid(v):
                raise SceneError(f"parameter {k!r}: a camera's to_world must be a rotation and "
                                 "translation (Mitsuba refuses scale; a singular one has no view)")
            if k.endswith(".x_fov") and k in fovs and not is_traced(v) and not 0.0 < float(np.asarray(v)) < 180.0:
                raise SceneError(f"parameter {k!r}: a field of view must be in (0, 180) degrees, got {float(v)}")

    def kernel_inputs(self, params: Mapping[str, Any] | None = None, sensor: int = 0, media: bool = False) -> dict:
        """Buffers for the path kernel (``layout.scene_inputs``; ``media``: also
        ``layout.media_inputs``); ``params`` overrides scene.params values
        (checked: :meth:`check_params`)."""
        self.check_params(params)
        p = dict(self.params)
        if params:
            p.update(params)
        _, cam = self.sensor(sensor)
        order = self.structure.bsdfs
        bsdf_type = np.array([order.index(t) for t, _, _ in self.bsdfs], np.int32)
        w = self.wide_bvh
        buffers = dict(tris=self.triangles, tri_attr=self.tri_attr, wide_nodes=w[0], wide_leaves=w[1],
                       bvh_bounds=self.bvh_bounds, bvh_links=self.bvh_links, bsdf_type=bsdf_type,
                    light_tris=self.light_tris, light_cdf=self.light_cdf, emitter_meta=self.emitter_meta,
                    emitter_geom=self.emitter_geom, env_emitter=np.int32(self.env_emitter),
                    emitter_frame=self.emitter_frame, tri_normals=self.tri_normals, prim_shape=self.prim_shape,
                    shape_data=self.shape_data, **self.texture_inputs(), **self.param_buffers(p, sensor, media, params),
                    **(dict(prim_media=self.prim_media, medium_meta=self.medium_meta(),
                            camera_medium=np.int32(cam.medium)) if media else {}),
                    **cam.sampler.kernel_inputs(), **cam.film_inputs(), **(self.instancing or {}))
        geometry = self.geometry_buffers(p, params)
        if not len(buffers["tri_uv"]):
            geometry.pop("tri_uv", None)      # (the kernels read no UVs: nothing textured)
        buffers.update(geometry)
        buffers.update(self.sunsky_buffers(p, params, buffers))
        # (the scene's own and kept buffers are aligned already: this copies
        # only what a render built anew, which XLA would copy otherwise)
        return {name: xla_aligned(value) for name, value in buffers.items()}

    def sunsky_buffers(self, p: Mapping[str, Any], given: Mapping[str, Any] | None, buffers: Mapping) -> dict:
        """The sunsky's buffers (its emitter rows, sampling map, complex sun
        table, sampling tables and frame) rebuilt for the values ``p`` when
        ``given`` (a render's params) changes one of its parameters, as
        Mitsuba's ``parameters_changed`` rebuilds them; empty otherwise.
        With numpy: a traced value is a SceneError (the sky's reduction is
        not written for jax), as is a timed sunsky's ``sun_direction``,
        which Mitsuba makes read-only. A new ``to_world`` alone turns the
        sun with the sky, as in Mitsuba (its sun keeps its local direction)."""
        src = self.sunsky
        keys = {name: f"{src.key}.{name}" for name in src.names()} if src is not None and given else {}
        changed = [k for k in keys.values() if k in given and (is_traced(given[k]) or not np.array_equal(
            np.asarray(given[k], np.float64), np.asarray(self.params[k], np.float64)))]
        if not changed:
            return {}
        for k in changed:
            if is_traced(given[k]):
                raise SceneError(f"parameter {k!r}: a sunsky's parameters are read with numpy when a render "
                                 "changes them; give a concrete value (not one traced by jit, grad or vmap)")
        if src.timed and keys["sun_direction"] in changed:
            raise SceneError(f"parameter {keys['sun_direction']!r} is read-only: the sun follows the date, time "
                             "and place (as in Mitsuba)")
        values = {name: np.asarray(p[k], np.float64) for name, k in keys.items()}
        if not src.timed and keys["to_world"] in changed and keys["sun_direction"] not in changed:
            # Mitsuba keeps the sun's direction in the emitter's frame when only to_world changes
            old = sunsky_model.rotation_of(self.params[keys["to_world"]], src.key, "a sunsky")
            new = sunsky_model.rotation_of(values["to_world"], src.key, "a sunsky")
            values["sun_direction"] = new @ old.T @ values["sun_direction"]
        sky = src.environment(values, src.key)
        e, f32 = src.emitter, np.float32
        out = dict(emitter_geom=_replaced(buffers["emitter_geom"], e, sky.geom_row()),
                   emitter_frame=_replaced(buffers["emitter_frame"], e, sky.frame_row(src.table_texture)),
                   env_frame=np.asarray(sky.map_frame, f32).reshape(1, 9))
        sampling = dataclasses.replace(self.textures[src.map_texture], fixed=sky.sampling_map)
        texels = [(src.map_texture, sampling.texels(p, np))]
        if src.table_texture >= 0:
            texels.append((src.table_texture, np.asarray(sky.sun_table_values, f32).reshape(-1)))
        offsets = np.cumsum([0] + [t.size for t in self.textures])
        out["texels"] = buffers["texels"]
        for index, block in texels:
            out["texels"] = _replaced(out["texels"], slice(int(offsets[index]), int(offsets[index]) + len(block)), block)
        out["env_dist"] = tex_io.envmap_tables(sampling, sky.sampling_map, np)
        return out

    def geometry_buffers(self, p: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict:
        """The geometry buffers (triangles, BVH, normals, mesh emitters'
        areas) for the values ``p`` when ``given`` (a render's ``params``)
        moves a mesh; empty otherwise, so the loaded buffers are used.
        Concrete values are refit with numpy, traced ones in one jitted
        function (see :mod:`jaxrender.scene.refit`)."""
        g = self.moving
        moved = tuple(k for k in g.keys if k in given) if g is not None and given else ()
        if not moved:
            return {}
        values = {k: p[k] for k in moved}
        out = self._built(("geometry", moved), lambda v, xp: g.buffers(v, xp, self.emitter_geom), values)
        if any(is_traced(v) for v in values.values()):
            # Only the buffers the kernels follow carry derivatives (the
            # triangles, their vertex normals and texture coordinates, the
            # analytic shapes' rows): the BVH, the light sampling tables and
            # areas are sampling (their motion changes no estimate's
            # expectation), and the kernels follow moving points through the
            # surfaces themselves.
            import jax
            out = {k: v if k in GEOMETRY + ("tri_uv",) else jax.lax.stop_gradient(v) for k, v in out.items()}
        if not any(is_traced(v) for v in values.values()):
            area = out.get("emitter_geom", self.emitter_geom)[:, layout.GEOM_AREA]
            for e, _ in g.lights + g.shape_lights:
                if not (np.isfinite(area[e]) and area[e] > 0):
                    raise SceneError(f"{self.emitter_keys[e].rsplit('.emitter', 1)[0]}: the new geometry gives the "
                                     f"emitting shape zero area (or one too large for float32: {area[e]})")
        return out

    def _built(self, key: tuple, build, values: Mapping[str, Any]):
        """``build(values, xp)`` with numpy where every value is concrete,
        else as one jitted jax.numpy function cached under ``key`` (why:
        :meth:`param_buffers`). Concrete values that cannot change (the
        scene's own, read-only; JAX arrays) are built once while they are
        the values given: an envmap's sampling tables took 45 ms of numpy
        per render at 2048x1024."""
        if not any(is_traced(v) for v in values.values()):
            given = tuple(values.values())
            if not all(map(is_immutable, given)):
                return build(values, np)
            held = self._concrete_builds.get(key)
            if held is not None and len(held[0]) == len(given) and all(a is b for a, b in zip(held[0], given)):
                return held[1]
            out = build(values, np)
            # Kept as XLA reads them in place, and read-only: every render
            # that reuses them shares them.
            out = {k: _kept(v) for k, v in out.items()} if isinstance(out, dict) else _kept(out)
            self._concrete_builds[key] = (given, out)
            return out
        fn = self._jitted_param_buffers.get(key)
        if fn is None:
            import jax
            import jax.numpy as jnp
            fn = self._jitted_param_buffers[key] = jax.jit(functools.partial(build, xp=jnp))
        return fn(values)

    def param_buffers(self, p: Mapping[str, Any], sensor: int = 0, media: bool = False,
                      given: Mapping[str, Any] | None = None) -> dict:
        """The buffers computed from the parameter values ``p`` (every key of
        ``params``): BSDF rows, emitter radiance, the camera, texels and the
        envmap's sampling tables (``media``: and the media's rows).

        A buffer whose values are concrete is computed with numpy: eager
        jax.numpy would compile one XLA computation per operation the first
        time a process meets it, most of a first render's time when its
        kernel comes from the disk cache. A buffer with a traced value
        (under ``grad``, ``jit``, ``vmap``) is one jitted function of its
        values: one call for JAX to differentiate and compile, not a dozen.
        ``given``: the keys a render was given (the camera's field of view
        enters only when given, so the loaded tangents stay exact)."""
        out = {}
        for name, (keys, build) in self._param_buffer_builders(sensor, given or {}).items():
            if name == "medium_data" and not media:
                continue
            out[name] = self._built((name, sensor, tuple(keys)), build, {k: p[k] for k in keys})
        return out

    def _param_buffer_builders(self, sensor: int, given: Mapping[str, Any]) -> dict:
        """buffer name -> (the parameter keys it reads, build(values, xp))."""
        f32 = np.float32

        def bsdf_data(p, xp):
            rows = []
            for _, fields, twosided in self.bsdfs:
                # a field is a parameter key, a constant (a flag such as
                # nonlinear), or None: a textured field, filled in by the kernel
                parts = [np.zeros(w, f32) if k is None else
                         xp.broadcast_to(xp.asarray(p[k], f32).reshape(-1), (w,)) if isinstance(k, str) else
                         np.full(w, k, f32)
                         for k, w in fields]
                used = sum(w for _, w in fields)
                parts.append(np.zeros(layout.BSDF_ROW - 1 - used, f32))
                parts.append(np.full((1,), 1.0 if twosided else 0.0, f32))
                rows.append(xp.concatenate(parts))
            return xp.stack(rows) if rows else np.zeros((0, layout.BSDF_ROW), f32)

        def emitter_radiance(p, xp):
            # (an envmap's row is its scalar scale, broadcast; a sunsky's, which has no
            # radiance parameter (key None), is 1: its radiance is in its emitter_frame row)
            width = kspectrum.BY_NAME[self.variant].emitter_width
            rad = [np.ones(width, f32) if k is None else _radiance_row(xp.asarray(p[k], f32).reshape(-1), width, xp)
                   for k in self.emitter_keys]
            return xp.stack(rad) if rad else np.zeros((0, width), f32)

        cam_key, cam = self.sensor(sensor)

        fov = fov_key(cam_key) if fov_key(cam_key) in given else None

        def camera(p, xp):
            to_world = xp.asarray(p[cam_key], f32).reshape(16)
            tan = cam.tangents(p[fov], xp) if fov is not None else (f32(cam.tan_x), f32(cam.tan_y))
            rest = np.array([cam.near_clip, cam.far_clip, cam.aperture_radius, cam.focus_distance], f32)
            return xp.concatenate([to_world, xp.stack(tan).astype(f32), rest])[None, :]

        def texels(p, xp):
            blocks = [t.texels(p, xp) for t in self.textures]
            return xp.concatenate(blocks) if blocks else np.zeros((0,), f32)

        env = self.textures[self.env_texture] if self.env_texture >= 0 else None

        def env_dist(p, xp):
            return tex_io.envmap_tables(env, env.envmap_data(p), xp) if env is not None else np.zeros((0,), f32)

        def medium_data(p, xp):
            rows = []
            for m in self.media:
                scale = xp.asarray(p[m.scale], f32)
                g = xp.asarray(p[m.g], f32).reshape(1) if m.g is not None else np.zeros(1, f32)
                if m.kind == "heterogeneous":       # (layout.MEDIUM_MAJORANT ...)
                    peak = xp.max(xp.asarray(p[m.sigma_t], f32))
                    majorant = grid_majorant(peak, m.fixed_max, xp) * scale
                    if xp is not np:   # a constant of the estimator (null scattering): no derivative
                        import jax
                        majorant = jax.lax.stop_gradient(majorant)
                    first = [xp.broadcast_to(majorant, (3,)),
                             np.array([m.sigma_t_volume, m.albedo_volume], f32), scale.reshape(1)]
                    multiplier = np.ones(1, f32)
                elif variants.color_base(self.variant) == "spectral":     # (kernels/media.read)
                    sigma_t = xp.asarray(p[m.sigma_t], f32).reshape(-1)
                    flat = sigma_t.shape[0] == 1                  # a float: a flat spectrum times it
                    first = [np.array([0.0, 0.0, variants.BIG], f32) if flat else sigma_t,
                             xp.asarray(p[m.albedo], f32).reshape(3)]
                    multiplier = (sigma_t * scale if flat else scale.reshape(1)).reshape(1)
                else:
                    first = [xp.broadcast_to(xp.asarray(p[m.sigma_t], f32).reshape(-1), (3,)) * scale,
                             xp.broadcast_to(xp.asarray(p[m.albedo], f32).reshape(-1), (3,))]
                    multiplier = np.ones(1, f32)
                rows.append(xp.concatenate([*first, g, np.full(1, float(m.sample_emitters), f32), multiplier]))
            return xp.stack(rows) if rows else np.zeros((0, layout.MEDIUM_ROW), f32)

        medium_keys = [k for m in self.media for k in (m.sigma_t, m.scale, m.albedo, m.g) if k is not None]
        bsdf_keys = [k for _, fields, _ in self.bsdfs for k, _ in fields if isinstance(k, str)]
        radiance_keys = [k for k in self.emitter_keys if k is not None]
        return dict(bsdf_data=(bsdf_keys, bsdf_data), emitter_radiance=(radiance_keys, emitter_radiance),
                    camera=([cam_key] + ([fov] if fov else []), camera), texels=([k for t in self.textures for k in t.keys], texels),
                    env_dist=(list(env.keys) if env is not None else [], env_dist),
                    medium_data=(medium_keys, medium_data))


def _radiance_row(value, width: int, xp):
    """An emitter's ``emitter_radiance`` row from its parameter value: a
    colour as stored, or a scalar (an envmap's scale) broadcast, in the
    spectral variant as a constant spectrum of that value (the texels hold
    the colour)."""
    if width == kspectrum.SPECTRAL.emitter_width and value.shape[0] == 1:
        return xp.concatenate([np.array([0.0, 0.0, variants.BIG], np.float32), value, np.zeros(1, np.float32)])
    return xp.broadcast_to(value, (width,))


def _replaced(array, where, value):
    """``array`` (numpy, or jax when other parameters are traced) with
    ``array[where] = value``."""
    if isinstance(array, np.ndarray):
        array = array.copy()
        array[where] = value
        return array
    return array.at[where].set(np.asarray(value, array.dtype))


def _check_finite(key: str, value) -> None:
    """A concrete parameter value must be a finite number: NaN or inf would
    silently become NaN pixels (and a string or object a deep XLA error)."""
    try:
        a = np.asarray(value, np.float64)
    except (TypeError, ValueError, OverflowError):
        raise SceneError(f"parameter {key!r} must be numeric, got {type(value).__name__}") from None
    bad = ~np.isfinite(a)
    if bad.any():
        what = "NaN" if np.isnan(a).any() else "inf"
        raise SceneError(f"parameter {key!r} has {int(bad.sum())} non-finite value(s) ({what}); "
                         "values must be finite")

