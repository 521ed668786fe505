"""The Hosek-Wilkie sky and sun models as Mitsuba 3.9.1's ``sunsky`` emitter
evaluates them in its RGB variants, in numpy, for the scene builder.

The model's tables (``jaxrender/data/sunsky_rgb.npz``, made by
``tools/make_sunsky_data.py`` from the datasets the mitsuba wheel ships;
3-clause BSD, Hosek & Wilkie 2012-2013) are reduced when the scene is
loaded (and again when a render changes the emitter's parameters:
:class:`SunskySource`), as Mitsuba reduces them, to what one sun position,
turbidity and ground albedo need:

* the sky: per RGB channel nine coefficients and a mean radiance, linear in
  turbidity and albedo, then a quintic Bezier curve in ``cbrt(elevation /
  (pi / 2))`` of the sun; :meth:`SunskyModel.sky` evaluates Hosek and
  Wilkie's formula for directions given by the cosine of their angle to the
  zenith and their angle to the sun;
* the sun, with ``complex_sun = false`` (Mitsuba's default): a constant radiance
  over a cone of half-angle ``sun_aperture / 2`` around the sun direction,
  the sun's irradiance (linear in turbidity and in the sun's elevation, in
  3-degree steps from 2 degrees) spread over the solid angle of the real
  sun's disk, times the ratio of that solid angle to the cone's, so that the
  sun's power does not depend on the aperture (given as ``sun_aperture``,
  the full angle in degrees);
* with ``complex_sun = true``: per RGB channel a polynomial of degree 3 in
  the elevation of the direction looked at (45 segments, cubic in
  ``cbrt(elevation / (pi / 2))``) times one of degree 5 in the cosine of the
  angle between the sun's radius and the direction (limb darkening),
  linear in turbidity, scaled by the ratio of the real sun's solid angle to
  the cone's (the kernels evaluate it).

Frames: the model's local frame is Mitsuba's (z up, x north); ``to_world``
orients it. The sun's position from a date, time and location is Mitsuba's
implementation of Blanco-Muriel et al., "Computing the Solar Vector" (Solar
Energy 70(5), 2001), in single precision as Mitsuba's scalar variants run it.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from pathlib import Path

import numpy as np

from ..kernels import layout
from .errors import SceneError

DATA = Path(__file__).resolve().parent.parent / "data" / "sunsky_rgb.npz"

# Mitsuba's constants (include/mitsuba/render/sunsky.h, core/spectrum.h).
SUN_HALF_APERTURE = math.pi * (0.5 * 0.5358) / 180.0   # the real sun's angular radius (radians)
SPEC_TO_RGB_SUN_CONV = 467.069280386                   # spectral solar luminosity to RGB
CIE_Y_NORMALIZATION = 1.0 / 106.7502593994140625
EARTH_MEAN_RADIUS_KM = 6371.01
ASTRONOMICAL_UNIT_KM = 149597890.0
BEZIER = (1.0, 5.0, 10.0, 10.0, 5.0, 1.0)               # binomial weights of the quintic Bezier curve
TURBIDITY_LEVELS = 10
SUN_ELEVATIONS = 30                                    # irradiance table: 2, 5, ..., 89 degrees


@functools.cache
def tables() -> dict[str, np.ndarray]:
    """The RGB model tables (see ``tools/make_sunsky_data.py``)."""
    with np.load(DATA) as f:
        return {k: f[k].astype(np.float64) for k in f.files}


def _lerp_axis0(table: np.ndarray, index: float) -> np.ndarray:
    """Linear interpolation of ``table`` along its first axis at the
    fractional ``index`` (clamped to the table)."""
    index = min(max(index, 0.0), table.shape[0] - 1.0)
    i0 = min(int(math.floor(index)), table.shape[0] - 2)
    t = index - i0
    return (1.0 - t) * table[i0] + t * table[i0 + 1]


def _cdiv(a: int, b: int) -> int:
    """C's integer division (truncating towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def sun_coordinates(year: int, month: int, day: int, hour: float, minute: float, second: float,
                    latitude: float, longitude: float, timezone: float) -> tuple[float, float]:
    """(zenith angle, azimuth) of the sun in the model's frame, radians, for
    a local date and time (``timezone`` hours ahead of UT) at a location
    (degrees; east and north positive): Mitsuba's ``sun_coordinates``."""
    f = np.float32
    dec_hours = f(hour) - f(timezone) + (f(minute) + f(second) / f(60.0)) / f(60.0)
    aux1 = _cdiv(month - 14, 12)
    aux2 = (_cdiv(1461 * (year + 4800 + aux1), 4) + _cdiv(367 * (month - 2 - 12 * aux1), 12)
            - _cdiv(3 * _cdiv(year + 4900 + aux1, 100), 4) + day - 32075)
    julian = f(aux2) - f(0.5) + dec_hours / f(24.0)
    days = julian - f(2451545.0)

    omega = f(2.1429) - f(0.0010394594) * days
    mean_longitude = f(4.8950630) + f(0.017202791698) * days
    anomaly = f(6.2400600) + f(0.0172019699) * days
    ecl_longitude = (mean_longitude + f(0.03341607) * np.sin(anomaly) + f(0.00034894) * np.sin(f(2) * anomaly)
                     - f(0.0001134) - f(0.0000203) * np.sin(omega))
    ecl_obliquity = f(0.4090928) - f(6.2140e-9) * days + f(0.0000396) * np.cos(omega)

    sin_ecl = np.sin(ecl_longitude)
    right_ascension = np.arctan2(np.cos(ecl_obliquity) * sin_ecl, np.cos(ecl_longitude))
    if right_ascension < 0:
        right_ascension += f(2 * math.pi)
    declination = np.arcsin(np.sin(ecl_obliquity) * sin_ecl)

    gmst = f(6.6974243242) + f(0.0657098283) * days + dec_hours
    lmst = np.radians(gmst * f(15) + f(longitude)).astype(f)
    lat = np.radians(f(latitude)).astype(f)
    hour_angle = lmst - right_ascension
    zenith = np.arccos(np.cos(lat) * np.cos(hour_angle) * np.cos(declination) + np.sin(declination) * np.sin(lat))
    azimuth = np.arctan2(-np.sin(hour_angle), np.tan(declination) * np.cos(lat) - np.sin(lat) * np.cos(hour_angle))
    if azimuth < 0:
        azimuth += f(2 * math.pi)
    zenith += f(EARTH_MEAN_RADIUS_KM / ASTRONOMICAL_UNIT_KM) * np.sin(zenith)    # parallax
    return float(zenith), float(azimuth) - math.pi


def direction(theta: float, phi: float) -> np.ndarray:
    """The unit vector of zenith angle ``theta`` and azimuth ``phi`` (z up)."""
    return np.array([math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta)])


class SunskyModel:
    """The sky and sun radiance for one sun direction (model frame, unit),
    turbidity in [1, 10] and ground albedo (3 channels in [0, 1]), before
    Mitsuba's ``sky_scale`` / ``sun_scale``, in Mitsuba's RGB units."""

    def __init__(self, sun_dir: np.ndarray, turbidity: float, albedo: np.ndarray, aperture_degrees: float):
        t = tables()
        self.sun_dir = np.asarray(sun_dir, np.float64)
        # The cone's cosine in single precision, as Mitsuba and the kernels
        # test it: 1 - cos of a quarter degree keeps only ~3 digits in float32,
        # and the radiance must be the power over *that* cone's solid angle.
        half = np.float32(np.radians(np.float32(0.5) * np.float32(aperture_degrees)))
        self.cos_cutoff = np.cos(half)
        self.solid_angle = 2.0 * math.pi * (1.0 - float(self.cos_cutoff))
        self.above_horizon = self.sun_dir[2] >= 0.0
        # (below the horizon Mitsuba's sunsky emits nothing: the tables are read at 0 degrees, unused)
        elevation = 0.5 * math.pi - math.acos(min(max(self.sun_dir[2], 0.0), 1.0))
        self.params = self._sky_table(t["sky_params"], turbidity, albedo, elevation)        # (3, 9)
        self.radiance = self._sky_table(t["sky_radiance"], turbidity, albedo, elevation)    # (3,)
        index = min(max((math.degrees(elevation) - 2.0) / 3.0, 0.0), SUN_ELEVATIONS - 1.0)
        irradiance = _lerp_axis0(_lerp_axis0(t["sun_irradiance_rgb"], turbidity - 1.0), index)
        # mean radiance over the real sun's disk, rescaled to the cone's solid angle
        self.sun = irradiance * SPEC_TO_RGB_SUN_CONV * CIE_Y_NORMALIZATION / self.solid_angle

    def complex_sun(self, turbidity: float) -> np.ndarray:
        """complex_sun's polynomials (segment 45, elevation power 4, limb
        power 6, RGB 3), interpolated in turbidity and scaled to Mitsuba's
        RGB radiance (its ratio of solid angles in single precision, as its
        own)."""
        table = _lerp_axis0(tables()["sun_radiance"], turbidity - 1.0)            # (45, 3, 4, 6)
        real = np.float32(1.0) - np.cos(np.float32(SUN_HALF_APERTURE))
        ratio = float(real) / float(np.float32(1.0) - self.cos_cutoff)
        return np.transpose(table, (0, 2, 3, 1)) * (ratio * SPEC_TO_RGB_SUN_CONV * CIE_Y_NORMALIZATION)

    @staticmethod
    def _sky_table(table: np.ndarray, turbidity: float, albedo: np.ndarray, elevation: float) -> np.ndarray:
        """Interpolated in turbidity, then per channel in albedo, then the
        Bezier curve in the sun's elevation (Mitsuba's ``bezier_interp``)."""
        by_albedo = _lerp_axis0(table, turbidity - 1.0)                     # (2, 6, 3, ...)
        a = np.asarray(albedo, np.float64).reshape((1, 3) + (1,) * (by_albedo.ndim - 3))
        ctrl = (1.0 - a) * by_albedo[0] + a * by_albedo[1]                  # (6, 3, ...)
        x = min(np.cbrt(2.0 / math.pi * elevation), 1.0 - 2.0 ** -24)
        return sum(w * x ** k * (1.0 - x) ** (5 - k) * ctrl[k] for k, w in enumerate(BEZIER))

    def sky(self, cos_theta: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """Sky radiance (..., 3) for directions at ``cos_theta`` from the
        zenith and angle ``gamma`` from the sun; 0 below the horizon or when
        the sun is below it, as in Mitsuba."""
        cos_theta = np.asarray(cos_theta, np.float64)[..., None]
        above = (cos_theta >= 0.0) & self.above_horizon
        cos_theta = np.maximum(cos_theta, 0.0)     # (below the horizon the formula overflows; it is 0 there)
        gamma = np.asarray(gamma, np.float64)[..., None]
        p = [self.params[:, k] for k in range(9)]
        cos_gamma = np.cos(gamma)
        c1 = 1.0 + p[0] * np.exp(p[1] / (cos_theta + 0.01))
        chi = (1.0 + cos_gamma ** 2) / (1.0 + p[8] ** 2 - 2.0 * p[8] * cos_gamma) ** 1.5
        c2 = (p[2] + p[3] * np.exp(p[4] * gamma) + p[5] * cos_gamma ** 2 + p[6] * chi
              + p[7] * np.sqrt(cos_theta))
        value = c1 * c2 * self.radiance * CIE_Y_NORMALIZATION
        return np.where(above, value, 0.0)

    def sky_towards(self, d: np.ndarray) -> np.ndarray:
        """Sky radiance (..., 3) arriving from unit directions ``d`` (..., 3)
        of the model frame."""
        d = np.asarray(d, np.float64)
        gamma = np.arccos(np.clip(d @ self.sun_dir, -1.0, 1.0))
        return self.sky(d[..., 2], gamma)


# The kernels' environment-map parameterisation has +y up (``kernels.emitters.envmap``);
# the model's frame has +z up: this rotation takes the former's coordinates to the latter's.
MAP_TO_MODEL = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
MAP_WIDTH, MAP_HEIGHT = 512, 257     # the sky's sampling map (a row on the horizon: H odd)
# The probability of sampling the sky (else the sun) follows their powers, kept within these bounds
# so that neither strategy starves where the other's estimate of importance is poor.
SKY_PROB_RANGE = (0.1, 0.9)
LUMINANCE = np.array([0.212671, 0.715160, 0.072169])


class SunskyEnvironment:
    """The kernel rows of a sunsky emitter (``kernels.emitters.sunsky``):
    ``model`` in the frame ``rotation`` (model to world), scaled by
    ``sky_scale`` and ``sun_scale``."""

    map_width, map_height = MAP_WIDTH, MAP_HEIGHT

    def __init__(self, model: SunskyModel, rotation: np.ndarray, sky_scale: float, sun_scale: float, where: str,
                 sun_table: np.ndarray | None = None):
        self.model, self.rotation = model, np.asarray(rotation, np.float64)
        self.sun_table = sun_table       # complex_sun's polynomials (SunskyModel.complex_sun), before sun_scale
        if not model.above_horizon:
            warnings.warn(f"{where}: the sun is below the horizon: the sunsky emits nothing (as in Mitsuba)",
                          stacklevel=3)
        on = 1.0 if model.above_horizon else 0.0
        self.sky_scale, self.sun = sky_scale * on, model.sun * sun_scale * on
        self.sun_table_values = None if sun_table is None else np.asarray(sun_table * sun_scale * on, np.float32)
        self.map_frame = self.rotation @ MAP_TO_MODEL
        self.sampling_map = self._sampling_map()
        self.sky_prob = self._sky_probability()

    def _map_directions(self) -> np.ndarray:
        """Model-frame directions (H, W, 3) of the sampling map's texels."""
        u = (np.arange(MAP_WIDTH) + 0.5) / MAP_WIDTH
        v = np.arange(MAP_HEIGHT) / (MAP_HEIGHT - 1)
        phi, theta = 2.0 * np.pi * u, np.pi * v
        sin_t = np.sin(theta)[:, None]
        d = np.stack([np.sin(phi)[None, :] * sin_t, np.broadcast_to(np.cos(theta)[:, None], sin_t.shape[:1] + u.shape),
                      -np.cos(phi)[None, :] * sin_t], axis=-1)
        return d @ MAP_TO_MODEL.T

    def _sampling_map(self) -> np.ndarray:
        """The sky's radiance over the map (H, W + 2, 3; Mitsuba's halo
        columns), whose luminance the sky's sampling follows."""
        img = self.model.sky_towards(self._map_directions()) * self.sky_scale
        img = np.maximum(img, 0.0)
        return np.ascontiguousarray(np.concatenate([img[:, -1:], img, img[:, :1]], axis=1), np.float32)

    def _sky_probability(self) -> float:
        theta = np.pi * np.arange(MAP_HEIGHT) / (MAP_HEIGHT - 1)
        lum = self.sampling_map[:, 1:-1] @ LUMINANCE
        sky = float(np.sum(lum * np.sin(theta)[:, None])) * (2.0 * np.pi / MAP_WIDTH) * (np.pi / (MAP_HEIGHT - 1))
        sun = max(float(self.sun @ LUMINANCE), 0.0) * self.model.solid_angle
        if sky <= 0.0 or sun <= 0.0:
            return 1.0 if sun <= 0.0 else 0.0
        return float(np.clip(sky / (sky + sun), *SKY_PROB_RANGE))

    def geom_row(self) -> np.ndarray:
        """``emitter_geom``: the sun direction (world), 1 - cos of its cone."""
        sun = self.rotation @ self.model.sun_dir
        return np.append(sun / np.linalg.norm(sun), 1.0 - float(self.model.cos_cutoff))

    def frame_row(self, sun_table_texture: int = -1) -> np.ndarray:
        """``emitter_frame`` (``layout.FRAME_SKY_PARAMS`` ...); the texture
        holding :attr:`sun_table_values` (-1: the uniform sun)."""
        row = np.zeros(layout.EMITTER_FRAME_ROW)
        row[layout.FRAME_SKY_PARAMS:layout.FRAME_SKY_PARAMS + 27] = self.model.params.T.reshape(-1)
        row[layout.FRAME_SKY_RADIANCE:layout.FRAME_SKY_RADIANCE + 3] = (self.model.radiance * CIE_Y_NORMALIZATION
                                                                        * self.sky_scale)
        row[layout.FRAME_SUN_RADIANCE:layout.FRAME_SUN_RADIANCE + 3] = self.sun
        row[layout.FRAME_ZENITH:layout.FRAME_ZENITH + 3] = self.rotation[:, 2]
        sun = self.geom_row()[:3]
        t1 = np.cross(sun, [1.0, 0.0, 0.0] if abs(sun[0]) < 0.9 else [0.0, 1.0, 0.0])
        t1 /= np.linalg.norm(t1)
        row[layout.FRAME_SUN_T1:layout.FRAME_SUN_T1 + 3] = t1
        row[layout.FRAME_SUN_T2:layout.FRAME_SUN_T2 + 3] = np.cross(sun, t1)
        row[layout.FRAME_SKY_PROB] = self.sky_prob
        row[layout.FRAME_SUN_TABLE] = sun_table_texture
        half = math.acos(float(self.model.cos_cutoff))
        row[layout.FRAME_SUN_SIN2] = math.sin(half) ** 2
        return row


TIME_DEFAULTS = {"year": 2010, "month": 7, "day": 10, "hour": 15.0, "minute": 0.0, "second": 0.0}
PLACE_DEFAULTS = {"latitude": 35.6894, "longitude": 139.6917, "timezone": 9.0}
INTEGER_TIME = ("year", "month", "day")


@dataclasses.dataclass
class SunskySource:
    """What a render needs to rebuild a sunsky's buffers from its parameter
    values (Mitsuba's ``parameters_changed``): the emitter's key and index,
    whether its sun follows the date and place (``timed``; then
    ``sun_direction`` is read-only, as in Mitsuba) or ``sun_direction``, the
    properties that are not parameters, and its textures (the sampling map;
    complex_sun's table or -1)."""
    key: str
    emitter: int
    timed: bool
    aperture: float
    complex_sun: bool
    map_texture: int
    table_texture: int

    def names(self) -> list[str]:
        """Its parameters' names (Mitsuba's keys without the emitter's)."""
        when = list(TIME_DEFAULTS) + list(PLACE_DEFAULTS) if self.timed else []
        return when + ["to_world", "turbidity", "sky_scale", "sun_scale", "albedo.value", "sun_direction"]

    def environment(self, values: dict, where: str) -> SunskyEnvironment:
        """The kernel rows for parameter values ``values`` (name -> value),
        checked as Mitsuba checks them (a SceneError naming the key)."""
        check_values(values, self.key)
        rotation = rotation_of(values["to_world"], self.key, "a sunsky")
        if self.timed:
            when = {k: int(values[k]) if k in INTEGER_TIME else float(values[k])
                    for k in list(TIME_DEFAULTS) + list(PLACE_DEFAULTS)}
            sun = rotation @ direction(*sun_coordinates(**when))
        else:
            sun = np.asarray(values["sun_direction"], np.float64).reshape(3)
            sun = sun / np.linalg.norm(sun)
        turbidity = float(values["turbidity"])
        model = SunskyModel(rotation.T @ sun, turbidity, values["albedo.value"], self.aperture)
        return SunskyEnvironment(model, rotation, float(values["sky_scale"]), float(values["sun_scale"]), where,
                                 model.complex_sun(turbidity) if self.complex_sun else None)


def check_values(values: dict, key: str) -> None:
    """Mitsuba's checks of a sunsky's values (``name -> value``), as SceneErrors naming ``<key>.<name>``."""
    turbidity = float(values["turbidity"])
    if not 1.0 <= turbidity <= 10.0:
        raise SceneError(f"{key}.turbidity: must be in [1, 10], got {turbidity}")
    for name in ("sun_scale", "sky_scale"):
        if not float(values[name]) >= 0.0:
            raise SceneError(f"{key}.{name}: must be nonnegative, got {float(values[name])}")
    albedo = np.asarray(values["albedo.value"], np.float64)
    if np.any(albedo < 0) or np.any(albedo > 1):
        raise SceneError(f"{key}.albedo: must be in [0, 1] per channel, got {albedo.tolist()}")
    if "sun_direction" in values and not np.linalg.norm(np.asarray(values["sun_direction"], np.float64)) > 0:
        raise SceneError(f"{key}.sun_direction: must be a nonzero vector")
    for name in INTEGER_TIME:
        if name in values and float(values[name]) != int(float(values[name])):
            raise SceneError(f"{key}.{name}: expected an integer, got {values[name]!r}")


def rotation_of(to_world, where: str, what: str) -> np.ndarray:
    """The rotation of environment emitter ``what``'s 4x4 ``to_world`` (a
    uniform scale divided out: directions do not see it); anything else is
    an error about ``where``."""
    m = np.asarray(to_world, np.float64).reshape(4, 4)[:3, :3]
    s = np.cbrt(np.linalg.det(m))
    if not s > 0 or not np.allclose((m / s) @ (m / s).T, np.eye(3), atol=1e-4):
        raise SceneError(f"{where}: to_world of {what} must be a rotation (possibly uniformly scaled)")
    return m / s
