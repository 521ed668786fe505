"""Texture data for the scene builder: image files and arrays, the
:class:`TextureSpec` of each texture (how the kernels read it) and the
``envmap`` emitter's sampling tables. The plugins that make them are in
``loaders/textures.py`` (``bitmap``, ``checkerboard``) and
``loaders/emitters.py`` (``envmap``). Kernel side:
``jaxrender.kernels.textures`` / ``envmap``.

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
from . import variants
from .arrays import array_module
from .errors import SceneError


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


def image_from_array(value: Any, where: str, raw: bool) -> np.ndarray:
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


@dataclass
class TextureSpec:
    """One texture of the scene: which parameters hold its values and how
    the kernel reads them (a ``tex_meta`` row and a ``tex_uv`` row)."""
    kind: int                 # kernels.textures.BITMAP / CHECKERBOARD / ENVMAP / DATA (a BSDF ARRAY) / VOLUME
    keys: tuple               # parameter keys whose values, flattened in order, are its texels
    width: int
    height: int
    channels: int
    wrap: int = ktex.WRAP_REPEAT
    filter: int = ktex.FILTER_BILINEAR
    to_uv: Any = None         # (2, 3)
    plugin: str | None = None  # a texture plugin's name (kernels.textures.PLUGINS); its kind is set per scene
    depth: int = 1            # a VOLUME's z resolution
    header: Any = None        # a VOLUME's constant floats before its values (scene.volumes)
    fixed: Any = None         # values no parameter holds (keys empty), derived from parameters by the scene
                              # builder (and by Scene.sunsky_buffers when a render changes them): a sunsky's
                              # sampling map (an ENVMAP's (H, W + 2, C) data), its complex sun's table (DATA)

    @property
    def size(self) -> int:
        return self.width * self.height * self.depth * self.channels + (0 if self.header is None else len(self.header))

    def texels(self, p: Mapping[str, Any], xp=None):
        """Its block of the ``texels`` buffer, computed with ``xp`` (numpy or
        jax.numpy; by default jax.numpy when a value is traced, so
        gradients flow)."""
        xp = xp or array_module(*(p[k] for k in self.keys))
        if self.kind == ktex.ENVMAP:
            return xp.asarray(self.envmap_data(p), np.float32)[:, 1:self.width + 1, :].reshape(-1)
        if self.fixed is not None:
            return np.asarray(self.fixed, np.float32).reshape(-1)
        blocks = [xp.asarray(p[k], np.float32).reshape(-1) for k in self.keys]
        return xp.concatenate(blocks if self.header is None else [self.header] + blocks)

    def envmap_data(self, p: Mapping[str, Any]):
        """An ENVMAP's (H, W + 2, C) data: its parameter's value, or its fixed data."""
        return self.fixed if self.fixed is not None else p[self.keys[0]]


def envmap_tables(tex: TextureSpec, data, xp=None):
    """The ``env_dist`` buffer (see ``kernels.envmap``) of an envmap whose
    parameter value is ``data`` (H, W + 2, 3), built from the current values
    with ``xp`` (numpy or jax.numpy; by default jax.numpy when ``data`` is
    traced); not differentiated."""
    xp = xp or array_module(data)
    f32 = np.float32
    W, H = tex.width, tex.height
    img = xp.asarray(data, f32)
    if xp is not np:
        import jax
        img = jax.lax.stop_gradient(img)
    img = img[:, 1:W + 1, :]
    lum = xp.maximum(variants.texel_luminance(img, xp), f32(0.0))
    lum = xp.where(xp.isfinite(lum), lum, f32(0.0))
    sin_rows = np.sin(np.pi * np.arange(H) / (H - 1)).astype(f32)

    def patch_means(w):
        rows = w[:-1] + w[1:]
        return f32(0.25) * (rows + xp.roll(rows, -1, axis=1))            # (H - 1, W)

    w = lum * sin_rows[:, None]
    # A black map: sample as if it were uniformly bright.
    w = xp.where(xp.sum(patch_means(w)) > 0, w, xp.broadcast_to(sin_rows[:, None], w.shape))
    cell = patch_means(w)
    total = xp.sum(cell)
    row_w = xp.sum(cell, axis=1)
    marginal = xp.cumsum(row_w) / total
    marginal = xp.concatenate([marginal[:-1], np.ones(1, f32)])
    safe_row = xp.where(row_w > 0, row_w, f32(1.0))
    conditional = xp.where(row_w[:, None] > 0, xp.cumsum(cell, axis=1) / safe_row[:, None],
                           np.arange(1, W + 1, dtype=f32)[None, :] / f32(W))
    conditional = xp.concatenate([conditional[:, :-1], np.ones((H - 1, 1), f32)], axis=1)
    # 1 / (Z 2 pi^2), Z the integral of the bilinear f over the unit square.
    norm = (W * (H - 1)) / (total * f32(2.0 * math.pi ** 2))
    return xp.concatenate([xp.reshape(norm, (1,)).astype(f32), marginal, conditional.reshape(-1),
                           w.reshape(-1), cdf_guides(marginal[None, :], xp).reshape(-1),
                           cdf_guides(conditional, xp).reshape(-1)]).astype(f32)


def cdf_guides(cdfs, xp):
    """Guide tables of the CDFs in the rows of ``cdfs`` (R, n): row r's
    entry j in 0..n counts the CDF's values with ``ceil(c * n) <= j``,
    about those <= j / n, so that the entry a uniform u selects (the first
    with c > u) lies between guide[j - 1] and guide[j + 2] for
    j = floor(u n), whatever the rounding (``kernels.sampling.sample_cdf``
    searches only there). As float32 (exact: n < 2^24)."""
    R, n = cdfs.shape
    bucket = xp.clip(xp.ceil(cdfs * np.float32(n)), 0, n).astype(np.int32)        # (R, n)
    flat = (bucket + (n + 1) * xp.arange(R, dtype=np.int32)[:, None]).reshape(-1)
    if xp is np:
        counts = np.bincount(flat, minlength=R * (n + 1))
    else:
        counts = xp.zeros(R * (n + 1), np.int32).at[flat].add(1)
    return xp.cumsum(counts.reshape(R, n + 1), axis=1).astype(np.float32)
