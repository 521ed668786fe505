"""Developing the image kernels' splat blocks into an image, in JAX.

A rendering kernel writes, per item of the sample grid, the weighted sums
of its samples for the ``footprint x footprint`` pixels around it
(``kernels/sensors/film.py``). :func:`overlap_add` sums those blocks into
the crop window's pixels, and :func:`develop` divides by the summed filter
weights, as Mitsuba's film does when it develops its image block. Both
are plain linear JAX, so JAX transposes them for the adjoint: the
cotangent each kernel item receives is the gathered cotangents of the
pixels its samples reached.

Example::

    geom = FilmGeometry(grid=(68, 68), border=2, footprint=5)
    image = develop(blocks, weights, geom, channels=3)     # (64, 64, 3)
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class FilmGeometry:
    """The static shape of a render's film: the sample grid (height,
    width), its border around the crop window and the splat footprint."""
    grid: tuple
    border: int = 0
    footprint: int = 1

    @property
    def crop(self) -> tuple:
        """(height, width) of the image."""
        return self.grid[0] - 2 * self.border, self.grid[1] - 2 * self.border

    @property
    def items(self) -> int:
        return self.grid[0] * self.grid[1]


def splat_canvas(blocks, rows: int, width: int, footprint: int, channels: int):
    """The blocks of ``rows`` x ``width`` grid items overlap-added onto a
    canvas of (rows + footprint - 1, width + footprint - 1, channels):
    entry (dy, dx) of item (r, c) lands on [r + dy, c + dx], i.e. grid
    pixel (r, c) is canvas pixel (r + footprint // 2, c + footprint // 2)."""
    k = footprint
    x = blocks.reshape(rows, width, k, k, channels)
    if k == 1:
        return x[:, :, 0, 0]
    out = None
    for dy in range(k):
        for dx in range(k):
            part = jnp.pad(x[:, :, dy, dx], ((dy, k - 1 - dy), (dx, k - 1 - dx), (0, 0)))
            out = part if out is None else out + part
    return out


def crop_canvas(canvas, geom: FilmGeometry):
    """The crop window's pixels of a canvas of the whole sample grid."""
    (h, w), start = geom.crop, geom.footprint // 2 + geom.border
    return canvas[start:start + h, start:start + w]


def overlap_add(blocks, geom: FilmGeometry, channels: int):
    """Sum the per-item blocks (items, footprint² x channels) into the crop
    window's pixels: (height, width, channels)."""
    return crop_canvas(splat_canvas(blocks, *geom.grid, geom.footprint, channels), geom)


def develop(blocks, weights, geom: FilmGeometry, channels: int, rows: int | None = None, extra=None):
    """The image: the overlap-added sample sums over the overlap-added
    filter weights (``weights``: a scalar, every pixel's total weight, or
    the weight kernel's blocks (items, footprint²)). A pixel that no sample
    reached with a nonzero weight is zero, as in Mitsuba. ``rows``: grid
    rows the blocks cover when launches ran past the grid's end (devices'
    equal bands); the rows past it are dropped. ``extra``: a canvas of the
    whole grid (``splat_canvas``'s shape) added to the sums before they are
    divided (the camera's boundary term)."""
    (gh, gw), k = geom.grid, geom.footprint
    rows = gh if rows is None else rows

    def total(x, width: int):
        if rows != gh:
            x = jnp.where((jnp.arange(rows) < gh)[:, None], x.reshape(rows, gw * x.shape[-1]), 0.0)
        return crop_canvas(splat_canvas(x, rows, gw, k, width), geom)

    w = weights if jnp.ndim(weights) == 0 else total(weights, 1)
    sums = total(blocks, channels)
    return normalize(sums if extra is None else sums + crop_canvas(extra, geom), w)


def normalize(total, weights):
    """Summed sample values over their summed weights (a scalar or per
    pixel), zero where no weight arrived."""
    if jnp.ndim(weights) == 0:
        return total / weights
    return jnp.where(weights != 0, total / jnp.where(weights != 0, weights, 1.0), 0.0)


# Linear sRGB (Rec. 709 primaries, D65) to CIE XYZ; its middle row is luminance.
RGB_TO_XYZ = ((0.412453, 0.357580, 0.180423),
              (0.212671, 0.715160, 0.072169),
              (0.019334, 0.119193, 0.950227))

# What each of Mitsuba's pixel formats holds, from an RGB(A) image.
PIXEL_FORMATS = ("rgb", "rgba", "luminance", "luminance_alpha", "xyz", "xyza")


def has_alpha(pixel_format: str) -> bool:
    return pixel_format in ("rgba", "luminance_alpha", "xyza")


def to_pixel_format(image, pixel_format: str):
    """An RGB image (with alpha last where the format has alpha) in
    ``pixel_format``'s channels, as Mitsuba's film develops it."""
    if pixel_format not in PIXEL_FORMATS:
        raise ValueError(f"unknown pixel format {pixel_format!r}")
    if pixel_format.startswith("rgb"):
        return image
    rgb, rest = image[..., :3], image[..., 3:]
    m = jnp.asarray(RGB_TO_XYZ, image.dtype)
    color = rgb @ m[1:2].T if pixel_format.startswith("luminance") else rgb @ m.T
    return jnp.concatenate([color, rest], axis=-1) if has_alpha(pixel_format) else color
