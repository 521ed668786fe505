"""The film: where a sample lands and which pixels it reaches.

Work items form the *sample grid*: one item per pixel of the film's crop
window, plus a border of pixels outside it when the film samples its
border (Mitsuba's ``sample_border``). Every sample of an item lies inside
the item's pixel, at a uniform position, and is splatted, as Mitsuba's
image block does, into each pixel whose centre is within the
reconstruction filter's radius, with the separable weight
``f(dx) f(dy)``. A kernel writes, per item, the weighted sums over its
samples for the ``footprint x footprint`` pixels around it; the image is
their overlap-added sum divided by the summed weights (``develop`` in
``primitives/film.py``), so it equals Mitsuba's film in expectation and
in its noise. With the box filter the footprint is the pixel itself and
every weight is one.

Buffers (``layout.scene_inputs``): ``filter_table`` holds the filter at
``n + 1`` evenly spaced distances from 0 to ``filter_radius``; ``width`` x
``height`` is the sample grid; ``grid_x0`` / ``grid_y0`` the film pixel of
its first item; ``film_width`` / ``film_height`` the whole film (the
sensor maps positions on it to rays).
"""
from __future__ import annotations

from ... import ir

# Random dimension of the position within the pixel (``Context.rand``).
POSITION_DIM = 0


def sample_offset(ctx, s):
    """Where sample ``s`` lies within the item's pixel, in [0, 1)^2."""
    u = ctx.rand(s, POSITION_DIM)
    return u[0], u[1]


def sample_position(ctx, s):
    """Sample ``s``'s position on the whole film in [0, 1]^2 (x right,
    y down), what the sensor turns into a ray."""
    b = ctx.b
    ux, uy = sample_offset(ctx, s)
    width = b["width"].value
    px = ir.cast(ctx.pixel % width, "f32") + b["grid_x0"].value
    py = ir.cast(ctx.pixel // width, "f32") + b["grid_y0"].value
    return (px + ux) / b["film_width"].value, (py + uy) / b["film_height"].value


def filter_weight(ctx, d):
    """The reconstruction filter at signed distance ``d`` (pixels): linear
    interpolation in ``filter_table``, zero beyond the radius."""
    table, radius = ctx.b["filter_table"], ctx.b["filter_radius"].value
    n = ir.cast(table.len, "i32") - 1
    a = ir.minimum(ir.abs(d) / radius, 1.0) * ir.cast(n, "f32")
    i = ir.minimum(ir.cast(ir.floor(a), "i32"), n - 1)
    w = ir.lerp(table[i], table[i + 1], a - ir.cast(i, "f32"))
    return ir.select(ir.abs(d) <= radius, w, 0.0)


def splat_weights(ctx, s, footprint: int):
    """The weights of sample ``s`` for the ``footprint`` x ``footprint``
    pixels centred on the item's pixel: a flat list, row (y) major."""
    return weights_at(ctx, *sample_offset(ctx, s), footprint)


def weights_at(ctx, ux, uy, footprint: int):
    """The splat weights of a sample at offset (ux, uy) within the item's
    pixel (``splat_weights``)."""
    n = footprint // 2
    # Pixel q = p + k - n has its centre at distance (k - n) + 0.5 - u from
    # the sample: the weights depend on the offset within the pixel only.
    wx = [filter_weight(ctx, (k - n) + 0.5 - ux) for k in range(footprint)]
    wy = [filter_weight(ctx, (k - n) + 0.5 - uy) for k in range(footprint)]
    return [y * x for y in wy for x in wx]
