"""Shape plugins. Triangles are every mesh's primitive; Mitsuba's analytic
shapes each have a kind id, their position in :data:`ANALYTIC`
(``layout.SHAPE_KIND`` of a ``shape_data`` row)."""
from __future__ import annotations

ANALYTIC = ("sphere", "disk")
KIND = {n: i for i, n in enumerate(ANALYTIC)}
