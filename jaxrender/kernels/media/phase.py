"""Phase functions: Mitsuba's ``isotropic`` and ``hg`` (Henyey-Greenstein).

A phase function is a :class:`PhaseType`: ``eval(g, wi, wo)`` its value
for light leaving towards ``wo`` (world directions; ``wi`` points back
along the arriving ray, Mitsuba's ``mi.wi``), which is also the density
``sample`` draws ``wo`` with, and ``sample(g, wi, u)`` -> (wo, weight,
pdf) from a 2D sample ``u``. ``g`` is the medium row's phase parameter
(``layout.MEDIUM_PHASE_G``; unused by isotropic). A phase type's id is its
position in the scene's ``Structure.phases``; :func:`eval` and
:func:`sample` dispatch over them.

Example::

    wo, weight, pdf = sample(ctx, kind, g, wi, Vec(u0, u1))
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from ... import ir
from ...ir import Vec
from ..sampling import Frame, square_to_uniform_sphere

INV_FOUR_PI = 1.0 / (4.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class PhaseType:
    name: str           # Mitsuba's plugin name
    eval: Callable      # (g, wi, wo) -> value (= pdf)
    sample: Callable    # (g, wi, u: Vec) -> (wo, weight, pdf)
    params: tuple = ()  # Mitsuba properties it reads (each a float stored in the row's phase slot)


def _iso_eval(g, wi: Vec, wo: Vec):
    return ir.Float(INV_FOUR_PI)


def _iso_sample(g, wi: Vec, u: Vec):
    return square_to_uniform_sphere(u), ir.Float(1.0), ir.Float(INV_FOUR_PI)


def hg_value(g, cos_theta):
    """The Henyey-Greenstein density for the cosine between wo and wi."""
    temp = 1.0 + g * g + 2.0 * g * cos_theta
    return INV_FOUR_PI * (1.0 - g * g) / (temp * ir.sqrt(temp))


def _hg_eval(g, wi: Vec, wo: Vec):
    return hg_value(g, ir.dot(wo, wi))


def _hg_sample(g, wi: Vec, u: Vec):
    # Inverting the CDF in the cosine to the forward direction -wi (uniform
    # where g is too close to 0 for the formula).
    sqr = (1.0 - g * g) / (1.0 - g + 2.0 * g * u.x)
    small = ir.abs(g) < 1e-7
    cos_t = ir.select(small, 1.0 - 2.0 * u.x, (1.0 + g * g - sqr * sqr) / (2.0 * ir.select(small, 1.0, g)))
    sin_t = ir.safe_sqrt(1.0 - cos_t * cos_t)
    phi = 2.0 * math.pi * u.y
    wo = Frame(wi).to_world(Vec(sin_t * ir.cos(phi), sin_t * ir.sin(phi), -cos_t))
    return wo, ir.Float(1.0), hg_value(g, -cos_t)


TYPES = {t.name: t for t in (PhaseType("isotropic", _iso_eval, _iso_sample),
                             PhaseType("hg", _hg_eval, _hg_sample, ("g",)))}
NAMES = tuple(TYPES)


def ordered(names) -> tuple:
    """``names`` in registry order, without repeats (a scene's dispatch order)."""
    unknown = set(names) - set(TYPES)
    if unknown:
        raise ValueError(f"unknown phase function(s) {sorted(unknown)}")
    return tuple(n for n in NAMES if n in set(names))


def eval(ctx, kind, g, wi: Vec, wo: Vec):  # noqa: A001 - the phase interface name
    """Value (= pdf) of phase function ``kind`` (an index of ``Structure.phases``)."""
    return ir.dispatch(kind, [lambda t=TYPES[n]: t.eval(g, wi, wo) for n in ctx.structure.phases])


def sample(ctx, kind, g, wi: Vec, u: Vec):
    """(wo, weight, pdf) of phase function ``kind`` for the 2D sample ``u``."""
    return ir.dispatch(kind, [lambda t=TYPES[n]: t.sample(g, wi, u) for n in ctx.structure.phases])
