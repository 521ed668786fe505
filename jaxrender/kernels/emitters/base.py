"""What an emitter plugin declares (see the package docstring)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

INF = float("inf")


@dataclasses.dataclass
class DirectionSample:
    """A direction sampled towards an emitter from a reference point; no
    radiance is read here (that is the differentiable part, in shading)."""
    w: Any            # unit direction towards the emitter (world)
    dist: Any         # distance to the sampled point (inf: at infinity)
    factor: Any       # radiance scale from geometry (1/dist^2 for point lights, 0 behind an area light)
    pdf: Any          # solid-angle density given the emitter (0 for delta emitters)
    delta: Any        # a delta emitter (point, spot, directional)


@dataclasses.dataclass(frozen=True)
class EmitterType:
    """One emitter type.

    ``sample(ctx, sel, ref, u)``: a :class:`DirectionSample` towards emitter
    ``sel`` from point ``ref``, u = (u0, u1, u2) uniform: u0 a 1D sample (to
    choose a part, e.g. a triangle), (u1, u2) a 2D one (a point on it),
    stratified jointly by the samplers that stratify. ``pdf(ctx, sel, si)``
    (surface emitters): the solid-angle density of hitting it along the ray
    of interaction ``si``, 0 to use the area density
    (``emitter_geom``'s area); None: always the area density.
    ``environment``: seen by rays that leave the scene; then
    ``pdf_direction(ctx, sel, w)`` is its density for a direction w and
    ``eval(ctx, sel, w)`` its radiance before the emitter's scale (None: 1).
    ``used(structure)``: whether a kernel of that scene structure needs its
    code (an envmap only where the scene has one)."""
    name: str
    sample: Callable
    pdf: Callable | None = None
    environment: bool = False
    pdf_direction: Callable | None = None
    eval: Callable | None = None
    used: Callable = dataclasses.field(default=lambda structure: True)
