"""The volumetric path tracer (Mitsuba 3's ``volpath``).

Mitsuba 3.9.1's algorithm on the path tracer's pieces: a path picks one
colour channel; in a medium it draws a free-flight distance with that
channel's majorant (``media.free_flight``) and either meets the next
surface first or collides, with a null collision (heterogeneous media:
continue straight on) or a real one (a bounce: the phase function's
emitter sample and continuation, weighted by the albedo); spectral
differences ride on the throughput (``media.spectral_ratio``). At
surfaces it is the path tracer: ``PathIntegrator.shade`` gives the
emission with its MIS weight (against the density of emitter sampling from
the last real scattering event, not from the null surfaces since), the
emitter sample and the BSDF sample. A null BSDF sample (a medium's
boundary) is no bounce. Shadow rays estimate transmittance by ratio
tracking through media and null surfaces (any other surface blocks);
media change where a ray crosses a shape with an ``interior`` or
``exterior`` medium. Russian roulette and ``max_depth`` as Mitsuba's
volpath: roulette at the top of each iteration after ``rr_depth``
bounces, surface emitter sampling only where the next bounce may still
count.

Random numbers: group 0 is the film's, group 1's ``a`` picks the channel,
then three groups per loop iteration (a surface vertex, a collision or
passing a hidden emitter): the direction sample (x, y), BSDF lobe (a) and
roulette (b); the free flight (a) and null-or-real choice (b); the emitter
sample. Tracking steps along shadow rays take one group each, from
``TRACKING_GROUPS`` on.

Primal only: :attr:`differentiable` is empty, so a derivative of a
volpath render is a NotDifferentiableError. A differentiable ``prbvolpath``
would subclass this with the replay adjoint: the medium's reads
(``media.coefficients``, the phase function) join ``shade``, and
``local_radiance`` adds the free-flight weights' derivatives.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ... import ir
from ...ir import Vec
from .. import emitters, layout, media, sensors
from ..bsdfs.surface import sampled_eta
from ..geometry import INF
from ..interaction import intersect
from .path import PathIntegrator

CHANNEL_GROUP = 1
FIRST_GROUP = 2
GROUPS_PER_ITERATION = 3
TRACKING_GROUPS = 1 << 24      # + (iteration << 12) + step: one group per tracking step of a shadow ray
SHADOW_FRACTION = 1.0 - 1e-3   # shadow rays stop short of the sampled emitter point (as the path tracer's)


@dataclasses.dataclass
class VolpathState:
    """The loop state of one path."""
    depth: Any          # bounces so far (real scattering, non-null BSDF samples)
    o: Vec              # the next ray, from o to o + d * t_max
    d: Vec
    t_max: Any
    throughput: Vec
    radiance: Vec
    active: Any
    eta: Any            # product of the relative IORs refracted through (roulette)
    medium: Any         # the medium the ray travels in (-1: none)
    last_p: Vec         # the last bounce: emitter densities of later hits are from there
    last_pdf: Any       # and the density of the direction it sampled
    specular: Any       # Mitsuba's specular_chain: emission found is counted without MIS
    valid: Any          # Mitsuba's valid_ray (the alpha of films with alpha)
    it: Any             # loop iterations so far (random number groups)
    channel: Any        # the colour channel distances are sampled in


@dataclasses.dataclass
class Event:
    """What one iteration's interaction gives the path."""
    radiance: Vec       # gathered here (already times the throughput)
    o: Vec
    d: Vec
    t_max: Any
    weight: Vec         # throughput factor
    eta: Any
    bounce: Any
    last_p: Vec
    last_pdf: Any
    specular: Any
    valid: Any
    medium: Any
    goes_on: Any


@dataclasses.dataclass(frozen=True)
class VolpathIntegrator(PathIntegrator):
    name = "volpath"
    differentiable: ClassVar[tuple] = ()
    adjoint_methods: ClassVar[tuple] = ()
    primal_only: ClassVar[str] = ("volpath renders participating media without derivatives (the differentiable "
                                  "prbvolpath is not implemented yet)")

    def own_inputs(self) -> dict:
        return {**super().own_inputs(), **layout.media_inputs()}

    def kept(self, final):
        return None             # (Mitsuba's volpath counts every path; valid is its alpha only)

    def _value(self, ctx, s) -> Vec:
        final = self.run(ctx, s, self.start(ctx, s))
        return Vec(*final.radiance, ir.select(final.valid, 1.0, 0.0)) if self.alpha else final.radiance

    def start(self, ctx, s) -> VolpathState:
        o, d, t_min, t_max = sensors.sample_ray(ctx, s)
        S = self.spectrum
        n = S.channels
        channel = ir.minimum(ir.cast(ctx.rand(s, CHANNEL_GROUP)[2] * float(n), "i32"), n - 1)
        medium = ctx.b["camera_medium"].value if ctx.structure.media else ir.Int(-1)
        # (distances in media count from the near clip plane, as Mitsuba's camera rays start there)
        return VolpathState(ir.Int(0), o + d * t_min, d, t_max - t_min, S.one(), S.zero(), ir.Bool(True),
                            ir.Float(1.0), medium, o, ir.Float(1.0), ~self._hidden(ctx),
                            self.camera_sees_environment(ctx), ir.Int(0), channel)

    @staticmethod
    def _hidden(ctx):
        return ctx.b["hide_emitters"].value != 0

    def shade_medium(self, ctx, mv: media.MediumView, wi: Vec, es):
        """At a real collision: the emitter sample's contribution before
        transmittance (phase function value times radiance, MIS-weighted
        against phase sampling)."""
        f = media.phase.eval(ctx, mv.phase, mv.g, wi, es.w)
        return emitters.eval_sample(ctx, es) * (f * emitters.light_weight(ctx, es, f))

    def step(self, ctx, s, st: VolpathState, shade):
        b, S = ctx.b, self.spectrum
        max_d, rr_d = b["max_depth"].value, b["rr_depth"].value
        show = ~self._hidden(ctx)
        has_media = bool(ctx.structure.media)

        def below_max(depth):
            return (max_d < 0) | (depth < max_d)

        group = FIRST_GROUP + st.it * GROUPS_PER_ITERATION
        u_dir, u_med, u_em = ctx.rand(s, group), ctx.rand(s, group + 1), ctx.rand(s, group + 2)
        # Roulette first, on the throughput times eta^2 (undoing refractions' radiance scaling).
        b_max = S.max(st.throughput)
        q = ir.minimum(b_max * st.eta * st.eta, 0.95)
        rr = st.depth > rr_d
        alive = (b_max > 0.0) & (~rr | (u_dir[3] < q)) & below_max(st.depth)
        throughput = st.throughput * ir.select(rr & alive, 1.0 / ir.select(q > 0.0, q, 1.0), 1.0)

        si = intersect(ctx, st.o, st.d, ir.Float(0.0), st.t_max)
        surf_t = ir.select(si.hit, si.t, st.t_max)
        if has_media:
            def in_medium():
                mv = media.read(ctx, st.medium)
                t = media.free_flight(mv.majorant, st.channel, u_med[2])
                collided = t < surf_t
                t_end = ir.minimum(t, surf_t)
                weight = media.spectral_ratio(mv.majorant, st.channel, t_end, collided)
                p = st.o + st.d * t_end
                sigma_s, sigma_n, sigma_t = media.coefficients(ctx, mv, p)
                ratio = Vec(*(ir.select(m > 0.0, x / ir.select(m > 0.0, m, 1.0), 0.0)
                              for x, m in zip(sigma_n, mv.majorant)))
                p_null = _mean(ratio)
                null = collided & (u_med[3] < p_null)
                real = Vec(*(ir.select(m > 0.0, x / ir.select(m > 0.0, m, 1.0), 0.0)
                             for x, m in zip(sigma_t, mv.majorant)))
                scale = ir.select(null, sigma_n * (1.0 / ir.select(p_null > 0.0, p_null, 1.0)),
                                  ir.select(collided, sigma_s * (1.0 / ir.maximum(_mean(real), 1e-30)), S.one()))
                return collided, null, t_end, weight * scale

            collided, null, t_coll, w_med = ir.cond(alive & (st.medium >= 0), in_medium,
                                                    lambda: (ir.Bool(False), ir.Bool(False), ir.Float(0.0), S.one()))
            throughput = throughput * w_med
        else:
            collided = null = ir.Bool(False)
            t_coll = ir.Float(0.0)
        scatter = collided & ~null
        depth = ir.select(scatter, st.depth + 1, st.depth)
        scatter = scatter & below_max(depth)
        surface = alive & ~collided
        pass_through = surface & si.is_emitter & (st.depth == 0) & ~show

        def medium_event() -> Event:
            mv = media.read(ctx, st.medium)
            p = st.o + st.d * t_coll
            wi = -st.d
            es = emitters.sample_from(ctx, p, u_em)
            direct = throughput * self.shade_medium(ctx, mv, wi, es)
            useful = mv.sample_emitters & (ctx.n_emitters > 0) & (es.delta | (es.pdf > 0.0)) & (S.max(direct) > 0.0)
            tr = ir.cond(useful, lambda: self.transmittance(ctx, s, st, p, es.w, es.dist * SHADOW_FRACTION,
                                                            st.medium), S.zero)
            wo, weight, pdf = media.phase.sample(ctx, mv.phase, mv.g, wi, Vec(u_dir[0], u_dir[1]))
            return Event(ir.select(useful, direct * tr, S.zero()), p, wo, INF, S.one() * weight, ir.Float(1.0), ir.Bool(True), p, pdf, ~mv.sample_emitters,
                         ir.Bool(True), st.medium, pdf > 0.0)

        def surface_event() -> Event:
            # Emission found is weighted against emitter sampling from the last bounce.
            seen_from = dataclasses.replace(si, o=st.last_p, t=ir.norm(si.p - st.last_p))
            es = emitters.sample(ctx, si, st.d, u_em)
            sh = shade(seen_from, es, u_dir, st.depth, st.last_pdf, st.specular, show)
            radiance = throughput * sh.emitted
            direct = throughput * sh.direct
            useful = (si.hit & ~pass_through & below_max(st.depth + 1) & (ctx.n_emitters > 0)
                      & (es.delta | (es.pdf > 0.0)) & (S.max(direct) > 0.0))
            tr = ir.cond(useful, lambda: self.transmittance(ctx, s, st, si.spawn(es.w), es.w,
                                                            es.dist * SHADOW_FRACTION,
                                                            self._medium_after(ctx, si, es.w, st.medium)), S.zero)
            bounce = ~pass_through if sh.null is None else ~sh.null & ~pass_through
            passed = si.p + st.d * si.scale
            return Event(radiance + ir.select(useful, direct * tr, S.zero()),
                         ir.select(pass_through, passed, si.spawn(sh.wo)), ir.select(pass_through, st.d, sh.wo),
                         ir.select(pass_through, st.t_max - si.t - si.scale, INF),
                         ir.select(pass_through, S.one(), sh.weight),
                         ir.select(pass_through, 1.0, sampled_eta(ctx, si, sh.wo)), bounce,
                         ir.select(bounce, si.p, st.last_p), ir.select(bounce, sh.pdf, st.last_pdf),
                         ir.select(bounce, sh.delta, st.specular), st.valid | (bounce & si.hit),
                         ir.select(pass_through, st.medium, self._medium_after(ctx, si, sh.wo, st.medium)),
                         si.hit | pass_through)

        ev = ir.cond(scatter, medium_event, surface_event)
        interacts = scatter | surface
        moves = alive & null          # a null collision: on along the ray
        p_null = st.o + st.d * t_coll
        new = VolpathState(
            ir.select(surface & ev.bounce, depth + 1, depth),
            ir.select(moves, p_null, ev.o), ir.select(moves, st.d, ev.d),
            ir.select(moves, st.t_max - t_coll, ev.t_max),
            ir.select(interacts, throughput * ev.weight, throughput),
            st.radiance + ir.select(interacts, ev.radiance, S.zero()),
            moves | (interacts & ev.goes_on),
            ir.select(interacts, st.eta * ev.eta, st.eta),
            ir.select(interacts, ev.medium, st.medium),
            ir.select(interacts, ev.last_p, st.last_p), ir.select(interacts, ev.last_pdf, st.last_pdf),
            ir.select(interacts, ev.specular, st.specular), ir.select(interacts, ev.valid, st.valid),
            st.it + 1, st.channel)
        return new, None

    def _medium_after(self, ctx, si, w: Vec, medium):
        """The medium a ray leaving ``si`` towards ``w`` travels in: the
        shape's exterior or interior one where it has any, else ``medium``."""
        if not ctx.structure.media:
            return medium
        pm = ctx.b["prim_media"]
        inside, outside = pm.read(si.prim, layout.MEDIA_INTERIOR), pm.read(si.prim, layout.MEDIA_EXTERIOR)
        transition = si.hit & ((inside >= 0) | (outside >= 0))
        return ir.select(transition, ir.select(ir.dot(si.ng, w) > 0.0, outside, inside), medium)

    def transmittance(self, ctx, s, st: VolpathState, o: Vec, w: Vec, dist, medium) -> Vec:
        """An unbiased estimate of the transmittance from ``o`` along ``w``
        over ``dist`` (ratio tracking through media with the path's channel;
        null surfaces let light through, any other blocks it)."""
        S = self.spectrum
        null_id = ctx.structure.bsdfs.index("null") if "null" in ctx.structure.bsdfs else None
        base = TRACKING_GROUPS + st.it * 4096

        def body(state):
            o, rest, m, tr, _, k = state
            si = intersect(ctx, o, w, ir.Float(0.0), rest)
            surf_t = ir.select(si.hit, si.t, rest)
            if ctx.structure.media:
                def in_medium():
                    mv = media.read(ctx, m)
                    t = media.free_flight(mv.majorant, st.channel, ctx.rand(s, base + k)[2])
                    collided = t < surf_t
                    t_end = ir.minimum(t, surf_t)
                    weight = media.spectral_ratio(mv.majorant, st.channel, t_end, collided)
                    sigma_n = media.coefficients(ctx, mv, o + w * t_end)[1]
                    return collided, t_end, ir.select(collided, weight * sigma_n, weight)
                collided, t, weight = ir.cond(m >= 0, in_medium, lambda: (ir.Bool(False), ir.Float(0.0), S.one()))
            else:
                collided, t, weight = ir.Bool(False), ir.Float(0.0), S.one()
            crossing = ~collided & si.hit
            passes = ir.Bool(False)
            if null_id is not None:
                passes = ctx.b["bsdf_type"][si.attr_bsdf] == null_id
            tr = tr * weight * ir.select(crossing & ~passes, 0.0, 1.0)
            new_rest = ir.select(collided, rest - t, rest - si.t - si.scale)
            going = (collided | crossing) & (S.max(tr) > 0.0) & (new_rest > 0.0)
            return (ir.select(collided, o + w * t, si.p + w * si.scale), new_rest,
                    ir.select(crossing, self._medium_after(ctx, si, w, m), m), tr, going, k + 1)

        out = ir.while_loop(lambda state: state[4], body, (o, dist, medium, S.one(), ir.Bool(True), ir.Int(0)))
        return out[3]


def _mean(v: Vec):
    xs = list(v)
    return sum(xs[1:], xs[0]) * (1.0 / len(xs))
