"""Which array library computes a buffer from parameter values.

A render lays parameter values into kernel buffers (a BSDF row, the camera,
texels, an envmap's sampling tables). Done with jax.numpy on concrete
values, every operation is an eager JAX call that compiles an XLA
computation of its own the first time a process meets it: a dozen small
compilations were most of the time between ``render()`` and the image when
the kernel itself came from the disk cache. numpy computes the same thing
on the host with nothing to compile, so it is used whenever no value is a
JAX tracer; under ``jit``, ``grad`` or ``vmap`` jax.numpy follows the trace
(``Scene.param_buffers`` then runs each such buffer as one jitted call).

Example::

    xp = array_module(p["red.reflectance.value"])   # numpy unless traced
    row = xp.concatenate([xp.asarray(p["red.reflectance.value"], np.float32), np.zeros(5, np.float32)])
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def is_traced(value: Any) -> bool:
    """True when ``value`` is a JAX tracer (a value under jit, grad, vmap...)."""
    import jax
    return isinstance(value, jax.core.Tracer)


def is_immutable(value: Any) -> bool:
    """True for a value whose contents cannot change while it is held: a
    read-only numpy array, a numpy or Python scalar, a JAX array."""
    import jax
    if isinstance(value, np.ndarray):
        return not value.flags.writeable
    return isinstance(value, (np.generic, int, float, bool, jax.Array))


def array_module(*values: Any) -> ModuleType:
    """``jax.numpy`` if any of ``values`` is traced, else ``numpy``."""
    if any(is_traced(v) for v in values):
        import jax.numpy as jnp
        return jnp
    return np


# XLA's CPU client uses a host array in place, without a copy, when its data
# starts on a multiple of this many bytes; numpy's large arrays start 16
# bytes into their pages. Copying a million-triangle scene's ~190 MB of
# buffers at every render was a fifth of its frame time.
XLA_ALIGNMENT = 64
# Below this, a copy costs less than remembering the aligned array.
_ALIGN_MIN_BYTES = 1 << 16


def xla_aligned(array: Any) -> Any:
    """``array`` itself, or where it is a large numpy array that XLA would
    copy on every call (its data not on an :data:`XLA_ALIGNMENT` boundary),
    a read-only copy that XLA uses in place. Other values pass through."""
    if not isinstance(array, np.ndarray) or array.nbytes < _ALIGN_MIN_BYTES:
        return array
    if array.ctypes.data % XLA_ALIGNMENT == 0 and array.flags.c_contiguous:
        return array
    raw = np.empty(array.nbytes + XLA_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % XLA_ALIGNMENT
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    out.flags.writeable = False
    return out
