"""Counter-based random numbers: any sample can be recomputed from its key.

:func:`philox4x32` is Philox4x32-10 (Salmon et al., SC'11, "Parallel random
numbers: as easy as 1, 2, 3"); it is stateless, so the random number used
by (seed, work item, dimension) is the same in a primal pass and in a later
replay (path replay backpropagation relies on this).

Example::

    u = ir.rng.uniform(seed, ir.item_index(), dim)   # Float in [0, 1)
"""
from __future__ import annotations

from typing import Any

from .graph import U32
from .ops import mulhi
from .values import Float, UInt, Var, cast

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85


def _u(x: Any) -> UInt:
    if isinstance(x, Var):
        return cast(x, U32) if x.dtype != U32 else x
    return UInt(int(x) & 0xFFFFFFFF)


def philox4x32(counter: tuple[Any, Any, Any, Any], key: tuple[Any, Any], rounds: int = 10) -> tuple[UInt, UInt, UInt, UInt]:
    """Four independent u32 from a 128-bit counter and a 64-bit key."""
    c0, c1, c2, c3 = (_u(c) for c in counter)
    k0, k1 = (_u(k) for k in key)
    for r in range(rounds):
        if r:
            k0 = k0 + _W0
            k1 = k1 + _W1
        hi0, lo0 = mulhi(c0, UInt(_M0)), c0 * _M0
        hi1, lo1 = mulhi(c2, UInt(_M1)), c2 * _M1
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def u32_to_unit_float(x: UInt) -> Float:
    """Map a u32 to a float in [0, 1) using its top 24 bits (exact)."""
    return cast(x >> 8, "f32") * (1.0 / 16777216.0)


def uniform4(seed: Any, item: Any, dim: Any, stream: Any = 0) -> tuple[Float, Float, Float, Float]:
    """Four uniform floats in [0, 1) keyed on (seed, item, dim, stream)."""
    r = philox4x32((item, dim, stream, 0), (seed, 0x5EED5EED))
    return tuple(u32_to_unit_float(v) for v in r)  # type: ignore[return-value]


def uniform(seed: Any, item: Any, dim: Any, stream: Any = 0) -> Float:
    """One uniform float in [0, 1) keyed on (seed, item, dim, stream).

    Dead-code elimination drops the unused lanes' final mixing steps only;
    use :func:`uniform4` when several dimensions are needed at once."""
    return uniform4(seed, item, dim, stream)[0]


def pcg_hash(x: Any) -> UInt:
    """A fast 32-bit integer hash (Jarzynski & Olano 2020, "PCG hash")."""
    state = _u(x) * 747796405 + 2891336453
    word = ((state >> ((state >> 28) + 4)) ^ state) * 277803737
    return (word >> 22) ^ word
