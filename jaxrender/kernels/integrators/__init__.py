"""Integrators: one module each, on the framework of ``base.py``.

:data:`BY_TYPE` maps a Mitsuba integrator type to a factory that builds the
trace-time integrator object from the scene's integrator settings
(``Scene.integrator``); runtime values (``max_depth`` ...) come from that
object's ``settings``. Adding an integrator: its module (a subclass of
``Integrator`` or ``ReplayIntegrator``) plus an entry here.

Example::

    integrator = create({"type": "path", "max_depth": 8})
    kernel = integrator.primal_kernel(scene.structure)
    scalars = integrator.settings({"type": "path", "max_depth": 8})
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .aov import AovIntegrator, parse_aovs
from .base import ADJOINT_METHODS, Integrator, ReplayIntegrator
from .path import PathIntegrator
from .stokes import STOKES_NAMES, StokesIntegrator, StokesVolpathIntegrator
from .volpath import VolpathIntegrator

BY_TYPE: dict[str, Callable[[Mapping[str, Any]], Integrator]] = {
    "path": lambda props: PathIntegrator(short_paths=0 <= int(props.get("max_depth", -1)) <= 2),
    "direct": lambda props: PathIntegrator(short_paths=True),   # two vertices, no roulette (PathIntegrator.settings)
    # Mitsuba's path replay integrators: the path tracer's images (their settings: PathIntegrator.settings)
    "prb": lambda props: BY_TYPE["path"]({"max_depth": 6, **props}),
    "prb_projective": lambda props: BY_TYPE["path"]({"max_depth": 6, **props}),
    "direct_projective": lambda props: BY_TYPE["direct"](props),
    "volpath": lambda props: VolpathIntegrator(),
    "prbvolpath": lambda props: VolpathIntegrator(),  # the same kernels (Mitsuba's defaults: settings)
    "aov": lambda props: AovIntegrator(tuple(t for _, t in parse_aovs(props["aovs"]))),
    # (the nested integrator's settings: StokesFilm.settings)
    "stokes": lambda props: (StokesVolpathIntegrator() if props["nested"]["type"] in ("volpath", "prbvolpath")
                             else StokesIntegrator()),
}


def create(props: Mapping[str, Any]) -> Integrator:
    """The integrator object for settings ``props`` (``props["type"]``: a Mitsuba type name)."""
    kind = props.get("type")
    if kind not in BY_TYPE:
        raise ValueError(f"integrator {kind!r} is not supported ({', '.join(BY_TYPE)})")
    return BY_TYPE[kind](props)


__all__ = ["ADJOINT_METHODS", "AovIntegrator", "BY_TYPE", "Integrator", "PathIntegrator", "ReplayIntegrator",
           "STOKES_NAMES", "StokesIntegrator", "StokesVolpathIntegrator", "VolpathIntegrator", "create", "parse_aovs"]
