"""Counting primitives in a jaxpr, including nested ones (custom_jvp, pjit...)."""
from __future__ import annotations


def _subjaxprs(params):
    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            inner = getattr(x, "jaxpr", None)          # ClosedJaxpr -> Jaxpr
            if inner is not None and hasattr(inner, "eqns"):
                yield inner
            elif hasattr(x, "eqns"):
                yield x


def count_primitive(jaxpr, name: str) -> int:
    """Occurrences of primitive ``name`` in ``jaxpr`` and every jaxpr nested in it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    n = 0
    for e in jaxpr.eqns:
        n += e.primitive.name == name
        for sub in _subjaxprs(e.params):
            n += count_primitive(sub, name)
    return n
