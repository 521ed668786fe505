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


def overlap_add(blocks, geom: FilmGeometry, channels: int):
    """Sum the per-item blocks (items, footprint² x channels) into the crop
    window's pixels: (height, width, channels)."""
    k, (gh, gw), (h, w) = geom.footprint, geom.grid, geom.crop
    x = blocks.reshape(gh, gw, k, k, channels)
    if k == 1 and geom.border == 0:
        return x[:, :, 0, 0]
    n = k // 2
    # Block entry (dy, dx) of grid item g lands on crop pixel
    # g - border + (dy - n); with the grid padded by n, pixel r reads padded
    # row r + border + 2n - dy.
    xp = jnp.pad(x, ((n, n), (n, n), (0, 0), (0, 0), (0, 0)))
    out = None
    for dy in range(k):
        for dx in range(k):
            r0, c0 = geom.border + 2 * n - dy, geom.border + 2 * n - dx
            part = xp[r0:r0 + h, c0:c0 + w, dy, dx]
            out = part if out is None else out + part
    return out


def develop(blocks, weights, geom: FilmGeometry, channels: int):
    """The image: the overlap-added sample sums over the overlap-added
    filter weights (``weights``: a scalar, every pixel's total weight, or
    the weight kernel's blocks (items, footprint²)). A pixel that no sample
    reached with a nonzero weight is zero, as in Mitsuba."""
    total = overlap_add(blocks, geom, channels)
    if jnp.ndim(weights) == 0:
        return total / weights
    w = overlap_add(weights, geom, 1)
    return jnp.where(w != 0, total / jnp.where(w != 0, w, 1.0), 0.0)


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
