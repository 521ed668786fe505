"""Developing the image kernels' splat blocks into an image.

A rendering kernel writes, per item of the sample grid, the weighted sums
of its samples for the ``footprint x footprint`` pixels around it
(``kernels/sensors/film.py``). :func:`overlap_add` sums those blocks into
the crop window's pixels, and :func:`develop` divides by the summed filter
weights, as Mitsuba's film does when it develops its image block.

The sum is :data:`overlap_add_p`, a linear primitive run by a small kernel
of its own; its transpose, :data:`block_gather_p`, gives each grid item the
cotangents of the pixels its block reached, which is what the adjoint
kernel receives. Written with JAX's pad and add instead, the sum is
footprint² operations that XLA takes about 0.2 s to compile for a 5 x 5
footprint (the gaussian filter's), twice per render and again for each
derivative: most of a first render's time when the kernels are on disk.

Example::

    geom = FilmGeometry(grid=(68, 68), border=2, footprint=5)
    image = develop(blocks, weights, geom, channels=3)     # (64, 64, 3)
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ..kernels.sensors import film as film_kernels
from ..kernels.sensors import filters
from .kernel_call import launch, prefetch


@dataclasses.dataclass(frozen=True)
class FilmGeometry:
    """The static shape of a render's film: the sample grid (height,
    width), its border around the crop window, the splat footprint and the
    reconstruction filter (kind, radius, shape constants: ``filters.value``'s)."""
    grid: tuple
    border: int = 0
    footprint: int = 1
    rfilter: tuple = ("box", 0.5, (0.0, 0.0))

    @property
    def crop(self) -> tuple:
        """(height, width) of the image."""
        return self.grid[0] - 2 * self.border, self.grid[1] - 2 * self.border

    @property
    def items(self) -> int:
        return self.grid[0] * self.grid[1]


def splat_canvas(blocks, rows: int, width: int, footprint: int, channels: int, *, by_rows: bool = False):
    """The blocks of ``rows`` x ``width`` grid items overlap-added onto a
    canvas of (rows + footprint - 1, width + footprint - 1, channels):
    entry (dy, dx) of item (r, c) lands on [r + dy, c + dx], i.e. grid
    pixel (r, c) is canvas pixel (r + footprint // 2, c + footprint // 2).
    ``by_rows``: blocks sharded by rows across devices; the sum is then
    written with JAX's pad and add, which XLA partitions by rows too,
    exchanging only the footprint's reach across band edges (the kernel
    would be launched whole, on gathered blocks)."""
    k = footprint
    x = jnp.reshape(blocks, (rows * width, k * k * channels))
    if k == 1:
        return x.reshape(rows, width, channels)
    if not by_rows:
        return overlap_add_p.bind(x, rows=rows, width=width, footprint=k)
    x = x.reshape(rows, width, k, k, channels)
    out = None
    for dy in range(k):
        for dx in range(k):
            part = jnp.pad(x[:, :, dy, dx], ((dy, k - 1 - dy), (dx, k - 1 - dx), (0, 0)))
            out = part if out is None else out + part
    return out


# ---------------------------------------------------------------------------
# The overlap-add and its transpose as primitives
# ---------------------------------------------------------------------------
# Operands carry any leading batch dimensions (vmap over views): blocks
# (*batch, rows * width, footprint² * channels), canvases
# (*batch, rows + footprint - 1, width + footprint - 1, channels).

overlap_add_p = Primitive("jaxrender_overlap_add")
block_gather_p = Primitive("jaxrender_block_gather")


def _channels(blocks_width: int, footprint: int) -> int:
    return blocks_width // (footprint * footprint)


def canvas_shape(rows: int, width: int, footprint: int) -> tuple:
    """(height, width) of the canvas the blocks of ``rows`` x ``width``
    grid items with a ``footprint`` are overlap-added onto."""
    return rows + footprint - 1, width + footprint - 1


def _overlap_add_abstract(blocks, *, rows, width, footprint):
    shape = blocks.shape[:-2] + canvas_shape(rows, width, footprint) + (_channels(blocks.shape[-1], footprint),)
    return jax.core.ShapedArray(shape, blocks.dtype)


def _block_gather_abstract(canvas, *, rows, width, footprint):
    shape = canvas.shape[:-3] + (rows * width, footprint * footprint * canvas.shape[-1])
    return jax.core.ShapedArray(shape, canvas.dtype)


def _over_batch(fn, x, batch_rank: int):
    for _ in range(batch_rank):
        fn = jax.vmap(fn)
    return fn(x)


# Both kernels run one lane per packet: a lane's reads are a few adjacent
# floats, and neighbouring lanes' are a block apart, so SIMD packets only add
# gathers (256 x 256, 5 x 5, RGB: overlap-add 3.4 ms with one lane, 4.6 ms with
# eight; the gather 2.0 against 4.5 ms).
def _overlap_add_launch(blocks, *, rows, width, footprint):
    channels = _channels(blocks.shape[-1], footprint)
    h, w = canvas_shape(rows, width, footprint)
    kernel = film_kernels.overlap_add_kernel(footprint, channels)

    def one(b):
        canvas = launch(kernel, (h * w,), blocks=b, grid_rows=rows, grid_columns=width,
                        preferred_lanes=1)["canvas"]
        return canvas.reshape(h, w, channels)

    return _over_batch(one, blocks, blocks.ndim - 2)


def _block_gather_launch(canvas, *, rows, width, footprint):
    channels = canvas.shape[-1]
    kernel = film_kernels.block_gather_kernel(footprint, channels)

    def one(c):
        return launch(kernel, (rows * width,), canvas=c.reshape(-1, channels), grid_rows=rows, grid_columns=width,
                      preferred_lanes=1)["block"]

    return _over_batch(one, canvas, canvas.ndim - 3)


def prefetch_kernels(footprint: int, channels: int, transpose: bool = False) -> None:
    """Start compiling, in the background, the kernels that develop an
    unbatched image of ``channels`` (and its weights), or with
    ``transpose`` the gather of its cotangents: they are small, but a new
    kernel cache would otherwise compile them after the render's kernel."""
    if footprint == 1:
        return
    if transpose:
        prefetch(film_kernels.block_gather_kernel(footprint, channels), preferred_lanes=1)
    else:
        for c in dict.fromkeys((channels, 1)):
            prefetch(film_kernels.overlap_add_kernel(footprint, c), preferred_lanes=1)


def _linear_rules(prim, abstract, run, transpose_prim):
    prim.def_abstract_eval(abstract)
    prim.def_impl(lambda *args, **params: dispatch.apply_primitive(prim, *args, **params))
    mlir.register_lowering(prim, mlir.lower_fun(run, multiple_results=False))
    ad.deflinear2(prim, lambda ct, _, **params: [transpose_prim.bind(ct, **params)])

    def batch(args, dims, **params):
        (x,), (d,) = args, dims
        return prim.bind(jnp.moveaxis(x, d, 0), **params), 0

    batching.primitive_batchers[prim] = batch


_linear_rules(overlap_add_p, _overlap_add_abstract, _overlap_add_launch, block_gather_p)
_linear_rules(block_gather_p, _block_gather_abstract, _block_gather_launch, overlap_add_p)


def crop_canvas(canvas, geom: FilmGeometry):
    """The crop window's pixels of a canvas of the whole sample grid."""
    (h, w), start = geom.crop, geom.footprint // 2 + geom.border
    return canvas[start:start + h, start:start + w]


def overlap_add(blocks, geom: FilmGeometry, channels: int):
    """Sum the per-item blocks (items, footprint² x channels) into the crop
    window's pixels: (height, width, channels)."""
    return crop_canvas(splat_canvas(blocks, *geom.grid, geom.footprint, channels), geom)


def develop(blocks, weights, geom: FilmGeometry, channels: int, rows: int | None = None, extra=None,
            extra_weights=None):
    """The image: the overlap-added sample sums over the overlap-added
    filter weights (``weights``: a scalar, every pixel's total weight, or
    the weight kernel's blocks (items, footprint²)). A pixel that no sample
    reached with a nonzero weight is zero, as in Mitsuba. ``rows``: grid
    rows the blocks cover when the launches were devices' equal bands of
    rows (and ran past the grid's end); the rows past it are dropped.
    ``extra``: a canvas of the whole grid (``splat_canvas``'s shape) over
    ``extra_weights`` (a scalar or the crop window's), added to the image
    (the boundary term of camera and geometry derivatives)."""
    (gh, gw), k = geom.grid, geom.footprint
    by_rows, rows = rows is not None, gh if rows is None else rows

    def total(x, width: int):
        if rows != gh:
            x = jnp.where((jnp.arange(rows) < gh)[:, None], x.reshape(rows, gw * x.shape[-1]), 0.0)
        return crop_canvas(splat_canvas(x, rows, gw, k, width, by_rows=by_rows), geom)

    w = weights if jnp.ndim(weights) == 0 else total(weights, 1)
    image = normalize(total(blocks, channels), w)
    return image if extra is None else image + normalize(crop_canvas(extra, geom), extra_weights)


@functools.lru_cache(maxsize=None)
def expected_weights(geom: FilmGeometry, quadrature: int = 2048) -> np.ndarray:
    """Each crop pixel's expected summed filter weight of one sample per
    grid pixel, uniform in it: (height, width, 1) float32. (Mitsuba's
    filters are separable: per axis, the filter's mean over each
    neighbouring pixel of the grid, summed; ``geom.rfilter`` is evaluated
    as the kernels evaluate it, ``filters.value``, here in double.)

    The boundary term of camera and geometry derivatives is an integral
    along curves of the film, estimated by its own samples: over the
    expected weight it is the derivative of the image the render converges
    to; over the weight its samples happened to bring (``develop``'s
    ``weights``) it took their noise, about 6% per pixel at 16 spp with the
    gaussian filter, which outweighed the rest of a silhouette's estimate."""
    kind, radius, shape = geom.rfilter
    reach = geom.footprint // 2
    u = (np.arange(quadrature) + 0.5) / quadrature
    # (a sample of the pixel d before has its distance to this pixel's centre d + 0.5 - u)
    mean = {d: float(np.mean(filters.value(kind, radius, shape, d + 0.5 - u))) for d in range(-reach, reach + 1)}

    def axis(size: int, grid: int):
        at = np.arange(size) + geom.border
        return sum(np.where((at - d >= 0) & (at - d < grid), m, 0.0) for d, m in mean.items())

    (h, w), (gh, gw) = geom.crop, geom.grid
    out = (axis(h, gh)[:, None] * axis(w, gw)[None, :])[..., None].astype(np.float32)
    out.flags.writeable = False
    return out


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
