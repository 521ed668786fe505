"""What a BSDF plugin declares: its Mitsuba parameters (``params.Param``) and its kernel code.

A BSDF module defines ``eval``, ``pdf`` and ``sample`` (see the package
docstring) and one :class:`BsdfType` per trace-time variant (e.g. one per
microfacet distribution), then is listed in ``registry.py``. The scene
builder reads each :class:`Param` from the plugin's Mitsuba properties into
one row of the ``bsdf_data`` buffer (``layout.BSDF_ROW`` floats, in
declaration order); in the kernel, ``make`` turns a :class:`ParamView` of
that row into the module's params object.

Example (a Lambertian BSDF)::

    TYPE = BsdfType("diffuse", "diffuse", (Param("reflectance", COLOR, 0.5),),
                    lambda p: DiffuseParams(p.reflectance), eval, pdf, sample, albedo="reflectance")

A *composite* BSDF (blendbsdf, mask, twosided with two BSDFs) declares its
nested BSDFs as ``BSDF`` parameters (the row holds their BSDF indices) and
gives ``query`` and ``mix_albedo`` instead of ``eval`` / ``pdf`` /
``sample``: they see their children through ``surface.Nested`` (see
``surface.py``), so children are evaluated by the same dispatch as any
BSDF at a hit.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ... import ir
from ...ir import Vec
from .. import spectrum
from .. import layout
from ..params import ARRAY, BSDF, COLOR, FLAG, FLOAT, IOR, KINDS, OPTION, SCALAR, TEXTURE, ArrayView, Param

__all__ = ["ARRAY", "BSDF", "COLOR", "FLAG", "FLOAT", "IOR", "KINDS", "OPTION", "SCALAR", "TEXTURE", "ArrayView",
           "Param",
           "BsdfType", "ParamView", "MAX_NESTING"]

# How deep composite BSDFs may nest (a blend of blends is 2): a trace-time
# bound, since each level is traced as its own dispatch over the scene's types.
MAX_NESTING = 3


@dataclasses.dataclass(frozen=True)
class BsdfType:
    """One kernel-side BSDF implementation.

    ``name``: unique in the registry (``"roughconductor-ggx"``); ``plugin``:
    the Mitsuba type name that selects it, with ``options`` the values of its
    OPTION parameters this variant stands for. ``make(view)`` builds the
    params object from a :class:`ParamView`; ``eval``, ``pdf`` and ``sample``
    take it (see the package docstring), with ``kw`` as trace-time keyword
    arguments.
    ``table``: (microfacet distribution, alpha parameter, eta parameter) of
    the rough-coating table ``primitives/bsdf_tables.py`` precomputes per
    BSDF (roughplastic), else None.
    ``albedo``: the colour parameter Mitsuba's ``eval_diffuse_reflectance``
    returns (the albedo AOV), None for pi * eval(wi, normal). ``eta``: the
    relative-IOR parameter by which a sampled refraction scales the path's
    eta (Russian roulette), or a function of a :class:`ParamView` returning
    it (an IOR derived from other, untextured parameters), None if sampled
    interactions have eta 1.
    ``query`` / ``mix_albedo``: a composite's code (then ``eval``, ``pdf``
    and ``sample`` are None): ``query(params, nested, wi, wos, u) -> (evals,
    sample)``, ``mix_albedo(params, nested, wi) -> Vec`` (``surface.py``).
    ``null``: it can sample Mitsuba's null component (a pass-through).
    ``null_transmission``: a composite's Mitsuba ``eval_null_transmission``,
    ``(params, nested, wi) -> Float``: the fraction of light its null
    component lets straight through (what a shadow ray crossing it keeps,
    under volpath). A composite without one has none; a plain type has 1
    if it is ``null``, else none.
    ``frame``: a composite that perturbs the shading frame (normalmap,
    bumpmap): scenes with it compute the hit's dp_du / dp_dv.
    ``delta``: it has a Dirac lobe (a smooth conductor, dielectric or
    plastic coating): what it reflects moves with the direction it is seen
    from, a derivative detached sampling cannot take (camera motion).
    ``anisotropic``: its lobes may depend on the azimuth in the shading
    frame (alpha_u != alpha_v, principled's anisotropic): scenes with it
    build Mitsuba's frame, whose first axis follows dp_du.
    ``polarizing``: in polarized variants its ``eval`` / ``sample`` may
    return a Mueller matrix per channel (``SpectrumType.from_matrices``) in
    the local frame, mapping Stokes vectors of light arriving along ``-wo``
    (basis ``mueller.stokes_basis(-wo)``) to light leaving along ``wi``
    (``stokes_basis(wi)``), as Mitsuba's pBSDFs; a colour from any BSDF is
    a depolarizer (a pass-through's: the identity times it)."""
    name: str
    plugin: str
    params: tuple
    make: Callable
    eval: Callable
    pdf: Callable
    sample: Callable
    options: tuple = ()
    kw: tuple = ()
    table: tuple | None = None
    albedo: str | None = None
    eta: str | Callable | None = None
    transmissive: bool = False
    query: Callable | None = None
    mix_albedo: Callable | None = None
    null: bool = False
    frame: bool = False
    anisotropic: bool = False
    null_transmission: Callable | None = None
    delta: bool = False
    polarizing: bool = False

    @property
    def composite(self) -> bool:
        return self.query is not None

    def __post_init__(self):
        used = sum(p.width() for p in self.params)
        if used > layout.TWOSIDED_SLOT:
            raise ValueError(f"BSDF {self.name!r}: its parameters take {used} floats of a row, more than the "
                             f"{layout.TWOSIDED_SLOT} a row has (store large parameters as ARRAY)")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"BSDF {self.name!r}: duplicate parameter names {names}")
        if "table" in names:
            raise ValueError(f"BSDF {self.name!r}: 'table' is reserved (ParamView.table)")
        declared = {p.name for p in self.params if p.kind == OPTION}
        if any(p.kind == BSDF for p in self.params) != self.composite:
            raise ValueError(f"BSDF {self.name!r}: nested BSDF parameters need a composite's query, and a query "
                             "nested BSDF parameters")
        if {k for k, _ in self.options} != declared:
            raise ValueError(f"BSDF {self.name!r}: options {self.options} must give a value for each OPTION "
                             f"parameter {sorted(declared)}")

    def call(self, what: str, *args):
        return getattr(self, what)(*args, **dict(self.kw))

    def slot(self, name: str) -> int:
        """Row offset of parameter ``name``."""
        start = 0
        for p in self.params:
            if p.name == name:
                return start
            start += p.width()
        raise KeyError(f"BSDF {self.name!r} has no parameter {name!r}")

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"BSDF {self.name!r} has no parameter {name!r} (it has {', '.join(q.name for q in self.params)})")


def black() -> Vec:
    """A black colour in the traced kernel's colour type (one zero constant,
    shared by its channels)."""
    return spectrum.black()


class ParamView:
    """A BSDF row seen through its type's parameters: ``view.reflectance``
    (a Spectrum for COLOR, a Float otherwise, an :class:`ArrayView` for
    ARRAY, a nested BSDF's index for BSDF, a texture's for TEXTURE, None for OPTION), ``view.table`` (its precomputed table, if any)."""

    def __init__(self, t: BsdfType, row: list, table=None, buffers: dict | None = None, spectrum=None):
        self._t, self._row, self.table, self._b = t, row, table, buffers
        self._spectrum = spectrum

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            p = self._t.param(name)
        except KeyError as exc:       # a typo in a plugin's eval: say which names exist
            raise AttributeError(exc.args[0]) from None
        k = self._t.slot(name)
        if p.kind == COLOR:
            stored = self._row[k:k + p.width()]
            return Vec(*stored) if self._spectrum is None else self._spectrum.color(stored)
        if p.kind == OPTION:
            return dict(self._t.options)[name]
        if p.kind in (BSDF, TEXTURE):
            return ir.cast(self._row[k], "i32")
        if p.kind == ARRAY:
            tex = ir.cast(self._row[k], "i32")
            offset = self._b["tex_meta"].read(tex, layout.TEX_OFFSET)
            return ArrayView(self._b["texels"], offset, p.size)
        return self._row[k]
