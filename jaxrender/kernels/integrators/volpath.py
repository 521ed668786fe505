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

Derivatives (also registered as Mitsuba's ``prbvolpath``): forward mode
and the replay adjoints of ``base.py``. Sampling is detached (free-flight
distances, the phase function's directions, shadow-ray tracking); the
estimator's weights carry the derivatives with the samples held fixed,
which is unbiased for homogeneous media because the sampled domain does
not move: ``shade`` multiplies the free flight's weight by
exp(-t (sigma_t - detach sigma_t)) (and sigma_s / detach(sigma_s) at a
collision), each shadow ray's transmittance by the same over the distance
it travelled in each medium, and the phase continuation by f / detach(f).
Heterogeneous media use the null-scattering estimator with the majorant a
constant (detached; Vicini et al. 2021, section 4.4): d log sigma_s at a
real collision, -d sigma_t / (majorant - sigma_t) at a null one (one
``shade`` per collision), and for a shadow ray's ratio tracking the sum of
the latter over its collisions, estimated by one collision that
``transmittance`` picks uniformly (reservoir sampling) times their count.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from ... import ir
from ...ir import Vec
from .. import emitters, layout, media, sensors
from ..bsdfs import registry as bsdf_registry
from ..bsdfs.base import FLOAT
from ..bsdfs.surface import SurfaceBsdf, passes_light, sampled_eta
from ..geometry import INF
from ..interaction import KnownHit, intersect
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
    ahead: KnownHit     # the surface ahead, known after a null collision (no second BVH query)
    rr_prefix: Any = None  # polarized adjoints: the throughput roulette multiplies in (PathState's)


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
    # (its steps' queries, null collisions and ratio-tracked shadow rays, are not logged for the replay)
    query_log_slots: ClassVar[int] = 0
    # (not the camera: a sample's first vertex may be in a medium, which sensors/motion.py does not follow)
    differentiable: ClassVar[tuple] = ("bsdf_data", "emitter_radiance", "texels", "medium_data")

    def own_inputs(self) -> dict:
        return {**super().own_inputs(), **layout.media_inputs()}

    def simd_lanes(self, structure) -> int | None:
        # Delta tracking through a grid takes each lane through its own
        # number of null collisions, so a wide packet mostly waits for its
        # slowest lane: bench_volume's smoke scene (64x64, 16 spp) took 0.36 s
        # at 16 lanes, 0.27 s at 4 and 0.23 s at 1 (its value_and_grad 0.80,
        # 0.63 and 0.63 s); homogeneous media (the fog) run best wide.
        return 1 if "heterogeneous" in structure.media else None

    def plain_state(self, ctx, state: VolpathState) -> VolpathState:
        return state    # (one form already: no geometry derivatives, no known first hit)

    def settings(self, props: Mapping[str, Any]) -> dict:
        if props.get("type") != "prbvolpath":
            return super().settings(props)
        # Mitsuba's prbvolpath (an ADIntegrator): max_depth 6 by default, rr_depth > 0.
        if int(props.get("rr_depth", 5)) <= 0:
            raise ValueError(f"integrator.rr_depth must be > 0, got {props['rr_depth']}")
        return super().settings({"max_depth": 6, **props, "type": "volpath"})

    def nondifferentiable_params(self, scene) -> dict:
        """Parameters whose derivatives this integrator cannot compute in
        ``scene`` (key -> why): homogeneous media's, where a shadow ray may
        cross more of them than it follows; the parameters of surfaces'
        null transmission (a mask's opacity, a blend's weight), which
        shadow rays use with their derivatives detached."""
        out = {}
        homogeneous = [m for m in scene.media if m.kind == "homogeneous"]
        if len(homogeneous) > MAX_SHADOW_MEDIA:
            why = (f"derivatives of homogeneous media's parameters follow at most {MAX_SHADOW_MEDIA} of them "
                   f"along a shadow ray (this scene: {len(homogeneous)} homogeneous media)")
            out.update({k: f"{k}: {why}" for m in homogeneous for k in (m.sigma_t, m.scale, m.albedo, m.g)
                        if k is not None})
        if passes_light(scene.structure):
            why = ("shadow rays under volpath let light through masks and blends with a null component without "
                   "its derivative")
            out.update({k: f"{k}: {why}" for k in _null_transmission_keys(scene)})
        return out

    def kept(self, final):
        return None             # (Mitsuba's volpath counts every path; valid is its alpha only)

    def _value(self, ctx, s) -> Vec:
        ctx = ctx.spectrum.bind(ctx, s)
        final = self.run(ctx, s, self.start(ctx, s))
        radiance = self.film_values(ctx, s, final.radiance)
        return Vec(*radiance, ir.select(final.valid, 1.0, 0.0)) if self.alpha else radiance

    def start(self, ctx, s) -> VolpathState:
        o, d, t_min, t_max = sensors.sample_ray(ctx, s)
        S = self.spectrum
        n = S.channels
        channel = ir.minimum(ir.cast(ctx.rand(s, CHANNEL_GROUP)[2] * float(n), "i32"), n - 1)
        medium = ctx.b["camera_medium"].value if ctx.structure.media else ir.Int(-1)
        # (distances in media count from the near clip plane, as Mitsuba's camera rays start there)
        return VolpathState(ir.Int(0), o + d * t_min, d, t_max - t_min, S.one(), S.no_radiance(), ir.Bool(True),
                            ir.Float(1.0), medium, o, ir.Float(1.0), ~self._hidden(ctx),
                            self.camera_sees_environment(ctx), ir.Int(0), channel, KnownHit.none())

    @staticmethod
    def _hidden(ctx):
        return ctx.b["hide_emitters"].value != 0

    def shade_medium(self, ctx, mv: media.MediumView, wi: Vec, es):
        """At a real collision: the emitter sample's contribution before
        transmittance (phase function value times radiance, MIS-weighted
        against phase sampling)."""
        f = media.phase.eval(ctx, mv.phase, mv.g, wi, es.w)
        # (a phase function keeps light's polarization, as Mitsuba's: emission stays unpolarized)
        return self.spectrum.radiance(emitters.eval_sample(ctx, es) * (f * emitters.light_weight(ctx, es, f)))

    def shade(self, ctx, si, es, u, depth, last_pdf, specular, show, scatter, pass_through, flight: Flight,
              shadow: Shadow, wi: Vec, phase_sample) -> VolShading:
        """Everything an iteration computes from differentiable parameters:
        the free-flight weight, the shadow ray's transmittance, and the
        collision's (phase function) or the surface's (``PathIntegrator.shade``)
        emission, emitter sample and continuation weight. The free-flight
        and shadow weights are their transport values (sampled with the
        parameters detached) times factors that are 1 in value and carry the
        derivatives of the sampled event's weight (see :func:`_flight_factor`)."""
        S = self.spectrum
        w_med, tr = flight.weight, shadow.tr
        if ctx.structure.media:
            def one():
                return S.full(1.0)
            w_med = w_med * ir.cond(flight.medium >= 0, lambda: _flight_factor(ctx, flight), one)
            for m, length in zip(shadow.media, shadow.lengths):
                tr = tr * ir.cond(m >= 0, lambda m=m, length=length: _optical_factor(ctx, m, length), one)
            if "heterogeneous" in ctx.structure.media:
                tr = tr * ir.cond(shadow.tracked >= 0, lambda: _tracking_factor(ctx, shadow), one)

        def at_collision():
            mv = media.read(ctx, flight.medium)
            wo, weight, pdf = phase_sample
            f = media.phase.eval(ctx, mv.phase, mv.g, wi, wo)
            return (S.no_radiance(), self.shade_medium(ctx, mv, wi, es), S.one() * (weight * _relative(f)), wo, pdf,
                    ~mv.sample_emitters, ir.Bool(False))

        def at_surface():
            sh = PathIntegrator.shade(self, ctx, si, es, u, depth, last_pdf, specular, show)
            null = ir.Bool(False) if sh.null is None else sh.null
            return (sh.emitted, sh.direct, ir.select(pass_through, S.one(), sh.weight), sh.wo, sh.pdf, sh.delta, null)

        parts = ir.cond(scatter, at_collision, at_surface) if ctx.structure.media else at_surface()
        return VolShading(w_med, tr, *parts)

    def queries_bsdf(self, ctx, si, depth, show_emitters):
        # (a null boundary is crossed at any depth: no bounce, as in Mitsuba)
        return si.hit

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
        b_max = S.max(st.throughput if st.rr_prefix is None else S.mul(st.rr_prefix, st.throughput))
        q = ctx.detach(ir.minimum(b_max * st.eta * st.eta, 0.95))
        rr = st.depth > rr_d
        alive = (b_max > 0.0) & (~rr | (u_dir[3] < q)) & below_max(st.depth)
        throughput = st.throughput * ir.select(rr & alive, 1.0 / ir.select(q > 0.0, q, 1.0), 1.0)

        si = intersect(ctx, st.o, st.d, ir.Float(0.0), st.t_max, st.ahead if has_media else None)
        surf_t = ir.select(si.hit, si.t, st.t_max)
        # Transport reads the media detached: the sampled distance, the
        # collision's kind and the weight's value (shade adds derivatives).
        if has_media:
            def in_medium():
                mv = _detached(ctx, media.read(ctx, st.medium))
                t = media.free_flight(mv.majorant, st.channel, u_med[2])
                limit = ir.minimum(surf_t, media.reach(ctx, mv, st.o, st.d))
                collided = t < limit
                t_end = ir.minimum(t, limit)
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
                                  ir.select(collided, sigma_s * (1.0 / ir.maximum(_mean(real), 1e-30)), S.full(1.0)))
                return collided, null, t_end, ctx.detach(weight * scale)

            collided, null, t_coll, w_med = ir.cond(alive & (st.medium >= 0), in_medium,
                                                    lambda: (ir.Bool(False), ir.Bool(False), ir.Float(0.0),
                                                             S.full(1.0)))
        else:
            collided = null = ir.Bool(False)
            t_coll, w_med = ir.Float(0.0), S.full(1.0)
        scatter = collided & ~null
        depth = ir.select(scatter, st.depth + 1, st.depth)
        scatter = scatter & below_max(depth)
        surface = alive & ~collided
        pass_through = surface & si.is_emitter & (st.depth == 0) & ~show
        p_coll = st.o + st.d * t_coll
        wi = -st.d

        # (a null BSDF, a medium's boundary, reflects nothing: no emitter
        # sample, no shadow ray, as Mitsuba's volpath samples emitters only
        # at surfaces with a smooth component)
        # (a packet of null collisions and misses skips the surface's emitter sample)
        at_surface = surface & si.hit & ~pass_through & below_max(st.depth + 1) & ~_null_surface(ctx, si)

        # The emitter sample, the phase function's sample (with g detached)
        # and the shadow ray, before shading.
        if has_media:
            def from_medium():
                mv = _detached(ctx, media.read(ctx, st.medium))
                phase_sample = media.phase.sample(ctx, mv.phase, mv.g, wi, Vec(u_dir[0], u_dir[1]))
                return emitters.sample_from(ctx, p_coll, u_em), phase_sample, mv.sample_emitters

            def from_surface():
                return (emitters.sample(ctx, si, st.d, u_em, where=at_surface), (st.d, ir.Float(1.0), ir.Float(0.0)),
                        ir.Bool(True))

            es, phase_sample, samples_em = ir.cond(scatter, from_medium, from_surface)
        else:
            es, phase_sample, samples_em = (emitters.sample(ctx, si, st.d, u_em, where=at_surface),
                                            (st.d, ir.Float(1.0), ir.Float(0.0)), ir.Bool(True))
        shadowed = (((scatter & samples_em) | at_surface) & (ctx.n_emitters > 0) & (es.delta | (es.pdf > 0.0)))
        shadow = ir.cond(shadowed,
                         lambda: self.transmittance(ctx, s, st, ir.select(scatter, p_coll, si.spawn(es.w)), es.w,
                                                    es.dist * SHADOW_FRACTION,
                                                    ir.select(scatter, st.medium,
                                                              self._medium_after(ctx, si, es.w, st.medium))),
                         lambda: _no_shadow(S))

        # Emission found is weighted against emitter sampling from the last bounce.
        seen_from = dataclasses.replace(si, o=st.last_p, t=ir.norm(si.p - st.last_p))
        sh = shade(seen_from, es, u_dir, st.depth, st.last_pdf, st.specular, show, scatter, pass_through,
                   Flight(st.medium, t_coll, collided, null, st.channel, w_med, p_coll), shadow, wi, phase_sample)
        throughput = S.times(throughput, sh.medium)
        interacts = scatter | surface
        gathered = S.apply(throughput, sh.emitted + ir.select(shadowed, S.times(sh.direct, sh.tr), S.no_radiance()))

        bounce = scatter | (~pass_through & ~sh.null)
        passed = si.p + st.d * si.scale
        o = ir.select(scatter, p_coll, ir.select(pass_through, passed, si.spawn(sh.wo)))
        d = ir.select(pass_through, st.d, sh.wo)
        t_max = ir.select(pass_through, st.t_max - si.t - si.scale, INF)
        eta = ir.select(scatter | pass_through, 1.0, sampled_eta(ctx, si, sh.wo))
        valid = scatter | st.valid | (bounce & si.hit)
        medium = ir.select(scatter | pass_through, st.medium, self._medium_after(ctx, si, sh.wo, st.medium))
        goes_on = ir.select(scatter, sh.pdf > 0.0, si.hit | pass_through)

        moves = alive & null          # a null collision: on along the ray
        new = VolpathState(
            ir.select(surface & bounce, depth + 1, depth),
            ir.select(moves, p_coll, o), ir.select(moves, st.d, d),
            ir.select(moves, st.t_max - t_coll, t_max),
            ir.select(interacts, S.mul(throughput, sh.weight), throughput),
            st.radiance + ir.select(interacts, gathered, S.no_radiance()),
            moves | (interacts & goes_on),
            ir.select(interacts, st.eta * eta, st.eta),
            ir.select(interacts, medium, st.medium),
            ir.select(interacts & bounce, ir.select(scatter, p_coll, si.p), st.last_p),
            ir.select(interacts & bounce, sh.pdf, st.last_pdf),
            ir.select(interacts & bounce, sh.delta, st.specular), ir.select(interacts, valid, st.valid),
            st.it + 1, st.channel, KnownHit.ahead(moves, si, t_coll), st.rr_prefix)
        return new, Vertex(st.throughput * ir.select(rr & alive, 1.0 / ir.select(q > 0.0, q, 1.0), 1.0),
                           interacts, shadowed, new.active)

    def local_radiance(self, vertex: Vertex, sh: VolShading, rest: Vec) -> Vec:
        S = self.spectrum
        if S.polarized:
            # rest: the radiance arriving from the continuation (incident_state)
            beta = S.times(vertex.throughput, sh.medium)
            here = S.apply(beta, sh.emitted + ir.select(vertex.shadowed, S.times(sh.direct, sh.tr), S.no_radiance()))
            later = S.apply(beta, ir.select(vertex.interacts, S.apply(sh.weight, rest), rest))
            return ir.select(vertex.interacts, here, S.no_radiance()) + ir.select(vertex.continues, later,
                                                                                   S.no_radiance())
        # This iteration's weights scale what it gathers and, as ratios to
        # their (constant) values, everything the path gathers later.
        later = rest * _relative_vec(sh.medium)
        later = ir.select(vertex.interacts, later * _relative_vec(sh.weight), later)
        here = vertex.throughput * sh.medium * (sh.emitted + ir.select(vertex.shadowed, sh.direct * sh.tr, S.zero()))
        return ir.select(vertex.interacts, here, S.zero()) + later

    def _medium_after(self, ctx, si, w: Vec, medium):
        """The medium a ray leaving ``si`` towards ``w`` travels in: the
        shape's exterior or interior one where it has any, else ``medium``."""
        if not ctx.structure.media:
            return medium
        pm = ctx.b["prim_media"]
        inside, outside = pm.read(si.prim, layout.MEDIA_INTERIOR), pm.read(si.prim, layout.MEDIA_EXTERIOR)
        transition = si.hit & ((inside >= 0) | (outside >= 0))
        return ir.select(transition, ir.select(ir.dot(si.ng, w) > 0.0, outside, inside), medium)

    def transmittance(self, ctx, s, st: VolpathState, o: Vec, w: Vec, dist, medium) -> Shadow:
        """An unbiased estimate of the transmittance from ``o`` along ``w``
        over ``dist`` (ratio tracking through media with the path's channel;
        each surface passes its null transmission: all of it for null, a
        mask's 1 - opacity, nothing for an opaque BSDF), with the distance
        travelled in each medium (its derivatives, in ``shade``)."""
        S = self.spectrum
        partial, plain = passes_light(ctx.structure), ctx.primal()   # (the result is detached)
        base = TRACKING_GROUPS + st.it * 4096

        kinds = ctx.structure.media

        def body(state):
            o, rest, m, tr, _, k, ids, lengths, tracked, count, p_tracked, ahead = state
            si = intersect(ctx, o, w, ir.Float(0.0), rest, ahead if kinds else None)
            surf_t = ir.select(si.hit, si.t, rest)
            if ctx.structure.media:
                def in_medium():
                    mv = _detached(ctx, media.read(ctx, m))
                    t = media.free_flight(mv.majorant, st.channel, ctx.rand(s, base + k)[2])
                    limit = ir.minimum(surf_t, media.reach(ctx, mv, o, w))
                    collided = t < limit
                    t_end = ir.minimum(t, limit)
                    weight = media.spectral_ratio(mv.majorant, st.channel, t_end, collided)
                    sigma_n = media.coefficients(ctx, mv, o + w * t_end)[1]
                    return collided, t_end, ir.select(collided, weight * sigma_n, weight)
                collided, t, weight = ir.cond(m >= 0, in_medium, lambda: (ir.Bool(False), ir.Float(0.0),
                                                                          S.full(1.0)))
                het = _is_heterogeneous(ctx, m)
                # homogeneous media: the distance travelled in each; heterogeneous
                # ones: one of the ratio-tracking collisions, uniformly (reservoir)
                ids, lengths = _add_length(ids, lengths, ir.select(het, -1, m), t)
                if "heterogeneous" in kinds:
                    counts = collided & het
                    count = ir.select(counts, count + 1.0, count)
                    pick = counts & (ctx.rand(s, base + k)[3] * count < 1.0)
                    tracked = ir.select(pick, m, tracked)
                    p_tracked = ir.select(pick, o + w * t, p_tracked)
            else:
                collided, t, weight = ir.Bool(False), ir.Float(0.0), S.full(1.0)
            crossing = ~collided & si.hit
            if partial:    # masks and blends with null components: what the surface lets through
                passed = ir.cond(crossing, lambda: SurfaceBsdf(plain, si).null_transmission(), lambda: ir.Float(1.0))
                tr = tr * weight * passed
            else:
                tr = tr * weight * ir.select(crossing & ~_null_surface(ctx, si), 0.0, 1.0)
            new_rest = ir.select(collided, rest - t, rest - si.t - si.scale)
            going = (collided | crossing) & (S.max(tr) > 0.0) & (new_rest > 0.0)
            return (ir.select(collided, o + w * t, si.p + w * si.scale), new_rest,
                    ir.select(crossing, self._medium_after(ctx, si, w, m), m), tr, going, k + 1, ids, lengths,
                    tracked, count, p_tracked, KnownHit.ahead(collided, si, t))

        none = _no_shadow(S)
        out = ir.while_loop(lambda state: state[4], body, (o, dist, medium, S.full(1.0), ir.Bool(True), ir.Int(0),
                                                          none.media, none.lengths, none.tracked, none.count,
                                                          none.p, KnownHit.none()))
        return Shadow(ctx.detach(out[3]), out[6], out[7], out[8], out[9], ctx.detach(out[10]))


MAX_SHADOW_MEDIA = 2   # distinct media a shadow ray's derivatives follow (more: not differentiable)


def _null_transmission_keys(scene) -> list[str]:
    """The parameter keys (textures' too) of the scene's BSDF fields that
    set a null transmission: the first float of each BSDF type with one
    (mask's opacity, blendbsdf's weight; twosided has none)."""
    keys = []
    for i, (name, fields, _) in enumerate(scene.bsdfs):
        t = bsdf_registry.TYPES[name]
        if t.null_transmission is None or t.params[0].kind != FLOAT:
            continue
        key = fields[0][0]
        if isinstance(key, str):
            keys.append(key)
        elif key is None:    # textured: the texture's keys
            keys += [k for start, _, tex, _ in scene.bsdf_slots[i] if start == 0 for k in scene.textures[tex].keys]
    return keys


@dataclasses.dataclass
class Flight:
    """An iteration's free flight, as ``step`` sampled it."""
    medium: Any         # the medium it was in (-1: none)
    t: Any              # where it ended: a collision or the next surface
    collided: Any
    null: Any           # a null collision (heterogeneous media)
    channel: Any
    weight: Vec         # its weight's value (1 outside media)
    p: Vec              # the point it ended at


@dataclasses.dataclass
class Shadow:
    """A shadow ray's transmittance estimate (values) and the distance it
    travelled in each medium it crossed."""
    tr: Vec
    media: tuple        # MAX_SHADOW_MEDIA homogeneous medium ids (-1: unused)
    lengths: tuple
    tracked: Any        # heterogeneous media: the medium of one ratio-tracking collision (-1: none)
    count: Any          # picked uniformly among this many
    p: Vec              # where it was


@dataclasses.dataclass
class VolShading:
    """What :meth:`VolpathIntegrator.shade` computes for an iteration."""
    medium: Vec         # the free-flight weight
    tr: Vec             # the shadow ray's transmittance
    emitted: Vec        # emission found (surfaces), MIS-weighted
    direct: Vec         # the emitter sample's contribution before transmittance
    weight: Vec         # the continuation's weight (BSDF or phase sample; 1 passing a hidden emitter)
    wo: Vec             # the continuation: direction, density, delta flag, null (pass-through) sample
    pdf: Any
    delta: Any
    null: Any


@dataclasses.dataclass
class Vertex:
    """What the adjoint needs about an iteration."""
    throughput: Vec     # the throughput arriving, after roulette
    interacts: Any      # a collision or a surface (else a null collision, or roulette ended the path)
    shadowed: Any       # the emitter sample's shadow ray was traced
    continues: Any


def _no_shadow(S) -> Shadow:
    return Shadow(S.full(0.0), tuple(ir.Int(-1) for _ in range(MAX_SHADOW_MEDIA)),
                  tuple(ir.Float(0.0) for _ in range(MAX_SHADOW_MEDIA)), ir.Int(-1), ir.Float(0.0),
                  Vec(ir.Float(0.0), ir.Float(0.0), ir.Float(0.0)))


def _add_length(ids: tuple, lengths: tuple, m, t):
    """The slots with distance ``t`` in medium ``m`` added: to its slot, or
    the first free one."""
    placed = m < 0
    new_ids, new_lengths = [], []
    for i, length in zip(ids, lengths):
        here = ~placed & ((i == m) | (i < 0))
        new_ids.append(ir.select(here, m, i))
        new_lengths.append(ir.select(here, length + t, length))
        placed = placed | here
    return tuple(new_ids), tuple(new_lengths)


def _null_surface(ctx, si):
    """Whether the hit's BSDF is the null BSDF (a Bool; a constant False in
    scenes without one)."""
    if "null" not in ctx.structure.bsdfs:
        return ir.Bool(False)
    return ctx.b["bsdf_type"][si.attr_bsdf] == ctx.structure.bsdfs.index("null")


def _detached(ctx, mv: media.MediumView) -> media.MediumView:
    return dataclasses.replace(mv, g=ctx.detach(mv.g), majorant=ctx.detach(mv.majorant),
                               sigma_t=ctx.detach(mv.sigma_t), albedo=ctx.detach(mv.albedo))


def _is_heterogeneous(ctx, m):
    kinds = ctx.structure.media
    if "heterogeneous" not in kinds:
        return ir.Bool(False)
    if "homogeneous" not in kinds:
        return m >= 0
    return (m >= 0) & (ctx.b["medium_meta"].read(ir.maximum(m, 0), layout.MEDIUM_KIND)
                       == kinds.index("heterogeneous"))


def _flight_factor(ctx, fl: Flight) -> Vec:
    """1, with the derivative of the log of the free flight's weight with
    the distance held fixed (detached sampling): in a homogeneous medium
    the weight is exp(-t sigma_t) (times sigma_s at a collision) over a
    density that does not move, so -t d sigma_t (+ d log sigma_s). In a
    heterogeneous one (delta tracking with a constant majorant m, the
    collision probabilities detached) passing on to a surface has weight 1,
    a real collision sigma_s(x) / (m P_real): d log sigma_s, and a null one
    (m - sigma_t(x)) / (m P_null): -d sigma_t / (m - sigma_t)."""
    mv = media.read(ctx, fl.medium)
    one = ctx.spectrum.full(1.0)

    def homogeneous():
        sigma_s, _, sigma_t = media.coefficients(ctx, mv, fl.p)
        decay = Vec(*(ir.exp(-fl.t * (x - ir.detach(x))) for x in sigma_t))
        return decay * ir.select(fl.collided, _relative_vec(sigma_s), one)

    def heterogeneous():
        sigma_s, _, sigma_t = media.heterogeneous(ctx, mv, fl.p)
        sigma_n = Vec(*(ir.detach(m) - x for m, x in zip(mv.majorant, sigma_t)))
        return ir.select(fl.null, _relative_vec(sigma_n), ir.select(fl.collided, _relative_vec(sigma_s), one))

    kinds = ctx.structure.media
    if "heterogeneous" not in kinds:
        return homogeneous()
    if "homogeneous" not in kinds:
        return heterogeneous()
    return ir.cond(mv.kind == kinds.index("heterogeneous"), heterogeneous, homogeneous)


def _tracking_factor(ctx, sh: Shadow) -> Vec:
    """1, with the derivative of the log of a shadow ray's ratio-tracking
    weight in heterogeneous media, the sum over its collisions x_i of
    -d sigma_t(x_i) / (m - sigma_t(x_i)), estimated by one collision picked
    uniformly among the ``count``: count times its term."""
    mv = media.read(ctx, sh.tracked)
    sigma_t = media.heterogeneous(ctx, mv, sh.p)[2]
    return Vec(*(1.0 + sh.count * (_relative(ir.detach(m) - x) - 1.0) for m, x in zip(mv.majorant, sigma_t)))


def _optical_factor(ctx, m, length) -> Vec:
    """1, with the derivative of exp(-length sigma_t) relative to its value."""
    sigma_t = media.read(ctx, m).sigma_t
    return Vec(*(ir.exp(-length * (x - ir.detach(x))) for x in sigma_t))


def _relative(x):
    """x / detach(x): 1, with the derivative of log x (1 where x is 0)."""
    d = ir.detach(x)
    return ir.select(d != 0.0, x / ir.select(d != 0.0, d, 1.0), 1.0)


def _relative_vec(v: Vec) -> Vec:
    return Vec(*(_relative(x) for x in v))


def _mean(v: Vec):
    xs = list(v)
    return sum(xs[1:], xs[0]) * (1.0 / len(xs))
