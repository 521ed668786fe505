"""Automatic differentiation of IR functions (``ir.jvp`` / ``ir.vjp``),
checked against JAX on random programs, through control flow, at the
singular points the derivative rules guard, for linearity, and across the
two code generators (one lane / SIMD packets).

How the checks are built
------------------------
* Every test function is written once against a small vocabulary of ops
  and control flow (``B.sin``, ``B.select``, ``B.cond``, ``B.fori_loop``
  ...) and evaluated by three backends: the IR (:class:`IRBackend`, traced
  into a kernel that computes the primal, a jvp along a random direction
  and the vjp of a random cotangent, see :func:`ad_kernel`), ``jax.numpy``
  / ``lax`` (:class:`JnpBackend`, differentiated by JAX in float32 and in
  float64) and plain float64 numpy (:class:`NumpyBackend`: finite
  differences, distances to kinks).
* :class:`Program` draws a random straight-line program over 2-4 float
  inputs from the op set in :data:`OPS` (domains guarded: divide by 1 + b^2,
  sqrt of |a| + 1/8, clamped arguments ...). Program seeds are a fixed
  ``parametrize`` list, so the module compiles a bounded number of kernels
  and feeds each of them many random work items.
* Tolerances (float32 arithmetic, eps = 2**-24 ~ 6e-8 per rounding):
  ``|ir - truth| <= 1e-4 * mag + 8 * |jax32 - truth|`` per work item, where
  truth is JAX in float64, ``mag`` is the sum of the magnitudes of the terms
  that make the exact result (``sum_j |J_oj dx_j|`` for a jvp,
  ``sum_o |J_oj ct_o|`` for a vjp, from the float64 Jacobian) and
  ``|jax32 - truth|`` is what float32 rounding costs JAX on the same program
  at the same point (it absorbs cancellation *inside* the program, which
  ``mag`` does not see). A 20-op program accumulates a few dozen roundings
  of a few ulp each, ~1e-5 relative (the largest error seen is 7% of the
  budget); 1e-4 leaves an order of magnitude of headroom, while a wrong
  derivative rule is off by O(1) (a rule scaled by 1.001 is caught).
  Consequently ``|ir - jax32| <= 1e-4 * mag + 9 * |jax32 - truth|``.
* The derivative of a program is discontinuous where an op has a kink
  (abs, min/max, select's comparison, copysign, the clamps, atan2's branch
  cut, a loop's exit test). Two float32 evaluations that differ by an ulp
  can fall on opposite sides of a kink and legitimately disagree by O(1),
  so work items whose float64 evaluation passes within 1e-4 (relative) of a
  kink are left out of the comparisons (the fraction kept is asserted).
  Exact ties are structural and are kept (see ``NumpyBackend.kink``).
* Every differentiated kernel runs with ``simd_lanes=1`` and with the
  default width; all outputs must be bit-identical (:func:`launch2`).
"""
from __future__ import annotations

import functools
import math
import random

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from jax import lax

from jaxrender import ir
from lanes import run

N_ITEMS = 203          # not a multiple of any SIMD width: exercises the tail packet
RTOL = 1e-4            # relative to the magnitude of the terms (see the module docstring)
WITNESS = 8.0          # allowance, in units of JAX's own float32 error on the same point
KINK_MARGIN = 1e-4     # work items this close to a kink are not compared with JAX


# ---------------------------------------------------------------------------
# Running a kernel through both code generators
# ---------------------------------------------------------------------------

def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


def launch2(kernel: ir.Kernel, shape, **inputs) -> dict[str, np.ndarray]:
    """Launch with the default SIMD width and with ``simd_lanes=1``; every
    output must be bit-identical between the two. Returns the outputs."""
    wide = {k: np.asarray(v) for k, v in run(kernel, shape, None, **inputs).items()}
    one = {k: np.asarray(v) for k, v in run(kernel, shape, 1, **inputs).items()}
    for name in wide:
        a, b = _bits(wide[name]), _bits(one[name])
        bad = np.argwhere(a != b)
        assert bad.size == 0, (
            f"{kernel.name}: output {name!r} differs between the SIMD and the one-lane code at "
            f"{bad[:5].tolist()}: {wide[name][tuple(bad[0])]!r} vs {one[name][tuple(bad[0])]!r}")
    return wide


def assert_close(got, truth, tol, what, mask=None):
    got, truth, tol = (np.asarray(v, np.float64) for v in (got, truth, tol))
    assert np.all(np.isfinite(got)), f"{what}: non-finite values {got[~np.isfinite(got)][:5]}"
    err = np.abs(got - truth)
    bad = err > tol
    if mask is not None:
        bad &= mask
    if bad.any():
        k = np.argwhere(bad)[:5]
        rows = [f"item {tuple(i)}: got {got[tuple(i)]!r} want {truth[tuple(i)]!r} "
                f"(err {err[tuple(i)]:.3g} > tol {tol[tuple(i)]:.3g})" for i in k]
        raise AssertionError(f"{what}: {int(bad.sum())} mismatches\n  " + "\n  ".join(rows))


# ---------------------------------------------------------------------------
# Backends: one vocabulary (ops and control flow), three evaluators
# ---------------------------------------------------------------------------

def _tree_where(pred, a, b, where):
    if isinstance(a, tuple):
        return tuple(_tree_where(pred, x, y, where) for x, y in zip(a, b))
    return where(pred, a, b)


class IRBackend:
    """The vocabulary as IR operations and IR control flow."""

    def __init__(self):
        self.__dict__.update(
            sin=ir.sin, cos=ir.cos, tan=ir.tan, asin=ir.asin, acos=ir.acos, atan=ir.atan,
            atan2=ir.atan2, erf=ir.erf, exp=ir.exp, log=ir.log, sqrt=ir.sqrt, abs=ir.abs, pow=ir.pow,
            minimum=ir.minimum, maximum=ir.maximum, fma=ir.fma, select=ir.select, copysign=ir.copysign,
            cond=ir.cond, dispatch=ir.dispatch, fori_loop=ir.fori_loop, while_loop=ir.while_loop)

    @staticmethod
    def counter(v):
        return ir.Int(v)

    @staticmethod
    def fori_unrolled(lo, hi, body, init):
        return ir.fori_loop(lo, hi, body, init, unroll=True)

    def kink(self, thunk):
        pass


class _ArrayBackend:
    """Shared by the jax.numpy and numpy evaluators: branches evaluate both
    sides and select (every branch used here is finite everywhere)."""

    def cond(self, pred, true_fn, false_fn):
        return _tree_where(pred, true_fn(), false_fn(), self.select)

    def dispatch(self, index, fns, *operands):
        idx = self.minimum(self.maximum(index, 0), len(fns) - 1)  # out of range: clamped
        out = fns[-1](*operands)
        for m in range(len(fns) - 2, -1, -1):
            out = _tree_where(idx == m, fns[m](*operands), out, self.select)
        return out

    @staticmethod
    def fori_unrolled(lo, hi, body, init):
        state = init
        for j in range(lo, hi):
            state = body(j, state)
        return state

    def kink(self, thunk):
        pass


class JnpBackend(_ArrayBackend):
    """jax.numpy and lax control flow (differentiable by JAX, any dtype)."""

    def __init__(self):
        self.__dict__.update(
            sin=jnp.sin, cos=jnp.cos, tan=jnp.tan, asin=jnp.arcsin, acos=jnp.arccos, atan=jnp.arctan,
            atan2=jnp.arctan2, erf=jsp.erf, exp=jnp.exp, log=jnp.log, sqrt=jnp.sqrt, abs=jnp.abs,
            pow=jnp.power, minimum=jnp.minimum, maximum=jnp.maximum, select=jnp.where,
            copysign=jnp.copysign, fma=lambda a, b, c: a * b + c)

    @staticmethod
    def counter(v):
        return jnp.asarray(v, jnp.int32)

    @staticmethod
    def fori_loop(lo, hi, body, init):
        return lax.fori_loop(lo, hi, body, init)

    @staticmethod
    def while_loop(cond_fn, body_fn, init):
        return lax.while_loop(cond_fn, body_fn, init)


class NumpyBackend(_ArrayBackend):
    """Plain float64 numpy over a batch of work items (a reference that
    shares no code with JAX or the IR: finite differences, kink distances).
    With ``kinks`` (a list) it records, for every kink of the evaluated
    program, how far each work item is from it."""

    def __init__(self, kinks: list | None = None):
        self.kinks = kinks
        self.__dict__.update(
            sin=np.sin, cos=np.cos, tan=np.tan, asin=np.arcsin, acos=np.arccos, atan=np.arctan,
            atan2=np.arctan2, erf=np.vectorize(math.erf, otypes=[np.float64]), exp=np.exp, log=np.log,
            sqrt=np.sqrt, abs=np.abs, pow=np.power, minimum=np.minimum, maximum=np.maximum,
            select=np.where, copysign=np.copysign, fma=lambda a, b, c: a * b + c)

    @staticmethod
    def counter(v):
        return np.int64(v)

    @staticmethod
    def fori_loop(lo, hi, body, init):
        hi = np.asarray(hi)
        state = init
        for j in range(lo, int(hi.max(initial=lo))):
            state = _tree_where(j < hi, body(j, state), state, np.where)
        return state

    @staticmethod
    def while_loop(cond_fn, body_fn, init):
        state = init
        for _ in range(10_000):
            active = np.asarray(cond_fn(state))
            if not active.any():
                return state
            state = _tree_where(active, body_fn(state), state, np.where)
        raise AssertionError("reference while_loop does not terminate")

    def kink(self, thunk):
        if self.kinks is not None:
            u, v = thunk()
            u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
            d = np.abs(u - v) / (1.0 + np.maximum(np.abs(u), np.abs(v)))
            # An exact tie is structural (e.g. min(max(a, b), a) where a > b):
            # both operands are then the same function with the same tangent,
            # every float32 evaluation ties too, and either side's derivative
            # is the right one, so it is not a place where results may flip.
            self.kinks.append(np.where(d == 0.0, np.inf, d))


IRB = IRBackend()
JNB = JnpBackend()


def _clamp(B, x, lo, hi):
    B.kink(lambda: (x, lo))
    B.kink(lambda: (x, hi))
    return B.minimum(B.maximum(x, lo), hi)


def _abs_kink(B, x):
    B.kink(lambda: (x, 0.0))
    return B.abs(x)


def _atan2(B, a, b):
    # atan2 jumps by 2*pi across a == 0 where b < 0 (the branch cut)
    B.kink(lambda: (B.select(b < 0, a, 1.0), 0.0))
    return B.atan2(a, b)


def _minmax(name):
    def f(B, a, b):
        B.kink(lambda: (a, b))
        return getattr(B, name)(a, b)
    return f


def _select(B, a, b, c, d):
    B.kink(lambda: (a, b))
    return B.select(a < b, c, d)


def _copysign(B, a, b):
    B.kink(lambda: (a, 0.0))
    B.kink(lambda: (b, 0.0))
    return B.copysign(a, b)


# Constants are dyadic (exact in float32), so the float64 reference computes
# the same mathematical function as the float32 programs.
# name: (arity, evaluate(B, *args), magnitude bound from the args' bounds)
OPS = {
    "add": (2, lambda B, a, b: a + b, lambda a, b: a + b),
    "sub": (2, lambda B, a, b: a - b, lambda a, b: a + b),
    "mul": (2, lambda B, a, b: a * b, lambda a, b: a * b),
    "div": (2, lambda B, a, b: a / (1.0 + b * b), lambda a, b: a),
    "neg": (1, lambda B, a: -a, lambda a: a),
    "fma": (3, lambda B, a, b, c: B.fma(a, b, c), lambda a, b, c: a * b + c),
    "minimum": (2, _minmax("minimum"), max),
    "maximum": (2, _minmax("maximum"), max),
    "abs": (1, _abs_kink, lambda a: a),
    "sqrt": (1, lambda B, a: B.sqrt(_abs_kink(B, a) + 0.125), lambda a: math.sqrt(a + 0.125)),
    "exp": (1, lambda B, a: B.exp(_clamp(B, a, -4.0, 4.0)), lambda a: math.exp(min(a, 4.0))),
    "log": (1, lambda B, a: B.log(_abs_kink(B, a) + 0.5), lambda a: max(0.7, math.log(a + 0.5))),
    "sin": (1, lambda B, a: B.sin(a), lambda a: 1.0),
    "cos": (1, lambda B, a: B.cos(a), lambda a: 1.0),
    "tan": (1, lambda B, a: B.tan(_clamp(B, a, -1.25, 1.25)), lambda a: 3.1),
    "asin": (1, lambda B, a: B.asin(_clamp(B, a, -0.875, 0.875)), lambda a: 1.6),
    "acos": (1, lambda B, a: B.acos(_clamp(B, a, -0.875, 0.875)), lambda a: 3.2),
    "atan": (1, lambda B, a: B.atan(a), lambda a: 1.6),
    "atan2": (2, _atan2, lambda a, b: 3.2),
    "erf": (1, lambda B, a: B.erf(a), lambda a: 1.0),
    "pow": (2, lambda B, a, b: B.pow(_abs_kink(B, a) + 0.5, _clamp(B, b, -2.0, 2.0)),
            lambda a, b: max(4.0, (a + 0.5) ** 2)),
    "select": (4, _select, lambda a, b, c, d: max(c, d)),
    "copysign": (2, _copysign, lambda a, b: a),
}
MAX_BOUND = 64.0  # keeps intermediate values O(1)..O(64): no huge arguments to sin & co.


class Program:
    def __init__(self, seed: int):
        rnd = random.Random(seed)
        self.seed = seed
        self.n_in = rnd.randint(2, 4)
        bounds = [2.0] * self.n_in  # inputs are drawn from [-2, 2]
        self.ops: list[tuple[str, tuple[int, ...]]] = []
        names = sorted(OPS)
        for _ in range(rnd.randint(10, 20)):
            for _attempt in range(50):
                name = rnd.choice(names)
                arity, _, bound = OPS[name]
                if arity > len(bounds):
                    continue
                args: list[int] = []
                while len(args) < arity:  # distinct operands, biased towards recent values
                    k = (len(bounds) - 1 - rnd.randrange(min(4, len(bounds))) if rnd.random() < 0.6
                         else rnd.randrange(len(bounds)))
                    if k not in args:
                        args.append(k)
                b = bound(*(bounds[k] for k in args))
                if b <= MAX_BOUND:
                    break
            else:
                name, args, b = "sin", [len(bounds) - 1], 1.0
            self.ops.append((name, tuple(args)))
            bounds.append(b)
        last = len(bounds) - 1
        others = list(range(self.n_in, last))
        extra = rnd.sample(others, min(len(others), rnd.randint(0, 2)))
        self.outputs = (last, *extra)
        self.n_out = len(self.outputs)

    def __call__(self, B, *xs):
        vals = list(xs)
        for name, args in self.ops:
            vals.append(OPS[name][1](B, *(vals[k] for k in args)))
        return tuple(vals[k] for k in self.outputs)

    def __repr__(self):
        body = "; ".join(f"v{self.n_in + i} = {n}({', '.join(f'v{k}' for k in a)})"
                         for i, (n, a) in enumerate(self.ops))
        return f"Program(seed={self.seed}, inputs=v0..v{self.n_in - 1}: {body}; out {self.outputs})"


PROGRAM_SEEDS = list(range(16))


@functools.cache
def program(seed: int) -> Program:
    return Program(seed)


def ad_kernel(fn, n_in: int, n_out: int, name: str, n_aux: int = 0, reverse: bool = True,
              none_tangent: bool = False) -> ir.Kernel:
    """A kernel differentiating ``fn(B, *xs, *aux) -> tuple of n_out floats``
    (``xs``: n_in floats, input ``x``; ``aux``: i32 inputs ``a0``, ``a1`` ...)
    per work item. Outputs: ``y`` (primal), ``dy`` (jvp along ``dx``); with
    ``reverse``, ``g`` (vjp of the cotangent ``ct``) and ``y2`` (the primal
    the vjp computes); with ``none_tangent``, ``dy0``: the jvp along ``dx``
    with the first tangent given as None (a symbolic zero)."""

    def body(x, dx, ct, **aux):
        i = ir.item_index()
        xs, dxs, cts = x[i], dx[i], ct[i]
        av = tuple(aux[f"a{k}"][i] for k in range(n_aux))

        def f(*v):
            return fn(IRB, *v, *av)

        out = {}
        out["y"], out["dy"] = ir.jvp(f, xs, dxs)
        if none_tangent:
            out["dy0"] = ir.jvp(f, xs, (None,) + tuple(dxs[1:]))[1]
        if reverse:
            out["y2"], pullback = ir.vjp(f, *xs)
            out["g"] = pullback(cts)
        return out

    ins = {"x": ir.In("f32", (n_in,)), "dx": ir.In("f32", (n_in,)), "ct": ir.In("f32", (n_out,))}
    ins.update({f"a{k}": ir.In("i32") for k in range(n_aux)})
    outs = {"y": ir.Out("f32", (n_out,)), "dy": ir.Out("f32", (n_out,))}
    if none_tangent:
        outs["dy0"] = ir.Out("f32", (n_out,))
    if reverse:
        outs.update(y2=ir.Out("f32", (n_out,)), g=ir.Out("f32", (n_in,)))
    return ir.trace(body, ins, outs, name=name)


@functools.cache
def program_kernel(seed: int) -> ir.Kernel:
    prog = program(seed)
    return ad_kernel(prog, prog.n_in, prog.n_out, f"ad_program_{seed}")


def program_data(prog: Program, seed: int, n: int = N_ITEMS):
    r = np.random.default_rng(1000 + seed)
    x = r.uniform(-2.0, 2.0, (n, prog.n_in)).astype(np.float32)
    dx = r.standard_normal((n, prog.n_in)).astype(np.float32)
    ct = r.standard_normal((n, prog.n_out)).astype(np.float32)
    return x, dx, ct


def _cols(a, dtype):
    return tuple(jnp.asarray(a[:, k], dtype) for k in range(a.shape[1]))


class Reference:
    """JAX's derivatives of ``fn(B, *xs, *aux)`` at float32 inputs ``x``:
    in float32 (``y32``, ``dy32``, ``g32``) and in float64 (``y``, ``dy``,
    ``g``: truth), the float64 Jacobian (n, out, in), the magnitude of the
    terms of each derivative, and ``mask``: the work items away from kinks
    (evaluated with the float64 numpy backend)."""

    def __init__(self, fn, x, dx, ct, aux=(), reverse=True, none_tangent=False):
        n_in = x.shape[1]
        dx0 = dx.copy()
        dx0[:, 0] = 0.0

        def f(p, a):
            return lambda *v: fn(JNB, *v, *a)

        def both(dtype):
            xs, ts, t0s, cts = (_cols(v, dtype) for v in (x, dx, dx0, ct))
            av = tuple(jnp.asarray(v, jnp.int32) for v in aux)
            y, dy = jax.vmap(lambda p, t, a: jax.jvp(f(p, a), p, t))(xs, ts, av)
            res = [np.stack(v, 1).astype(np.float64) for v in (y, dy)]
            if none_tangent:
                dy0 = jax.vmap(lambda p, t, a: jax.jvp(f(p, a), p, t)[1])(xs, t0s, av)
                res.append(np.stack(dy0, 1).astype(np.float64))
            else:
                res.append(None)
            if reverse:
                g = jax.vmap(lambda p, c, a: jax.vjp(f(p, a), *p)[1](c))(xs, cts, av)
                res.append(np.stack(g, 1).astype(np.float64))
            else:
                res.append(None)
            return res, xs, av

        (self.y32, self.dy32, self.dy0_32, self.g32), _, _ = both(jnp.float32)
        with jax.enable_x64(True):
            (self.y, self.dy, self.dy0, self.g), xs64, av = both(jnp.float64)
            jac = jax.vmap(lambda p, a: jax.jacfwd(f(p, a), argnums=tuple(range(n_in)))(*p))(xs64, av)
            n_out = len(jac)
            self.jac = np.array([[np.asarray(jac[o][j]) for j in range(n_in)]
                                 for o in range(n_out)]).transpose(2, 0, 1)
        kinks: list = []
        fn(NumpyBackend(kinks), *_np_cols(x), *aux)
        margin = np.min(np.stack(kinks), 0) if kinks else np.full(len(x), np.inf)
        self.mask = margin > KINK_MARGIN
        absj = np.abs(self.jac)
        self.mag_dy = np.einsum("noj,nj->no", absj, np.abs(dx.astype(np.float64)))
        self.mag_dy0 = np.einsum("noj,nj->no", absj, np.abs(dx0.astype(np.float64)))
        self.mag_g = np.einsum("noj,no->nj", absj, np.abs(ct.astype(np.float64)))
        self.mag_dot = np.einsum("noj,nj,no->n", absj, np.abs(dx.astype(np.float64)),
                                 np.abs(ct.astype(np.float64)))

    def check(self, out, what, primal_rtol=1e-5):
        """The comparisons of the module docstring, on the items of ``mask``."""
        m = self.mask[:, None]
        assert_close(out["y"], self.y, primal_rtol * (1.0 + np.abs(self.y)) + WITNESS * np.abs(self.y32 - self.y),
                     f"primal of {what}", m)
        assert_close(out["dy"], self.dy, RTOL * self.mag_dy + WITNESS * np.abs(self.dy32 - self.dy) + 1e-30,
                     f"jvp of {what}", m)
        if "dy0" in out:
            assert_close(out["dy0"], self.dy0,
                         RTOL * self.mag_dy0 + WITNESS * np.abs(self.dy0_32 - self.dy0) + 1e-30,
                         f"jvp with a None tangent of {what}", m)
        if "g" in out:
            # the jvp and the vjp re-trace the same function: same primal, bit for bit
            np.testing.assert_array_equal(_bits(out["y"]), _bits(out["y2"]), err_msg=what)
            assert_close(out["g"], self.g, RTOL * self.mag_g + WITNESS * np.abs(self.g32 - self.g) + 1e-30,
                         f"vjp of {what}", m)


def _np_cols(a):
    return tuple(np.asarray(a[:, k], np.float64) for k in range(a.shape[1]))


@functools.cache
def program_results(seed: int):
    prog = program(seed)
    x, dx, ct = program_data(prog, seed)
    out = launch2(program_kernel(seed), (N_ITEMS,), x=x, dx=dx, ct=ct)
    return prog, (x, dx, ct), out, Reference(prog, x, dx, ct)


# ---------------------------------------------------------------------------
# 1. Random programs against JAX
# ---------------------------------------------------------------------------

def test_generator_covers_the_op_set():
    used = {name for s in PROGRAM_SEEDS for name, _ in program(s).ops}
    assert used == set(OPS), f"ops never drawn: {set(OPS) - used}"
    assert {program(s).n_in for s in PROGRAM_SEEDS} == {2, 3, 4}


@pytest.mark.parametrize("seed", PROGRAM_SEEDS)
def test_random_program_matches_jax(seed):
    prog, _, out, ref = program_results(seed)
    assert ref.mask.mean() >= 0.75, f"{prog}: only {ref.mask.mean():.0%} of the items are away from kinks"
    ref.check(out, repr(prog))


@pytest.mark.parametrize("seed", PROGRAM_SEEDS)
def test_random_program_dot_product_identity(seed):
    """<J dx, ct> == <dx, J^T ct> per work item, between the IR's own jvp
    and vjp (no JAX values involved except the scale of the terms)."""
    prog, (x, dx, ct), out, ref = program_results(seed)
    lhs = np.sum(out["dy"].astype(np.float64) * ct, 1)
    rhs = np.sum(out["g"].astype(np.float64) * dx, 1)
    # float32 error of each side, as witnessed by JAX on the same point
    wit = (np.abs(ref.dy32 - ref.dy) * np.abs(ct)).sum(1) + (np.abs(ref.g32 - ref.g) * np.abs(dx)).sum(1)
    assert_close(lhs, rhs, RTOL * ref.mag_dot + 2 * WITNESS * wit + 1e-30,
                 f"<J dx, ct> vs <dx, J^T ct> for {prog}", ref.mask)


# ---------------------------------------------------------------------------
# 4. Linearity in the tangent and in the cotangent; symbolic zeros
# ---------------------------------------------------------------------------

LINEARITY_SEEDS = [1, 6, 11]


@functools.cache
def linearity_kernel(seed: int) -> ir.Kernel:
    prog = program(seed)

    def f(*xs):
        return prog(IRB, *xs)

    def body(x, dx, dx2, ct, ct2):
        i = ir.item_index()
        xs, t1, t2, c1, c2 = x[i], dx[i], dx2[i], ct[i], ct2[i]
        out = {}
        for name, t in [("dy_a", t1), ("dy_2a", tuple(2.0 * v for v in t1)), ("dy_b", t2),
                        ("dy_ab", tuple(a + b for a, b in zip(t1, t2))),
                        ("dy_none0", (None,) + tuple(t1[1:])), ("dy_zero0", (0.0,) + tuple(t1[1:]))]:
            out[name] = ir.jvp(f, xs, t)[1]
        for name, c in [("g_a", c1), ("g_2a", tuple(2.0 * v for v in c1)), ("g_b", c2),
                        ("g_ab", tuple(a + b for a, b in zip(c1, c2))),
                        ("g_nonelast", tuple(c1[:-1]) + (None,)), ("g_zerolast", tuple(c1[:-1]) + (0.0,))]:
            out[name] = ir.vjp(f, *xs)[1](c)
        return out

    ni, no = prog.n_in, prog.n_out
    outs = {k: ir.Out("f32", (no,)) for k in ("dy_a", "dy_2a", "dy_b", "dy_ab", "dy_none0", "dy_zero0")}
    outs.update({k: ir.Out("f32", (ni,)) for k in ("g_a", "g_2a", "g_b", "g_ab", "g_nonelast", "g_zerolast")})
    ins = {"x": ir.In("f32", (ni,)), "dx": ir.In("f32", (ni,)), "dx2": ir.In("f32", (ni,)),
           "ct": ir.In("f32", (no,)), "ct2": ir.In("f32", (no,))}
    return ir.trace(body, ins, outs, name=f"ad_linearity_{seed}")


@pytest.mark.parametrize("seed", LINEARITY_SEEDS)
def test_jvp_and_vjp_are_linear(seed):
    prog = program(seed)
    x, dx, ct = program_data(prog, seed)
    r = np.random.default_rng(seed + 77)
    dx2 = r.standard_normal(dx.shape).astype(np.float32)
    ct2 = r.standard_normal(ct.shape).astype(np.float32)
    o = launch2(linearity_kernel(seed), (N_ITEMS,), x=x, dx=dx, dx2=dx2, ct=ct, ct2=ct2)
    # Scaling by 2 commutes exactly with every float op a linear map is made of
    # (+, -, * and / by a primal coefficient, select), so these are bit-exact.
    np.testing.assert_array_equal(o["dy_2a"], 2 * o["dy_a"], err_msg=f"jvp(2 dx) != 2 jvp(dx): {prog}")
    np.testing.assert_array_equal(o["g_2a"], 2 * o["g_a"], err_msg=f"pullback(2 c) != 2 pullback(c): {prog}")
    # A symbolic zero (None) is the same as a zero tangent/cotangent (+0 vs -0 aside).
    np.testing.assert_array_equal(o["dy_none0"], o["dy_zero0"], err_msg=f"None tangent: {prog}")
    np.testing.assert_array_equal(o["g_nonelast"], o["g_zerolast"], err_msg=f"None cotangent: {prog}")
    # Additivity holds up to rounding, relative to the magnitude of the terms
    # (same budget as against JAX: the two sides round differently).
    ref = Reference(prog, x, dx, ct)
    absj = np.abs(ref.jac)
    mag_dy = np.einsum("noj,nj->no", absj, np.abs(dx) + np.abs(dx2))
    mag_g = np.einsum("noj,no->nj", absj, np.abs(ct) + np.abs(ct2))
    m = ref.mask[:, None]  # the magnitudes come from the float64 Jacobian: not across kinks
    assert_close(o["dy_ab"], o["dy_a"].astype(np.float64) + o["dy_b"], RTOL * mag_dy + 1e-30,
                 f"jvp(dx1 + dx2) vs jvp(dx1) + jvp(dx2): {prog}", m)
    assert_close(o["g_ab"], o["g_a"].astype(np.float64) + o["g_b"], RTOL * mag_g + 1e-30,
                 f"pullback(c1 + c2) vs pullback(c1) + pullback(c2): {prog}", m)


# ---------------------------------------------------------------------------
# 2. Control flow: cond, dispatch, loops (forward mode), unrolled loops (reverse)
# ---------------------------------------------------------------------------

def cond_fn(B, a, b):
    """Branches on the data: both sides differentiable, a side that is a
    constant, a branch returning a tuple, and a branch that is inactive."""
    B.kink(lambda: (a, b))
    B.kink(lambda: (a + b, 0.5))
    B.kink(lambda: (a, 0.0))
    u = B.cond(a > b, lambda: B.sin(a) * b + a * a, lambda: B.exp(0.5 * b) * a)
    v = B.cond(a + b > 0.5, lambda: a * b, lambda: 2.0)           # one side does not depend on a, b
    w0, w1 = B.cond(a < 0.0, lambda: (B.cos(b), a), lambda: (b, 1.5 * a))
    s = B.cond(a > b, lambda: 1.25, lambda: -0.75)                 # no side depends on a, b
    return (u + v * w0 + w1 + s * b, v)


def dispatch_fn(B, a, b, k):
    """Three different functions selected per item by ``k`` (3, 4: clamped)."""
    B.kink(lambda: (a, 0.0))
    fns = [lambda a, b: B.sin(a) * b,
           lambda a, b: a / (1.0 + b * b) + B.exp(0.5 * b),
           lambda a, b: B.pow(B.abs(a) + 0.5, 0.5 * b) - a]
    return (B.dispatch(k, fns, a, b) * (1.0 + 0.25 * a),)


def _loop_body(B, x, y):
    def body(j, s):
        p, q = s
        return (p + 0.25 * B.sin(q * y) + 0.0625 * j * x, 0.875 * q + 0.125 * B.cos(p))
    return body


def fori_fn(B, x, y, n):
    """A symbolic fori_loop over a per-item trip count ``n`` (0..12)."""
    p, q = B.fori_loop(0, n, _loop_body(B, x, y), (x, y))
    return (p * q, p)


def while_fn(B, x, y, n):
    """A while_loop whose trip count depends on the data (and on ``x``)."""
    def cond(s):
        B.kink(lambda: (s[1], 4.0))  # the trip count changes where an iterate crosses 4
        return (s[0] < n) & (s[1] < 4.0)

    def body(s):
        return (s[0] + 1, s[1] + 0.5 + 0.25 * B.sin(s[1] * x + y))
    j, v = B.while_loop(cond, body, (B.counter(0), x))
    return (v * y, v)


def unrolled_fn(B, x, y):
    """The body of fori_fn, unrolled 6 times (literal bounds)."""
    p, q = B.fori_unrolled(0, 6, _loop_body(B, x, y), (x, y))
    return (p * q, p)


CF = {  # name: (fn, n_in, n_out, n_aux, reverse)
    "cond": (cond_fn, 2, 2, 0, True),
    "dispatch": (dispatch_fn, 2, 1, 1, True),
    "fori": (fori_fn, 2, 2, 1, False),
    "while": (while_fn, 2, 2, 1, False),
    "unrolled": (unrolled_fn, 2, 2, 0, True),
}


@functools.cache
def cf_kernel(name: str) -> ir.Kernel:
    fn, n_in, n_out, n_aux, reverse = CF[name]
    return ad_kernel(fn, n_in, n_out, f"ad_{name}", n_aux=n_aux, reverse=reverse, none_tangent=True)


def cf_data(name: str, n: int = N_ITEMS):
    fn, n_in, n_out, n_aux, _ = CF[name]
    r = np.random.default_rng(sum(map(ord, name)))
    x = r.uniform(-2.0, 2.0, (n, n_in)).astype(np.float32)
    dx = r.standard_normal((n, n_in)).astype(np.float32)
    ct = r.standard_normal((n, n_out)).astype(np.float32)
    aux = tuple(r.integers(0, {"dispatch": 5}.get(name, 13), n).astype(np.int32) for _ in range(n_aux))
    return x, dx, ct, aux


@functools.cache
def cf_results(name: str):
    fn, n_in, n_out, n_aux, reverse = CF[name]
    x, dx, ct, aux = cf_data(name)
    out = launch2(cf_kernel(name), (N_ITEMS,), x=x, dx=dx, ct=ct, **{f"a{k}": a for k, a in enumerate(aux)})
    ref = Reference(fn, x, dx, ct, aux, reverse=reverse, none_tangent=True)
    return (x, dx, ct, aux), out, ref


@pytest.mark.parametrize("name", list(CF))
def test_control_flow_matches_jax(name):
    _, out, ref = cf_results(name)
    assert ref.mask.mean() >= 0.75, f"{name}: only {ref.mask.mean():.0%} of the items are away from kinks"
    ref.check(out, name)


def test_control_flow_kernels_keep_their_structure():
    """The transforms emit real control flow (not inlined/flattened code):
    otherwise the tests above would not exercise it."""
    assert " if(" in cf_kernel("cond").text
    assert " dispatch[" in cf_kernel("dispatch").text
    assert " loop(" in cf_kernel("fori").text and " loop(" in cf_kernel("while").text
    assert " loop(" not in cf_kernel("unrolled").text


@pytest.mark.parametrize("name", ["fori", "while", "unrolled", "cond"])
def test_control_flow_jvp_matches_finite_differences(name):
    """Central differences of the float64 numpy evaluation along dx
    (h = 1e-7: truncation ~h^2, cancellation ~1e-16/h, both << 1e-4)."""
    fn = CF[name][0]
    (x, dx, ct, aux), out, ref = cf_results(name)
    h = 1e-7
    x64, d64 = x.astype(np.float64), dx.astype(np.float64)
    plus = np.stack(fn(NumpyBackend(), *_np_cols(x64 + h * d64), *aux), 1)
    minus = np.stack(fn(NumpyBackend(), *_np_cols(x64 - h * d64), *aux), 1)
    fd = (plus - minus) / (2 * h)
    m = ref.mask[:, None]
    assert_close(out["dy"], fd, 2e-4 * (ref.mag_dy + np.abs(fd)) + 1e-6, f"jvp of {name} vs finite differences", m)


def test_reverse_through_symbolic_loop_raises():
    """No reverse mode through a symbolic loop that carries a derivative:
    tracing fails with an ir.IRError that says what to do instead."""
    for fn in (fori_fn, while_fn):
        def body(x, n, fn=fn):
            i = ir.item_index()
            _, pullback = ir.vjp(lambda a, b: fn(IRB, a, b, n[i]), x[i], x[i] * 2.0)
            return pullback((1.0, 1.0))[0]
        with pytest.raises(ir.IRError, match=r"reverse mode through a symbolic loop.*unroll"):
            ir.trace(body, {"x": ir.In("f32"), "n": ir.In("i32")}, {"g": ir.Out("f32")})


@functools.cache
def inactive_loop_kernel() -> ir.Kernel:
    def body(x, n):
        i = ir.item_index()
        a, ni = x[i], n[i]

        def f(a):  # the loop does not depend on a: reverse mode is fine
            m = ir.fori_loop(0, ni, lambda j, s: s * 0.5 + 1.0, 0.0)
            return a * m + ir.sin(a)
        y, pullback = ir.vjp(f, a)

        def g(a):  # the loop depends on a, but no cotangent reaches it
            return fori_fn(IRB, a, 0.5, ni)[0], a * a
        _, pullback2 = ir.vjp(g, a)
        return {"y": y, "g": pullback(1.0), "g2": pullback2((None, 1.0))}
    return ir.trace(body, {"x": ir.In("f32"), "n": ir.In("i32")},
                    {"y": ir.Out("f32"), "g": ir.Out("f32"), "g2": ir.Out("f32")}, name="ad_inactive_loop")


def test_reverse_mode_with_loops_that_carry_no_derivative():
    r = np.random.default_rng(5)
    x = r.uniform(-2, 2, N_ITEMS).astype(np.float32)
    n = r.integers(0, 10, N_ITEMS).astype(np.int32)
    out = launch2(inactive_loop_kernel(), (N_ITEMS,), x=x, n=n)
    m = 2.0 * (1.0 - 0.5 ** n.astype(np.float64))  # s -> s/2 + 1 from 0, n times
    np.testing.assert_allclose(out["y"], x * m + np.sin(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["g"], m + np.cos(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["g2"], 2.0 * x, rtol=1e-6)


# ---------------------------------------------------------------------------
# 3. Singular points the derivative rules guard: finite, documented values
# ---------------------------------------------------------------------------

# name: (f(x, y), expected (dF/dx, dF/dy)(x, y) in float64). The expected
# values are those of the *selected* branch: where a select (or the guard
# inside a rule) discards a singular value, its infinite/NaN derivative must
# not leak into the result (the rules multiply a zero tangent or cotangent
# by an infinite coefficient as exactly 0).
EDGE = {
    # d/dx sqrt(x*x) = sign(x), and 0 at x == 0 in both modes: forward, the
    # tangent 2x dx of x*x is exactly 0 there and sqrt'(0) = inf times a zero
    # tangent is 0; reverse, the infinite cotangent of x*x times the zero
    # coefficient 2x is 0 (JAX gives NaN in both modes).
    "sqrt_sq": (lambda x, y: ir.sqrt(x * x),
                lambda x, y: (np.sign(x), 0.0)),
    # the branch taken at x <= 0 is the constant 0: derivative 0, even though
    # sqrt'(0) = inf and sqrt(x < 0) = NaN on the discarded side.
    "sel_sqrt": (lambda x, y: ir.select(x > 0.0, ir.sqrt(x), 0.0),
                 lambda x, y: (0.5 / np.sqrt(x) if x > 0 else 0.0, 0.0)),
    # atan2(y, x): d = (x dy - y dx) / (x^2 + y^2), defined as 0 at the origin.
    "atan2": (lambda x, y: ir.atan2(y, x),
              lambda x, y: ((-y / (x * x + y * y), x / (x * x + y * y)) if x * x + y * y > 0 else (0.0, 0.0))),
    # asin / acos have infinite slope at +-1; the select takes the linear side there.
    "asin_sel": (lambda x, y: ir.select(ir.abs(x) < 1.0, ir.asin(x), 0.5 * x),
                 lambda x, y: (1.0 / np.sqrt(1.0 - x * x) if abs(x) < 1 else 0.5, 0.0)),
    "acos_sel": (lambda x, y: ir.select(ir.abs(x) < 1.0, ir.acos(x), -0.5 * x),
                 lambda x, y: (-1.0 / np.sqrt(1.0 - x * x) if abs(x) < 1 else -0.5, 0.0)),
    # x / y guarded at y == 0 (x / 0 is inf, or NaN for 0 / 0): derivative 0 there.
    "div_sel": (lambda x, y: ir.select(y != 0.0, x / y, 0.0),
                lambda x, y: ((1.0 / y, -x / (y * y)) if y != 0 else (0.0, 0.0))),
    # log guarded at x <= 0 (log 0 = -inf, log(x < 0) = NaN): derivative 0 there.
    "log_sel": (lambda x, y: ir.select(x > 0.0, ir.log(x), 0.0),
                lambda x, y: (1.0 / x if x > 0 else 0.0, 0.0)),
}
EDGE_POINTS = [(0.0, 0.0), (-0.0, 0.0), (1.0, 0.0), (-1.0, 0.0), (0.0, 1.0), (4.0, 2.0),
               (-2.0, 0.5), (0.5, -0.25), (-1.0, -3.0)]


@functools.cache
def edge_kernel() -> ir.Kernel:
    def body(x, y, c):
        i = ir.item_index()
        xi, yi, ci = x[i], y[i], c[i]
        out = {}
        for name, (f, _) in EDGE.items():
            out[name + "_y"], out[name + "_dx"] = ir.jvp(f, (xi, yi), (1.0, None))
            out[name + "_dy"] = ir.jvp(f, (xi, yi), (None, 1.0))[1]
            _, pullback = ir.vjp(f, xi, yi)
            out[name + "_gx"], out[name + "_gy"] = pullback(ci)
        return out
    outs = {f"{n}_{k}": ir.Out("f32") for n in EDGE for k in ("y", "dx", "dy", "gx", "gy")}
    return ir.trace(body, {"x": ir.In("f32"), "y": ir.In("f32"), "c": ir.In("f32")},
                    outs, name="ad_edges")


def test_singular_points_give_finite_documented_derivatives():
    x = np.array([p[0] for p in EDGE_POINTS], np.float32)
    y = np.array([p[1] for p in EDGE_POINTS], np.float32)
    out = launch2(edge_kernel(), (len(x),), x=x, y=y, c=np.ones_like(x))
    for name, (_, expect) in EDGE.items():
        want = np.array([expect(float(a), float(b)) for a, b in EDGE_POINTS], np.float64)
        for k, col in (("dx", 0), ("dy", 1), ("gx", 0), ("gy", 1)):
            got, w = out[f"{name}_{k}"], want[:, col]
            assert np.all(np.isfinite(got)), f"{name} {k}: {got} at {EDGE_POINTS}"
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=0, err_msg=f"{name} {k} at {EDGE_POINTS}")
        assert np.all(np.isfinite(out[f"{name}_y"])), f"{name}: primal {out[name + '_y']}"
    # the primal values at the guarded points are the selected constants
    assert out["atan2_y"][0] == 0.0 and out["sel_sqrt_y"][0] == 0.0 and out["div_sel_y"][0] == 0.0


def test_zero_cotangent_gives_exact_zero_gradient_at_singular_points():
    """pullback(0) is exactly 0 everywhere, including where a coefficient of
    the linearised function is infinite or NaN (sqrt(x*x) at 0 among them)."""
    x = np.array([p[0] for p in EDGE_POINTS], np.float32)
    y = np.array([p[1] for p in EDGE_POINTS], np.float32)
    out = launch2(edge_kernel(), (len(x),), x=x, y=y, c=np.zeros_like(x))
    for name in EDGE:
        for k in ("gx", "gy"):
            np.testing.assert_array_equal(out[f"{name}_{k}"], 0.0, err_msg=f"{name} {k} at {EDGE_POINTS}")


def test_sqrt_of_square_at_zero_reverse_matches_forward():
    # The forward linear map at 0 is exactly zero (the tangent of x*x is 0 * dx);
    # the transpose must not turn it into (ct * inf) * 0 = NaN. JAX gives NaN
    # in both modes; jaxrender's zero-safe products give 0 in both.
    x = np.zeros(3, np.float32)
    out = launch2(edge_kernel(), (3,), x=x, y=x, c=np.ones_like(x))
    np.testing.assert_array_equal(out["sqrt_sq_gx"], out["sqrt_sq_dx"])


# ---------------------------------------------------------------------------
# 5. The one-lane and SIMD code generators agree bit for bit
# ---------------------------------------------------------------------------
# Every launch in this module goes through launch2, which runs the kernel
# with simd_lanes=1 and with the default width and compares all outputs
# bitwise. This test makes sure the comparison is not vacuous.

def test_launch2_compares_two_different_code_generators():
    from jaxrender.lowering import cpu
    if cpu.simd_lanes() == 1:
        pytest.skip("the default SIMD width is 1 on this host ($JAXRENDER_SIMD_LANES)")
    (x, dx, ct, aux), out, _ = cf_results("while")  # divergent trip counts inside packets
    assert len(set(aux[0][:16].tolist())) > 1
    one = run(cf_kernel("while"), (N_ITEMS,), 1, x=x, dx=dx, ct=ct, a0=aux[0])
    for k in out:
        np.testing.assert_array_equal(_bits(out[k]), _bits(np.asarray(one[k])))
