"""The path tracer (Mitsuba 3's ``path``; ``direct`` is the same with two
vertices and no Russian roulette).

Unidirectional path tracing with next-event estimation, multiple importance
sampling (power heuristic) and Russian roulette, following the structure of
Mitsuba 3's path integrator so that images agree in expectation. Each
vertex is split as the framework (``base.py``) asks: :meth:`~PathIntegrator.step`
does the transport (intersection, emitter sampling, the shadow ray,
roulette); :meth:`~PathIntegrator.shade` reads every differentiable value
(emitted radiance, the BSDF's parameters and textures, the envmap's texels)
and computes the vertex's emission, its unshadowed emitter sample and the
BSDF sample's weight. Derivative kernels come from the base class: forward
mode (``jvp`` with detached sampling) and the adjoint by path replay.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ... import ir
from ...ir import Vec
from .. import emitters, sensors
from ..bsdfs.surface import SurfaceBsdf, sampled_dispersion, sampled_eta, samples_null
from ..geometry import INF, closest_hit, occluded
from ..interaction import (KnownHit, KnownOcclusion, followed, intersect, material_coords, point_on_surface,
                           ray_key)
from ..sampling import mis_weight
from ..sensors import motion
from ..sensors.perspective import CameraRow
from . import material, shadows
from .base import ReplayIntegrator


@dataclasses.dataclass
class PathState:
    """The loop state of one path."""
    depth: Any          # vertices so far (a camera ray passing a hidden emitter does not count)
    o: Vec              # the next ray
    d: Vec
    t_min: Any
    t_max: Any          # the far clip plane for the camera ray, then inf
    throughput: Vec
    radiance: Vec
    prev_pdf: Any       # the previous BSDF sample's pdf and delta flag (MIS of emitter hits)
    prev_delta: Any
    active: Any
    eta: Any            # product of the relative IORs refracted through (Mitsuba's RR uses it)
    valid: Any = None   # scenes with null (pass-through) samples: Mitsuba's valid_ray (see kept)
    single: Any = None  # scenes with dispersion: the path follows its first wavelength alone (a dispersive
                        # refraction chose its direction)
    rr_prefix: Any = None  # polarized adjoints: the throughput before this state's, which Russian
                           # roulette multiplies in (the rest of a path traced from identity throughput)
    prev: Any = None    # kernels for moving geometry: the last hit (prim and its material coordinates), the ray
                        # that found it (o, d, t) and the hit before it (the same three; prim -1: the camera);
                        # in scenes with shared instances, then the instances of the two hits
    known: Any = None   # the next ray's first hit where a kernel already found it (interaction.KnownHit: a
                        # camera ray's, traced once for the film as well; PRB's first pass's), else None
    known_shadow: Any = None  # PRB's replay: the next vertex's shadow ray as its first pass traced it
                              # (interaction.KnownOcclusion), else None
    before: Any = None  # polarized kernels for moving geometry: (the throughput before the last vertex's
                        # continuation weight, times roulette's factor; that weight's (0, 0) entries)


@dataclasses.dataclass
class Shading:
    """What :meth:`PathIntegrator.shade` computes at a vertex."""
    emitted: Vec        # emitted radiance towards the ray, times its MIS weight (a radiance)
    direct: Vec         # the emitter sample's contribution, before the shadow test (a radiance)
    wo: Vec             # the BSDF sample: direction (world), pdf, weight f cos / pdf, delta flag
    pdf: Any
    weight: Vec
    delta: Any
    null: Any = None    # scenes with null samples (else None): the BSDF sample passes through (mask),
    choice: Any = None  # and the probability of the choices that made it null or not
    pair: Any = None    # moving meshes: 1, with the derivative of the previous vertex's continuation
                        # (its BSDF towards this point, the area this point's solid angle covers);
                        # polarized: 0, with that derivative, added to that vertex's weight (mueller_pair)
    boundary: Any = None  # moving meshes: 0, with the derivative of the edges seen from this point


@dataclasses.dataclass
class Vertex:
    """What the adjoint needs about a vertex."""
    throughput: Vec     # the path throughput arriving at it
    visible: Any        # the emitter sample is unoccluded (and was traced)
    continues: Any      # the path goes on with the BSDF sample
    pending: Any = None  # scenes with null samples: the radiance so far, while this vertex's choice decides
                         # whether the path counts (kept), else 0
    rr_scale: Any = None  # polarized: Russian roulette's factor (1 / its probability, or 1) on the continuation
    queries: Any = None  # what its ray queries answered, keyed by their rays, for a replay to reuse (_logged)
    before: Any = None  # polarized, moving geometry: the throughput before the previous vertex's weight


@dataclasses.dataclass(frozen=True)
class PathIntegrator(ReplayIntegrator):
    name = "path"
    query_log_slots = 8
    differentiable = ("bsdf_data", "emitter_radiance", "texels", "camera", "tris", "shape_data", "tri_normals",
                      "tri_uv", "instances")

    def own_inputs(self) -> dict:
        return {"max_depth": ir.Scalar("i32"),     # -1: unbounded
                "rr_depth": ir.Scalar("i32"),
                "hide_emitters": ir.Scalar("i32")}

    def settings(self, props: Mapping[str, Any]) -> dict:
        kind = props.get("type")
        if kind in ("direct", "direct_projective"):
            max_depth, rr_depth = 2, 1 << 30
        elif kind in ("prb", "prb_projective"):
            # Mitsuba's prb: max_depth 6 by default; its roulette starts at
            # vertex index rr_depth (from 0), where this path tracer counts
            # the vertex first (index + 1 >= rr_depth): one later.
            max_depth, rr_depth = int(props.get("max_depth", 6)), int(props.get("rr_depth", 5))
            if max_depth < -1 or rr_depth <= 0:
                raise ValueError(f"integrator {kind}: max_depth must be >= -1 and rr_depth > 0, got "
                                 f"{max_depth} and {rr_depth}")
            rr_depth += 1
        else:
            max_depth, rr_depth = int(props.get("max_depth", -1)), int(props.get("rr_depth", 5))
            if max_depth < -1:
                raise ValueError(f"integrator.max_depth must be >= -1, got {max_depth}")
        return {"max_depth": np.int32(max_depth), "rr_depth": np.int32(rr_depth),
                "hide_emitters": np.int32(bool(props.get("hide_emitters", False)))}

    def camera_sees_environment(self, ctx):
        return (ctx.b["env_emitter"].value >= 0) & (ctx.b["hide_emitters"].value == 0)

    def start(self, ctx, s, known=None) -> PathState:
        # (detached: a moving camera moves the points its rays see in sensors/motion.py's form only)
        return self.start_ray(ctx, *(ctx.detach(v) for v in sensors.sample_ray(ctx, s)), known=known)

    def start_ray(self, ctx, o, d, t_min, t_max, known=None) -> PathState:
        """The loop state of a path whose camera ray is (o, d) from t_min to
        t_max; ``known``: that ray's first hit, where already found
        (``interaction.KnownHit``; None: the first step traces it)."""
        S = self.spectrum
        valid = self.camera_sees_environment(ctx) if samples_null(ctx.structure) else None
        none = (ir.Int(-1), ir.Float(0.0), ir.Float(0.0))
        prev = None
        if ctx.geometry_motion:
            prev = (*none, o, d, ir.Float(0.0), *none) + ((ir.Int(-1), ir.Int(-1)) if ctx.structure.instanced else ())
        single = ir.Bool(False) if ctx.structure.dispersion else None
        before = None
        if ctx.geometry_motion and S.polarized:
            if ctx.structure.dispersion:
                # (a dispersive refraction's hero projection would have to follow the weight in
                # `before`; dispersion is only a smooth dielectric's, a Dirac lobe, which these
                # kernels do not take: render.py says so first)
                raise NotImplementedError("polarized moving geometry with dispersion")
            before = (S.one(), S.full(1.0))
        return PathState(ir.Int(0), o, d, t_min, t_max, S.one(), S.no_radiance(), ir.Float(1.0), ir.Bool(True),
                         ir.Bool(True), ir.Float(1.0), valid=valid, single=single, prev=prev, known=known,
                         before=before)

    def no_queries(self, ctx):
        return (ir.UInt(0), ir.Float(0.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), ir.UInt(0)) + (
            (ir.Int(-1),) if ctx.structure.instanced else ())

    def with_known_queries(self, state: PathState, queries) -> PathState:
        # (a key 0 reads as nothing logged: such a ray is queried again)
        hit_key, t, prim, b1, b2, shadow, *instance = queries
        known = KnownHit(hit_key != 0, t, prim, b1, b2, instance[0] if instance else ir.Int(-1), hit_key)
        return dataclasses.replace(state, known=known, known_shadow=KnownOcclusion(
            (shadow & _TRACED) != 0, (shadow & _BLOCKED) != 0, shadow & _KEY_BITS))

    def with_first_hit(self, ctx, state: PathState) -> PathState:
        def query():
            return KnownHit(ir.Bool(True), *closest_hit(ctx.geo, state.o, state.d, state.t_min, state.t_max))
        return dataclasses.replace(state, known=ir.cond(state.active, query, KnownHit.none))

    def plain_state(self, ctx, state: PathState) -> PathState:
        # Without derivatives nothing reads the record of moving geometry;
        # a first hit not known is KnownHit.none() (the first pass knows the
        # camera ray's), and a path started past its camera ray counts (valid).
        valid = state.valid
        if valid is None and samples_null(ctx.structure):
            valid = ir.Bool(True)
        return dataclasses.replace(state, prev=None, before=None, valid=valid,
                                   known=KnownHit.none() if state.known is None else state.known)

    def kept(self, final: PathState):
        """As Mitsuba's path tracer, a path whose every vertex sampled a null
        (pass-through) component and that then missed the scene (or ended
        there) counts as no sample: its estimate and alpha are 0 unless the
        camera sees an environment. Only scenes with such BSDFs track it."""
        return final.valid

    def _value(self, ctx, s, known=None, first=None) -> Vec:
        if not (self.alpha and samples_null(ctx.structure)):
            return super()._value(ctx, s, known, first)
        ctx = ctx.spectrum.bind(ctx, s)
        final = self.run(ctx, s, self.start(ctx, s, known))
        return Vec(*self.film_values(ctx, s, ir.select(final.valid, final.radiance, self.spectrum.no_radiance()),
                                     first), ir.select(final.valid, 1.0, 0.0))

    def shade(self, ctx, si, es, u, depth, prev_pdf, prev_delta, show_emitters, prev=None, edge=None,
              es_u=None, prev_weight=None) -> Shading:
        """Everything at a vertex that reads differentiable parameters;
        multiplying by the path throughput is left to the caller. Kernels
        for moving meshes also get the previous hit, the edge sample of the
        camera's point and the emitter sample's random numbers (polarized:
        the (0, 0) entries of the previous vertex's continuation weight)."""
        pair = boundary = None
        if ctx.geometry_motion:
            fixed = si
            si, measure = followed(ctx, si)
            cam = CameraRow(ctx.b["camera"])
            eye = motion.eye_of_ray(ctx, cam, fixed.o, fixed.d)     # (depth 0: the ray's aperture point)
            toward = ir.normalize(Vec(*(ir.select(depth == 0, a, b) for a, b in
                                        zip(motion.to_camera(ctx, si.p, cam, eye),
                                            point_on_surface(ctx, *prev[:3], material.instances_of(prev)[0])
                                            - si.p))))
            si = dataclasses.replace(si, wi=Vec(*(ir.select(si.hit, a, b)
                                                  for a, b in zip(si.frame.to_local(toward), si.wi))))
            es, nee = material.followed_emitter_sample(ctx, fixed, si, es, es_u)
            if self.spectrum.polarized:
                pair = ir.cond(depth > 0, lambda: material.mueller_pair(ctx, si, fixed, measure, prev, prev_weight),
                               self.spectrum.zero)
            else:
                pair = ir.cond(depth > 0, lambda: material.pair_factor(ctx, si, fixed, measure, prev),
                               self.spectrum.one)
            edge, horizon, shadow = edge
            boundary = material.edge_term(ctx, edge, si.p)
            if horizon is not None:
                boundary = boundary + material.horizon_term(ctx, horizon, si.p, si.ng)
            if shadow is not None:
                boundary = boundary + shadows.vertex_term(ctx, shadow, si.p)
        elif ctx.camera_motion:
            si = motion.attach_primary_wi(ctx, si, depth == 0)
        if ctx.camera_motion:
            si = motion.attach_primary_miss(ctx, si, depth == 0)
        # Emission seen along the ray, weighted against emitter sampling.
        S = self.spectrum
        le, env_pdf = emitters.eval_hit(ctx, si)
        le = S.radiance(le)     # emitters are unpolarized
        light_pdf = emitters.pdf(ctx, si, env_pdf)
        w_bsdf = ir.select(depth == 0, ir.select(show_emitters, 1.0, 0.0),
                           ir.select(prev_delta, 1.0, mis_weight(ctx.detach(prev_pdf), light_pdf)))
        if ctx.geometry_motion:
            # Both strategies' samples stay at their material points, so
            # their MIS weights must be the same functions of those points
            # whatever the geometry: the traced ones (the emitter sample's
            # already is, its densities fixed in transport).
            w_bsdf = ir.detach(w_bsdf)
        # The BSDF: towards the emitter sample, and a sampled continuation.
        # (only where the path goes on: a packet of misses or of last
        # vertices, e.g. direct's second, skips it)
        f_l, bsdf_pdf_l, bs = ir.cond(
            self.queries_bsdf(ctx, si, depth, show_emitters),
            lambda: SurfaceBsdf(ctx, si).query(si.frame.to_local(es.w), u[3], Vec(u[0], u[1])),
            lambda: SurfaceBsdf.no_query(ctx))
        em = S.radiance(emitters.eval_sample(ctx, es))
        w_em = emitters.light_weight(ctx, es, bsdf_pdf_l)
        direct = S.apply(f_l, em) * w_em
        weight = bs.weight
        if ctx.geometry_motion:
            direct = direct * nee
            # the continuation's derivative is the next vertex's pair factor
            weight = ir.detach(weight)
        return Shading(le * w_bsdf, direct, ctx.detach(si.frame.to_world(bs.wo)), ctx.detach(bs.pdf),
                       weight, bs.delta, bs.null, bs.choice, pair, boundary)

    def queries_bsdf(self, ctx, si, depth, show_emitters):
        """Where :meth:`shade` evaluates and samples the BSDF: where the
        path may go on past ``si`` (both are unused elsewhere)."""
        deeper, pass_through = _goes_on(ctx, si, depth, show_emitters)
        return si.hit & deeper & ~pass_through

    def step(self, ctx, s, st: PathState, shade) -> tuple[PathState, Vertex]:
        b = ctx.b
        S = self.spectrum
        max_d, rr_d = b["max_depth"].value, b["rr_depth"].value
        show_emitters = b["hide_emitters"].value == 0
        si = intersect(ctx, st.o, st.d, st.t_min, st.t_max, st.known)
        hit_key = ray_key(st.o, st.d, st.t_min, st.t_max)
        if ctx.geometry_motion:
            # Transport: the hit as traced (the forward kernel differentiates
            # this step too; shade() alone moves the geometry).
            si = ctx.detach(si)
        # hide_emitters: a camera ray passes through the emitters it meets
        # (as in Mitsuba), without counting a bounce.
        deeper, pass_through = _goes_on(ctx, si, st.depth, show_emitters)
        active_next = si.hit & deeper & ~pass_through
        # Two dimension groups per vertex (group 0 is the film's): the emitter
        # sample's, and the BSDF's: (u[0], u[1]) its direction, a 2D sample
        # of the scene's sampler, u[2] roulette and u[3] the lobe, 1D ones.
        es_u = ctx.rand(s, 1 + st.depth * 2)
        # Only a path that goes on uses its emitter sample (next-event
        # estimation); a packet whose paths all end here skips it.
        es = emitters.sample(ctx, si, st.d, es_u, where=active_next)
        if ctx.geometry_motion:
            es = ctx.detach(es)
        u = ctx.rand(s, 2 + st.depth * 2)
        beta = st.throughput
        if ctx.geometry_motion:
            # the boundary term of this point's incident radiance, sampled on the scene's edges
            edge_u = ctx.rand(s, material.EDGE_GROUP + st.depth)
            continues = si.hit & deeper & ~pass_through

            def incident(o, d, known):
                return self._incident(ctx.primal(), s, st.depth + 1, o, d, known)
            # where the next vertex is the last (no emitter sample there), a path
            # traced behind an edge ends at its first hit: only emitters there count
            last = (max_d >= 0) & (st.depth + 2 >= max_d)
            edge = material.edge_sample(ctx, si, edge_u, continues, incident, last)
            horizon = shadow = None
            if ctx.structure.shading_normals or any(t.frame for t in ctx.structure.bsdf_types):
                # smooth shading, normal and bump maps: the horizon of the point's own triangle
                horizon = material.horizon_sample(ctx, si, edge_u[1], continues, incident)
            if ctx.structure.delta_lights:
                # the hard shadows seen from here: the next vertex must sample emitters
                shadow = shadows.vertex_sample(ctx, si, ctx.rand(s, shadows.GROUP + st.depth), continues & ~last)
            edge = ctx.detach((edge, horizon, shadow))
            sh = shade(si, es, u, st.depth, st.prev_pdf, st.prev_delta, show_emitters, st.prev, edge, es_u,
                       None if st.before is None else st.before[1])
            # 1, carrying the derivative of reaching this point (polarized: 0, added to the previous weight)
            beta = S.mul(beta, sh.pair) if st.before is None else beta + S.mul(st.before[0], sh.pair)
        else:
            sh = shade(si, es, u, st.depth, st.prev_pdf, st.prev_delta, show_emitters)
        radiance = st.radiance + S.apply(beta, sh.emitted)
        if ctx.geometry_motion:
            radiance = radiance + S.apply(beta, sh.boundary)

        # Next-event estimation: the shadow ray only where it can matter.
        direct = S.apply(beta, sh.direct)
        useful = active_next & (ctx.n_emitters > 0) & (es.delta | (es.pdf > 0.0)) & (S.max(direct) > 0.0)
        shadow_ray = (si.spawn(es.w), es.w, ir.Float(0.0), es.dist * (1.0 - 1e-3))
        shadow_key = ray_key(*shadow_ray) & _KEY_BITS
        logged = st.known_shadow
        if logged is None:
            blocked = ir.cond(useful, lambda: occluded(ctx.geo, *shadow_ray), lambda: ir.Bool(True))
        else:
            reuse = useful & logged.valid & (logged.key == shadow_key)
            blocked = ir.cond(useful & ~reuse, lambda: occluded(ctx.geo, *shadow_ray),
                              lambda: ir.select(reuse, logged.blocked, ir.Bool(True)))
        radiance = radiance + ir.select(blocked, S.no_radiance(), direct)

        # Continue with the BSDF sample; Russian roulette as Mitsuba's: after
        # rr_depth vertices, on the throughput times eta^2 (undoing the
        # radiance scaling of refractions).
        throughput = S.mul(beta, sh.weight)
        single = st.single
        if single is not None:
            # A refraction through a dispersive IOR went where the first
            # wavelength goes: the others end here (their estimate so far
            # stays), the first counts for all four from here on.
            dispersed = sampled_dispersion(ctx, si, sh.wo) & ~single & ~pass_through
            throughput = ir.select(dispersed, S.mul(throughput, S.hero_only()), throughput)
            single = single | dispersed
        eta = st.eta * sampled_eta(ctx, si, sh.wo)
        b_max = S.max(throughput if st.rr_prefix is None else S.mul(st.rr_prefix, throughput))
        active_next = active_next & (b_max != 0.0)
        rr_prob = ctx.detach(ir.minimum(b_max * eta * eta, 0.95))
        rr_active = st.depth + 1 >= rr_d   # Mitsuba counts this vertex first (depth += 1, then roulette)
        rr_scale = ir.select(rr_active, 1.0 / rr_prob, 1.0)
        throughput = throughput * rr_scale
        active_next = active_next & (~rr_active | (u[2] < rr_prob))

        valid, pending = st.valid, None
        if valid is not None:
            # Mitsuba's valid_ray: a vertex that samples anything but a null
            # component, or an emitter where the path ends at max_depth.
            deciding = ~valid & si.hit & ~pass_through & deeper
            valid = valid | (si.hit & ~pass_through & ir.select(deeper, ~sh.null, si.is_emitter & show_emitters))
            # Whether what the path gathered so far counts depends on this
            # sample's choices, so its derivative has their probability's
            # (a score term; 1 in value).
            pending = ir.select(deciding, radiance, S.no_radiance())
            if ctx.diff:
                radiance = ir.select(deciding, radiance * _relative(sh.choice), radiance)
        passed = si.p + st.d * si.scale
        before = st.before
        if before is not None and ctx.geometry_motion:
            before = (ir.select(pass_through, before[0], beta * rr_scale),
                      ir.select(pass_through, before[1], Vec(*sh.weight[:S.channels])))
        prev = None
        if st.prev is not None:
            # (what a pass-through step meets is no vertex: the next one's predecessor stays the camera)
            found = (si.prim, *material_coords(ctx, si), st.o, st.d, si.t, *st.prev[:3])
            if ctx.structure.instanced:
                found = found + (si.instance, st.prev[9])
            prev = ir.select(pass_through, st.prev, found)
        new = PathState(ir.select(pass_through, st.depth, st.depth + 1),
                        ir.select(pass_through, passed, si.spawn(sh.wo)), ir.select(pass_through, st.d, sh.wo),
                        ir.Float(0.0), ir.select(pass_through, st.t_max - si.t - si.scale, INF),
                        ir.select(pass_through, S.one(), throughput), radiance,
                        ir.select(pass_through, st.prev_pdf, sh.pdf), ir.select(pass_through, st.prev_delta, sh.delta),
                        active_next | pass_through, ir.select(pass_through, st.eta, eta), valid, single,
                        st.rr_prefix, prev, None if st.known is None else KnownHit.none(),
                        None if st.known_shadow is None else KnownOcclusion.none(), before)
        return new, Vertex(st.throughput, ~blocked, active_next & ~pass_through, pending,
                           rr_scale if S.polarized else None,
                           _logged(ctx, si, hit_key, shadow_key | ir.select(useful, ir.UInt(_TRACED), ir.UInt(0))
                                   | ir.select(blocked, ir.UInt(_BLOCKED), ir.UInt(0))),
                           None if st.before is None else st.before[0])

    def _incident(self, ctx, s, depth, o, d, known: KnownHit) -> Vec:
        """Radiance arriving at ``o`` from direction ``-d``: a path traced
        from there whose first vertex is at ``depth``, its emission counted
        whole (no MIS: this direction was not sampled by a BSDF); ``known``:
        the ray's first hit, already traced."""
        S = self.spectrum
        state = PathState(depth, o, d, ir.Float(0.0), INF, S.one(), S.no_radiance(), ir.Float(1.0), ir.Bool(True),
                          ir.Bool(True), ir.Float(1.0),
                          single=ir.Bool(False) if ctx.structure.dispersion else None, known=known)
        return self.trace(ctx, s, state)

    def local_radiance(self, vertex: Vertex, sh: Shading, rest: Vec) -> Vec:
        S = self.spectrum
        if S.polarized:
            # rest: the radiance arriving from the continuation (incident_rest)
            later = ir.select(vertex.continues, S.apply(vertex.throughput, S.apply(sh.weight, rest)) * vertex.rr_scale,
                              S.no_radiance())
            direct = ir.select(vertex.visible, S.apply(vertex.throughput, sh.direct), S.no_radiance())
            local = S.apply(vertex.throughput, sh.emitted) + direct + later
            if sh.pair is not None:
                # what this point sends back towards the previous one, through
                # that one's weight's derivative (mueller_pair); the edges' term
                sent = (sh.emitted + ir.select(vertex.visible, sh.direct, S.no_radiance())
                        + ir.select(vertex.continues, S.apply(sh.weight, rest) * vertex.rr_scale, S.no_radiance()))
                local = local + S.apply(vertex.before, S.apply(sh.pair, ir.detach(sent))) \
                    + S.apply(vertex.throughput, sh.boundary)
            return local if vertex.pending is None else local + vertex.pending * _relative(sh.choice)
        # The continuation weight scales everything the path gathers later:
        # rest * weight / weight, with the denominator a constant.
        w = ir.detach(sh.weight)
        scale = Vec(*(ir.select(x != 0.0, 1.0 / ir.select(x != 0.0, x, 1.0), 0.0) for x in w))
        later = ir.select(vertex.continues, rest * sh.weight * scale, self.spectrum.zero())
        base = (vertex.throughput * sh.emitted + ir.select(vertex.visible, vertex.throughput * sh.direct,
                                                           self.spectrum.zero()))
        local = base + later
        if sh.pair is not None:
            # what reaching this point gathers, from here on, scaled by the pair factor; the edges' term
            local = local + (sh.pair - self.spectrum.one()) * (ir.detach(base) + rest) \
                + vertex.throughput * sh.boundary
        return local if vertex.pending is None else local + vertex.pending * _relative(sh.choice)


def _goes_on(ctx, si, depth, show_emitters):
    """(whether a path may go on past its vertex ``si`` at ``depth``
    (max_depth), whether it passes through it without a bounce: a camera
    ray meeting an emitter it does not show)."""
    max_d = ctx.b["max_depth"].value
    return (max_d < 0) | (depth + 1 < max_d), si.is_emitter & (depth == 0) & ~show_emitters


# A logged shadow ray: its ray_key with the two low bits replaced by whether
# it was traced and whether it was blocked.
_TRACED, _BLOCKED = 2, 1
_KEY_BITS = 0xFFFFFFFC


def _logged(ctx, si, hit_key, shadow):
    """A step's ray queries as PRB's first pass logs them (QueryLog entries:
    few words, as they are loop state): the hit's ray key, t, primitive,
    barycentrics, the shadow ray's word, and with shared instances the
    instance."""
    return (hit_key, si.t, si.prim, si.b1, si.b2, shadow) + ((si.instance,) if ctx.structure.instanced else ())


def _relative(x):
    """x / detach(x): 1, with the derivative of log x (1 where x is 0)."""
    d = ir.detach(x)
    return ir.select(d > 0.0, x / ir.select(d > 0.0, d, 1.0), 1.0)
