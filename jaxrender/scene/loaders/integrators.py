"""Integrator plugins: ``path``, ``volpath``, ``direct``, ``aov`` and ``stokes``, and
Mitsuba's differentiable ``prb``, ``prb_projective``, ``direct_projective`` and
``prbvolpath``, as Mitsuba 3.9.1 reads them. A loader returns the integrator's validated
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
    _read_depths(props, settings)
    return _as_given(props, settings)


def _read_depths(props: Properties, settings: dict, max_depth: int | None = None, rr_depth: int | None = None):
    """``max_depth`` and ``rr_depth`` into ``settings``, validated as Mitsuba
    does: where given, else where a default (Mitsuba's for the plugin) is."""
    if "max_depth" in props or max_depth is not None:
        settings["max_depth"] = props.int("max_depth", max_depth)
        if settings["max_depth"] < -1:
            raise props.error(f"must be -1 (infinite) or >= 0, got {settings['max_depth']}", "max_depth")
    if "rr_depth" in props or rr_depth is not None:
        settings["rr_depth"] = props.int("rr_depth", rr_depth)
        if settings["rr_depth"] <= 0:
            raise props.error(f"must be greater than zero, got {settings['rr_depth']}", "rr_depth")


@INTEGRATORS.register("prb", "prb_projective", "direct_projective")
def load_prb(builder: SceneBuilder, props: Properties) -> dict:
    """Mitsuba's path replay integrators (Python ``ADIntegrator`` classes). Their
    images are the path tracer's (``direct_projective``: the direct
    integrator's, its ``max_depth`` 2), and jaxrender differentiates every
    integrator by path replay, geometry with its boundary terms (see
    ``docs/architecture.md``), so they render with those kernels; what
    differs is read as Mitsuba reads it: ``max_depth`` 6 by default,
    ``rr_depth`` greater than zero, counted from the first vertex (the path
    tracer counts that vertex first, ``PathIntegrator.settings``). Their
    sampling controls (``sppc``, ``sppp``, ``sppi``, ``guiding``...) are not
    implemented: jaxrender samples the boundary terms its own way, and
    giving one is an error."""
    if variants.loading_name().endswith("_polarized"):
        # (as Mitsuba, whose AD integrators do not track polarization)
        raise props.error(f"the {props.plugin} integrator does not support polarized variants "
                          f"(use stokes with a nested path integrator)")
    settings = _settings(props)
    if props.plugin == "direct_projective":
        # (Mitsuba reads max_depth and rr_depth, then renders direct illumination, 2 vertices, regardless)
        props.only("max_depth", 2, Properties.int, f"max_depth = {props.values.get('max_depth')!r} "
                   "(direct_projective renders direct illumination: Mitsuba ignores it)")
        props.only("rr_depth", 2, Properties.int, f"rr_depth = {props.values.get('rr_depth')!r} "
                   "(direct_projective has no Russian roulette: Mitsuba ignores it)")
    else:
        _read_depths(props, settings, max_depth=6, rr_depth=5)
    for name, what in (("sppc", "a sample count for the continuous derivatives"),
                       ("sppp", "a sample count for primary visibility's derivatives"),
                       ("sppi", "a sample count for indirect visibility's derivatives"),
                       ("guiding", "guided sampling of indirect visibility's boundaries"),
                       ("guiding_proj", "guided sampling of indirect visibility's boundaries"),
                       ("guiding_rounds", "guided sampling of indirect visibility's boundaries"),
                       ("project_seed", "a projective seed strategy")):
        props.unsupported(name, f"{name} ({what}: derivatives take render's spp_grad samples, its spp_boundary "
                                "for the film's boundary term, edges sampled by length)")
    return settings


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
