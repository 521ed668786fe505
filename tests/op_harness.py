"""Helpers for testing the elementwise ops of ``jaxrender.ir`` against numpy.

The idea: trace *one* kernel per family of ops (values are runtime data, so
one compiled kernel serves every input) and feed it arrays. Launches are
padded to a few fixed sizes so that XLA does not compile a new executable for
every array length hypothesis draws.

Comparison helpers report the offending inputs in hex, so a failure says at
once which value an op got wrong.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from jaxrender import ir
from jaxrender.primitives import launch

NP = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}

INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1
U32_MAX = 2 ** 32 - 1


def f32_from_bits(*bits: int) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


def bits_of(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)


# ---------------------------------------------------------------------------
# Edge values
# ---------------------------------------------------------------------------

F32_EDGES = np.concatenate([
    np.array([
        0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -3.5,
        0.49999997, -0.49999997, 0.1, -0.1, 3.0, -7.0, math.pi, -math.e,
        8388607.5, -8388607.5, 8388608.0, 16777216.0, 1e10, -1e10, 1e-20, -1e-20,
        2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0,
        4294967040.0, 4294967296.0, 3.4028235e38, -3.4028235e38,
    ], np.float32),
    f32_from_bits(
        0x00000001, 0x80000001,          # smallest denormals
        0x00400000, 0x807FFFFF,          # mid / largest denormals
        0x00800000, 0x80800000,          # smallest normals
        0x7FC00000, 0xFFC00000,          # quiet NaNs, both signs
        0x7FC00001, 0x7FA00000,          # NaN with payload, signalling NaN
    ),
])

# A smaller set for the quadratic (all pairs) constant-folding checks.
F32_SMALL = np.concatenate([
    np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -2.5, 3.5, 1e-20,
              2147483648.0, -3.4028235e38, 7.0, -0.1], np.float32),
    f32_from_bits(0x00000001, 0x807FFFFF, 0x7FC00000, 0xFFC00000),
])

I32_EDGES = np.array([
    0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 32, 33, 63, -33, 64, 100, -100,
    INT_MIN, INT_MIN + 1, INT_MAX, INT_MAX - 1, 0x55555555, -0x55555556,
    65535, 65536, -65536, 1 << 30, 1000000007, -123456789,
], np.int64).astype(np.int32)

U32_EDGES = np.array([
    0, 1, 2, 3, 7, 31, 32, 33, 64, 100, 0x7FFFFFFF, 0x80000000, 0x80000001,
    0xFFFFFFFF, 0xFFFFFFFE, 0xAAAAAAAA, 0x55555555, 65535, 65536, 1 << 30,
    4294967040, 16777217, 3000000000,
], np.uint64).astype(np.uint32)


def all_pairs(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(v, v, indexing="ij")
    return a.ravel().copy(), b.ravel().copy()


# ---------------------------------------------------------------------------
# Random data
# ---------------------------------------------------------------------------

def random_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    """A mix: arbitrary bit patterns (NaNs, infs, denormals included),
    log-uniform magnitudes, exact halves (rounding ties), and edge values."""
    with np.errstate(over="ignore"):
        loguniform = (np.exp(rng.uniform(-100, 100, n // 4)) * rng.choice([-1.0, 1.0], n // 4)).astype(np.float32)
    parts = [
        rng.integers(0, 2 ** 32, n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32),
        loguniform,
        (rng.integers(-64, 64, n // 8) / 2.0).astype(np.float32),
        rng.uniform(-10, 10, n // 8).astype(np.float32),
    ]
    rest = n - sum(len(p) for p in parts)
    parts.append(rng.choice(F32_EDGES, rest))
    out = np.concatenate(parts)
    rng.shuffle(out)
    return out


def random_i32(rng: np.random.Generator, n: int) -> np.ndarray:
    parts = [
        rng.integers(INT_MIN, INT_MAX, n // 2, dtype=np.int64, endpoint=True).astype(np.int32),
        rng.integers(-70, 70, n // 4).astype(np.int32),
    ]
    parts.append(rng.choice(I32_EDGES, n - sum(len(p) for p in parts)))
    out = np.concatenate(parts)
    rng.shuffle(out)
    return out


def random_u32(rng: np.random.Generator, n: int) -> np.ndarray:
    parts = [
        rng.integers(0, U32_MAX, n // 2, dtype=np.uint64, endpoint=True).astype(np.uint32),
        rng.integers(0, 70, n // 4).astype(np.uint32),
    ]
    parts.append(rng.choice(U32_EDGES, n - sum(len(p) for p in parts)))
    out = np.concatenate(parts)
    rng.shuffle(out)
    return out


# ---------------------------------------------------------------------------
# Kernels and launches
# ---------------------------------------------------------------------------

def to_out(v, dtype: str):
    """Coerce a traced result to what an ``Out(dtype)`` takes (bools -> i32)."""
    if isinstance(v, ir.Bool):
        v = ir.cast(v, "i32")
    if dtype != "f32" and isinstance(v, ir.Var) and v.dtype != dtype:
        raise AssertionError(f"op produced {v.dtype}, table says {dtype}")
    return v


def elementwise_kernel(name: str, in_dtypes: Mapping[str, str],
                       ops: Mapping[str, tuple[Callable, str]],
                       prep: Callable | None = None) -> ir.Kernel:
    """One kernel computing every ``ops[name] = (fn, out_dtype)`` on the
    work item's row of each input. ``prep`` maps the gathered values before
    the ops see them (e.g. i32 -> Bool)."""
    def body(**bufs):
        i = ir.item_index()
        vals = [bufs[k][i] for k in in_dtypes]
        if prep is not None:
            vals = prep(*vals)
        return {k: to_out(fn(*vals), dt) for k, (fn, dt) in ops.items()}

    return ir.trace(body, {k: ir.In(dt) for k, dt in in_dtypes.items()},
                    {k: ir.Out(dt) for k, (fn, dt) in ops.items()}, name=name)


def _bucket(n: int) -> int:
    b = 64
    while b < n:
        b *= 4
    return b


def run(kernel: ir.Kernel, lanes: int | None = None, pad: bool = True,
        **arrays: np.ndarray) -> dict[str, np.ndarray]:
    """Launch ``kernel`` with one work item per row; returns numpy outputs.

    Inputs are padded to a fixed bucket size (fewer XLA executables) unless
    ``pad`` is false. ``lanes`` picks the code generator (1: one work item
    at a time; 2..16: SIMD packets); None is the engine's default."""
    n = len(next(iter(arrays.values())))
    assert all(len(a) == n for a in arrays.values())
    m = _bucket(n) if pad else n
    padded = {}
    for k, a in arrays.items():
        want = NP[kernel.inputs[k].dtype]
        a = np.asarray(a)
        assert a.dtype == want, (k, a.dtype, want)
        padded[k] = np.concatenate([a, np.zeros(m - n, want)]) if m > n else a
    out = launch(kernel, (m,), simd_lanes=lanes, **padded)
    return {k: np.asarray(v)[:n] for k, v in out.items()}


def node_ops(kernel: ir.Kernel) -> list[str]:
    """The op names left in the kernel graph (all nested blocks)."""
    return [n.op for n in ir.walk(kernel.block)]


def folded_results(kernel: ir.Kernel) -> list:
    """The constant value of each flattened kernel result; fails unless all
    of them were folded to constants at trace time."""
    out = []
    for r in kernel.block.results:
        assert r.op == "const", f"result {r} was not constant-folded"
        out.append(r.attrs[0])
    return out


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------

def _ordered(x: np.ndarray) -> np.ndarray:
    """Map f32 bit patterns to integers whose order is the float order and
    whose difference counts representable floats in between (+0 == -0)."""
    i = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


NAN_MISMATCH = 1 << 40


def ulp_distance(got, want) -> np.ndarray:
    """Number of f32 values between ``got`` and ``want`` (0 when both are
    NaN; NAN_MISMATCH when exactly one is)."""
    got = np.asarray(got, np.float32)
    want = np.asarray(want, np.float32)
    d = np.abs(_ordered(got) - _ordered(want))
    gn, wn = np.isnan(got), np.isnan(want)
    d = np.where(gn & wn, 0, d)
    return np.where(gn != wn, NAN_MISMATCH, d)


def _fmt(v) -> str:
    v = np.asarray(v)
    if v.dtype == np.float32:
        return f"{float(v)!r}(0x{int(v.view(np.uint32)):08x})"
    if v.dtype == np.float64:
        return repr(float(v))
    return f"{int(v)}(0x{int(v) & 0xFFFFFFFF:08x})"


def _report(what: str, bad: np.ndarray, got, want, inputs: Sequence[np.ndarray], extra=None,
            count: int | None = None) -> str:
    idx = np.flatnonzero(bad)
    lines = [f"{what}: {len(idx) if count is None else count} of {bad.size} results wrong"]
    for j in idx[:8]:
        args = ", ".join(_fmt(x[j]) for x in inputs)
        line = f"  ({args}) -> got {_fmt(got[j])}, want {_fmt(want[j])}"
        if extra is not None:
            line += f" [{extra[j]}]"
        lines.append(line)
    return "\n".join(lines)


def mismatches(got, want, mode: str) -> np.ndarray:
    """Boolean mask of wrong results.

    ``bits``: identical bit patterns (NaN sign and payload included).
    ``value``: identical bits, or both NaN.
    ``minmax``: as ``value``, but a zero result may have either sign when
    the reference is a zero (IEEE minNum leaves min(+0, -0) open).
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype != np.float32 or got.dtype != np.float32:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        return got != want
    gb, wb = bits_of(got), bits_of(want)
    bad = gb != wb
    if mode == "bits":
        return bad
    bad &= ~(np.isnan(got) & np.isnan(want))
    if mode == "value":
        return bad
    if mode == "minmax":
        return bad & ~((got == 0) & (want == 0))
    raise ValueError(mode)


def check_exact(what: str, got, want, inputs: Sequence[np.ndarray], mode: str = "value") -> str | None:
    bad = mismatches(got, want, mode)
    if bad.any():
        return _report(what, bad, got, want, inputs)
    return None


def check_ulp(what: str, got, want, bound: int, inputs: Sequence[np.ndarray]) -> str | None:
    """Fails when any result is more than ``bound`` ulp from ``want``; the
    report lists the worst offenders."""
    d = ulp_distance(got, want)
    bad = d > bound
    if not bad.any():
        return None
    worst = np.zeros_like(bad)
    worst[np.argsort(-d, kind="stable")[:8]] = True
    return _report(f"{what} (bound {bound} ulp, worst {int(d.max())})", worst & bad, got, want,
                   inputs, extra=d, count=int(bad.sum()))


def assert_no_failures(failures: Sequence[str | None]) -> None:
    msgs = [f for f in failures if f]
    assert not msgs, "\n".join(msgs)


# ---------------------------------------------------------------------------
# Reference implementations (numpy, bit exact)
# ---------------------------------------------------------------------------

def fma_ref(a, b, c) -> np.ndarray:
    """Correctly rounded f32 fused multiply-add.

    The product of two f32 is exact in f64; the f64 sum ``s`` carries an
    error ``e`` (TwoSum, exact). Rounding ``s`` to f32 is then correct
    unless ``s`` is exactly halfway between two f32 while ``e != 0``; then
    the true value lies on the side of ``e``, and nudging ``s`` one f64 ulp
    that way settles the tie correctly."""
    a64, b64, c64 = (np.asarray(x, np.float32).astype(np.float64) for x in (a, b, c))
    with np.errstate(all="ignore"):
        p = a64 * b64
        s = p + c64
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)
        r = s.astype(np.float32)
        back = r.astype(np.float64)
        toward = np.nextafter(r, np.where(s > back, np.float32(np.inf), np.float32(-np.inf)))
        mid = (back + toward.astype(np.float64)) / 2
        is_mid = np.isfinite(s) & np.isfinite(e) & (s != back) & (s == mid) & (e != 0)
        s = np.where(is_mid, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def fmin_ref(a, b) -> np.ndarray:
    """IEEE minNum as the engine documents it: a NaN operand (quiet or
    signalling) is ignored. (numpy's own fmin is not a usable reference for
    signalling NaNs: its SIMD and scalar loops disagree on them.)"""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.minimum(a, b)))


def fmax_ref(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.maximum(a, b)))


def f32_to_int_ref(a, dtype: str) -> np.ndarray:
    """Truncate toward zero, saturate, NaN -> 0."""
    x = np.asarray(a, np.float32).astype(np.float64)
    lo, hi = (INT_MIN, INT_MAX) if dtype == "i32" else (0, U32_MAX)
    with np.errstate(invalid="ignore"):
        t = np.clip(np.trunc(np.nan_to_num(x, nan=0.0, posinf=hi, neginf=lo)), lo, hi)
    return t.astype(np.int64).astype(NP[dtype])


def int_to_f32_ref(a) -> np.ndarray:
    # int -> f64 is exact for 32-bit ints, so this rounds once.
    return np.asarray(a).astype(np.float64).astype(np.float32)


def _wrap(x: np.ndarray, dtype: str) -> np.ndarray:
    return (np.asarray(x, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(NP[dtype]) \
        if dtype == "i32" else (np.asarray(x, np.int64) & 0xFFFFFFFF).astype(np.uint32)


def c_div_ref(a, b, dtype: str) -> np.ndarray:
    """C division (truncating), x / 0 == 0, INT_MIN / -1 wraps."""
    a64, b64 = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    safe = np.where(b64 == 0, 1, b64)
    q = np.abs(a64) // np.abs(safe)
    q = np.where((a64 < 0) != (safe < 0), -q, q)
    return _wrap(np.where(b64 == 0, 0, q), dtype)


def c_rem_ref(a, b, dtype: str) -> np.ndarray:
    """C remainder (sign of the dividend), x % 0 == 0."""
    a64, b64 = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    q = c_div_ref(a, b, "i32" if dtype == "i32" else "u32").astype(np.int64)
    if dtype == "i32":
        q = np.where((b64 == -1), -a64, q)  # undo the INT_MIN / -1 wrap
    return _wrap(np.where(b64 == 0, 0, a64 - q * b64), dtype)


def floor_div_ref(a, b) -> np.ndarray:
    """Python floor division on i32 (wrapping), x // 0 == 0."""
    a64, b64 = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    q = a64 // np.where(b64 == 0, 1, b64)
    return _wrap(np.where(b64 == 0, 0, q), "i32")


def shl_ref(a, s, dtype: str) -> np.ndarray:
    u = np.asarray(a).view(np.uint32) if dtype == "i32" else np.asarray(a, np.uint32)
    sh = (np.asarray(s).astype(np.int64) & 31).astype(np.uint32)
    r = np.left_shift(u, sh)
    return r.view(np.int32) if dtype == "i32" else r


def shr_ref(a, s, dtype: str) -> np.ndarray:
    sh = (np.asarray(s).astype(np.int64) & 31)
    if dtype == "i32":
        return np.right_shift(np.asarray(a, np.int32), sh.astype(np.int32))  # arithmetic
    return np.right_shift(np.asarray(a, np.uint32), sh.astype(np.uint32))    # logical


def mulhi_ref(a, b, dtype: str) -> np.ndarray:
    if dtype == "i32":
        p = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64)
        return (p >> 32).astype(np.int32)
    p = np.asarray(a).astype(np.uint64) * np.asarray(b).astype(np.uint64)
    return (p >> np.uint64(32)).astype(np.uint32)


def wrap_ref(f: Callable, dtype: str) -> Callable:
    """An integer op computed exactly in int64 (uint64 for u32, where
    products may need 64 bits; uint64 wraps mod 2**64, keeping the low 32
    bits right), reduced modulo 2**32."""
    wide = np.uint64 if dtype == "u32" else np.int64

    def g(*xs):
        with np.errstate(over="ignore"):
            r = np.asarray(f(*(np.asarray(x).astype(wide) for x in xs)))
        low = (r.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return low.view(np.int32) if dtype == "i32" else low
    return g


# ---------------------------------------------------------------------------
# Transcendental references (float64, rounded once to f32)
# ---------------------------------------------------------------------------

def ref64(op: str, *args) -> np.ndarray:
    xs = [np.asarray(a, np.float32).astype(np.float64) for a in args]
    with np.errstate(all="ignore"):
        if op == "erf":
            r = np.array([math.erf(v) for v in xs[0]], np.float64)
        elif op == "rsqrt":
            r = 1.0 / np.sqrt(xs[0])
        else:
            fn = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
                  "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
                  "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
                  "pow": np.power}[op]
            r = fn(*xs)
        return r.astype(np.float32)
