"""Flattening structured kernel values (vectors, structs) into scalars.

Containers: tuple, list, dict (sorted keys), None, dataclasses, and any class
with ``tree_flatten(self) -> (children, aux)`` and a classmethod
``tree_unflatten(aux, children)``. Leaves are IR values or Python literals.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .values import Var


class TreeDef:
    __slots__ = ("kind", "aux", "children")

    def __init__(self, kind, aux, children):
        self.kind, self.aux, self.children = kind, aux, tuple(children)

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and self.aux == other.aux and self.children == other.children)

    def __hash__(self):
        return hash((self.kind, self.aux, self.children))

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        name = self.kind if isinstance(self.kind, str) else self.kind.__name__
        return f"{name}({', '.join(map(repr, self.children))})"

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)


def tree_flatten(x: Any) -> tuple[list, TreeDef]:
    leaves: list = []
    return leaves, _flatten(x, leaves)


def _flatten(x, leaves):
    if isinstance(x, Var) or isinstance(x, (int, float, bool)) or _is_np_scalar(x):
        leaves.append(x)
        return TreeDef("leaf", None, ())
    if x is None:
        return TreeDef("none", None, ())
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return TreeDef("tuple", None, [_flatten(c, leaves) for c in x])
    if isinstance(x, tuple):  # namedtuple
        return TreeDef(type(x), None, [_flatten(c, leaves) for c in x])
    if isinstance(x, list):
        return TreeDef("list", None, [_flatten(c, leaves) for c in x])
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return TreeDef("dict", keys, [_flatten(x[k], leaves) for k in keys])
    if hasattr(x, "tree_flatten") and hasattr(type(x), "tree_unflatten"):
        children, aux = x.tree_flatten()
        return TreeDef(type(x), aux, [_flatten(c, leaves) for c in children])
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = tuple(f.name for f in dataclasses.fields(x))
        return TreeDef(type(x), names, [_flatten(getattr(x, n), leaves) for n in names])
    raise TypeError(f"cannot use a {type(x).__name__} in kernel state; use IR values, "
                    "tuples, lists, dicts, dataclasses or a class with tree_flatten")


def _is_np_scalar(x) -> bool:
    import numpy as np
    return isinstance(x, np.generic)


def tree_unflatten(tree: TreeDef, leaves) -> Any:
    it = iter(leaves)
    out = _unflatten(tree, it)
    rest = list(it)
    if rest:
        raise ValueError("too many leaves for tree")
    return out


def flatten_up_to(tree: TreeDef, x: Any) -> list:
    """The leaves of ``x`` laid out as ``tree``'s leaves, where ``x`` may put
    None in place of any subtree (every leaf below it becomes None): how
    cotangents name the outputs that get none."""
    out: list = []
    _flatten_up_to(tree, x, out)
    return out


def _flatten_up_to(t: TreeDef, x, out) -> None:
    if x is None:
        out.extend([None] * t.num_leaves)
        return
    if t.kind == "leaf":
        out.append(x)
        return
    if t.kind == "none":
        return
    if t.kind == "dict":
        kids = [x[k] for k in t.aux]
    elif isinstance(x, (tuple, list)):   # a sequence may stand for any container of as many children
        kids = list(x)
    elif hasattr(x, "tree_flatten"):
        kids = x.tree_flatten()[0]
    else:
        kids = [getattr(x, n) for n in t.aux]
    if len(kids) != len(t.children):
        raise ValueError(f"cotangent structure does not match the outputs {t!r}")
    for c, k in zip(t.children, kids):
        _flatten_up_to(c, k, out)


def _unflatten(t: TreeDef, it):
    if t.kind == "leaf":
        return next(it)
    if t.kind == "none":
        return None
    kids = [_unflatten(c, it) for c in t.children]
    if t.kind == "tuple":
        return tuple(kids)
    if t.kind == "list":
        return kids
    if t.kind == "dict":
        return dict(zip(t.aux, kids))
    if hasattr(t.kind, "tree_unflatten"):
        return t.kind.tree_unflatten(t.aux, kids)
    if dataclasses.is_dataclass(t.kind):
        return t.kind(**dict(zip(t.aux, kids)))
    return t.kind(*kids)  # namedtuple
