"""jaxrender's kernel language: trace Python into a typed SSA graph.

Nothing here knows about rendering, LLVM or JAX. See :func:`trace`.

Example::

    from jaxrender import ir

    def mandel(c):
        i = ir.item_index()
        cr, ci = c[i]
        def body(s):
            n, x, y = s
            return n + 1, x * x - y * y + cr, 2.0 * x * y + ci
        n, _, _ = ir.while_loop(lambda s: (s[0] < 256) & (s[1] * s[1] + s[2] * s[2] < 4.0),
                                body, (0, 0.0, 0.0))
        return n

    k = ir.trace(mandel, {"c": ir.In("f32", (2,))}, {"n": ir.Out("i32")})
"""
from . import bvh_query, rng
from .autodiff import custom_derivative, detach, jvp, vjp
from .control import cond, dispatch, fori_loop, subroutine, while_loop
from .graph import BOOL, F32, I32, U32, Block, IRError, Node, captured_values, format_block, walk
from .kernel import (Accum, Accumulator, Buffer, In, Kernel, Out, Scalar, check,
                     item_index, launch_size, scatter_add, trace)
from .ops import (ULP_BOUND, abs, acos, asin, atan, atan2, ceil, clamp, copysign, cos, erf,
                  exp, exp2, floor, fma, isfinite, isnan, lerp, log, log2, maximum, minimum,
                  mulhi, pow, round, rsqrt, safe_sqrt, select, sign, sin, sqrt, tan, trunc)
from .pytree import tree_flatten, tree_unflatten
from .values import Bool, Float, Int, UInt, Var, bitcast, cast
from .vector import Vec, cross, dot, norm, normalize, squared_norm

__all__ = [n for n in dir() if not n.startswith("_")]
