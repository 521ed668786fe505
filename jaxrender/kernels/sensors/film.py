"""The film: where on the image a sample lands.

Pixel reconstruction filters are importance sampled: the offset of each
sample within the filter's support is drawn from the filter (tables
``filter_icdf`` / ``filter_cdf`` / ``filter_radius`` made by the scene
builder), so every sample has weight one; in expectation this equals
Mitsuba's weighted splatting. An image is then the plain mean of its
samples, and an adjoint gives each sample the cotangent of its own pixel
over spp.
"""
from __future__ import annotations

from ... import ir


def _lookup_icdf(table, u):
    """Linear interpolation in an inverse-CDF table sampled at uniform u."""
    n = ir.cast(table.len, "f32")
    x = u * (n - 1.0)
    i = ir.cast(ir.floor(x), "i32")
    f = x - ir.floor(x)
    return ir.lerp(table[i], table[i + 1], f)


def _lookup_cdf(table, radius, x):
    n = ir.cast(table.len, "f32")
    g = ir.clamp((x + radius) / (2.0 * radius), 0.0, 1.0) * (n - 1.0)
    i = ir.cast(ir.floor(g), "i32")
    return ir.lerp(table[i], table[i + 1], g - ir.floor(g))


def filter_offset(icdf, cdf, radius, u, pixel, size):
    """Offset from the pixel centre drawn from the filter restricted to the
    image (Mitsuba splats only samples taken inside the image, so a border
    pixel averages over the part of its filter that lies inside)."""
    lo = ir.maximum(-radius, -(pixel + 0.5))
    hi = ir.minimum(radius, size - pixel - 0.5)
    c0 = _lookup_cdf(cdf, radius, lo)
    c1 = _lookup_cdf(cdf, radius, hi)
    return ir.clamp(_lookup_icdf(icdf, c0 + u * (c1 - c0)), lo, hi)


def sample_position(ctx, u):
    """The sample's position on the film in [0, 1]^2 (x right, y down) for
    the work item's pixel, from two uniforms ``u``."""
    b = ctx.b
    fw, fh = ir.cast(b["width"].value, "f32"), ir.cast(b["height"].value, "f32")
    px, py = ir.cast(ctx.pixel % b["width"].value, "f32"), ir.cast(ctx.pixel // b["width"].value, "f32")
    radius = b["filter_radius"].value
    ox = filter_offset(b["filter_icdf"], b["filter_cdf"], radius, u[0], px, fw)
    oy = filter_offset(b["filter_icdf"], b["filter_cdf"], radius, u[1], py, fh)
    return (px + 0.5 + ox) / fw, (py + 0.5 + oy) / fh
