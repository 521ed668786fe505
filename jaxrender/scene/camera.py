"""A loaded sensor (:class:`Camera`) and the tables of its pixel filter,
as the kernels read them (``layout.CAMERA_*``, ``filter_icdf`` /
``filter_cdf`` / ``filter_radius``).

Example::

    tables = filter_tables("gaussian", stddev=0.5)
    float(tables["filter_radius"])      # 2.0: Mitsuba cuts the Gaussian at 4 stddev
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import SceneError
from .sampler import SamplerSpec


@dataclass
class Camera:
    """A perspective sensor: its transform, the tangents of half its field
    of view, clip distances, film size, reconstruction filter (Mitsuba's
    name and shape parameters, e.g. ``(("stddev", 0.5),)``), the sampler's
    sample count (rounded as its type requires) and seed, and its type and
    settings."""
    to_world: np.ndarray
    tan_x: float
    tan_y: float
    near_clip: float
    far_clip: float
    width: int
    height: int
    rfilter: str
    spp: int
    seed: int = 0
    rfilter_params: tuple = ()
    sampler: SamplerSpec = SamplerSpec()

    def filter_tables(self) -> dict:
        """The kernel buffers of its reconstruction filter."""
        return filter_tables(self.rfilter, **dict(self.rfilter_params))


@functools.lru_cache(maxsize=None)
def filter_tables(kind: str, n: int = 1025, *, radius: float = 1.0, stddev: float = 0.5) -> dict:
    """Tables of a separable reconstruction filter (Mitsuba's definitions:
    ``box`` of radius 1/2, ``tent`` of ``radius``, ``gaussian`` of
    ``stddev`` cut off at 4 stddev): its inverse CDF at n uniform points of
    [0, 1] (offsets in pixels), its CDF at n uniform points of [-r, r] and
    its radius r."""
    if kind == "box":
        r, f = 0.5, lambda x: np.ones_like(x)
    elif kind == "tent":
        r, f = radius, lambda x: np.maximum(0.0, 1.0 - np.abs(x / radius))
    elif kind == "gaussian":
        sigma = stddev
        r = 4.0 * sigma
        f = lambda x: np.maximum(0.0, np.exp(-x * x / (2 * sigma * sigma)) - np.exp(-r * r / (2 * sigma * sigma)))
    else:
        raise SceneError(f"rfilter {kind!r} is not supported (box, tent, gaussian)")
    x = np.linspace(-r, r, 16385)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f(x[1:]) + f(x[:-1])) * np.diff(x))])
    cdf /= cdf[-1]
    return {"filter_icdf": np.interp(np.linspace(0, 1, n), cdf, x).astype(np.float32),
            "filter_cdf": np.interp(np.linspace(-r, r, n), x, cdf).astype(np.float32),
            "filter_radius": np.float32(r)}
