"""Volume lookups (Mitsuba 3.9.1's ``gridvolume`` / ``constvolume`` through
Dr.Jit's 3D texture): a volume is a block of ``texels`` (``tex_meta`` row:
offset, x / y / z resolution in width, height, ``TEX_DEPTH``, channels 1 or
3, wrap mode, filter) starting with ``layout.VOLUME_HEADER`` floats: its
world-to-local transform and the world box of its unit cube
(``scene/volumes.py``). Values follow at ``[(z * height + y) * width + x]``.

Trilinear filtering interpolates between voxel centres (local ``p * res -
0.5``), nearest takes ``floor(p * res)``; integer coordinates wrap per the
texture's mode (clamp by default), as in ``kernels.textures``. A constant
volume is a 1 x 1 x 1 grid.

Example::

    value, inside = lookup(ctx.b, tex, p)     # a colour; inside its world box
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from .. import layout
from ..textures import FILTER_NEAREST, reduce_coord, wrap_index


def lookup(b: dict, tex, p: Vec) -> tuple[Vec, object]:
    """(value (3 channels; one channel repeated), whether the world point
    ``p`` lies in the volume's world box) of volume ``tex``."""
    meta, texels = b["tex_meta"], b["texels"]
    offset = meta.read(tex, layout.TEX_OFFSET)
    res = [meta.read(tex, layout.TEX_WIDTH), meta.read(tex, layout.TEX_HEIGHT), meta.read(tex, layout.TEX_DEPTH)]
    channels, wrap = meta.read(tex, layout.TEX_CHANNELS), meta.read(tex, layout.TEX_WRAP)
    nearest = meta.read(tex, layout.TEX_FILTER) == FILTER_NEAREST
    h = [texels.read(offset + k) for k in range(layout.VOLUME_HEADER)]
    m = h[layout.VOLUME_TO_LOCAL:layout.VOLUME_TO_LOCAL + 12]
    lo, hi = h[layout.VOLUME_BBOX_MIN:layout.VOLUME_BBOX_MIN + 3], h[layout.VOLUME_BBOX_MAX:layout.VOLUME_BBOX_MAX + 3]
    inside = ir.Bool(True)
    for k in range(3):
        inside = inside & (p[k] >= lo[k]) & (p[k] <= hi[k])
    local = [m[4 * r] * p[0] + m[4 * r + 1] * p[1] + m[4 * r + 2] * p[2] + m[4 * r + 3] for r in range(3)]
    first, weight = [], []
    for k in range(3):
        u = reduce_coord(local[k], wrap) * ir.cast(res[k], "f32")
        c = ir.select(nearest, ir.floor(u), u - 0.5)
        f = ir.floor(c)
        first.append(ir.cast(f, "i32"))
        weight.append(c - f)                     # (0 for nearest: its centre)
    xs = [wrap_index(first[0] + d, res[0], wrap) for d in (0, 1)]
    ys = [wrap_index(first[1] + d, res[1], wrap) * res[0] for d in (0, 1)]
    zs = [wrap_index(first[2] + d, res[2], wrap) * (res[0] * res[1]) for d in (0, 1)]
    data = offset + layout.VOLUME_HEADER
    last = channels - 1

    def voxel(index) -> Vec:
        base = data + index * channels
        return Vec(texels.read(base), texels.read(base + ir.minimum(1, last)), texels.read(base + ir.minimum(2, last)))

    def lerp(a: Vec, b_: Vec, w) -> Vec:
        return a * (1.0 - w) + b_ * w

    planes = []
    for z in zs:
        rows = [lerp(voxel(z + y + xs[0]), voxel(z + y + xs[1]), weight[0]) for y in ys]
        planes.append(lerp(rows[0], rows[1], weight[1]))
    return lerp(planes[0], planes[1], weight[2]), inside


def exit_distance(b: dict, tex, o: Vec, d: Vec):
    """The distance along the ray (o, d) to where it leaves volume
    ``tex``'s world box (slab test; at least 0)."""
    meta, texels = b["tex_meta"], b["texels"]
    offset = meta.read(tex, layout.TEX_OFFSET)
    far = ir.Float(float("inf"))
    for k in range(3):
        lo = texels.read(offset + layout.VOLUME_BBOX_MIN + k)
        hi = texels.read(offset + layout.VOLUME_BBOX_MAX + k)
        moving = d[k] != 0.0
        inv = 1.0 / ir.select(moving, d[k], 1.0)
        t = ir.maximum((lo - o[k]) * inv, (hi - o[k]) * inv)
        far = ir.select(moving, ir.minimum(far, t), far)
    return ir.maximum(far, 0.0)
