"""Elementwise ops of the kernel language against numpy, bit for bit.

Layout:

1. exact ops (arithmetic, comparisons, bit ops, casts, bitcasts, select,
   min/max, abs, fma, copysign, mulhi, rounding, sqrt) on fixed edge-value
   grids, large random arrays and hypothesis-drawn arrays;
2. transcendentals: measured ulp error against a float64 reference rounded
   to f32, over stated domains, plus special values;
3. constant folding (trace-time evaluation of literal operands) agrees with
   the compiled code;
4. algebraic simplification, value numbering and dead-code elimination;
5. type errors at trace time.

Kernels are traced once per family of ops (values are runtime data) and
cached; hypothesis only changes the arrays fed to them.
"""
from __future__ import annotations

import functools
import math
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from op_harness import (
    F32_EDGES,
    F32_SMALL,
    I32_EDGES,
    INT_MAX,
    INT_MIN,
    U32_EDGES,
    U32_MAX,
    all_pairs,
    assert_no_failures,
    bits_of,
    c_div_ref,
    c_rem_ref,
    check_exact,
    check_ulp,
    elementwise_kernel,
    f32_from_bits,
    f32_to_int_ref,
    floor_div_ref,
    fma_ref,
    fmax_ref,
    fmin_ref,
    folded_results,
    int_to_f32_ref,
    mismatches,
    mulhi_ref,
    node_ops,
    random_f32,
    random_i32,
    random_u32,
    ref64,
    run,
    shl_ref,
    shr_ref,
    to_out,
    ulp_distance,
    wrap_ref,
)

from jaxrender import ir
from jaxrender.ir.graph import f32_bits
from jaxrender.ir import values as _values
from jaxrender.primitives import launch

F, I, U = "f32", "i32", "u32"

HYP = settings(max_examples=40, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def raw_div(a, b):
    """The IR's own ``div`` op (C truncation for Int); Python's ``//`` on
    Int is floor division built on top of it."""
    return _values._binary("div", a, b)


def _b(x):
    return np.asarray(x).astype(np.int32)


def _errstate(f):
    @functools.wraps(f)
    def g(*a):
        with np.errstate(all="ignore"):
            return f(*a)
    return g


# ---------------------------------------------------------------------------
# Op tables: name -> (traced function, output dtype, numpy reference, mode)
# ``mode`` is how float results compare: "bits" (the bit pattern, NaNs
# included: sign/abs/copysign/bitcast/select never touch a payload),
# "value" (bit pattern, or both NaN), "minmax" (as value; a zero may have
# either sign when the reference is a zero, which IEEE minNum leaves open).
# ---------------------------------------------------------------------------

FLOAT_UNARY = {
    "neg": (lambda a: -a, F, np.negative, "bits"),
    "pos": (lambda a: +a, F, lambda a: a, "bits"),
    "abs": (lambda a: abs(a), F, np.abs, "bits"),
    "ir_abs": (ir.abs, F, np.abs, "bits"),
    "sign": (ir.sign, F, lambda a: np.copysign(np.float32(1), a), "bits"),
    "sqrt": (ir.sqrt, F, np.sqrt, "value"),
    "floor": (ir.floor, F, np.floor, "value"),
    "ceil": (ir.ceil, F, np.ceil, "value"),
    "trunc": (ir.trunc, F, np.trunc, "value"),
    "round": (ir.round, F, np.rint, "value"),
    "isnan": (lambda a: ir.select(ir.isnan(a), 1, 0), I, lambda a: _b(np.isnan(a)), "value"),
    "isfinite": (ir.isfinite, I, lambda a: _b(np.isfinite(a)), "value"),
    "cast_i32": (lambda a: ir.cast(a, I), I, lambda a: f32_to_int_ref(a, I), "value"),
    "cast_u32": (lambda a: ir.cast(a, U), U, lambda a: f32_to_int_ref(a, U), "value"),
    "cast_bool": (lambda a: ir.cast(a, "bool"), I, lambda a: _b(a != 0), "value"),
    "bitcast_u32": (lambda a: ir.bitcast(a, U), U, lambda a: a.view(np.uint32), "value"),
    "bitcast_i32": (lambda a: ir.bitcast(a, I), I, lambda a: a.view(np.int32), "value"),
    "bitcast_roundtrip": (lambda a: ir.bitcast(ir.bitcast(a, I), F), F, lambda a: a, "bits"),
    "lit_sub": (lambda a: 2.5 - a, F, lambda a: np.float32(2.5) - a, "value"),
    "lit_div": (lambda a: 1.0 / a, F, lambda a: np.float32(1) / a, "value"),
}

FLOAT_BINARY = {
    "add": (lambda a, b: a + b, F, np.add, "value"),
    "sub": (lambda a, b: a - b, F, np.subtract, "value"),
    "mul": (lambda a, b: a * b, F, np.multiply, "value"),
    "div": (lambda a, b: a / b, F, np.divide, "value"),
    "rem": (lambda a, b: a % b, F, np.fmod, "value"),
    "floordiv": (lambda a, b: a // b, F, lambda a, b: np.floor(a / b), "value"),
    "min": (ir.minimum, F, fmin_ref, "minmax"),
    "max": (ir.maximum, F, fmax_ref, "minmax"),
    "copysign": (ir.copysign, F, np.copysign, "bits"),
    "lt": (lambda a, b: a < b, I, lambda a, b: _b(a < b), "value"),
    "le": (lambda a, b: a <= b, I, lambda a, b: _b(a <= b), "value"),
    "gt": (lambda a, b: a > b, I, lambda a, b: _b(a > b), "value"),
    "ge": (lambda a, b: a >= b, I, lambda a, b: _b(a >= b), "value"),
    "eq": (lambda a, b: a == b, I, lambda a, b: _b(a == b), "value"),
    "ne": (lambda a, b: a != b, I, lambda a, b: _b(a != b), "value"),
    "select": (lambda a, b: ir.select(a < b, a, b), F, lambda a, b: np.where(a < b, a, b), "bits"),
}

FLOAT_TERNARY = {
    "fma": (ir.fma, F, fma_ref, "value"),
    "clamp": (ir.clamp, F, lambda a, b, c: fmin_ref(fmax_ref(a, b), c), "minmax"),
    "select3": (lambda a, b, c: ir.select(a == b, c, a), F, lambda a, b, c: np.where(a == b, c, a), "bits"),
}


def _int_binary(dt):
    """Binary ops shared by Int and UInt; ``dt`` picks the reference."""
    wr = functools.partial(wrap_ref, dtype=dt)
    return {
        "add": (lambda a, b: a + b, dt, wr(lambda a, b: a + b), "value"),
        "sub": (lambda a, b: a - b, dt, wr(lambda a, b: a - b), "value"),
        "mul": (lambda a, b: a * b, dt, wr(lambda a, b: a * b), "value"),
        "div": (raw_div, dt, lambda a, b: c_div_ref(a, b, dt), "value"),
        "rem": (lambda a, b: a % b, dt, lambda a, b: c_rem_ref(a, b, dt), "value"),
        "and": (lambda a, b: a & b, dt, np.bitwise_and, "value"),
        "or": (lambda a, b: a | b, dt, np.bitwise_or, "value"),
        "xor": (lambda a, b: a ^ b, dt, np.bitwise_xor, "value"),
        "shl": (lambda a, b: a << b, dt, lambda a, b: shl_ref(a, b, dt), "value"),
        "shr": (lambda a, b: a >> b, dt, lambda a, b: shr_ref(a, b, dt), "value"),
        "min": (ir.minimum, dt, np.minimum, "value"),
        "max": (ir.maximum, dt, np.maximum, "value"),
        "mulhi": (ir.mulhi, dt, lambda a, b: mulhi_ref(a, b, dt), "value"),
        "fma": (lambda a, b: ir.fma(a, b, a), dt, wr(lambda a, b: a * b + a), "value"),
        "lt": (lambda a, b: a < b, I, lambda a, b: _b(a < b), "value"),
        "le": (lambda a, b: a <= b, I, lambda a, b: _b(a <= b), "value"),
        "gt": (lambda a, b: a > b, I, lambda a, b: _b(a > b), "value"),
        "ge": (lambda a, b: a >= b, I, lambda a, b: _b(a >= b), "value"),
        "eq": (lambda a, b: a == b, I, lambda a, b: _b(a == b), "value"),
        "ne": (lambda a, b: a != b, I, lambda a, b: _b(a != b), "value"),
        "truediv": (lambda a, b: a / b, F, lambda a, b: int_to_f32_ref(a) / int_to_f32_ref(b), "value"),
        "select": (lambda a, b: ir.select(a > b, a, b), dt, np.maximum, "value"),
    }


INT_BINARY = {
    **_int_binary(I),
    # Python semantics (round toward -inf); integer division by zero is 0.
    "floordiv": (lambda a, b: a // b, I, floor_div_ref, "value"),
}

UINT_BINARY = {
    **_int_binary(U),
    "floordiv": (lambda a, b: a // b, U, lambda a, b: c_div_ref(a, b, U), "value"),
}

INT_UNARY = {
    "neg": (lambda a: -a, I, wrap_ref(lambda a: -a, I), "value"),
    "abs": (lambda a: abs(a), I, wrap_ref(np.abs, I), "value"),
    "ir_abs": (ir.abs, I, wrap_ref(np.abs, I), "value"),
    "not": (lambda a: ~a, I, np.invert, "value"),
    "cast_f32": (lambda a: ir.cast(a, F), F, int_to_f32_ref, "value"),
    "cast_u32": (lambda a: ir.cast(a, U), U, lambda a: a.view(np.uint32), "value"),
    "cast_bool": (lambda a: ir.cast(a, "bool"), I, lambda a: _b(a != 0), "value"),
    "bitcast_f32": (lambda a: ir.bitcast(a, F), F, lambda a: a.view(np.float32), "bits"),
    "bitcast_u32": (lambda a: ir.bitcast(a, U), U, lambda a: a.view(np.uint32), "value"),
    "times_half": (lambda a: a * 0.5, F, lambda a: int_to_f32_ref(a) * np.float32(0.5), "value"),
    "plus_one": (lambda a: a + 1, I, wrap_ref(lambda a: a + 1, I), "value"),
    "rsub": (lambda a: 5 - a, I, wrap_ref(lambda a: 5 - a, I), "value"),
    "shl33": (lambda a: a << 33, I, lambda a: shl_ref(a, 33, I), "value"),
    "shr_neg1": (lambda a: a >> -1, I, lambda a: shr_ref(a, -1, I), "value"),
    "div_lit": (lambda a: a // -7, I, lambda a: floor_div_ref(a, np.full_like(a, -7)), "value"),
    "rem_lit": (lambda a: a % -7, I, lambda a: c_rem_ref(a, np.full_like(a, -7), I), "value"),
}

UINT_UNARY = {
    "neg": (lambda a: -a, U, wrap_ref(lambda a: 0 - a, U), "value"),
    "abs": (lambda a: abs(a), U, lambda a: a, "value"),
    "not": (lambda a: ~a, U, np.invert, "value"),
    "cast_f32": (lambda a: ir.cast(a, F), F, int_to_f32_ref, "value"),
    "cast_i32": (lambda a: ir.cast(a, I), I, lambda a: a.view(np.int32), "value"),
    "cast_bool": (lambda a: ir.cast(a, "bool"), I, lambda a: _b(a != 0), "value"),
    "bitcast_f32": (lambda a: ir.bitcast(a, F), F, lambda a: a.view(np.float32), "bits"),
    "bitcast_roundtrip": (lambda a: ir.bitcast(ir.bitcast(a, F), U), U, lambda a: a, "value"),
    "plus_max": (lambda a: a + 0xFFFFFFFF, U, wrap_ref(lambda a: a + 0xFFFFFFFF, U), "value"),
    "shr35": (lambda a: a >> 35, U, lambda a: shr_ref(a, 35, U), "value"),
    "times_half": (lambda a: a * 0.5, F, lambda a: int_to_f32_ref(a) * np.float32(0.5), "value"),
}

BOOL_BINARY = {  # inputs arrive as 0/1 i32 and are cast to Bool first
    "and": (lambda p, q: p & q, I, lambda p, q: p & q, "value"),
    "or": (lambda p, q: p | q, I, lambda p, q: p | q, "value"),
    "xor": (lambda p, q: p ^ q, I, lambda p, q: p ^ q, "value"),
    "eq": (lambda p, q: p == q, I, lambda p, q: _b(p == q), "value"),
    "ne": (lambda p, q: p != q, I, lambda p, q: _b(p != q), "value"),
    "not": (lambda p, q: ~p, I, lambda p, q: 1 - p, "value"),
    "to_f32": (lambda p, q: ir.cast(p, F), F, lambda p, q: p.astype(np.float32), "bits"),
    "to_u32": (lambda p, q: ir.cast(p, U), U, lambda p, q: p.astype(np.uint32), "value"),
    "select_i": (lambda p, q: ir.select(p, 7, -3), I, lambda p, q: np.where(p == 1, 7, -3).astype(np.int32), "value"),
    "select_f": (lambda p, q: ir.select(q, 1.5, -0.0), F,
                 lambda p, q: np.where(q == 1, 1.5, -0.0).astype(np.float32), "bits"),
    "select_b": (lambda p, q: ir.select(p, q, ~q), I, lambda p, q: _b(np.where(p == 1, q, 1 - q)), "value"),
}

MIXED = {  # Int / UInt with Float promotes to Float; inputs (i32, u32, f32)
    "i_plus_f": (lambda i, u, f: i + f, F, lambda i, u, f: int_to_f32_ref(i) + f, "value"),
    "f_times_u": (lambda i, u, f: f * u, F, lambda i, u, f: f * int_to_f32_ref(u), "value"),
    "i_lt_f": (lambda i, u, f: i < f, I, lambda i, u, f: _b(int_to_f32_ref(i) < f), "value"),
    "max_i_f": (lambda i, u, f: ir.maximum(i, f), F, lambda i, u, f: fmax_ref(int_to_f32_ref(i), f), "minmax"),
    "select_i_f": (lambda i, u, f: ir.select(f > 0, i, f), F,
                   lambda i, u, f: np.where(f > 0, int_to_f32_ref(i), f), "bits"),
    "i_over_f": (lambda i, u, f: i / f, F, lambda i, u, f: int_to_f32_ref(i) / f, "value"),
    "cast_i_minus_cast_u": (lambda i, u, f: ir.cast(i, F) - ir.cast(u, F), F,
                            lambda i, u, f: int_to_f32_ref(i) - int_to_f32_ref(u), "value"),
}

for _t in (FLOAT_UNARY, FLOAT_BINARY, FLOAT_TERNARY, INT_BINARY, UINT_BINARY, INT_UNARY, UINT_UNARY,
           BOOL_BINARY, MIXED):
    for _k, (_fn, _dt, _ref, _mode) in list(_t.items()):
        _t[_k] = (_fn, _dt, _errstate(_ref), _mode)


def _float_ops():
    ops = {}
    for name, (fn, dt, _, _) in FLOAT_UNARY.items():
        ops["u_" + name] = (lambda a, b, c, fn=fn: fn(a), dt)
    for name, (fn, dt, _, _) in FLOAT_BINARY.items():
        ops["b_" + name] = (lambda a, b, c, fn=fn: fn(a, b), dt)
    for name, (fn, dt, _, _) in FLOAT_TERNARY.items():
        ops["t_" + name] = (fn, dt)
    return ops


def _int_ops(binary, unary):
    ops = {"b_" + k: (fn, dt) for k, (fn, dt, _, _) in binary.items()}
    ops.update({"u_" + k: (lambda a, b, fn=fn: fn(a), dt) for k, (fn, dt, _, _) in unary.items()})
    return ops


@functools.cache
def float_kernel():
    return elementwise_kernel("float_ops", {"a": F, "b": F, "c": F}, _float_ops())


@functools.cache
def int_kernel():
    return elementwise_kernel("int_ops", {"a": I, "b": I}, _int_ops(INT_BINARY, INT_UNARY))


@functools.cache
def uint_kernel():
    return elementwise_kernel("uint_ops", {"a": U, "b": U}, _int_ops(UINT_BINARY, UINT_UNARY))


@functools.cache
def bool_kernel():
    return elementwise_kernel("bool_ops", {"p": I, "q": I},
                              {k: (fn, dt) for k, (fn, dt, _, _) in BOOL_BINARY.items()},
                              prep=lambda p, q: (ir.cast(p, "bool"), ir.cast(q, "bool")))


@functools.cache
def mixed_kernel():
    return elementwise_kernel("mixed_ops", {"i": I, "u": U, "f": F},
                              {k: (fn, dt) for k, (fn, dt, _, _) in MIXED.items()})


def check_float(a, b, c, res, prefix=""):
    fails = []
    for name, (_, _, ref, mode) in FLOAT_UNARY.items():
        fails.append(check_exact(prefix + name, res["u_" + name], ref(a), [a], mode))
    for name, (_, _, ref, mode) in FLOAT_BINARY.items():
        fails.append(check_exact(prefix + name, res["b_" + name], ref(a, b), [a, b], mode))
    for name, (_, _, ref, mode) in FLOAT_TERNARY.items():
        fails.append(check_exact(prefix + name, res["t_" + name], ref(a, b, c), [a, b, c], mode))
    return fails


def check_int(binary, unary, a, b, res, prefix=""):
    fails = []
    for name, (_, _, ref, mode) in binary.items():
        fails.append(check_exact(prefix + name, res["b_" + name], ref(a, b), [a, b], mode))
    for name, (_, _, ref, mode) in unary.items():
        fails.append(check_exact(prefix + name, res["u_" + name], ref(a), [a], mode))
    return fails


# The one-lane code generator and the default SIMD packet generator are
# separate lowerings of every op: the core tests run on both.
LANES = pytest.mark.parametrize("lanes", [1, None], ids=["lanes1", "packet"])


def run_float(a, b, c, lanes=None, pad=True):
    a, b, c = (np.asarray(x, np.float32) for x in (a, b, c))
    return check_float(a, b, c, run(float_kernel(), lanes, pad, a=a, b=b, c=c), f"[lanes={lanes}] ")


def run_int(a, b, lanes=None, pad=True):
    a, b = np.asarray(a, np.int32), np.asarray(b, np.int32)
    return check_int(INT_BINARY, INT_UNARY, a, b, run(int_kernel(), lanes, pad, a=a, b=b), f"[lanes={lanes}] i32 ")


def run_uint(a, b, lanes=None, pad=True):
    a, b = np.asarray(a, np.uint32), np.asarray(b, np.uint32)
    return check_int(UINT_BINARY, UINT_UNARY, a, b, run(uint_kernel(), lanes, pad, a=a, b=b), f"[lanes={lanes}] u32 ")


# ---------------------------------------------------------------------------
# 0. the harness itself
# ---------------------------------------------------------------------------

def test_ulp_distance_counts_representable_floats():
    one = np.float32(1)
    nxt = np.nextafter(one, np.float32(2))
    assert ulp_distance([nxt], [one])[0] == 1
    assert ulp_distance([0.0], [-0.0])[0] == 0
    tiny = f32_from_bits(1)
    assert ulp_distance(tiny, -tiny)[0] == 2            # across zero
    assert ulp_distance(f32_from_bits(0x7F7FFFFF), [np.inf])[0] == 1
    assert ulp_distance([np.nan], [np.nan])[0] == 0
    assert ulp_distance([np.nan], [1.0])[0] > 1e9
    assert ulp_distance([-1.0], [1.0])[0] == 2 * 0x3F800000


def test_fma_reference_is_correctly_rounded():
    a = np.float32([1 + 2 ** -12] * 2 + [1.0])
    c = np.float32([2 ** -80, -2 ** -80, 2 ** -24])
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is an f32 tie; the tiny addend decides.
    assert list(bits_of(fma_ref(a, a, c))) == [0x3F801001, 0x3F801000, 0x3F800000]


# ---------------------------------------------------------------------------
# 1. exact ops
# ---------------------------------------------------------------------------

@LANES
def test_float_ops_on_edge_value_pairs(lanes):
    a, b = all_pairs(F32_EDGES)
    c = np.roll(b, 7)
    assert_no_failures(run_float(a, b, c, lanes))


@LANES
def test_float_ops_on_random_values(lanes):
    rng = np.random.default_rng(1234)
    n = 16384
    assert_no_failures(run_float(random_f32(rng, n), random_f32(rng, n), random_f32(rng, n), lanes))


def test_float_ops_near_rounding_boundaries():
    # Rounding functions and casts around integers, halves and the int range.
    rng = np.random.default_rng(7)
    base = np.concatenate([np.arange(-40, 41) / 2.0, [2.0 ** 23, 2.0 ** 24, 2.0 ** 31, 2.0 ** 32]])
    a = np.concatenate([np.nextafter(base.astype(np.float32), np.float32(np.inf)),
                        np.nextafter(base.astype(np.float32), np.float32(-np.inf)),
                        base.astype(np.float32), -base.astype(np.float32)])
    b = rng.permutation(a)
    assert_no_failures(run_float(a, b, rng.permutation(a)))


def test_fma_is_fused():
    # Inputs where a*b+c rounded twice differs from the fused result.
    rng = np.random.default_rng(3)
    a = (1 + rng.integers(1, 2 ** 12, 4096) * 2.0 ** -23).astype(np.float32)
    b = (1 - rng.integers(1, 2 ** 12, 4096) * 2.0 ** -23).astype(np.float32)
    c = (-np.float32(1) * rng.choice([1, -1], 4096)).astype(np.float32)
    res = run(float_kernel(), a=a, b=b, c=c)
    unfused = (a * b + c).astype(np.float32)
    want = fma_ref(a, b, c)
    assert (bits_of(unfused) != bits_of(want)).any()  # the test has teeth
    assert_no_failures([check_exact("fma", res["t_fma"], want, [a, b, c])])


f32_elems = st.floats(width=32)


def _same_len(*elems, max_n=48):
    def arrs(n):
        return st.tuples(*[hnp.arrays(dt, n, elements=e) for dt, e in elems])
    return st.integers(1, max_n).flatmap(arrs)


@HYP
@given(_same_len((np.float32, f32_elems), (np.float32, f32_elems), (np.float32, f32_elems)))
def test_float_ops_hypothesis(abc):
    assert_no_failures(run_float(*abc))


@LANES
def test_int_ops_on_edge_value_pairs(lanes):
    a, b = all_pairs(I32_EDGES)
    assert_no_failures(run_int(a, b, lanes))


@LANES
def test_int_ops_on_random_values(lanes):
    rng = np.random.default_rng(99)
    assert_no_failures(run_int(random_i32(rng, 16384), random_i32(rng, 16384), lanes))


@HYP
@given(_same_len((np.int32, st.integers(INT_MIN, INT_MAX)), (np.int32, st.integers(INT_MIN, INT_MAX))))
def test_int_ops_hypothesis(ab):
    assert_no_failures(run_int(*ab))


@LANES
def test_uint_ops_on_edge_value_pairs(lanes):
    a, b = all_pairs(U32_EDGES)
    assert_no_failures(run_uint(a, b, lanes))


@LANES
def test_uint_ops_on_random_values(lanes):
    rng = np.random.default_rng(5)
    assert_no_failures(run_uint(random_u32(rng, 16384), random_u32(rng, 16384), lanes))


@pytest.mark.parametrize("n", [1, 13, 61])
def test_ops_on_launches_cut_mid_packet(n):
    # Unpadded launch sizes that end inside a SIMD packet.
    rng = np.random.default_rng(n)
    fails = run_float(random_f32(rng, n), random_f32(rng, n), random_f32(rng, n), pad=False)
    fails += run_int(random_i32(rng, n), random_i32(rng, n), pad=False)
    fails += run_uint(random_u32(rng, n), random_u32(rng, n), pad=False)
    assert_no_failures(fails)


def test_code_generators_agree_bit_for_bit():
    # Every output, NaN payloads included, is the same whatever the packet width.
    rng = np.random.default_rng(77)
    n = 2048
    f = {"a": random_f32(rng, n), "b": random_f32(rng, n), "c": random_f32(rng, n)}
    i = {"a": random_i32(rng, n), "b": random_i32(rng, n)}
    fails = []
    for kern, args in ((float_kernel(), f), (int_kernel(), i)):
        base = run(kern, 1, **args)
        for lanes in (4, None):
            other = run(kern, lanes, **args)
            for k in base:
                fails.append(check_exact(f"{kern.name}.{k} lanes={lanes} vs 1", other[k], base[k],
                                         list(args.values()), "bits"))
    assert_no_failures(fails)


@HYP
@given(_same_len((np.uint32, st.integers(0, U32_MAX)), (np.uint32, st.integers(0, U32_MAX))))
def test_uint_ops_hypothesis(ab):
    assert_no_failures(run_uint(*ab))


def test_int_division_semantics_spelled_out():
    # The table-driven tests use reference functions; pin the semantics
    # with literal expectations too.
    a = np.array([7, -7, 7, -7, INT_MIN, INT_MIN, 5, -5, 0], np.int32)
    b = np.array([2, 2, -2, -2, -1, 1, 0, 0, 0], np.int32)
    res = run(int_kernel(), a=a, b=b)
    assert list(res["b_div"]) == [3, -3, -3, 3, INT_MIN, INT_MIN, 0, 0, 0]      # C truncation
    assert list(res["b_rem"]) == [1, -1, 1, -1, 0, 0, 0, 0, 0]                  # sign of dividend
    assert list(res["b_floordiv"]) == [3, -4, -4, 3, INT_MIN, INT_MIN, 0, 0, 0]  # Python floor, /0 -> 0
    u = np.array([7, 0xFFFFFFFF, 5, 0x80000000], np.uint32)
    v = np.array([2, 2, 0, 0xFFFFFFFF], np.uint32)
    res = run(uint_kernel(), a=u, b=v)
    assert list(res["b_div"]) == [3, 0x7FFFFFFF, 0, 0]
    assert list(res["b_floordiv"]) == [3, 0x7FFFFFFF, 0, 0]
    assert list(res["b_rem"]) == [1, 1, 0, 0x80000000]


def test_shift_and_cast_semantics_spelled_out():
    a = np.array([-8, 1, -1, INT_MIN], np.int32)
    s = np.array([1, 32, 33, 31], np.int32)
    res = run(int_kernel(), a=a, b=s)
    assert list(res["b_shr"]) == [-4, 1, -1, -1]                 # arithmetic, amount & 31
    assert list(res["b_shl"]) == [-16, 1, -2, 0]
    res = run(uint_kernel(), a=np.array([0x80000000, 8], np.uint32), b=np.array([31, 35], np.uint32))
    assert list(res["b_shr"]) == [1, 1]                           # logical
    f = np.float32([np.nan, 3e9, -3e9, -1.9, 1.9, -0.0, np.inf, -np.inf, 4294967296.0])
    res = run(float_kernel(), a=f, b=f, c=f)
    assert list(res["u_cast_i32"]) == [0, INT_MAX, INT_MIN, -1, 1, 0, INT_MAX, INT_MIN, INT_MAX]
    assert list(res["u_cast_u32"]) == [0, 3000000000, 0, 0, 1, 0, U32_MAX, 0, U32_MAX]
    assert list(res["u_round"][3:5]) == [-2.0, 2.0]
    h = np.float32([0.5, 1.5, 2.5, -0.5, -2.5])
    res = run(float_kernel(), a=h, b=h, c=h)
    assert list(bits_of(res["u_round"])) == list(bits_of(np.float32([0.0, 2.0, 2.0, -0.0, -2.0])))


@LANES
def test_float_to_int_casts_saturate_in_every_lane(lanes):
    """The packet code generator's own saturating conversion (not LLVM's
    per-lane expansion) against numpy on specials, bounds and random values."""
    specials = [np.nan, -np.nan, 3e9, -3e9, -1.9, 1.9, -0.0, np.inf, -np.inf, 4294967296.0, 2147483520.0,
                2147483648.0, -2147483648.0, -2147483904.0, 4294967040.0, 0.99999994, -0.99999994]
    rng = np.random.default_rng(5)
    f = np.float32(np.concatenate([specials, rng.normal(0, 1e3, 200), rng.uniform(-5e9, 5e9, 200)]))
    res = run(float_kernel(), lanes, a=f, b=f, c=f)
    with np.errstate(invalid="ignore"):
        t = np.trunc(f.astype(np.float64))
        want_i = np.where(np.isnan(f), 0, np.clip(t, INT_MIN, INT_MAX)).astype(np.int64)
        want_u = np.where(np.isnan(f), 0, np.clip(t, 0, U32_MAX)).astype(np.int64)
    np.testing.assert_array_equal(np.asarray(res["u_cast_i32"], np.int64), want_i)
    np.testing.assert_array_equal(np.asarray(res["u_cast_u32"], np.int64), want_u)


@LANES
def test_bool_ops(lanes):
    p, q = all_pairs(np.array([0, 1], np.int32))
    res = run(bool_kernel(), lanes, p=p, q=q)
    assert_no_failures([check_exact("bool " + k, res[k], ref(p, q), [p, q], mode)
                        for k, (_, _, ref, mode) in BOOL_BINARY.items()])


@LANES
def test_int_float_promotion(lanes):
    rng = np.random.default_rng(11)
    n = 4096
    i, u, f = random_i32(rng, n), random_u32(rng, n), random_f32(rng, n)
    res = run(mixed_kernel(), lanes, i=i, u=u, f=f)
    assert_no_failures([check_exact(k, res[k], ref(i, u, f), [i, u, f], mode)
                        for k, (_, _, ref, mode) in MIXED.items()])


# ---------------------------------------------------------------------------
# 2. transcendentals
# ---------------------------------------------------------------------------

TRANS_UNARY = {
    "exp": ir.exp, "exp2": ir.exp2, "log": ir.log, "log2": ir.log2, "sin": ir.sin, "cos": ir.cos,
    "tan": ir.tan, "asin": ir.asin, "acos": ir.acos, "atan": ir.atan, "erf": ir.erf, "rsqrt": ir.rsqrt,
}
TRANS_BINARY = {"pow": ir.pow, "atan2": ir.atan2}


def test_ulp_bound_table_covers_every_transcendental():
    assert set(ir.ULP_BOUND) == set(TRANS_UNARY) | set(TRANS_BINARY)


@functools.cache
def trans_kernel():
    ops = {k: (lambda x, y, f=f: f(x), F) for k, f in TRANS_UNARY.items()}
    ops.update({k: (lambda x, y, f=f: f(x, y), F) for k, f in TRANS_BINARY.items()})
    ops["pow_op"] = (lambda x, y: x ** y, F)
    return elementwise_kernel("transcendental_ops", {"x": F, "y": F}, ops)


def _positive_floats(rng, n):
    """Positive finite f32 spread over every binade, denormals included."""
    return rng.integers(1, 0x7F800000, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _loguniform(rng, n, lo, hi, signed=True):
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    if signed:
        x *= rng.choice([-1.0, 1.0], n)
    return x.astype(np.float32)


def unary_domain(op, rng, n=20000):
    """Inputs over which ``ULP_BOUND[op]`` is claimed."""
    u = lambda lo, hi, m=n: rng.uniform(lo, hi, m).astype(np.float32)
    if op == "exp":
        return np.concatenate([u(-87, 88), _loguniform(rng, n // 4, 1e-30, 80)])
    if op == "exp2":
        return np.concatenate([u(-126, 127), _loguniform(rng, n // 4, 1e-30, 120)])
    if op in ("log", "log2", "rsqrt"):
        return np.concatenate([_positive_floats(rng, n), u(0.5, 2), 1 + _loguniform(rng, n // 4, 1e-7, 1e-2)])
    if op in ("sin", "cos", "tan"):
        return np.concatenate([u(-100, 100), _loguniform(rng, n // 4, 1e-30, 1e5),
                               _loguniform(rng, n // 8, 1e5, 3e38), u(-4, 4)])
    if op in ("asin", "acos"):
        return np.concatenate([u(-1, 1), _loguniform(rng, n // 4, 1e-30, 1), 1 - _loguniform(rng, n // 8, 1e-7, 1e-2, False)])
    if op == "atan":
        return np.concatenate([u(-10, 10), _loguniform(rng, n // 2, 1e-38, 3e38)])
    if op == "erf":
        return np.concatenate([u(-5, 5), _loguniform(rng, n // 4, 1e-38, 10)])
    raise KeyError(op)


def binary_domain(op, rng, n=20000):
    if op == "atan2":
        y = np.concatenate([_loguniform(rng, n, 1e-30, 1e30), rng.uniform(-10, 10, n).astype(np.float32)])
        x = np.concatenate([_loguniform(rng, n, 1e-30, 1e30), rng.uniform(-10, 10, n).astype(np.float32)])
        return y, x
    if op == "pow":
        # positive bases, moderate exponents (results stay finite and normal)
        b1 = _loguniform(rng, n, 1e-3, 1e3, signed=False)
        e1 = rng.uniform(-12, 12, n).astype(np.float32)
        # bases near 1 with large exponents (the hard case for powf)
        b2 = (1 + rng.uniform(-1e-3, 1e-3, n // 2)).astype(np.float32)
        e2 = rng.uniform(-8e4, 8e4, n // 2).astype(np.float32)
        # negative bases with integer exponents
        b3 = rng.uniform(-10, -0.1, n // 4).astype(np.float32)
        e3 = rng.integers(-30, 31, n // 4).astype(np.float32)
        return np.concatenate([b1, b2, b3]), np.concatenate([e1, e2, e3])
    raise KeyError(op)


def _run_trans(x, y=None, lanes=None):
    x = np.asarray(x, np.float32)
    y = np.ones_like(x) if y is None else np.asarray(y, np.float32)
    return run(trans_kernel(), lanes, x=x, y=y)


@LANES
@pytest.mark.parametrize("op", sorted(TRANS_UNARY))
def test_unary_transcendental_ulp_error(op, lanes):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    x = unary_domain(op, rng)
    got = _run_trans(x, lanes=lanes)[op]
    assert_no_failures([check_ulp(op, got, ref64(op, x), ir.ULP_BOUND[op], [x])])


@LANES
@pytest.mark.parametrize("op", sorted(TRANS_BINARY))
def test_binary_transcendental_ulp_error(op, lanes):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    x, y = binary_domain(op, rng)
    res = _run_trans(x, y, lanes)
    fails = [check_ulp(op, res[op], ref64(op, x, y), ir.ULP_BOUND[op], [x, y])]
    if op == "pow":
        fails.append(check_exact("x ** y vs pow", res["pow_op"], res["pow"], [x, y], "bits"))
    assert_no_failures(fails)


_DOMAIN = {
    "exp": lambda x: (x >= -87) & (x <= 88),
    "exp2": lambda x: (x >= -126) & (x <= 127),
    "log": lambda x: (x > 0) & np.isfinite(x),
    "log2": lambda x: (x > 0) & np.isfinite(x),
    "rsqrt": lambda x: (x > 0) & np.isfinite(x),
    "sin": np.isfinite, "cos": np.isfinite, "tan": np.isfinite,
    "asin": lambda x: np.abs(x) <= 1, "acos": lambda x: np.abs(x) <= 1,
    "atan": np.isfinite, "erf": np.isfinite,
}


@HYP
@given(_same_len((np.float32, f32_elems), (np.float32, st.floats(-1.5, 1.5, width=32))))
def test_transcendentals_hypothesis(xs):
    x, small = xs
    fails = []
    for xx in (x, small):
        res = _run_trans(xx)
        for op in TRANS_UNARY:
            m = _DOMAIN[op](xx)
            fails.append(check_ulp(op, res[op][m], ref64(op, xx[m]), ir.ULP_BOUND[op], [xx[m]]))
    assert_no_failures(fails)


@HYP
@given(_same_len((np.float32, st.floats(float(np.float32(1e-3)), 1e3, width=32)),
                 (np.float32, st.floats(-12, 12, width=32)),
                 (np.float32, st.floats(width=32, allow_nan=False, allow_infinity=False)),
                 (np.float32, st.floats(width=32, allow_nan=False, allow_infinity=False))))
def test_binary_transcendentals_hypothesis(arrs):
    base, expo, y, x = arrs
    res = _run_trans(base, expo)
    fails = [check_ulp("pow", res["pow"], ref64("pow", base, expo), ir.ULP_BOUND["pow"], [base, expo])]
    res = _run_trans(y, x)
    fails.append(check_ulp("atan2", res["atan2"], ref64("atan2", y, x), ir.ULP_BOUND["atan2"], [y, x]))
    assert_no_failures(fails)


PI = math.pi
TINY = float(f32_from_bits(1)[0])
# (op, args, expected). Expected values are checked bit for bit (sign of zero
# included; any NaN matches NaN), except those wrapped in ``approx``.


class approx(float):
    """An expected value that may be within ULP_BOUND of the f32 rounding."""


SPECIALS = [
    ("exp", (-np.inf,), 0.0), ("exp", (np.inf,), np.inf), ("exp", (np.nan,), np.nan),
    ("exp", (0.0,), 1.0), ("exp", (-0.0,), 1.0), ("exp", (89.0,), np.inf), ("exp", (-105.0,), 0.0),
    ("exp2", (-np.inf,), 0.0), ("exp2", (3.0,), 8.0), ("exp2", (-149.0,), TINY), ("exp2", (128.0,), np.inf),
    ("exp2", (-151.0,), 0.0), ("exp2", (0.5,), approx(math.sqrt(2))),
    ("log", (0.0,), -np.inf), ("log", (-0.0,), -np.inf), ("log", (-1.0,), np.nan), ("log", (1.0,), 0.0),
    ("log", (np.inf,), np.inf), ("log", (-np.inf,), np.nan), ("log", (np.nan,), np.nan),
    ("log", (TINY,), approx(math.log(TINY))),
    ("log2", (8.0,), 3.0), ("log2", (TINY,), -149.0), ("log2", (0.0,), -np.inf), ("log2", (-2.0,), np.nan),
    ("rsqrt", (0.0,), np.inf), ("rsqrt", (-0.0,), -np.inf), ("rsqrt", (np.inf,), 0.0),
    ("rsqrt", (-1.0,), np.nan), ("rsqrt", (4.0,), 0.5), ("rsqrt", (0.25,), 2.0),
    ("sin", (0.0,), 0.0), ("sin", (-0.0,), -0.0), ("sin", (np.inf,), np.nan), ("sin", (np.nan,), np.nan),
    ("sin", (TINY,), TINY),
    ("cos", (0.0,), 1.0), ("cos", (-np.inf,), np.nan), ("cos", (PI,), approx(-1.0)),
    ("tan", (-0.0,), -0.0), ("tan", (np.inf,), np.nan), ("tan", (1e30,), approx(math.tan(float(np.float32(1e30))))),
    ("asin", (2.0,), np.nan), ("asin", (-1.0000001,), np.nan), ("asin", (-0.0,), -0.0),
    ("asin", (1.0,), approx(PI / 2)), ("acos", (1.0,), 0.0), ("acos", (2.0,), np.nan),
    ("acos", (-1.0,), approx(PI)), ("acos", (0.0,), approx(PI / 2)),
    ("atan", (np.inf,), approx(PI / 2)), ("atan", (-np.inf,), approx(-PI / 2)), ("atan", (-0.0,), -0.0),
    ("atan", (np.nan,), np.nan),
    ("erf", (np.inf,), 1.0), ("erf", (-np.inf,), -1.0), ("erf", (0.0,), 0.0), ("erf", (-0.0,), -0.0),
    ("erf", (10.0,), 1.0), ("erf", (np.nan,), np.nan),
    ("atan2", (0.0, 0.0), 0.0), ("atan2", (-0.0, 0.0), -0.0), ("atan2", (0.0, -0.0), approx(PI)),
    ("atan2", (-0.0, -1.0), approx(-PI)), ("atan2", (1.0, 0.0), approx(PI / 2)),
    ("atan2", (np.inf, np.inf), approx(PI / 4)), ("atan2", (np.nan, 1.0), np.nan),
    ("atan2", (1.0, np.inf), 0.0), ("atan2", (-1.0, -np.inf), approx(-PI)),
    ("pow", (np.nan, 0.0), 1.0), ("pow", (1.0, np.nan), 1.0), ("pow", (-2.0, 3.0), -8.0),
    ("pow", (-2.0, 0.5), np.nan), ("pow", (0.0, -1.0), np.inf), ("pow", (-0.0, -1.0), -np.inf),
    ("pow", (-0.0, -2.0), np.inf), ("pow", (-0.0, 3.0), -0.0), ("pow", (2.0, 128.0), np.inf),
    ("pow", (2.0, -150.0), 0.0), ("pow", (4.0, 0.5), 2.0), ("pow", (-1.0, np.inf), 1.0),
    ("pow", (0.5, np.inf), 0.0), ("pow", (2.0, -np.inf), 0.0), ("pow", (-np.inf, 3.0), -np.inf),
    ("pow", (10.0, 10.0), 1e10), ("pow", (2.0, -149.0), TINY), ("pow", (-2.0, np.nan), np.nan),
    ("pow", (1e30, 1e30), np.inf), ("pow", (-8.0, 1e30), np.inf), ("pow", (0.5, -1e30), np.inf),
    ("pow", (3e38, 2.0), np.inf), ("pow", (-0.5, np.inf), 0.0),
    ("sqrt", (-1.0,), np.nan), ("sqrt", (-0.0,), -0.0), ("sqrt", (np.inf,), np.inf),
    ("sqrt", (-np.inf,), np.nan), ("sqrt", (4.0,), 2.0), ("sqrt", (TINY,), float(np.sqrt(np.float32(TINY)))),
]


def _special_results():
    """Runtime results of every SPECIALS row (one launch per arity)."""
    un = [(i, s) for i, s in enumerate(SPECIALS) if len(s[1]) == 1 and s[0] != "sqrt"]
    bi = [(i, s) for i, s in enumerate(SPECIALS) if len(s[1]) == 2]
    sq = [(i, s) for i, s in enumerate(SPECIALS) if s[0] == "sqrt"]
    got = {}
    x = np.float32([s[1][0] for _, s in un])
    res = _run_trans(x)
    for j, (i, s) in enumerate(un):
        got[i] = res[s[0]][j]
    x, y = np.float32([s[1][0] for _, s in bi]), np.float32([s[1][1] for _, s in bi])
    res = _run_trans(x, y)
    for j, (i, s) in enumerate(bi):
        got[i] = res[s[0]][j]
    x = np.float32([s[1][0] for _, s in sq])
    res = run(float_kernel(), a=x, b=x, c=x)
    for j, (i, s) in enumerate(sq):
        got[i] = res["u_sqrt"][j]
    return [got[i] for i in range(len(SPECIALS))]


def _check_specials(got, what):
    lines = []
    for (op, args, want), g in zip(SPECIALS, got):
        if g is None:
            continue
        w = np.float32(want)
        if isinstance(want, approx):
            ok = ulp_distance([g], [w])[0] <= ir.ULP_BOUND.get(op, 0)
        else:
            ok = not mismatches(np.float32([g]), np.float32([w]), "value")[0]
        if not ok:
            lines.append(f"  {op}{args} = {float(g)!r}, want {float(w)!r}")
    assert not lines, f"{what}: special values wrong:\n" + "\n".join(lines)


def test_transcendental_special_values():
    _check_specials(_special_results(), "runtime")


# ---------------------------------------------------------------------------
# 3. constant folding agrees with the compiled code
# ---------------------------------------------------------------------------

def _lit(v, dt):
    """A Python literal of ``dt`` as the tracer would see it from user code."""
    return float(v) if dt == F else int(v)


_VAR = {F: ir.Float, I: ir.Int, U: ir.UInt}


def fold_table(name, table, columns, in_dtypes):
    """Trace a kernel evaluating every op of ``table`` on literal operands
    (one output vector per op); returns (kernel, {op: folded numpy array})."""
    cols = [[_lit(v, dt) for v in col] for col, dt in zip(columns, in_dtypes)]
    n = len(cols[0])

    def body():
        out = {}
        for k, (fn, dt, _, _) in table.items():
            out[k] = tuple(to_out(fn(*(_VAR[t](c[j]) for c, t in zip(cols, in_dtypes))), dt)
                           for j in range(n))
        return out

    k = ir.trace(body, {}, {k: ir.Out(dt, (n,)) for k, (fn, dt, _, _) in table.items()}, name=name)
    vals = folded_results(k)
    assert "const" in k.text
    out = {}
    for j, (key, (_, dt, _, _)) in enumerate(table.items()):
        chunk = vals[j * n:(j + 1) * n]
        if dt == F:  # folded f32 constants are doubles holding the exact f32 bits (NaN payloads too)
            out[key] = np.array([f32_bits(v) for v in chunk], np.uint32).view(np.float32)
        else:
            out[key] = np.array(chunk, np.int64).astype({I: np.int32, U: np.uint32}[dt])
    assert set(node_ops(k)) <= {"const"}, sorted(set(node_ops(k)))
    return k, out


def _canon(v, dt):
    """The runtime input holding what a literal becomes in the graph."""
    return np.array([_lit(x, dt) for x in v], np.float64 if dt == F else np.int64).astype(
        {F: np.float32, I: np.int32, U: np.uint32}[dt])


def _fold_vs_runtime(table, folded, runtime, prefix, inputs, exact_modes=True):
    fails = []
    for k, (_, dt, _, mode) in table.items():
        # Folding must reproduce the compiled code bit for bit: even where
        # IEEE leaves a choice (the sign of min(+0, -0)), a value must not
        # change with whether its operands happened to be literals.
        m = "value" if mode == "minmax" else mode
        fails.append(check_exact(f"fold {prefix}{k}", folded[k], runtime[prefix + k], inputs, m))
    return fails


def test_fold_float_unary_matches_runtime():
    a = _canon(np.concatenate([F32_EDGES, random_f32(np.random.default_rng(2), 200)]), F)
    _, folded = fold_table("fold_f_unary", FLOAT_UNARY, [a], [F])
    runtime = run(float_kernel(), a=a, b=a, c=a)
    assert_no_failures(_fold_vs_runtime(FLOAT_UNARY, folded, runtime, "u_", [a]))


def test_fold_float_binary_matches_runtime():
    a, b = (_canon(x, F) for x in all_pairs(F32_SMALL))
    _, folded = fold_table("fold_f_binary", FLOAT_BINARY, [a, b], [F, F])
    runtime = run(float_kernel(), a=a, b=b, c=b)
    assert_no_failures(_fold_vs_runtime(FLOAT_BINARY, folded, runtime, "b_", [a, b]))


def test_fold_float_ternary_matches_runtime():
    rng = np.random.default_rng(8)
    # edge values, plus triples where an unfused multiply-add would differ
    a = _canon(np.concatenate([rng.choice(F32_SMALL, 300), 1 + rng.integers(1, 2 ** 12, 100) * 2.0 ** -23]), F)
    b = _canon(np.concatenate([rng.choice(F32_SMALL, 300), 1 - rng.integers(1, 2 ** 12, 100) * 2.0 ** -23]), F)
    c = _canon(np.concatenate([rng.choice(F32_SMALL, 300), -np.ones(100)]), F)
    runtime = run(float_kernel(), a=a, b=b, c=c)
    rest = {k: v for k, v in FLOAT_TERNARY.items() if k != "fma"}
    _, folded = fold_table("fold_f_ternary", rest, [a, b, c], [F, F, F])
    fails = _fold_vs_runtime(rest, folded, runtime, "t_", [a, b, c])
    # fma may decline to fold (when f64 arithmetic could not give the fused
    # result); whatever it folds must be the fused result, and the launched
    # kernel (folded or not) must match the runtime op on buffers.
    cols = [[float(v) for v in col] for col in (a, b, c)]
    k = ir.trace(lambda: {"o": tuple(ir.fma(ir.Float(x), y, z) for x, y, z in zip(*cols))}, {},
                 {"o": ir.Out(F, (len(a),))}, name="fold_fma")
    n_folded = sum(r.op == "const" for r in k.block.results)
    assert n_folded >= 100, f"only {n_folded} of {len(a)} literal fma folded"
    got = np.asarray(launch(k, (1,))["o"])[0]
    fails.append(check_exact("fold fma vs runtime", got, runtime["t_fma"], [a, b, c]))
    fails.append(check_exact("fold fma vs reference", got, fma_ref(a, b, c), [a, b, c]))
    assert_no_failures(fails)


def test_fold_int_ops_match_runtime():
    a, b = all_pairs(I32_EDGES)
    _, fb = fold_table("fold_i_binary", INT_BINARY, [a, b], [I, I])
    _, fu = fold_table("fold_i_unary", INT_UNARY, [I32_EDGES], [I])
    rb = run(int_kernel(), a=a, b=b)
    ru = run(int_kernel(), a=I32_EDGES, b=I32_EDGES)
    assert_no_failures(_fold_vs_runtime(INT_BINARY, fb, rb, "b_", [a, b])
                       + _fold_vs_runtime(INT_UNARY, fu, ru, "u_", [I32_EDGES]))


def test_fold_uint_ops_match_runtime():
    a, b = all_pairs(U32_EDGES)
    _, fb = fold_table("fold_u_binary", UINT_BINARY, [a, b], [U, U])
    _, fu = fold_table("fold_u_unary", UINT_UNARY, [U32_EDGES], [U])
    rb = run(uint_kernel(), a=a, b=b)
    ru = run(uint_kernel(), a=U32_EDGES, b=U32_EDGES)
    assert_no_failures(_fold_vs_runtime(UINT_BINARY, fb, rb, "b_", [a, b])
                       + _fold_vs_runtime(UINT_UNARY, fu, ru, "u_", [U32_EDGES]))


def test_fold_bool_ops_match_runtime():
    p, q = all_pairs(np.array([0, 1], np.int32))
    pb, qb = [bool(v) for v in p], [bool(v) for v in q]
    n = len(p)

    def body():
        return {k: tuple(to_out(fn(ir.Bool(pb[j]), ir.Bool(qb[j])), dt) for j in range(n))
                for k, (fn, dt, _, _) in BOOL_BINARY.items()}

    k = ir.trace(body, {}, {k: ir.Out(dt, (n,)) for k, (fn, dt, _, _) in BOOL_BINARY.items()})
    assert set(node_ops(k)) == {"const"}
    vals = folded_results(k)
    runtime = run(bool_kernel(), p=p, q=q)
    fails = []
    for j, (name, (_, dt, _, mode)) in enumerate(BOOL_BINARY.items()):
        chunk = np.array(vals[j * n:(j + 1) * n]).astype({F: np.float32, I: np.int32, U: np.uint32}[dt])
        fails.append(check_exact("fold bool " + name, chunk, runtime[name], [p, q], mode))
    assert_no_failures(fails)


def test_fold_bitcast_preserves_every_bit_pattern():
    # bitcast is a reinterpretation: u32 -> f32 -> u32 is the identity for
    # every pattern, signalling NaNs and NaN payloads included, folded or not.
    pats = np.concatenate([U32_EDGES, np.array([0x7FA00000, 0xFF800001, 0x7F800001, 0x7FC00001,
                                                0xFFFFFFFF, 0x7F800000, 0x00000001], np.uint32)])
    folded = fold_table("fold_bitcast", {"rt": UINT_UNARY["bitcast_roundtrip"],
                                         "to_f32": UINT_UNARY["bitcast_f32"]}, [pats], [U])[1]
    runtime = run(uint_kernel(), a=pats, b=pats)
    assert_no_failures([
        check_exact("runtime u32->f32->u32", runtime["u_bitcast_roundtrip"], pats, [pats]),
        check_exact("runtime u32->f32", runtime["u_bitcast_f32"], pats.view(np.float32), [pats], "bits"),
        check_exact("folded u32->f32->u32", folded["rt"], pats, [pats]),
        check_exact("folded u32->f32", folded["to_f32"], pats.view(np.float32), [pats], "bits"),
    ])


def test_fold_transcendentals_within_bound_of_runtime():
    rng = np.random.default_rng(21)
    fails = []
    for op, fn in TRANS_UNARY.items():
        x = _canon(np.concatenate([F32_EDGES, unary_domain(op, rng, 300)]), F)
        table = {op: (fn, F, None, "value")}
        _, folded = fold_table("fold_" + op, table, [x], [F])
        got = _run_trans(x)[op]
        d = _DOMAIN[op](x)
        fails.append(check_ulp("fold vs runtime " + op, folded[op][d], got[d], ir.ULP_BOUND[op], [x[d]]))
        fails.append(check_ulp("fold vs reference " + op, folded[op][d], ref64(op, x[d]), ir.ULP_BOUND[op], [x[d]]))
        # outside the domain (NaN, inf, overflow) both must agree on the class of result
        nd = ~d
        fails.append(check_ulp("fold vs runtime (off-domain) " + op, folded[op][nd], got[nd],
                               ir.ULP_BOUND[op], [x[nd]]))
    assert_no_failures(fails)


def test_fold_binary_transcendentals():
    rng = np.random.default_rng(22)
    fails = []
    for op, fn in TRANS_BINARY.items():
        x, y = binary_domain(op, rng, 200)
        x, y = _canon(x, F), _canon(y, F)
        _, folded = fold_table("fold_" + op, {op: (fn, F, None, "value")}, [x, y], [F, F])
        got = _run_trans(x, y)[op]
        fails.append(check_ulp("fold vs runtime " + op, folded[op], got, ir.ULP_BOUND[op], [x, y]))
    assert_no_failures(fails)


def test_fold_transcendental_special_values():
    # The same SPECIALS table, with literal operands: folding must neither
    # crash at trace time nor disagree with the runtime's special cases.
    fns = {**TRANS_UNARY, **TRANS_BINARY, "sqrt": ir.sqrt}
    got, errors = [], []
    for op, args, _ in SPECIALS:
        try:
            k = ir.trace(lambda op=op, args=args: {"o": fns[op](*(ir.Float(float(a)) for a in args))}, {},
                         {"o": ir.Out(F)}, name="fold_special")
            r = k.block.results[0]
            got.append(np.float32(r.attrs[0]) if r.op == "const" else None)  # may decline to fold
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"  {op}{args}: {type(exc).__name__}: {exc}")
            got.append(None)
    assert not errors, "folding raised at trace time:\n" + "\n".join(errors)
    assert sum(g is not None for g in got) > len(got) // 2
    _check_specials(got, "folded")


def test_folded_constants_are_materialized_exactly():
    # Launch (rather than read from the graph) a kernel returning constants.
    fv = _canon(F32_EDGES, F)
    k = ir.trace(lambda: {"f": tuple(ir.Float(float(v)) for v in fv),
                          "i": tuple(ir.Int(int(v)) for v in I32_EDGES),
                          "u": tuple(ir.UInt(int(v)) for v in U32_EDGES),
                          "folded": (ir.Float(1.0) / 3.0, ir.Float(-0.0) * 1.0, ir.Float(0.0) * -1.0,
                                     ir.Float(0.0) / 0.0, ir.sqrt(ir.Float(2.0)))},
                 {}, {"f": ir.Out(F, (len(fv),)), "i": ir.Out(I, (len(I32_EDGES),)),
                      "u": ir.Out(U, (len(U32_EDGES),)), "folded": ir.Out(F, (5,))})
    assert set(node_ops(k)) == {"const"}
    res = {n: np.asarray(v)[0] for n, v in launch(k, (1,)).items()}
    want = np.float32([1.0 / 3.0, -0.0, -0.0, np.nan, math.sqrt(2.0)])
    assert_no_failures([
        check_exact("f32 constants", res["f"], fv, [fv], "bits"),
        check_exact("i32 constants", res["i"], I32_EDGES, [I32_EDGES]),
        check_exact("u32 constants", res["u"], U32_EDGES, [U32_EDGES]),
        check_exact("folded constants", res["folded"], want, [want]),
    ])


def test_fold_end_to_end_small_kernel():
    # Literal operands, compiled and launched, against the same ops on buffers.
    vals = _canon(F32_SMALL[:8], F)
    a, b = all_pairs(vals)
    table = {k: FLOAT_BINARY[k] for k in ("add", "sub", "mul", "div", "rem", "min", "copysign", "lt")}
    k, folded = fold_table("fold_e2e", table, [a, b], [F, F])
    launched = {n: np.asarray(v)[0] for n, v in launch(k, (1,)).items()}
    runtime = run(float_kernel(), a=a, b=b, c=b)
    fails = []
    for name, (_, _, _, mode) in table.items():
        m = "value" if mode == "minmax" else mode
        fails.append(check_exact("launched " + name, launched[name], runtime["b_" + name], [a, b], m))
        fails.append(check_exact("graph " + name, folded[name], launched[name], [a, b], "bits"))
    assert_no_failures(fails)


# ---------------------------------------------------------------------------
# 4. simplification, value numbering, dead code
# ---------------------------------------------------------------------------

def _trace1(fn, dt=F, out_dt=None, n_out=None):
    """Trace ``fn(x)`` with one input buffer ``x`` of dtype ``dt``."""
    outs = {"o": ir.Out(out_dt or dt)} if n_out is None else {f"o{j}": ir.Out(out_dt or dt) for j in range(n_out)}

    def body(x):
        r = fn(x[ir.item_index()])
        return r if n_out is None else {f"o{j}": v for j, v in enumerate(r)}
    return ir.trace(body, {"x": ir.In(dt)}, outs, name="simplify_probe")


def _arith(k):
    return [op for op in node_ops(k) if op not in ("const", "item_index", "gather")]


@pytest.mark.parametrize("fn,dt", [
    (lambda x: x + 0, I), (lambda x: 0 + x, I), (lambda x: x - 0, I), (lambda x: x * 1, I),
    (lambda x: 1 * x, I), (lambda x: x + 0, U), (lambda x: x * 1, U), (lambda x: x | 0, I),
    (lambda x: x & -1, I), (lambda x: x & 0xFFFFFFFF, U), (lambda x: x ^ 0, U), (lambda x: x << 0, I),
    (lambda x: x >> 0, U), (lambda x: -(-x), I), (lambda x: ~~x, U), (lambda x: x & x, I),  # noqa: B002
    (lambda x: x | x, U), (lambda x: ir.minimum(x, x), I), (lambda x: ir.maximum(x, x), F),
    (lambda x: x * 1.0, F), (lambda x: 1.0 * x, F), (lambda x: x / 1.0, F), (lambda x: x + (-0.0), F),
    (lambda x: (-0.0) + x, F), (lambda x: x - 0.0, F), (lambda x: -(-x), F),  # noqa: B002
    (lambda x: ir.select(x < x * 2.0, x, x), F), (lambda x: ir.cast(x, F), F),
    (lambda x: ir.bitcast(x, I), I),
])
def test_identity_folds_away(fn, dt):
    k = _trace1(fn, dt)
    assert _arith(k) == [], k.text
    # and the result is the input itself
    assert k.block.results[0].op == "gather", k.text


@pytest.mark.parametrize("fn,dt,out,want", [
    (lambda x: x - x, I, I, 0), (lambda x: x ^ x, U, U, 0), (lambda x: x * 0, I, I, 0),
    (lambda x: 0 * x, U, U, 0), (lambda x: x & 0, I, I, 0), (lambda x: x | -1, I, I, -1),
    (lambda x: x | 0xFFFFFFFF, U, U, 0xFFFFFFFF),
    (lambda x: ir.select(x == x, 1, 2), I, I, 1), (lambda x: ir.select(x != x, 1, 2), U, I, 2),  # noqa: PLR0124
    (lambda x: ir.select(x < x, 1, 2), I, I, 2), (lambda x: ir.select(x >= x, 1, 2), U, I, 1),  # noqa: PLR0124
])
def test_integer_identities_fold_to_constants(fn, dt, out, want):
    k = _trace1(fn, dt, out_dt=out)
    r = k.block.results[0]
    assert r.op == "const" and r.attrs[0] == want, k.text
    assert _arith(k) == [] and "gather" not in node_ops(k), k.text


_F_EDGE_INPUT = _canon(F32_EDGES, F)


@pytest.mark.parametrize("name,fn,ref", [
    ("x+0.0", lambda x: x + 0.0, lambda x: x + np.float32(0.0)),
    ("0.0+x", lambda x: 0.0 + x, lambda x: np.float32(0.0) + x),
    ("x-(-0.0)", lambda x: x - (-0.0), lambda x: x - np.float32(-0.0)),
    ("x*0.0", lambda x: x * 0.0, lambda x: x * np.float32(0.0)),
    ("x-x", lambda x: x - x, lambda x: x - x),
    ("x*-1.0", lambda x: x * -1.0, lambda x: x * np.float32(-1.0)),
    ("x==x", lambda x: ir.select(x == x, 1.0, 0.0), lambda x: np.where(x == x, 1.0, 0.0).astype(np.float32)),  # noqa: PLR0124
    ("x!=x", lambda x: ir.select(x != x, 1.0, 0.0), lambda x: np.where(x != x, 1.0, 0.0).astype(np.float32)),  # noqa: PLR0124
    ("x<=x", lambda x: ir.select(x <= x, 1.0, 0.0), lambda x: np.where(x <= x, 1.0, 0.0).astype(np.float32)),  # noqa: PLR0124
    ("x/x", lambda x: x / x, lambda x: x / x),
    ("x+0.0 on -0.0", lambda x: ir.copysign(1.0, x + 0.0), lambda x: np.copysign(np.float32(1), x + np.float32(0))),
])
def test_float_non_identities_are_kept(name, fn, ref):
    """IEEE makes these differ from the naive identity for -0.0, NaN or inf;
    whatever the graph does, the runtime result must match numpy."""
    k = _trace1(fn, F)
    x = _F_EDGE_INPUT
    got = run(k, x=x)["o"]
    with np.errstate(all="ignore"):
        want = ref(x)
    assert_no_failures([check_exact(name, got, want, [x])])
    assert _arith(k), f"{name} was simplified away:\n{k.text}"


def test_adding_positive_zero_is_not_folded_but_negative_zero_is():
    k_pos = _trace1(lambda x: x + 0.0)
    k_neg = _trace1(lambda x: x + (-0.0))
    assert "add" in node_ops(k_pos) and "add" not in node_ops(k_neg)
    assert "const" in k_pos.text
    x = np.float32([-0.0, 0.0, -1.0, np.nan])
    assert list(bits_of(run(k_pos, x=x)["o"]))[:3] == [0, 0, 0xBF800000]
    assert list(bits_of(run(k_neg, x=x)["o"]))[:3] == [0x80000000, 0, 0xBF800000]
    # -0.0 and +0.0 are distinct constants (not merged by value numbering)
    k = _trace1(lambda x: (x + 0.0, x + (-0.0), x * 0.0, x * -0.0), n_out=4)
    got = run(k, x=np.float32([-0.0, 2.0]))
    assert [int(bits_of(got[f"o{j}"])[0]) for j in range(4)] == [0, 0x80000000, 0x80000000, 0]


def test_value_numbering_merges_repeated_expressions():
    def body(x, y):
        i = ir.item_index()
        a, b = x[i], y[i]
        p, q = a * b, a * b
        return {"o": p + q, "o2": ir.sin(a) + ir.sin(a) * (a * b)}
    k = ir.trace(body, {"x": ir.In(F), "y": ir.In(F)}, {"o": ir.Out(F), "o2": ir.Out(F)})
    ops = node_ops(k)
    assert ops.count("mul") == 2 and ops.count("sin") == 1 and ops.count("gather") == 2, k.text
    assert ops.count("item_index") == 1
    x = np.float32([1.5, -2.0, 3.0])
    y = np.float32([2.0, 0.25, -1.0])
    got = run(k, x=x, y=y)
    assert_no_failures([check_exact("2ab", got["o"], (x * y) + (x * y), [x, y])])


def test_value_numbering_keeps_distinct_ops_apart():
    # Same operands, different op / dtype / constant must not be merged.
    def body(x):
        a = x[ir.item_index()]
        return {"o": (a - 1) * 1000 + (1 - a), "p": ir.cast(ir.cast(a, F) + 1.0, I) - (a + 1)}
    k = ir.trace(body, {"x": ir.In(I)}, {"o": ir.Out(I), "p": ir.Out(I)})
    x = np.int32([5, -3, 0])
    got = run(k, x=x)
    assert list(got["o"]) == list((x - 1) * 1000 + (1 - x))
    assert list(got["p"]) == [0, 0, 0]


def test_dead_code_is_eliminated():
    def body(x, y):
        i = ir.item_index()
        a = x[i]
        _unused = ir.exp(a) * 3.0 + y[i]
        _also = ir.select(a > 0.0, ir.log(a), a)
        return {"o": a + 1.0}
    k = ir.trace(body, {"x": ir.In(F), "y": ir.In(F)}, {"o": ir.Out(F)})
    ops = node_ops(k)
    for dead in ("exp", "log", "select", "mul", "gt"):
        assert dead not in ops, k.text
    assert ops.count("gather") == 1 and "add" in ops
    assert "exp(" not in k.text and "log(" not in k.text
    assert list(run(k, x=np.float32([1, 2]), y=np.float32([0, 0]))["o"]) == [2.0, 3.0]


# ---------------------------------------------------------------------------
# 5. type errors at trace time
# ---------------------------------------------------------------------------

def _trace_expecting_error(fn, ins=(I, U, F)):
    names = ["i", "u", "f"]

    def body(i, u, f):
        j = ir.item_index()
        r = fn(i[j], u[j], f[j])
        if isinstance(r, ir.Bool):  # so that only the op under test can raise
            r = ir.select(r, 1.0, 0.0)
        return {"o": r}
    with pytest.raises(ir.IRError):
        ir.trace(body, {n: ir.In(t) for n, t in zip(names, ins)}, {"o": ir.Out(F)})


@pytest.mark.parametrize("name,fn", [
    ("Int + UInt", lambda i, u, f: i + u),
    ("UInt * Int", lambda i, u, f: u * i),
    ("Int < UInt", lambda i, u, f: i < u),
    ("min(Int, UInt)", lambda i, u, f: ir.minimum(i, u)),
    ("select Int/UInt", lambda i, u, f: ir.select(f > 0.0, i, u)),
    ("Float & Float", lambda i, u, f: f & f),
    ("Float | Int", lambda i, u, f: f | i),
    ("Float ^ literal", lambda i, u, f: f ^ 1),
    ("~Float", lambda i, u, f: ~f),
    ("Float << Int", lambda i, u, f: f << i),
    ("Int >> Float", lambda i, u, f: i >> f),
    ("mulhi Float", lambda i, u, f: ir.mulhi(f, f)),
    ("if on Bool", lambda i, u, f: 1.0 if f > 0.0 else 2.0),
    ("and on Bool", lambda i, u, f: (f > 0.0) and f),
    ("while on Bool", lambda i, u, f: _python_while(f)),
    ("UInt / Int", lambda i, u, f: u / i),
    ("Int // UInt", lambda i, u, f: i // u),
    ("Bool + Bool", lambda i, u, f: (f > 0.0) + (f < 1.0)),
    ("Bool ordering", lambda i, u, f: (f > 0.0) < (f < 1.0)),
    ("-Bool", lambda i, u, f: -(f > 0.0)),
    ("float literal into Int", lambda i, u, f: ir.Int(1.5) + i),
    ("float literal into UInt", lambda i, u, f: ir.UInt(2.0) + u),
    ("float literal cast to int", lambda i, u, f: ir.cast(2.5, I) + i),
    ("int literal out of range", lambda i, u, f: i + ir.Int(2 ** 31)),
    ("negative UInt literal", lambda i, u, f: ir.UInt(-1) + u),
    ("bitcast to bool", lambda i, u, f: ir.bitcast(f, "bool")),
    ("bitcast Bool", lambda i, u, f: ir.bitcast(f > 0.0, I)),
])
def test_type_errors_raise_at_trace_time(name, fn):
    _trace_expecting_error(fn)


def _python_while(f):
    while f < 1.0:
        f = f * 2.0
    return f


def test_float_row_index_raises():
    with pytest.raises(ir.IRError):
        ir.trace(lambda x: {"o": x[1.0]}, {"x": ir.In(F)}, {"o": ir.Out(F)})
    with pytest.raises(ir.IRError):
        ir.trace(lambda x: {"o": x[x[0]]}, {"x": ir.In(F)}, {"o": ir.Out(F)})


def test_float_literal_into_int_output_raises():
    with pytest.raises(ir.IRError):
        ir.trace(lambda x: {"o": 1.5}, {"x": ir.In(I)}, {"o": ir.Out(I)})
    with pytest.raises(ir.IRError):
        ir.trace(lambda x: {"o": x[ir.item_index()] * 1.5}, {"x": ir.In(I)}, {"o": ir.Out(I)})


def test_values_outside_a_trace_raise():
    with pytest.raises(ir.IRError):
        ir.Float(1.0)
    with pytest.raises(ir.IRError):
        ir.sqrt(2.0)


def test_valid_mixes_do_not_raise():
    # The rules are not over-eager: explicit casts and Int/Float mixing work.
    def body(i, u, f):
        j = ir.item_index()
        a, b, c = i[j], u[j], f[j]
        return {"o": ir.cast(a, U) + b + ir.cast(c, U), "p": a + c + 1 + 0.5,
                "q": ir.cast(ir.bitcast(c, U) & 0x7FFFFFFF, I)}
    k = ir.trace(body, {"i": ir.In(I), "u": ir.In(U), "f": ir.In(F)},
                 {"o": ir.Out(U), "p": ir.Out(F), "q": ir.Out(I)})
    got = run(k, i=np.int32([-1, 3]), u=np.uint32([1, 2]), f=np.float32([2.5, -1.0]))
    assert list(got["o"]) == [2, 5] and list(got["p"]) == [3.0, 3.5]
    assert list(got["q"]) == [int(np.float32(2.5).view(np.int32)), 0x3F800000]
