"""Whole-graph passes run after tracing.

Folding, simplification and value numbering already happen while tracing
(:meth:`Block.emit`). What needs the whole graph is dead-code elimination:
a value is live if a kernel result, an effect, or a live value uses it. For
region nodes liveness is per result: loop state that nothing reads after the
loop (and that the loop's own live code doesn't read) is removed from the
loop altogether, and so are unused branch / dispatch results.
"""
from __future__ import annotations

from .graph import Block, Node


def eliminate_dead_code(root: Block) -> None:
    live: set[int] = set()
    used_results: dict[int, set[int]] = {}  # region node id -> live result indices
    _mark_block(root, list(root.results), live, used_results)
    _sweep(root, live, used_results)


def _mark_block(block: Block, roots: list[Node], live: set[int], used: dict[int, set[int]]) -> None:
    for r in roots:
        live.add(r.id)
    for n in reversed(block.nodes):
        if n.effect:
            live.add(n.id)
        if n.id not in live:
            continue
        if n.op == "proj":
            src = n.args[0]
            used.setdefault(src.id, set()).add(n.attrs[0])
            live.add(src.id)
            continue
        if n.regions:
            _mark_region_node(n, live, used)
        for a in n.args:
            live.add(a.id)


def _mark_region_node(n: Node, live: set[int], used: dict[int, set[int]]) -> None:
    want = used.setdefault(n.id, set())
    if n.op == "loop":
        cond, body = n.regions
        # Fixed point: state j is needed if read after the loop, or read by
        # the live part of the loop (condition, effects, other needed state).
        while True:
            _mark_block(cond, list(cond.results), live, used)
            _mark_block(body, [body.results[j] for j in sorted(want)], live, used)
            grown = {j for j in range(len(n.args))
                     if cond.params[j].id in live or body.params[j].id in live}
            if grown <= want:
                break
            want |= grown
        for j in want:
            live.add(n.args[j].id)
        return
    for blk in n.regions:
        _mark_block(blk, [blk.results[j] for j in sorted(want)], live, used)


def _sweep(block: Block, live: set[int], used: dict[int, set[int]]) -> None:
    block.nodes = [n for n in block.nodes if n.id in live]
    for n in block.nodes:
        if not n.regions:
            continue
        keep = sorted(used.get(n.id, set()))
        for r in n.regions:
            _sweep(r, live, used)
        if n.op == "loop":
            cond, body = n.regions
            n.args = tuple(n.args[j] for j in keep)
            for blk in (cond, body):
                blk.params = [blk.params[j] for j in keep]
                for k, p in enumerate(blk.params):
                    p.attrs = (k,)
            body.results = [body.results[j] for j in keep]
        else:
            for r in n.regions:
                r.results = [r.results[j] for j in keep]
        remap = {old: new for new, old in enumerate(keep)}
        for m in block.nodes:
            if m.op == "proj" and m.args[0] is n:
                m.attrs = (remap[m.attrs[0]],)
