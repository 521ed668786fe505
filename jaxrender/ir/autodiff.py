"""Automatic differentiation as graph-to-graph transforms of the kernel IR.

Forward mode (:func:`jvp`) walks a traced function's graph and emits, next
to each primal operation, its tangent. Only *active* values get tangents: a
value is active if it is a float that depends on a differentiated input or
on a read of a differentiated buffer (:func:`activity`), so code that does
not depend on what is differentiated costs nothing (symbolic zeros).

Reverse mode (:func:`vjp`) is linearize + transpose, done one operation at
a time: the derivative of every op is written once, as a tangent rule that
is linear in the tangents (:func:`_tangent_rule`); the reverse step of a node
traces that rule with symbolic tangent inputs into a scratch block and
transposes it (:func:`_transpose`). Custom forward rules therefore get
their reverse mode for free. Primal values the reverse pass needs are the
SSA values of the forward pass (registers), and inside branches and
dispatch targets, which are separate scopes, they are recomputed, never
stored. Reading a differentiated buffer transposes into an atomic
scatter-add into its gradient accumulator.

Reverse mode through a symbolic loop is not provided (PRB/RB are the
reverse mode of the path loop and are written as algorithms); loops with
literal bounds can be unrolled with ``fori_loop(..., unroll=True)``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from .graph import F32, Block, IRError, Node, walk
from .pytree import flatten_up_to, tree_flatten, tree_unflatten
from .values import Float, Var, as_var, current_block, scope, wrap

# Ops whose result has a zero derivative (piecewise constant or non-float).
_ZERO_DERIVATIVE = {"floor", "ceil", "trunc", "round", "detach", "bvh_query"}
# The ops a tangent rule may combine tangents with (what _transpose handles).
_LINEAR_OPS = {"add", "sub", "neg", "mul", "zmul", "div", "select", "fma", "proj"}

_SQRT_PI_INV2 = 2.0 / math.sqrt(math.pi)
_LN2 = math.log(2.0)


# ---------------------------------------------------------------------------
# Tracing a function into a block, copying blocks
# ---------------------------------------------------------------------------

def _as_leaves(values: Sequence[Any], what: str) -> list[Var]:
    out = []
    for v in values:
        if not isinstance(v, Var):
            v = as_var(v)
        out.append(v)
    return out


def trace_function(fn: Callable[..., Any], primals: Sequence[Any],
                   diff_buffers: frozenset = frozenset()) -> tuple[Block, Any, Any]:
    """Trace ``fn(*primals)`` into a standalone block (params = flattened
    primals); returns (block, input treedef, output treedef). Values the
    function captures from the enclosing kernel are used as they are,
    except reads of ``diff_buffers`` (input indices): those the function
    makes are its own (value numbering does not reuse a read made before
    it, whose derivative would be lost)."""
    leaves, in_tree = tree_flatten(tuple(primals))
    leaves = _as_leaves(leaves, "primal")
    blk = Block(current_block(), "function")
    blk.meta["diff_buffers"] = frozenset(diff_buffers)
    with scope(blk):
        params = [wrap(blk.add_param(v.dtype)) for v in leaves]
        out = fn(*tree_unflatten(in_tree, params))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = _as_leaves(out_leaves, "result")
        blk.set_results([v.node for v in out_leaves], "function result")
    return blk, in_tree, out_tree, leaves


class _Env:
    """Maps nodes of a source graph to values in the graph being emitted."""

    def __init__(self, parent: "_Env | None" = None):
        self.parent = parent
        self.vals: dict[int, Any] = {}
        self.regions: dict[int, tuple[Node, dict[int, int]]] = {}

    def _find(self, table: str, n: Node):
        e = self
        while e is not None:
            v = getattr(e, table).get(n.id)
            if v is not None:
                return v
            e = e.parent
        return None

    def get(self, n: Node):
        v = self._find("vals", n)
        return n if v is None else v  # not in the map: a value captured from outside the copied graph

    def region(self, n: Node):
        r = self._find("regions", n)
        if r is None:
            raise IRError(f"internal: region node %{n.id} was not copied")
        return r


def _node_of(v) -> Node:
    return v.node if isinstance(v, Var) else v


def _copy_block(src: Block, env: _Env, skip_effects: bool = False) -> None:
    """Re-emit ``src``'s nodes into the current block (constants, folding and
    value numbering apply). With ``skip_effects``, scatter-adds and checks are
    left out: used when a reverse pass recomputes primal values."""
    for n in src.nodes:
        _copy_node(n, env, skip_effects)


def _copy_node(n: Node, env: _Env, skip_effects: bool = False) -> None:
    if skip_effects and n.op in ("scatter_add", "check"):
        return
    if n.op == "proj":
        new, _ = env.region(n.args[0])
        env.vals[n.id] = current_block().emit("proj", n.type, (new,), n.attrs)
        return
    args = tuple(_node_of(env.get(a)) for a in n.args)
    if n.regions:
        regions = tuple(_copy_region(r, env, skip_effects) for r in n.regions)
        new = current_block().emit(n.op, None, args, n.attrs, regions,
                                   effect=any(r.has_effects() for r in regions))
        new.payload = n.payload
        env.regions[n.id] = (new, {})
        return
    env.vals[n.id] = current_block().emit(n.op, n.type, args, n.attrs, effect=n.effect and not skip_effects)


def _copy_region(r: Block, env: _Env, skip_effects: bool) -> Block:
    blk = Block(current_block(), r.kind)
    inner = _Env(env)
    with scope(blk):
        for p in r.params:
            inner.vals[p.id] = blk.add_param(p.type)
        _copy_block(r, inner, skip_effects)
        blk.set_results([_node_of(inner.get(x)) for x in r.results], "copied region")
    return blk


# ---------------------------------------------------------------------------
# Activity analysis
# ---------------------------------------------------------------------------

class Activity:
    """Which values of a graph carry a nonzero derivative."""

    def __init__(self, diff_buffers: set[int]):
        self.diff_buffers = diff_buffers
        self.active: set[int] = set()
        self.region_results: dict[int, set[int]] = {}  # region node -> active result indices

    def __contains__(self, n: Node) -> bool:
        return n.id in self.active

    def analyse(self, block: Block) -> None:
        for n in block.nodes:
            self._node(n)

    def _node(self, n: Node) -> None:
        a = self.active
        if n.op == "gather":
            if n.type == F32 and n.attrs[0] in self.diff_buffers:
                a.add(n.id)
            return
        if n.op == "proj":
            if n.attrs[0] in self.region_results.get(n.args[0].id, ()):
                a.add(n.id)
            return
        if n.op == "loop":
            cond, body = n.regions
            state = {j for j, x in enumerate(n.args) if x.id in a}
            while True:
                for j in state:
                    a.add(cond.params[j].id)
                    a.add(body.params[j].id)
                self.analyse(cond)
                self.analyse(body)
                grown = state | {j for j, r in enumerate(body.results) if r.id in a}
                if grown == state:
                    break
                state = grown
            self.region_results[n.id] = state
            return
        if n.op == "call":
            (body,) = n.regions
            for prm, x in zip(body.params, n.args):
                if x.id in a:
                    a.add(prm.id)
        if n.regions:
            res: set[int] = set()
            for r in n.regions:
                self.analyse(r)
                res |= {k for k, x in enumerate(r.results) if x.id in a}
            self.region_results[n.id] = res
            return
        if n.type != F32 or n.op in _ZERO_DERIVATIVE:
            return
        if n.op == "select":
            if n.args[1].id in a or n.args[2].id in a:
                a.add(n.id)
            return
        if any(x.id in a for x in n.args):
            a.add(n.id)


def activity(block: Block, active_inputs: Sequence[Node], diff_buffers: set[int]) -> Activity:
    act = Activity(diff_buffers)
    act.active.update(n.id for n in active_inputs if n.type == F32)
    act.analyse(block)
    return act


# ---------------------------------------------------------------------------
# Tangent rules: the derivative of every op, linear in the tangents.
# ---------------------------------------------------------------------------

def _zmul(t: Var, coef: Var) -> Float:
    """t * coef, exactly 0 when either is 0 (even if the other is inf or NaN)."""
    return wrap(current_block().emit("zmul", F32, (t.node, as_var(coef, F32).node)))


def _tangent_rule(n: Node, p: list[Var], t: list[Var | None], y: Var) -> Var | None:
    """Tangent of node ``n`` given primal args ``p``, their tangents ``t``
    (None: zero) and the primal result ``y``. Emits into the current block."""
    from . import ops

    op = n.op

    def tz(k):
        return t[k] if t[k] is not None else Float(0.0)

    def plus(*terms):
        terms = [x for x in terms if x is not None]
        if not terms:
            return None
        acc = terms[0]
        for x in terms[1:]:
            acc = acc + x
        return acc

    def scaled(k, coef, safe=False):
        if t[k] is None:
            return None
        return _zmul(t[k], coef) if safe else t[k] * coef

    if op == "add":
        return plus(t[0], t[1])
    if op == "sub":
        return plus(t[0], None if t[1] is None else -t[1])
    if op == "neg":
        return -t[0]
    if op == "mul":
        return plus(scaled(0, p[1]), scaled(1, p[0]))
    if op == "div":
        # d(a/b) = da / b - db * (a/b) / b
        inv = 1.0 / p[1]
        return plus(scaled(0, inv, safe=True), None if t[1] is None else -_zmul(t[1], y * inv))
    if op == "fma":
        return plus(scaled(0, p[1]), scaled(1, p[0]), t[2])
    if op == "select":
        if t[1] is None and t[2] is None:
            return None
        return ops.select(p[0], tz(1), tz(2))
    if op in ("min", "max"):
        better = (p[1] < p[0]) if op == "min" else (p[1] > p[0])
        take_b = better | ops.isnan(p[0])
        return ops.select(take_b, tz(1), tz(0))
    if op == "abs":
        # |x|' = sign(x), 0 at x == 0
        return ops.select(p[0] > 0.0, tz(0), ops.select(p[0] < 0.0, -tz(0), Float(0.0)))
    if op == "copysign":
        flip = (ops.copysign(1.0, p[0]) * ops.copysign(1.0, p[1])) < 0.0
        return ops.select(flip, -tz(0), tz(0))
    if op == "sqrt":
        # 0.5 / sqrt(x): infinite at 0, so a zero tangent stays exactly zero
        return scaled(0, 0.5 / y, safe=True)
    if op == "rsqrt":
        return scaled(0, -0.5 * y * y * y, safe=True)
    if op == "exp":
        return scaled(0, y)
    if op == "exp2":
        return scaled(0, y * _LN2)
    if op == "log":
        return scaled(0, 1.0 / p[0], safe=True)
    if op == "log2":
        return scaled(0, 1.0 / (p[0] * _LN2), safe=True)
    if op == "sin":
        return scaled(0, ops.cos(p[0]))
    if op == "cos":
        return scaled(0, -ops.sin(p[0]))
    if op == "tan":
        return scaled(0, 1.0 + y * y)
    if op in ("asin", "acos"):
        # +-1 / sqrt(1 - x^2): infinite at |x| == 1; never NaN for a zero tangent
        c = ops.rsqrt(1.0 - p[0] * p[0])
        return scaled(0, c if op == "asin" else -c, safe=True)
    if op == "atan":
        return scaled(0, 1.0 / (1.0 + p[0] * p[0]))
    if op == "atan2":
        # d atan2(a, b) = (b da - a db) / (a^2 + b^2), defined as 0 at the origin
        den = p[0] * p[0] + p[1] * p[1]
        inv = ops.select(den > 0.0, 1.0 / den, Float(0.0))
        return plus(scaled(0, p[1] * inv), None if t[1] is None else -(t[1] * (p[0] * inv)))
    if op == "erf":
        return scaled(0, _SQRT_PI_INV2 * ops.exp(-p[0] * p[0]))
    if op == "pow":
        # d x^y = y x^(y-1) dx + x^y log(x) dy; the dy term is 0 where log(x) is not real
        da = None if t[0] is None else _zmul(t[0], p[1] * ops.pow(p[0], p[1] - 1.0))
        db = None if t[1] is None else _zmul(t[1], ops.select(p[0] > 0.0, y * ops.log(p[0]), Float(0.0)))
        return plus(da, db)
    raise IRError(f"no derivative rule for op {op!r}")


# ---------------------------------------------------------------------------
# Forward mode
# ---------------------------------------------------------------------------

class _Forward:
    def __init__(self, act: Activity, buffer_tangents: Mapping[int, tuple[int, int]]):
        self.act = act
        self.buffer_tangents = buffer_tangents  # buffer index -> (tangent buffer index, width)

    def block(self, src: Block, env: _Env, tenv: dict[int, Var]) -> None:
        for n in src.nodes:
            if n.op == "proj":
                self.proj(n, env, tenv)
            elif n.op in ("loop", "if", "dispatch", "call"):
                getattr(self, "region_" + n.op)(n, env, tenv)
            else:
                if n.op == "scatter_add" and n.args[1] in self.act:
                    raise IRError("differentiating a value that is scatter-added is not supported")
                args = tuple(_node_of(env.get(a)) for a in n.args)
                y = current_block().emit(n.op, n.type, args, n.attrs, effect=n.effect)
                env.vals[n.id] = y
                if n in self.act:
                    tenv[n.id] = self.tangent(n, env, tenv, y)

    def tangent(self, n: Node, env: _Env, tenv, y) -> Var | None:
        if n.op == "gather":
            tb, width = self.buffer_tangents[n.attrs[0]]
            row = env.get(n.args[0])
            return wrap(current_block().emit("gather", F32, (_node_of(row),), (tb, n.attrs[1], width)))
        p = [wrap(_node_of(env.get(a))) for a in n.args]
        t = [tenv.get(a.id) for a in n.args]
        return _tangent_rule(n, p, t, wrap(y))

    def proj(self, n: Node, env: _Env, tenv) -> None:
        src, tmap = env.region(n.args[0])
        k = n.attrs[0]
        if isinstance(src, tuple):  # results given directly (a custom forward rule)
            outs, touts = src
            env.vals[n.id] = outs[k].node
            if touts[k] is not None and n in self.act:
                tenv[n.id] = touts[k]
            return
        env.vals[n.id] = current_block().emit("proj", n.type, (src,), (k,))
        if k in tmap and n in self.act:
            tenv[n.id] = wrap(current_block().emit("proj", F32, (src,), (tmap[k],)))

    def _region(self, r: Block, env: _Env, tenv, params_primal, params_tangent, tangent_results) -> Block:
        """Copy region ``r`` with tangents; results = primal + tangents of ``tangent_results``."""
        blk = Block(current_block(), r.kind)
        inner = _Env(env)
        tin = dict(tenv)
        with scope(blk):
            for prm in params_primal:
                inner.vals[prm.id] = blk.add_param(prm.type)
            for prm in params_tangent:
                tin[prm.id] = wrap(blk.add_param(F32))
            self.block(r, inner, tin)
            res = [_node_of(inner.get(x)) for x in r.results]
            for k in tangent_results:
                tv = tin.get(r.results[k].id)
                res.append((tv if tv is not None else Float(0.0)).node)
            blk.set_results(res, "differentiated region")
        return blk

    def region_loop(self, n: Node, env: _Env, tenv) -> None:
        cond, body = n.regions
        state = sorted(self.act.region_results.get(n.id, ()))
        init = [_node_of(env.get(a)) for a in n.args]
        for j in state:
            tv = tenv.get(n.args[j].id)
            init.append((tv if tv is not None else Float(0.0)).node)
        tparams = [cond.params[j] for j in state]
        new_cond = self._region(cond, env, tenv, cond.params, tparams, [])
        new_body = self._region(body, env, tenv, body.params, [body.params[j] for j in state], state)
        new = current_block().emit("loop", None, init, (), (new_cond, new_body),
                                   effect=new_cond.has_effects() or new_body.has_effects())
        env.regions[n.id] = (new, {j: len(n.args) + i for i, j in enumerate(state)})

    def _branches(self, n: Node, env: _Env, tenv, op: str) -> None:
        res = sorted(self.act.region_results.get(n.id, ()))
        regions = tuple(self._region(r, env, tenv, [], [], res) for r in n.regions)
        args = tuple(_node_of(env.get(a)) for a in n.args)
        new = current_block().emit(op, None, args, n.attrs, regions, effect=any(r.has_effects() for r in regions))
        nres = len(n.regions[0].results)
        env.regions[n.id] = (new, {k: nres + i for i, k in enumerate(res)})

    def region_if(self, n, env, tenv):
        self._branches(n, env, tenv, "if")

    def region_dispatch(self, n, env, tenv):
        self._branches(n, env, tenv, "dispatch")

    def region_call(self, n: Node, env: _Env, tenv) -> None:
        (body,) = n.regions
        args = [wrap(_node_of(env.get(a))) for a in n.args]
        active = [a in self.act for a in n.args]
        rule = (n.payload or {}).get("jvp")
        if rule is not None:
            tangents = [tenv.get(a.id) if is_active else None for a, is_active in zip(n.args, active)]
            outs, touts = _call_custom_jvp(rule, args, tangents)
            env.regions[n.id] = ((outs, touts), {})
            return
        # No forward rule: differentiate the body. The new call takes the
        # primal arguments, then the tangents of the active ones.
        res = sorted(self.act.region_results.get(n.id, ()))
        tparams = [prm for prm, is_active in zip(body.params, active) if is_active]
        blk = self._region(body, env, tenv, body.params, tparams, res)
        targs = []
        for a, is_active in zip(n.args, active):
            if is_active:
                tv = tenv.get(a.id)
                targs.append((tv if tv is not None else Float(0.0)).node)
        new = current_block().emit("call", None, tuple(a.node for a in args) + tuple(targs), n.attrs, (blk,),
                                   effect=blk.has_effects())
        new.payload = n.payload
        nres = len(body.results)
        env.regions[n.id] = (new, {k: nres + i for i, k in enumerate(res)})


def _call_custom_jvp(rule, args: list[Var], tangents: list[Var | None]):
    tz = [t if t is not None else Float(0.0) if a.dtype == F32 else None for a, t in zip(args, tangents)]
    out, tout = rule(tuple(args), tuple(tz))
    ol, _ = tree_flatten(out)
    tl: list = []
    _flatten_with_none(tout, tl)
    if len(ol) != len(tl):
        raise IRError("custom jvp rule: outputs and output tangents differ in structure")
    return [as_var(x) for x in ol], [None if x is None else as_var(x, F32) for x in tl]


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any],
        buffer_tangents: Mapping[Any, Any] | None = None) -> tuple[Any, Any]:
    """Forward-mode derivative of ``fn`` at ``primals`` along ``tangents``.

    ``tangents`` mirrors ``primals``; ``None`` (or a non-float leaf) is a
    symbolic zero, and code only it would need is never emitted.
    ``buffer_tangents`` maps an input buffer to the input buffer holding its
    tangent: a read of the former has the same read of the latter as tangent.
    Returns ``(outputs, output_tangents)``; output tangents of values that do
    not depend on anything differentiated are ``0.0`` (floats) or ``None``.

    Example::

        y, dy = ir.jvp(lambda x: ir.sin(x) * x, (x,), (dx,))
    """
    primals = tuple(primals)
    bt = _buffer_map(buffer_tangents, "buffer_tangents")
    blk, in_tree, out_tree, pleaves = trace_function(fn, primals, frozenset(bt))
    tleaves = _tangent_leaves(tangents, in_tree, len(pleaves))
    diff_bufs = {k for k in bt}
    active_params = [prm for prm, t in zip(blk.params, tleaves) if t is not None and prm.type == F32]
    act = activity(blk, active_params, diff_bufs)
    env = _Env()
    tenv: dict[int, Var] = {}
    for prm, v, t in zip(blk.params, pleaves, tleaves):
        env.vals[prm.id] = v.node
        if prm in active_params:
            tenv[prm.id] = as_var(t, F32)
    _Forward(act, bt).block(blk, env, tenv)
    outs = [wrap(_node_of(env.get(r))) for r in blk.results]
    touts = []
    for r, o in zip(blk.results, outs):
        tv = tenv.get(r.id)
        touts.append(tv if tv is not None else (Float(0.0) if o.dtype == F32 else None))
    return tree_unflatten(out_tree, outs), tree_unflatten(out_tree, touts)


def _tangent_leaves(tangents, in_tree, n) -> list:
    leaves: list = []
    _flatten_with_none(tuple(tangents), leaves)
    if len(leaves) != n:
        raise IRError(f"jvp: tangents must mirror the primals {in_tree} ({n} leaves, None for zero); "
                      f"got {len(leaves)} leaves")
    return leaves


def _flatten_with_none(x, out: list) -> None:
    """Like tree_flatten but keeps None leaves (symbolic zero tangents)."""
    if x is None:
        out.append(None)
        return
    if isinstance(x, (tuple, list)):
        for c in x:
            _flatten_with_none(c, out)
        return
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten_with_none(x[k], out)
        return
    leaves, _ = tree_flatten(x)
    out.extend(leaves)


def _buffer_map(mapping, what: str) -> dict[int, Any]:
    from .kernel import Accumulator, Buffer
    out: dict[int, Any] = {}
    for src, dst in (mapping or {}).items():
        if not isinstance(src, Buffer) or src.spec.dtype != F32:
            raise IRError(f"{what}: keys must be f32 input buffers")
        if what == "buffer_tangents":
            if not isinstance(dst, Buffer) or dst.spec.dtype != F32 or dst.width != src.width:
                raise IRError(f"{what}: the tangent of {src.name!r} must be an f32 input with the same item_shape")
            out[src.index] = (dst.index, dst.width)
        else:
            if not isinstance(dst, Accumulator) or dst.spec.dtype != F32 or dst.width != src.width:
                raise IRError(f"{what}: the gradient of {src.name!r} must be an f32 Accum with the same item_shape")
            out[src.index] = dst
    return out


# ---------------------------------------------------------------------------
# Reverse mode
# ---------------------------------------------------------------------------

def _or_zero(v: Var | None) -> Var:
    return v if v is not None else Float(0.0)


def _add_ct(cts: dict[int, Var], n: Node, c: Var | None) -> None:
    if c is None:
        return
    prev = cts.get(n.id)
    cts[n.id] = c if prev is None else prev + c


def _transpose(lin: Block, lin_inputs: list[Node], out: Node, ct: Var) -> list[Var | None]:
    """Transpose the linear map ``lin_inputs -> out`` recorded in ``lin``.

    Non-linear nodes (coefficients) are re-emitted into the current block;
    linear nodes are walked in reverse accumulating cotangents. Returns the
    cotangent of each input (None: no contribution)."""
    linear = {p.id for p in lin_inputs}
    env = _Env()
    order = []
    for n in lin.nodes:
        if any(a.id in linear for a in n.args):
            if n.op not in _LINEAR_OPS:
                raise IRError(f"derivative rule is not linear in the tangents: it applies {n.op!r} to a tangent")
            linear.add(n.id)
            order.append(n)
        else:
            _copy_node(n, env)
    cts: dict[int, Var] = {}
    if out.id in linear:
        cts[out.id] = ct

    def val(x: Node) -> Var:
        return wrap(_node_of(env.get(x)))

    for n in reversed(order):
        c = cts.pop(n.id, None)
        if c is None:
            continue
        a = n.args
        lin_a = [x.id in linear for x in a]
        if n.op == "add":
            for x, is_lin in zip(a, lin_a):
                if is_lin:
                    _add_ct(cts, x, c)
        elif n.op == "sub":
            if lin_a[0]:
                _add_ct(cts, a[0], c)
            if lin_a[1]:
                _add_ct(cts, a[1], -c)
        elif n.op == "neg":
            _add_ct(cts, a[0], -c)
        elif n.op == "mul":
            if lin_a[0] and lin_a[1]:
                raise IRError("derivative rule multiplies two tangents")
            k = 0 if lin_a[0] else 1
            # zero-safe: a zero coefficient stops an infinite cotangent (sqrt(x*x) at 0)
            _add_ct(cts, a[k], _zmul(c, val(a[1 - k])))
        elif n.op == "zmul":
            if lin_a[1]:
                raise IRError("derivative rule: zmul's coefficient depends on a tangent")
            _add_ct(cts, a[0], _zmul(c, val(a[1])))
        elif n.op == "div":
            if lin_a[1]:
                raise IRError("derivative rule divides by a tangent")
            _add_ct(cts, a[0], c / val(a[1]))
        elif n.op == "fma":
            if lin_a[0] and lin_a[1]:
                raise IRError("derivative rule multiplies two tangents")
            if lin_a[0]:
                _add_ct(cts, a[0], _zmul(c, val(a[1])))
            if lin_a[1]:
                _add_ct(cts, a[1], _zmul(c, val(a[0])))
            if lin_a[2]:
                _add_ct(cts, a[2], c)
        elif n.op == "select":
            if lin_a[0]:
                raise IRError("derivative rule selects on a tangent")
            cond = wrap(_node_of(env.get(a[0])))
            from .ops import select
            zero = Float(0.0)
            if lin_a[1]:
                _add_ct(cts, a[1], select(cond, c, zero))
            if lin_a[2]:
                _add_ct(cts, a[2], select(cond, zero, c))
        else:  # pragma: no cover - guarded by _LINEAR_OPS
            raise IRError(f"cannot transpose {n.op!r}")
    return [cts.get(p.id) for p in lin_inputs]


def _local_vjp(rule: Callable[[list[Var | None]], Var | None], n_inputs: int,
               active: list[bool], ct: Var) -> list[Var | None]:
    """Reverse step of one operation: trace its tangent rule with symbolic
    tangents into a scratch block, then transpose it."""
    lin = Block(current_block(), "linear")
    with scope(lin):
        tparams = [lin.add_param(F32) if is_active else None for is_active in active]
        t = [wrap(p) if p is not None else None for p in tparams]
        tout = rule(t)
        if tout is None:
            return [None] * n_inputs
        tout = as_var(tout, F32)
    inputs = [p for p in tparams if p is not None]
    got = iter(_transpose(lin, inputs, tout.node, ct))
    return [next(got) if p is not None else None for p in tparams]


class _Reverse:
    def __init__(self, act: Activity, buffer_grads: Mapping[int, Any]):
        self.act = act
        self.buffer_grads = buffer_grads

    def backward(self, src: Block, env: _Env, cts: dict[int, Var]) -> None:
        """Emit the reverse of ``src`` (whose primal values are in ``env``)."""
        pending: dict[int, dict[int, Var]] = {}  # region node -> result index -> cotangent
        for n in reversed(src.nodes):
            if n.op == "scatter_add" and n.args[1] in self.act:
                raise IRError("differentiating a value that is scatter-added is not supported")
            if n.op == "proj":
                c = cts.pop(n.id, None)
                if c is not None:
                    d = pending.setdefault(n.args[0].id, {})
                    d[n.attrs[0]] = c if n.attrs[0] not in d else d[n.attrs[0]] + c
                continue
            if n.regions:
                rc = pending.pop(n.id, {})
                if rc:
                    getattr(self, "region_" + n.op)(n, env, cts, rc)
                continue
            c = cts.pop(n.id, None)
            if c is None or n not in self.act:
                continue
            if n.op == "gather":
                acc = self.buffer_grads[n.attrs[0]]
                row = wrap(_node_of(env.get(n.args[0])))
                current_block().emit("scatter_add", None, (row.node, c.node), (acc.index, n.attrs[1], acc.width),
                                     effect=True)
                continue
            p = [wrap(_node_of(env.get(a))) for a in n.args]
            y = wrap(_node_of(env.get(n)))
            active = [a in self.act for a in n.args]
            grads = _local_vjp(lambda t, n=n, p=p, y=y: _tangent_rule(n, p, t, y), len(p), active, c)
            for a, g in zip(n.args, grads):
                _add_ct(cts, a, g)

    def region_loop(self, n: Node, env, cts, rc) -> None:
        raise IRError("reverse mode through a symbolic loop is not supported: unroll it "
                      "(fori_loop(..., unroll=True) with literal bounds) or write the adjoint "
                      "as an algorithm (RB/PRB)")

    def _free_active(self, regions: Sequence[Block]) -> list[Node]:
        inside: set[int] = set()
        for r in regions:
            inside.update(x.id for x in walk(r))
            inside.update(p.id for p in r.params)
            for x in walk(r):
                for rr in x.regions:
                    inside.update(p.id for p in rr.params)
        free: dict[int, Node] = {}
        for r in regions:
            for x in list(walk(r)) + [None]:
                args = r.results if x is None else x.args
                for a in args:
                    if a.id not in inside and a in self.act:
                        free[a.id] = a
        return list(free.values())

    def _reverse_region(self, r: Block, env: _Env, rc: dict[int, Var], free: list[Node],
                        param_values: Sequence[Any] = ()) -> list[Node]:
        """Inside a new branch: recompute ``r``'s primal values, run its
        reverse, and return the cotangents of ``free`` (captured values)."""
        inner = _Env(env)
        for prm, v in zip(r.params, param_values):
            inner.vals[prm.id] = _node_of(v)
        _copy_block(r, inner, skip_effects=True)
        cts: dict[int, Var] = {}
        for k, c in rc.items():
            _add_ct(cts, r.results[k], c)
        self.backward(r, inner, cts)
        return [_or_zero(cts.get(x.id)).node for x in free], cts

    def _branches(self, n: Node, env: _Env, cts, rc, op: str) -> None:
        free = self._free_active(n.regions)
        # Nothing to do only if no captured value is active *and* no branch
        # reads a differentiated buffer (whose gradient is scatter-added).
        if not free and not any(x.op == "gather" and x in self.act for r in n.regions for x in walk(r)):
            return
        regions = []
        for r in n.regions:
            blk = Block(current_block(), r.kind)
            with scope(blk):
                res, _ = self._reverse_region(r, env, rc, free)
                blk.set_results(res, "adjoint branch")
            regions.append(blk)
        args = tuple(_node_of(env.get(a)) for a in n.args)
        new = current_block().emit(op, None, args, n.attrs, tuple(regions),
                                   effect=any(r.has_effects() for r in regions))
        for k, x in enumerate(free):
            _add_ct(cts, x, wrap(current_block().emit("proj", F32, (new,), (k,))))

    def region_if(self, n, env, cts, rc):
        self._branches(n, env, cts, rc, "if")

    def region_dispatch(self, n, env, cts, rc):
        self._branches(n, env, cts, rc, "dispatch")

    def region_call(self, n: Node, env: _Env, cts, rc) -> None:
        (body,) = n.regions
        args = [wrap(_node_of(env.get(a))) for a in n.args]
        payload = n.payload or {}
        active = [a in self.act for a in n.args]
        outs_ct = [rc.get(k) for k in range(len(body.results))]
        if payload.get("vjp") is not None:
            new, _ = env.region(n)
            outs = [wrap(current_block().emit("proj", r.type, (new,), (k,))) for k, r in enumerate(body.results)]
            zero_ct = [c if c is not None else Float(0.0) for c in outs_ct]
            grads = payload["vjp"](tuple(args), tuple(outs), tuple(zero_ct))
            grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
            if len(grads) != len(args):
                raise IRError(f"custom vjp rule returned {len(grads)} cotangents for {len(args)} inputs")
            for a, g, is_active in zip(n.args, grads, active):
                if is_active and g is not None:
                    _add_ct(cts, a, as_var(g, F32))
            return
        if payload.get("jvp") is not None:
            rule = payload["jvp"]
            for k, c in enumerate(outs_ct):
                if c is None:
                    continue

                def lin_rule(t, k=k):
                    _, touts = _call_custom_jvp(rule, args, t)
                    return touts[k]
                for a, g in zip(n.args, _local_vjp(lin_rule, len(args), active, c)):
                    _add_ct(cts, a, g)
            return
        # No custom rule: recompute the body here and run its reverse.
        inner = _Env(env)
        for prm, v in zip(body.params, args):
            inner.vals[prm.id] = v.node
        _copy_block(body, inner, skip_effects=True)
        bcts: dict[int, Var] = {}
        for k, c in rc.items():
            _add_ct(bcts, body.results[k], c)
        self.backward(body, inner, bcts)
        for prm, a in zip(body.params, n.args):
            _add_ct(cts, a, bcts.pop(prm.id, None))
        for k, v in bcts.items():  # captured outer values
            if k not in {x.id for x in walk(body)}:
                cts[k] = v if k not in cts else cts[k] + v


def vjp(fn: Callable[..., Any], *primals: Any, buffer_grads: Mapping[Any, Any] | None = None
        ) -> tuple[Any, Callable[[Any], tuple]]:
    """Reverse mode: returns ``(outputs, pullback)``.

    ``pullback(cotangents)`` emits the transposed code and returns the
    cotangents of the primals (``None`` for non-float inputs). Reads of a
    buffer in ``buffer_grads`` (input buffer -> ``Accum`` of the same
    item_shape) scatter-add their cotangent into the accumulator.

    Example::

        y, pullback = ir.vjp(lambda a, b: a * ir.sin(b), a, b)
        da, db = pullback(1.0)
    """
    bg = _buffer_map(buffer_grads, "buffer_grads")
    blk, in_tree, out_tree, pleaves = trace_function(fn, primals, frozenset(bg))
    active_params = [prm for prm in blk.params if prm.type == F32]
    act = activity(blk, active_params, set(bg))
    env = _Env()
    for prm, v in zip(blk.params, pleaves):
        env.vals[prm.id] = v.node
    _copy_block(blk, env)
    outs = [wrap(_node_of(env.get(r))) for r in blk.results]
    home = current_block()
    used = []

    def pullback(cotangents: Any) -> tuple:
        if used:
            raise IRError("a vjp pullback can be called once (it emits the reverse pass)")
        used.append(True)
        if not home.encloses(current_block()):
            raise IRError("the pullback must be called where the forward values are visible "
                          "(in the scope of the vjp call or nested inside it)")
        try:
            leaves = flatten_up_to(out_tree, cotangents)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise IRError(f"pullback: the cotangents do not match the outputs ({exc})") from None
        if len(leaves) != len(outs):
            raise IRError(f"pullback: expected {len(outs)} cotangents, got {len(leaves)}")
        cts: dict[int, Var] = {}
        for r, o, c in zip(blk.results, outs, leaves):
            if c is None or o.dtype != F32:
                continue
            _add_ct(cts, r, as_var(c, F32) if isinstance(c, Var) else Float(float(c)))
        _Reverse(act, bg).backward(blk, env, cts)
        grads = []
        for prm in blk.params:
            g = cts.get(prm.id)
            grads.append(g if g is not None else (Float(0.0) if prm.type == F32 else None))
        return tree_unflatten(in_tree, grads)

    return tree_unflatten(out_tree, outs), pullback


# ---------------------------------------------------------------------------
# Custom derivatives and detach
# ---------------------------------------------------------------------------

class custom_derivative:  # noqa: N801 - used as a decorator
    """Attach a custom forward rule and/or reverse rule to an IR function.

    ``jvp(primals, tangents) -> (outputs, output_tangents)`` must be linear
    in the tangents (it then also serves reverse mode by transposition);
    ``vjp(primals, outputs, cotangents) -> input cotangents`` overrides
    reverse mode. Without a rule for a mode, that mode differentiates the
    body as usual.

    Example::

        @ir.custom_derivative
        def safe_norm(x, y):
            return ir.sqrt(x * x + y * y)

        @safe_norm.defjvp
        def _(primals, tangents):
            x, y = primals
            n = safe_norm(x, y)
            inv = ir.select(n > 0.0, 1.0 / n, 0.0)
            return n, (x * tangents[0] + y * tangents[1]) * inv
    """

    def __init__(self, fn: Callable[..., Any], jvp: Callable | None = None, vjp: Callable | None = None):
        self.fn = fn
        self.jvp_rule = jvp
        self.vjp_rule = vjp
        self.__name__ = getattr(fn, "__name__", "custom")
        self.__doc__ = getattr(fn, "__doc__", None)

    def defjvp(self, rule: Callable) -> Callable:
        self.jvp_rule = rule
        return rule

    def defvjp(self, rule: Callable) -> Callable:
        self.vjp_rule = rule
        return rule

    def __call__(self, *args: Any) -> Any:
        leaves, in_tree = tree_flatten(tuple(args))
        leaves = _as_leaves(leaves, "argument")
        if in_tree != tree_flatten(tuple(leaves))[1]:
            raise IRError(f"{self.__name__}: arguments must be a flat sequence of IR values")
        parent = current_block()
        body = Block(parent, "call")
        with scope(body):
            params = [wrap(body.add_param(v.dtype)) for v in leaves]
            out = self.fn(*params)
            out_leaves, out_tree = tree_flatten(out)
            out_leaves = _as_leaves(out_leaves, "result")
            body.set_results([v.node for v in out_leaves], f"{self.__name__} result")
        node = parent.emit("call", None, tuple(v.node for v in leaves), (self.__name__,), (body,),
                           effect=body.has_effects())
        node.payload = {"jvp": self.jvp_rule, "vjp": self.vjp_rule}
        outs = [wrap(parent.emit("proj", v.dtype, (node,), (k,))) for k, v in enumerate(out_leaves)]
        return tree_unflatten(out_tree, outs)


def detach(x: Any) -> Any:
    """``x`` with a zero derivative (works on pytrees; non-floats pass through)."""
    leaves, tree = tree_flatten(x)
    out = []
    for v in leaves:
        v = as_var(v) if not isinstance(v, Var) else v
        out.append(wrap(current_block().emit("detach", F32, (v.node,))) if v.dtype == F32 else v)
    return tree_unflatten(tree, out)


__all__ = ["jvp", "vjp", "custom_derivative", "detach", "activity", "trace_function"]
