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


def kernel_launches(jaxpr) -> dict:
    """How often each jaxrender kernel (by name) is launched in ``jaxpr``."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    counts: dict = {}
    for e in jaxpr.eqns:
        if e.primitive.name == "jaxrender_kernel":
            name = e.params["kernel"].kernel.name
            counts[name] = counts.get(name, 0) + 1
        for sub in _subjaxprs(e.params):
            for k, v in kernel_launches(sub).items():
                counts[k] = counts.get(k, 0) + v
    return counts
