"""One compiled XLA computation for a function of scene geometry, also when
it is called eagerly.

The derivative rules of camera and geometry (``render_rules``) run a few
hundred small JAX operations around their kernels: the film's silhouette
segments, the hard shadows' edges, the filter's expected weights. Under a
user's ``jax.jit`` they are traced into the user's computation. Called
eagerly (``jax.grad(loss)(x)`` without ``jit``), JAX dispatched and
compiled each operation on its own: a moving sphere's first eager
gradient took about 10 s (mostly XLA compiling ~850 small computations),
every later one 0.2-0.4 s of dispatch. :func:`staged` compiles such a
function once per argument structure and constants instead (that
gradient: 3.4-4.2 s the first time, then 10-20 ms).

Its arguments are read as ``jax.jit`` would read them inside a user's jit:
JAX arrays (and tracers) are traced, everything else (numpy arrays,
Python numbers, tuples, None) is a constant of the computation, as it is
there. So the function runs the same way in both cases. Numpy arguments
key the compiled function by their contents (a digest), never by identity.

Called eagerly on the CPU, the compiled computation's executable is kept in
the kernels' disk cache (``lowering/cache.py``), keyed by the lowered
module's text, the JAX, jaxlib and XLA versions, the host CPU and its
features and ``XLA_FLAGS`` (a cache shared by several machines must not
hand one another's machine code to another): XLA keeps none of its
own here, and the staged computations of a moving box's first eager
gradient were 2.2 s of XLA compilation in every new process.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import os
import threading
from typing import Any, Callable

import jax
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

from ..lowering import cache, cpu


class _Constant:
    """A non-JAX leaf, hashable by value (numpy arrays by a digest of their
    type, shape and bytes)."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        if isinstance(value, (np.ndarray, np.generic)):
            # (a numpy scalar is not its 1-element array: the type and shape are the value's own)
            a = np.ascontiguousarray(value)
            self.key = (type(value), a.dtype.str, np.shape(value),
                        hashlib.blake2b(a.view(np.uint8).reshape(-1), digest_size=16).digest())
        else:
            self.key = (type(value), value)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Constant) and self.key == other.key


def _traced(x) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


# Executables larger than this are not kept on disk: the numpy constants of
# a large mesh (its edge topology, tens of MB) are baked into its film
# boundary's, one per mesh, where a Cornell box's is 0.4 MB.
MAX_STORED_BYTES = 16 << 20


def _eager_on_cpu(arrays: list) -> bool:
    """Whether ``arrays`` are concrete arrays (not traced) in a process of
    one device, a CPU: a call that runs a computation compiled here, for
    that device (a loaded executable runs on every device it is given)."""
    if jax.device_count() != 1:
        return False
    for x in arrays:
        if isinstance(x, jax.core.Tracer) or not isinstance(x, jax.Array):
            return False
        devices = x.devices()
        if len(devices) != 1 or next(iter(devices)).platform != "cpu":
            return False
    return True


def _compiled(jitted, arrays: list):
    """``jitted`` compiled for ``arrays``, its executable read from the disk
    cache where it is there, else compiled and written there. An entry
    that does not load (another XLA's) is a miss, as ``cache.load`` treats
    a corrupt one."""
    lowered = jitted.lower(*arrays)
    device = jax.devices("cpu")[0]
    # (XLA's CPU code is the host's: its CPU and features, as the kernels'
    # keys have them, and the flags XLA reads)
    key = hashlib.sha256("\0".join((lowered.as_text(), jax.__version__, jaxlib.__version__,
                                     device.client.platform_version, cpu.target_description(),
                                     os.environ.get("XLA_FLAGS", ""), "staged-xla-1")).encode()).hexdigest()
    payload = cache.load(key, ".xla")
    if payload is not None:
        try:
            return serialize_executable.deserialize_and_load(payload, lowered.in_tree, lowered.out_tree)
        except Exception:   # noqa: BLE001 (whatever an unloadable entry raises: compile instead)
            pass
    compiled = lowered.compile()
    payload = serialize_executable.serialize(compiled)[0]
    if len(payload) <= MAX_STORED_BYTES:
        cache.store(key, payload, ".xla")
    return compiled


def staged(fn: Callable, kept: int = 8) -> Callable:
    """``fn`` compiled as one XLA computation over its JAX-array arguments
    (see the module docstring); its other arguments are constants. The
    computations of the last ``kept`` argument structures and constants are
    kept: each holds its constants (a large mesh's edge topology: tens of
    MB), so a process that goes through many scenes keeps only a few.

    Example::

        @staged
        def segments(tris, topology: np.ndarray, grid: tuple):
            ...
    """
    computations: collections.OrderedDict = collections.OrderedDict()
    executables: dict = {}      # (computation key, argument types) -> compiled, for eager calls
    lock = threading.Lock()

    def computation(treedef, constants):
        def call(*traced):
            it = iter(traced)
            leaves = [next(it) if c is None else c.value for c in constants]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
            return fn(*args, **kwargs)
        return jax.jit(call)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        constants = tuple(None if _traced(x) else _Constant(x) for x in leaves)
        key = (treedef, constants)
        with lock:
            f = computations.get(key)
            if f is None:
                f = computations[key] = computation(treedef, constants)
                while len(computations) > kept:
                    executables.pop(computations.popitem(last=False)[0], None)
            else:
                computations.move_to_end(key)
        arrays = [x for x in leaves if _traced(x)]
        # (constants past the size cap would be baked into an executable too
        # large to store: not even its key's text is made)
        baked = sum(c.value.nbytes for c in constants if c is not None and isinstance(c.value, np.ndarray))
        if baked > MAX_STORED_BYTES or cache.cache_dir() is None or not _eager_on_cpu(arrays):
            return f(*arrays)
        types = tuple((x.shape, x.dtype, x.weak_type) for x in arrays)
        with lock:
            compiled = executables.setdefault(key, {}).get(types)
        if compiled is None:
            compiled = _compiled(f, arrays)
            with lock:
                executables.setdefault(key, {})[types] = compiled
        return compiled(*arrays)

    # (a staged function reads nothing but its arguments, so no cache goes
    # stale; a test that counts traces starts from none)
    def clear_cache():
        computations.clear()
        executables.clear()
    wrapper.clear_cache = clear_cache
    wrapper.computations = computations
    return wrapper


__all__ = ["staged"]
