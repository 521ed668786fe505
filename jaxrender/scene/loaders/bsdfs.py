"""BSDF plugins: every type of ``kernels.bsdfs.registry`` (a user's BSDF
registered at runtime included), read generically from its
:class:`~jaxrender.kernels.bsdfs.base.Param` declarations, and ``twosided``.

A BSDF loader is ``loader(builder, props, twosided=False)`` and returns the
BSDF's row index. How each :class:`Param` kind is read:

* COLOR / FLOAT: a colour (rgb or float) or a texture (``bitmap``,
  ``checkerboard``, a reference to one); parameter ``<key>.<name>.value``.
  Params of one ``group`` (``alpha_u``, ``alpha_v``) are read from the
  group's name (``alpha``) unless all of them are given, as Mitsuba.
* SCALAR: a plain float; parameter ``<key>.<name>``.
* IOR: Mitsuba's ``int_ior`` / ``ext_ior`` (floats or names); parameter
  ``<key>.<name>`` holds their ratio.
* FLAG: a boolean stored in the row. OPTION: a value among ``choices``
  (strings compared in lower case if need be, as Mitsuba's
  ``distribution``), selecting the kernel variant.
* ARRAY: ``len(default)`` finite floats; parameter ``<key>.<name>``, kept
  in the ``texels`` buffer as a ``kernels.textures.DATA`` texture whose
  index the row holds.
* BSDF (composites: blendbsdf, mask, twosided with two BSDFs): the nested
  BSDFs in the order given, one per BSDF Param, loaded as
  ``<key>.<name>`` (``bsdf_0``, ``nested_bsdf``, ``brdf_1``: Mitsuba's
  traverse names) or by their id when referenced; the row holds their
  indices. Composites nest at most ``kernels.bsdfs.base.MAX_NESTING`` deep;
  a frame-perturbing one (normalmap, bumpmap) not inside another.
* TEXTURE (bumpmap): the plugin's one nested texture, whatever its name,
  loaded as ``<key>.<name>``; a bitmap. The row holds its texture index.

Mitsuba's own rules beyond the declarations are in :data:`PLUGIN_RULES`
(roughplastic's restrictions, the conductors' ``material`` presets,
principled's choice of variant); a rule may set OPTION values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ...kernels import layout
from ...kernels import textures as ktex
from ...kernels.bsdfs import base
from ...kernels.bsdfs import registry as bsdf_registry
from .. import variants
from ..conductors import complex_ior, measured_ior
from ..properties import Properties
from ..textures import TextureSpec
from .registry import PluginRegistry, load_plugin

if TYPE_CHECKING:
    from ..builder import SceneBuilder

BSDFS = PluginRegistry("bsdf")


def load_registered(builder: SceneBuilder, props: Properties, twosided: bool = False) -> int:
    """A BSDF of ``kernels.bsdfs.registry``, read from its Params."""
    rule = PLUGIN_RULES.get(props.plugin)
    fixed = rule(props) if rule is not None else {}
    options = _options(props, fixed)
    try:
        t = bsdf_registry.select(props.plugin, options)
    except KeyError:
        raise props.error(f"no {props.plugin} variant is registered for {options}") from None
    nested = _nested(builder, props, t)
    fields, slots = _row(builder, props, t, fixed, nested)
    if t.plugin == "normalmap" and any(builder.textures[s[2]].channels != 3 for s in slots):
        raise props.error("the normal map must have three channels (Mitsuba's eval_3)", "normalmap")
    if len(slots) > layout.MAX_TEX_SLOTS:
        raise props.error(f"at most {layout.MAX_TEX_SLOTS} parameters of one BSDF can be textured, got {len(slots)}")
    children = [int(k) for (k, _), prm in zip(fields, [q for q in t.params if q.width()]) if prm.kind == base.BSDF]
    depth = 1 + max((builder.bsdf_depth[c] for c in children), default=-1)
    if depth > base.MAX_NESTING:
        raise props.error(f"composite BSDFs nest {depth} deep here; at most {base.MAX_NESTING} levels are "
                          "supported")
    inner = next((builder.bsdf_frame[c] for c in children if builder.bsdf_frame[c] is not None), None)
    if t.frame and inner is not None:
        raise props.error(f"a {inner} inside a {props.plugin} is not supported yet (frame perturbations do not "
                          "nest)")
    return builder.add_bsdf(t.name, fields, slots, twosided, depth, props.plugin if t.frame else inner)


def _nested(builder: SceneBuilder, props: Properties, t: base.BsdfType) -> list:
    """The nested BSDFs of a composite (``(name, spec)`` in order), checked
    against its BSDF Params as Mitsuba checks them."""
    wanted = [p.name for p in t.params if p.kind == base.BSDF]
    if not wanted:
        return []
    nested = [(name, spec) for name, spec in props.plugins()
              if (spec.get("type") != "ref" or spec.get("id") in builder.named) and builder.category(spec, name) == "bsdf"]
    if len(nested) != len(wanted):
        count = "one nested BSDF" if len(wanted) == 1 else f"{len(wanted)} nested BSDFs"
        raise props.error(f"{props.plugin} takes {count}, got {len(nested)}")
    return nested


BSDFS.serve(bsdf_registry.plugins, load_registered)


def _options(props: Properties, fixed: dict) -> dict:
    """The OPTION values that select the plugin's kernel variant (from the
    plugin's rule where it sets them, else from props)."""
    options = {}
    for p in bsdf_registry.option_params(props.plugin):
        if p.name in fixed:
            options[p.name] = fixed[p.name]
            continue
        value = props.get(p.name, p.default)
        if isinstance(value, str) and value not in p.choices and value.lower() in p.choices:
            value = value.lower()
        if isinstance(value, np.ndarray) or not any(value == c and type(value) is type(c) for c in p.choices):
            what = "microfacet distribution" if p.name == "distribution" else f"{props.plugin} {p.name}"
            raise props.error(f"unknown {what} {value!r} ({', '.join(map(str, p.choices))})", p.name)
        options[p.name] = value
    return options


def _isotropic_groups(props: Properties, t: base.BsdfType) -> set:
    """The groups read from their group name: none of their members given.
    Giving some members, or members and the group name, is an error, as in
    Mitsuba."""
    isotropic = set()
    for g in {p.group for p in t.params if p.group is not None}:
        members = [p.name for p in t.params if p.group == g]
        given = [m for m in members if m in props]
        if not given:
            isotropic.add(g)
        elif len(given) != len(members):
            raise props.error(f"give all of {', '.join(members)} (or {g} alone), not only {', '.join(given)}")
        elif g in props:
            raise props.error(f"give either {g} or {', '.join(members)}, not both")
    return isotropic


def _row(builder: SceneBuilder, props: Properties, t: base.BsdfType, fixed: dict,
         nested: list = ()) -> tuple[list, list]:
    """The row's fields (parameter key | constant | None for a texture,
    width) and texture slots [start, width, texture, luminance];
    ``nested``: a composite's nested BSDFs, for its BSDF Params in order."""
    isotropic = _isotropic_groups(props, t)
    fields, slots, start = [], [], 0
    children = iter(nested)
    for prm in t.params:
        width = prm.width()
        if width == 0:
            continue
        start += width
        if prm.kind == base.BSDF:
            name, spec = next(children)
            props.get(name)
            fields.append((float(builder.bsdf(spec, f"{props.key}.{prm.name}")), width))
            continue
        if prm.kind == base.TEXTURE:
            fields.append((float(_texture_child(builder, props, prm)), width))
            continue
        name = prm.group if prm.group in isotropic else prm.name
        if prm.kind in (base.COLOR, base.FLOAT) and name not in fixed:
            ti = builder.texture(props.get(name, prm.default), f"{props.key}.{name}", width)
            if ti is not None:
                fields.append((None, width))
                _add_slot(slots, start - width, width, ti, int(width == 1 and builder.textures[ti].channels == 3))
                continue
        fields.append((_READERS[prm.kind](builder, props, prm, name, fixed), width))
    return fields, slots


def _texture_child(builder: SceneBuilder, props: Properties, prm: base.Param) -> int:
    """A TEXTURE parameter: the plugin's one nested texture (any name, as
    Mitsuba's bumpmap takes it), loaded as ``<key>.<name>``; a bitmap, the
    only texture whose gradient the kernels compute."""
    found = [(name, spec) for name, spec in props.plugins() if builder.category(spec, name) == "texture"]
    if len(found) != 1:
        raise props.error(f"{props.plugin} takes one nested texture, got {len(found)}")
    name, spec = found[0]
    props.get(name)
    ti = builder.texture(spec, f"{props.key}.{prm.name}", 1)
    tex = builder.textures[ti] if ti is not None else None
    if tex is None or tex.kind != ktex.BITMAP or tex.plugin is not None:
        raise props.error(f"{props.plugin}: only a bitmap texture's gradient is supported, got "
                          f"{builder.resolve(spec, name)[0].get('type')!r}", name)
    return ti


def _add_slot(slots: list, start: int, width: int, texture: int, luminance: int) -> None:
    prev = slots[-1] if slots else None
    if prev is not None and prev[2] == texture and prev[3] == luminance and prev[0] + prev[1] == start:
        prev[1] += width   # alpha_u and alpha_v from one texture: one lookup
    else:
        slots.append([start, width, texture, luminance])


def _value_param(builder: SceneBuilder, props: Properties, prm: base.Param, name: str, fixed: dict) -> str:
    """A COLOR, FLOAT or SCALAR parameter's key (its value added once)."""
    plain = prm.kind == base.SCALAR
    pkey = f"{props.key}.{name}" if plain else f"{props.key}.{name}.value"
    if pkey not in builder.params:
        if prm.default is None and name not in props and name not in fixed:
            raise props.error(f"the {props.plugin} plugin needs the property {name!r}")
        if name in fixed:
            value = fixed[name]
            if prm.kind == base.COLOR:    # (a value a rule computed: stored as the variant stores colours)
                rgb = None if isinstance(value, Mapping) else np.asarray(value, np.float64)
                value = variants.encode_color(value, props.where(name, pkey), rgb=rgb)
        elif prm.kind == base.COLOR:
            value = props.rgb(name, prm.default, label=pkey)
        else:
            value = props.scalar(name, prm.default, label=pkey)
        builder.add_param(pkey, value, prm.nondiff, prm.frozen)
    return pkey


# BSDFs that take an IOR given as a spectrum (dispersion, spectral variant):
# the smooth dielectric's sampled refraction follows one wavelength.
DISPERSIVE = ("dielectric",)
DISPERSIVE_FROZEN = "a dispersive IOR's value refers to its curve (-(index + 1) of the scene's spectral curves)"


def _ior_param(builder: SceneBuilder, props: Properties, prm: base.Param, name: str, fixed: dict) -> str:
    """The relative IOR int_ior / ext_ior, as parameter ``<key>.<name>``; a
    side given as a tabulated spectrum makes it dispersive
    (``variants.encode_dispersive_ior``)."""
    pkey = f"{props.key}.{name}"
    sides = {}
    for side, default in (("int_ior", prm.default), ("ext_ior", "air")):
        curve = variants.tabulated(props.values.get(side), props.where(side))
        if curve is not None:
            props.mark_read(side)
        sides[side] = curve if curve is not None else props.ior(side, default)
    if any(isinstance(v, tuple) for v in sides.values()):
        if props.plugin not in DISPERSIVE:
            side = next(k for k, v in sides.items() if isinstance(v, tuple))
            raise props.error(f"an index of refraction given as a spectrum (dispersion) is supported by "
                              f"{', '.join(DISPERSIVE)} only, not yet by {props.plugin}", side)
        value = variants.encode_dispersive_ior(sides["int_ior"], sides["ext_ior"], props.where(name, pkey))
        builder.add_param(pkey, np.array(value), prm.nondiff, DISPERSIVE_FROZEN)
        return pkey
    builder.add_param(pkey, np.array(sides["int_ior"] / sides["ext_ior"]), prm.nondiff)
    return pkey


def _flag(builder: SceneBuilder, props: Properties, prm: base.Param, name: str, fixed: dict) -> float:
    return float(props.bool(name, prm.default))


def _array_param(builder: SceneBuilder, props: Properties, prm: base.Param, name: str, fixed: dict) -> float:
    """An ARRAY parameter: its values become a DATA texture; the row holds
    the texture's index."""
    pkey = f"{props.key}.{name}"
    builder.add_param(pkey, props.floats(name, prm.default, prm.size), prm.nondiff)
    return float(builder.add_texture(TextureSpec(ktex.DATA, (pkey,), prm.size, 1, 1)))


_READERS: dict[str, Callable] = {base.COLOR: _value_param, base.FLOAT: _value_param, base.SCALAR: _value_param,
                                 base.IOR: _ior_param, base.FLAG: _flag, base.ARRAY: _array_param}


# ---------------------------------------------------------------------------
# Mitsuba's rules beyond the Param declarations: plugin -> rule(props),
# which checks and returns values for Params not to be read from props.
# ---------------------------------------------------------------------------
def _roughplastic(props: Properties) -> dict:
    """What Mitsuba's roughplastic rejects, and what jaxrender does not do yet."""
    if "alpha_u" in props or "alpha_v" in props:
        raise props.error("roughplastic does not support anisotropic roughness (alpha_u / alpha_v); use alpha")
    if props.values.get("sample_visible", True) is False:
        raise props.error("roughplastic without visible-normal sampling is not supported yet", "sample_visible")
    alpha = props.values.get("alpha")
    if alpha is not None and not isinstance(alpha, Mapping):
        try:
            a = np.asarray(alpha, np.float64)
        except (TypeError, ValueError):
            a = None
        if a is not None and a.size == 1 and not (np.isfinite(a) and 0.0 < float(a) <= 4.0):
            raise props.error(f"roughness must be in (0, 4], got {float(a)}", "alpha")
    return _iors_differ(props)


def _iors_differ(props: Properties) -> dict:
    """Mitsuba's plastics: the two indices of refraction must differ."""
    if props.ior("int_ior", "polypropylene") / props.ior("ext_ior", "air") == 1.0:
        raise props.error("int_ior and ext_ior must differ")
    return {}


def _conductor_material(props: Properties) -> dict:
    """Mitsuba's ``material``: eta and k of a named conductor, unless
    ``eta`` is given (then material must be "none"; ``k`` beside a material
    is an unread property, as in Mitsuba)."""
    material = props.string("material", "none")
    if "eta" in props or material == "none":
        if material != "none":
            raise props.error(f"give either eta and k or material ({material!r}), not both", "material")
        return {}
    try:
        eta, k = complex_ior(material)
    except KeyError as exc:
        raise props.error(exc.args[0], "material") from None
    props.hint("k", f"material {material!r} sets eta and k")
    if variants.current() == "spectral":      # the measured spectra themselves
        return {part: {"type": "spectrum", "value": list(zip(*measured_ior(material, part)))} for part in ("eta", "k")}
    return {"eta": eta, "k": k}


def _principled(props: Properties) -> dict:
    """Mitsuba's principled: the IOR is given as eta or as specular (one of
    them), and the transmission lobe exists where spec_trans is given and is
    not the float 0 (its trace-time variants)."""
    if "eta" in props and "specular" in props:
        raise props.error("give either eta or specular, not both (as Mitsuba)", "specular")
    return {"transmission": _has_spec_trans(props.values), "ior": "eta" if "eta" in props else "specular"}


def _has_spec_trans(values: Mapping) -> bool:
    """Whether a principled has its transmission lobe: spec_trans given and
    not the float 0 (Mitsuba's flag)."""
    spec_trans = values.get("spec_trans")
    absent = spec_trans is None or (isinstance(spec_trans, (int, float)) and not isinstance(spec_trans, bool)
                                    and float(spec_trans) == 0.0)
    return not absent


PLUGIN_RULES: dict[str, Callable[[Properties], dict]] = {
    "roughplastic": _roughplastic, "pplastic": _iors_differ, "conductor": _conductor_material,
    "roughconductor": _conductor_material, "principled": _principled}


@BSDFS.register("twosided")
def load_twosided(builder: SceneBuilder, props: Properties, twosided: bool = False) -> int:
    """Mitsuba's ``twosided``: one nested BSDF seen from both sides (its row
    flagged twosided), or two (front, back): the ``twosided`` composite."""
    if twosided:
        raise props.error("a twosided BSDF inside a twosided BSDF is not supported yet")
    nested = [(name, *builder.resolve(spec, f"{props.key}.brdf_{i}"))
              for i, (name, spec) in enumerate((n, s) for n, s in props.plugins() if builder.category(s, n) == "bsdf")]
    if not nested:
        raise props.error("twosided needs a nested bsdf")
    if len(nested) > 2:
        raise props.error(f"twosided takes at most two nested BSDFs, got {len(nested)}")
    allow = props.bool("allow_transmission", False)
    for _, inner, _ in nested:
        transmits = _transmissive(builder, inner)
        if transmits and not allow:
            raise props.error(f"twosided cannot hold a transmissive BSDF ({transmits[0]}) unless "
                              "allow_transmission is set, as in Mitsuba")
    # (with allow_transmission a transmissive child is seen from behind as
    # from its front, both directions' z flipped, as Mitsuba's twosided does)
    _, inner, inner_key = nested[0]
    if len(nested) == 2 and (nested[1][2] != inner_key or nested[1][1] is not inner):
        return load_registered(builder, props)
    for name, _, _ in nested:
        props.get(name)
    return load_plugin(BSDFS, builder, inner, inner_key, True)


def _transmissive(builder: SceneBuilder, spec: Mapping) -> list[str]:
    """The plugin types in BSDF ``spec`` (nested ones included) that transmit
    light, as Mitsuba's flags count it (a mask's null component too)."""
    kind = spec.get("type")
    if kind == "principled":
        transmits = _has_spec_trans(spec)
    else:
        transmits = any(t.transmissive for t in bsdf_registry.variants(kind))
    found = ["mask"] if kind == "mask" else [kind] if transmits else []
    for name, child in spec.items():
        if name not in ("type", "id") and isinstance(child, Mapping) and builder.category(child, name) == "bsdf":
            found += _transmissive(builder, builder.resolve(child, name)[0])
    return found
