"""The tracing front end: symbolic scalars that record IR as Python runs.

``Float`` (f32), ``Int`` (i32), ``UInt`` (u32) and ``Bool`` wrap a graph node
of the block being traced. Python operators build nodes; Python numbers mix in
as constants of the other operand's type. An ``Int``/``UInt`` mixed with a
``Float`` is converted to ``Float``; mixing ``Int`` with ``UInt`` needs an
explicit cast, as silently picking one signedness is a classic bug source.

Python control flow cannot branch on a symbolic value (``bool(Float)``
raises); use :func:`jaxrender.ir.select`, :func:`jaxrender.ir.cond`,
:func:`jaxrender.ir.while_loop` instead.
"""
from __future__ import annotations

import threading
from typing import Any

from .graph import BOOL, F32, I32, U32, Block, IRError, Node

_tracing = threading.local()  # each thread traces its own kernels


def _stack() -> list[Block]:
    stack = getattr(_tracing, "stack", None)
    if stack is None:
        stack = _tracing.stack = []
    return stack


def current_block() -> Block:
    stack = _stack()
    if not stack:
        raise IRError("no kernel is being traced: IR values only exist inside "
                      "jaxrender.ir.trace(...)")
    return stack[-1]


class _BlockScope:
    def __init__(self, block: Block):
        self.block = block

    def __enter__(self) -> Block:
        _stack().append(self.block)
        return self.block

    def __exit__(self, *exc) -> None:
        popped = _stack().pop()
        assert popped is self.block


def scope(block: Block) -> _BlockScope:
    """Context manager making ``block`` the target of emitted nodes."""
    return _BlockScope(block)


class Var:
    """A symbolic scalar of one dtype. Subclasses fix the dtype."""

    __slots__ = ("node",)
    dtype: str = ""
    __array_priority__ = 1000  # keep numpy scalars from hijacking operators

    def __init__(self, value: Any = 0):
        if isinstance(value, Node):
            if value.type != self.dtype:
                raise IRError(f"{type(self).__name__} cannot wrap a {value.type} node")
            self.node = value
        elif isinstance(value, Var):
            self.node = cast(value, self.dtype).node
        else:
            self.node = current_block().const(self.dtype, _check_literal(value, self.dtype))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(%{self.node.id})"

    def __bool__(self):
        raise IRError(
            f"the truth value of a symbolic {type(self).__name__} is unknown while "
            "tracing; use ir.select / ir.cond / ir.while_loop instead of Python if/while")

    def __hash__(self):  # identity hashing lets Vars live in dicts/sets
        return id(self)

    # arithmetic ---------------------------------------------------------
    def __add__(self, o): return _binary("add", self, o)
    def __radd__(self, o): return _binary("add", o, self)
    def __sub__(self, o): return _binary("sub", self, o)
    def __rsub__(self, o): return _binary("sub", o, self)
    def __mul__(self, o): return _binary("mul", self, o)
    def __rmul__(self, o): return _binary("mul", o, self)
    def __truediv__(self, o): return _binary("div", self, o, want_float=True)
    def __rtruediv__(self, o): return _binary("div", o, self, want_float=True)
    def __floordiv__(self, o): return _floordiv(self, o)
    def __rfloordiv__(self, o): return _floordiv(o, self)
    def __mod__(self, o): return _binary("rem", self, o)
    def __rmod__(self, o): return _binary("rem", o, self)
    def __pow__(self, o): return _binary("pow", self, o, want_float=True)
    def __rpow__(self, o): return _binary("pow", o, self, want_float=True)
    def __neg__(self): return _unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return _unary("abs", self)
    def __invert__(self): return _unary("not", self)
    def __and__(self, o): return _binary("and", self, o)
    def __rand__(self, o): return _binary("and", o, self)
    def __or__(self, o): return _binary("or", self, o)
    def __ror__(self, o): return _binary("or", o, self)
    def __xor__(self, o): return _binary("xor", self, o)
    def __rxor__(self, o): return _binary("xor", o, self)
    def __lshift__(self, o): return _binary("shl", self, o)
    def __rlshift__(self, o): return _binary("shl", o, self)
    def __rshift__(self, o): return _binary("shr", self, o)
    def __rrshift__(self, o): return _binary("shr", o, self)
    # comparisons ----------------------------------------------------------
    def __lt__(self, o): return _compare("lt", self, o)
    def __le__(self, o): return _compare("le", self, o)
    def __gt__(self, o): return _compare("gt", self, o)
    def __ge__(self, o): return _compare("ge", self, o)
    def __eq__(self, o): return _compare("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return _compare("ne", self, o)  # type: ignore[override]


class Float(Var):
    """32-bit IEEE float."""
    __slots__ = ()
    dtype = F32


class Int(Var):
    """32-bit signed integer (two's complement, wrapping)."""
    __slots__ = ()
    dtype = I32


class UInt(Var):
    """32-bit unsigned integer (wrapping)."""
    __slots__ = ()
    dtype = U32


class Bool(Var):
    """Boolean."""
    __slots__ = ()
    dtype = BOOL


VAR_CLASS = {F32: Float, I32: Int, U32: UInt, BOOL: Bool}


def wrap(node: Node) -> Var:
    """The front-end value of a node."""
    return VAR_CLASS[node.type](node)


def _check_literal(value: Any, dtype: str):
    import numpy as np
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        if dtype == I32 and not -(1 << 31) <= int(value) < (1 << 31):
            raise IRError(f"integer literal {value} does not fit in i32")
        if dtype == U32 and not 0 <= int(value) < (1 << 32):
            raise IRError(f"integer literal {value} does not fit in u32")
        return value
    if isinstance(value, (float, np.floating)):
        if dtype in (I32, U32):
            raise IRError(f"float literal {value} used as an integer ({dtype}); cast explicitly")
        return float(value)
    raise IRError(f"cannot use {value!r} ({type(value).__name__}) as an IR {dtype} value")


def literal_type(value: Any) -> str:
    """The dtype a lone Python literal becomes."""
    import numpy as np
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, np.floating) or isinstance(value, float):
        return F32
    if isinstance(value, np.integer):
        return {np.dtype(np.uint32): U32}.get(value.dtype, I32)
    if isinstance(value, int):
        return I32
    raise IRError(f"cannot use {value!r} ({type(value).__name__}) as an IR value")


def as_var(value: Any, dtype: str | None = None) -> Var:
    """Turn a Var or Python literal into a Var (of ``dtype`` when given)."""
    if isinstance(value, Var):
        if dtype is not None and value.dtype != dtype:
            raise IRError(f"expected a {dtype} value, got {value.dtype}")
        return value
    return VAR_CLASS[dtype or literal_type(value)](value)


def _coerce(a: Any, b: Any, want_float: bool = False) -> tuple[Var, Var]:
    av, bv = isinstance(a, Var), isinstance(b, Var)
    if not av and not bv:
        raise IRError("at least one operand must be an IR value")
    ta = a.dtype if av else None
    tb = b.dtype if bv else None
    if av and bv:
        if ta != tb:
            if F32 in (ta, tb) and BOOL not in (ta, tb):
                t = F32
            else:
                raise IRError(f"mixing {ta} and {tb} needs an explicit cast (ir.cast)")
        else:
            t = ta
    else:
        t = ta or tb
        lit = b if av else a
        if t in (I32, U32) and isinstance(lit, float):
            t = F32  # 3 * 0.5 style mixing promotes to float
    if want_float and t in (I32, U32):
        t = F32
    x = cast(a, t) if av else VAR_CLASS[t](a)
    y = cast(b, t) if bv else VAR_CLASS[t](b)
    return x, y


def cast(x: Any, dtype: str) -> Var:
    """Value conversion (float->int truncates toward zero and saturates; NaN->0)."""
    if not isinstance(x, Var):
        return VAR_CLASS[dtype](x)
    if x.dtype == dtype:
        return x
    return wrap(current_block().emit("cast", dtype, (x.node,)))


def bitcast(x: Var, dtype: str) -> Var:
    """Reinterpret the 32 bits of ``x`` as ``dtype`` (f32/i32/u32)."""
    if x.dtype == BOOL or dtype == BOOL:
        raise IRError("bitcast is defined between f32, i32 and u32 only")
    return wrap(current_block().emit("bitcast", dtype, (x.node,)))


def _binary(op: str, a: Any, b: Any, want_float: bool = False) -> Var:
    x, y = _coerce(a, b, want_float)
    t = x.dtype
    if op in ("and", "or", "xor") and t == F32:
        raise IRError(f"bitwise '{op}' on f32; bitcast to UInt first")
    if op in ("shl", "shr") and t not in (I32, U32):
        raise IRError(f"shift on {t}; shifts need Int or UInt")
    if op in ("add", "sub", "mul", "div", "rem", "pow") and t == BOOL:
        raise IRError(f"arithmetic '{op}' on Bool; cast to Int or Float first")
    if op == "pow" and t != F32:
        raise IRError("pow needs Float operands")
    return wrap(current_block().emit(op, t, (x.node, y.node)))


def _floordiv(a: Any, b: Any) -> Var:
    x, y = _coerce(a, b)
    if x.dtype == F32:
        return wrap(current_block().emit("floor", F32, ((x / y).node,)))
    if x.dtype == U32:
        return _binary("div", x, y)
    # Python semantics: round toward -inf (and x // 0 == 0, like the div op).
    q = _binary("div", x, y)
    r = x - q * y
    fix = (r != 0) & ((r < 0) != (y < 0)) & (y != 0)
    return wrap(current_block().emit("select", x.dtype, (fix.node, (q - 1).node, q.node)))


def _unary(op: str, x: Var) -> Var:
    if op == "not" and x.dtype == F32:
        raise IRError("'~' on f32")
    if op in ("neg", "abs") and x.dtype == BOOL:
        raise IRError(f"'{op}' on Bool")
    if op == "neg" and x.dtype == U32:
        return _binary("sub", 0, x)
    if op == "abs" and x.dtype == U32:
        return x
    return wrap(current_block().emit(op, x.dtype, (x.node,)))


def _compare(op: str, a: Any, b: Any) -> Bool:
    x, y = _coerce(a, b)
    if op in ("lt", "le", "gt", "ge") and x.dtype == BOOL:
        raise IRError("ordering comparison on Bool")
    return Bool(current_block().emit(op, BOOL, (x.node, y.node)))
