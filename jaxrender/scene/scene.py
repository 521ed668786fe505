"""From a Mitsuba-style scene description to the buffers a kernel reads.

``Scene`` holds the static structure (which plugins, integrator settings,
film size) and the parameter arrays under the keys ``mitsuba.traverse``
uses (``red.reflectance.value``, ``light.emitter.radiance.value``, ...).
Geometry is flattened to world-space triangles in BVH leaf order.

Supported so far: shapes rectangle, cube, obj, ply (with Mitsuba's texture
coordinates and vertex normals: those of the file, else computed as Mitsuba
does, unless ``face_normals`` is set), and the analytic sphere and disk
(exact silhouettes, Mitsuba's UVs and light sampling); the BSDFs of ``kernels.bsdfs.registry`` (also inside
twosided), whose colour and roughness parameters may be ``bitmap`` or
``checkerboard`` textures; area, point, spot, directional, constant and
envmap emitters; perspective sensor; hdrfilm with box, tent and gaussian
filters; independent sampler; path, direct and aov integrators.
Anything else raises :class:`SceneError` naming the plugin, never a wrong
image.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..kernels import emitters as kemitters
from ..kernels import layout
from ..kernels import textures as ktex
from ..kernels.bsdfs import base
from ..kernels.bsdfs import registry as bsdf_registry
from . import textures as tex_io
from ..ir.bvh_query import LEAF_WORDS, NODE_WORDS
from .errors import SceneError
from .shapes import (DISK, SHAPE_ROW, AnalyticShape, cube_mesh, disk_shape, rectangle_mesh, sphere_shape,
                     vertex_normals)

SUPPORTED_SHAPES = ("rectangle", "cube", "obj", "ply", "sphere", "disk")
(EMITTER_AREA, EMITTER_POINT, EMITTER_DIRECTIONAL, EMITTER_CONSTANT, EMITTER_SPOT, EMITTER_ENVMAP, EMITTER_SPHERE,
 EMITTER_DISK) = (kemitters.TYPE_ID[n] for n in kemitters.NAMES)
EMITTER_FRAME_WIDTH = layout.EMITTER_FRAME_ROW


def _matrix(t: Any, where: str) -> np.ndarray:
    if t is None:
        return np.eye(4)
    m = getattr(t, "matrix", t)
    try:
        m = np.array(m, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SceneError(f"{where}: to_world is not a 4x4 transform ({exc})") from None
    if m.shape != (4, 4) or not np.all(np.isfinite(m)):
        raise SceneError(f"{where}: to_world must be a finite 4x4 matrix, got shape {m.shape}")
    return m


# Mitsuba's named indices of refraction (the ones its documentation lists).
IOR = {"vacuum": 1.0, "helium": 1.000036, "hydrogen": 1.000132, "air": 1.000277, "carbon dioxide": 1.00045,
       "water": 1.3330, "acetone": 1.36, "ethanol": 1.361, "carbon tetrachloride": 1.461, "glycerol": 1.4729,
       "benzene": 1.501, "silicone oil": 1.52045, "bromine": 1.661, "water ice": 1.31, "fused quartz": 1.458,
       "pyrex": 1.470, "acrylic glass": 1.49, "polypropylene": 1.49, "bk7": 1.5046, "sodium chloride": 1.544,
       "amber": 1.55, "pet": 1.5750, "diamond": 2.419}


def _ior(value: Any, where: str) -> float:
    if isinstance(value, str):
        if value.lower() not in IOR:
            raise SceneError(f"{where}: unknown index of refraction {value!r} (known: {', '.join(sorted(IOR))})")
        return IOR[value.lower()]
    v = float(_scalar(value, where))
    if v <= 0:
        raise SceneError(f"{where}: an index of refraction must be positive, got {v}")
    return v


def _scalar(value: Any, where: str) -> np.ndarray:
    if isinstance(value, Mapping):
        raise SceneError(f"{where}: expected a float here, got a {value.get('type')!r} value")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SceneError(f"{where}: expected a finite float, got {value!r}") from None
    if arr.size != 1 or not np.isfinite(arr).all():
        raise SceneError(f"{where}: expected a finite float, got {value!r}")
    return arr.reshape(())


def _rgb(value: Any, where: str) -> np.ndarray:
    """An rgb/float/texture-free colour property as 3 floats."""
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "rgb":
            value = value.get("value")
        else:
            raise SceneError(f"{where}: {kind!r} values are not supported here (use rgb or a float)")
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, 3)
    if arr.size != 3 or not np.all(np.isfinite(arr)):
        raise SceneError(f"{where}: expected an rgb triple or a float, got {value!r}")
    return arr


@dataclass
class Camera:
    to_world: np.ndarray
    tan_x: float
    tan_y: float
    near_clip: float
    far_clip: float
    width: int
    height: int
    rfilter: str
    spp: int


@dataclass
class Scene:
    """Static structure plus differentiable parameters of a loaded scene."""
    camera: Camera
    integrator: dict
    triangles: np.ndarray                  # (N, 9) world space, leaf order (zero rows: analytic shapes)
    tri_attr: np.ndarray                   # (N, 2) bsdf index, emitter index (-1: none), per primitive
    bvh_bounds: np.ndarray
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
    env_texture: int = -1                                 # texture index of the envmap, -1 if none
    env_frame: np.ndarray = field(default_factory=lambda: np.eye(3, dtype=np.float32))  # envmap to_world rotation
    # Shading normals: (N, 9) world vertex normals per triangle (leaf order;
    # a zero row: the face normal), or no rows when no mesh has any.
    tri_normals: np.ndarray = field(default_factory=lambda: np.zeros((0, 9), np.float32))
    # Analytic shapes: per leaf entry -1 (triangle) or the shape's row of
    # shape_data (shapes.AnalyticShape.row); no rows without such shapes.
    prim_shape: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int32))
    shape_data: np.ndarray = field(default_factory=lambda: np.zeros((0, SHAPE_ROW), np.float32))
    shapes: list = field(default_factory=list)            # AnalyticShape per shape_data row
    # Triangle-only scenes: the 8-wide BVH the kernels traverse, as the
    # (nodes, leaves) buffers of wide_bvh.WideBVH.packed; None with analytic
    # shapes, whose kernels walk bvh_bounds / bvh_links.
    wide_bvh: tuple | None = None

    @property
    def structure(self):
        """The trace-time features the path kernels are specialised on."""
        from ..kernels.context import Structure
        return Structure(max((len(s) for s in self.bsdf_slots), default=0), self.env_texture >= 0,
                         len(self.shape_data) > 0, len(self.tri_normals) > 0,
                         tuple(t for t, _, _ in self.bsdfs) or ("diffuse",))

    @property
    def bsdf_types(self) -> list:
        """The kernel-side BsdfType of each BSDF row."""
        return [bsdf_registry.TYPES[t] for t, _, _ in self.bsdfs]

    def texture_inputs(self, p: Mapping[str, Any]) -> dict:
        """The texture buffers of the path kernel from parameter values ``p``."""
        import jax.numpy as jnp
        slots, rows = [], []
        for s in self.bsdf_slots:
            rows.append((len(slots), len(s)))
            slots.extend(s)
        offsets = np.cumsum([0] + [t.size for t in self.textures])
        meta = np.zeros((len(self.textures), layout.TEX_META_ROW), np.int32)
        uv = np.zeros((len(self.textures), 6), np.float32)
        for i, t in enumerate(self.textures):
            meta[i, :7] = (offsets[i], t.width, t.height, t.channels, t.kind, t.wrap, t.filter)
            uv[i] = (t.to_uv if t.to_uv is not None else np.eye(3)[:2]).reshape(6)
        texels = jnp.concatenate([t.texels(p) for t in self.textures]) if self.textures \
            else jnp.zeros((0,), jnp.float32)
        textured = bool(slots)
        if self.env_texture >= 0:
            env = self.textures[self.env_texture]
            env_dist = tex_io.envmap_tables(env, p[env.keys[0]])
            env_frame = self.env_frame.astype(np.float32).reshape(1, 9)
        else:
            env_dist, env_frame = np.zeros((0,), np.float32), np.zeros((0, 9), np.float32)
        return dict(tri_uv=self.tri_uv if textured else np.zeros((0, 6), np.float32),
                    bsdf_tex=np.array(rows, np.int32).reshape(-1, 2),
                    tex_slots=np.array(slots, np.int32).reshape(-1, 4), tex_meta=meta, tex_uv=uv,
                    texels=texels, env_dist=env_dist, env_frame=env_frame)

    def sensor(self, index: int = 0) -> tuple[str, "Camera"]:
        """(to_world parameter key, Camera) of sensor ``index`` (file order)."""
        sensors = self.sensors or [(self.camera_key, self.camera)]
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(sensors):
            raise SceneError(f"sensor must be an index in [0, {len(sensors)}), got {index!r} "
                             f"(the scene has {len(sensors)} sensor(s))")
        return sensors[int(index)]

    def kernel_inputs(self, params: Mapping[str, Any] | None = None, sensor: int = 0) -> dict:
        """Buffers for the path kernel; ``params`` overrides scene.params values."""
        p = dict(self.params)
        if params:
            unknown = set(params) - set(p)
            if unknown:
                raise SceneError(f"unknown scene parameter(s) {sorted(unknown)}; known: {sorted(p)}")
            for k, v in params.items():
                if tuple(np.shape(v)) != tuple(np.shape(p[k])):
                    raise SceneError(f"parameter {k!r} must have shape {tuple(np.shape(p[k]))}, "
                                     f"got {tuple(np.shape(v))}")
            p.update(params)
        import jax.numpy as jnp
        rows = []
        for _, fields, twosided in self.bsdfs:
            # a field is a parameter key, a constant (a flag such as nonlinear),
            # or None: a textured field, filled in by the kernel
            parts = [jnp.zeros(w, jnp.float32) if k is None else
                     jnp.asarray(p[k] if isinstance(k, str) else np.full(w, k), jnp.float32).reshape(w)
                     for k, w in fields]
            used = sum(w for _, w in fields)
            parts.append(jnp.zeros(layout.BSDF_ROW - 1 - used, jnp.float32))
            parts.append(jnp.full((1,), 1.0 if twosided else 0.0, jnp.float32))
            rows.append(jnp.concatenate(parts))
        bsdf_data = jnp.stack(rows) if rows else jnp.zeros((0, layout.BSDF_ROW), jnp.float32)
        order = self.structure.bsdfs
        bsdf_type = np.array([order.index(t) for t, _, _ in self.bsdfs], np.int32)
        # (an envmap's row is its scalar scale, broadcast)
        rad = jnp.stack([jnp.broadcast_to(jnp.asarray(p[k], jnp.float32).reshape(-1), (3,))
                         for k in self.emitter_keys]) if self.emitter_keys else jnp.zeros((0, 3), jnp.float32)
        cam_key, cam = self.sensor(sensor)
        to_world = jnp.asarray(p[cam_key], jnp.float32).reshape(16)
        camera = jnp.concatenate([to_world, jnp.array([cam.tan_x, cam.tan_y, cam.near_clip, cam.far_clip],
                                                      jnp.float32)])
        w = self.wide_bvh
        bvh = (dict(_NO_SKIP_LINK_BVH, wide_nodes=w[0], wide_leaves=w[1]) if w is not None else
               dict(_NO_WIDE_BVH, bvh_bounds=self.bvh_bounds, bvh_links=self.bvh_links))
        return dict(tris=self.triangles, tri_attr=self.tri_attr, **bvh, bsdf_type=bsdf_type, bsdf_data=bsdf_data,
                    emitter_radiance=rad,
                    light_tris=self.light_tris, light_cdf=self.light_cdf, emitter_meta=self.emitter_meta,
                    emitter_geom=self.emitter_geom, env_emitter=np.int32(self.env_emitter),
                    emitter_frame=self.emitter_frame, tri_normals=self.tri_normals, prim_shape=self.prim_shape,
                    shape_data=self.shape_data,
                    camera=camera[None, :], **self.texture_inputs(p),
                    **filter_tables(cam.rfilter))  # cached: shared, never mutated


# SAH traversal cost (relative to one triangle test) of the BVH that
# triangle-only scenes collapse into their 8-wide BVH. Measured on a 1M
# triangle mesh in the Cornell box (random rays): 1 -> 2 gave 8.5 -> 10.3
# Mrays/s; 1.5 and 3 were slower than 2.
WIDE_BVH_C_TRAV = 2.0
# The BVH a scene's kernels do not read gets no rows (see Scene.wide_bvh).
_NO_SKIP_LINK_BVH = dict(bvh_bounds=np.zeros((0, 6), np.float32), bvh_links=np.zeros((0, 3), np.int32))
_NO_WIDE_BVH = dict(wide_nodes=np.zeros((0, NODE_WORDS), np.int32), wide_leaves=np.zeros((0, LEAF_WORDS), np.int32))


@functools.lru_cache(maxsize=None)
def filter_tables(kind: str, n: int = 1025) -> dict:
    """Tables of a separable reconstruction filter (Mitsuba's definitions):
    its inverse CDF at n uniform points of [0, 1] (offsets in pixels), its CDF
    at n uniform points of [-radius, radius], and the radius."""
    if kind == "box":
        r, f = 0.5, lambda x: np.ones_like(x)
    elif kind == "tent":
        r, f = 1.0, lambda x: np.maximum(0.0, 1.0 - np.abs(x))
    elif kind == "gaussian":
        sigma = 0.5
        r = 4.0 * sigma
        f = lambda x: np.maximum(0.0, np.exp(-x * x / (2 * sigma * sigma)) - np.exp(-r * r / (2 * sigma * sigma)))
    else:
        raise SceneError(f"rfilter {kind!r} is not supported (box, tent, gaussian)")
    x = np.linspace(-r, r, 16385)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f(x[1:]) + f(x[:-1])) * np.diff(x))])
    cdf /= cdf[-1]
    return {"filter_icdf": np.interp(np.linspace(0, 1, n), cdf, x).astype(np.float32),
            "filter_cdf": np.interp(np.linspace(-r, r, n), x, cdf).astype(np.float32),
            "filter_radius": np.float32(r)}


def _spot_frame(spec: Mapping, m: np.ndarray, key: str) -> np.ndarray:
    """emitter_frame row of a spot light (Mitsuba's ``spot``: it shines
    along +z of ``to_world``; full intensity within ``beam_width`` degrees of
    the axis, falling off linearly in angle to 0 at ``cutoff_angle``)."""
    if "texture" in spec:
        raise SceneError(f"{key}.texture: textured spot lights are not supported yet")
    cutoff = float(_scalar(spec.get("cutoff_angle", 20.0), f"{key}.cutoff_angle"))
    if not 0.0 < cutoff <= 180.0:
        raise SceneError(f"{key}.cutoff_angle: must be in (0, 180] degrees, got {cutoff}")
    beam = float(_scalar(spec.get("beam_width", cutoff * 0.75), f"{key}.beam_width"))
    if not 0.0 <= beam <= cutoff:
        raise SceneError(f"{key}.beam_width: must be in [0, cutoff_angle = {cutoff}] degrees, got {beam}")
    lin = m[:3, :3]
    if abs(np.linalg.det(lin)) < 1e-12:
        raise SceneError(f"{key}.to_world: the transform is singular")
    row = np.zeros(EMITTER_FRAME_WIDTH)
    row[:9] = np.linalg.inv(lin).reshape(-1)
    c, b = math.radians(cutoff), math.radians(beam)
    row[9:13] = (math.cos(c), math.cos(b), c, 1.0 / (c - b) if c > b else 0.0)
    return row


def _check_aov(integrator: Mapping) -> None:
    from ..kernels.integrators.aov import AovSpecError, parse_aovs
    nested = [k for k, v in integrator.items() if isinstance(v, Mapping) and "type" in v]
    if nested:
        raise SceneError(f"integrator.{nested[0]}: integrators nested in an aov integrator are not supported "
                         "yet (render them separately)")
    try:
        parse_aovs(integrator.get("aovs", ""))
    except AovSpecError as exc:
        raise SceneError(f"integrator.aovs: {exc}") from None


def _check_roughplastic(spec: Mapping, where: str) -> None:
    """What Mitsuba's roughplastic rejects, and what jaxrender does not do yet."""
    if "alpha_u" in spec or "alpha_v" in spec:
        raise SceneError(f"{where}: roughplastic does not support anisotropic roughness (alpha_u / alpha_v); "
                         "use alpha")
    if not spec.get("sample_visible", True):
        raise SceneError(f"{where}.sample_visible: roughplastic without visible-normal sampling is not "
                         "supported yet")
    if "alpha" in spec and not isinstance(spec["alpha"], Mapping):
        a = np.asarray(spec["alpha"], np.float64)
        if a.size == 1 and not (np.isfinite(a) and 0.0 < float(a) <= 4.0):
            raise SceneError(f"{where}.alpha: roughness must be in (0, 4], got {float(a)}")
    eta = (_ior(spec.get("int_ior", "polypropylene"), f"{where}.int_ior")
           / _ior(spec.get("ext_ior", "air"), f"{where}.ext_ior"))
    if eta == 1.0:
        raise SceneError(f"{where}: int_ior and ext_ior must differ")


def _camera(sensor: Mapping, where: str) -> Camera:
    if sensor.get("type") != "perspective":
        raise SceneError(f"{where}: sensor type {sensor.get('type')!r} is not supported (perspective)")
    film = sensor.get("film", {"type": "hdrfilm"})
    if film.get("type") != "hdrfilm":
        raise SceneError(f"{where}.film: film type {film.get('type')!r} is not supported (hdrfilm)")
    w, h = int(film.get("width", 768)), int(film.get("height", 576))
    if w <= 0 or h <= 0:
        raise SceneError(f"{where}.film: width and height must be positive, got {w}x{h}")
    rfilter = film.get("rfilter", {"type": "gaussian"}).get("type", "gaussian")
    filter_tables(rfilter, 3)  # validates the type
    if "fov" in sensor and "focal_length" in sensor:
        raise SceneError(f"{where}: give either fov or focal_length, not both")
    if "fov" in sensor:
        fov = float(_scalar(sensor["fov"], f"{where}.fov"))
        axis = sensor.get("fov_axis", "x")
    else:
        # Mitsuba's default: a 50mm lens on 35mm film, i.e. a *diagonal* field of view
        focal = str(sensor.get("focal_length", "50mm"))
        try:
            f_mm = float(focal[:-2] if focal.endswith("mm") else focal)
        except ValueError:
            raise SceneError(f"{where}.focal_length: expected '<x>mm', got {focal!r}") from None
        if not f_mm > 0:
            raise SceneError(f"{where}.focal_length: must be positive, got {focal!r}")
        fov = 2.0 * math.degrees(math.atan(math.sqrt(36.0 * 36.0 + 24.0 * 24.0) / (2.0 * f_mm)))
        axis = "diagonal"
    aspect = w / h
    if axis == "smaller":
        axis = "x" if w <= h else "y"
    elif axis == "larger":
        axis = "y" if w <= h else "x"
    t = math.tan(math.radians(fov) / 2)
    if axis == "x":
        tan_x, tan_y = t, t / aspect
    elif axis == "y":
        tan_x, tan_y = t * aspect, t
    elif axis == "diagonal":
        diag = t / math.sqrt(1.0 + 1.0 / (aspect * aspect))
        tan_x, tan_y = diag, diag / aspect
    else:
        raise SceneError(f"{where}: fov_axis {axis!r} is not one of x, y, diagonal, smaller, larger")
    sampler = sensor.get("sampler", {"type": "independent"})
    spp = int(sampler.get("sample_count", 4))
    near, far = float(sensor.get("near_clip", 0.01)), float(sensor.get("far_clip", 10000.0))
    if not 0.0 < near < far:
        raise SceneError(f"{where}: near_clip and far_clip must satisfy 0 < near_clip < far_clip, got {near}, {far}")
    return Camera(_matrix(sensor.get("to_world"), where), tan_x, tan_y, near, far, w, h, rfilter, spp)


def _mesh(shape: Mapping, key: str):
    """Object-space vertices, faces, vertex UVs (None: the mesh has none) and
    vertex normals (None: none in the file; "face": shade with face normals,
    as Mitsuba's rectangle and cube, whose vertex normals are their face
    normals, and meshes with ``face_normals``)."""
    kind = shape.get("type")
    if kind == "rectangle":
        return (*rectangle_mesh(), "face")
    if kind == "cube":
        return (*cube_mesh(), "face")
    if kind in ("obj", "ply"):
        from . import mesh_io
        filename = shape.get("filename")
        if not filename:
            raise SceneError(f"shape {key!r}: {kind} needs a filename")
        if kind == "obj":
            data = mesh_io.load_obj(filename, flip_tex_coords=bool(shape.get("flip_tex_coords", True)))
        else:
            data = mesh_io.load_ply(filename)
        uv = None if data.uvs is None else np.asarray(data.uvs, np.float64)
        if shape.get("face_normals", False):
            normals = "face"
        else:
            normals = None if data.normals is None else np.asarray(data.normals, np.float64)
        return np.asarray(data.vertices, np.float64), np.asarray(data.faces, np.int64), uv, normals
    raise SceneError(f"shape {key!r}: type {kind!r} is not supported yet ({', '.join(SUPPORTED_SHAPES)})")


def load_dict(d: Mapping) -> Scene:
    """Build a Scene from a ``mitsuba.load_dict``-style dictionary.

    Example::

        scene = jaxrender.load_dict(jaxrender.cornell_box())
    """
    from .bvh import build_bvh
    if not isinstance(d, Mapping) or d.get("type") != "scene":
        raise SceneError("a scene dictionary needs 'type': 'scene'")
    named = {k: v for k, v in d.items() if isinstance(v, Mapping) and "type" in v}
    sensors = [(k, v) for k, v in named.items() if v["type"] in ("perspective", "orthographic", "thinlens")]
    if not sensors:
        raise SceneError("the scene has no sensor")
    all_sensors = [(f"{k}.to_world", _camera(v, k)) for k, v in sensors]
    camera_key, camera = all_sensors[0]
    integrators = [v for v in named.values() if v["type"] in ("path", "direct", "aov", "prb", "volpath")]
    integrator = dict(integrators[0]) if integrators else {"type": "path"}
    if integrator["type"] not in ("path", "direct", "aov"):
        raise SceneError(f"integrator {integrator['type']!r} is not supported yet (path, direct, aov)")
    if integrator["type"] == "aov":
        _check_aov(integrator)

    params: dict[str, np.ndarray] = {k: c.to_world.astype(np.float32) for k, c in all_sensors}
    bsdfs: list = []
    bsdf_slots: list = []
    bsdf_index: dict[str, int] = {}
    nondiff: dict[str, str] = {k: f"{k}: gradients with respect to camera parameters need the "
                                  "reparameterized (geometry) integrator, which jaxrender does not have yet"
                               for k, _ in all_sensors}

    def add_bsdf(spec: Mapping, key: str) -> int:
        if spec.get("type") == "ref":
            ref = spec.get("id")
            if ref not in named:
                raise SceneError(f"{key}: reference to unknown id {ref!r}")
            return add_bsdf(named[ref], ref)
        if key in bsdf_index:
            return bsdf_index[key]
        inner, inner_key = spec, key
        if spec.get("type") == "twosided":
            nested = [(k, v) for k, v in spec.items() if isinstance(v, Mapping) and "type" in v]
            if not nested:
                raise SceneError(f"{key}: twosided needs a nested bsdf")
            inner_key, inner = f"{key}.{nested[0][0]}", nested[0][1]
        twosided = spec.get("type") == "twosided"
        plugin = inner.get("type")
        if plugin == "roughplastic":
            _check_roughplastic(inner, inner_key)
        if plugin not in bsdf_registry.plugins():
            raise SceneError(f"{inner_key}: bsdf type {plugin!r} is not supported yet "
                             f"({', '.join(sorted(bsdf_registry.plugins()))})")
        options = {}
        for p in bsdf_registry.option_params(plugin):
            value = inner.get(p.name, p.default)
            if value not in p.choices:
                what = "microfacet distribution" if p.name == "distribution" else f"{plugin} {p.name}"
                raise SceneError(f"{inner_key}.{p.name}: unknown {what} {value!r} "
                                 f"({', '.join(map(str, p.choices))})")
            options[p.name] = value
        t = bsdf_registry.select(plugin, options)
        groups = {p.group for p in t.params if p.group is not None}
        isotropic = {g for g in groups if not any(q.group == g and q.name in inner for q in t.params)}
        fields, slots, start = [], [], 0
        for prm in t.params:
            width = prm.width()
            if width == 0:
                continue
            start += width
            name = prm.group if prm.group in isotropic else prm.name
            if prm.kind in (base.COLOR, base.FLOAT):
                ti = texture(inner.get(name, prm.default), f"{inner_key}.{name}", width)
                if ti is not None:
                    fields.append((None, width))
                    lum = int(width == 1 and textures[ti].channels == 3)
                    prev = slots[-1] if slots else None
                    if prev is not None and prev[2] == ti and prev[3] == lum and prev[0] + prev[1] == start - width:
                        prev[1] += width   # alpha_u and alpha_v from one texture: one lookup
                    else:
                        slots.append([start - width, width, ti, lum])
                    continue
            if prm.kind == base.IOR:  # a relative IOR given as int_ior / ext_ior
                pkey = f"{inner_key}.{name}"
                if prm.nondiff is not None:
                    nondiff[pkey] = f"{pkey}: {prm.nondiff}"
                params[pkey] = np.array(_ior(inner.get("int_ior", prm.default), f"{inner_key}.int_ior")
                                        / _ior(inner.get("ext_ior", "air"), f"{inner_key}.ext_ior"))
                fields.append((pkey, width))
                continue
            if prm.kind == base.FLAG:  # a flag stored in the row, not a parameter
                fields.append((float(bool(inner.get(name, prm.default))), width))
                continue
            if prm.kind == base.ARRAY:
                raise SceneError(f"{inner_key}.{name}: array parameters are not supported yet")
            plain = prm.kind == base.SCALAR
            pkey = f"{inner_key}.{name}" if plain else f"{inner_key}.{name}.value"
            if pkey not in params:
                value = inner.get(name, prm.default)
                params[pkey] = _rgb(value, pkey) if prm.kind == base.COLOR else _scalar(value, pkey)
                if prm.nondiff is not None:
                    nondiff[pkey] = f"{pkey}: {prm.nondiff}"
            fields.append((pkey, width))
        if len(slots) > layout.MAX_TEX_SLOTS:
            raise SceneError(f"{inner_key}: at most {layout.MAX_TEX_SLOTS} parameters of one BSDF can be textured, "
                             f"got {len(slots)}")
        bsdf_index[key] = len(bsdfs)
        bsdfs.append((t.name, fields, twosided))
        bsdf_slots.append([tuple(x) for x in slots])
        return bsdf_index[key]

    textures: list = []
    texture_index: dict[str, tuple[int, int]] = {}   # parameter prefix -> (texture, field width)

    def texture(value: Any, prefix: str, width: int) -> int | None:
        """Index of the texture ``value`` describes (parsed once per
        prefix or id), None if it is a plain value."""
        if not isinstance(value, Mapping):
            return None
        if value.get("type") == "ref":
            ref = value.get("id")
            if ref not in named or named[ref].get("type") not in tex_io.TEXTURE_PLUGINS:
                raise SceneError(f"{prefix}: reference to unknown texture id {ref!r}")
            value, prefix = named[ref], ref
        elif value.get("type") not in tex_io.TEXTURE_PLUGINS:
            return None
        if prefix not in texture_index:
            texture_index[prefix] = (len(textures), width)
            textures.append(tex_io.parse_texture(value, prefix, width, params))
        ti, w = texture_index[prefix]
        if w != width and textures[ti].kind == ktex.CHECKERBOARD:
            raise SceneError(f"{prefix}: a checkerboard cannot be used for both colour and scalar parameters")
        return ti

    tris, attrs, uvs, normals = [], [], [], []
    shapes: list[AnalyticShape] = []
    shape_attrs: list[tuple[int, int]] = []
    emitter_keys: list[str] = []
    emitters: list[tuple[int, np.ndarray, int]] = []   # (type, geometry row, texture or 0)
    frames: dict[int, np.ndarray] = {}              # emitter index -> emitter_frame row
    env, env_texture, env_frame = -1, -1, np.eye(3)
    for key, spec in named.items():
        kind = spec["type"]
        if kind in ("rectangle", "cube", "obj", "ply", "sphere", "disk", "serialized"):
            m = _matrix(spec.get("to_world"), key)
            analytic = None
            if kind == "sphere":
                analytic = sphere_shape(spec, m, key)
            elif kind == "disk":
                analytic = disk_shape(spec, m, key)
            else:
                v, f, uv, vn = _mesh(spec, key)
                if len(f) and (f.min() < 0 or f.max() >= len(v)):
                    raise SceneError(f"shape {key!r}: face index out of range 0..{len(v) - 1}")
            # Mitsuba's default BSDF: diffuse, black on an emitter.
            bsdf = spec.get("bsdf", {"type": "diffuse", "reflectance": 0.0} if "emitter" in spec else
                            {"type": "diffuse"})
            b = add_bsdf(bsdf, f"{key}.bsdf" if bsdf.get("type") != "ref" else key)
            em = -1
            if "emitter" in spec:
                e = spec["emitter"]
                if e.get("type") != "area":
                    raise SceneError(f"{key}.emitter: type {e.get('type')!r} is not supported yet (area)")
                ekey = f"{key}.emitter.radiance.value"
                params[ekey] = _rgb(e.get("radiance", 1.0), ekey)
                em = len(emitter_keys)
                emitter_keys.append(ekey)
                if analytic is None:
                    emitters.append((EMITTER_AREA, np.zeros(4), 0))
                else:
                    etype = EMITTER_DISK if analytic.kind == DISK else EMITTER_SPHERE
                    emitters.append((etype, np.array([0.0, 0.0, 0.0, analytic.area]), len(shapes)))
            if analytic is not None:
                shapes.append(analytic)
                shape_attrs.append((b, em))
                continue
            vw = v @ m[:3, :3].T + m[:3, 3]
            if isinstance(vn, str):          # face normals
                nw = None
            elif vn is not None:             # the file's, transformed as normals (inverse transpose)
                if abs(np.linalg.det(m[:3, :3])) <= 1e-300:
                    raise SceneError(f"{key}.to_world: the transform is singular (the mesh has vertex normals)")
                nw = vn @ np.linalg.inv(m[:3, :3])
                ln = np.linalg.norm(nw, axis=1, keepdims=True)
                nw = np.divide(nw, ln, out=np.zeros_like(nw), where=ln > 0)
            else:                            # computed from the world-space mesh, as Mitsuba does
                nw = vertex_normals(vw, f)
            if spec.get("flip_normals", False):
                f = f[:, ::-1]
                nw = None if nw is None else -nw
            normals.append(nw[f].reshape(-1, 9) if nw is not None else len(f))
            tris.append(vw[f].reshape(-1, 9))
            attrs.append(np.tile([b, em], (len(f), 1)))
            # Without texture coordinates Mitsuba's uv is the barycentric (b1, b2).
            uvs.append(uv[f].reshape(-1, 6) if uv is not None else np.tile([0.0, 0.0, 1.0, 0.0, 0.0, 1.0], (len(f), 1)))
        elif kind == "envmap":
            if env >= 0:
                raise SceneError(f"{key}: only one environment emitter is supported")
            tspec, env_frame = tex_io.parse_envmap(spec, key, params)
            env, env_texture = len(emitter_keys), len(textures)
            textures.append(tspec)
            emitter_keys.append(f"{key}.scale")
            emitters.append((EMITTER_ENVMAP, np.zeros(4), env_texture))
        elif kind in ("point", "directional", "constant", "spot"):
            m = _matrix(spec.get("to_world"), key)
            if kind == "spot":
                frames[len(emitter_keys)] = _spot_frame(spec, m, key)
                geom, vkey, default = np.append(m[:3, 3], 0.0), "intensity", 1.0
            elif kind == "point":
                pos = m @ np.append(np.asarray(spec.get("position", [0.0, 0.0, 0.0]), np.float64), 1.0)
                geom, vkey, default = np.append(pos[:3], 0.0), "intensity", 1.0
            elif kind == "directional":
                dirn = m[:3, :3] @ np.asarray(spec.get("direction", [0.0, 0.0, 1.0]), np.float64)
                n = np.linalg.norm(dirn)
                if not np.isfinite(n) or n == 0:
                    raise SceneError(f"{key}: direction must be a nonzero finite vector")
                geom, vkey, default = np.append(dirn / n, 0.0), "irradiance", 1.0
            else:
                if env >= 0:
                    raise SceneError(f"{key}: only one environment emitter is supported")
                env = len(emitter_keys)
                geom, vkey, default = np.zeros(4), "radiance", 1.0
            pkey = f"{key}.{vkey}.value"
            params[pkey] = _rgb(spec.get(vkey, default), pkey)
            emitter_keys.append(pkey)
            emitters.append(({"point": EMITTER_POINT, "directional": EMITTER_DIRECTIONAL,
                              "constant": EMITTER_CONSTANT, "spot": EMITTER_SPOT}[kind], geom, 0))
        elif kind in ("perspective", "path", "direct", "aov", "twosided") or kind in bsdf_registry.plugins() \
                or kind in tex_io.TEXTURE_PLUGINS:
            continue  # sensor and integrator were read above; bsdfs and textures when a shape uses them
        else:
            raise SceneError(f"{key!r}: plugin type {kind!r} is not supported yet")
    if not tris and not shapes:
        raise SceneError("the scene has no shapes")
    tri = np.concatenate(tris).astype(np.float64) if tris else np.zeros((0, 9))
    attr = np.concatenate(attrs).astype(np.int32) if attrs else np.zeros((0, 2), np.int32)
    if not np.all(np.isfinite(tri)):
        raise SceneError("scene geometry has NaN or infinite coordinates")
    verts = tri.reshape(-1, 3).astype(np.float32)
    faces = np.arange(len(verts), dtype=np.int32).reshape(-1, 3)
    n_tri = len(tri)
    tri_uv = np.concatenate(uvs) if uvs else np.zeros((0, 6))
    smooth = any(not isinstance(n, int) for n in normals)
    tri_normals = np.concatenate([np.zeros((n, 9)) if isinstance(n, int) else n for n in normals]) \
        if smooth else None
    if shapes:
        # Analytic shapes are BVH primitives after the triangles, boxed by their extent.
        from .bvh import build_bvh_from_bounds, triangle_bounds
        lo_t, hi_t = triangle_bounds(verts, faces)
        boxes = [sh.bounds() for sh in shapes]
        bvh = build_bvh_from_bounds(np.concatenate([lo_t, [bx[0] for bx in boxes]]),
                                    np.concatenate([hi_t, [bx[1] for bx in boxes]]))
        n_s = len(shapes)
        tri = np.concatenate([tri, np.zeros((n_s, 9))])
        attr = np.concatenate([attr, np.array(shape_attrs, np.int32).reshape(-1, 2)])
        # An analytic hit reports its (u, v) where a triangle reports (b1, b2):
        # its UV row is the identity map.
        tri_uv = np.concatenate([tri_uv, np.tile([0.0, 0.0, 1.0, 0.0, 0.0, 1.0], (n_s, 1))])
        if tri_normals is not None:
            tri_normals = np.concatenate([tri_normals, np.zeros((n_s, 9))])
        prim_shape = np.concatenate([np.full(n_tri, -1), np.arange(n_s)]).astype(np.int32)
    else:
        # The kernels test a leaf's (up to 4) triangles in one 4-wide step,
        # so a traversal step is priced at two triangle tests: fuller leaves,
        # a smaller tree (and fewer cache misses) than the default 1:1.
        bvh = build_bvh(verts, faces, c_trav=WIDE_BVH_C_TRAV)
        prim_shape = None
    order = bvh.prim_index
    tri = tri[order].astype(np.float32)
    attr = attr[order]
    tri_uv = tri_uv[order].astype(np.float32)
    if not np.all(np.isfinite(tri_uv)):
        raise SceneError("scene texture coordinates have NaN or infinite values")
    tri_normals = tri_normals[order].astype(np.float32) if tri_normals is not None else np.zeros((0, 9), np.float32)
    prim_shape = prim_shape[order] if prim_shape is not None else np.zeros((0,), np.int32)
    shape_data = np.array([sh.row() for sh in shapes], np.float32).reshape(-1, SHAPE_ROW)
    # Emissive triangles grouped by emitter, with each group's area CDF.
    meta = np.zeros((len(emitters), 4), np.int32)
    geom = np.zeros((len(emitters), 4), np.float32)
    light, cdf = [], []
    for e, (kind, g, extra) in enumerate(emitters):
        meta[e, 0] = kind
        meta[e, 3] = extra
        geom[e] = g
        if kind in (EMITTER_SPHERE, EMITTER_DISK):
            meta[e, 1:4] = (extra, 1, 0)     # the shape's row of shape_data; its area is in geom
            continue
        if kind != EMITTER_AREA:
            continue
        idx = np.nonzero(attr[:, 1] == e)[0]
        area = 0.5 * np.linalg.norm(np.cross(tri[idx, 3:6] - tri[idx, 0:3], tri[idx, 6:9] - tri[idx, 0:3]), axis=1)
        total = float(area.sum())
        if total <= 0:
            raise SceneError(f"{emitter_keys[e]}: the emitting shape has zero area")
        meta[e, 1:3] = (sum(len(x) for x in light), len(idx))
        geom[e, 3] = total
        light.append(idx.astype(np.int32))
        cdf.append(np.cumsum(area) / total)
    light_tris = np.concatenate(light).astype(np.int32) if light else np.zeros(0, np.int32)
    light_cdf = np.concatenate(cdf).astype(np.float32) if cdf else np.zeros(0, np.float32)
    emitter_frame = np.zeros((len(emitters), EMITTER_FRAME_WIDTH), np.float32)
    for e, row in frames.items():
        emitter_frame[e] = row
    return Scene(camera, integrator, tri, attr, bvh.node_bounds.astype(np.float32),
                 bvh.node_links.astype(np.int32), light_tris, light_cdf, meta, geom, env, camera_key, params,
                 bsdfs, emitter_keys, nondiff, emitter_frame=emitter_frame, tri_uv=tri_uv, textures=textures,
                 bsdf_slots=bsdf_slots, env_texture=env_texture, env_frame=env_frame.astype(np.float32),
                 tri_normals=tri_normals, prim_shape=prim_shape, shape_data=shape_data, shapes=shapes,
                 sensors=all_sensors, wide_bvh=None if shapes else _wide_bvh(bvh, tri))


def _wide_bvh(bvh, tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The buffers of the 8-wide BVH the kernels query (ir.bvh_query),
    checked here because the traversal routine reads its indices through
    raw pointers."""
    from ..ir.bvh_query import STACK_SIZE
    from .wide_bvh import build_wide_bvh
    wide = build_wide_bvh(bvh, tris)
    wide.check()
    if wide.stack_need > STACK_SIZE:
        raise SceneError(f"the scene's BVH needs a traversal stack of {wide.stack_need} entries, more than "
                         f"the {STACK_SIZE} the kernels have: the geometry is too degenerate to build a usable BVH")
    return wide.packed()
