"""The scene builder: what the plugin loaders read, collected, which
``geometry.scene_fields`` turns into a :class:`~jaxrender.scene.scene.Scene`.

:meth:`SceneBuilder.load_scene` walks a scene dictionary as Mitsuba does:
sensors, the integrator, then shapes and emitters in order; BSDFs and
textures are loaded where a shape uses them, and those nobody uses are
still checked. Loaders call the builder's ``add_*`` methods.

Example::

    builder = SceneBuilder().load_scene(jaxrender.cornell_box())
    builder.params["red.reflectance.value"]     # array([0.570068, 0.0430135, 0.0443706])
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..kernels import textures as ktex
from .camera import Camera, fov_key
from .errors import SceneError
from .properties import Properties, is_plugin
from .refit import MeshPlacement
from .shapes import AnalyticShape
from .textures import TextureSpec
from .loaders.bsdfs import BSDFS
from .loaders.emitters import EMITTERS
from .loaders.integrators import INTEGRATORS
from .loaders.media import MEDIA, PHASES
from .loaders.registry import PluginRegistry, category_of, load_plugin
from .loaders.sensors import FILMS, RFILTERS, SAMPLERS, SENSORS
from .loaders.shapes import SHAPES
from .loaders.textures import TEXTURES, parse_texture
from .plugin_names import ALL_PLUGINS, did_you_mean

REGISTRIES: tuple[PluginRegistry, ...] = (SHAPES, EMITTERS, SENSORS, INTEGRATORS, BSDFS, TEXTURES, FILMS, RFILTERS,
                                          SAMPLERS, MEDIA, PHASES)
# Scene properties of Mitsuba that tune its own acceleration structures
# (no effect on the image): read and ignored, as Mitsuba ignores most.
ACCELERATION_PROPERTIES = ("allow_thread_reordering", "compact_acceleration_structures",
                           "embree_use_robust_intersections", "kd_intersection_cost", "kd_traversal_cost",
                           "kd_empty_space_bonus", "kd_stop_prims", "kd_max_depth", "kd_min_max_bins", "kd_clip",
                           "kd_retract_bad_splits", "kd_exact_primitive_threshold")


class SceneBuilder:
    """Collects the plugins of one scene (see the module docstring)."""

    def __init__(self, named: Mapping[str, Mapping] | None = None, expand_instances: bool = False):
        self.named: dict[str, Mapping] = dict(named or {})    # top-level plugins, for references
        self.params: dict[str, np.ndarray] = {}
        self.nondiff: dict[str, str] = {}
        self.frozen: dict[str, str] = {}
        self.sensors: list[tuple[str, Camera]] = []
        self.integrator: dict = {"type": "path"}
        self.bsdfs: list = []                 # (type name, fields, twosided), see Scene.bsdfs
        self.bsdf_slots: list = []
        self.bsdf_depth: list[int] = []       # per BSDF: how deep composites nest in it (0: a plain BSDF)
        self.bsdf_frame: list[str | None] = []  # per BSDF: the frame-perturbing plugin in it (normalmap), or None
        self.textures: list[TextureSpec] = []
        self._bsdf_index: dict[str, int] = {}
        self._loading: set[str] = set()       # BSDF keys being loaded (a composite that contains itself)
        self._texture_index: dict[str, tuple[int, int]] = {}   # key -> (texture, field width)
        self.emitter_keys: list[str] = []
        self.emitters: list[tuple[int, np.ndarray, int]] = []  # (type, geometry row, extra)
        self.frames: dict[int, np.ndarray] = {}                # emitter -> emitter_frame row
        self.env, self.env_texture, self.env_frame = -1, -1, np.eye(3)
        self.sunsky = None                    # a sunsky emitter's SunskySource (scene.sunsky), if any
        # attrs rows: BSDF, emitter (-1: none), interior and exterior medium (-1: none)
        # (tris, attrs, uvs, normals | None, refit.MeshPlacement | None) per mesh
        self.meshes: list[tuple] = []
        self.shapes: list[AnalyticShape] = []
        self.shape_attrs: list[tuple[int, int, int, int]] = []
        self.media: list = []                 # loaders.media.MediumSpec per medium
        self._medium_index: dict[str, int] = {}
        self.groups: dict = {}                # shapegroup key -> loaders.shapes.ShapeGroup (group space)
        # (shapegroup key, to_world) per instance of a group with meshes (scene/instancing.py)
        self.instances: list[tuple] = []     # (shapegroup key, to_world, instance key, parameter or None)
        # Instances' meshes copied into the scene instead (for comparisons: same image, larger buffers).
        self.expand_instances = expand_instances
        # False while a shapegroup loads: its shapes are placed by instances, not parameters.
        self.places_shapes = True
        # Mitsuba parameter keys jaxrender does not expose (key -> why), for
        # the error a params entry for one gets (an instance's to_world).
        self.unexposed: dict[str, str] = {}

    # -- the scene dictionary ------------------------------------------------
    def load_scene(self, d: Mapping) -> SceneBuilder:
        """Load every plugin of the scene dictionary ``d``."""
        if not isinstance(d, Mapping) or d.get("type") != "scene":
            raise SceneError("a scene dictionary needs 'type': 'scene'")
        props = Properties(d, "scene", "scene")
        props.mark_read(*ACCELERATION_PROPERTIES)
        self.named = {k: v for k, v in d.items() if is_plugin(v)}
        props.mark_read(*self.named)
        props.check_unread()
        kinds = {k: category_of(v["type"], REGISTRIES) for k, v in self.named.items()}
        self._load_sensors([k for k, c in kinds.items() if c == "sensor"])
        self._load_integrator([k for k, c in kinds.items() if c == "integrator"])
        deferred = []
        for key, spec in self.named.items():
            if kinds[key] == "shape" and spec["type"] in SHAPES:
                load_plugin(SHAPES, self, spec, key)
            elif kinds[key] == "emitter" and spec["type"] in EMITTERS:
                load_plugin(EMITTERS, self, spec, key)
            elif kinds[key] in ("bsdf", "texture", "medium") and spec["type"] in REGISTRY_OF[kinds[key]]:
                deferred.append(key)   # loaded where used
            elif kinds[key] is None:
                names = [n for r in REGISTRIES for n in r.supported()] + sorted(ALL_PLUGINS)
                raise props.error(f"unknown plugin type {spec['type']!r}{did_you_mean(spec['type'], names)}",
                                  key, label=repr(key))
            elif kinds[key] not in ("sensor", "integrator"):
                raise props.error(f"plugin type {spec['type']!r} is not supported yet{_supported(kinds[key])}",
                                  key, label=repr(key))
        self._check_unused(deferred)
        return self

    def _load_sensors(self, keys: list[str]) -> None:
        if not keys:
            raise SceneError("the scene has no sensor")
        for key in keys:
            camera = load_plugin(SENSORS, self, self.named[key], key)
            self.sensors.append((f"{key}.to_world", camera))
            why = (None if camera.kind in ("perspective", "orthographic", "thinlens") else
                   f"camera derivatives are implemented for the perspective, thinlens and orthographic sensors "
                   f"only, not {camera.kind!r}")
            self.add_param(f"{key}.to_world", camera.to_world.astype(np.float32), why)
            if camera.kind != "orthographic":
                # Mitsuba's key whatever fov_axis said: the horizontal angle, in degrees
                self.add_param(fov_key(key), np.float32(camera.x_fov), why)

    def _load_integrator(self, keys: list[str]) -> None:
        if len(keys) > 1:
            raise SceneError(f"only one integrator can be given per scene, got {', '.join(keys)}")
        if keys:
            self.integrator = load_plugin(INTEGRATORS, self, self.named[keys[0]], keys[0])

    def _check_unused(self, keys: list[str]) -> None:
        """Load the BSDFs and textures no shape uses into a scratch builder:
        their properties are checked, as Mitsuba loads every plugin."""
        for key in keys:
            if key in self._bsdf_index or key in self._texture_index or key in self._medium_index:
                continue
            scratch = SceneBuilder(self.named)
            if self.named[key]["type"] in MEDIA:
                scratch.medium(self.named[key], key)
            elif self.named[key]["type"] in TEXTURES:
                scratch.texture(self.named[key], key, 3)
            else:
                scratch.bsdf(self.named[key], key)

    # -- what loaders call ----------------------------------------------------------
    def category(self, spec: Mapping, key: str) -> str | None:
        """The plugin category of a nested plugin (a reference: of its target)."""
        spec, _ = self.resolve(spec, key)
        return category_of(spec.get("type"), REGISTRIES)

    def resolve(self, spec: Mapping, key: str) -> tuple[Mapping, str]:
        """(plugin dict, key) of ``spec``, following a reference by id."""
        if spec.get("type") != "ref":
            return spec, key
        ref = spec.get("id")
        if ref not in self.named:
            raise SceneError(f"{key}: reference to unknown id {ref!r}")
        return self.named[ref], ref

    def bsdf(self, spec: Mapping, key: str) -> int:
        """The row index of BSDF ``spec`` (loaded once per key or id)."""
        spec, key = self.resolve(spec, key)
        if key not in self._bsdf_index:
            if key in self._loading:
                raise SceneError(f"{key}: the BSDF contains itself")
            self._loading.add(key)
            self._bsdf_index[key] = load_plugin(BSDFS, self, spec, key)
            self._loading.discard(key)
        return self._bsdf_index[key]

    def medium(self, spec: Mapping, key: str) -> int:
        """The index of medium ``spec`` (loaded once per key or id)."""
        spec, key = self.resolve(spec, key)
        if key not in self._medium_index:
            if spec.get("type") not in MEDIA:
                raise SceneError(f"{key}: medium type {spec.get('type')!r} is not supported yet "
                                 f"({', '.join(MEDIA.supported())})")
            self.media.append(load_plugin(MEDIA, self, spec, key))
            self._medium_index[key] = len(self.media) - 1
        return self._medium_index[key]

    def texture(self, value: Any, key: str, width: int) -> int | None:
        """Index of the texture ``value`` describes for a field of ``width``
        values (loaded once per key or id), None if it is a plain value."""
        if not isinstance(value, Mapping):
            return None
        if value.get("type") == "ref":
            ref = value.get("id")
            if ref not in self.named or self.named[ref].get("type") not in TEXTURES:
                raise SceneError(f"{key}: reference to unknown texture id {ref!r}")
            value, key = self.named[ref], ref
        elif value.get("type") not in TEXTURES:
            return None
        if key not in self._texture_index:
            self._texture_index[key] = (self.add_texture(parse_texture(value, key, width, self.params)), width)
        index, w = self._texture_index[key]
        if w != width and self.textures[index].kind == ktex.CHECKERBOARD:
            raise SceneError(f"{key}: a checkerboard cannot be used for both colour and scalar parameters")
        return index

    def add_param(self, key: str, value: np.ndarray, nondiff: str | None = None, frozen: str | None = None) -> None:
        """A parameter; ``nondiff``: why it cannot be differentiated;
        ``frozen``: why a render may not change its value (nor differentiate it)."""
        self.params[key] = value
        if frozen is not None:
            self.frozen[key] = f"{key}: {frozen}"
            nondiff = frozen
        if nondiff is not None:
            self.nondiff[key] = f"{key}: {nondiff}"

    def add_texture(self, spec: TextureSpec) -> int:
        self.textures.append(spec)
        return len(self.textures) - 1

    def add_bsdf(self, type_name: str, fields: list, slots: list, twosided: bool, depth: int = 0,
                 frame: str | None = None) -> int:
        self.bsdfs.append((type_name, fields, twosided))
        self.bsdf_slots.append([tuple(s) for s in slots])
        self.bsdf_depth.append(depth)
        self.bsdf_frame.append(frame)
        return len(self.bsdfs) - 1

    def add_emitter(self, kind: int, geom: np.ndarray, extra: int, key: str, frame: np.ndarray | None = None) -> int:
        """An emitter of ``kemitters.TYPE_ID`` ``kind``: its ``emitter_geom``
        row, its extra ``emitter_meta`` value (texture or shape row), the key
        of its radiance parameter and its ``emitter_frame`` row."""
        index = len(self.emitter_keys)
        if frame is not None:
            self.frames[index] = frame
        self.emitter_keys.append(key)
        self.emitters.append((kind, geom, extra))
        return index

    def set_environment(self, emitter: int, texture: int = -1, frame: np.ndarray | None = None) -> None:
        self.env, self.env_texture = emitter, texture
        if frame is not None:
            self.env_frame = frame

    def add_triangles(self, tris: np.ndarray, attrs: np.ndarray, uvs: np.ndarray, normals: np.ndarray | None,
                      placement: MeshPlacement | None = None) -> None:
        """One mesh's world-space triangles (N, 9), (bsdf, emitter, interior, exterior) rows,
        vertex UVs (N, 6) and vertex normals (N, 9; None: face normals); ``placement``:
        the parameter that moves it (its value must be in ``params`` already)."""
        self.meshes.append((tris, attrs, uvs, normals, placement))

    def add_shape(self, shape: AnalyticShape, bsdf: int, emitter: int, media: tuple = (-1, -1)) -> None:
        self.shapes.append(shape)
        self.shape_attrs.append((bsdf, emitter, *media))


REGISTRY_OF = {r.category: r for r in REGISTRIES}


def _supported(category: str | None) -> str:
    """What a top-level plugin of ``category`` may be, for messages."""
    if category not in REGISTRY_OF:
        return ""
    return f" (supported {category} types: {', '.join(REGISTRY_OF[category].supported())})"
