"""Small fixed-size vectors of IR values (or Python numbers).

``Vec`` is a pytree, so it can be loop state, a branch result or a buffer
row. Arithmetic is componentwise; scalars broadcast.

Example::

    d = ir.normalize(ir.Vec(1.0, 2.0, x))
    n_dot_d = ir.dot(n, d)
"""
from __future__ import annotations

from typing import Any, Iterable

from . import ops


class Vec:
    __slots__ = ("c",)

    def __init__(self, *components: Any):
        if len(components) == 1 and isinstance(components[0], (tuple, list)):
            components = tuple(components[0])
        self.c = tuple(components)

    # pytree protocol
    def tree_flatten(self):
        return self.c, len(self.c)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __len__(self) -> int:
        return len(self.c)

    def __iter__(self):
        return iter(self.c)

    def __getitem__(self, i):
        return self.c[i]

    @property
    def x(self): return self.c[0]
    @property
    def y(self): return self.c[1]
    @property
    def z(self): return self.c[2]

    def __repr__(self) -> str:
        return f"Vec{self.c!r}"

    def _zip(self, o, f):
        if isinstance(o, Vec):
            if len(o) != len(self):
                raise ValueError(f"vector sizes differ: {len(self)} vs {len(o)}")
            return Vec(*(f(a, b) for a, b in zip(self.c, o.c)))
        return Vec(*(f(a, o) for a in self.c))

    def __add__(self, o): return self._zip(o, lambda a, b: a + b)
    def __radd__(self, o): return self._zip(o, lambda a, b: b + a)
    def __sub__(self, o): return self._zip(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._zip(o, lambda a, b: b - a)
    def __mul__(self, o): return self._zip(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._zip(o, lambda a, b: b * a)
    def __truediv__(self, o): return self._zip(o, lambda a, b: a / b)
    def __rtruediv__(self, o): return self._zip(o, lambda a, b: b / a)
    def __neg__(self): return Vec(*(-a for a in self.c))


def dot(a: Vec, b: Vec):
    if len(a) != len(b):
        raise ValueError("dot: vector sizes differ")
    acc = a[0] * b[0]
    for x, y in zip(a.c[1:], b.c[1:]):
        acc = ops.fma(x, y, acc) if _symbolic(x, y, acc) else acc + x * y
    return acc


def _symbolic(*xs) -> bool:
    from .values import Var
    return any(isinstance(x, Var) for x in xs)


def cross(a: Vec, b: Vec) -> Vec:
    return Vec(a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def squared_norm(a: Vec):
    return dot(a, a)


def norm(a: Vec):
    return ops.sqrt(squared_norm(a))


def normalize(a: Vec) -> Vec:
    return a * ops.rsqrt(squared_norm(a))


def vec_select(cond, a: Vec, b: Vec) -> Vec:
    return ops.select(cond, a, b)


def vsum(xs: Iterable[Any]):
    it = iter(xs)
    acc = next(it)
    for x in it:
        acc = acc + x
    return acc
