"""The integrator framework: from one sample's estimate to every kernel.

An :class:`Integrator` declares its own inputs (scalars such as
``max_depth``), which input buffers are differentiable, how many channels
its image has, and :meth:`Integrator.sample`: the estimate of one sample
of the work item's pixel. The base class turns that into the primal kernel
(the mean over ``spp`` samples) and the forward-mode kernel (the IR's
``jvp`` of the primal traced in differentiable form).

A :class:`ReplayIntegrator` estimates a pixel by a loop over path vertices
and splits each vertex into *transport* (intersections, sampling, Russian
roulette: :meth:`~ReplayIntegrator.step`) and *shading* (every read of a
differentiable parameter: :meth:`~ReplayIntegrator.shade`). The base class
then also builds the adjoint kernels by replaying each path with the same
random numbers and running the shading under ``ir.vjp`` (path replay
backpropagation, Vicini et al. 2021; radiative backpropagation, Nimier-David
et al. 2020). Memory stays constant in path length and sample count.

The loop state is a dataclass with fields ``active`` (Bool), ``throughput``
and ``radiance`` (Spectrum); the vertex record returned by ``step`` has
``continues`` (Bool: the path goes on from this vertex).

Example (the outline of ``path.py``)::

    @dataclasses.dataclass(frozen=True)
    class PathIntegrator(ReplayIntegrator):
        name = "path"
        differentiable = ("bsdf_data", "emitter_radiance", "texels")

        def start(self, ctx, s): ...                     # the camera ray's state
        def step(self, ctx, s, state, shade): ...        # one vertex
        def shade(self, ctx, *args): ...                 # its differentiable part
        def local_radiance(self, vertex, shading, rest): ...
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, ClassVar, Mapping

from ... import ir
from ...ir import Vec, tree_flatten, tree_unflatten
from .. import layout, textures
from .. import sensors
from ..geometry import closest_hit
from ..sensors import film, motion
from ..bsdfs import registry as bsdf_registry
from ..context import Context, Structure, moves_geometry, moving_buffers
from .. import spectrum
from ..spectrum import RGB, SpectrumType

ADJOINT_METHODS = ("prb", "rb", "rb_biased")

# Traced kernels, per (integrator, kernel kind, arguments). Cleared when a
# plugin registry changes (a replaced user BSDF must be traced again).
_KERNELS: dict = {}
bsdf_registry._on_change.append(_KERNELS.clear)
textures._on_change.append(_KERNELS.clear)


def _cached(kind: str):
    def wrap(build):
        @functools.wraps(build)
        def get(self, *args):
            key = (self, kind, args)
            if key not in _KERNELS:
                with spectrum.using(self.spectrum):
                    _KERNELS[key] = build(self, *args)
            return _KERNELS[key]
        return get
    return wrap


def _zeros(n: int) -> Vec:
    return Vec(*(ir.Float(0.0) for _ in range(n)))


def _moving(ctx: Context, active) -> Context:
    """``ctx`` for kernels whose camera and / or triangles carry derivatives."""
    return dataclasses.replace(ctx, camera_motion="camera" in active,
                               geometry_motion=moves_geometry(active, ctx.structure))


def _dot(a: Vec, b: Vec):
    out = a[0] * b[0]
    for x, y in zip(list(a)[1:], list(b)[1:]):
        out = out + x * y
    return out


def _nonzero(cotangent):
    """``cotangent`` with its constant-zero leaves as None, so that the
    shading's reverse pass emits nothing for outputs the estimate ignores."""
    leaves, tree = tree_flatten(cotangent)
    keep = [None if isinstance(x, ir.Var) and x.node.const_value == 0.0 else x for x in leaves]
    return tree_unflatten(tree, keep)


@dataclasses.dataclass(frozen=True)
class Integrator:
    """Base of every integrator (see the module docstring). Instances are
    trace-time values: frozen and hashable, one per kernel variant."""
    name: ClassVar[str] = "integrator"
    # Float input buffers whose values may carry derivatives (empty: not differentiable).
    differentiable: ClassVar[tuple] = ()
    adjoint_methods: ClassVar[tuple] = ()
    # Why an integrator without differentiable inputs has no derivatives (for the error saying so).
    primal_only: ClassVar[str] = "it has no derivative kernels"
    # Whether film_values depends on where the camera sees a sample's point
    # from (not only on its radiance): its derivative under motion then has
    # a term of its own (the adjoint's, _adjoint_body).
    film_moves: ClassVar[bool] = False
    spectrum: SpectrumType = dataclasses.field(default=RGB, kw_only=True)
    # One more channel: the sample's alpha (films with an alpha channel).
    alpha: bool = dataclasses.field(default=False, kw_only=True)

    def own_inputs(self) -> dict:
        """Inputs beyond ``layout.scene_inputs`` (name -> ir.In / ir.Scalar)."""
        return {}

    def simd_lanes(self, structure: Structure) -> int | None:
        """The SIMD packet width this integrator's CPU kernels run best at for
        ``structure`` (None: the host's widest; ``$JAXRENDER_SIMD_LANES``
        overrides either). Where a packet's lanes diverge for long (each
        following its own number of steps), narrower packets waste less."""
        return None

    def settings(self, props: Mapping[str, Any]) -> dict:
        """Runtime values of :meth:`own_inputs` from the scene's integrator
        settings (``Scene.integrator``)."""
        return {}

    @property
    def channels(self) -> int:
        """Floats per pixel of the image (the colour, then alpha if any)."""
        return self.spectrum.film_channels + int(self.alpha)

    def inputs(self, structure: Structure = Structure()) -> dict:
        """Every input of this integrator's kernels for scenes of ``structure``."""
        shared = layout.instance_inputs() if structure.instanced else {}
        return {**layout.scene_inputs(self.spectrum), **shared, **self.own_inputs()}

    def nondifferentiable_params(self, scene) -> dict:
        """Scene parameters (key -> why) that this integrator cannot
        differentiate in ``scene`` beyond the scene's own (a derivative
        through them is a NotDifferentiableError): an integrator that
        ignores media, the media's."""
        if "medium_data" in self.inputs():
            return {}
        why = f"the {self.name} integrator ignores participating media (volpath / prbvolpath render them)"
        return {k: f"{k}: {why}" for m in scene.media for k in (m.sigma_t, m.scale, m.albedo, m.g) if k is not None}

    def sample(self, ctx: Context, s) -> Vec:
        """The estimate of sample ``s`` of the work item's pixel (``channels`` values)."""
        raise NotImplementedError

    def sample_alpha(self, ctx: Context, s):
        """Alpha of sample ``s``, as Mitsuba's path tracers give it: 1 where
        the camera ray meets a surface or an environment emitter that the
        camera sees, else 0. It traces the camera ray once more: alpha
        costs one ray per sample, only for films that ask for it."""
        o, d, t_min, t_max = sensors.sample_ray(ctx, s)
        prim = closest_hit(ctx.geo, o, d, t_min, t_max)[1]
        return ir.select((prim >= 0) | self.camera_sees_environment(ctx), 1.0, 0.0)

    def camera_sees_environment(self, ctx: Context):
        """Whether camera rays that miss every surface see an emitter."""
        return ctx.b["env_emitter"].value >= 0

    def _value(self, ctx: Context, s, known=None, first=None) -> Vec:
        """What one sample contributes to the image's channels (``known``:
        its camera ray's first hit, already traced, as :meth:`start`'s;
        ``first``: the same as ``interaction.first_hit`` gives it)."""
        ctx = ctx.spectrum.bind(ctx, s)
        radiance = self.sample(ctx, s) if known is None else self.trace(ctx, s, self.start(ctx, s, known))
        value = self.film_values(ctx, s, radiance, first)
        return Vec(*value, self.sample_alpha(ctx, s)) if self.alpha else value

    def film_values(self, ctx: Context, s, radiance: Vec, first=None) -> Vec:
        """The image channels (before alpha) of sample ``s``'s estimated
        ``radiance``, linear in it: the film's colour. ``first``: in
        kernels of a moving camera or geometry, the camera ray's first hit
        (a film whose values depend on the direction the camera sees the
        point from follows it: ``film_moves``)."""
        return ctx.spectrum.to_film(radiance)

    def film_values_along(self, ctx: Context, d: Vec, radiance: Vec) -> Vec:
        """:meth:`film_values` of ``radiance`` arriving along a camera ray
        of direction ``d`` (the film boundary's rays, which are no sample's)."""
        return ctx.spectrum.to_film(radiance)

    @property
    def film_width(self) -> int:
        """How many channels :meth:`film_values` gives (alpha excluded)."""
        return self.spectrum.film_channels

    def film_transpose(self, ctx: Context, s, d_values: Vec) -> Vec:
        """The transpose of :meth:`film_values`: the cotangent of sample
        ``s``'s radiance from its image channels' (``film_width``)."""
        return ctx.spectrum.film_transpose(d_values)

    def _variant(self, structure: Structure) -> str:
        """The kernel-name tail of this integrator's options and the scene's structure."""
        return ("_alpha" if self.alpha else "") + self._spectrum_suffix() + structure.suffix()

    def _spectrum_suffix(self) -> str:
        return "" if self.spectrum.name == "rgb" else "_" + self.spectrum.name

    def kernel_name(self, structure: Structure) -> str:
        return self.name + self._variant(structure)

    # -- kernels ---------------------------------------------------------------
    def block_width(self, structure: Structure) -> int:
        """Floats per work item of the image kernels' output: the channels
        of each pixel of the film's splat footprint."""
        return structure.footprint ** 2 * self.channels

    def _primal_body(self, structure: Structure, diff: bool, moving: tuple = (), **b):
        """The sample sums of the item's splat footprint (``film.py``);
        normalising by the summed filter weights happens in JAX.
        ``moving``: the buffers carrying derivatives in material form
        (``context.moving_buffers``: the camera, the geometry; then the
        splat weights follow the camera's point)."""
        ctx = _moving(Context.create(b, structure, diff, self.spectrum), moving)
        camera = bool(moving)
        spp = b["spp"].value
        zero = _zeros(self.block_width(structure))

        def traced(s):
            """(sample s's value, its camera ray's first hit): under motion
            that ray is traced once, for the path and the moving splat weights"""
            if not camera:
                return self._value(ctx, s), None
            first, known = motion.camera_hit(ctx, s)
            return self._value(ctx, s, known, first), first

        if structure.footprint == 1:
            def add(s, acc):
                value, first = traced(s)
                # the box filter's weight is 1 within the pixel: only the film density moves
                return acc + (value * motion.attached_weights(ctx, s, 1, first)[0] if camera else value)
            return {"image": ir.fori_loop(ir.UInt(0), spp, add, zero)}

        def splat(s, acc):
            value, first = traced(s)
            weights = film.splat_weights(ctx, s, structure.footprint)
            if camera:
                # the summed weights stay the camera-independent ones: they
                # estimate the filter's integral, which does not move
                attached = motion.attached_weights(ctx, s, structure.footprint, first)
                return (acc[0] + Vec(*(w * v for w in attached for v in value)), acc[1] + Vec(*weights))
            return (acc[0] + Vec(*(w * v for w in weights for v in value)), acc[1] + Vec(*weights))

        image, weights = ir.fori_loop(ir.UInt(0), spp, splat, (zero, _zeros(structure.footprint ** 2)))
        return {"image": image, "weights": weights}

    def _outputs(self, structure: Structure) -> dict:
        outs = {"image": ir.Out("f32", (self.block_width(structure),))}
        if structure.footprint > 1:
            outs["weights"] = ir.Out("f32", (structure.footprint ** 2,))
        return outs

    @_cached("primal")
    def primal_kernel(self, structure: Structure = Structure()) -> ir.Kernel:
        """The image kernel: output ``image`` (items, footprint² x channels),
        each sample's estimate splatted with its filter weights, and, for a
        footprint wider than one pixel, the summed ``weights`` (items,
        footprint²) that the image is normalised by."""
        return ir.trace(functools.partial(self._primal_body, structure, False), self.inputs(structure),
                        self._outputs(structure), name=self.kernel_name(structure))

    def weights_kernel(self, structure: Structure = Structure()) -> ir.Kernel:
        """The summed filter weights of each item's splat footprint (items,
        footprint²): what the image kernels' sums are divided by. It reads
        the film buffers only, so every integrator and every scene with the
        same footprint and sampler shares it (one name, one compile)."""
        return self._weights_kernel(Structure(footprint=structure.footprint, sampler=structure.sampler))

    @_cached("weights")
    def _weights_kernel(self, structure: Structure) -> ir.Kernel:
        def body(**b):
            ctx = Context.create(b, structure, False, self.spectrum)
            return {"weights": ir.fori_loop(ir.UInt(0), b["spp"].value,
                                            lambda s, acc: acc + Vec(*film.splat_weights(ctx, s, structure.footprint)),
                                            _zeros(structure.footprint ** 2))}
        return ir.trace(body, layout.scene_inputs(self.spectrum),
                        {"weights": ir.Out("f32", (structure.footprint ** 2,))},
                        name="film_weights" + self._spectrum_suffix() + structure.suffix())

    def kernel_inputs(self, active: tuple, structure: Structure) -> dict:
        """The inputs of the derivative kernels for ``active``: with moving
        triangles, also the scene's welded ``edges`` (``primitives/boundary
        .edge_topology`` rows) and which of them, and of the analytic
        shapes' outlines after them, move (``moving_edges``: their items,
        ``edge_moves``: 1 per item that does, ``leaf_moves``: 1 per leaf
        primitive that does; ``integrators/material.edge_point``), with
        shared instances the copies of their
        shapegroups' edges (``instance_edges``) and, with delta lights, the
        edges of their shadows (``shadow_edges``, ``shadow_cdf``)."""
        inputs = self.inputs(structure)
        if not moves_geometry(active, structure):
            return inputs
        if structure.delta_lights:
            # (the edges of their hard shadows: integrators/shadows.py)
            inputs = dict(inputs, shadow_edges=ir.In("f32", (layout.SHADOW_ROW,)), shadow_cdf=ir.In("f32"))
        if structure.instanced:
            # (the copies of shared shapegroups' edges, each with its instance)
            inputs = dict(inputs, instance_edges=ir.In("i32", (7,)))
        # (the edges and outlines of the geometry that moves, which vertices' edge samples favour)
        return dict(inputs, edges=ir.In("i32", (6,)), moving_edges=ir.In("i32"), edge_moves=ir.In("i32"),
                    leaf_moves=ir.In("i32"))

    def check_active(self, active: tuple) -> tuple:
        bad = [n for n in active if n not in self.differentiable]
        if bad or not active:
            raise ValueError(f"differentiable inputs of the {self.name} integrator must be a non-empty subset "
                             f"of {self.differentiable}, got {active}")
        return tuple(sorted(set(active)))

    @_cached("forward")
    def forward_kernel(self, active: tuple, structure: Structure = Structure()) -> ir.Kernel:
        """Forward mode: the primal inputs plus ``d_<name>`` (the tangent of
        each active input, same shape); output ``image`` is the image
        tangent, linear in the tangents. Sampling is detached."""
        active = self.check_active(active)
        base = self.kernel_inputs(active, structure)
        inputs = dict(base, **{"d_" + n: base[n] for n in active})

        def fwd(**b):
            prim = {k: b[k] for k in base}
            moving = moving_buffers(active, structure)
            _, tangent = ir.jvp(lambda: self._primal_body(structure, True, moving, **prim), (), (),
                                buffer_tangents={b[n]: b["d_" + n] for n in active})
            return {"image": tangent["image"]}

        return ir.trace(fwd, inputs, {"image": ir.Out("f32", (self.block_width(structure),))},
                        name=f"{self.name}_forward_" + "_".join(active) + self._variant(structure))

    def adjoint_kernel(self, active: tuple, method: str, structure: Structure = Structure()) -> ir.Kernel:
        raise ValueError(f"the {self.name} integrator has no adjoint")


@dataclasses.dataclass
class QueryLog:
    """A path's ray-query answers, one entry per step of its first
    ``len(slots)`` (PRB's first pass), for the replay of the same path to
    reuse instead of querying the scene again. Entries are pytrees
    (the integrator's ``Vertex.queries``); loop state, so a fixed number."""
    slots: tuple

    @classmethod
    def empty(cls, entry, n: int) -> "QueryLog":
        return cls(tuple(entry for _ in range(n)))

    def put(self, step, entry) -> "QueryLog":
        return QueryLog(tuple(ir.select(step == k, entry, slot) for k, slot in enumerate(self.slots)))

    def at(self, step, empty):
        """The entry of ``step``, ``empty`` past the last slot."""
        out = empty
        for k, slot in enumerate(self.slots):
            out = ir.select(step == k, slot, out)
        return out


@dataclasses.dataclass(frozen=True)
class ReplayIntegrator(Integrator):
    """An integrator whose estimate is a loop over path vertices, with the
    adjoint kernels built by replay (see the module docstring).
    ``short_paths``: every path ends at its second vertex (``direct``, a
    max_depth of at most 2), so what a path gathers after a vertex is what
    one more ray meets, and PRB's adjoint re-traces that ray instead of
    running its first pass (any depth would still be exact, only slower)."""
    adjoint_methods: ClassVar[tuple] = ADJOINT_METHODS
    short_paths: bool = dataclasses.field(default=False, kw_only=True)
    # Steps whose ray queries PRB's first pass logs for its replay (0: none;
    # see run_logged, no_queries, with_known_queries)
    query_log_slots: ClassVar[int] = 0

    def start(self, ctx: Context, s):
        """The loop state of sample ``s`` before its first vertex. Integrators
        that differentiate a moving camera or geometry also take ``known``:
        the camera ray's first hit, already traced (``interaction.KnownHit``)."""
        raise NotImplementedError

    def step(self, ctx: Context, s, state, shade: Callable):
        """One vertex: (next state, vertex record). Calls ``shade(...)``
        (this integrator's :meth:`shade`, or the adjoint's wrapper of it)
        exactly once with whatever arguments :meth:`shade` takes."""
        raise NotImplementedError

    def shade(self, ctx: Context, *args):
        """A vertex's reads of differentiable parameters and everything
        computed from them: a pytree whose float leaves carry derivatives."""
        raise NotImplementedError

    def local_radiance(self, vertex, shading, rest: Vec) -> Vec:
        """How this vertex's shading enters the pixel estimate, linear in
        ``shading``: ``rest`` is the radiance the path gathers after the
        vertex (a constant), ``vertex`` what ``step`` recorded."""
        raise NotImplementedError

    def incident_state(self, state):
        """(polarized adjoints) ``state`` with identity throughput and no
        radiance yet, whose trace is the radiance arriving where ``state``
        continues: the same path (Russian roulette sees the whole
        throughput), without the throughput towards the camera."""
        return dataclasses.replace(state, throughput=self.spectrum.one(), radiance=self.spectrum.no_radiance(),
                                   rr_prefix=state.throughput)

    def kept(self, final):
        """Whether the path ending in loop state ``final`` counts (a Bool), or
        None: always (a path that is not kept estimates 0)."""
        return None

    def sample(self, ctx: Context, s) -> Vec:
        return self.trace(ctx, s, self.start(ctx, s))

    def run(self, ctx: Context, s, state):
        """The loop's final state from ``state``."""
        def loop(state):
            return ir.while_loop(lambda st: st.active,
                                 lambda st: self.step(ctx, s, st, functools.partial(self.shade, ctx))[0], state)
        if ctx.diff or not ctx.shared_traces:
            return loop(state)
        # Derivative kernels trace radiance without derivatives from several
        # places (PRB's first pass, what arrives across a moving edge, RB's
        # re-estimates): one function of the kernel instead of a copy each.
        return ir.subroutine(loop, self.plain_state(ctx, state), name=f"{self.name}_run")

    def run_logged(self, ctx: Context, s, state):
        """:meth:`run`, also returning the :class:`QueryLog` of its first
        ``query_log_slots`` steps' ray queries (each step's
        ``Vertex.queries``)."""
        def body(carry):
            st, n, log = carry
            new, vertex = self.step(ctx, s, st, functools.partial(self.shade, ctx))
            return new, n + 1, log.put(n, vertex.queries)
        start = (self.plain_state(ctx, state), ir.Int(0), QueryLog.empty(self.no_queries(ctx), self.query_log_slots))
        final, _, log = ir.while_loop(lambda c: c[0].active, body, start)
        return final, log

    def no_queries(self, ctx: Context):
        """A :class:`QueryLog` entry that answers nothing."""
        raise NotImplementedError

    def with_known_queries(self, state, queries):
        """``state`` whose next step takes the answers ``queries`` (a
        QueryLog entry) for its ray queries."""
        raise NotImplementedError

    def with_first_hit(self, ctx: Context, state):
        """``state`` whose next step takes its ray's first hit as found here
        (one BVH query where the state is active; a replay that traces the
        rest of the path from a state and then steps from it itself
        queries once), or ``state`` itself: the integrator keeps no hits."""
        return state

    def plain_state(self, ctx: Context, state):
        """``state`` in the one form every trace without derivatives of a
        kernel starts from (the same loop state structure wherever it is
        traced from), for :meth:`run` to share their code."""
        return state

    def trace(self, ctx: Context, s, state) -> Vec:
        """Radiance of the rest of the path from ``state``."""
        final = self.run(ctx, s, state)
        kept = self.kept(final)
        return final.radiance if kept is None else ir.select(kept, final.radiance, self.spectrum.no_radiance())

    def _adjoint_body(self, active: tuple, method: str, structure: Structure, **b):
        """Accumulates into ``grad_<name>`` the image cotangent ``grad_image``
        pulled back through the differentiable estimate with the same seed."""
        ctx = _moving(Context.create(b, structure, True, self.spectrum), active)
        S = self.spectrum
        grads = {b[n]: b["grad_" + n] for n in active}
        spp = b["spp"].value
        footprint = structure.footprint
        stride = self.channels       # alpha, if any, follows the colour (its derivative: moving weights)
        width = self.film_width

        # The item's footprint of cotangents, read once for its samples
        # (each uses them twice under motion: the splat's transpose, the
        # moving weights' cotangents). Inside the sample loop they would be
        # read again per sample: the loop's gradient stores may alias them.
        d_block = [[b["grad_image"].read(ctx.item, k * stride + c) for c in range(stride)]
                   for k in range(footprint * footprint)]
        unbound = ctx

        def one_sample(s, carry):
            # The cotangent of this sample's estimate: the splat's transpose,
            # a weighted gather of the footprint's cotangents, then the
            # film's transpose (a spectral path's wavelengths).
            if footprint == 1:
                d_l = Vec(*d_block[0][:width])
            else:
                d_l = Vec(*(0.0,) * width)
                for k, w in enumerate(film.splat_weights(unbound, s, footprint)):
                    d_l = d_l + Vec(*d_block[k][:width]) * w
            ctx = S.bind(unbound, s)
            # Passes that need radiance only (PRB's first pass, RB's
            # re-estimates) run the plain form: the same values without
            # evaluating every BSDF once more per vertex.
            plain = ctx.primal()
            d_film = d_l
            d_l = self.film_transpose(ctx, s, d_l)
            camera = ctx.camera_motion or ctx.geometry_motion
            # (the camera ray's first hit, traced once for the passes and the moving splat weights)
            first, known = motion.camera_hit(ctx, s) if camera else (None, None)
            state0 = self.start(ctx, s) if first is None else self.start(ctx, s, known)
            gated = self.kept(state0) is not None
            # (short paths: the radiance after a vertex is re-traced, one ray, in the replay)
            rest_traced = method == "prb" and self.short_paths and not gated
            if rest_traced and first is None:
                state0 = self.with_first_hit(plain, state0)
            first_pass = (method == "prb" and not rest_traced) or gated
            log = None
            # (kernels of moving geometry also trace plain paths from the
            # edges seen at each vertex, which share run's one subroutine
            # with the first pass: a logged first pass there would be a
            # second copy of the path tracer to compile)
            if method == "prb" and not rest_traced and self.query_log_slots and not ctx.geometry_motion:
                final, log = self.run_logged(plain, s, state0)
            else:
                final = self.run(plain, s, state0) if first_pass else None
            total = final.radiance if method == "prb" and not rest_traced else S.no_radiance()
            if gated:   # a path that does not count has no derivative
                d_l = ir.select(self.kept(final), d_l, S.no_radiance())

            def replay(state):
                shaded = []

                def shade_with_vjp(*args):
                    outs, pullback = ir.vjp(lambda: self.shade(ctx, *args), buffer_grads=grads)
                    shaded.append((outs, pullback))
                    return outs

                new, vertex = self.step(ctx, s, state, shade_with_vjp)
                if method == "prb" and rest_traced:
                    # (one query for the next ray, which the rest's trace and
                    # the replay's next step both start with)
                    new = self.with_first_hit(plain, new)
                    # (where the path goes on: a pass-through step's too, whose rest is the whole path)
                    rest = ir.cond(new.active,
                                   lambda: self.trace(plain, s, dataclasses.replace(new, radiance=S.no_radiance())),
                                   S.no_radiance)
                elif method == "prb":
                    rest = total - new.radiance        # exactly 0 where the path ends
                elif method == "rb" and S.polarized:
                    # Mueller matrices need not be invertible: local_radiance
                    # takes the radiance arriving from the continuation itself
                    rest = ir.cond(vertex.continues, lambda: self.trace(plain, s, self.incident_state(new)),
                                   S.no_radiance)
                elif method == "rb":
                    rest = ir.cond(vertex.continues,
                                   lambda: self.trace(plain, s, dataclasses.replace(new, radiance=S.no_radiance())),
                                   S.no_radiance)
                else:  # rb_biased: incident radiance taken as 1
                    rest = ir.select(vertex.continues, new.throughput, S.zero())
                shading, pullback = shaded[0]
                _, local_pullback = ir.vjp(lambda sh: self.local_radiance(vertex, sh, rest), shading)
                pullback(_nonzero(local_pullback(d_l)[0]))
                return new

            if log is None:
                last = ir.while_loop(lambda st: st.active, replay, state0)
            else:
                # The replay follows the first pass's path: its ray queries'
                # answers are the first pass's (checked by each ray's key).
                # (the loop state holds each step's answers: one structure
                # from the first step on, whatever the step leaves there)
                none = self.no_queries(ctx)

                def replay_known(carry):
                    state, n = carry
                    new = replay(self.with_known_queries(state, log.at(n, none)))
                    return self.with_known_queries(new, none), n + 1

                last, _ = ir.while_loop(lambda c: c[0].active, replay_known,
                                        (self.with_known_queries(state0, none), ir.Int(0)))
            if camera:
                # The splat weights move with the camera (sensors/motion.py):
                # their cotangents are the footprint's pixel cotangents
                # times the sample's whole estimate (the replay's, in value
                # the first pass's, where there is none).
                if final is None:
                    estimate = last.radiance
                elif gated:
                    estimate = ir.select(self.kept(final), final.radiance, S.no_radiance())
                else:
                    estimate = final.radiance
                _, weights_pullback = ir.vjp(lambda: motion.attached_weights(ctx, s, footprint, first),
                                             buffer_grads=grads)
                if self.film_moves:
                    # (the film's own dependence on the camera and the point it sees: its pullback below)
                    film_value, film_pullback = ir.vjp(
                        lambda: self.film_values(ctx, s, ir.detach(estimate), first), buffer_grads=grads)
                else:
                    film_value = self.film_values(ctx, s, estimate)
                d_weights = [_dot(Vec(*d_block[k][:width]), film_value) for k in range(footprint * footprint)]
                if self.alpha:
                    # alpha (whose own derivative is the film boundary's) moves with the weights too
                    alpha = self.sample_alpha(ctx, s)
                    d_weights = [d + d_block[k][width] * alpha for k, d in enumerate(d_weights)]
                weights_pullback(d_weights)
                if self.film_moves:
                    film_pullback(d_film)
            return carry

        ir.fori_loop(ir.UInt(0), spp, one_sample, ir.Int(0))
        return {}

    @_cached("adjoint")
    def adjoint_kernel(self, active: tuple, method: str = "prb", structure: Structure = Structure()) -> ir.Kernel:
        """The adjoint: the primal inputs plus ``grad_image`` (the image
        cotangent, (pixels, channels)); accumulators ``grad_<name>`` shaped
        like each active input. ``method``: "prb" (path replay
        backpropagation), "rb" (radiative backpropagation, the incident
        radiance re-estimated at every vertex by replaying the rest of the
        path: quadratic in path length, the same result) or "rb_biased"
        (incident radiance taken as 1). For one seed it is exactly the
        transpose of :meth:`forward_kernel`'s linear map."""
        active = self.check_active(active)
        if method not in self.adjoint_methods:
            raise ValueError(f"adjoint method must be one of {self.adjoint_methods}, got {method!r}")
        if self.spectrum.polarized and method != "rb":
            raise ValueError(f"the {method!r} adjoint needs the inverse of each vertex's BSDF weight, which a Mueller "
                             "matrix (a polarizer, a depolarizing surface) need not have: polarized variants use "
                             "method='rb'")
        inputs = dict(self.kernel_inputs(active, structure), grad_image=ir.In("f32", (self.block_width(structure),)))
        outputs = {"grad_" + n: ir.Accum(inputs[n].dtype, inputs[n].item_shape) for n in active}
        return ir.trace(functools.partial(self._adjoint_body, active, method, structure), inputs, outputs,
                        name=f"{self.name}_adjoint_{method}{'_short' if self.short_paths else ''}_"
                        + "_".join(active) + self._variant(structure))
