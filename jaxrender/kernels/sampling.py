"""Sample warps (square -> domain) and their densities, as Mitsuba 3 defines them.

Every ``square_to_*`` maps uniform samples on [0, 1)^2 to the domain; the
matching ``*_pdf`` is its density with respect to the domain's measure
(solid angle for directions, area for surfaces). Written against the kernel
IR only. Example::

    wo = square_to_cosine_hemisphere(u)         # u: a Vec of 2 Floats
    pdf = square_to_cosine_hemisphere_pdf(wo)
"""
from __future__ import annotations

import math

from .. import ir
from ..ir import Vec

INV_PI = 1.0 / math.pi
INV_TWO_PI = 0.5 / math.pi
INV_FOUR_PI = 0.25 / math.pi
PI_OVER_4 = math.pi / 4.0
PI_OVER_2 = math.pi / 2.0


def square_to_uniform_disk_concentric(u: Vec) -> Vec:
    """Shirley-Chiu concentric map of the unit square onto the unit disk."""
    x = 2.0 * u.x - 1.0
    y = 2.0 * u.y - 1.0
    is_zero = (x == 0.0) & (y == 0.0)
    quadrant_1_or_3 = ir.abs(x) < ir.abs(y)
    r = ir.select(quadrant_1_or_3, y, x)
    rp = ir.select(quadrant_1_or_3, x, y)
    phi = PI_OVER_4 * rp / ir.select(is_zero, 1.0, r)
    phi = ir.select(quadrant_1_or_3, PI_OVER_2 - phi, phi)
    phi = ir.select(is_zero, 0.0, phi)
    return Vec(r * ir.cos(phi), r * ir.sin(phi))


def square_to_cosine_hemisphere(u: Vec) -> Vec:
    """Cosine-weighted direction about +z (Malley's method)."""
    p = square_to_uniform_disk_concentric(u)
    z = ir.safe_sqrt(1.0 - p.x * p.x - p.y * p.y)
    return Vec(p.x, p.y, z)


def square_to_cosine_hemisphere_pdf(v: Vec):
    return ir.select(v.z > 0.0, INV_PI * v.z, 0.0)


def square_to_uniform_sphere(u: Vec) -> Vec:
    z = 1.0 - 2.0 * u.y
    r = ir.safe_sqrt(1.0 - z * z)
    phi = 2.0 * math.pi * u.x
    return Vec(r * ir.cos(phi), r * ir.sin(phi), z)


def square_to_uniform_sphere_pdf(v: Vec):
    return ir.Float(INV_FOUR_PI)


def square_to_uniform_triangle(u: Vec) -> Vec:
    """Barycentrics (b1, b2) uniform over a triangle (Mitsuba's mapping)."""
    t = ir.safe_sqrt(1.0 - u.x)
    return Vec(1.0 - t, t * u.y)


def coordinate_system(n: Vec) -> tuple[Vec, Vec]:
    """Two tangents completing ``n`` to an orthonormal frame (Duff et al. 2017)."""
    sign = ir.copysign(1.0, n.z)
    a = -1.0 / (sign + n.z)
    b = n.x * n.y * a
    s = Vec(ir.fma(n.x * n.x, a * sign, 1.0), sign * b, -sign * n.x)
    t = Vec(b, ir.fma(n.y * n.y, a, sign), -n.y)
    return s, t


class Frame:
    """An orthonormal frame; ``to_local`` / ``to_world`` change basis."""

    def __init__(self, n: Vec):
        self.n = n
        self.s, self.t = coordinate_system(n)

    @classmethod
    def along(cls, n: Vec, tangent: Vec) -> "Frame":
        """Mitsuba's shading frame (``initialize_sh_frame``): the first axis
        is ``tangent`` made orthogonal to ``n``; where that vanishes (a zero
        or normal tangent), the frame of ``n`` alone."""
        frame = cls(n)
        s = tangent - n * ir.dot(n, tangent)
        l2 = ir.dot(s, s)
        ok = l2 > 0.0
        s = s * ir.rsqrt(ir.select(ok, l2, 1.0))
        frame.s = Vec(*(ir.select(ok, a, b) for a, b in zip(s, frame.s)))
        frame.t = Vec(*(ir.select(ok, a, b) for a, b in zip(ir.cross(n, frame.s), frame.t)))
        return frame

    # (a pytree: kernel state, ir.detach)
    def tree_flatten(self):
        return (self.n, self.s, self.t), None

    @classmethod
    def tree_unflatten(cls, aux, children) -> "Frame":
        frame = cls.__new__(cls)
        frame.n, frame.s, frame.t = children
        return frame

    def to_local(self, v: Vec) -> Vec:
        return Vec(ir.dot(v, self.s), ir.dot(v, self.t), ir.dot(v, self.n))

    def to_world(self, v: Vec) -> Vec:
        return self.s * v.x + self.t * v.y + self.n * v.z


def sample_cdf(cdf, start, count, u, guide=None):
    """Smallest i in [start, start + count) with cdf[i] > u: the entry of a
    discrete distribution (its CDF stored in ``cdf[start:start + count]``,
    the last entry 1 > u) that u selects. Binary search; with ``guide``, the
    offset in ``cdf`` of the CDF's guide table (``scene.textures.cdf_guides``,
    count + 1 entries), only over the few entries it leaves: about three
    steps instead of log2(count)."""
    end = start + count - 1
    if guide is not None:
        j = ir.clamp(ir.cast(ir.floor(u * ir.cast(count, "f32")), "i32"), 0, count - 1)
        lo = ir.cast(cdf[guide + ir.maximum(j - 1, 0)], "i32")
        hi = ir.cast(cdf[guide + ir.minimum(j + 2, count)], "i32")
        start, end = start + ir.clamp(lo, 0, count - 1), start + ir.clamp(hi, 0, count - 1)

    def step(s):
        lo, hi = s
        mid = (lo + hi) // 2
        right = cdf[mid] <= u
        return ir.select(right, mid + 1, lo), ir.select(right, hi, mid)

    lo, _ = ir.while_loop(lambda s: s[0] < s[1], step, (start, end))
    return lo


def sample_lengths(cdf, u):
    """A record drawn by its share of the cumulative lengths ``cdf`` (a
    whole buffer, the last entry the total) with the uniform ``u``, and
    where along it: (index, position in [0, 1], its length, the total)."""
    n = ir.cast(cdf.len, "i32")
    total = cdf[n - 1]
    target = u * total
    i = sample_cdf(cdf, ir.Int(0), n, target)
    before = ir.select(i > 0, cdf[ir.maximum(i - 1, 0)], 0.0)
    length = cdf[i] - before
    tau = ir.minimum(ir.maximum((target - before) / ir.select(length > 0.0, length, 1.0), 0.0), 1.0)
    return i, tau, length, total


def mis_weight(pdf_a, pdf_b):
    """Power heuristic weight of a strategy with density ``pdf_a`` against one with ``pdf_b``."""
    a2 = pdf_a * pdf_a
    return ir.select(pdf_a > 0.0, a2 / (a2 + pdf_b * pdf_b), 0.0)
