"""Textures and environment maps for the scene builder: image files, texture
plugins (``bitmap``, ``checkerboard``), the ``envmap`` emitter's data and its
sampling tables. Kernel side: ``jaxrender.kernels.textures`` / ``envmap``.

Parameters, as ``mitsuba.traverse`` names them (Mitsuba 3.9.1, texture
storage ``format="variant"``, i.e. float32 and differentiable):

* ``<bsdf>.<field>.data``: a bitmap's texels, shape (H, W, C), float32,
  linear (8-bit sRGB images are decoded at load unless ``raw=true``; alpha
  is dropped; C is 1 for grey images, else 3).
* ``<bsdf>.<field>.color0.value`` / ``color1.value``: a checkerboard's
  colours (shape (3,) for colour fields, () for scalar fields).
* ``<emitter>.data``: an environment map, shape (H, W + 2, 3): Mitsuba's
  layout with a one-column halo on each side (column 0 repeats the last
  image column, column W + 1 the first). As in Mitsuba the halo is
  refreshed from the image columns at every render, so its values are
  ignored and its gradient is zero (it lands on the columns it copies).
* ``<emitter>.scale``: the envmap's radiance scale, shape ().

A texture referenced by id (``{"type": "ref", "id": "tex"}``, XML ``<ref>``)
is shared, with keys ``tex.data`` etc.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..kernels import textures as ktex
from .errors import SceneError

TEXTURE_PLUGINS = ("bitmap", "checkerboard")
WRAP_MODES = {"repeat": ktex.WRAP_REPEAT, "mirror": ktex.WRAP_MIRROR, "clamp": ktex.WRAP_CLAMP}
FILTER_TYPES = {"bilinear": ktex.FILTER_BILINEAR, "nearest": ktex.FILTER_NEAREST}


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    """The sRGB transfer function's inverse (IEC 61966-2-1), float64."""
    x = np.asarray(x, np.float64)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


def _exr(path: str, where: str) -> np.ndarray:
    import OpenEXR
    try:
        f = OpenEXR.File(path, separate_channels=True)
        chans = {k: np.asarray(v.pixels) for k, v in f.channels().items()}
    except Exception as exc:  # the OpenEXR binding raises RuntimeError for bad files
        raise SceneError(f"{where}: cannot read OpenEXR image {path!r} ({exc})", filename=path) from None
    if all(c in chans for c in "RGB"):
        planes = [chans[c] for c in "RGB"]
    elif "Y" in chans:
        planes = [chans["Y"]]
    else:
        raise SceneError(f"{where}: OpenEXR image {path!r} has channels {sorted(chans)}; "
                         "expected R, G, B (and optionally A) or Y", filename=path)
    return np.stack([np.asarray(p, np.float32) for p in planes], axis=-1)


def _pillow(path: str, where: str) -> tuple[np.ndarray, bool]:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as im:
            im.load()
            mode = im.mode
            if mode == "P":
                im = im.convert("RGBA" if "transparency" in im.info else "RGB")
            elif mode in ("1", "CMYK", "YCbCr", "LAB", "HSV"):
                im = im.convert("RGB")
            a = np.asarray(im)
            mode = im.mode
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as exc:
        raise SceneError(f"{where}: cannot read image {path!r} ({exc})", filename=path) from None
    if mode in ("F",):
        return a.astype(np.float32)[..., None], False
    if mode.startswith("I"):
        return (a.astype(np.float64) / 65535.0)[..., None], True
    if a.ndim == 2:
        a = a[..., None]
    if mode in ("LA", "La"):
        a = a[..., :1]
    elif a.shape[-1] == 4:
        a = a[..., :3]
    if a.shape[-1] not in (1, 3):
        raise SceneError(f"{where}: image {path!r} has unsupported pixel mode {mode!r}", filename=path)
    return a.astype(np.float64) / 255.0, True


def load_image(path: str, where: str, raw: bool = False) -> np.ndarray:
    """An image file as float32 (H, W, C), C in {1, 3}, linear values:
    8/16-bit PNG, JPEG, BMP, TGA (pillow) are sRGB-decoded unless ``raw``;
    OpenEXR is linear. Errors name ``where`` and the file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SceneError(f"{where}: image file {path!r} not found", filename=path)
    if path.lower().endswith(".exr"):
        img, encoded = _exr(path, where), False
    else:
        img, encoded = _pillow(path, where)
    if img.ndim != 3 or img.shape[0] < 1 or img.shape[1] < 1:
        raise SceneError(f"{where}: image {path!r} is empty", filename=path)
    if encoded and not raw:
        img = srgb_to_linear(img)
    img = np.ascontiguousarray(img, np.float32)
    if not np.all(np.isfinite(img)):
        raise SceneError(f"{where}: image {path!r} contains NaN or infinite values", filename=path)
    return img


def _image_from_array(value: Any, where: str, raw: bool) -> np.ndarray:
    """A ``bitmap`` property given as an array (H, W[, C]): uint8 values are
    sRGB-encoded unless ``raw`` (like an 8-bit file), floats are linear."""
    try:
        a = np.asarray(value)
    except Exception as exc:
        raise SceneError(f"{where}: bitmap must be an array (H, W, C), got {type(value).__name__} ({exc})") from None
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[0] < 1 or a.shape[1] < 1 or a.shape[2] not in (1, 2, 3, 4):
        raise SceneError(f"{where}: bitmap must have shape (H, W, C) with C in 1..4, got {a.shape}")
    if a.shape[2] in (2, 4):
        a = a[..., :a.shape[2] - 1]
    if a.dtype == np.uint8:
        a = a.astype(np.float64) / 255.0
        if not raw:
            a = srgb_to_linear(a)
    elif a.dtype.kind not in "fiu":
        raise SceneError(f"{where}: bitmap has unsupported dtype {a.dtype}")
    a = np.ascontiguousarray(a, np.float32)
    if not np.all(np.isfinite(a)):
        raise SceneError(f"{where}: bitmap contains NaN or infinite values")
    return a


def _to_uv(value: Any, where: str) -> np.ndarray:
    """The 2 x 3 affine part of a ``to_uv`` transform: a 3x3 matrix, or a 4x4
    one whose z row and column are ignored (as Mitsuba does)."""
    if value is None:
        return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    m = getattr(value, "matrix", value)
    try:
        m = np.array(m, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SceneError(f"{where}: to_uv is not a transform ({exc})") from None
    if m.shape == (4, 4):
        m = m[np.ix_([0, 1, 3], [0, 1, 3])]
    if m.shape != (3, 3) or not np.all(np.isfinite(m)):
        raise SceneError(f"{where}: to_uv must be a finite 3x3 or 4x4 matrix, got shape {m.shape}")
    return m[:2]


def _choice(spec: Mapping, name: str, table: dict, default: str, where: str) -> int:
    v = spec.get(name, default)
    if v not in table:
        raise SceneError(f"{where}.{name}: {v!r} is not supported (one of {', '.join(table)})")
    return table[v]


@dataclass
class TextureSpec:
    """One texture of the scene: which parameters hold its values and how
    the kernel reads them (a ``tex_meta`` row and a ``tex_uv`` row)."""
    kind: int                 # kernels.textures.BITMAP / CHECKERBOARD / ENVMAP
    keys: tuple               # parameter keys whose values, flattened in order, are its texels
    width: int
    height: int
    channels: int
    wrap: int = ktex.WRAP_REPEAT
    filter: int = ktex.FILTER_BILINEAR
    to_uv: Any = None         # (2, 3)

    @property
    def size(self) -> int:
        return self.width * self.height * self.channels

    def texels(self, p: Mapping[str, Any]):
        """Its block of the ``texels`` buffer (jax.numpy, so gradients flow)."""
        import jax.numpy as jnp
        if self.kind == ktex.ENVMAP:
            data = jnp.asarray(p[self.keys[0]], jnp.float32)
            return data[:, 1:self.width + 1, :].reshape(-1)
        return jnp.concatenate([jnp.asarray(p[k], jnp.float32).reshape(-1) for k in self.keys])


def parse_texture(spec: Mapping, prefix: str, width: int, params: dict) -> TextureSpec:
    """A bitmap or checkerboard for a BSDF field of ``width`` values (1 or 3);
    adds its parameters (keys under ``prefix``) to ``params``."""
    from .scene import _rgb, _scalar
    kind = spec.get("type")
    to_uv = _to_uv(spec.get("to_uv"), prefix)
    if kind == "checkerboard":
        conv = _rgb if width == 3 else _scalar
        keys = []
        for name, default in (("color0", 0.4), ("color1", 0.2)):
            value = spec.get(name, default)
            if isinstance(value, Mapping) and value.get("type") in TEXTURE_PLUGINS:
                raise SceneError(f"{prefix}.{name}: nested textures are not supported (use a colour or a float)")
            key = f"{prefix}.{name}.value"
            params[key] = conv(value, key)
            keys.append(key)
        if width == 1:
            # Mitsuba's checkerboard picks its colours the other way round
            # for scalar lookups (eval_1) than for colour lookups (eval).
            keys.reverse()
        # The 2 x 2 image (c0, c1; c1, c0), read nearest and repeating.
        keys = (keys[0], keys[1], keys[1], keys[0])
        return TextureSpec(ktex.CHECKERBOARD, keys, 2, 2, width, ktex.WRAP_REPEAT, ktex.FILTER_NEAREST, to_uv)
    if kind != "bitmap":
        raise SceneError(f"{prefix}: texture type {kind!r} is not supported ({', '.join(TEXTURE_PLUGINS)})")
    raw = bool(spec.get("raw", False))
    wrap = _choice(spec, "wrap_mode", WRAP_MODES, "repeat", prefix)
    filt = _choice(spec, "filter_type", FILTER_TYPES, "bilinear", prefix)
    fmt = spec.get("format", "auto")
    if fmt not in ("auto", "variant", "float16", "uint8"):
        raise SceneError(f"{prefix}.format: {fmt!r} is not one of auto, variant, float16, uint8")
    if ("bitmap" in spec) == ("filename" in spec):
        raise SceneError(f"{prefix}: a bitmap texture needs exactly one of 'filename' and 'bitmap'")
    if "filename" in spec:
        img = load_image(spec["filename"], f"{prefix}.filename", raw)
    else:
        img = _image_from_array(spec["bitmap"], f"{prefix}.bitmap", raw)
    key = f"{prefix}.data"
    params[key] = img
    h, w, c = img.shape
    return TextureSpec(ktex.BITMAP, (key,), w, h, c, wrap, filt, to_uv)


def parse_envmap(spec: Mapping, key: str, params: dict) -> tuple[TextureSpec, np.ndarray]:
    """The ``envmap`` emitter ``key``: its texture (parameters ``key.data``,
    ``key.scale`` added to ``params``) and its to_world rotation (3x3)."""
    from .scene import _matrix, _scalar
    if ("bitmap" in spec) == ("filename" in spec):
        raise SceneError(f"{key}: an envmap needs exactly one of 'filename' and 'bitmap'")
    if "filename" in spec:
        img = load_image(spec["filename"], f"{key}.filename")
    else:
        img = _image_from_array(spec["bitmap"], f"{key}.bitmap", False)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    h, w, _ = img.shape
    if w < 2 or h < 3:
        raise SceneError(f"{key}: the environment map must be at least 2 x 3 pixels (width x height), got {w} x {h}")
    data = np.concatenate([img[:, -1:], img, img[:, :1]], axis=1)
    params[f"{key}.data"] = np.ascontiguousarray(data, np.float32)
    params[f"{key}.scale"] = _scalar(spec.get("scale", 1.0), f"{key}.scale").astype(np.float32)
    m = _matrix(spec.get("to_world"), key)[:3, :3]
    s = np.cbrt(np.linalg.det(m))
    if not s > 0 or not np.allclose((m / s) @ (m / s).T, np.eye(3), atol=1e-4):
        raise SceneError(f"{key}: to_world of an envmap must be a rotation (possibly uniformly scaled)")
    tex = TextureSpec(ktex.ENVMAP, (f"{key}.data",), w, h, 3, ktex.WRAP_REPEAT, ktex.FILTER_BILINEAR, None)
    return tex, m / s


def envmap_tables(tex: TextureSpec, data):
    """The ``env_dist`` buffer (see ``kernels.envmap``) of an envmap whose
    parameter value is ``data`` (H, W + 2, 3), built with jax.numpy so that it
    follows the current (possibly traced) values; not differentiated."""
    import jax
    import jax.numpy as jnp
    W, H = tex.width, tex.height
    img = jax.lax.stop_gradient(jnp.asarray(data, jnp.float32))[:, 1:W + 1, :]
    lum = jnp.maximum(img @ jnp.asarray(ktex.LUMINANCE, jnp.float32), 0.0)
    lum = jnp.where(jnp.isfinite(lum), lum, 0.0)
    rows = lum[:-1] + lum[1:]
    cell = 0.25 * (rows + jnp.roll(rows, -1, axis=1))               # (H - 1, W)
    cos = np.cos(np.pi * np.arange(H) / (H - 1))
    solid = (2.0 * math.pi / W) * (cos[:-1] - cos[1:])              # (H - 1,)
    weights = cell * jnp.asarray(solid, jnp.float32)[:, None]
    total = jnp.sum(weights)
    ok = total > 0
    cell = jnp.where(ok, cell, 1.0)
    weights = jnp.where(ok, weights, jnp.broadcast_to(jnp.asarray(solid, jnp.float32)[:, None], weights.shape))
    total = jnp.sum(weights)
    row_w = jnp.sum(weights, axis=1)
    marginal = jnp.cumsum(row_w) / total
    marginal = marginal.at[-1].set(1.0)
    safe_row = jnp.where(row_w > 0, row_w, 1.0)
    conditional = jnp.where(row_w[:, None] > 0, jnp.cumsum(weights, axis=1) / safe_row[:, None],
                            jnp.arange(1, W + 1, dtype=jnp.float32)[None, :] / W)
    conditional = conditional.at[:, -1].set(1.0)
    pdf = cell / total
    return jnp.concatenate([jnp.asarray(cos, jnp.float32), marginal, conditional.reshape(-1), pdf.reshape(-1)])
