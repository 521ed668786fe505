"""Kernel signatures and tracing a Python function into a :class:`Kernel`.

A kernel runs once per *work item*. It reads runtime buffers (inputs), may
scatter-add into zero-initialised accumulators, and returns per-item
outputs. Everything that varies between calls (scene values, seeds, sizes)
is a buffer, so one compiled kernel serves every call with the same
structure.

Example::

    from jaxrender import ir

    def scale(x, factor):
        i = ir.item_index()
        return {"y": x[i] * factor.value}

    k = ir.trace(scale, inputs={"x": ir.In("f32"), "factor": ir.Scalar("f32")},
                 outputs={"y": ir.Out("f32")})
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Mapping

from .gcpause import gc_paused
from .graph import BOOL, DTYPES, F32, I32, U32, Block, IRError, format_block
from .passes import eliminate_dead_code
from .pytree import tree_flatten
from .values import Bool, UInt, Var, as_var, cast, current_block, scope, wrap


@dataclasses.dataclass(frozen=True)
class In:
    """A read-only input array of shape ``(rows, *item_shape)``; rows is a
    runtime size (0 allowed), ``item_shape`` is part of the structure."""
    dtype: str
    item_shape: tuple[int, ...] = ()
    scalar: bool = False

    def __post_init__(self):
        _check_spec(self.dtype, self.item_shape, "In")


def Scalar(dtype: str) -> In:  # noqa: N802 - reads like a type
    """A shape-() input (a seed, a count, a uniform value)."""
    return In(dtype, (), scalar=True)


@dataclasses.dataclass(frozen=True)
class Out:
    """A per-work-item output: the array has shape ``launch_shape + item_shape``."""
    dtype: str
    item_shape: tuple[int, ...] = ()

    def __post_init__(self):
        _check_spec(self.dtype, self.item_shape, "Out")


@dataclasses.dataclass(frozen=True)
class Accum:
    """A zero-initialised output of shape ``(rows, *item_shape)`` that work
    items scatter-add into (gradients, histograms). ``rows`` is given at
    launch."""
    dtype: str
    item_shape: tuple[int, ...] = ()

    def __post_init__(self):
        _check_spec(self.dtype, self.item_shape, "Accum")
        if self.dtype == BOOL:
            raise IRError("Accum: bool accumulators are not supported")


def _check_spec(dtype, item_shape, what):
    if dtype not in DTYPES:
        raise IRError(f"{what}: unknown dtype {dtype!r} (use one of {DTYPES})")
    if not isinstance(item_shape, tuple) or not all(isinstance(d, int) and d > 0 for d in item_shape):
        raise IRError(f"{what}: item_shape must be a tuple of positive ints, got {item_shape!r}")


def _width(item_shape: tuple[int, ...]) -> int:
    w = 1
    for d in item_shape:
        w *= d
    return w


class Buffer:
    """Trace-time handle of an input array."""

    def __init__(self, name: str, index: int, spec: In):
        self.name, self.index, self.spec = name, index, spec
        self.width = _width(spec.item_shape)

    @property
    def len(self) -> UInt:
        """Number of rows at run time (1 for a scalar input)."""
        return UInt(current_block().emit("buffer_len", U32, (), (self.index,)))

    @property
    def value(self) -> Var:
        """The value of a scalar input."""
        if not self.spec.scalar:
            raise IRError(f"input {self.name!r} is an array; index it with [i]")
        return self.read(0)

    def read(self, row: Any, component: int = 0) -> Var:
        """Element ``component`` (flat index into item_shape) of row ``row``;
        ``row`` is clamped to the valid range (an empty buffer reads 0)."""
        if not 0 <= component < self.width:
            raise IRError(f"input {self.name!r}: component {component} out of range 0..{self.width - 1}")
        r = row if isinstance(row, Var) else UInt(row)
        if r.dtype not in (I32, U32):
            raise IRError(f"input {self.name!r}: row index must be Int or UInt, got {r.dtype}")
        return wrap(current_block().emit("gather", self.spec.dtype, (r.node,), (self.index, component, self.width)))

    def __getitem__(self, row: Any):
        """Row ``row``: a scalar, or a (nested) tuple shaped like item_shape."""
        if not self.spec.item_shape:
            return self.read(row)
        vals = [self.read(row, c) for c in range(self.width)]
        return _nest(vals, self.spec.item_shape)


def _nest(vals, shape):
    if len(shape) == 1:
        return tuple(vals)
    step = len(vals) // shape[0]
    return tuple(_nest(vals[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0]))


class Accumulator:
    """Trace-time handle of an :class:`Accum` output."""

    def __init__(self, name: str, index: int, spec: Accum):
        self.name, self.index, self.spec = name, index, spec
        self.width = _width(spec.item_shape)

    def scatter_add(self, row: Any, value: Any, component: int = 0) -> None:
        """Atomically add ``value`` to element ``component`` of row ``row``.
        Rows outside the array are dropped, never written."""
        scatter_add(self, row, value, component)


def scatter_add(acc: Accumulator, row: Any, value: Any, component: int = 0) -> None:
    if not isinstance(acc, Accumulator):
        raise IRError("scatter_add: target must be an Accum output")
    if not 0 <= component < acc.width:
        raise IRError(f"accumulator {acc.name!r}: component {component} out of range")
    r = row if isinstance(row, Var) else UInt(row)
    if r.dtype not in (I32, U32):
        raise IRError(f"accumulator {acc.name!r}: row index must be Int or UInt")
    v = as_var(value, None) if isinstance(value, Var) else as_var(value, acc.spec.dtype)
    if v.dtype != acc.spec.dtype:
        if acc.spec.dtype == F32 and v.dtype in (I32, U32):
            v = cast(v, F32)
        else:
            raise IRError(f"accumulator {acc.name!r} holds {acc.spec.dtype}, got {v.dtype}")
    current_block().emit("scatter_add", None, (r.node, v.node), (acc.index, component, acc.width), effect=True)


def item_index() -> UInt:
    """Index of this work item in the launch (row-major over launch_shape)."""
    return UInt(current_block().emit("item_index", U32))


def launch_size() -> UInt:
    """Number of work items in the launch (per batch element under vmap)."""
    return UInt(current_block().emit("launch_size", U32))


def check(ok: Any, message: str) -> None:
    """Runtime assertion: if ``ok`` is false for any work item, the launch
    fails and the caller gets a Python exception carrying ``message``."""
    c = ok if isinstance(ok, Var) else Bool(bool(ok))
    if c.dtype != BOOL:
        raise IRError("check: condition must be a Bool")
    root = current_block().root()
    msgs: list[str] = root.meta.setdefault("messages", [])
    if message not in msgs:
        msgs.append(message)
    current_block().emit("check", None, (c.node,), (msgs.index(message) + 1,), effect=True)


@dataclasses.dataclass
class Kernel:
    """A traced kernel: signature plus the optimised graph."""
    name: str
    inputs: dict[str, In]
    outputs: dict[str, Out | Accum]
    block: Block
    messages: tuple[str, ...]

    @property
    def text(self) -> str:
        """Stable printed form of the graph."""
        if not hasattr(self, "_text"):
            sig = [f"kernel {self.name}"]
            sig += [f"in {k}: {v}" for k, v in self.inputs.items()]
            sig += [f"out {k}: {v}" for k, v in self.outputs.items()]
            sig += [f"message {i + 1}: {m!r}" for i, m in enumerate(self.messages)]
            self._text = "\n".join(sig) + "\n" + format_block(self.block)
        return self._text

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def item_outputs(self) -> dict[str, Out]:
        return {k: v for k, v in self.outputs.items() if isinstance(v, Out)}

    @property
    def accumulators(self) -> dict[str, Accum]:
        return {k: v for k, v in self.outputs.items() if isinstance(v, Accum)}

    def __str__(self) -> str:
        return self.text


def trace(fn: Callable[..., Any], inputs: Mapping[str, In], outputs: Mapping[str, Out | Accum],
          name: str | None = None, optimize: bool = True) -> Kernel:
    """Trace ``fn`` into a kernel.

    ``fn`` is called with one keyword argument per input (a :class:`Buffer`)
    and per accumulator (an :class:`Accumulator`). It returns a dict of
    per-item output values keyed like the ``Out`` specs (a single value is
    accepted when there is exactly one ``Out``; vector outputs are flat or
    nested sequences matching item_shape)."""
    with gc_paused():
        return _trace(fn, inputs, outputs, name, optimize)


def _trace(fn, inputs, outputs, name, optimize) -> Kernel:
    for k, v in inputs.items():
        if not isinstance(v, In):
            raise IRError(f"input {k!r}: expected ir.In / ir.Scalar, got {v!r}")
    for k, v in outputs.items():
        if not isinstance(v, (Out, Accum)):
            raise IRError(f"output {k!r}: expected ir.Out / ir.Accum, got {v!r}")
        if k in inputs:
            raise IRError(f"name {k!r} is both an input and an output")
    root = Block(None, "root")
    root.meta = {}
    handles: dict[str, Any] = {k: Buffer(k, i, s) for i, (k, s) in enumerate(inputs.items())}
    acc_index = 0
    item_outs = [k for k, v in outputs.items() if isinstance(v, Out)]
    for k, v in outputs.items():
        if isinstance(v, Accum):
            handles[k] = Accumulator(k, acc_index, v)
            acc_index += 1
    with scope(root):
        ret = fn(**handles)
        if len(item_outs) == 1 and not isinstance(ret, dict):
            ret = {item_outs[0]: ret}
        if ret is None:
            ret = {}
        if not isinstance(ret, dict):
            raise IRError("kernel function must return a dict of per-item outputs")
        extra = set(ret) - set(item_outs)
        missing = set(item_outs) - set(ret)
        if extra or missing:
            raise IRError(f"kernel outputs mismatch: missing {sorted(missing)}, unexpected {sorted(extra)}")
        results = []
        for k in item_outs:
            spec = outputs[k]
            leaves, _ = tree_flatten(ret[k])
            if len(leaves) != _width(spec.item_shape):
                raise IRError(f"output {k!r}: expected {_width(spec.item_shape)} values for item_shape "
                              f"{spec.item_shape}, got {len(leaves)}")
            for x in leaves:
                v = x if isinstance(x, Var) else as_var(x, spec.dtype)
                if v.dtype != spec.dtype:
                    if spec.dtype == F32 and v.dtype in (I32, U32):
                        v = cast(v, F32)
                    else:
                        raise IRError(f"output {k!r} is {spec.dtype}, kernel returned {v.dtype}")
                results.append(v.node)
        root.set_results(results, "kernel output")
    if optimize:
        eliminate_dead_code(root)
    return Kernel(name or getattr(fn, "__name__", "kernel"), dict(inputs), dict(outputs), root,
                  tuple(root.meta.get("messages", ())))
