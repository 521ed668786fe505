"""The typed SSA graph behind the kernel language.

A kernel is a tree of :class:`Block` s. A block is an ordered list of
:class:`Node` s plus its parameters and results; structured control flow
(loops, branches, dynamic dispatch) is a node that owns nested blocks, in the
manner of MLIR's ``scf`` dialect. Inner blocks may use any value of an
enclosing block (closures), which keeps graph-to-graph transforms (jvp,
transpose, batching) simple: they map blocks to blocks.

Every node is created through :meth:`Block.emit`, which folds constants,
applies algebraic simplifications and value-numbers pure operations (looking
through enclosing blocks, whose values dominate). Side-effecting nodes
(scatter-add, checks, and region nodes that contain them) are never merged or
removed.
"""
from __future__ import annotations

import itertools
import math
import struct
from typing import Any, Iterable, Sequence

import numpy as np

F32, I32, U32, BOOL = "f32", "i32", "u32", "bool"
DTYPES = (F32, I32, U32, BOOL)
INT_TYPES = (I32, U32)
NUMPY_DTYPE = {F32: np.float32, I32: np.int32, U32: np.uint32, BOOL: np.bool_}

# Pure elementwise operations: name -> number of operands.
UNARY_FLOAT_OPS = (
    "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tan", "asin",
    "acos", "atan", "erf", "floor", "ceil", "trunc", "round",
)
PURE_OPS = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "rem": 2, "neg": 1, "fma": 3,
    "min": 2, "max": 2, "abs": 1, "copysign": 2, "pow": 2, "atan2": 2,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2,
    "and": 2, "or": 2, "xor": 2, "not": 1, "shl": 2, "shr": 2, "mulhi": 2,
    "select": 3, "cast": 1, "bitcast": 1, "isnan": 1, "isfinite": 1,
    # a * b, except that it is exactly 0 when either factor is 0 (whatever
    # the other is, inf or NaN): derivative code multiplies with it so that a
    # zero tangent or cotangent never meets an infinite slope.
    "zmul": 2,
    # Identity whose derivative is zero (stop-gradient).
    "detach": 1,
    **{name: 1 for name in UNARY_FLOAT_OPS},
}
# Operations that read the launch environment; pure within one work item.
ENV_OPS = ("item_index", "launch_size", "buffer_len", "gather", "batch_index", "bvh_query")
# Operations with an effect on memory or on the launch's status.
EFFECT_OPS = ("scatter_add", "check")
# "call": a function body kept as a region (its params are the call's
# arguments) so that a custom derivative can be attached to it, or, where
# the region's kind is "outline", a subroutine (control.subroutine).
REGION_OPS = ("loop", "if", "dispatch", "call")

_ids = itertools.count()


class IRError(Exception):
    """Misuse of the kernel language detected while tracing."""


class Node:
    """One SSA operation. ``type`` is a dtype name, or None for a region node
    whose results are read through ``proj`` nodes."""

    __slots__ = ("id", "op", "type", "args", "attrs", "regions", "block", "effect", "payload")

    def __init__(self, op: str, type_: str | None, args: tuple, attrs: tuple,
                 regions: tuple, block: "Block", effect: bool):
        self.id = next(_ids)
        self.op = op
        self.type = type_
        self.args = args
        self.attrs = attrs
        self.regions = regions
        self.block = block
        self.effect = effect
        self.payload = None  # Python-side data that is not part of the program (custom rules)

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type} = {self.op}{self.attrs}({', '.join('%%%d' % a.id for a in self.args)})"

    @property
    def const_value(self):
        return self.attrs[0] if self.op == "const" else None


class Block:
    """An ordered region of nodes with parameters and results."""

    def __init__(self, parent: "Block | None", kind: str = "root"):
        self.parent = parent
        self.kind = kind
        self.nodes: list[Node] = []
        self.params: list[Node] = []
        self.results: list[Node] = []
        self._table: dict[tuple, Node] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.meta: dict = {}

    # -- scope -----------------------------------------------------------
    def root(self) -> "Block":
        b = self
        while b.parent is not None:
            b = b.parent
        return b

    def encloses(self, other: "Block") -> bool:
        """True when ``other`` is this block or nested inside it."""
        b = other
        while b is not None:
            if b is self:
                return True
            b = b.parent
        return False

    def set_results(self, nodes: Sequence[Node], what: str) -> None:
        """Declare the block's results, rejecting values from ended scopes."""
        for n in nodes:
            _check_visible(n, self, what)
        self.results = list(nodes)

    def has_effects(self) -> bool:
        return any(n.effect for n in self.nodes)

    def add_param(self, type_: str) -> Node:
        n = Node("param", type_, (), (len(self.params),), (), self, False)
        self.params.append(n)
        return n

    # -- emission --------------------------------------------------------
    def _lookup(self, key: tuple) -> Node | None:
        b = self
        while b is not None:
            hit = b._table.get(key)
            if hit is not None:
                return hit
            # A read of a differentiated buffer inside a function being
            # differentiated is the function's own (a derivative flows from
            # it), never one the enclosing code made before.
            if key[0] == "gather" and b.kind == "function" and key[3][0] in b.meta.get("diff_buffers", ()):
                return None
            # A subroutine's body computes what it reads itself: the same
            # code wherever it is called from (control.subroutine).
            if b.kind == "outline":
                return None
            b = b.parent
        return None

    def const(self, type_: str, value: Any) -> Node:
        value = canonical_const(type_, value)
        root = self.root()
        key = ("const", type_, const_key(type_, value))
        hit = root._table.get(key)
        if hit is None:
            hit = Node("const", type_, (), (value,), (), root, False)
            root.nodes.insert(0, hit)  # constants dominate everything
            root._table[key] = hit
        return hit

    def emit(self, op: str, type_: str | None, args: Sequence[Node] = (),
             attrs: tuple = (), regions: tuple = (), effect: bool = False) -> Node:
        args = tuple(args)
        for a in args:
            if not isinstance(a, Node):
                raise IRError(f"{op}: operand {a!r} is not an IR value")
            _check_visible(a, self, op)
        if op in PURE_OPS:
            simplified = simplify(self, op, type_, args, attrs)
            if simplified is not None:
                return simplified
        pure = not effect and op not in REGION_OPS and op != "param"
        key = None
        if pure:
            key = (op, type_, tuple(a.id for a in args), attrs)
            hit = self._lookup(key)
            if hit is not None:
                return hit
        node = Node(op, type_, args, attrs, regions, self, effect)
        self.nodes.append(node)
        if key is not None:
            self._table[key] = node
        return node


def _check_visible(value: Node, block: Block, what: str) -> None:
    if not value.block.encloses(block):
        raise IRError(
            f"{what}: value %{value.id} was defined inside a loop, branch or "
            "dispatch body that has already ended; return it from that body "
            "(as loop state or a branch result) to use it outside")


# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

def canonical_const(type_: str, value: Any):
    """Round a Python/numpy scalar to the exact value the dtype holds."""
    if type_ == F32:
        if isinstance(value, np.floating):
            return bits_f32(int(np.float32(value).view(np.uint32)))
        value = float(value)
        return bits_f32(f32_bits(value))
    if type_ == I32:
        v = int(value) & 0xFFFFFFFF
        return v - (1 << 32) if v >= (1 << 31) else v
    if type_ == U32:
        return int(value) & 0xFFFFFFFF
    if type_ == BOOL:
        return bool(value)
    raise IRError(f"unknown dtype {type_!r}")


def const_key(type_: str, value):
    if type_ == F32:  # distinguish -0.0 and NaN payloads
        return f32_bits(value)
    return value


# f32 constants are held as Python floats whose double bits are the exact
# widening of the f32 bits. NaNs are widened by moving bits, never through the
# FPU, which would quiet a signalling NaN and lose the pattern (bitcast folds
# must be exact).

def f32_bits(x: float) -> int:
    """The f32 bit pattern of ``x`` (rounded to nearest f32; NaN payloads kept)."""
    if x != x:
        d = struct.unpack("<Q", struct.pack("<d", x))[0]
        bits = ((d >> 32) & 0x80000000) | 0x7F800000 | ((d >> 29) & 0x7FFFFF)
        return bits if bits & 0x7FFFFF else bits | 0x400000  # payload lost below f32: quiet NaN
    with np.errstate(over="ignore"):
        return int(np.array(x, np.float64).astype(np.float32).view(np.uint32))


def bits_f32(b: int) -> float:
    """The Python float holding the f32 with bit pattern ``b``, exactly."""
    b &= 0xFFFFFFFF
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
        d = ((b & 0x80000000) << 32) | (0x7FF << 52) | ((b & 0x7FFFFF) << 29)
        return struct.unpack("<d", struct.pack("<Q", d))[0]
    return struct.unpack("<f", struct.pack("<I", b))[0]


# ---------------------------------------------------------------------------
# Constant folding: must agree bit for bit with the lowering for exact ops.
# ---------------------------------------------------------------------------

def _f(x):
    """A Python float constant as np.float32, bit-exact (NaN payloads kept)."""
    if isinstance(x, float):
        return np.uint32(f32_bits(x)).view(np.float32)
    return np.float32(x)


def _float_unary(op: str, x: float) -> float:
    with np.errstate(all="ignore"):
        if op == "sqrt":
            return float(np.sqrt(_f(x)))
        if op == "rsqrt":
            return float(_f(1.0) / np.sqrt(_f(x)))
        if op == "floor":
            return float(np.floor(_f(x)))
        if op == "ceil":
            return float(np.ceil(_f(x)))
        if op == "trunc":
            return float(np.trunc(_f(x)))
        if op == "round":
            return float(np.rint(_f(x)))
        # Transcendentals: float64 result rounded to f32 (within the
        # lowering's ulp bound; the exact bits may differ from libm's).
        if op == "erf":
            return float(np.float32(math.erf(x)))
        fn = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
              "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
              "acos": np.arccos, "atan": np.arctan}[op]
        return float(np.float32(fn(np.float64(x))))


def fold(op: str, type_: str, vals: list, attrs: tuple, arg_types: list):
    """Evaluate an op on constants; returns a Python scalar or None."""
    t0 = arg_types[0] if arg_types else None
    with np.errstate(all="ignore"):
        if op == "cast":
            return _cast_scalar(vals[0], t0, type_)
        if op == "bitcast":
            return _bitcast_scalar(vals[0], t0, type_)
        if op == "select":
            return vals[1] if vals[0] else vals[2]
        if t0 == F32:
            a = [_f(v) for v in vals]
            if op in UNARY_FLOAT_OPS:
                return _float_unary(op, vals[0])
            r = {
                "add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1],
                "mul": lambda: a[0] * a[1], "div": lambda: a[0] / a[1],
                "rem": lambda: np.fmod(a[0], a[1]), "neg": lambda: -a[0],
                "fma": lambda: _f(np.float64(a[0]) * np.float64(a[1]) + np.float64(a[2])) if _fma_exact_in_f64(a) else None,
                "zmul": lambda: _f(0.0) if (a[0] == 0 or a[1] == 0) else a[0] * a[1],
                "detach": lambda: a[0],
                "min": lambda: a[1] if (np.isnan(a[0]) or a[1] < a[0]) else a[0],
                "max": lambda: a[1] if (np.isnan(a[0]) or a[1] > a[0]) else a[0],
                "abs": lambda: np.abs(a[0]), "copysign": lambda: np.copysign(a[0], a[1]),
                "pow": lambda: _f(np.power(np.float64(a[0]), np.float64(a[1]))),
                "atan2": lambda: _f(math.atan2(float(a[0]), float(a[1]))),
                "lt": lambda: a[0] < a[1], "le": lambda: a[0] <= a[1],
                "gt": lambda: a[0] > a[1], "ge": lambda: a[0] >= a[1],
                "eq": lambda: a[0] == a[1], "ne": lambda: a[0] != a[1],
                "isnan": lambda: np.isnan(a[0]), "isfinite": lambda: np.isfinite(a[0]),
            }.get(op)
            if r is None:
                return None
            out = r()
            if out is None:
                return None
            return bool(out) if type_ == BOOL else out  # an np.float32: NaN bits kept
        if t0 in INT_TYPES or t0 == BOOL:
            return _fold_int(op, type_, vals, t0)
    return None


def _fma_exact_in_f64(a) -> bool:
    # A product of two f32 is exact in f64; the sum then rounds once to f64 and
    # again to f32. Double rounding can differ from a true fma only in rare
    # ties; we fold only when the f64 sum is exact (checked by reversal).
    p = np.float64(a[0]) * np.float64(a[1])
    s = p + np.float64(a[2])
    return bool(s - p == np.float64(a[2])) and bool(s - np.float64(a[2]) == p)


def _wrap(type_: str, v: int):
    return canonical_const(type_, v)


def _fold_int(op, type_, vals, t0):
    if t0 == BOOL:
        a = [bool(v) for v in vals]
        r = {"and": lambda: a[0] and a[1], "or": lambda: a[0] or a[1],
             "xor": lambda: a[0] != a[1], "not": lambda: not a[0],
             "eq": lambda: a[0] == a[1], "ne": lambda: a[0] != a[1]}.get(op)
        return None if r is None else r()
    a = [int(v) for v in vals]
    if op == "div":
        if a[1] == 0:
            return 0
        q = abs(a[0]) // abs(a[1])
        return _wrap(type_, q if (a[0] >= 0) == (a[1] >= 0) else -q)
    if op == "rem":
        if a[1] == 0:
            return 0
        q = abs(a[0]) // abs(a[1])
        q = q if (a[0] >= 0) == (a[1] >= 0) else -q
        return _wrap(type_, a[0] - q * a[1])
    if op in ("shl", "shr"):
        s = a[1] & 31
        if op == "shl":
            return _wrap(type_, a[0] << s)
        return _wrap(type_, a[0] >> s)  # Python >> is arithmetic on signed, logical on u32 values
    r = {
        "add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
        "neg": lambda: -a[0], "min": lambda: min(a[0], a[1]), "max": lambda: max(a[0], a[1]),
        "abs": lambda: abs(a[0]), "and": lambda: a[0] & a[1], "or": lambda: a[0] | a[1],
        "xor": lambda: a[0] ^ a[1], "not": lambda: ~a[0],
        "mulhi": lambda: (a[0] * a[1]) >> 32,
        "lt": lambda: a[0] < a[1], "le": lambda: a[0] <= a[1], "gt": lambda: a[0] > a[1],
        "ge": lambda: a[0] >= a[1], "eq": lambda: a[0] == a[1], "ne": lambda: a[0] != a[1],
    }.get(op)
    if r is None:
        return None
    out = r()
    return out if type_ == BOOL else _wrap(type_, out)


def _cast_scalar(v, src, dst):
    if dst == BOOL:
        return bool(v != 0)
    if src == BOOL:
        return canonical_const(dst, 1 if v else 0)
    if dst == F32:
        return float(np.float32(v))
    if src == F32:  # float -> int: truncate, saturate, NaN -> 0 (as lowered)
        if math.isnan(v):
            return 0
        lo, hi = (-(1 << 31), (1 << 31) - 1) if dst == I32 else (0, (1 << 32) - 1)
        return int(min(max(math.trunc(v), lo), hi)) if math.isfinite(v) else (hi if v > 0 else lo)
    return canonical_const(dst, v)  # int <-> int: reinterpret modulo 2**32


def _bitcast_scalar(v, src, dst):
    if src == F32:
        bits = f32_bits(v)
    else:
        bits = int(v) & 0xFFFFFFFF
    if dst == F32:
        return bits_f32(bits)
    return canonical_const(dst, bits)


# ---------------------------------------------------------------------------
# Algebraic simplification
# ---------------------------------------------------------------------------

def _is_const(n: Node, value=None) -> bool:
    if n.op != "const":
        return False
    if value is None:
        return True
    v = n.attrs[0]
    if n.type == F32:
        return f32_bits(v) == f32_bits(float(value))
    return v == value


def simplify(block: Block, op: str, type_: str, args: tuple, attrs: tuple) -> Node | None:
    """Fold constants and apply identities that are exact in IEEE arithmetic."""
    if all(a.op == "const" for a in args):
        v = fold(op, type_, [a.attrs[0] for a in args], attrs, [a.type for a in args])
        if v is not None:
            return block.const(type_, v)
    t = args[0].type if args else None
    isint = t in INT_TYPES
    if op == "select":
        c, x, y = args
        if c.op == "const":
            return x if c.attrs[0] else y
        if x is y:
            return x
        return None
    if op == "cast" and t == type_:
        return args[0]
    if op == "bitcast" and t == type_:
        return args[0]
    if len(args) == 2:
        a, b = args
        if op == "add":
            # x + (-0.0) == x exactly; x + 0.0 is not (-0.0 + 0.0 = +0.0).
            if isint and _is_const(b, 0):
                return a
            if isint and _is_const(a, 0):
                return b
            if t == F32 and _is_const(b, -0.0):
                return a
            if t == F32 and _is_const(a, -0.0):
                return b
        elif op == "sub":
            if (isint and _is_const(b, 0)) or (t == F32 and _is_const(b, 0.0)):
                return a
            if isint and a is b:
                return block.const(type_, 0)
        elif op == "mul":
            if _is_const(b, 1):
                return a
            if _is_const(a, 1):
                return b
            if isint and (_is_const(a, 0) or _is_const(b, 0)):
                return block.const(type_, 0)
        elif op == "div":
            if _is_const(b, 1):
                return a
        elif op in ("and", "or") and t in (BOOL, *INT_TYPES):
            if a is b:
                return a
            allones = True if t == BOOL else (-1 if t == I32 else 0xFFFFFFFF)
            zero = False if t == BOOL else 0
            if op == "and":
                if _is_const(a, zero) or _is_const(b, zero):
                    return block.const(type_, zero)
                if _is_const(a, allones):
                    return b
                if _is_const(b, allones):
                    return a
            else:
                if _is_const(a, allones) or _is_const(b, allones):
                    return block.const(type_, allones)
                if _is_const(a, zero):
                    return b
                if _is_const(b, zero):
                    return a
        elif op == "xor":
            if isint and a is b:
                return block.const(type_, 0)
            if _is_const(b, 0 if isint else False):
                return a
        elif op in ("shl", "shr") and _is_const(b, 0):
            return a
        elif op in ("min", "max") and a is b and (isint or t == F32):
            return a
        elif op in ("eq", "le", "ge") and isint and a is b:
            return block.const(BOOL, True)
        elif op in ("ne", "lt", "gt") and isint and a is b:
            return block.const(BOOL, False)
    if op == "not" and args[0].op == "not":
        return args[0].args[0]
    if op == "neg" and args[0].op == "neg":
        return args[0].args[0]
    return None


# ---------------------------------------------------------------------------
# Traversal helpers
# ---------------------------------------------------------------------------

def walk(block: Block) -> Iterable[Node]:
    """All nodes of a block and its nested blocks, in program order."""
    for n in block.nodes:
        yield n
        for r in n.regions:
            yield from walk(r)


def captured_values(block: Block) -> list[Node]:
    """The values a block (with its nested blocks) reads from enclosing
    blocks, in order of first use."""
    inside: set[int] = set()

    def mark(b: Block) -> None:
        inside.update(p.id for p in b.params)
        for n in b.nodes:
            inside.add(n.id)
            for r in n.regions:
                mark(r)

    mark(block)
    out: list[Node] = []
    seen: set[int] = set()

    def use(x: Node) -> None:
        if x.id not in inside and x.id not in seen:
            seen.add(x.id)
            out.append(x)

    def scan(b: Block) -> None:
        for n in b.nodes:
            for a in n.args:
                use(a)
            for r in n.regions:
                scan(r)
        for r in b.results:
            use(r)

    scan(block)
    return out


def format_block(block: Block, indent: int = 0, outer_ids: bool = False) -> str:
    """A stable textual form of the graph (used for hashing and debugging).

    Node ids are renumbered in program order so that two traces of the same
    program print identically. With ``outer_ids``, values captured from
    enclosing blocks print by identity (``^id``), so two regions compare
    equal only when they compute the same thing from the same outer values."""
    names: dict[int, str] = {}
    counter = itertools.count()
    inside = {n.id for n in walk(block)} | {p.id for p in block.params}
    if outer_ids:
        for n in walk(block):
            for r in n.regions:
                inside.update(p.id for p in r.params)

    def name(n: Node) -> str:
        if outer_ids and n.id not in inside:
            return f"^{n.id}"
        if n.id not in names:
            names[n.id] = f"%{next(counter)}"
        return names[n.id]

    lines: list[str] = []

    def emit_block(b: Block, ind: int) -> None:
        pad = "  " * ind
        if b.params:
            lines.append(pad + "params " + ", ".join(f"{name(p)}:{p.type}" for p in b.params))
        for n in b.nodes:
            attrs = "" if not n.attrs else "[" + ", ".join(_fmt_attr(x) for x in n.attrs) + "]"
            lines.append(f"{pad}{name(n)}:{n.type} = {n.op}{attrs}(" + ", ".join(name(a) for a in n.args) + ")")
            for i, r in enumerate(n.regions):
                lines.append(f"{pad}  region {i} ({r.kind}):")
                emit_block(r, ind + 2)
        lines.append(pad + "yield " + ", ".join(name(r) for r in b.results))

    emit_block(block, indent)
    return "\n".join(lines)


def _fmt_attr(x) -> str:
    if isinstance(x, float):
        return f"f32:{f32_bits(x):08x}"
    return repr(x)
