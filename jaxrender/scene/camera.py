"""A loaded sensor (:class:`Camera`), its film and its reconstruction
filter as the kernels read them (``layout.CAMERA_*``, the film scalars and
``filter_table`` of ``kernels/sensors/film.py``).

Filters are Mitsuba 3's (``FILTERS``: name -> the filter's radius and its
values from its shape parameters), tabulated at ``TABLE_SIZE`` + 1
distances from 0 to the radius.

Example::

    table, radius = filter_table("gaussian", (("stddev", 0.5),))
    radius                              # 2.0: Mitsuba cuts the Gaussian at 4 stddev
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

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
        return filter_table(self.rfilter, self.rfilter_params)[1]

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
        table, radius = filter_table(self.rfilter, self.rfilter_params)
        gw, gh = self.grid_size
        return {"filter_table": table, "filter_radius": np.float32(radius),
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


TABLE_SIZE = 1024


def _box(params):
    return 0.5, lambda x: np.ones_like(x)


def _tent(params):
    r = params["radius"]
    return r, lambda x: np.maximum(0.0, 1.0 - np.abs(x) / r)


def _gaussian(params):
    sigma = params["stddev"]
    r = 4.0 * sigma
    # Shifted down so that it reaches zero at the cut-off radius.
    return r, lambda x: np.maximum(0.0, np.exp(-x * x / (2 * sigma * sigma)) - np.exp(-r * r / (2 * sigma * sigma)))


def _lanczos(params):
    lobes = float(params["lobes"])
    return lobes, lambda x: np.sinc(x) * np.sinc(x / lobes)


def _cubic(b: float, c: float):
    """Mitchell and Netravali's two-parameter cubic family, radius 2."""
    def f(x):
        x = np.abs(x)
        near = (12 - 9 * b - 6 * c) * x ** 3 + (-18 + 12 * b + 6 * c) * x ** 2 + (6 - 2 * b)
        far = (-b - 6 * c) * x ** 3 + (6 * b + 30 * c) * x ** 2 + (-12 * b - 48 * c) * x + (8 * b + 24 * c)
        return np.where(x < 1, near, np.where(x < 2, far, 0.0)) / 6.0
    return 2.0, f


def _mitchell(params):
    return _cubic(params["B"], params["C"])


def _catmullrom(params):
    return _cubic(0.0, 0.5)


# Mitsuba's reconstruction filters: name -> (shape parameters -> (radius, values)).
FILTERS = {"box": _box, "tent": _tent, "gaussian": _gaussian, "lanczos": _lanczos,
           "mitchell": _mitchell, "catmullrom": _catmullrom}


@functools.lru_cache(maxsize=None)
def filter_table(kind: str, params: tuple = ()) -> tuple[np.ndarray, float]:
    """The filter ``kind`` with shape parameters ``params`` (``((name,
    value), ...)``) at ``TABLE_SIZE`` + 1 evenly spaced distances from 0 to
    its radius (float32, read by linear interpolation), and its radius."""
    if kind not in FILTERS:
        raise SceneError(f"rfilter {kind!r} is not supported ({', '.join(sorted(FILTERS))})")
    radius, f = FILTERS[kind](dict(params))
    table = f(np.linspace(0.0, radius, TABLE_SIZE + 1)).astype(np.float32)
    table.flags.writeable = False
    return table, float(radius)


