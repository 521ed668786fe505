"""BSDF types the path kernel can dispatch over, and how their parameters
sit in a row of the ``bsdf_data`` buffer.

Adding a BSDF: write its module (eval / pdf / sample, see the package
docstring), then add one ``BsdfType`` here with its row layout. The scene
builder (``jaxrender.scene.scene``) fills rows from Mitsuba's parameter
names listed in ``fields``; the kernel rebuilds the params from the row.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ...ir import Vec
from . import (conductor, dielectric, diffuse, plastic, roughconductor, roughdielectric, roughplastic,
               thindielectric)

ROW = 12          # floats per BSDF row; the last one is the twosided flag
TWOSIDED_SLOT = ROW - 1


@dataclasses.dataclass(frozen=True)
class BsdfType:
    name: str
    module: object
    fields: tuple            # (Mitsuba parameter name, width, default), in row order
    make: Callable           # row values -> params object; (row, table) if ``table`` is set
    kw: tuple = ()           # trace-time keywords of eval / pdf / sample
    # Fields whose derivative the detached-sampling adjoint cannot give
    # (they move the sampled direction itself, e.g. a refracting IOR).
    nondiff: tuple = ()
    # A precomputed per-BSDF table (primitives/bsdf_tables.py):
    # (distribution, alpha slot, eta slot) in the row; ``make`` then also
    # gets a reader of the BSDF's table (``read(i)``).
    table: tuple | None = None
    # Fields that are Mitsuba scalars, not textures: traverse key without
    # ".value" (e.g. roughplastic's ``alpha``).
    plain_keys: tuple = ()
    # Row slot of the rgb diffuse reflectance Mitsuba's
    # ``eval_diffuse_reflectance`` returns (the albedo AOV); None: the
    # default, pi * eval(wi, normal).
    albedo_slot: int | None = None
    # Row slot of the relative IOR (interior / exterior) by which a sampled
    # refraction scales the path's eta (Mitsuba's BSDFSample3f::eta, used by
    # Russian roulette); None: sampled interactions have eta 1.
    eta_slot: int | None = None

    def call(self, what: str, *args):
        return getattr(self.module, what)(*args, **dict(self.kw))


def _v(r, i):
    return Vec(r[i], r[i + 1], r[i + 2])


def _rough(distribution: str) -> BsdfType:
    return BsdfType(
        f"roughconductor-{distribution}", roughconductor,
        (("eta", 3, 0.0), ("k", 3, 1.0), ("specular_reflectance", 3, 1.0), ("alpha_u", 1, 0.1),
         ("alpha_v", 1, 0.1)),
        lambda r: roughconductor.RoughConductorParams(r[9], r[10], _v(r, 0), _v(r, 3), _v(r, 6)),
        (("distribution", distribution),))


def _plastic(nonlinear: bool) -> BsdfType:
    # An "eta" field with a string default is int_ior / ext_ior (default
    # int_ior named by the string); the scene builder resolves named IORs.
    return BsdfType(
        "plastic-nonlinear" if nonlinear else "plastic", plastic,
        (("diffuse_reflectance", 3, 0.5), ("specular_reflectance", 3, 1.0), ("eta", 1, "polypropylene")),
        lambda r: plastic.PlasticParams(r[6], _v(r, 0), _v(r, 3), nonlinear=nonlinear), albedo_slot=0)


def _rough_plastic(distribution: str) -> BsdfType:
    # "nonlinear" with a bool default is a flag in the row, not a parameter.
    return BsdfType(
        f"roughplastic-{distribution}", roughplastic,
        (("diffuse_reflectance", 3, 0.5), ("specular_reflectance", 3, 1.0), ("eta", 1, "polypropylene"),
         ("alpha", 1, 0.1), ("nonlinear", 1, False)),
        lambda r, table: roughplastic.RoughPlasticParams(r[6], r[7], _v(r, 0), _v(r, 3), r[8] > 0.5,
                                                         table.read(roughplastic.RES), table),
        (("distribution", distribution),), table=(distribution, 7, 6), plain_keys=("alpha",), albedo_slot=0)


_GLASS = (("specular_reflectance", 3, 1.0), ("specular_transmittance", 3, 1.0), ("eta", 1, "bk7"))


def _rough_glass(distribution: str) -> BsdfType:
    return BsdfType(
        f"roughdielectric-{distribution}", roughdielectric,
        _GLASS + (("alpha_u", 1, 0.1), ("alpha_v", 1, 0.1)),
        lambda r: roughdielectric.RoughDielectricParams(r[6], r[7], r[8], _v(r, 0), _v(r, 3)),
        (("distribution", distribution),), ("eta",), eta_slot=6)


TYPES = [
    BsdfType("diffuse", diffuse, (("reflectance", 3, 0.5),), lambda r: diffuse.DiffuseParams(_v(r, 0)),
             albedo_slot=0),
    BsdfType("conductor", conductor, (("eta", 3, 0.0), ("k", 3, 1.0), ("specular_reflectance", 3, 1.0)),
             lambda r: conductor.ConductorParams(_v(r, 0), _v(r, 3), _v(r, 6))),
    _rough("beckmann"),
    _rough("ggx"),
    _plastic(False),
    _plastic(True),
    BsdfType("dielectric", dielectric, _GLASS,
             lambda r: dielectric.DielectricParams(r[6], _v(r, 0), _v(r, 3)), nondiff=("eta",), eta_slot=6),
    BsdfType("thindielectric", thindielectric, _GLASS,
             lambda r: thindielectric.ThinDielectricParams(r[6], _v(r, 0), _v(r, 3)), nondiff=("eta",)),
    _rough_glass("beckmann"),
    _rough_glass("ggx"),
    _rough_plastic("beckmann"),
    _rough_plastic("ggx"),
]
TYPE_INDEX = {t.name: i for i, t in enumerate(TYPES)}
PLUGINS = {t.name.split("-")[0] for t in TYPES}   # Mitsuba plugin names
