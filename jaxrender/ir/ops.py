"""Elementwise operations of the kernel language.

Floating-point semantics are IEEE binary32 without fast-math: ``+ - * /``,
``sqrt``, ``fma``, ``floor``/``ceil``/``trunc``/``round`` are exact (round
half to even, as numpy). Transcendental functions are within the ulp bounds
stated in :data:`ULP_BOUND` over their domains (measured by the test suite).
``min``/``max`` ignore a NaN operand (as numpy's ``fmin``/``fmax``) and return
the first operand when the two compare equal (+0 vs -0).
Integer division or remainder by zero gives 0 instead of undefined behaviour.
"""
from __future__ import annotations

from typing import Any

from .graph import BOOL, F32, I32, U32, IRError
from .pytree import tree_flatten, tree_unflatten
from .values import Bool, Float, Var, _coerce, as_var, cast, current_block, wrap

# Worst-case error of each transcendental op in units in the last place,
# against the correctly rounded result, over the domain listed in the tests.
ULP_BOUND = {
    "exp": 1, "exp2": 1, "log": 1, "log2": 1, "sin": 1, "cos": 1, "tan": 1,
    "asin": 1, "acos": 1, "atan": 1, "atan2": 2, "erf": 1, "pow": 1, "rsqrt": 1,
}


def _float_unary(op: str, x: Any) -> Float:
    x = cast(x, F32)  # Int/UInt arguments and Python numbers become Float
    return wrap(current_block().emit(op, F32, (x.node,)))


def sqrt(x) -> Float: return _float_unary("sqrt", x)
def rsqrt(x) -> Float: return _float_unary("rsqrt", x)
def exp(x) -> Float: return _float_unary("exp", x)
def exp2(x) -> Float: return _float_unary("exp2", x)
def log(x) -> Float: return _float_unary("log", x)
def log2(x) -> Float: return _float_unary("log2", x)
def sin(x) -> Float: return _float_unary("sin", x)
def cos(x) -> Float: return _float_unary("cos", x)
def tan(x) -> Float: return _float_unary("tan", x)
def asin(x) -> Float: return _float_unary("asin", x)
def acos(x) -> Float: return _float_unary("acos", x)
def atan(x) -> Float: return _float_unary("atan", x)
def erf(x) -> Float: return _float_unary("erf", x)
def floor(x) -> Float: return _float_unary("floor", x)
def ceil(x) -> Float: return _float_unary("ceil", x)
def trunc(x) -> Float: return _float_unary("trunc", x)
def round(x) -> Float:  # noqa: A001 - mirrors numpy.round (half to even)
    return _float_unary("round", x)


def pow(x, y) -> Float:  # noqa: A001
    a, b = _coerce(x, y, want_float=True)
    return wrap(current_block().emit("pow", F32, (a.node, b.node)))


def atan2(y, x) -> Float:
    a, b = _coerce(y, x, want_float=True)
    return wrap(current_block().emit("atan2", F32, (a.node, b.node)))


def copysign(x, y) -> Float:
    a, b = _coerce(x, y, want_float=True)
    return wrap(current_block().emit("copysign", F32, (a.node, b.node)))


def fma(a, b, c) -> Var:
    """a * b + c with a single rounding (floats); plain multiply-add for ints."""
    vs = [v for v in (a, b, c) if isinstance(v, Var)]
    if not vs:
        raise IRError("fma: at least one operand must be an IR value")
    is_float = any(isinstance(o, float) or (isinstance(o, Var) and o.dtype == F32) for o in (a, b, c))
    dtype = F32 if is_float else vs[0].dtype
    x, y, z = (cast(v, dtype) for v in (a, b, c))
    if dtype != F32:
        return x * y + z
    return wrap(current_block().emit("fma", F32, (x.node, y.node, z.node)))


def minimum(a, b) -> Var:
    x, y = _coerce(a, b)
    return wrap(current_block().emit("min", x.dtype, (x.node, y.node)))


def maximum(a, b) -> Var:
    x, y = _coerce(a, b)
    return wrap(current_block().emit("max", x.dtype, (x.node, y.node)))


def clamp(x, lo, hi) -> Var:
    return minimum(maximum(x, lo), hi)


def abs(x) -> Var:  # noqa: A001 - mirrors the builtin for IR values
    return as_var(x).__abs__()


def mulhi(a, b) -> Var:
    """High 32 bits of the 64-bit product of two u32 (or i32) values."""
    x, y = _coerce(a, b)
    if x.dtype not in (I32, U32):
        raise IRError("mulhi needs integer operands")
    return wrap(current_block().emit("mulhi", x.dtype, (x.node, y.node)))


def isnan(x) -> Bool:
    return Bool(current_block().emit("isnan", BOOL, (as_var(x, F32).node,)))


def isfinite(x) -> Bool:
    return Bool(current_block().emit("isfinite", BOOL, (as_var(x, F32).node,)))


def select(cond, a, b):
    """Elementwise ``a if cond else b`` without branching. Works on pytrees
    (vectors, structs) of matching structure."""
    c = as_var(cond, BOOL) if isinstance(cond, Var) else Bool(bool(cond))
    la, ta = tree_flatten(a)
    lb, tb = tree_flatten(b)
    if ta != tb:
        raise IRError(f"select: branches differ in structure ({ta} vs {tb})")
    out = []
    for x, y in zip(la, lb):
        x, y = _coerce(x, y) if (isinstance(x, Var) or isinstance(y, Var)) else (as_var(x), as_var(y))
        if x.dtype != y.dtype:
            x, y = _coerce(x, y)
        out.append(wrap(current_block().emit("select", x.dtype, (c.node, x.node, y.node))))
    return tree_unflatten(ta, out)


def lerp(a, b, t):
    return fma(t, b - a, a) if isinstance(t, Var) or isinstance(a, Var) or isinstance(b, Var) else a + t * (b - a)


def sign(x) -> Float:
    """+1 or -1 following the sign bit (so sign(-0.0) == -1), as Mitsuba's."""
    return copysign(1.0, x)


def safe_sqrt(x) -> Float:
    return sqrt(maximum(x, 0.0))


def rcp(x) -> Float:
    return 1.0 / as_var(x, F32) if isinstance(x, Var) else Float(1.0 / x)
