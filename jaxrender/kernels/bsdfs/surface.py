"""The BSDF of the surface at an interaction, as integrators use it.

:class:`SurfaceBsdf` reads the hit's BSDF row (textured parameters looked
up at the hit's UV), and dispatches ``eval`` / ``pdf`` / ``sample`` over
the BSDF types of the scene (``Structure.bsdfs``). A twosided BSDF is
evaluated as if seen from its front. Its row reads are the differentiable
parameter reads of shading: call it where derivatives are wanted.

A composite BSDF (``BsdfType.query``: blendbsdf, mask, twosided with two
BSDFs) holds its children's BSDF indices in its row; it evaluates them
through :class:`Nested`, which reads their rows and dispatches over the
scene's types once more, so a child may itself be any BSDF, composites
included down to ``Structure.bsdf_nesting`` levels. A composite's
``query(params, nested, wi, wos, u)`` returns its (value, pdf) towards each
direction of ``wos`` and, given ``u = (u1, u2)``, a :class:`Sample`; in
differentiable form its sample weight carries the derivative of the
estimate with the sampled direction and choices held fixed.

Example::

    bsdf = SurfaceBsdf(ctx, si)
    f, pdf, s = bsdf.query(wo_light, u1, u2)        # s: a Sample (s.wo, s.pdf, s.weight, s.delta)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import layout, mueller, spectrum, textures
from .base import ParamView


class TableRow:
    """Reader of one BSDF's precomputed table in the ``bsdf_table`` buffer."""

    def __init__(self, buf, bsdf):
        self.buf = buf
        self.base = ir.cast(bsdf, "u32") * ir.UInt(layout.BSDF_TABLE_STRIDE)

    def read(self, i):
        return self.buf.read(self.base + (i if isinstance(i, ir.Var) else ir.UInt(i)))


def continuation_weight(t, params, wi: Vec, wo: Vec, pdf, weight: Vec, delta, diff: bool) -> Vec:
    """The BSDF sample weight f/pdf. In differentiable form the sampled
    direction and pdf are constants (detached sampling): for a smooth lobe
    the derivative is that of eval(wo) / pdf; for a delta lobe, whose
    weight is value / (discrete lobe probability), the probability's
    derivative is cancelled by multiplying with pdf / detach(pdf)."""
    if not diff:
        return weight
    wo_d = ir.detach(wo)
    pdf_d = ir.detach(pdf)
    e = t.call("eval", params, wi, wo_d)
    if len(e) != len(weight):       # a polarizing BSDF's colour eval beside its Mueller weight
        e = spectrum.active().as_path(e, t.null)
    safe = pdf_d > 0.0
    inv_pdf = ir.select(safe, 1.0 / ir.select(safe, pdf_d, 1.0), 0.0)
    smooth = ir.detach(weight) + (e - ir.detach(e)) * inv_pdf
    ratio = ir.select(safe, pdf / ir.select(safe, pdf_d, 1.0), 0.0)
    return ir.select(delta, weight * ratio, smooth)


@dataclasses.dataclass
class Sample:
    """A sampled direction (local frame) with its pdf, its weight f cos / pdf,
    whether it is a delta lobe and, in scenes with a composite that can
    pass light through (mask; else None): whether it is that null component,
    and the probability of the choices that decided it (1 for a plain BSDF),
    whose derivative the path tracer needs (see ``path.py``)."""
    wo: Vec
    pdf: Any
    weight: Vec
    delta: Any
    null: Any = None
    choice: Any = None


def samples_null(structure) -> bool:
    """Whether BSDFs of the structure can sample a null (pass-through) component."""
    return any(t.null for t in structure.bsdf_types)


def _side(row: list, wi: Vec):
    """The z sign that turns ``wi`` to the front of a twosided BSDF row (1 for a one-sided one)."""
    return ir.select((row[layout.TWOSIDED_SLOT] > 0.5) & (wi.z < 0.0), -1.0, 1.0)


def _flip(v: Vec, sz) -> Vec:
    return Vec(v.x, v.y, v.z * sz)


class SurfaceBsdf:
    """The BSDF at interaction ``si`` (see the module docstring)."""

    def __init__(self, ctx, si):
        self.ctx, self.si = ctx, si
        self.row, self.kind, self.table = self.read(si.attr_bsdf)
        self.types = ctx.structure.bsdf_types
        # Scenes with a composite that samples a pass-through report it (Sample.null).
        self.null = samples_null(ctx.structure)

    def read(self, bsdf):
        """(row with its textured values looked up at the hit, type id, table) of BSDF ``bsdf``."""
        b, si, st = self.ctx.b, self.si, self.ctx.structure
        row = [b["bsdf_data"].read(bsdf, k) for k in range(layout.BSDF_ROW)]
        if st.tex_slots:
            row = textures.apply_textures(b, bsdf, row, si.prim, si.b1, si.b2, si.hit, st.tex_slots, st.textures,
                                          self.ctx.spectrum.spectral)
        return row, b["bsdf_type"][bsdf], TableRow(b["bsdf_table"], bsdf)

    def params(self, t, row=None, table=None):
        """The params object of BSDF type ``t`` from this row (or ``row``)."""
        row, table = (self.row, self.table) if row is None else (row, table)
        return t.make(ParamView(t, row, table, self.ctx.b, self.ctx.spectrum))

    def _front(self, wi: Vec):
        """(wi as the BSDF sees it, z sign): a twosided BSDF seen from behind is evaluated from its front."""
        sz = _side(self.row, wi)
        return Vec(wi.x, wi.y, wi.z * sz), sz

    def leaf(self, t, params, wi: Vec, wos: list, u):
        """A plain BSDF's (value, pdf) towards each of ``wos`` and, given
        ``u`` = (u1, u2), a :class:`Sample` (None without)."""
        S = self.ctx.spectrum
        evals = [(S.as_path(t.call("eval", params, wi, wo), t.null), t.call("pdf", params, wi, wo)) for wo in wos]
        if u is None:
            return evals, None
        wo, pdf_s, weight, delta = t.call("sample", params, wi, *u)
        weight = S.as_path(continuation_weight(t, params, wi, wo, pdf_s, weight, delta, self.ctx.diff), t.null)
        if t.null:     # a plain null type (the null BSDF): its only sample passes through
            return evals, Sample(wo, pdf_s, weight, delta, ir.Bool(True), ir.Float(1.0))
        return evals, Sample(wo, pdf_s, weight, delta, *self.not_null())

    def not_null(self) -> tuple:
        """(null, choice) of a sample that is not a null one."""
        return (ir.Bool(False), ir.Float(1.0)) if self.null else (None, None)

    def query(self, wo_light: Vec, u1, u2: Vec):
        """Everything a path vertex needs in one dispatch: (value and pdf
        towards the light sample ``wo_light``, a :class:`Sample` with the
        continuation weight). Directions are local (shading frame); in
        differentiable form sampling is detached."""
        wi_f, sz = self._front(self.si.wi)
        wl_f = Vec(wo_light.x, wo_light.y, wo_light.z * sz)

        def branch(t):
            def run():
                params = self.params(t)
                if t.composite:
                    evals, s = t.query(params, Nested(self, 1), wi_f, [wl_f], (u1, u2))
                else:
                    evals, s = self.leaf(t, params, wi_f, [wl_f], (u1, u2))
                (f, pdf), = evals
                return f, pdf, dataclasses.replace(s, wo=Vec(s.wo.x, s.wo.y, s.wo.z * sz))
            return run

        f, pdf, s = ir.dispatch(self.kind, [branch(t) for t in self.types])
        if self.ctx.spectrum.polarized and any(t.polarizing for t in self.types):
            f = self.to_world_mueller(f, -wo_light)
            # (the sampled direction's basis as traced: detached sampling holds
            # the direction, and what arrives along it is in that basis)
            s = dataclasses.replace(s, weight=self.to_world_mueller(s.weight, -ir.detach(s.wo)))
        return f, pdf, s

    @staticmethod
    def no_query(ctx):
        """What :meth:`query` gives where no surface was hit (the other side
        of a branch that skips the BSDF there): zero value and pdf, a sample
        of weight 0 (whose direction no path follows)."""
        S = ctx.spectrum
        null = (ir.Bool(False), ir.Float(1.0)) if samples_null(ctx.structure) else (None, None)
        return S.zero(), ir.Float(0.0), Sample(Vec(0.0, 0.0, 1.0), ir.Float(0.0), S.zero(), ir.Bool(False), *null)

    def to_world_mueller(self, value: Vec, in_forward: Vec) -> Vec:
        """A polarized BSDF value of the local frame (light arriving along
        ``in_forward``, leaving along ``wi``, in the implicit Stokes bases of
        those local directions) for the same directions in world space,
        where Stokes vectors are in the bases of the world directions
        (Mitsuba's ``SurfaceInteraction::to_world_mueller``)."""
        S, frame, wi = self.ctx.spectrum, self.si.frame, self.si.wi
        in_world, out_world = frame.to_world(in_forward), frame.to_world(wi)
        bases = (in_world, frame.to_world(mueller.stokes_basis(in_forward)), mueller.stokes_basis(in_world),
                 out_world, frame.to_world(mueller.stokes_basis(wi)), mueller.stokes_basis(out_world))
        return S.from_matrices([mueller.rotate_mueller_basis(S.matrix(value, c), *bases) for c in range(S.channels)])

    def leaf_albedo(self, t, row, params, wi: Vec) -> Vec:
        if t.albedo is not None:
            k = t.slot(t.albedo)
            return self.ctx.spectrum.color(row[k:k + t.param(t.albedo).width()])
        # (the normal as traced values: a polarizing BSDF's frames take the direction apart)
        value = t.call("eval", params, wi, Vec(*(ir.Float(x) for x in (0.0, 0.0, 1.0)))) * math.pi
        # a polarizing BSDF's Mueller matrix: its unpolarized part (Mitsuba's unpolarized_spectrum)
        return self.ctx.spectrum.intensity(value)

    def albedo(self) -> Vec:
        """Mitsuba's ``eval_diffuse_reflectance``: the diffuse reflectance
        where the type names one, else pi * eval(wi, normal); a composite
        mixes its children's."""
        wi, _ = self._front(self.si.wi)

        def branch(t):
            def run():
                if t.composite:
                    return t.mix_albedo(self.params(t), Nested(self, 1), wi)
                return self.leaf_albedo(t, self.row, self.params(t), wi)
            return run

        return ir.dispatch(self.kind, [branch(t) for t in self.types])

    def null_transmission(self):
        """Mitsuba's ``eval_null_transmission``: the fraction of light that
        passes straight through the surface (1 for null, 1 - opacity for a
        mask of an opaque BSDF, ...; 0 for a BSDF without a null component)."""
        wi, _ = self._front(self.si.wi)
        return ir.dispatch(self.kind, [_null_transmission_of(t, lambda t=t: self.params(t), Nested(self, 1), wi)
                                       for t in self.types])


def _null_transmission_of(t, params, nested: "Nested", wi: Vec):
    """Branch of a dispatch: BSDF type ``t``'s null transmission (``params()``
    its params; ``nested`` its children, if a composite)."""
    if t.null_transmission is not None:
        return lambda: t.null_transmission(params(), nested, wi)
    return lambda: ir.Float(1.0 if t.null and not t.composite else 0.0)


def passes_light(structure) -> bool:
    """Whether a surface of the structure can let a shadow ray through
    partly (a composite with a null component somewhere inside, e.g. a
    mask), beyond the null BSDF's all-or-nothing."""
    return samples_null(structure) and any(t.null_transmission is not None for t in structure.bsdf_types)


class _PlainRow:
    """A BSDF's row as stored (no textures), read where indexed."""

    def __init__(self, buf, bsdf):
        self.buf, self.bsdf = buf, bsdf

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.buf.read(self.bsdf, j) for j in range(*k.indices(layout.BSDF_ROW))]
        return self.buf.read(self.bsdf, k)


class Nested:
    """How a composite BSDF sees its nested BSDFs at the hit: by BSDF index,
    each read (textures applied) and evaluated through the same dispatch over
    the scene's types. ``level``: the nesting depth of the children; at the
    scene's deepest level (``Structure.bsdf_nesting``) composites are not
    traced again."""

    def __init__(self, surface: SurfaceBsdf, level: int):
        self.surface, self.level = surface, level
        self.diff = surface.ctx.diff
        self.detach = surface.ctx.detach
        self.spectrum = surface.ctx.spectrum

    def _traced(self, t) -> bool:
        return not t.composite or self.level < self.surface.ctx.structure.bsdf_nesting

    def query(self, bsdf, wi: Vec, wos: list, u=None):
        """BSDF ``bsdf``'s (value, pdf) towards each of ``wos`` and, given
        ``u`` = (u1, u2), a :class:`Sample` (None without), for incident
        ``wi`` (all local)."""
        sf = self.surface
        row, kind, table = sf.read(bsdf)
        sz = _side(row, wi)
        wi_f, wos_f = _flip(wi, sz), [_flip(w, sz) for w in wos]

        def branch(t):
            def run():
                if not self._traced(t):
                    return self._nothing(len(wos), u)
                params = sf.params(t, row, table)
                if t.composite:
                    return t.query(params, Nested(sf, self.level + 1), wi_f, wos_f, u)
                return sf.leaf(t, params, wi_f, wos_f, u)
            return run

        evals, s = ir.dispatch(kind, [branch(t) for t in sf.types])
        if s is not None:
            s = dataclasses.replace(s, wo=_flip(s.wo, sz))
        return evals, s

    def albedo(self, bsdf, wi: Vec) -> Vec:
        """BSDF ``bsdf``'s ``eval_diffuse_reflectance`` for incident ``wi``."""
        sf = self.surface
        row, kind, table = sf.read(bsdf)
        wi_f = _flip(wi, _side(row, wi))

        def branch(t):
            def run():
                if not self._traced(t):
                    return self.spectrum.full(0.0)
                params = sf.params(t, row, table)
                if t.composite:
                    return t.mix_albedo(params, Nested(sf, self.level + 1), wi_f)
                return sf.leaf_albedo(t, row, params, wi_f)
            return run

        return ir.dispatch(kind, [branch(t) for t in sf.types])

    def null_transmission(self, bsdf, wi: Vec):
        """BSDF ``bsdf``'s null transmission for incident ``wi``."""
        sf = self.surface
        row, kind, table = sf.read(bsdf)
        wi_f = _flip(wi, _side(row, wi))
        nested = Nested(sf, self.level + 1)

        def branch(t):
            if not self._traced(t):
                return lambda: ir.Float(0.0)
            return _null_transmission_of(t, lambda: sf.params(t, row, table), nested, wi_f)

        return ir.dispatch(kind, [branch(t) for t in sf.types])

    def _nothing(self, n: int, u):
        S = self.spectrum
        s = None if u is None else Sample(Vec(0.0, 0.0, 0.0), ir.Float(0.0), S.zero(), ir.Bool(False),
                                          *self.surface.not_null())
        return [(S.zero(), ir.Float(0.0)) for _ in range(n)], s


def sampled_eta(ctx, si, wo_world: Vec):
    """Relative IOR of a sampled interaction (Mitsuba's ``bs.eta``): eta of
    a dielectric the sample refracted through (inverted from the inside),
    else 1. Not differentiated (only Russian roulette uses it). The IOR is
    never textured, so it is read from the plain row (``BsdfType.eta``: a
    parameter's name, or a function of the row's ParamView). A composite's
    sample counts as eta 1 even when a dielectric child refracted: roulette
    then continues with another probability, which changes the noise, not
    the expected image."""
    kind, row, refracted = _sampled_interaction(ctx, si, wo_world)
    cos_i = si.wi.z
    eta = ir.Float(1.0)
    for idx, t in enumerate(ctx.structure.bsdf_types):
        if t.eta is not None:
            e = t.eta(ParamView(t, row, None, ctx.b, ctx.spectrum)) if callable(t.eta) else row[t.slot(t.eta)]
            if ctx.structure.dispersion:
                e = ctx.spectrum.ior(e)[0]      # the wavelength the path follows
            eta = ir.select(kind == idx, ir.select(cos_i >= 0.0, e, 1.0 / e), eta)
    return ctx.detach(ir.select(refracted, eta, 1.0))


def _sampled_interaction(ctx, si, wo_world: Vec) -> tuple:
    """(BSDF type id, plain row, whether the sample refracted) of the hit's
    BSDF sampled towards ``wo_world``."""
    refracted = ir.dot(si.frame.n, wo_world) * si.wi.z < 0.0
    return ctx.b["bsdf_type"][si.attr_bsdf], _PlainRow(ctx.b["bsdf_data"], si.attr_bsdf), refracted


def sampled_dispersion(ctx, si, wo_world: Vec):
    """Whether a sampled interaction refracted through a dispersive IOR (a
    tabulated spectrum, stored negative): its direction belongs to the
    path's first wavelength alone. Only in scenes with dispersion
    (``Structure.dispersion``)."""
    kind, row, refracted = _sampled_interaction(ctx, si, wo_world)
    curve = ir.Bool(False)
    for idx, t in enumerate(ctx.structure.bsdf_types):
        if t.eta is not None and not callable(t.eta):
            curve = curve | ((kind == idx) & (row[t.slot(t.eta)] < 0.0))
    return refracted & curve
