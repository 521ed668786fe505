"""Texture lookups (Mitsuba's ``bitmap`` and ``checkerboard``) and the
overriding of BSDF row values by textures at a hit point.

All textures live in one flat float buffer, ``texels`` (the only one of
these buffers that is differentiable); ``tex_meta`` holds one i32 row per
texture and ``tex_uv`` its ``to_uv`` transform:

* ``tex_meta`` row: offset of the first texel value in ``texels``, width,
  height, channels (1 or 3), kind (:data:`BITMAP`, :data:`CHECKERBOARD`,
  :data:`ENVMAP`, :data:`DATA`, :data:`VOLUME`), wrap mode, filter, depth
  (1; a volume's z resolution). Texel (x, y) channel c is
  ``texels[offset + (y * width + x) * channels + c]``; row y = 0 is the
  image's first (top) row, at v = 0, as in Mitsuba. A checkerboard is the
  2 x 2 image (color0, color1; color1, color0) read with nearest filtering
  and repeat wrapping, which is Mitsuba's rule (color0 where both
  fractional coordinates lie on the same side of 1/2).
* ``tex_uv`` row: the 2 x 3 affine ``to_uv`` matrix, row-major.

A BSDF with textured parameters owns a contiguous range of ``tex_slots``
rows (``bsdf_tex`` row: first slot, count); a slot replaces ``width``
consecutive values of the BSDF's parameter row, starting at ``start``, by
the texture's value at the hit's UV (``tex_slots`` row: start, width,
texture, luminance flag). A one-channel texture fills every component; a
three-channel texture read for a scalar parameter gives its luminance
(Mitsuba's ``eval_1``). So BSDF modules never see textures.

Lookups follow Mitsuba 3 (``bitmap.cpp`` / Dr.Jit's texture): bilinear
interpolation between texel centres (``p = uv * res - 0.5``), nearest as
``floor(uv * res)``, and integer wrap modes repeat / mirror / clamp.

Texture plugins written in the kernel language (a user's, through
``jaxrender.plugins.register_texture``) are :class:`TextureType` s: their
parameters are stored one after another in their block of ``texels`` and
their ``eval(view, uv)`` runs where a lookup would; a scene's kernels
dispatch over the ones it uses (``Structure.textures``), whose kind ids are
``CUSTOM + position``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .. import ir
from ..ir import Vec
from . import layout
from .params import ARRAY, COLOR, FLOAT, ArrayView, add_plugin

# What a spectral colour slot textured at a hit holds first: -(texture + 2)
# times this (kernels/spectrum.py decodes it).
TEXTURED_UNIT = 1e30

# DATA: a BSDF's ARRAY parameter (bsdfs/base.py), read by index, never looked up at a UV;
# VOLUME: a medium's 3D grid (media/volume.py; its z resolution in layout.TEX_DEPTH).
BITMAP, CHECKERBOARD, ENVMAP, DATA, VOLUME = 0, 1, 2, 3, 4
CUSTOM = 16          # kind id of a scene's first texture plugin
WRAP_REPEAT, WRAP_MIRROR, WRAP_CLAMP = 0, 1, 2
FILTER_BILINEAR, FILTER_NEAREST = 0, 1
# Mitsuba's luminance (linear sRGB / Rec. 709 primaries).
LUMINANCE = (0.212671, 0.715160, 0.072169)


class Texel:
    """Kernel-side handle of one texture's meta row."""

    def __init__(self, b: dict, tex):
        meta = b["tex_meta"]
        self.b = b
        self.tex = tex
        self.offset = meta.read(tex, layout.TEX_OFFSET)
        self.width = meta.read(tex, layout.TEX_WIDTH)
        self.height = meta.read(tex, layout.TEX_HEIGHT)
        self.channels = meta.read(tex, layout.TEX_CHANNELS)
        self.kind = meta.read(tex, layout.TEX_KIND)
        self.wrap = meta.read(tex, layout.TEX_WRAP)
        self.filter = meta.read(tex, layout.TEX_FILTER)

    def fetch(self, index, n: int = 3) -> Vec:
        """``n`` values of texel ``index`` (row-major); a one-channel texture
        repeats its value."""
        base = self.offset + index * self.channels
        last = self.channels - 1
        t = self.b["texels"]
        return Vec(*(t.read(base + ir.minimum(k, last)) for k in range(n)))


def luminance(v: Vec):
    return LUMINANCE[0] * v.x + LUMINANCE[1] * v.y + LUMINANCE[2] * v.z


def wrap_index(i, n, mode):
    """Integer texel coordinate ``i`` wrapped into [0, n) (Dr.Jit's rules)."""
    q = i // n                      # floor division
    m = i - q * n                   # in [0, n)
    mirrored = ir.select((q & 1) == 0, m, n - 1 - m)
    clamped = ir.clamp(i, 0, n - 1)
    return ir.select(mode == WRAP_REPEAT, m, ir.select(mode == WRAP_MIRROR, mirrored, clamped))


def reduce_coord(u, mode):
    """``u`` moved by whole periods of the wrap mode into a small range (so
    that texel coordinates stay far from integer overflow); NaN becomes -1."""
    r = ir.select(mode == WRAP_REPEAT, u - ir.floor(u), u - 2.0 * ir.floor(0.5 * u))
    r = ir.select(mode == WRAP_CLAMP, u, r)
    return ir.clamp(r, -1.0, 3.0)


def corners(t: Texel, px, py, wrap_x, wrap_y, n: int = 3) -> tuple:
    """The four texels (``n`` values each) around continuous texel
    coordinates (px, py) (texel centres at integers; integer coordinates
    wrapped per axis) and the weights of the second ones: (v00, v10, v01,
    v11, wx, wy)."""
    fx, fy = ir.floor(px), ir.floor(py)
    wx, wy = px - fx, py - fy
    x0, y0 = ir.cast(fx, "i32"), ir.cast(fy, "i32")
    xa, xb = wrap_index(x0, t.width, wrap_x), wrap_index(x0 + 1, t.width, wrap_x)
    ya, yb = wrap_index(y0, t.height, wrap_y) * t.width, wrap_index(y0 + 1, t.height, wrap_y) * t.width
    v00, v10 = t.fetch(ya + xa, n), t.fetch(ya + xb, n)
    v01, v11 = t.fetch(yb + xa, n), t.fetch(yb + xb, n)
    return v00, v10, v01, v11, wx, wy


def bilinear(t: Texel, px, py, wrap_x, wrap_y) -> Vec:
    """Bilinear interpolation at continuous texel coordinates (px, py)
    (texel centres at integers), integer coordinates wrapped per axis."""
    v00, v10, v01, v11, wx, wy = corners(t, px, py, wrap_x, wrap_y)
    top = v00 * (1.0 - wx) + v10 * wx
    bottom = v01 * (1.0 - wx) + v11 * wx
    return top * (1.0 - wy) + bottom * wy


def _transform_uv(b: dict, tex, uv: Vec) -> Vec:
    m = [b["tex_uv"].read(tex, k) for k in range(6)]
    return Vec(m[0] * uv.x + m[1] * uv.y + m[2], m[3] * uv.x + m[4] * uv.y + m[5])


@dataclasses.dataclass(frozen=True)
class TextureType:
    """A texture plugin: ``params`` (COLOR, FLOAT or ARRAY ``params.Param``)
    are its Mitsuba parameters, ``eval(view, uv) -> Vec`` its value (of
    ``channels`` components, 1 or 3) at texture coordinates ``uv`` (after
    ``to_uv``); ``view.<name>`` reads a parameter (a Vec, a Float or an
    ``ArrayView``)."""
    name: str
    params: tuple
    eval: Callable
    channels: int = 3

    def __post_init__(self):
        bad = [p.name for p in self.params if p.kind not in (COLOR, FLOAT, ARRAY)]
        if bad:
            raise ValueError(f"texture {self.name!r}: parameters {bad} must be COLOR, FLOAT or ARRAY")
        if self.channels not in (1, 3):
            raise ValueError(f"texture {self.name!r}: channels must be 1 or 3, got {self.channels}")

    def offset(self, name: str) -> int:
        """Where parameter ``name`` starts in the texture's block of texels."""
        start = 0
        for p in self.params:
            if p.name == name:
                return start
            start += p.size or p.width()
        raise KeyError(f"texture {self.name!r} has no parameter {name!r}")

    @property
    def size(self) -> int:
        return sum(p.size or p.width() for p in self.params)


class TextureView:
    """A texture plugin's parameters in its block of ``texels``."""

    def __init__(self, t: TextureType, texel: Texel):
        self._t, self._texel = t, texel

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        p = next((q for q in self._t.params if q.name == name), None)
        if p is None:
            raise AttributeError(f"texture {self._t.name!r} has no parameter {name!r}")
        texels, start = self._texel.b["texels"], self._texel.offset + self._t.offset(name)
        if p.kind == ARRAY:
            return ArrayView(texels, start, p.size)
        if p.kind == COLOR:
            return Vec(*(texels.read(start + k) for k in range(3)))
        return texels.read(start)


PLUGINS: dict[str, TextureType] = {}
# Registration hooks (e.g. clearing traced-kernel caches when a type is replaced).
_on_change: list = []
BUILTIN = ("bitmap", "checkerboard")


def register(t: TextureType, replace: bool = False) -> TextureType:
    """Add a texture plugin (a user's); a name again needs ``replace=True``."""
    if not isinstance(t, TextureType):
        raise TypeError(f"register expects a TextureType, got {type(t).__name__}")
    add_plugin(PLUGINS, t.name, t, "texture", BUILTIN, replace, _on_change)
    return t


def _plugin_eval(t: TextureType, texel: Texel, uv: Vec) -> Vec:
    v = t.eval(TextureView(t, texel), uv)
    v = Vec(*v) if isinstance(v, (tuple, list, Vec)) else Vec(v)
    if len(v) != t.channels:
        raise ValueError(f"texture {t.name!r}: eval returned {len(v)} values, its channels are {t.channels}")
    return v if t.channels == 3 else Vec(v[0], v[0], v[0])


def texture_eval(b: dict, tex, uv: Vec, plugins: tuple = ()) -> Vec:
    """Value of texture ``tex`` at surface ``uv`` (before ``to_uv``);
    ``plugins``: the texture plugins the scene uses (``Structure.textures``).

    One code path for every image kind, so that each lookup site stays
    small: a nearest lookup is a bilinear one at the texel's centre (weights
    0), and a checkerboard is a 2 x 2 nearest, repeating image of its
    colours."""
    t = Texel(b, tex)
    st = _transform_uv(b, tex, uv)
    if not plugins:
        return _image_lookup(t, st)
    branches = [lambda: _image_lookup(t, st)] + [lambda p=p: _plugin_eval(PLUGINS[p], t, st) for p in plugins]
    return ir.dispatch(ir.maximum(t.kind - (CUSTOM - 1), 0), branches)


def _image_lookup(t: Texel, st: Vec) -> Vec:
    fw, fh = ir.cast(t.width, "f32"), ir.cast(t.height, "f32")
    u, v = reduce_coord(st.x, t.wrap), reduce_coord(st.y, t.wrap)
    nearest = t.filter == FILTER_NEAREST
    px = ir.select(nearest, ir.floor(u * fw), u * fw - 0.5)
    py = ir.select(nearest, ir.floor(v * fh), v * fh - 0.5)
    return bilinear(t, px, py, t.wrap, t.wrap)


def spectral_lookup(b: dict, tex, uv: Vec, decode: Callable) -> Vec:
    """The spectrum of image texture ``tex`` (bitmap, checkerboard) at
    surface ``uv`` whose texels are stored spectral colours: ``decode``
    (stored colour -> spectrum) of each texel around the point, then
    interpolated (Mitsuba's spectral bitmap)."""
    t = Texel(b, tex)
    st = _transform_uv(b, tex, uv)
    fw, fh = ir.cast(t.width, "f32"), ir.cast(t.height, "f32")
    u, v = reduce_coord(st.x, t.wrap), reduce_coord(st.y, t.wrap)
    nearest = t.filter == FILTER_NEAREST
    px = ir.select(nearest, ir.floor(u * fw), u * fw - 0.5)
    py = ir.select(nearest, ir.floor(v * fh), v * fh - 0.5)
    v00, v10, v01, v11, wx, wy = (decode(x) if isinstance(x, Vec) else x for x in corners(t, px, py, t.wrap, t.wrap))
    return (v00 * (1.0 - wx) + v10 * wx) * (1.0 - wy) + (v01 * (1.0 - wx) + v11 * wx) * wy


def gradient(b: dict, tex, uv: Vec) -> tuple:
    """Mitsuba's ``eval_1_grad`` of bitmap ``tex`` at surface ``uv``: the
    derivatives in u and v of its bilinear interpolant (of the luminance of
    a three-channel image), the texel-space slopes taken back through
    ``to_uv`` by its transpose and then scaled by the resolution, as Mitsuba
    orders them; 0 for nearest filtering. Only bumpmap asks for it, so
    other scenes' kernels do not contain it."""
    t = Texel(b, tex)
    m = [b["tex_uv"].read(tex, k) for k in range(6)]
    st = Vec(m[0] * uv.x + m[1] * uv.y + m[2], m[3] * uv.x + m[4] * uv.y + m[5])
    fw, fh = ir.cast(t.width, "f32"), ir.cast(t.height, "f32")
    px = reduce_coord(st.x, t.wrap) * fw - 0.5
    py = reduce_coord(st.y, t.wrap) * fh - 0.5
    v00, v10, v01, v11, wx, wy = corners(t, px, py, t.wrap, t.wrap)
    mono = t.channels == 1
    f00, f10, f01, f11 = (ir.select(mono, v.x, luminance(v)) for v in (v00, v10, v01, v11))
    dx = (1.0 - wy) * (f10 - f00) + wy * (f11 - f01)
    dy = (1.0 - wx) * (f01 - f00) + wx * (f11 - f10)
    linear = t.filter != FILTER_NEAREST
    return (ir.select(linear, (m[0] * dx + m[3] * dy) * fw, 0.0),
            ir.select(linear, (m[1] * dx + m[4] * dy) * fh, 0.0))


def hit_uv(b: dict, tri, b1, b2) -> Vec:
    """Surface UV of a hit on triangle ``tri`` at barycentrics (b1, b2)."""
    q = [b["tri_uv"].read(tri, k) for k in range(6)]
    b0 = 1.0 - b1 - b2
    return Vec(q[0] * b0 + q[2] * b1 + q[4] * b2, q[1] * b0 + q[3] * b1 + q[5] * b2)


def apply_textures(b: dict, bsdf, row: list, tri, b1, b2, active=True, max_slots: int = layout.MAX_TEX_SLOTS,
                   plugins: tuple = (), spectral: bool = False) -> list:
    """``row`` (the BSDF's parameter values) with its textured slots (at most
    ``max_slots``, a trace-time bound) replaced by texture lookups at the
    hit (``plugins``: the texture plugins the scene uses). Costs one read and
    a branch for a BSDF without textures. No loops, so reverse mode can go
    through it. ``spectral``: a colour slot gets (tag, u, v) instead, the
    texture and point its spectrum is decoded from (``spectrum.SpectrumType.color``)."""
    first = b["bsdf_tex"].read(bsdf, layout.BSDF_TEX_FIRST)
    count = b["bsdf_tex"].read(bsdf, layout.BSDF_TEX_COUNT)
    n = len(row) - 1                   # the last value (twosided flag) is never textured
    slots = b["tex_slots"]

    def textured():
        uv = hit_uv(b, tri, b1, b2)
        vals = list(row[:n])
        for k in range(max_slots):
            s = first + k
            live = count > k

            def evaluated(s=s):
                v = texture_eval(b, slots.read(s, layout.SLOT_TEXTURE), uv, plugins)
                lum = luminance(v)
                return ir.select(slots.read(s, layout.SLOT_LUMINANCE) != 0, Vec(lum, lum, lum), v)

            def lookup(s=s, evaluated=evaluated):
                if not spectral:
                    return evaluated()
                tex = slots.read(s, layout.SLOT_TEXTURE)
                colour = (slots.read(s, layout.SLOT_WIDTH) == 3) & (slots.read(s, layout.SLOT_LUMINANCE) == 0)
                tag = (ir.cast(tex, "f32") + 2.0) * -TEXTURED_UNIT
                return ir.cond(colour, lambda: Vec(tag, uv.x, uv.y), evaluated)
            v = ir.cond(live, lookup, lambda: Vec(0.0, 0.0, 0.0))
            start, width = slots.read(s, layout.SLOT_START), ir.select(live, slots.read(s, layout.SLOT_WIDTH), 0)
            for j in range(n):
                d = j - start
                val = ir.select(d == 0, v.x, ir.select(d == 1, v.y, v.z))
                vals[j] = ir.select((d >= 0) & (d < width), val, vals[j])
        return tuple(vals)

    new = ir.cond((count > 0) & active, textured, lambda: tuple(row[:n]))
    return list(new) + [row[n]]
