"""The BSDF of the surface at an interaction, as integrators use it.

:class:`SurfaceBsdf` reads the hit's BSDF row (textured parameters looked
up at the hit's UV), and dispatches ``eval`` / ``pdf`` / ``sample`` over
the BSDF types of the scene (``Structure.bsdfs``). A twosided BSDF is
evaluated as if seen from its front. Its row reads are the differentiable
parameter reads of shading: call it where derivatives are wanted.

Example::

    bsdf = SurfaceBsdf(ctx, si)
    f, pdf, wo, pdf_wo, weight, delta = bsdf.query(wo_light, u1, u2)
"""
from __future__ import annotations

import math

from ... import ir
from ...ir import Vec
from .. import layout, textures
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
    safe = pdf_d > 0.0
    inv_pdf = ir.select(safe, 1.0 / ir.select(safe, pdf_d, 1.0), 0.0)
    smooth = ir.detach(weight) + (e - ir.detach(e)) * inv_pdf
    ratio = ir.select(safe, pdf / ir.select(safe, pdf_d, 1.0), 0.0)
    return ir.select(delta, weight * ratio, smooth)


class SurfaceBsdf:
    """The BSDF at interaction ``si`` (see the module docstring)."""

    def __init__(self, ctx, si):
        b = ctx.b
        self.ctx, self.si = ctx, si
        row = [b["bsdf_data"].read(si.attr_bsdf, k) for k in range(layout.BSDF_ROW)]
        if ctx.structure.tex_slots:
            row = textures.apply_textures(b, si.attr_bsdf, row, si.prim, si.b1, si.b2, si.hit,
                                          ctx.structure.tex_slots, ctx.structure.textures)
        self.row = row
        self.kind = b["bsdf_type"][si.attr_bsdf]
        self.table = TableRow(b["bsdf_table"], si.attr_bsdf)
        self.types = ctx.structure.bsdf_types

    def params(self, t):
        """The params object of BSDF type ``t`` from this row."""
        return t.make(ParamView(t, self.row, self.table, self.ctx.b, self.ctx.spectrum))

    def _front(self, wi: Vec):
        """(wi as the BSDF sees it, z sign): a twosided BSDF seen from behind is evaluated from its front."""
        flip = (self.row[layout.TWOSIDED_SLOT] > 0.5) & (wi.z < 0.0)
        sz = ir.select(flip, -1.0, 1.0)
        return Vec(wi.x, wi.y, wi.z * sz), sz

    def query(self, wo_light: Vec, u1, u2: Vec):
        """Everything a path vertex needs in one dispatch: (value and pdf
        towards the light sample ``wo_light``, then a sampled direction with
        its pdf, continuation weight and delta flag). Directions are local
        (shading frame); in differentiable form sampling is detached."""
        wi_f, sz = self._front(self.si.wi)
        wl_f = Vec(wo_light.x, wo_light.y, wo_light.z * sz)
        diff = self.ctx.diff

        def branch(t):
            def run():
                params = self.params(t)
                f = t.call("eval", params, wi_f, wl_f)
                pdf = t.call("pdf", params, wi_f, wl_f)
                wo, pdf_s, weight, delta = t.call("sample", params, wi_f, u1, u2)
                weight = continuation_weight(t, params, wi_f, wo, pdf_s, weight, delta, diff)
                return f, pdf, Vec(wo.x, wo.y, wo.z * sz), pdf_s, weight, delta
            return run

        return ir.dispatch(self.kind, [branch(t) for t in self.types])

    def albedo(self) -> Vec:
        """Mitsuba's ``eval_diffuse_reflectance``: the diffuse reflectance
        where the type names one, else pi * eval(wi, normal)."""
        wi, _ = self._front(self.si.wi)

        def branch(t):
            def run():
                if t.albedo is not None:
                    k = t.slot(t.albedo)
                    return Vec(*self.row[k:k + self.ctx.spectrum.channels])
                return t.call("eval", self.params(t), wi, Vec(0.0, 0.0, 1.0)) * math.pi
            return run

        return ir.dispatch(self.kind, [branch(t) for t in self.types])


class _PlainRow:
    """A BSDF's row as stored (no textures), read where indexed."""

    def __init__(self, buf, bsdf):
        self.buf, self.bsdf = buf, bsdf

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.buf.read(self.bsdf, j) for j in range(*k.indices(layout.BSDF_ROW))]
        return self.buf.read(self.bsdf, k)


def sampled_eta(ctx, si, wo_world: Vec):
    """Relative IOR of a sampled interaction (Mitsuba's ``bs.eta``): eta of
    a dielectric the sample refracted through (inverted from the inside),
    else 1. Not differentiated (only Russian roulette uses it). The IOR is
    never textured, so it is read from the plain row (``BsdfType.eta``: a
    parameter's name, or a function of the row's ParamView)."""
    kind = ctx.b["bsdf_type"][si.attr_bsdf]
    cos_i = si.wi.z
    refracted = ir.dot(si.frame.n, wo_world) * cos_i < 0.0
    eta = ir.Float(1.0)
    row = _PlainRow(ctx.b["bsdf_data"], si.attr_bsdf)
    for idx, t in enumerate(ctx.structure.bsdf_types):
        if t.eta is not None:
            e = t.eta(ParamView(t, row, None, ctx.b, ctx.spectrum)) if callable(t.eta) else row[t.slot(t.eta)]
            eta = ir.select(kind == idx, ir.select(cos_i >= 0.0, e, 1.0 / e), eta)
    return ctx.detach(ir.select(refracted, eta, 1.0))
