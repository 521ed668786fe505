"""Symbolic control flow: loops, branches and dynamic dispatch.

Each body is traced once into a nested block; the lowering emits a real loop,
a real branch or a switch. State is any pytree of IR values (see
:mod:`jaxrender.ir.pytree`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .graph import BOOL, F32, I32, U32, Block, IRError, format_block
from .pytree import TreeDef, tree_flatten, tree_unflatten
from .values import Bool, Int, UInt, Var, as_var, cast, current_block, scope, wrap


def _state_leaves(state: Any, what: str) -> tuple[list[Var], TreeDef]:
    leaves, tree = tree_flatten(state)
    out = []
    for x in leaves:
        out.append(x if isinstance(x, Var) else as_var(x))
    return out, tree


def _match_leaves(leaves: list, types: list[str], tree: TreeDef, got_tree: TreeDef, what: str) -> list[Var]:
    if got_tree != tree:
        raise IRError(f"{what}: returned structure {got_tree} differs from {tree}")
    out = []
    for i, (x, t) in enumerate(zip(leaves, types)):
        if not isinstance(x, Var):
            x = as_var(x, t)
        if x.dtype != t:
            if t == F32 and x.dtype in (I32, U32):
                x = cast(x, F32)
            else:
                raise IRError(f"{what}: leaf {i} changes dtype from {t} to {x.dtype}")
        out.append(x)
    return out


def _results(node, types: list[str]) -> list[Var]:
    blk = current_block()
    return [wrap(blk.emit("proj", t, (node,), (k,))) for k, t in enumerate(types)]


def while_loop(cond_fn: Callable[[Any], Any], body_fn: Callable[[Any], Any], init: Any) -> Any:
    """Run ``state = body_fn(state)`` while ``cond_fn(state)``; return the final state.

    The trip count may depend on data; an early exit is a flag in the state
    that ``cond_fn`` tests.

    Example::

        i, acc = ir.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 2.0), (0, x))
    """
    leaves, tree = _state_leaves(init, "while_loop")
    types = [v.dtype for v in leaves]
    parent = current_block()
    cond_blk = Block(parent, "loop_cond")
    body_blk = Block(parent, "loop_body")
    with scope(cond_blk):
        params = [wrap(cond_blk.add_param(t)) for t in types]
        c = cond_fn(tree_unflatten(tree, params))
        c = c if isinstance(c, Var) else Bool(bool(c))
        if c.dtype != BOOL:
            raise IRError("while_loop: cond_fn must return a Bool")
        cond_blk.set_results([c.node], "while_loop condition")
    with scope(body_blk):
        params = [wrap(body_blk.add_param(t)) for t in types]
        new = body_fn(tree_unflatten(tree, params))
        new_leaves, new_tree = tree_flatten(new)
        new_leaves = _match_leaves(new_leaves, types, tree, new_tree, "while_loop body")
        body_blk.set_results([x.node for x in new_leaves], "while_loop body")
    node = parent.emit("loop", None, [v.node for v in leaves], (), (cond_blk, body_blk),
                       effect=cond_blk.has_effects() or body_blk.has_effects())
    return tree_unflatten(tree, _results(node, types))


def fori_loop(lower: Any, upper: Any, body_fn: Callable[[Any, Any], Any], init: Any,
              unroll: bool = False) -> Any:
    """``for i in range(lower, upper): state = body_fn(i, state)`` with symbolic bounds.

    The index has the type of ``upper`` (or Int for literals). With
    ``unroll=True`` the bounds must be Python ints and the body is traced
    once per iteration (no loop in the code; reverse mode can go through it)."""
    if unroll:
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in (lower, upper)):
            raise IRError("fori_loop(unroll=True) needs literal int bounds")
        state = init
        for i in range(lower, upper):
            state = body_fn(Int(i), state)
        return state
    t = next((v.dtype for v in (upper, lower) if isinstance(v, Var)), I32)
    lo, hi = cast(lower, t), cast(upper, t)

    def cond(s):
        return s[0] < hi

    def body(s):
        return (s[0] + 1, body_fn(s[0], s[1]))

    return while_loop(cond, body, (lo, init))[1]


def cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], *operands: Any) -> Any:
    """A real branch: only the taken side runs. Both sides must return the
    same structure and dtypes.

    Example::

        y = ir.cond(x > 0, lambda: ir.sqrt(x), lambda: 0.0)
    """
    p = pred if isinstance(pred, Var) else Bool(bool(pred))
    if p.dtype != BOOL:
        raise IRError("cond: predicate must be a Bool")
    if p.node.op == "const":
        return (true_fn if p.node.attrs[0] else false_fn)(*operands)
    return _branch_node("if", (p,), (), [true_fn, false_fn], operands, ("then", "else"))


def _trace_branches(parent: Block, fns: Sequence[Callable], operands, kinds):
    blocks, outs = [], []
    for fn, kind in zip(fns, kinds):
        blk = Block(parent, kind)
        with scope(blk):
            out = fn(*operands)
            leaves, tree = tree_flatten(out)
            leaves = [x if isinstance(x, Var) else as_var(x) for x in leaves]
        blocks.append(blk)
        outs.append((leaves, tree))
    tree0 = outs[0][1]
    types = [v.dtype for v in outs[0][0]]
    # Promote literal-only results to float where another branch is float.
    for i in range(len(types)):
        if any(o[0][i].dtype == F32 for o in outs if o[1] == tree0 and len(o[0]) == len(types)):
            types[i] = F32
    for blk, (leaves, tree) in zip(blocks, outs):
        with scope(blk):
            fixed = _match_leaves(leaves, types, tree0, tree, "branch")
        blk.set_results([x.node for x in fixed], "branch result")
    return blocks, types, tree0


def _branch_node(op, args, attrs, fns, operands, kinds):
    parent = current_block()
    blocks, types, tree = _trace_branches(parent, fns, operands, kinds)
    node = parent.emit(op, None, [a.node for a in args], attrs, tuple(blocks),
                       effect=any(b.has_effects() for b in blocks))
    return tree_unflatten(tree, _results(node, types))


def dispatch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """Dynamic dispatch ("virtual call"): run ``branches[index](*operands)``.

    Branches that trace to the same code are emitted once, so N instances
    of one material type cost one implementation; per-instance values must
    come from data buffers (read with an instance index passed in
    ``operands``), never from Python constants captured per instance, or
    each instance becomes its own code. An out-of-range index is clamped.

    Example::

        albedo = ir.dispatch(bsdf_type, [diffuse_eval, conductor_eval], instance, wi)
    """
    if not branches:
        raise IRError("dispatch: needs at least one branch")
    idx = index if isinstance(index, Var) else UInt(int(index))
    if idx.dtype == I32:
        idx = cast(idx, U32)
    if idx.dtype != U32:
        raise IRError("dispatch: index must be Int or UInt")
    n = len(branches)
    if idx.node.op == "const":
        return branches[min(int(idx.node.attrs[0]), n - 1)](*operands)
    parent = current_block()
    blocks, types, tree = _trace_branches(parent, branches, operands, ["case"] * n)
    unique: list[Block] = []
    seen: dict[str, int] = {}
    table = []
    for blk in blocks:
        key = format_block(blk, outer_ids=True)
        if key not in seen:
            seen[key] = len(unique)
            unique.append(blk)
        table.append(seen[key])
    if len(unique) == 1:
        # Every case is the same code: no switch needed.
        return _inline(parent, unique[0], types, tree)
    node = parent.emit("dispatch", None, [idx.node], (tuple(table),), tuple(unique),
                       effect=any(b.has_effects() for b in unique))
    return tree_unflatten(tree, _results(node, types))


def subroutine(fn: Callable[..., Any], *args: Any, name: str = "subroutine") -> Any:
    """``fn(*args)``, traced as a subroutine: a region of its own whose
    body computes everything it needs itself (no value numbering with the
    calling code), so that calls of the same code from several places in a
    kernel trace to identical regions. The CPU code generator emits those
    once, as one function that every such call shares, instead of a copy
    per call: for code a kernel runs from several places (the radiance of
    a path traced from different starting points), LLVM then optimises
    and compiles it once. Values ``fn`` reads from the enclosing code
    (closures) become arguments of that function. Derivatives pass
    through the body as through inline code.

    Example::

        def escape_time(c):
            return ir.while_loop(lambda s: s[0] < 64, lambda s: (s[0] + 1, s[1] * s[1] + c), (0, 0.0))[0]
        a = ir.subroutine(escape_time, x, name="escape_time")
        b = ir.subroutine(escape_time, y, name="escape_time")   # the same function
    """
    leaves, tree = _state_leaves(args, "subroutine")
    parent = current_block()
    body = Block(parent, "outline")
    with scope(body):
        params = [wrap(body.add_param(v.dtype)) for v in leaves]
        out = fn(*tree_unflatten(tree, params))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = [x if isinstance(x, Var) else as_var(x) for x in out_leaves]
        body.set_results([v.node for v in out_leaves], f"{name} result")
    node = parent.emit("call", None, [v.node for v in leaves], (name,), (body,), effect=body.has_effects())
    return tree_unflatten(out_tree, _results(node, [v.dtype for v in out_leaves]))


def _inline(parent: Block, blk: Block, types, tree):
    """Move a traced branch's nodes into the parent block (they dominate)."""
    for n in blk.nodes:
        n.block = parent
        _reparent_regions(n, parent)
    parent.nodes.extend(blk.nodes)
    for n in blk.nodes:
        if not n.effect and n.op not in ("loop", "if", "dispatch", "param"):
            parent._table.setdefault((n.op, n.type, tuple(a.id for a in n.args), n.attrs), n)
    return tree_unflatten(tree, [wrap(r) for r in blk.results])


def _reparent_regions(n, parent: Block) -> None:
    for r in n.regions:
        r.parent = parent
        r.depth = parent.depth + 1
        _fix_depths(r)


def _fix_depths(b: Block) -> None:
    for n in b.nodes:
        for r in n.regions:
            r.depth = b.depth + 1
            _fix_depths(r)
