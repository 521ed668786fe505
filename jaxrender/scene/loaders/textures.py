"""Texture plugins (Mitsuba's ``bitmap`` and ``checkerboard``) used by BSDF
parameters. A texture loader is ``loader(params, props, width)``: it adds
the texture's parameters to ``params`` and returns its
:class:`~jaxrender.scene.textures.TextureSpec` for a field of ``width``
values (1: a scalar parameter, 3: a colour).

Properties (Mitsuba 3.9.1): ``bitmap``: ``filename`` or ``bitmap`` (an
array here), ``raw``, ``filter_type``, ``wrap_mode``, ``to_uv``,
``format``, ``accel`` (a lookup-speed switch: no effect on values);
``data`` (a raw tensor) is not supported yet. ``checkerboard``: ``color0``,
``color1`` (colours, not nested textures), ``to_uv``. A texture plugin
written in the kernel language (``jaxrender.plugins.register_texture``)
is loaded from its ``Param`` declarations, with ``to_uv``.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...kernels import textures as ktex
from ...kernels.params import ARRAY, COLOR
from .. import variants
from ..errors import SceneError
from ..properties import Properties, is_plugin
from ..textures import TextureSpec, image_from_array, load_image
from .registry import PluginRegistry, load_plugin

TEXTURES = PluginRegistry("texture")
WRAP_MODES = {"repeat": ktex.WRAP_REPEAT, "mirror": ktex.WRAP_MIRROR, "clamp": ktex.WRAP_CLAMP}
FILTER_TYPES = {"bilinear": ktex.FILTER_BILINEAR, "nearest": ktex.FILTER_NEAREST}
# Mitsuba's storage formats; jaxrender keeps every texture in float32.
FORMATS = ("auto", "variant", "float16", "uint8")


def parse_texture(spec: Mapping, prefix: str, width: int, params: dict) -> TextureSpec:
    """The texture ``spec`` (a ``bitmap`` or ``checkerboard`` dict) for a
    BSDF field of ``width`` values, its parameters (keys under ``prefix``)
    added to ``params``.

    Example::

        params = {}
        t = parse_texture({"type": "checkerboard"}, "floor.bsdf.reflectance", 3, params)
        sorted(params)   # ['floor.bsdf.reflectance.color0.value', '....color1.value']
    """
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind not in ("bitmap", "checkerboard"):
        variants.refuse(prefix, f"the texture plugin {kind!r}")
    return load_plugin(TEXTURES, params, spec, prefix, width)


def _choice(props: Properties, name: str, table: dict, default: str) -> int:
    v = props.get(name, default)
    if v not in table:
        raise props.error(f"{v!r} is not supported (one of {', '.join(table)})", name)
    return table[v]


@TEXTURES.register("checkerboard")
def load_checkerboard(params: dict, props: Properties, width: int) -> TextureSpec:
    uv = props.uv_transform()
    keys = []
    for name, default in (("color0", 0.4), ("color1", 0.2)):
        if is_plugin(props.values.get(name)):
            raise props.error("nested textures are not supported (use a colour or a float)", name)
        key = f"{props.key}.{name}.value"
        params[key] = props.rgb(name, default, label=key) if width == 3 else props.scalar(name, default, label=key)
        keys.append(key)
    if width == 1:
        # Mitsuba's checkerboard picks its colours the other way round
        # for scalar lookups (eval_1) than for colour lookups (eval).
        keys.reverse()
    # The 2 x 2 image (c0, c1; c1, c0), read nearest and repeating.
    keys = (keys[0], keys[1], keys[1], keys[0])
    # (mono: its colours are luminances, one value each)
    channels = 1 if variants.current() == "mono" else width
    return TextureSpec(ktex.CHECKERBOARD, keys, 2, 2, channels, ktex.WRAP_REPEAT, ktex.FILTER_NEAREST, uv)


@TEXTURES.register("bitmap")
def load_bitmap(params: dict, props: Properties, width: int) -> TextureSpec:
    uv = props.uv_transform()
    raw = props.bool("raw", False)
    props.bool("accel", True)
    wrap = _choice(props, "wrap_mode", WRAP_MODES, "repeat")
    filt = _choice(props, "filter_type", FILTER_TYPES, "bilinear")
    fmt = props.get("format", "auto")
    if fmt not in FORMATS:
        raise props.error(f"{fmt!r} is not one of {', '.join(FORMATS)}", "format")
    props.unsupported("data", "a bitmap from a raw tensor ('data')")
    img = read_image(props, raw)
    if variants.current() == "mono" and img.shape[2] == 3:
        # Mitsuba's mono bitmaps hold luminance
        img = np.ascontiguousarray(img @ variants.LUMINANCE.astype(img.dtype))[..., None]
    elif variants.current() == "spectral":
        img = _spectral_texels(props, img, raw, width)
    key = f"{props.key}.data"
    params[key] = img
    h, w, c = img.shape
    return TextureSpec(ktex.BITMAP, (key,), w, h, c, wrap, filt, uv)


def _spectral_texels(props: Properties, img: np.ndarray, raw: bool, width: int) -> np.ndarray:
    """A bitmap's texels in the spectral variant: for a colour, each texel's
    stored colour (``variants.encode_color``: the coefficients of its
    upsampled spectrum, as Mitsuba's spectral bitmaps hold them, so
    ``<key>.data`` is those coefficients); for a float (roughness), its
    values unchanged."""
    if width == 1:
        if img.shape[2] == 3 and not raw:
            raise props.error("a colour bitmap queried for a float (e.g. a roughness) in the spectral variant: "
                              "its texels are spectra; give raw=true (as Mitsuba requires)", "raw")
        return img
    if raw:
        raise props.error("a raw bitmap used as a colour in the spectral variant (it cannot be upsampled to "
                          "spectra; Mitsuba refuses it too)", "raw")
    flat = np.clip(img.reshape(-1, img.shape[2]).astype(np.float64), 0.0, 1.0)
    # (a one-channel bitmap: a uniform spectrum per texel, as Mitsuba's)
    coeffs = variants.uniform_coeffs(flat[:, 0]) if img.shape[2] == 1 else variants.reflectance_coeffs(flat)
    return coeffs.reshape(img.shape[:2] + (3,)).astype(np.float32)


def load_texture_plugin(params: dict, props: Properties, width: int) -> TextureSpec:
    """A registered texture plugin: its parameters (keys ``<key>.<name>.value``,
    an ARRAY's ``<key>.<name>``) one after another in its block of texels."""
    t = ktex.PLUGINS[props.plugin]
    uv = props.uv_transform()
    keys = []
    for prm in t.params:
        if is_plugin(props.values.get(prm.name)):
            raise props.error("nested textures are not supported (use a colour or a float)", prm.name)
        if prm.kind == ARRAY:
            key = f"{props.key}.{prm.name}"
            params[key] = props.floats(prm.name, prm.default, prm.size)
        else:
            key = f"{props.key}.{prm.name}.value"
            read = props.rgb if prm.kind == COLOR else props.scalar
            params[key] = read(prm.name, prm.default, label=key)
        keys.append(key)
    return TextureSpec(ktex.CUSTOM, tuple(keys), t.size, 1, t.channels, to_uv=uv, plugin=t.name)


TEXTURES.serve(lambda: set(ktex.PLUGINS), load_texture_plugin)


def read_image(props: Properties, raw: bool, what: str = "a bitmap texture") -> np.ndarray:
    """The image of a ``bitmap`` texture or an ``envmap``: its ``filename``
    or its ``bitmap`` (an array (H, W[, C])), exactly one of them."""
    has_file, has_array = "filename" in props, "bitmap" in props
    if has_file == has_array:
        raise props.error(f"{what} needs exactly one of 'filename' and 'bitmap'")
    if has_file:
        try:
            return load_image(props.filename(), props.where("filename"), raw)
        except SceneError as exc:
            raise props.locate(exc, "filename") from None
    return image_from_array(props.get("bitmap"), props.where("bitmap"), raw)

