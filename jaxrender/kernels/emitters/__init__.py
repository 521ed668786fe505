"""Emitter plugins: sampling a direction towards a light, the density of a
direction that hits one, and the radiance it sends.

One module per type (``area.py``: area lights on meshes, spheres and disks;
``point.py``, ``spot.py``, ``directional.py``, ``constant.py``,
``envmap.py``, ``sunsky.py``), each declaring an :class:`~.base.EmitterType`. A type's id
(``layout.META_TYPE`` of its ``emitter_meta`` row) is its position in
:data:`TYPES`. Adding an emitter: its module plus an entry in ``TYPES``
(and its rows on the scene side).

Radiance values (``emitter_radiance`` rows, envmap texels) are read only by
:func:`eval_sample` and :func:`eval_hit`, the functions an integrator calls
in its differentiable shading; sampling and densities read no parameter.
Emitters are chosen uniformly, as in Mitsuba.

Example::

    es = sample(ctx, si, d, ctx.rand(s, group))    # (x, y, a, b) of the sampler
    radiance = eval_sample(ctx, es)                # times es.factor, per emitter
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir
from ...ir import Vec
from .. import layout
from ..sampling import mis_weight
from . import area, constant, directional, envmap, point, spot, sunsky
from .base import DirectionSample, EmitterType

TYPES = (area.MESH, point.TYPE, directional.TYPE, constant.TYPE, spot.TYPE, envmap.TYPE, area.SPHERE, area.DISK,
         area.CYLINDER, sunsky.TYPE)
NAMES = tuple(t.name for t in TYPES)
TYPE_ID = {n: i for i, n in enumerate(NAMES)}

__all__ = ["TYPES", "NAMES", "TYPE_ID", "EmitterType", "DirectionSample", "EmitterSample", "sample", "pdf",
           "eval_sample", "eval_hit", "light_weight", "sample_from", "sample_one"]


@dataclasses.dataclass
class EmitterSample(DirectionSample):
    sel: Any = None       # the chosen emitter
    kind: Any = None      # its type id


def _used(structure) -> list:
    """The types a kernel of ``structure`` dispatches over: up to the last
    used one, with unused ones in between replaced by the first type (a
    duplicate, which the dispatch emits once)."""
    used = [t.used(structure) for t in TYPES]
    last = max(i for i, u in enumerate(used) if u)
    return [t if u else TYPES[0] for t, u in zip(TYPES[:last + 1], used)]


def selection_pdf(ctx):
    return 1.0 / ir.cast(ir.maximum(ctx.n_emitters, 1), "f32")


def sample(ctx, si, d: Vec, u, where=None) -> EmitterSample:
    """Sample a direction towards an emitter from interaction ``si``
    (reached along ``d``; the reference point is offset to the side the ray
    came from) with one dimension group ``u`` = (x, y, a, b) of the sampler
    (``Context.rand``): ``a`` chooses the emitter, ``b`` a part of it (a
    mesh's triangle) and (x, y) the point on it. ``where``: the lanes that
    use the sample; a packet with none of them skips the work, and the
    others get a sample of no radiance (``factor`` 0), finite everywhere,
    so that no derivative through its unused value is NaN."""
    if where is None:
        return _sample(ctx, lambda: reference_point(si, d), u)
    return ir.cond(where, lambda: _sample(ctx, lambda: reference_point(si, d), u), _no_sample)


def reference_point(si, d: Vec) -> Vec:
    """Where emitter samples at interaction ``si`` (reached along ``d``) are
    taken from: its point offset to the side the ray came from."""
    return si.p + si.ng * ir.copysign(si.scale, -ir.dot(si.ng, d))


def sample_from(ctx, ref: Vec, u) -> EmitterSample:
    """:func:`sample` from the point ``ref`` (a point in a medium, where
    there is no surface to offset from)."""
    return _sample(ctx, lambda: ref, u)


def _sample(ctx, reference, u) -> EmitterSample:
    x, y, a, b = u
    n_em = ctx.n_emitters
    sel = ir.minimum(ir.cast(a * ir.cast(n_em, "f32"), "i32"), n_em - 1)
    return sample_one(ctx, sel, reference(), (b, x, y))


def _no_sample() -> EmitterSample:
    return EmitterSample(Vec(0.0, 0.0, 1.0), ir.Float(1.0), ir.Float(0.0), ir.Float(1.0), ir.Bool(False),
                         ir.Int(0), ir.Int(-1))


def sample_one(ctx, sel, ref: Vec, u) -> EmitterSample:
    """A direction towards emitter ``sel`` from the point ``ref`` (``u``:
    the three uniforms of its part and point; its density is the emitter's
    own, without the emitter's choice)."""
    kind = ctx.b["emitter_meta"].read(sel, layout.META_TYPE)
    ds = ir.dispatch(kind, [lambda t=t: t.sample(ctx, sel, ref, u) for t in _used(ctx.structure)])
    return EmitterSample(ds.w, ds.dist, ds.factor, ds.pdf, ds.delta, sel, kind)


def light_weight(ctx, es: EmitterSample, pdf_other):
    """The weight of an emitter sample's radiance: its MIS weight against
    a strategy (a BSDF, a phase function) that finds the same direction with
    density ``pdf_other`` (detached: sampling carries no derivatives), over
    its own density (emitter choice included)."""
    select = selection_pdf(ctx)
    pdf_light = select * es.pdf
    return ir.select(es.delta, 1.0 / select, mis_weight(pdf_light, ctx.detach(pdf_other)) / pdf_light)


def _hooked(ctx, hook: str) -> list:
    return [(TYPE_ID[t.name], t) for t in TYPES if getattr(t, hook) is not None and t.used(ctx.structure)]


def eval_sample(ctx, es: EmitterSample) -> Vec:
    """Radiance arriving along the emitter sample (times its ``factor``;
    before the unshadowed / MIS weighting). Differentiable."""
    S = ctx.spectrum
    em = S.emission(ctx.b["emitter_radiance"], es.sel) * es.factor
    for tid, t in _hooked(ctx, "eval"):
        em = em * ir.cond(es.kind == tid, lambda t=t: t.eval(ctx, es.sel, es.w), lambda: S.full(1.0))
    return em


def eval_hit(ctx, si) -> tuple[Vec, Any]:
    """(radiance emitted towards the ray's origin at interaction ``si`` — by
    the surface it hit, or by the environment if it left the scene —,
    the environment's density for that direction). Differentiable."""
    S, b = ctx.spectrum, ctx.b
    rad = b["emitter_radiance"]
    env = b["env_emitter"].value
    le = S.emission(rad, si.attr_em) * ir.select(si.is_emitter & (si.cos_l > 0.0), 1.0, 0.0)
    env_le, env_pdf = S.full(1.0), constant.pdf_direction(ctx, env, si.d)
    for tid, t in _hooked(ctx, "eval"):
        sees = ~si.hit & (env >= 0) & (b["emitter_meta"].read(env, layout.META_TYPE) == tid)
        env_le, env_pdf = ir.cond(sees, lambda t=t: (t.eval(ctx, env, si.d), t.pdf_direction(ctx, env, si.d)),
                                  lambda: (env_le, env_pdf))
    le = ir.select(si.hit, le, S.emission(rad, env) * env_le * ir.select(env >= 0, 1.0, 0.0))
    return le, env_pdf


def pdf(ctx, si, env_pdf):
    """Solid-angle density with which :func:`sample` (emitter choice
    included) produces the direction of the ray that found ``si``: the
    emitter it hit, or the environment if it left the scene (``env_pdf``, from
    :func:`eval_hit`). Meaningful where that ray sees emitted radiance."""
    select = selection_pdf(ctx)
    area_e = ctx.b["emitter_geom"].read(si.attr_em, layout.GEOM_AREA)
    density = select * si.t * si.t / (ir.maximum(si.cos_l, 1e-20) * area_e)
    for tid, t in _hooked(ctx, "pdf"):
        hits = si.is_emitter & (ctx.b["emitter_meta"].read(si.attr_em, layout.META_TYPE) == tid)
        own = ir.cond(hits, lambda t=t: t.pdf(ctx, si.attr_em, si), lambda: ir.Float(0.0))
        density = ir.select(own > 0.0, select * own, density)
    return ir.select(si.hit, density, select * env_pdf)
