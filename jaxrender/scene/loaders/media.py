"""Medium and phase function plugins: ``homogeneous`` and ``heterogeneous``
with ``isotropic`` or ``hg``, as Mitsuba 3.9.1 reads them.

A medium is loaded once per id (or per nested place) by
``SceneBuilder.medium``, where a shape names it as its ``interior`` or
``exterior`` or a sensor as its ``medium``. Its parameters get
``mitsuba.traverse``'s keys: ``<key>.sigma_t.value.value``,
``<key>.albedo.value.value`` (colours: 3 floats), ``<key>.scale`` and
``<key>.phase_function.g``. Values are floats, ``rgb`` (within [0, 1], as
Mitsuba's RGB variants require) or a ``constvolume`` of one; a spatially
varying volume (``gridvolume``) is "not supported yet" there.

A ``heterogeneous`` medium's ``sigma_t`` and ``albedo`` are volumes
(``scene/volumes.py``: ``gridvolume`` with keys ``<key>.sigma_t.data``,
``<key>.albedo.data``, or ``constvolume`` / a float / an rgb with
``<key>.sigma_t.value.value``); ``<key>.scale``. Its majorant
(``grid_majorant``) is computed from the current ``sigma_t`` values with
some headroom, or is the volume's ``max_value``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ...kernels.media import phase as kphase
from .. import variants
from ..errors import SceneError
from ..properties import Properties, parse_rgb
from ..volumes import load_volume
from .registry import PluginRegistry, load_plugin

if TYPE_CHECKING:
    from ..builder import SceneBuilder

MEDIA = PluginRegistry("medium")
PHASES = PluginRegistry("phase", noun="phase function")
_NONDIFF = None   # differentiable under volpath / prbvolpath (Integrator.nondifferentiable_params says where not)


@dataclass
class MediumSpec:
    """A loaded medium: its kind (``kernels.media.KINDS``), phase function
    (``kernels.media.phase.NAMES``) and the parameter keys of its row."""
    kind: str
    phase: str
    sigma_t: str
    albedo: str
    scale: str
    g: str | None = None
    sample_emitters: bool = True
    extra: dict = field(default_factory=dict)
    # heterogeneous: the sigma_t and albedo volumes (texture indices) and
    # the sigma_t volume's max_value (None: its largest value)
    sigma_t_volume: int = -1
    albedo_volume: int = -1
    fixed_max: float | None = None


# How far an automatic majorant lies above the largest extinction value.
# Null-scattering derivatives (volpath's adjoint and forward mode) see a
# change of sigma_t only through null collisions, whose density
# majorant - sigma_t is 0 where sigma_t reaches the majorant: there, with
# Mitsuba's majorant (exactly the largest value), a grid's derivative is
# lost wherever it is flat at its peak. The headroom costs at most 1/8
# more (null) lookups per unit length and changes no image's expectation.
MAJORANT_HEADROOM = 0.125


def grid_majorant(peak, fixed_max: float | None, xp):
    """A heterogeneous medium's majorant before ``scale``: ``peak`` (the
    ``sigma_t`` volume's largest value, detached) times 1 + the headroom,
    or Mitsuba's ``max_value`` as given while it bounds the values (a
    loaded one must; once optimized values pass it, the automatic
    majorant takes over: a majorant below the data would bias the image)."""
    auto = peak * np.float32(1.0 + MAJORANT_HEADROOM)
    if fixed_max is None:
        return auto
    return xp.where(peak <= fixed_max, np.float32(fixed_max), auto)


def _volume_rgb(props: Properties, name: str, default: float, key: str) -> tuple[np.ndarray, Any]:
    """A homogeneous volume value: a float, an rgb (in [0, 1]) or a
    constvolume of one, as (rgb, the value as given)."""
    props.mark_read(name)
    value = props.values.get(name, default)
    where = props.where(name, key)
    if isinstance(value, Mapping) and value.get("type") not in ("rgb", "spectrum"):
        inner = Properties(value, f"{props.key}.{name}", "volume")
        if inner.plugin != "constvolume":
            raise props.error(f"a {inner.plugin!r} volume is not supported yet here (a float, rgb or constvolume)",
                              name)
        out = _volume_rgb(inner, "value", 1.0, key)
        inner.transform()            # (a constant volume is the same everywhere)
        inner.check_unread()
        return out
    try:
        rgb = parse_rgb(value, where)
    except SceneError as exc:
        raise props.locate(exc, name) from None
    if isinstance(value, Mapping) and (rgb.min() < 0.0 or rgb.max() > 1.0):
        raise props.error(f"an rgb value must lie in [0, 1] (as in Mitsuba's RGB variants), got {rgb.tolist()}; "
                          "give a float, or scale it with the medium's 'scale'", name)
    return rgb, value


def _stored(rgb: np.ndarray, value: Any, where: str, extinction: bool) -> np.ndarray:
    """A homogeneous medium's value as the variant stores it: luminance in
    mono; in spectral an albedo as a reflectance spectrum and an extinction
    given as a float as that float (a constant spectrum, any size: the
    kernel scales a flat spectrum by it), given as rgb as its spectrum."""
    if variants.current() != "spectral":
        return variants.mono_or_rgb(rgb)
    if extinction and (not isinstance(value, Mapping) or variants.uniform_value(value) is not None):
        return rgb[:1]
    return variants.encode_color(value, where, rgb=rgb)


def attached(builder: SceneBuilder, props: Properties, name: str, key: str) -> int:
    """The index of the medium a shape or sensor holds as property ``name``
    (loaded under ``key`` unless it is a reference)."""
    spec, _ = builder.resolve(props.get(name), key)
    if spec.get("type") not in MEDIA:
        raise props.error(f"medium type {spec.get('type')!r} is not supported yet ({', '.join(MEDIA.supported())})",
                          name)
    return builder.medium(props.values[name], key)


@MEDIA.register("homogeneous")
def load_homogeneous(builder: SceneBuilder, props: Properties) -> MediumSpec:
    key = props.key
    sigma_rgb, sigma_given = _volume_rgb(props, "sigma_t", 1.0, f"{key}.sigma_t.value.value")
    if np.any(sigma_rgb < 0):
        raise props.error(f"must not be negative, got {sigma_rgb.tolist()}", "sigma_t")
    sigma_t = _stored(sigma_rgb, sigma_given, props.where("sigma_t"), True)
    albedo = _stored(*_volume_rgb(props, "albedo", 0.75, f"{key}.albedo.value.value"), props.where("albedo"), False)
    if np.any(sigma_rgb < 0):
        raise props.error(f"must not be negative, got {sigma_t.tolist()}", "sigma_t")
    scale = props.float("scale", 1.0)
    if not scale >= 0:
        raise props.error(f"must not be negative, got {scale}", "scale")
    if not props.bool("has_spectral_extinction", True):
        raise props.error("only spectral extinction (Mitsuba's default) is supported yet", "has_spectral_extinction")
    sample_emitters = props.bool("sample_emitters", True)
    spec = MediumSpec("homogeneous", "isotropic", f"{key}.sigma_t.value.value", f"{key}.albedo.value.value",
                      f"{key}.scale", sample_emitters=sample_emitters)
    builder.add_param(spec.sigma_t, sigma_t.astype(np.float32), _NONDIFF)
    builder.add_param(spec.albedo, albedo.astype(np.float32), _NONDIFF)
    builder.add_param(spec.scale, np.float32(scale), _NONDIFF)
    _phase(builder, props, spec)
    return spec


@MEDIA.register("heterogeneous")
def load_heterogeneous(builder: SceneBuilder, props: Properties) -> MediumSpec:
    key = props.key
    sigma_t = load_volume(builder, props, "sigma_t", 1.0, _NONDIFF)
    albedo = load_volume(builder, props, "albedo", 0.75, _NONDIFF)
    scale = props.float("scale", 1.0)
    if not scale >= 0:
        raise props.error(f"must not be negative, got {scale}", "scale")
    if np.min(builder.params[sigma_t.key]) < 0:
        raise props.error("sigma_t must not be negative", "sigma_t")
    if not props.bool("has_spectral_extinction", True):
        raise props.error("only spectral extinction (Mitsuba's default) is supported yet", "has_spectral_extinction")
    spec = MediumSpec("heterogeneous", "isotropic", sigma_t.key, albedo.key, f"{key}.scale",
                      sample_emitters=props.bool("sample_emitters", True), sigma_t_volume=sigma_t.texture,
                      albedo_volume=albedo.texture, fixed_max=sigma_t.fixed_max)
    builder.add_param(spec.scale, np.float32(scale), _NONDIFF)
    _phase(builder, props, spec)
    return spec


def _phase(builder: SceneBuilder, props: Properties, spec: MediumSpec) -> None:
    """The medium's phase function (at most one; isotropic by default)."""
    found = [(n, s) for n, s in props.plugins() if builder.category(s, n) == "phase"]
    if len(found) > 1:
        raise props.error("only a single phase function can be specified per medium (as in Mitsuba)", found[1][0])
    if not found:
        return
    name, nested = found[0]
    props.get(name)
    nested, _ = builder.resolve(nested, f"{props.key}.{name}")
    spec.phase = load_plugin(PHASES, builder, nested, f"{props.key}.phase_function", spec)


@PHASES.register("isotropic")
def load_isotropic(builder: SceneBuilder, props: Properties, spec: MediumSpec) -> str:
    return "isotropic"


@PHASES.register("hg")
def load_hg(builder: SceneBuilder, props: Properties, spec: MediumSpec) -> str:
    g = props.float("g", 0.8)
    if not -1.0 < g < 1.0:
        raise props.error(f"the asymmetry parameter must lie in (-1, 1), got {g}", "g")
    spec.g = f"{props.key}.g"
    builder.add_param(spec.g, np.float32(g), _NONDIFF)
    return "hg"


assert set(MEDIA.supported()) <= {"homogeneous", "heterogeneous"} and set(PHASES.supported()) <= set(kphase.NAMES)
