"""Shape plugins: the meshes ``rectangle``, ``cube``, ``obj``, ``ply``,
``serialized``, the analytic ``sphere``, ``disk`` and ``cylinder``, and
``shapegroup`` / ``instance``, as Mitsuba 3.9.1 reads them.

A shape loader is ``loader(builder, props)``. Like Mitsuba, a shape finds
its nested BSDF and emitter by their kind, whatever their names (at most
one each; no BSDF: diffuse, black under an emitter); a nested sensor
or texture attribute is "not
supported yet"; media are loaded as Mitsuba's ``interior`` / ``exterior``
(``loaders/media.py``). Every shape reads ``to_world`` and
``silhouette_sampling_weight`` (which only Mitsuba's projective
integrators use); meshes read ``face_normals`` and ``flip_normals``.
Shapes outside shapegroups are placed by parameters under Mitsuba 3.9.1's
keys (``<id>.vertex_positions`` of meshes, ``<id>.to_world`` of the
rectangle and the analytic shapes), which a render may change without
reloading (``scene/refit.py``).

Instancing shares the group as Mitsuba does: a ``shapegroup`` is loaded
once into group-space geometry (never rendered by itself); each
``instance`` of a group with meshes adds a row to ``builder.instances``
(the group's key and its to_world), and ``scene/instancing.py`` gives
each group's meshes one BVH of their own and the instances a BVH of
their world boxes, so memory grows with the instance count by a row, not
by the group's triangles. A group's analytic shapes are one primitive each
and are expanded: each instance adds a transformed copy
(``shapes.instance_shape``). ``SceneBuilder(expand_instances=True)`` expands
the meshes too (``shapes.instance_mesh``; for comparisons: the same image,
larger buffers). A group's shapes keep their BSDFs (one BSDF
row shared by every instance, under the key ``<group id>.<child>``, as
``mitsuba.traverse`` names it) and Mitsuba's rules hold: no emitters, no
nested shapegroups or instances inside a group; one referenced shapegroup
per instance; a sphere only under a similarity transform (see
``instance_shape``). An instance's ``to_world`` is a parameter when its
group holds meshes only: a shared instance's row and box move
(``instancing.InstancePlacement``), an expanded one's copies of the
meshes (``_instance_placement``, with geometry derivatives); where the
group holds analytic shapes (copied into the scene) a ``params`` key for
it is an error saying why (``SceneBuilder.unexposed``).
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import mesh_io
from ..errors import SceneError
from ..properties import Properties
from ..shapes import (AnalyticShape, check_instance_transform, cube_mesh, cylinder_shape, disk_shape, instance_mesh,
                      instance_shape, rectangle_mesh, sphere_shape)
from ..refit import MeshPlacement, vertex_normals
from .emitters import EMITTERS, AreaHost
from .media import attached
from .registry import PluginRegistry, load_plugin

if TYPE_CHECKING:
    from ..builder import SceneBuilder

SHAPES = PluginRegistry("shape")
# What a shape cannot hold yet, by the nested plugin's category.
_REFUSED = {"sensor": "sensors attached to shapes", "texture": "texture attributes on shapes"}
_MEDIA = ("interior", "exterior")
# Without texture coordinates Mitsuba's uv is the barycentric (b1, b2).
_BARYCENTRIC_UV = (0.0, 0.0, 1.0, 0.0, 0.0, 1.0)


def _attachments(builder: SceneBuilder, props: Properties, host: AreaHost) -> tuple[int, int, int, int]:
    """(BSDF index, emitter index or -1, interior and exterior medium or -1) of the shape."""
    props.float("silhouette_sampling_weight", 1.0)
    found: dict[str, list] = {"bsdf": [], "emitter": []}
    media = [-1, -1]
    for name, spec in props.plugins():
        category = builder.category(spec, name)
        if category in _REFUSED:
            raise props.error(f"{_REFUSED[category]} are not supported yet", name)
        if category == "medium":
            if name not in _MEDIA:
                raise props.error("a shape's medium must be named 'interior' or 'exterior' (as in Mitsuba)", name)
            media[_MEDIA.index(name)] = attached(builder, props, name, f"{props.key}.{name}_medium")
            continue
        if category in found:
            found[category].append(name)
            props.get(name)
    for category, names in found.items():
        if len(names) > 1:
            raise props.error(f"a shape holds at most one {category}, got {', '.join(names)}")
    emitter = found["emitter"][0] if found["emitter"] else None
    if found["bsdf"]:
        name = found["bsdf"][0]
        bsdf = builder.bsdf(props.values[name], f"{props.key}.{name}")
    else:
        # Mitsuba's default BSDF: diffuse, black on an emitter.
        default = {"type": "diffuse", "reflectance": 0.0} if emitter else {"type": "diffuse"}
        bsdf = builder.bsdf(default, f"{props.key}.bsdf")
    if emitter is None:
        return bsdf, -1, *media
    spec, key = builder.resolve(props.values[emitter], f"{props.key}.{emitter}")
    if spec.get("type") != "area":
        raise props.error(f"type {spec.get('type')!r} is not supported yet (area)", emitter)
    return bsdf, load_plugin(EMITTERS, builder, spec, key, host), *media


# ---------------------------------------------------------------------------
# Meshes
# ---------------------------------------------------------------------------
@SHAPES.register("rectangle", "cube")
def load_builtin_mesh(builder: SceneBuilder, props: Properties) -> None:
    """Mitsuba's rectangle and cube, whose vertex normals are their face
    normals (so ``face_normals`` changes nothing)."""
    m = props.transform()
    v, f, uv = rectangle_mesh() if props.plugin == "rectangle" else cube_mesh()
    props.bool("face_normals", False)
    _add_mesh(builder, props, m, v, f, uv, "face")


@SHAPES.register("obj", "ply", "serialized")
def load_mesh_file(builder: SceneBuilder, props: Properties) -> None:
    """A mesh file; vertex normals: the file's, else computed as Mitsuba
    does, unless ``face_normals``."""
    m = props.transform()
    filename = props.filename()
    if props.plugin == "serialized":
        flip_uv = False         # (Mitsuba's serialized plugin has no such option)
        index = props.int("shape_index", 0)
        try:
            data = mesh_io.load_serialized(filename, index)
        except SceneError as exc:
            raise props.locate(exc, "filename") from None
    else:
        # Mitsuba's default: flip for obj (as Mitsuba 1), not for ply.
        flip_uv = props.bool("flip_tex_coords", props.plugin == "obj")
        try:
            if props.plugin == "obj":
                data = mesh_io.load_obj(filename, flip_tex_coords=flip_uv)
            else:
                data = mesh_io.load_ply(filename)
        except SceneError as exc:
            raise props.locate(exc, "filename") from None
    uv = None if data.uvs is None else np.array(data.uvs)
    if uv is not None and flip_uv and props.plugin == "ply":
        uv[:, 1] = np.float32(1.0) - uv[:, 1]
    if props.bool("face_normals", False):
        normals = "face"
    else:
        normals = None if data.normals is None else np.asarray(data.normals, np.float64)
    uv = None if uv is None else np.asarray(uv, np.float64)
    _add_mesh(builder, props, m, np.asarray(data.vertices, np.float64), np.asarray(data.faces, np.int64), uv,
              normals)


def _area(v: np.ndarray, f: np.ndarray) -> float:
    if not len(f):
        return 1.0
    e1, e2 = v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]
    return float(np.sum(np.linalg.norm(np.cross(e1, e2), axis=1)))


def _add_mesh(builder: SceneBuilder, props: Properties, m: np.ndarray, v: np.ndarray, f: np.ndarray,
              uv: np.ndarray | None, normals: np.ndarray | str | None) -> None:
    """Add the mesh's world-space triangles. ``normals``: object-space vertex
    normals, "face" (shade with face normals) or None (Mitsuba's smoothed
    normals of the world-space mesh)."""
    if len(f) and (f.min() < 0 or f.max() >= len(v)):
        raise props.error(f"face index out of range 0..{len(v) - 1}")
    attrs = _attachments(builder, props, AreaHost(None, 0))
    vw = v @ m[:3, :3].T + m[:3, 3]
    if _area(vw, f) <= 1e-12 * _area(v, f) * float(np.max(np.abs(m[:3, :3]))) ** 2:
        # (a flattening scale is fine; collapsing every face is a mistake)
        raise props.error("the transform collapses the mesh to zero area (a zero or rank-1 to_world)", "to_world")
    if isinstance(normals, str):
        nw = None
    elif normals is not None:
        # the file's, transformed as normals (inverse transpose)
        if abs(np.linalg.det(m[:3, :3])) <= 1e-300:
            raise props.error("the transform is singular (the mesh has vertex normals)", "to_world")
        nw = normals @ np.linalg.inv(m[:3, :3])
        ln = np.linalg.norm(nw, axis=1, keepdims=True)
        nw = np.divide(nw, ln, out=np.zeros_like(nw), where=ln > 0)
    else:
        nw = vertex_normals(vw, f)
    if props.bool("flip_normals", False):
        f = f[:, ::-1]
        nw = None if nw is None else -nw
    builder.add_triangles(vw[f].reshape(-1, 9), np.tile(attrs, (len(f), 1)),
                          uv[f].reshape(-1, 6) if uv is not None else np.tile(_BARYCENTRIC_UV, (len(f), 1)),
                          nw[f].reshape(-1, 9) if nw is not None else None,
                          _placement(builder, props, m, v, vw, f, uv, nw))


def _placement(builder: SceneBuilder, props: Properties, m: np.ndarray, v: np.ndarray, vw: np.ndarray,
               f: np.ndarray, uv: np.ndarray | None, nw: np.ndarray | None) -> MeshPlacement | None:
    """The parameters that place the mesh, under Mitsuba 3.9.1's keys: a
    rectangle's ``to_world``; any other mesh's world-space
    ``vertex_positions`` (flat, 3 floats a vertex), with its
    ``vertex_normals`` (smooth-shaded meshes: world space, 3 floats a
    vertex) and ``vertex_texcoords`` (meshes with texture coordinates, 2
    floats a vertex). Writing new positions without normals recomputes them,
    as Mitsuba does (also for normals from a file)."""
    if not builder.places_shapes:
        builder.unexposed[f"{props.key}.vertex_positions"] = _GROUP_SHAPE_WHY
        return None
    why = _GEOMETRY_WHY
    smooth = nw is not None
    if props.plugin == "rectangle":
        placement = MeshPlacement(f"{props.key}.to_world", "to_world", f.astype(np.int32), smooth,
                                  local=v.astype(np.float32))
        builder.add_param(placement.key, m.astype(np.float32), nondiff=why)
        return placement
    placement = MeshPlacement(f"{props.key}.vertex_positions", "vertex_positions", f.astype(np.int32), smooth,
                              normals_key=f"{props.key}.vertex_normals" if smooth else None,
                              uv_key=f"{props.key}.vertex_texcoords" if uv is not None else None)
    builder.add_param(placement.key, vw.astype(np.float32).reshape(-1), nondiff=why)
    uv_why = ("texture-coordinate derivatives are implemented under the path and direct integrators for "
              "bilinear bitmaps; the value can change between renders")
    if smooth:
        builder.add_param(placement.normals_key, nw.astype(np.float32).reshape(-1), nondiff=why)
    else:
        builder.unexposed[f"{props.key}.vertex_normals"] = (
            "this mesh shades with its face normals (face_normals, or Mitsuba's rectangle and cube), a kernel "
            "variant without vertex normals; load it with smooth normals to change them")
    if uv is not None:
        builder.add_param(placement.uv_key, uv.astype(np.float32).reshape(-1), nondiff=uv_why)
    return placement


_GEOMETRY_WHY = ("geometry derivatives are implemented for meshes (vertex_positions, vertex_normals, a "
                 "rectangle's to_world) and analytic shapes (to_world) under the path and direct integrators so "
                 "far; the value can change between renders, without recompiling")


# ---------------------------------------------------------------------------
# Analytic shapes
# ---------------------------------------------------------------------------
@SHAPES.register("sphere")
def load_sphere(builder: SceneBuilder, props: Properties) -> None:
    m = props.transform()
    center = props.vector("center", [0.0, 0.0, 0.0])
    radius = props.get("radius", 1.0)
    try:
        r = float(np.asarray(radius, np.float64).reshape(()))
    except (TypeError, ValueError):
        raise props.error(f"expected a positive float, got {radius!r}", "radius") from None
    if not np.isfinite(r) or r <= 0.0:
        raise props.error(f"must be a positive finite float, got {radius!r}", "radius")
    _add_analytic(builder, props, sphere_shape(m, center, r, props.bool("flip_normals", False), props.key))


@SHAPES.register("disk")
def load_disk(builder: SceneBuilder, props: Properties) -> None:
    m = props.transform()
    _add_analytic(builder, props, disk_shape(m, props.bool("flip_normals", False), props.key))


@SHAPES.register("cylinder")
def load_cylinder(builder: SceneBuilder, props: Properties) -> None:
    m = props.transform()
    p0 = props.vector("p0", [0.0, 0.0, 0.0])
    p1 = props.vector("p1", [0.0, 0.0, 1.0])
    r = props.float("radius", 1.0)
    if not np.isfinite(r) or r <= 0.0:
        raise props.error(f"must be a positive finite float, got {r!r}", "radius")
    try:
        shape = cylinder_shape(m, p0, p1, r, props.bool("flip_normals", False), props.key)
    except SceneError as exc:
        raise props.locate(exc, "p1") from None
    _add_analytic(builder, props, shape)


def _add_analytic(builder: SceneBuilder, props: Properties, shape: AnalyticShape) -> None:
    if builder.places_shapes:
        # Mitsuba's key: the full transform (the sphere's centre and radius, a
        # cylinder's ends and a disk's flip folded in)
        shape = dataclasses.replace(shape, param=f"{props.key}.to_world")
        builder.add_param(shape.param, shape.to_world.astype(np.float32), nondiff=_GEOMETRY_WHY)
    bsdf, emitter, *media = _attachments(builder, props, AreaHost(shape, len(builder.shapes)))
    builder.add_shape(shape, bsdf, emitter, tuple(media))


# ---------------------------------------------------------------------------
# Shape groups and instances (see the module docstring)
# ---------------------------------------------------------------------------
_INSTANCE_TO_WORLD_WHY = ("this instance's shapegroup holds analytic shapes, which are copied into the scene when it "
                          "is loaded, so its to_world cannot change at render time: load the scene again with the "
                          "new transform")

_GROUP_SHAPE_WHY = ("the geometry of a shapegroup's shapes is not a parameter (its hierarchy, shared by the "
                    "instances, is built when the scene is loaded)")


@dataclass
class ShapeGroup:
    """A loaded shapegroup in its own space: meshes as
    ``SceneBuilder.add_triangles`` takes them, analytic shapes with their
    (BSDF, emitter) indices."""
    meshes: list
    shapes: list


def _instance_placement(key: str, tris: np.ndarray, normals: np.ndarray | None, m: np.ndarray) -> MeshPlacement:
    """How an expanded instance's ``to_world`` (``key``) places its copy of
    a group mesh (group-space triangle rows ``tris``, vertex normals
    ``normals`` or None), as ``shapes.instance_mesh`` placed it with
    ``m``: points by the matrix, normals by its inverse transpose, the
    vertex order reversed where the loaded matrix mirrors."""
    faces = np.arange(3 * len(tris), dtype=np.int32).reshape(-1, 3)
    if np.linalg.det(m[:3, :3]) < 0:
        faces = faces[:, [0, 2, 1]]
    local_normals = None if normals is None else normals.reshape(-1, 3).astype(np.float32)
    return MeshPlacement(key, "to_world", faces, normals is not None, local=tris.reshape(-1, 3).astype(np.float32),
                         local_normals=local_normals)


@SHAPES.register("shapegroup")
def load_shapegroup(builder: SceneBuilder, props: Properties) -> None:
    """Load the group's shapes once, into ``builder.groups[key]``, and add
    nothing to the scene: only instances show it."""
    if props.key in builder.groups:
        props.mark_read(*props.values)
        return
    m = props.transform()
    if not np.allclose(m, np.eye(4)):
        # (Mitsuba reads it and ignores it; so does jaxrender, but says so)
        warnings.warn(f"{props.key}.to_world: a shapegroup's to_world has no effect (as in Mitsuba); "
                      "give it to the instances", stacklevel=3)
    props.float("silhouette_sampling_weight", 1.0)
    saved = builder.meshes, builder.shapes, builder.shape_attrs
    builder.meshes, builder.shapes, builder.shape_attrs = [], [], []
    builder.places_shapes = False
    try:
        for name, spec in props.plugins():
            child, key = builder.resolve(spec, f"{props.key}.{name}")
            kind = child.get("type")
            if builder.category(child, key) not in ("shape", None):   # (None: unknown, said by load_plugin)
                raise props.error(f"a shapegroup holds only shapes, got a {kind!r} (as in Mitsuba)", name)
            if kind == "shapegroup":
                raise props.error("nested shapegroups are not permitted (as in Mitsuba)", name)
            if kind == "instance":
                raise props.error("nested instancing is not permitted (as in Mitsuba)", name)
            for inner, inner_spec in Properties(child, key, "shape").plugins():
                if builder.category(inner_spec, inner) == "emitter":
                    raise props.error(f"instancing of emitters is not supported (as in Mitsuba): {key}.{inner}",
                                      name)
            props.get(name)
            load_plugin(SHAPES, builder, child, key)
            builder.unexposed[f"{key}.to_world"] = _GROUP_SHAPE_WHY
        group = ShapeGroup(builder.meshes, list(zip(builder.shapes, builder.shape_attrs)))
    finally:
        builder.meshes, builder.shapes, builder.shape_attrs = saved
        builder.places_shapes = True
    builder.groups[props.key] = group


@SHAPES.register("instance")
def load_instance(builder: SceneBuilder, props: Properties) -> None:
    """The referenced shapegroup under ``to_world``: its meshes shared (a
    row of ``builder.instances``), its analytic shapes copied."""
    m = props.transform()
    props.float("silhouette_sampling_weight", 1.0)
    found = []
    for name, spec in props.plugins():
        target, key = builder.resolve(spec, f"{props.key}.{name}")
        if target.get("type") != "shapegroup":
            raise props.error(f"only a shapegroup can be given to an instance (as in Mitsuba), got a "
                              f"{target.get('type')!r}", name)
        if spec.get("type") != "ref":
            raise props.error("an instance's shapegroup must be a reference (by id) to a shapegroup at the top "
                              "level of the scene (Mitsuba cannot load one written inside the instance)", name)
        if found:
            raise props.error("only one shapegroup can be given per instance (as in Mitsuba)", name)
        props.get(name)
        found.append((target, key))
    if not found:
        raise props.error("a reference to a 'shapegroup' must be given (as in Mitsuba)")
    target, key = found[0]
    if key not in builder.groups:
        load_plugin(SHAPES, builder, target, key)
    group = builder.groups[key]
    check_instance_transform(m, props.key)
    shared = not builder.expand_instances and any(len(mesh[0]) for mesh in group.meshes)
    # Mitsuba's key, where the group holds meshes only: a shared instance's
    # row and box follow it (instancing.InstancePlacement), an expanded
    # one's copies of the group's meshes (with derivatives: _instance_placement)
    placed = any(len(mesh[0]) for mesh in group.meshes) and not group.shapes
    param = f"{props.key}.to_world" if placed else None
    if placed:
        builder.add_param(param, m.astype(np.float32), nondiff=_GEOMETRY_WHY)
    else:
        builder.unexposed[f"{props.key}.to_world"] = _INSTANCE_TO_WORLD_WHY
    if builder.expand_instances:
        for tris, attrs, uvs, normals, _ in group.meshes:
            world, world_uvs, world_normals = instance_mesh(tris, uvs, normals, m)
            builder.add_triangles(world, attrs, world_uvs, world_normals,
                                  _instance_placement(param, tris, normals, m) if placed else None)
    elif shared:
        builder.instances.append((key, m, props.key, param))
    for shape, (bsdf, emitter, *media) in group.shapes:
        builder.add_shape(instance_shape(shape, m, props.key), bsdf, emitter, tuple(media))
