"""Emitter plugins. Each type's id is its position in :data:`NAMES`
(``layout.META_TYPE`` of an ``emitter_meta`` row).

``area`` is an area light on a triangle mesh; ``area_sphere`` and
``area_disk`` are area lights on Mitsuba's analytic sphere and disk
(sampled as Mitsuba samples those shapes)."""
from __future__ import annotations

NAMES = ("area", "point", "directional", "constant", "spot", "envmap", "area_sphere", "area_disk")
TYPE_ID = {n: i for i, n in enumerate(NAMES)}
