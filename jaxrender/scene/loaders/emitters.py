"""Emitter plugins: ``area`` (nested in a shape), ``point``, ``spot``,
``directional``, ``constant``, ``envmap`` and ``sunsky``, as Mitsuba 3.9.1
reads them.

An emitter loader is ``loader(builder, props)`` (``area``: with the
:class:`AreaHost` it sits on) and returns the emitter's index. Every
emitter reads Mitsuba's ``sampling_weight`` (only 1 is supported: jaxrender
picks emitters uniformly) and refuses a nested medium.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...kernels import emitters as kemitters
from ...kernels import layout
from ...kernels import shapes as kshapes
from ...kernels import textures as ktex
from .. import sunsky as ss
from .. import variants
from ..errors import SceneError
from ..properties import Properties
from ..shapes import AnalyticShape
from ..textures import TextureSpec
from .registry import PluginRegistry, reject_nested
from .textures import read_image

if TYPE_CHECKING:
    from ..builder import SceneBuilder

EMITTERS = PluginRegistry("emitter")
TYPE_ID = kemitters.TYPE_ID


class AreaHost(NamedTuple):
    """The shape an area emitter sits on: its analytic shape (None: a mesh)
    and the shape's row of ``shape_data``."""
    analytic: AnalyticShape | None
    shape_row: int


def _emitter_basics(builder: SceneBuilder, props: Properties) -> None:
    props.only("sampling_weight", 1.0, Properties.float, "an emitter sampling_weight other than 1")
    reject_nested(builder, props, "medium", "media attached to emitters")


def _radiance_param(builder: SceneBuilder, props: Properties, name: str) -> str:
    """The emitter's colour ``name`` (rgb or float, default 1) as parameter
    ``<key>.<name>.value``."""
    pkey = f"{props.key}.{name}.value"
    builder.add_param(pkey, props.rgb(name, 1.0, label=pkey, illuminant=True))
    return pkey


@EMITTERS.register("area")
def load_area(builder: SceneBuilder, props: Properties, host: AreaHost | None = None) -> int:
    if host is None:
        raise props.error("an area emitter must be nested in a shape")
    if "to_world" in props:
        props.get("to_world")
        raise props.error("an area emitter takes the transform of its shape (Mitsuba refuses to_world here)",
                          "to_world")
    _emitter_basics(builder, props)
    pkey = _radiance_param(builder, props, "radiance")
    if host.analytic is None:
        return builder.add_emitter(TYPE_ID["area"], np.zeros(4), 0, pkey)
    kind = TYPE_ID[f"area_{kshapes.NAMES[host.analytic.kind]}"]
    return builder.add_emitter(kind, np.array([0.0, 0.0, 0.0, host.analytic.area]), host.shape_row, pkey)


def _vector_or_transform(props: Properties, name: str, from_transform) -> np.ndarray:
    """The vector ``name`` (a position or direction) if given, else
    ``from_transform(to_world)``; giving both is an error, as in Mitsuba."""
    if name not in props:
        return from_transform(props.transform())
    if "to_world" in props:
        raise props.error(f"give either {name} or to_world, not both")
    return props.vector(name, 0.0)


@EMITTERS.register("point")
def load_point(builder: SceneBuilder, props: Properties) -> int:
    _emitter_basics(builder, props)
    pos = _vector_or_transform(props, "position", lambda m: m[:3, 3])
    pkey = _radiance_param(builder, props, "intensity")
    return builder.add_emitter(TYPE_ID["point"], np.append(pos, 0.0), 0, pkey)


@EMITTERS.register("directional")
def load_directional(builder: SceneBuilder, props: Properties) -> int:
    """Light along ``direction``, or along +z of ``to_world``."""
    _emitter_basics(builder, props)
    dirn = _vector_or_transform(props, "direction", lambda m: m[:3, :3] @ np.array([0.0, 0.0, 1.0]))
    n = np.linalg.norm(dirn)
    if not np.isfinite(n) or n == 0:
        raise props.error("direction must be a nonzero finite vector")
    pkey = _radiance_param(builder, props, "irradiance")
    return builder.add_emitter(TYPE_ID["directional"], np.append(dirn / n, 0.0), 0, pkey)


@EMITTERS.register("constant")
def load_constant(builder: SceneBuilder, props: Properties) -> int:
    _environment_slot(builder, props)
    _emitter_basics(builder, props)
    props.transform()     # read by Mitsuba too; a constant emitter has no orientation
    pkey = _radiance_param(builder, props, "radiance")
    index = builder.add_emitter(TYPE_ID["constant"], np.zeros(4), 0, pkey)
    builder.set_environment(index)
    return index


def _environment_slot(builder: SceneBuilder, props: Properties) -> None:
    if builder.env >= 0:
        raise props.error("only one environment emitter is supported")


@EMITTERS.register("spot")
def load_spot(builder: SceneBuilder, props: Properties) -> int:
    """Mitsuba's ``spot``: it shines along +z of ``to_world``; full
    intensity within ``beam_width`` degrees of the axis, falling off linearly
    in angle to 0 at ``cutoff_angle``."""
    _emitter_basics(builder, props)
    m = props.transform()
    frame = _spot_frame(props, m)
    pkey = _radiance_param(builder, props, "intensity")
    return builder.add_emitter(TYPE_ID["spot"], np.append(m[:3, 3], 0.0), 0, pkey, frame)


def _spot_frame(props: Properties, m: np.ndarray) -> np.ndarray:
    """The spot light's ``emitter_frame`` row."""
    props.unsupported("texture", "textured spot lights")
    cutoff = props.float("cutoff_angle", 20.0)
    if not 0.0 < cutoff <= 180.0:
        raise props.error(f"must be in (0, 180] degrees, got {cutoff}", "cutoff_angle")
    beam = props.float("beam_width", cutoff * 0.75)
    if not 0.0 <= beam <= cutoff:
        raise props.error(f"must be in [0, cutoff_angle = {cutoff}] degrees, got {beam}", "beam_width")
    lin = m[:3, :3]
    if abs(np.linalg.det(lin)) < 1e-12:
        raise props.error("the transform is singular", "to_world")
    row = np.zeros(layout.EMITTER_FRAME_ROW)
    row[:9] = np.linalg.inv(lin).reshape(-1)
    c, b = math.radians(cutoff), math.radians(beam)
    row[layout.FRAME_SPOT_COS_CUTOFF] = math.cos(c)
    row[layout.FRAME_SPOT_COS_BEAM] = math.cos(b)
    row[layout.FRAME_SPOT_CUTOFF] = c
    row[layout.FRAME_SPOT_INV_WIDTH] = 1.0 / (c - b) if c > b else 0.0
    return row


@EMITTERS.register("envmap")
def load_envmap(builder: SceneBuilder, props: Properties) -> int:
    """Mitsuba's ``envmap``: parameters ``<key>.data`` (H, W + 2, 3, with
    Mitsuba's one-column halo each side) and ``<key>.scale``."""
    _environment_slot(builder, props)
    _emitter_basics(builder, props)
    props.only("mis_compensation", False, Properties.bool, "mis_compensation")
    img = read_image(props, False, "an envmap")
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    if variants.current() == "mono":
        # kept as three equal channels: the kernel reads the first, and the
        # sampling tables (built from luminance) are unchanged
        img = np.repeat(img @ variants.LUMINANCE.astype(img.dtype)[:, None], 3, axis=2)
    h, w, _ = img.shape
    if w < 2 or h < 3:
        raise props.error(f"the environment map must be at least 2 x 3 pixels (width x height), got {w} x {h}")
    if variants.current() == "spectral":
        img = variants.illuminant_texels(img)          # (H, W, 4): coefficients and scale per texel
    data = np.concatenate([img[:, -1:], img, img[:, :1]], axis=1)
    builder.add_param(f"{props.key}.data", np.ascontiguousarray(data, np.float32))
    builder.add_param(f"{props.key}.scale", props.scalar("scale", 1.0).astype(np.float32))
    m = _rotation(props, "an envmap")
    texture = builder.add_texture(TextureSpec(ktex.ENVMAP, (f"{props.key}.data",), w, h, img.shape[2], ktex.WRAP_REPEAT,
                                              ktex.FILTER_BILINEAR, None))
    index = builder.add_emitter(TYPE_ID["envmap"], np.zeros(4), texture, f"{props.key}.scale")
    builder.set_environment(index, texture, m)
    return index


def _rotation(props: Properties, what: str) -> np.ndarray:
    try:
        return ss.rotation_of(props.transform(), props.key, what)
    except SceneError as exc:
        raise props.locate(exc, "to_world") from None


SUNSKY_NONDIFF = ("the sky and sun are rebuilt from the sunsky's parameters with numpy when a render changes "
                  "them: they have no derivatives")
SUNSKY_TIME = (("year", Properties.int), ("month", Properties.int), ("day", Properties.int),
               ("hour", Properties.float), ("minute", Properties.float), ("second", Properties.float),
               ("latitude", Properties.float), ("longitude", Properties.float), ("timezone", Properties.float))


@EMITTERS.register("sunsky")
def load_sunsky(builder: SceneBuilder, props: Properties) -> int:
    """Mitsuba's ``sunsky`` (RGB): the Hosek-Wilkie sky and sun for a
    ``sun_direction`` (world) or for a date, time and place, with Mitsuba's
    defaults (``jaxrender.scene.sunsky``). Its parameters are Mitsuba's keys;
    a render may change them (not trace them), and then rebuilds the sky."""
    variants.refuse(props.key, "the sunsky emitter")
    _environment_slot(builder, props)
    _emitter_basics(builder, props)
    aperture = props.float("sun_aperture", 0.5358)
    if not 0.0 < aperture < 180.0:
        raise props.error(f"must be in (0, 180) degrees, got {aperture}", "sun_aperture")
    values = {"turbidity": props.float("turbidity", 3.0), "sky_scale": props.float("sky_scale", 1.0),
              "sun_scale": props.float("sun_scale", 1.0), "albedo.value": props.rgb("albedo", 0.3)}
    complex_sun = props.bool("complex_sun", False)
    timed = [name for name, _ in SUNSKY_TIME if name in props]
    if "sun_direction" in props:
        if timed:
            raise props.error(f"give either sun_direction or the date, time and place ({', '.join(timed)}), "
                              "not both", "sun_direction")
        values["sun_direction"] = props.vector("sun_direction", None)
    else:
        defaults = {**ss.TIME_DEFAULTS, **ss.PLACE_DEFAULTS}
        values.update({name: read(props, name, defaults[name]) for name, read in SUNSKY_TIME})
    try:
        ss.check_values(values, props.key)
    except SceneError as exc:
        raise props.locate(exc) from None
    _rotation(props, "a sunsky")       # (checked here to name the file and line; environment() uses it)
    values["to_world"] = props.transform()
    source = ss.SunskySource(props.key, len(builder.emitter_keys), "sun_direction" not in values, aperture,
                             complex_sun, len(builder.textures), len(builder.textures) + 1 if complex_sun else -1)
    sky = source.environment(values, props.where())
    values["sun_direction"] = sky.geom_row()[:3]
    for name in source.names():
        builder.add_param(f"{props.key}.{name}", np.asarray(values[name], np.float64), SUNSKY_NONDIFF)
    builder.add_texture(TextureSpec(ktex.ENVMAP, (), sky.map_width, sky.map_height, 3, ktex.WRAP_REPEAT,
                                    ktex.FILTER_BILINEAR, None, fixed=sky.sampling_map))
    if complex_sun:
        table = sky.sun_table_values
        builder.add_texture(TextureSpec(ktex.DATA, (), table.size // 3, 1, 3, fixed=table))
    index = builder.add_emitter(TYPE_ID["sunsky"], sky.geom_row(), source.map_texture, None,
                                sky.frame_row(source.table_texture))
    builder.set_environment(index, source.map_texture, sky.map_frame)
    builder.sunsky = source
    return index
