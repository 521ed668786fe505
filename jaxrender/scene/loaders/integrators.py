"""Integrator plugins: ``path``, ``volpath``, ``direct``, ``aov`` and ``stokes``, as
Mitsuba 3.9.1 reads them. A loader returns the integrator's validated
settings, the dict ``Scene.integrator``: ``type`` and, as given,
``max_depth``, ``rr_depth``, ``hide_emitters``, ``aovs``; a ``stokes``
integrator's ``nested`` holds its nested integrator's settings.

Every integrator also reads Mitsuba's ``timeout`` (only none is
supported), ``block_size`` and ``samples_per_pass`` (how Mitsuba splits its
work: they do not change the estimate, and jaxrender renders an image in
one launch).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...kernels.integrators.aov import AovSpecError, parse_aovs
from .. import variants
from ..properties import Properties
from .registry import PluginRegistry, load_plugin

if TYPE_CHECKING:
    from ..builder import SceneBuilder

INTEGRATORS = PluginRegistry("integrator", noun="integrator")


def _settings(props: Properties) -> dict:
    """What every sampling integrator of Mitsuba reads."""
    if props.float("timeout", -1.0) > 0:
        raise props.error("a render time limit is not supported yet", "timeout")
    if props.int("block_size", 0) < 0:
        raise props.error("must not be negative", "block_size")
    props.int("samples_per_pass", -1)
    settings = {"type": props.plugin}
    if "hide_emitters" in props:
        settings["hide_emitters"] = props.bool("hide_emitters")
    return settings


@INTEGRATORS.register("path", "volpath", "prbvolpath")
def load_path(builder: SceneBuilder, props: Properties) -> dict:
    settings = _settings(props)
    if "max_depth" in props:
        settings["max_depth"] = props.int("max_depth")
        if settings["max_depth"] < -1:
            raise props.error(f"must be -1 (infinite) or >= 0, got {settings['max_depth']}", "max_depth")
    if "rr_depth" in props:
        settings["rr_depth"] = props.int("rr_depth")
        if settings["rr_depth"] <= 0:
            raise props.error(f"must be greater than zero, got {settings['rr_depth']}", "rr_depth")
    return _as_given(props, settings)


@INTEGRATORS.register("direct")
def load_direct(builder: SceneBuilder, props: Properties) -> dict:
    """Mitsuba's ``direct`` with jaxrender's one emitter and one BSDF sample
    per shading point."""
    settings = _settings(props)
    if "shading_samples" in props and ("emitter_samples" in props or "bsdf_samples" in props):
        raise props.error("give either shading_samples or emitter_samples / bsdf_samples, not both")
    for name in ("shading_samples", "emitter_samples", "bsdf_samples"):
        props.only(name, 1, Properties.int, f"{name} = {props.values.get(name)!r}")
    return settings


@INTEGRATORS.register("aov")
def load_aov(builder: SceneBuilder, props: Properties) -> dict:
    settings = _settings(props)
    nested = props.plugins()
    if nested:
        raise props.error("integrators nested in an aov integrator are not supported yet (render them separately)",
                          nested[0][0])
    aovs = props.get("aovs", "")
    try:
        parse_aovs(aovs)
    except AovSpecError as exc:
        raise props.error(str(exc), "aovs") from None
    settings["aovs"] = aovs
    return _as_given(props, settings)


@INTEGRATORS.register("stokes")
def load_stokes(builder: SceneBuilder, props: Properties) -> dict:
    """Mitsuba's ``stokes``: one nested ``path``, ``direct``, ``volpath`` or ``prbvolpath`` integrator,
    in a polarized variant only (as Mitsuba, which raises otherwise)."""
    if not variants.loading_name().endswith("_polarized"):
        raise props.error(f"the stokes integrator needs a polarized variant (spectral_polarized or mono_polarized), "
                          f"not {variants.loading_name()!r}")
    settings = _settings(props)
    if "hide_emitters" in settings:
        raise props.error("give hide_emitters to the nested integrator (the stokes integrator's own is not used)",
                          "hide_emitters")
    nested = props.plugins()
    if len(nested) != 1:
        raise props.error(f"needs exactly one nested integrator, got {len(nested)}")
    name, spec = nested[0]
    if builder.category(spec, name) != "integrator":
        raise props.error("its nested plugin must be an integrator", name)
    spec, _ = builder.resolve(spec, name)
    if spec.get("type") not in ("path", "direct", "volpath", "prbvolpath"):
        raise props.error(f"a nested {spec.get('type')!r} integrator is not supported yet "
                          "(path, direct, volpath, prbvolpath)", name)
    props.mark_read(name)
    settings["nested"] = load_plugin(INTEGRATORS, builder, spec, props.where(name))
    return settings


def _as_given(props: Properties, settings: dict) -> dict:
    """``settings`` in the order the scene gives them."""
    return {k: settings[k] for k in ("type", *props.values) if k in settings}
