"""The BSDF plugins: Mitsuba type names and the kernel variants behind them.

Adding a BSDF to the package: write its module (params, ``eval`` / ``pdf`` /
``sample`` and its :class:`~.base.BsdfType`, see ``base.py``) and list its
type(s) in ``_BUILTIN`` below. A user adds one from their own script with
:func:`register` (``jaxrender.plugins.register_bsdf``).

A kernel dispatches over the types one scene uses (``context.Structure.bsdfs``,
in registry order), so a BSDF costs nothing in scenes without it, and a
type's id is its position in that tuple. Composite BSDFs (blendbsdf, mask,
twosided with two BSDFs) are types like the others whose rows name their
children (``surface.py``).

Example::

    t = select("roughconductor", {"distribution": "ggx", "sample_visible": True})
    t.name                                   # "roughconductor-ggx"
"""
from __future__ import annotations

from . import (blendbsdf, bumpmap, circular, conductor, dielectric, diffuse, mask, normalmap, null, plastic,
               polarizer, pplastic, principled, principledthin, retarder, roughconductor, roughdielectric,
               roughplastic, thindielectric, twosided)
from ..params import add_plugin
from .base import OPTION, BsdfType

_BUILTIN = (diffuse.TYPE, conductor.TYPE, *roughconductor.TYPES, *plastic.TYPES, dielectric.TYPE,
            thindielectric.TYPE, *roughdielectric.TYPES, *roughplastic.TYPES, *pplastic.TYPES, *principled.TYPES,
            principledthin.TYPE, null.TYPE, polarizer.TYPE, retarder.TYPE, circular.TYPE, blendbsdf.TYPE,
            mask.TYPE, twosided.TYPE, normalmap.TYPE, bumpmap.TYPE)
TYPES: dict[str, BsdfType] = {t.name: t for t in _BUILTIN}
BUILTIN_NAMES = tuple(TYPES)
# The plain (not composite) built-in types but null: what a Structure holds by
# default (a null type would make every default kernel track pass-throughs).
DEFAULT_NAMES = tuple(n for n in BUILTIN_NAMES if not TYPES[n].composite and not TYPES[n].null)
# Registration hooks (e.g. clearing traced-kernel caches when a type is replaced).
_on_change: list = []


def plugins() -> set[str]:
    """Mitsuba type names of every registered BSDF."""
    return {t.plugin for t in TYPES.values()}


def variants(plugin: str) -> list[BsdfType]:
    return [t for t in TYPES.values() if t.plugin == plugin]


def select(plugin: str, options: dict) -> BsdfType:
    """The variant of ``plugin`` for the given OPTION values."""
    for t in variants(plugin):
        if dict(t.options) == options:
            return t
    raise KeyError(f"no {plugin!r} BSDF for options {options}")


def option_params(plugin: str) -> list:
    """The OPTION parameters of ``plugin`` (those of its first variant)."""
    vs = variants(plugin)
    return [p for p in vs[0].params if p.kind == OPTION] if vs else []


def ordered(names) -> tuple[str, ...]:
    """``names`` in registry order, without repeats: a scene's dispatch order."""
    wanted = set(names)
    unknown = wanted - set(TYPES)
    if unknown:
        raise KeyError(f"unknown BSDF type(s) {sorted(unknown)}")
    return tuple(n for n in TYPES if n in wanted)


def register(t: BsdfType, replace: bool = False) -> BsdfType:
    """Add a BSDF type (a user's plugin). Its ``plugin`` name must not be a
    built-in one; registering a name again needs ``replace=True``."""
    if not isinstance(t, BsdfType):
        raise TypeError(f"register expects a BsdfType, got {type(t).__name__}")
    if t.plugin in {TYPES[n].plugin for n in BUILTIN_NAMES}:
        raise ValueError(f"{t.plugin!r} is a built-in BSDF and cannot be replaced")
    others = [v for v in variants(t.plugin) if v.name != t.name]
    if others and {p.name for p in others[0].params if p.kind == OPTION} != dict(t.options).keys():
        raise ValueError(f"BSDF {t.name!r}: variants of {t.plugin!r} must declare the same OPTION parameters")
    add_plugin(TYPES, t.name, t, "BSDF", BUILTIN_NAMES, replace, _on_change)
    return t
