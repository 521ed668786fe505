"""Participating media: what a medium is at a point, and the free-flight
sampling and transmittance estimates built on it (Mitsuba 3's ``Medium``).

A medium is a row of the ``medium_data`` buffer (``layout.MEDIUM_*``:
extinction ``sigma_t`` with Mitsuba's ``scale`` applied, single-scattering
albedo, the phase function's parameter, whether emitters are sampled from
it) and of ``medium_meta`` (its kind and phase function, indices of
``Structure.media`` / ``Structure.phases``). Shapes name the media on either
side (``prim_media``: interior, exterior per primitive; -1 none) and the
sensor the one it sits in (``camera_medium``).

Sampling follows Mitsuba: a distance is drawn with density
``m exp(-m t)`` for the majorant ``m`` of one colour channel chosen per
path; an interaction there has real (``sigma_s``), absorbing and null
(``sigma_n = majorant - sigma_t``) parts; spectral differences are carried
by the weight ``exp(-t majorant) / pdf``. A homogeneous medium's majorant is
its extinction, so it never has null interactions. A heterogeneous one
(Mitsuba's ``heterogeneous``) reads ``sigma_t`` and ``albedo`` from volumes
(``volume.lookup``; row: ``layout.MEDIUM_MAJORANT`` ...): its majorant is
``scale`` times a bound of its ``sigma_t`` grid (the largest value with
some headroom, or Mitsuba's ``max_value``), the same in every channel, and outside the world box of its ``sigma_t`` volume its
extinction is 0 (Mitsuba samples distances only inside that box; here the
path crosses the rest with null collisions of weight 1). Scenes without
heterogeneous media trace none of this.

Example::

    mv = read(ctx, medium)
    t = free_flight(mv.majorant, channel, u)
    sigma_s, sigma_n, sigma_t = coefficients(ctx, mv, p)
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .. import layout
from . import phase, volume

KINDS = ("homogeneous", "heterogeneous")

__all__ = ["KINDS", "MediumView", "coefficients", "free_flight", "heterogeneous", "reach", "pick", "read", "spectral_ratio", "phase", "volume"]


@dataclasses.dataclass
class MediumView:
    """A medium's row as the integrator uses it."""
    index: Any
    kind: Any            # an index of Structure.media
    phase: Any           # an index of Structure.phases
    g: Any               # the phase function's parameter
    sample_emitters: Any
    majorant: Vec        # an upper bound of sigma_t along any ray through it
    sigma_t: Vec         # homogeneous media: their extinction
    albedo: Vec          # homogeneous media: their albedo (heterogeneous: volumes, see coefficients)


def read(ctx, m) -> MediumView:
    """The row of medium ``m`` (>= 0)."""
    data, meta, S = ctx.b["medium_data"], ctx.b["medium_meta"], ctx.spectrum
    sigma_t = S.color(data.read(m, layout.MEDIUM_SIGMA_T + k) for k in range(3))
    if S.spectral:
        # a stored spectrum and its multiplier; a heterogeneous medium's majorant is a plain number
        sigma_t = sigma_t * data.read(m, layout.MEDIUM_EXTINCTION_SCALE)
        if "heterogeneous" in ctx.structure.media:
            hetero = meta.read(m, layout.MEDIUM_KIND) == ctx.structure.media.index("heterogeneous")
            sigma_t = ir.select(hetero, S.full(data.read(m, layout.MEDIUM_MAJORANT)), sigma_t)
    return MediumView(m, meta.read(m, layout.MEDIUM_KIND), meta.read(m, layout.MEDIUM_PHASE),
                      data.read(m, layout.MEDIUM_PHASE_G), data.read(m, layout.MEDIUM_SAMPLE_EMITTERS) > 0.5,
                      sigma_t, sigma_t, S.color(data.read(m, layout.MEDIUM_ALBEDO + k) for k in range(3)))


def coefficients(ctx, mv: MediumView, p: Vec) -> tuple[Vec, Vec, Vec]:
    """(sigma_s, sigma_n, sigma_t) of the medium at point ``p``."""
    S = ctx.spectrum
    kinds = ctx.structure.media

    def homogeneous():
        return mv.sigma_t * mv.albedo, S.full(0.0), mv.sigma_t

    if "heterogeneous" not in kinds:
        return homogeneous()
    if "homogeneous" not in kinds:
        return heterogeneous(ctx, mv, p)
    return ir.cond(mv.kind == kinds.index("heterogeneous"), lambda: heterogeneous(ctx, mv, p), homogeneous)


def heterogeneous(ctx, mv: MediumView, p: Vec) -> tuple[Vec, Vec, Vec]:
    """A heterogeneous medium's coefficients: its volumes' values at ``p``
    (extinction times scale; 0 outside the extinction volume's world box)."""
    data = ctx.b["medium_data"]
    tex_t = ir.cast(data.read(mv.index, layout.MEDIUM_SIGMA_T_VOLUME), "i32")
    tex_a = ir.cast(data.read(mv.index, layout.MEDIUM_ALBEDO_VOLUME), "i32")
    value, inside = volume.lookup(ctx.b, tex_t, p)
    # (spectral: extinction grids hold densities, one value; albedo volumes stored spectra)
    density = ctx.spectrum.full(value[0]) if ctx.spectrum.spectral else ctx.spectrum.color(value)
    sigma_t = density * ir.select(inside, data.read(mv.index, layout.MEDIUM_SCALE), 0.0)
    albedo = ctx.spectrum.color(volume.lookup(ctx.b, tex_a, p)[0])
    return sigma_t * albedo, mv.majorant - sigma_t, sigma_t


def reach(ctx, mv: MediumView, o: Vec, d: Vec):
    """How far along the ray (o, d) the medium can have extinction: for a
    heterogeneous medium, the distance to where the ray leaves its
    extinction volume's world box (0 if behind; Mitsuba samples distances
    only inside that box), else infinity. Beyond it every collision would
    be null with weight 1, so a flight stops there: a ray that slips out of
    its medium's boundary escapes instead of colliding forever."""
    kinds = ctx.structure.media
    if "heterogeneous" not in kinds:
        return ir.Float(float("inf"))

    def box():
        tex = ir.cast(ctx.b["medium_data"].read(mv.index, layout.MEDIUM_SIGMA_T_VOLUME), "i32")
        return volume.exit_distance(ctx.b, tex, o, d)

    if "homogeneous" not in kinds:
        return box()
    return ir.cond(mv.kind == kinds.index("heterogeneous"), box, lambda: ir.Float(float("inf")))


def pick(v: Vec, channel):
    """Component ``channel`` of a colour (Mitsuba's ``index_spectrum``)."""
    out = v[0]
    for i in range(1, len(v)):
        out = ir.select(channel == i, v[i], out)
    return out


def free_flight(majorant: Vec, channel, u):
    """A distance with density m exp(-m t), m the majorant's ``channel``
    component (infinite where it is 0)."""
    m = pick(majorant, channel)
    return ir.select(m > 0.0, -ir.log(1.0 - u) / ir.select(m > 0.0, m, 1.0), float("inf"))


def spectral_ratio(majorant: Vec, channel, t, collided) -> Vec:
    """exp(-t majorant) over the density of the sampled event: a collision
    at t (m_c exp(-m_c t)) or passing t (exp(-m_c t)), m_c the sampled
    channel's majorant."""
    tr = Vec(*(ir.select(m > 0.0, ir.exp(-t * m), 1.0) for m in majorant))
    pdf = pick(tr, channel) * ir.select(collided, pick(majorant, channel), 1.0)
    return tr * ir.select(pdf > 0.0, 1.0 / ir.select(pdf > 0.0, pdf, 1.0), 0.0)
