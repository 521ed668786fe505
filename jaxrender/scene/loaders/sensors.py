"""The sensor and what it holds: ``perspective``, ``thinlens`` and
``orthographic`` sensors, the ``hdrfilm``
film, Mitsuba's six reconstruction filters and Mitsuba's five samplers
(``independent``, ``stratified``, ``multijitter``, ``orthogonal``,
``ldsampler``: the types of ``kernels.samplers``), as Mitsuba 3.9.1 reads
them.

The sensor loader returns a :class:`~jaxrender.scene.scene.Camera`; the
film, filter and sampler loaders (``loader(builder, props)``) return their
settings to it. Mitsuba's other sensors, films and filters are "not
supported yet" errors.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, NamedTuple

import numpy as np

from ...kernels import samplers as ksamplers
from ..camera import Camera, is_rigid
from ..errors import SceneError
from ..properties import Properties
from ..sampler import SamplerSpec
from .media import attached
from .registry import PluginRegistry, load_plugin

if TYPE_CHECKING:
    from ..builder import SceneBuilder

SENSORS = PluginRegistry("sensor")
FILMS = PluginRegistry("film")
RFILTERS = PluginRegistry("rfilter", noun="rfilter")
SAMPLERS = PluginRegistry("sampler")

# hdrfilm's value sets (Mitsuba compares them in lower case).
PIXEL_FORMATS = ("luminance", "luminance_alpha", "rgb", "rgba", "xyz", "xyza")
COMPONENT_FORMATS = ("float16", "float32", "uint32")
FILE_FORMATS = ("openexr", "exr", "rgbe", "pfm")


class Film(NamedTuple):
    width: int
    height: int
    rfilter: str
    rfilter_params: tuple      # ((name, value), ...) of the filter's shape
    crop_offset: tuple         # (x, y) of the crop window, pixels
    crop_size: tuple           # (width, height) of the crop window
    sample_border: bool
    pixel_format: str


class Sampler(NamedTuple):
    spp: int
    seed: int
    spec: SamplerSpec


def _nested(builder: SceneBuilder, props: Properties, category: str, registry: PluginRegistry,
            default: Mapping):
    """Load the one nested plugin of ``category`` (``default`` if none),
    as Mitsuba's sensor finds its film and sampler and a film its filter."""
    found = [(name, spec) for name, spec in props.plugins() if builder.category(spec, name) == category]
    if len(found) > 1:
        raise props.error(f"only one {category} can be given, got {', '.join(n for n, _ in found)}")
    if not found:
        return load_plugin(registry, builder, default, f"{props.key}.{category}")
    name, spec = found[0]
    props.get(name)
    spec, key = builder.resolve(spec, f"{props.key}.{name}")
    return load_plugin(registry, builder, spec, key)


@SENSORS.register("perspective", "thinlens", "orthographic")
def load_sensor(builder: SceneBuilder, props: Properties) -> Camera:
    """Mitsuba's ``perspective`` (pinhole), ``thinlens`` (a perspective
    camera with a circular aperture: ``aperture_radius``, in focus at
    ``focus_distance``) and ``orthographic`` (parallel rays; its to_world
    may scale, setting the extent) sensors."""
    kind = props.plugin
    film = _nested(builder, props, "film", FILMS, {"type": "hdrfilm"})
    aspect = film.width / film.height
    tan_x, tan_y = (1.0, 1.0 / aspect) if kind == "orthographic" else _field_of_view(props, aspect)
    sampler = _nested(builder, props, "sampler", SAMPLERS, {"type": "independent", "sample_count": 4})
    near, far = props.float("near_clip", 0.01), props.float("far_clip", 10000.0)
    if not 0.0 < near < far:
        raise props.error(f"near_clip and far_clip must satisfy 0 < near_clip < far_clip, got {near}, {far}")
    # (every projective camera reads it; only a thin lens has a focal plane)
    focus = props.float("focus_distance", far)
    aperture = 0.0
    if kind == "thinlens":
        if "aperture_radius" not in props:
            raise props.error("thinlens needs an aperture_radius (Mitsuba has no default)")
        # Mitsuba replaces a zero radius by its float epsilon (a pinhole).
        aperture = abs(props.float("aperture_radius")) or float(np.finfo(np.float32).eps)
        if not focus > 0.0:
            raise props.error(f"must be positive, got {focus}", "focus_distance")
    if kind == "perspective":
        for axis in "xy":
            props.only(f"principal_point_offset_{axis}", 0.0, Properties.float)
    _shutter(props)
    props.unsupported("srf", "a spectral response function (srf) in an RGB renderer")
    medium = -1
    for name, spec in props.plugins():
        if builder.category(spec, name) == "medium":
            if medium >= 0:
                raise props.error("a sensor is in at most one medium", name)
            medium = attached(builder, props, name, f"{props.key}.{name}")
    to_world = props.transform()
    if kind == "orthographic":
        if abs(np.linalg.det(to_world[:3, :3])) <= 1e-12 * float(np.max(np.abs(to_world[:3, :3]))) ** 3:
            raise props.error("the transform is singular", "to_world")
    elif not is_rigid(to_world):
        raise props.error("the camera's to_world must not scale (Mitsuba refuses scale factors here)", "to_world")
    return Camera(to_world, tan_x, tan_y, near, far, film.width, film.height, film.rfilter, sampler.spp,
                  seed=sampler.seed, rfilter_params=film.rfilter_params, crop_offset=film.crop_offset,
                  crop_size=film.crop_size, sample_border=film.sample_border, pixel_format=film.pixel_format,
                  sampler=sampler.spec, kind=kind, aperture_radius=aperture, focus_distance=focus, medium=medium)


def _shutter(props: Properties) -> None:
    """The shutter interval, read as Mitsuba does; jaxrender scenes do not
    move, so it does not change the image."""
    open_ = props.float("shutter_open", 0.0)
    if props.float("shutter_close", 0.0) < open_:
        raise props.error("shutter_open must not be later than shutter_close")


def _field_of_view(props: Properties, aspect: float) -> tuple[float, float]:
    """(tan of half the horizontal, of half the vertical field of view)
    from fov / fov_axis or focal_length, as Mitsuba's parse_fov."""
    if "fov" in props and "focal_length" in props:
        raise props.error("give either fov or focal_length, not both")
    if "fov" in props:
        fov = props.float("fov")
        axis = props.string("fov_axis", "x", ("x", "y", "diagonal", "smaller", "larger"), lower=True)
    else:
        # Mitsuba's default: a 50mm lens on 35mm film, i.e. a *diagonal* field of view
        focal = str(props.get("focal_length", "50mm"))
        try:
            f_mm = float(focal[:-2] if focal.endswith("mm") else focal)
        except ValueError:
            raise props.error(f"expected '<x>mm', got {focal!r}", "focal_length") from None
        if not f_mm > 0:
            raise props.error(f"must be positive, got {focal!r}", "focal_length")
        fov = 2.0 * math.degrees(math.atan(math.sqrt(36.0 * 36.0 + 24.0 * 24.0) / (2.0 * f_mm)))
        axis = "diagonal"
    if axis == "smaller":
        axis = "x" if aspect <= 1 else "y"
    elif axis == "larger":
        axis = "y" if aspect <= 1 else "x"
    t = math.tan(math.radians(fov) / 2)
    if axis == "x":
        tan_x, tan_y = t, t / aspect
    elif axis == "y":
        tan_x, tan_y = t * aspect, t
    else:
        diag = t / math.sqrt(1.0 + 1.0 / (aspect * aspect))
        tan_x, tan_y = diag, diag / aspect
    if not (tan_x > 0 and math.isfinite(tan_x)):
        raise props.error(f"the horizontal field of view must be in (0, 180) degrees (fov = {fov})")
    return tan_x, tan_y


@FILMS.register("hdrfilm")
def load_hdrfilm(builder: SceneBuilder, props: Properties) -> Film:
    """Mitsuba's ``hdrfilm``: its size, crop window, border sampling, pixel
    format and filter. Images are float32; other component formats raise
    (a render returns an array, so a file format only matters to the
    command line, which writes OpenEXR)."""
    w, h = props.int("width", 768), props.int("height", 576)
    if w <= 0 or h <= 0:
        raise props.error(f"width and height must be positive, got {w}x{h}")
    ox, oy = props.int("crop_offset_x", 0), props.int("crop_offset_y", 0)
    cw, ch = props.int("crop_width", w), props.int("crop_height", h)
    if ox < 0 or oy < 0 or cw <= 0 or ch <= 0 or ox + cw > w or oy + ch > h:
        raise props.error(f"invalid crop window: offset ({ox}, {oy}) and size ({cw}, {ch}) must lie inside "
                          f"the {w}x{h} film")
    sample_border = props.bool("sample_border", False)
    pixel_format = _format(props, "pixel_format", PIXEL_FORMATS, PIXEL_FORMATS, default="rgb")
    _format(props, "component_format", COMPONENT_FORMATS, ("float32",))
    _format(props, "file_format", FILE_FORMATS, ("openexr", "exr"))
    props.mark_read("banner", "compensate")      # Mitsuba 3 ignores both
    rfilter, params = _nested(builder, props, "rfilter", RFILTERS, {"type": "gaussian"})
    return Film(w, h, rfilter, params, (ox, oy), (cw, ch), sample_border, pixel_format)


def _format(props: Properties, name: str, valid: tuple, supported: tuple, default: str | None = None) -> str:
    value = props.string(name, default or supported[0], valid, lower=True)
    if value not in supported:
        raise props.error(f"{name} {value!r} is not supported yet ({', '.join(supported)})", name)
    return value


@RFILTERS.register("box")
def load_box(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    return "box", ()


@RFILTERS.register("tent")
def load_tent(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    return "tent", (("radius", _positive(props, "radius", 1.0)),)


@RFILTERS.register("gaussian")
def load_gaussian(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    return "gaussian", (("stddev", _positive(props, "stddev", 0.5)),)


@RFILTERS.register("lanczos")
def load_lanczos(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    lobes = props.int("lobes", 3)
    if lobes < 1:
        raise props.error(f"must be a positive integer, got {lobes}", "lobes")
    return "lanczos", (("lobes", lobes),)


@RFILTERS.register("mitchell")
def load_mitchell(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    return "mitchell", (("B", props.float("B", 1.0 / 3.0)), ("C", props.float("C", 1.0 / 3.0)))


@RFILTERS.register("catmullrom")
def load_catmullrom(builder: SceneBuilder, props: Properties) -> tuple[str, tuple]:
    return "catmullrom", ()


def _positive(props: Properties, name: str, default: float) -> float:
    v = props.float(name, default)
    if not v > 0:
        raise props.error(f"must be positive, got {v}", name)
    return v


def load_sampler(builder: SceneBuilder, props: Properties) -> Sampler:
    """Any sampler of ``kernels.samplers``: ``sample_count`` rounded as
    Mitsuba's sampler of that type rounds it, ``seed``, and ``jitter`` /
    ``strength`` where the type reads them."""
    kind = ksamplers.TYPES[props.plugin]
    n = props.int("sample_count", 4)
    if n <= 0:
        raise props.error(f"must be a positive integer, got {n}", "sample_count")
    seed = props.int("seed", 0)
    if not 0 <= seed < 2 ** 32:
        raise props.error(f"must be an unsigned 32-bit integer, got {seed}", "seed")
    jitter = props.bool("jitter", True) if "jitter" in kind.properties else True
    strength = props.int("strength", 2) if "strength" in kind.properties else 2
    if strength < 2:
        # Mitsuba 3.9.1 loads it, then divides by zero or loops on such arrays
        raise props.error(f"must be at least 2, got {strength}", "strength")
    spec = SamplerSpec(kind.name, jitter, strength)
    try:
        spp = spec.sample_count(n, props.where("sample_count"))
    except SceneError as exc:
        raise props.locate(exc, "sample_count") from None
    return Sampler(spp, seed, spec)


SAMPLERS.serve(lambda: set(ksamplers.TYPES), load_sampler)
