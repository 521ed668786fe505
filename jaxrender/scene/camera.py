"""A loaded sensor (:class:`Camera`), its film and its reconstruction
filter as the kernels read them (``layout.CAMERA_*``, the film scalars and
the filter's of ``kernels/sensors/film.py``).

Filters are Mitsuba 3's (``kernels/sensors/filters.py``: a kind, its
radius and shape constants, and its values, written once for the kernels
and the host).

Example::

    radius, shape = filter_constants("gaussian", (("stddev", 0.5),))
    radius                              # 2.0: Mitsuba cuts the Gaussian at 4 stddev
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels.sensors import filters
from .errors import SceneError
from .sampler import SamplerSpec


def fov_key(sensor_key: str) -> str:
    """The field-of-view parameter of the sensor whose key is ``sensor_key``
    (or whose to_world parameter it is)."""
    return sensor_key.removesuffix(".to_world") + ".x_fov"


@dataclass
class Camera:
    """A sensor: its type (``kind``: ``kernels.sensors.TYPES``), transform,
    the tangents of half its field of view (an orthographic camera: the
    film's half extents before ``to_world``), clip distances, a thin lens's
    aperture radius and focus distance, film size, reconstruction filter (Mitsuba's
    name and shape parameters, e.g. ``(("stddev", 0.5),)``), the sampler's
    sample count (rounded as its type requires), seed, type and settings,
    the film's crop window (offset and size in pixels, default the whole
    film), whether it samples the border outside the crop window that its
    filter reaches, its pixel format and the participating medium it sits in."""
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
    crop_offset: tuple = (0, 0)
    crop_size: tuple | None = None
    sample_border: bool = False
    pixel_format: str = "rgb"
    sampler: SamplerSpec = SamplerSpec()
    kind: str = "perspective"
    aperture_radius: float = 0.0
    focus_distance: float = 0.0
    medium: int = -1          # the medium the sensor is in (SceneBuilder.media), -1: none

    def __post_init__(self):
        if self.crop_size is None:
            self.crop_size = (self.width, self.height)

    @property
    def x_fov(self) -> float:
        """The horizontal field of view in degrees (Mitsuba's ``x_fov``)."""
        return math.degrees(2.0 * math.atan(self.tan_x))

    def tangents(self, x_fov, xp=np):
        """(tan_x, tan_y) for a horizontal field of view ``x_fov`` (degrees),
        the film's aspect ratio kept."""
        tan_x = xp.tan(xp.asarray(x_fov, np.float32) * np.float32(math.pi / 360.0))
        return tan_x, tan_x * np.float32(self.tan_y / self.tan_x)

    @property
    def radius(self) -> float:
        return filter_constants(self.rfilter, self.rfilter_params)[0]

    @property
    def filter_spec(self) -> tuple:
        """(kind, radius, shape constants) of its filter (``filters.value``'s)."""
        return (self.rfilter, *filter_constants(self.rfilter, self.rfilter_params))

    @property
    def footprint(self) -> int:
        """Width of the square of pixels one sample is splatted into."""
        return 2 * math.ceil(self.radius - 0.5) + 1

    @property
    def border(self) -> int:
        """Pixels sampled outside the crop window on each side (Mitsuba's
        filter ``border_size`` when the film samples its border)."""
        return math.ceil(self.radius - 0.5 - 2e-4) if self.sample_border else 0

    @property
    def grid_size(self) -> tuple[int, int]:
        """(width, height) of the sample grid: the crop window and its border."""
        return self.crop_size[0] + 2 * self.border, self.crop_size[1] + 2 * self.border

    def film_inputs(self) -> dict:
        """The kernel inputs of its film and filter (``kernels/sensors/film.py``)."""
        radius, (a, b) = filter_constants(self.rfilter, self.rfilter_params)
        gw, gh = self.grid_size
        return {"filter_kind": np.int32(filters.KINDS.index(self.rfilter)), "filter_radius": np.float32(radius),
                "filter_a": np.float32(a), "filter_b": np.float32(b),
                "width": np.uint32(gw), "height": np.uint32(gh), "item_offset": np.uint32(0),
                "grid_x0": np.float32(self.crop_offset[0] - self.border),
                "grid_y0": np.float32(self.crop_offset[1] - self.border),
                "film_width": np.float32(self.width), "film_height": np.float32(self.height)}


def is_rigid(to_world) -> bool:
    """Whether a camera's 4x4 ``to_world`` is a rotation and translation
    (Mitsuba refuses scale factors in a perspective camera's transform)."""
    m = np.asarray(to_world, np.float64).reshape(4, 4)
    lin = m[:3, :3]
    return bool(np.all(np.isfinite(m)) and np.all(np.abs(lin @ lin.T - np.eye(3)) <= 1e-3))



@functools.lru_cache(maxsize=None)
def filter_constants(kind: str, params: tuple = ()) -> tuple[float, tuple[float, float]]:
    """(radius, shape constants) of the filter ``kind`` with Mitsuba's shape
    parameters ``params`` (``((name, value), ...)``): ``filters.constants``,
    a SceneError for a kind Mitsuba does not have."""
    if kind not in filters.KINDS:
        raise SceneError(f"rfilter {kind!r} is not supported ({', '.join(sorted(filters.KINDS))})")
    return filters.constants(kind, dict(params))


