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

Buffers (``layout.scene_inputs``): ``filter_kind`` (an index of
``filters.KINDS``), ``filter_radius`` and the shape constants ``filter_a``,
``filter_b`` (``filters.constants``) name the filter; ``width`` x
``height`` is the sample grid; ``grid_x0`` / ``grid_y0`` the film pixel of
its first item; ``film_width`` / ``film_height`` the whole film (the
sensor maps positions on it to rays).
"""
from __future__ import annotations

import functools

from ... import ir
from . import filters

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


def filter_weights(ctx, distances: list) -> list:
    """The reconstruction filter at each signed distance (pixels) of
    ``distances``: ``filters.value`` of the film's filter, whose kind the
    kernel branches on once for the list (every lane alike)."""
    b = ctx.b
    radius, shape = b["filter_radius"].value, (b["filter_a"].value, b["filter_b"].value)
    return list(ir.dispatch(b["filter_kind"].value, [
        (lambda kind=kind: [filters.value(kind, radius, shape, d, filters.IR) for d in distances])
        for kind in filters.KINDS]))


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
    w = filter_weights(ctx, [(k - n) + 0.5 - u for u in (ux, uy) for k in range(footprint)])
    wx, wy = w[:footprint], w[footprint:]
    return [y * x for y in wy for x in wx]


# ---------------------------------------------------------------------------
# Developing: the splat blocks summed onto the canvas, and the transpose
# ---------------------------------------------------------------------------
# A grid of ``rows`` x ``width`` items, each with a block of ``footprint``²
# entries of ``channels`` values (row-major: entry (dy, dx) at
# ``(dy * footprint + dx) * channels``), covers a canvas of
# (rows + footprint - 1) x (width + footprint - 1) pixels: entry (dy, dx) of
# item (r, c) lands on canvas pixel (r + dy, c + dx). Both kernels read
# where the other writes, so neither needs atomics, and each canvas pixel
# sums its entries in (dy, dx) row-major order whatever the thread count.

def _grid_inputs():
    return {"grid_rows": ir.Scalar("i32"), "grid_columns": ir.Scalar("i32")}


@functools.lru_cache(maxsize=None)
def overlap_add_kernel(footprint: int, channels: int) -> ir.Kernel:
    """One work item per canvas pixel (row-major): its ``channels`` values,
    the sum of the block entries that land on it. ``blocks``: one row per
    grid item, ``footprint``² x ``channels`` floats."""
    k = footprint

    def body(blocks, grid_rows, grid_columns):
        h, w = grid_rows.value, grid_columns.value
        pixel = ir.cast(ir.item_index(), "i32")
        y, x = pixel // (w + k - 1), pixel % (w + k - 1)

        def total(checked: bool):
            acc = [ir.Float(0.0)] * channels
            for dy in range(k):
                for dx in range(k):
                    r, c = y - dy, x - dx
                    item = r * w + c
                    if checked:
                        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
                        item = ir.select(inside, item, 0)
                    for ch in range(channels):
                        v = blocks.read(item, (dy * k + dx) * channels + ch)
                        acc[ch] = acc[ch] + (ir.select(inside, v, 0.0) if checked else v)
            return acc

        # Pixels whose taps all land on grid items (most of them) skip the
        # bounds checks.
        interior = (y >= k - 1) & (y < h) & (x >= k - 1) & (x < w)
        return list(ir.cond(interior, lambda: total(False), lambda: total(True)))

    return ir.trace(body, {"blocks": ir.In("f32", (k * k * channels,)), **_grid_inputs()},
                    {"canvas": ir.Out("f32", (channels,))}, name=f"film_overlap_add_{k}x{k}x{channels}")


@functools.lru_cache(maxsize=None)
def block_gather_kernel(footprint: int, channels: int) -> ir.Kernel:
    """The transpose of :func:`overlap_add_kernel`: one work item per grid
    item, its block's entries taken from the canvas pixels they land on.
    ``canvas``: one row per canvas pixel (row-major) of ``channels`` floats."""
    k = footprint

    def body(canvas, grid_rows, grid_columns):
        w = grid_columns.value
        item = ir.cast(ir.item_index(), "i32")
        r, c = item // w, item % w
        return [v for dy in range(k) for dx in range(k) for v in canvas[(r + dy) * (w + k - 1) + c + dx]]

    return ir.trace(body, {"canvas": ir.In("f32", (channels,)), **_grid_inputs()},
                    {"block": ir.Out("f32", (k * k * channels,))}, name=f"film_block_gather_{k}x{k}x{channels}")
