"""Kernel-launching primitives batched by levels.

A primitive that launches rendering kernels is batched under ``vmap`` by
recording, per argument, which batch levels it carries (``in_batch``: one
flag per level, outermost first) and the levels' sizes (``batch_shape``);
its implementation vmaps the unbatched launch over those levels, so the
kernel launches once for all of them. :func:`register` gives a primitive
that shape: implementation, abstract evaluation, lowering and batching rule.

Example::

    p = Primitive("jaxrender_example")
    register(p, impl_fn, abstract)       # impl_fn(*args, batch_shape, in_batch, **params)
    p.bind(*args, batch_shape=(), in_batch=tuple(() for _ in args), **params)
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax._src import dispatch as jax_dispatch
from jax.interpreters import batching, mlir


def vmap_levels(fn: Callable, in_batch, n_levels: int, out_axes=0) -> Callable:
    """``fn`` over unbatched arguments, vmapped over each batch level
    (outermost first in ``in_batch`` flags)."""
    for k in reversed(range(n_levels)):
        fn = jax.vmap(fn, in_axes=[0 if flags[k] else None for flags in in_batch], out_axes=out_axes)
    return fn


def sum_unmapped(grads, tangent_flags, n_levels: int) -> list:
    """Per-batch-element gradients (every level) summed over the levels
    their tangent is not mapped in (``tangent_flags``: each tangent's
    ``in_batch`` flags): the transpose of broadcasting it there."""
    out = []
    for g, flags in zip(grads, tangent_flags):
        axes = tuple(k for k in range(n_levels) if not flags[k])
        out.append(jnp.sum(g, axis=axes) if axes else g)
    return out


def register(primitive, impl_fn: Callable, abstract: Callable) -> None:
    """Give ``primitive`` its implementation (``impl_fn``, also its
    lowering), ``abstract`` evaluation and the batching rule that adds a
    level in front."""
    def impl(*args, **params):
        return jax_dispatch.apply_primitive(primitive, *args, **params)

    def batch(args, dims, *, batch_shape, in_batch, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        new_args, new_flags = [], []
        for a, d, flags in zip(args, dims, in_batch):
            new_args.append(a if d is None else jnp.moveaxis(a, d, 0))
            new_flags.append((d is not None,) + flags)
        return primitive.bind(*new_args, batch_shape=(size,) + batch_shape, in_batch=tuple(new_flags), **params), 0

    primitive.def_impl(impl)
    primitive.def_abstract_eval(abstract)
    mlir.register_lowering(primitive, mlir.lower_fun(impl_fn, multiple_results=False))
    # It lowers to kernel launches, which are partitioned for the computation's devices.
    jax_dispatch.prim_requires_devices_during_lowering.add(primitive)
    batching.primitive_batchers[primitive] = batch
