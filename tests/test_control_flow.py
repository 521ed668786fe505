"""Symbolic control flow: while_loop / fori_loop / cond, checked against
pure-Python and numpy references on varied runtime data; dead-code
elimination of loop state and branch results (inspected on ``k.text``);
and tracing errors for misuse.

Kernels are traced and compiled once per module (``functools.cache``); the
tests feed them different data, which is runtime input, not structure.
"""
from __future__ import annotations

import functools
import re

import jax
import numpy as np
import pytest

from jaxrender import ir
from jaxrender.primitives import launch

U32_MASK = 0xFFFFFFFF


from lanes import LANES, run  # noqa: E402


# ---------------------------------------------------------------------------
# Helpers for reading the printed graph
# ---------------------------------------------------------------------------

_REGION_NODE = re.compile(r"^(\s*)%\d+:None = (loop|if|dispatch)(\[.*\])?\((.*)\)$")


def region_nodes(text: str, op: str) -> list[dict]:
    """Every ``op`` node of a printed graph: its operand count and, per
    region, the number of params and the number of yielded values."""
    lines = text.splitlines()
    found = []
    for k, line in enumerate(lines):
        m = _REGION_NODE.match(line)
        if not m or m.group(2) != op:
            continue
        pad = m.group(1)
        args = [a for a in m.group(4).split(",") if a.strip()]
        regions = []
        for line2 in lines[k + 1:]:
            if line2.startswith(pad + "  region "):
                regions.append({"params": 0, "yield": None})
                continue
            if not line2.startswith(pad + "    "):
                break  # back at (or above) the node's own level
            inner = line2[len(pad) + 4:]
            if inner.startswith(" "):
                continue  # deeper nesting
            if inner.startswith("params "):
                regions[-1]["params"] = len(inner[len("params "):].split(","))
            elif inner.startswith("yield"):
                rest = inner[len("yield"):].strip()
                regions[-1]["yield"] = len(rest.split(",")) if rest else 0
        found.append({"nargs": len(args), "attrs": m.group(3), "regions": regions})
    return found


def loop_state_sizes(k: ir.Kernel) -> list[int]:
    """Number of loop-carried values of each loop, as printed (operands of
    the loop node; the regions' params must agree)."""
    sizes = []
    for node in region_nodes(k.text, "loop"):
        cond_r, body_r = node["regions"]
        assert cond_r["params"] == body_r["params"] == body_r["yield"] == node["nargs"], node
        sizes.append(node["nargs"])
    return sizes


# ---------------------------------------------------------------------------
# while_loop with data-dependent trip counts: Collatz
# ---------------------------------------------------------------------------

@functools.cache
def collatz_kernel() -> ir.Kernel:
    def body(x, n):
        i = ir.item_index()

        def cond(s):
            return (s[1] != 1) & (s[0] < n.value)

        def step(s):
            c, v = s
            return c + 1, ir.select((v & 1) == 1, 3 * v + 1, v >> 1)

        c, v = ir.while_loop(cond, step, (ir.UInt(0), x[i]))
        return {"steps": c, "last": v}

    return ir.trace(body, {"x": ir.In("u32"), "n": ir.Scalar("u32")},
                    {"steps": ir.Out("u32"), "last": ir.Out("u32")}, name="collatz")


def collatz_ref(x: int, n: int) -> tuple[int, int]:
    c, v = 0, x
    while v != 1 and c < n:
        c += 1
        v = (3 * v + 1) & U32_MASK if v & 1 else v >> 1
    return c, v


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("cap", [1000, 37, 1, 0])
def test_collatz_data_dependent_trip_count(cap, lanes):
    rng = np.random.default_rng(cap)
    xs = np.concatenate([np.arange(0, 2000), rng.integers(1, 100_000, 1000),
                         [27, 77671, 97, 871, 2 ** 31, 2 ** 32 - 1]]).astype(np.uint32)
    out = run(collatz_kernel(), (len(xs),), lanes, x=xs, n=np.uint32(cap))
    steps, last = np.asarray(out["steps"]), np.asarray(out["last"])
    ref = np.array([collatz_ref(int(x), cap) for x in xs], dtype=np.uint64)
    np.testing.assert_array_equal(steps, ref[:, 0].astype(np.uint32))
    np.testing.assert_array_equal(last, ref[:, 1].astype(np.uint32))
    if cap == 1000:
        assert steps[27] == 111 and steps[97] == 118 and steps[871] == 178
        assert steps[0] == cap  # 0 never reaches 1: runs until the cap


# ---------------------------------------------------------------------------
# Early exit: scan a buffer for the first element above a per-item threshold
# ---------------------------------------------------------------------------

@functools.cache
def first_hit_kernel() -> ir.Kernel:
    def body(data, thr):
        i = ir.item_index()
        t = thr[i]

        def cond(s):
            j, _, hit = s
            return (~hit) & (j < data.len)

        def step(s):
            j, iters, _ = s
            h = data[j] > t
            return ir.select(h, j, j + 1), iters + 1, h

        j, iters, hit = ir.while_loop(cond, step, (ir.UInt(0), ir.UInt(0), ir.Bool(False)))
        return {"index": j, "iters": iters, "found": ir.cast(hit, "i32")}

    return ir.trace(body, {"data": ir.In("f32"), "thr": ir.In("f32")},
                    {"index": ir.Out("u32"), "iters": ir.Out("u32"), "found": ir.Out("i32")},
                    name="first_hit")


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("size", [1, 500, 3000])
def test_early_exit_first_hit(size, lanes):
    rng = np.random.default_rng(size)
    data = rng.standard_normal(size).astype(np.float32)
    thr = np.concatenate([rng.uniform(-3.0, 3.5, 4000), [-np.inf, np.inf, data.max(), data[0]]]).astype(np.float32)
    out = {k: np.asarray(v) for k, v in run(first_hit_kernel(), (len(thr),), lanes, data=data, thr=thr).items()}
    above = data[None, :] > thr[:, None]
    found = above.any(axis=1)
    first = np.where(found, above.argmax(axis=1), size)
    np.testing.assert_array_equal(out["found"], found.astype(np.int32))
    np.testing.assert_array_equal(out["index"], first)
    # Early exit: the loop stops at the first hit instead of scanning the rest.
    np.testing.assert_array_equal(out["iters"], np.where(found, first + 1, size))
    assert out["iters"][-4] == 1  # threshold -inf: the very first element is a hit
    assert out["iters"][-3] == out["iters"][-2] == size  # +inf / max: full scan, no hit
    if size > 100:
        assert out["iters"].mean() < 0.5 * size  # most scans stopped early


def test_early_exit_on_empty_buffer_runs_zero_iterations():
    thr = np.array([0.0, -1.0, 5.0], np.float32)
    out = launch(first_hit_kernel(), (3,), data=np.zeros(0, np.float32), thr=thr)
    np.testing.assert_array_equal(np.asarray(out["iters"]), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(out["index"]), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(out["found"]), [0, 0, 0])


# ---------------------------------------------------------------------------
# Nested loops (inner trip count depends on the outer index), fori_loop with
# symbolic bounds
# ---------------------------------------------------------------------------

@functools.cache
def nested_kernel() -> ir.Kernel:
    def body(m):
        i = ir.item_index()

        def outer(a, st):
            def inner(b, st2):
                acc, cnt = st2
                return acc + a * b + 1, cnt + 1
            acc, cnt = ir.fori_loop(0, a, inner, st)  # trip count: the outer index
            return acc ^ a, cnt

        acc, cnt = ir.fori_loop(ir.Int(0), m[i], outer, (ir.Int(0), ir.Int(0)))
        return {"acc": acc, "cnt": cnt}

    return ir.trace(body, {"m": ir.In("i32")}, {"acc": ir.Out("i32"), "cnt": ir.Out("i32")}, name="nested")


def nested_ref(m: int) -> tuple[int, int]:
    acc = cnt = 0
    for a in range(m):
        for b in range(a):
            acc += a * b + 1
            cnt += 1
        acc ^= a
    return acc, cnt


@pytest.mark.parametrize("lanes", LANES)
def test_nested_loops_inner_trip_count_depends_on_outer_index(lanes):
    rng = np.random.default_rng(3)
    m = np.concatenate([np.arange(-3, 40), rng.integers(0, 90, 200)]).astype(np.int32)
    out = run(nested_kernel(), (len(m),), lanes, m=m)
    ref = np.array([nested_ref(int(v)) for v in m], dtype=np.int64)
    np.testing.assert_array_equal(np.asarray(out["acc"]), ref[:, 0])
    np.testing.assert_array_equal(np.asarray(out["cnt"]), ref[:, 1])
    assert loop_state_sizes(nested_kernel()) == [3, 3]  # (index, acc, cnt) twice


@functools.cache
def uniform_loops_kernel() -> ir.Kernel:
    """Loops whose trip count is the same for every item (a scalar input, a
    row read at a uniform index, a count built in a uniform loop), run by
    all lanes, by some (inside a branch) and nested in a divergent loop."""
    def body(n, rows, x):
        i = ir.item_index()
        v = x[i]

        def uniform_sum(count):
            return ir.fori_loop(ir.Int(0), count, lambda k, acc: acc + v * ir.cast(k + 1, "f32"), ir.Float(0.0))

        top = uniform_sum(n.value)
        # A branch taken by some lanes: its loop reads the count from a row
        # at a uniform index (lanes outside the branch may read zeros).
        side = ir.cond(v > 0.0, lambda: uniform_sum(rows[n.value % 3]), lambda: ir.Float(-1.0))
        # A uniform count made by a uniform loop, used inside a divergent one.
        m = ir.fori_loop(ir.Int(0), n.value, lambda k, c: c + 2, ir.Int(1))
        steps = ir.cast(ir.abs(v) * 3.0, "i32")
        inner = ir.fori_loop(ir.Int(0), steps, lambda k, acc: acc + uniform_sum(m), ir.Float(0.0))
        return {"top": top, "side": side, "inner": inner}

    return ir.trace(body, {"n": ir.Scalar("i32"), "rows": ir.In("i32"), "x": ir.In("f32")},
                    {"top": ir.Out("f32"), "side": ir.Out("f32"), "inner": ir.Out("f32")}, name="uniform_loops")


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_uniform_trip_count_loops_in_partial_packets_and_branches(n, lanes):
    from jaxrender.lowering.codegen import uniform_values
    k = uniform_loops_kernel()
    # The analysis finds the uniform loops (the one-lane generator ignores it).
    assert sum(isinstance(u, tuple) and u[0] == "loop" for u in uniform_values(k.block)) >= 4
    rng = np.random.default_rng(n)
    x = np.float32(rng.uniform(-2, 2, 37))        # not a multiple of any packet width
    rows = np.int32([4, 0, 7])
    out = run(k, (len(x),), lanes, n=np.int32(n), rows=rows, x=x)

    def tri(c):
        return c * (c + 1) / 2
    m = 1 + 2 * n
    np.testing.assert_allclose(out["top"], x * tri(n), rtol=1e-6)
    np.testing.assert_allclose(out["side"], np.where(x > 0, x * tri(rows[n % 3]), -1.0), rtol=1e-6)
    np.testing.assert_allclose(out["inner"], np.trunc(np.abs(x) * np.float32(3)) * x * tri(m), rtol=1e-5)


@functools.cache
def fori_kernel() -> ir.Kernel:
    def body(lo, hi, ulo, uhi, vals):
        i = ir.item_index()

        def f(k, st):
            s, n, fs = st
            return s + k * k - 3 * k, n + 1, fs + vals[k - lo[i]]

        s, n, fs = ir.fori_loop(lo[i], hi[i], f, (ir.Int(0), ir.Int(0), ir.Float(0.0)))
        # Unsigned bounds: the index is a UInt; lo > hi means no iterations.
        us = ir.fori_loop(ulo[i], uhi[i], lambda k, acc: acc + (k ^ 0x55), ir.UInt(7))
        return {"s": s, "n": n, "fs": fs, "us": us}

    return ir.trace(body, {"lo": ir.In("i32"), "hi": ir.In("i32"), "ulo": ir.In("u32"), "uhi": ir.In("u32"),
                           "vals": ir.In("f32")},
                    {"s": ir.Out("i32"), "n": ir.Out("i32"), "fs": ir.Out("f32"), "us": ir.Out("u32")},
                    name="fori")


def test_fori_loop_symbolic_bounds():
    rng = np.random.default_rng(4)
    n = 600
    lo = rng.integers(-50, 50, n).astype(np.int32)
    hi = (lo + rng.integers(-10, 120, n)).astype(np.int32)
    ulo = rng.integers(0, 2 ** 32 - 200, n, dtype=np.uint64)
    ulo[:50] = 2 ** 32 - 60  # near the top of the u32 range
    uhi = np.where(rng.random(n) < 0.2, ulo // 2, ulo + rng.integers(0, 60, n))
    uhi[:50] = 2 ** 32 - 1
    ulo, uhi = ulo.astype(np.uint32), uhi.astype(np.uint32)
    vals = rng.standard_normal(200).astype(np.float32)
    out = {k: np.asarray(v) for k, v in
           launch(fori_kernel(), (n,), lo=lo, hi=hi, ulo=ulo, uhi=uhi, vals=vals).items()}
    for i in range(n):
        ks = range(int(lo[i]), int(hi[i]))
        assert out["s"][i] == sum(k * k - 3 * k for k in ks)
        assert out["n"][i] == len(ks)
        fs = np.float32(0.0)
        for k in ks:  # sequential f32 accumulation, like the loop
            fs = np.float32(fs + vals[min(k - int(lo[i]), len(vals) - 1)])
        assert out["fs"][i] == fs
        us = 7
        for k in range(int(ulo[i]), int(uhi[i])):
            us = (us + (k ^ 0x55)) & U32_MASK
        assert out["us"][i] == us
    assert (out["n"] == 0).sum() > 10  # zero-trip loops are exercised


# ---------------------------------------------------------------------------
# Loops whose body branches; pytree loop state; zero-iteration loops
# ---------------------------------------------------------------------------

@functools.cache
def loop_with_cond_kernel() -> ir.Kernel:
    def body(data, n, counts):
        i = ir.item_index()

        def step(k, acc):
            v = data[i * 8 + ir.cast(k, "u32")]

            def pos():
                ir.check(v > 0.0, "then-branch ran for a non-positive value")
                counts.scatter_add(0, 1)
                return ir.sqrt(v), 1

            def neg():
                ir.check(v <= 0.0, "else-branch ran for a positive value")
                counts.scatter_add(1, 1)
                return v * -2.0, 0

            d, p = ir.cond(v > 0.0, pos, neg)
            return acc[0] + d, acc[1] + p

        return ir.fori_loop(0, n[i], step, (ir.Float(0.0), ir.Int(0)))

    return ir.trace(body, {"data": ir.In("f32"), "n": ir.In("i32")},
                    {"acc": ir.Out("f32", (2,)), "counts": ir.Accum("i32")}, name="loop_cond")


@pytest.mark.parametrize("lanes", LANES)
def test_loop_body_with_cond_only_taken_side_runs(lanes):
    rng = np.random.default_rng(5)
    items = 3000
    data = rng.standard_normal(items * 8).astype(np.float32)
    data[rng.random(data.shape) < 0.05] = 0.0
    n = rng.integers(0, 9, items).astype(np.int32)
    out = run(loop_with_cond_kernel(), (items,), lanes, accum_rows={"counts": 2}, data=data, n=n)
    acc = np.asarray(out["acc"])
    ref = np.zeros((items, 2), np.float32)
    n_pos = n_neg = 0
    for i in range(items):
        s, p = np.float32(0.0), 0
        for k in range(n[i]):
            v = data[i * 8 + k]
            if v > 0:
                s, p = np.float32(s + np.sqrt(v)), p + 1
                n_pos += 1
            else:
                s = np.float32(s + v * np.float32(-2.0))
                n_neg += 1
        ref[i] = s, p
    np.testing.assert_array_equal(acc, ref)
    np.testing.assert_array_equal(np.asarray(out["counts"]), [n_pos, n_neg])


class State:
    """A user pytree with tree_flatten / tree_unflatten."""

    def __init__(self, pos, steps):
        self.pos, self.steps = pos, steps

    def tree_flatten(self):
        return (self.pos, self.steps), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@functools.cache
def pytree_state_kernel() -> ir.Kernel:
    def body(p, n, w):
        i = ir.item_index()
        x, y, z = p[i]
        init = {"v": ir.Vec(x, y, z), "n": ir.Int(0), "pair": (ir.Float(0.0), [ir.UInt(1)])}

        def cond(s):
            return s["n"] < n[i]

        def step(s):
            v = s["v"] * 0.5 + ir.Vec(1.0, -2.0, w[0])
            a, (b,) = s["pair"]
            return {"v": v, "n": s["n"] + 1, "pair": (a + v.x, [b * 3])}

        s = ir.while_loop(cond, step, init)
        st = ir.while_loop(lambda t: t.steps < 3, lambda t: State(t.pos + 1.0, t.steps + 1),
                           State(s["v"], ir.Int(0)))
        return {"v": tuple(s["v"]), "count": s["n"], "a": s["pair"][0], "b": s["pair"][1][0], "moved": tuple(st.pos)}

    return ir.trace(body, {"p": ir.In("f32", (3,)), "n": ir.In("i32"), "w": ir.In("f32")},
                    {"v": ir.Out("f32", (3,)), "count": ir.Out("i32"), "a": ir.Out("f32"), "b": ir.Out("u32"),
                     "moved": ir.Out("f32", (3,))}, name="pytree_state")


@pytest.mark.parametrize("lanes", LANES)
def test_pytree_loop_state(lanes):
    rng = np.random.default_rng(6)
    items = 500
    p = rng.standard_normal((items, 3)).astype(np.float32)
    n = rng.integers(-2, 30, items).astype(np.int32)
    w = np.array([0.25], np.float32)
    out = {k: np.asarray(v) for k, v in run(pytree_state_kernel(), (items,), lanes, p=p, n=n, w=w).items()}
    half, off = np.float32(0.5), np.array([1.0, -2.0, 0.25], np.float32)
    for i in range(items):
        v, a, b = p[i].copy(), np.float32(0.0), 1
        for _ in range(max(int(n[i]), 0)):
            v = (v * half + off).astype(np.float32)
            a = np.float32(a + v[0])
            b = (b * 3) & U32_MASK
        np.testing.assert_array_equal(out["v"][i], v)
        assert out["count"][i] == max(int(n[i]), 0)
        assert out["a"][i] == a
        assert out["b"][i] == b
        one = np.float32(1.0)
        np.testing.assert_array_equal(out["moved"][i], ((v + one) + one) + one)


@functools.cache
def zero_trip_kernel() -> ir.Kernel:
    def body(x, n):
        i = ir.item_index()
        xi = x[i]
        # Data-dependent: n may be 0.
        a, _ = ir.while_loop(lambda s: s[1] < n.value, lambda s: (s[0] * 2.0 + 1.0, s[1] + 1), (xi, ir.UInt(0)))
        # Statically empty ranges, and a constant-false condition.
        b = ir.fori_loop(5, 2, lambda k, s: s + 100.0, xi)
        c = ir.fori_loop(ir.UInt(9), ir.UInt(9), lambda k, s: s - 1.0, xi)
        d = ir.while_loop(lambda s: False, lambda s: s + 1.0, xi)
        return {"a": a, "b": b, "c": c, "d": d}

    return ir.trace(body, {"x": ir.In("f32"), "n": ir.Scalar("u32")},
                    {"a": ir.Out("f32"), "b": ir.Out("f32"), "c": ir.Out("f32"), "d": ir.Out("f32")},
                    name="zero_trip")


def test_zero_iteration_loops_return_initial_state():
    x = np.linspace(-2, 2, 33).astype(np.float32)
    out = {k: np.asarray(v) for k, v in launch(zero_trip_kernel(), (33,), x=x, n=np.uint32(0)).items()}
    for name in "abcd":
        np.testing.assert_array_equal(out[name], x, err_msg=name)
    out = launch(zero_trip_kernel(), (33,), x=x, n=np.uint32(3))
    np.testing.assert_array_equal(np.asarray(out["a"]), ((x * 2 + 1) * 2 + 1) * 2 + 1)


# ---------------------------------------------------------------------------
# cond
# ---------------------------------------------------------------------------

@functools.cache
def cond_effect_kernel() -> ir.Kernel:
    def body(x, hist):
        i = ir.item_index()
        v = x[i]

        def then():
            ir.check(v > 0.0, "then-branch ran although x <= 0")
            hist.scatter_add(0, 1.0)
            hist.scatter_add(2, v)
            return {"y": ir.Vec(v, v * v), "tag": ir.Int(1)}

        def other():
            ir.check(~(v > 0.0), "else-branch ran although x > 0")
            hist.scatter_add(1, 1.0)
            return {"y": ir.Vec(-v, 0.0), "tag": ir.Int(-1)}

        r = ir.cond(v > 0.0, then, other)
        return {"y": tuple(r["y"]), "tag": r["tag"]}

    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32", (2,)), "tag": ir.Out("i32"),
                                                "hist": ir.Accum("f32")}, name="cond_effect")


@pytest.mark.parametrize("lanes", LANES)
def test_cond_only_taken_side_runs_and_returns_structures(lanes):
    rng = np.random.default_rng(7)
    # Integer-valued data: the per-branch sums are exact in any order.
    x = rng.integers(-20, 21, 5000).astype(np.float32)
    out = run(cond_effect_kernel(), (len(x),), lanes, accum_rows={"hist": 3}, x=x)
    pos = x > 0
    np.testing.assert_array_equal(np.asarray(out["hist"]), [pos.sum(), (~pos).sum(), x[pos].sum()])
    np.testing.assert_array_equal(np.asarray(out["tag"]), np.where(pos, 1, -1))
    y = np.asarray(out["y"])
    np.testing.assert_array_equal(y[:, 0], np.where(pos, x, -x))
    np.testing.assert_array_equal(y[:, 1], np.where(pos, x * x, 0.0))
    assert len(region_nodes(cond_effect_kernel().text, "if")) == 1
    # All items on one side: the other side's counter stays at zero.
    out = run(cond_effect_kernel(), (100,), lanes, accum_rows={"hist": 3}, x=np.full(100, -1.0, np.float32))
    np.testing.assert_array_equal(np.asarray(out["hist"]), [0.0, 100.0, 0.0])


@functools.cache
def nested_cond_kernel() -> ir.Kernel:
    def body(x, calls):
        i = ir.item_index()
        v = x[i]

        def leaf(k, val):
            def f():
                calls.scatter_add(k, 1)
                return val
            return f

        def big():
            return ir.cond(v > 10.0, leaf(0, v * 2.0), leaf(1, v + 1.0))

        def small():
            # A loop inside a branch: v repeatedly halved 3 times when v < -10.
            def neg():
                calls.scatter_add(2, 1)
                return ir.fori_loop(0, 3, lambda k, s: s * 0.5, v)
            return ir.cond(v < -10.0, neg, leaf(3, 0))  # literal 0 promotes to Float

        return ir.cond(v > 0.0, big, small)

    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32"), "calls": ir.Accum("i32")},
                    name="nested_cond")


@pytest.mark.parametrize("lanes", LANES)
def test_nested_cond(lanes):
    x = np.linspace(-30, 30, 2401).astype(np.float32)
    out = run(nested_cond_kernel(), (len(x),), lanes, accum_rows={"calls": 4}, x=x)
    ref = np.where(x > 0, np.where(x > 10, x * 2, x + 1), np.where(x < -10, x * np.float32(0.125), 0.0))
    np.testing.assert_array_equal(np.asarray(out["y"]), ref.astype(np.float32))
    counts = [((x > 0) & (x > 10)).sum(), ((x > 0) & ~(x > 10)).sum(),
              (~(x > 0) & (x < -10)).sum(), (~(x > 0) & ~(x < -10)).sum()]
    np.testing.assert_array_equal(np.asarray(out["calls"]), counts)
    assert len(region_nodes(nested_cond_kernel().text, "if")) == 3


# ---------------------------------------------------------------------------
# Dead-code elimination of loop state and branch results
# ---------------------------------------------------------------------------

def _dce_trace(use_b: bool, b_feeds: str | None) -> ir.Kernel:
    """Loop state (j, a, b): j drives the condition, a is read after the loop;
    b is read after the loop only when ``use_b``. ``b_feeds`` makes b feed the
    condition, a live state variable, or an effect."""
    def body(x, n, sink):
        i = ir.item_index()

        def cond(s):
            j, _, b = s
            c = j < n.value
            return c & (b < 1e30) if b_feeds == "cond" else c

        def step(s):
            j, a, b = s
            a2 = a + x[i] + (b * 0.0 if b_feeds == "state" else 0.0)
            if b_feeds == "effect":
                sink.scatter_add(0, b)
            return j + 1, a2, b * 2.0 + a  # b reads a, but a does not read b

        _, a, b = ir.while_loop(cond, step, (ir.UInt(0), ir.Float(0.0), ir.Float(1.0)))
        return {"y": a + b if use_b else a}

    return ir.trace(body, {"x": ir.In("f32"), "n": ir.Scalar("u32")},
                    {"y": ir.Out("f32"), "sink": ir.Accum("f32")}, name=f"dce_{use_b}_{b_feeds}")


def test_dce_removes_dead_loop_state():
    assert loop_state_sizes(_dce_trace(True, None)) == [3]
    dead = _dce_trace(False, None)
    assert loop_state_sizes(dead) == [2]  # b is gone from the loop altogether
    # Without optimisation the state is intact (so the pass did the removal).
    def body(x, n, sink):
        i = ir.item_index()
        _, a, _ = ir.while_loop(lambda s: s[0] < n.value,
                                lambda s: (s[0] + 1, s[1] + x[i], s[2] * 2.0 + s[1]),
                                (ir.UInt(0), ir.Float(0.0), ir.Float(1.0)))
        return a
    raw = ir.trace(body, {"x": ir.In("f32"), "n": ir.Scalar("u32")},
                   {"y": ir.Out("f32"), "sink": ir.Accum("f32")}, optimize=False)
    assert loop_state_sizes(raw) == [3]
    # What is left is (j: u32, a: f32): the index j is unused after the loop
    # but feeds the condition, so it stays; b and its update are gone.
    assert len(re.findall(r"params %\d+:u32, %\d+:f32\n", dead.text)) == 2  # cond and body regions
    assert " = mul(" not in dead.text and " = mul(" in raw.text
    # The optimised kernel still computes the right thing.
    x = np.arange(10, dtype=np.float32)
    y = launch(dead, (10,), accum_rows={"sink": 1}, x=x, n=np.uint32(4))["y"]
    np.testing.assert_array_equal(np.asarray(y), 4 * x)


@pytest.mark.parametrize("feeds", ["cond", "state", "effect"])
def test_dce_keeps_state_that_feeds_live_code(feeds):
    k = _dce_trace(False, feeds)
    assert loop_state_sizes(k) == [3]
    x = np.arange(6, dtype=np.float32)
    out = launch(k, (6,), accum_rows={"sink": 1}, x=x, n=np.uint32(3))
    np.testing.assert_array_equal(np.asarray(out["y"]), 3 * x)
    if feeds == "effect":
        # b: 1 -> 1*2+0 -> (2)*2 + x -> ...; sink adds b before each update.
        b_vals = []
        for xi in x:
            a, b, seen = 0.0, 1.0, []
            for _ in range(3):
                seen.append(b)
                a, b = a + xi, b * 2.0 + a
            b_vals.append(sum(seen))
        np.testing.assert_allclose(np.asarray(out["sink"]), [sum(b_vals)])


def test_dce_state_only_read_by_dead_state_is_removed():
    # c feeds b, b feeds nothing live: both go, j and a stay.
    def body(x, n):
        i = ir.item_index()
        _, a, _, _ = ir.while_loop(lambda s: s[0] < n.value,
                                   lambda s: (s[0] + 1, s[1] + x[i], s[2] + s[3], s[3] * 3.0),
                                   (ir.UInt(0), ir.Float(0.0), ir.Float(1.0), ir.Float(2.0)))
        return a
    k = ir.trace(body, {"x": ir.In("f32"), "n": ir.Scalar("u32")}, {"y": ir.Out("f32")})
    assert loop_state_sizes(k) == [2]


def test_dce_loop_with_only_dead_results_is_removed():
    def body(x, n):
        i = ir.item_index()
        ir.while_loop(lambda s: s[0] < n.value, lambda s: (s[0] + 1, s[1] + x[i]), (ir.UInt(0), ir.Float(0.0)))
        return x[i]
    k = ir.trace(body, {"x": ir.In("f32"), "n": ir.Scalar("u32")}, {"y": ir.Out("f32")})
    assert region_nodes(k.text, "loop") == []


def test_dce_removes_unused_branch_results():
    def make(use_all: bool):
        def body(x):
            v = x[ir.item_index()]
            a, b, c = ir.cond(v > 0.0, lambda: (v + 1.0, v * 3.0, ir.sqrt(v)),
                              lambda: (v - 1.0, v * 5.0, ir.exp(v)))
            return {"y": a + b + c if use_all else b}
        return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name=f"branch_dce_{use_all}")

    full = region_nodes(make(True).text, "if")
    assert [r["yield"] for r in full[0]["regions"]] == [3, 3]
    k = make(False)
    (node,) = region_nodes(k.text, "if")
    assert [r["yield"] for r in node["regions"]] == [1, 1]
    assert "sqrt" not in k.text and "exp" not in k.text and "sub" not in k.text
    x = np.linspace(-3, 3, 13).astype(np.float32)
    y = launch(k, (13,), x=x)["y"]
    np.testing.assert_array_equal(np.asarray(y), np.where(x > 0, x * 3, x * 5).astype(np.float32))


# ---------------------------------------------------------------------------
# Tracing errors
# ---------------------------------------------------------------------------

def _trace(fn, inputs=None, outputs=None):
    return ir.trace(fn, inputs or {"x": ir.In("f32")}, outputs or {"y": ir.Out("f32")})


@pytest.mark.parametrize("then, other", [
    (lambda v: (v, v), lambda v: v),                       # tuple vs scalar
    (lambda v: (v, v), lambda v: (v, v, v)),               # tuple lengths
    (lambda v: {"a": v}, lambda v: {"b": v}),              # dict keys
    (lambda v: ir.Vec(v, v), lambda v: (v, v)),            # Vec vs tuple
    (lambda v: v > 0.0, lambda v: ir.Int(1)),              # Bool vs Int
    (lambda v: ir.cast(v, "u32"), lambda v: ir.cast(v, "i32")),  # UInt vs Int
])
def test_cond_branches_with_different_structures_raise(then, other):
    def body(x):
        v = x[ir.item_index()]
        r = ir.cond(v > 0.0, lambda: then(v), lambda: other(v))
        return ir.tree_flatten(r)[0][0]
    with pytest.raises(ir.IRError):
        _trace(body, outputs={"y": ir.Out("f32")})


@pytest.mark.parametrize("init, step", [
    (lambda v: ir.Int(0), lambda s, v: s + v),                      # Int state becomes Float
    (lambda v: ir.UInt(0), lambda s, v: ir.cast(s, "i32") + 1),     # UInt becomes Int
    (lambda v: (ir.Int(0), ir.Bool(True)), lambda s, v: (s[0] + 1, ir.Int(0))),  # Bool becomes Int
    (lambda v: (ir.Int(0), v), lambda s, v: (s[0] + 1,)),           # structure changes
    (lambda v: (ir.Int(0), v), lambda s, v: [s[0] + 1, s[1]]),      # tuple becomes list
])
def test_loop_body_changing_state_dtype_or_structure_raises(init, step):
    def body(x):
        v = x[ir.item_index()]
        ir.while_loop(lambda s: ir.Bool(True), lambda s: step(s, v), init(v))
        return v
    with pytest.raises(ir.IRError):
        _trace(body)


def test_cond_fn_must_return_bool():
    def body(x):
        v = x[ir.item_index()]
        return ir.while_loop(lambda s: s, lambda s: s + 1.0, v)
    with pytest.raises(ir.IRError, match="Bool"):
        _trace(body)


def _leaky_loop(x):
    """Trace a loop whose body stashes an inner value in a Python list."""
    v = x[ir.item_index()]
    leaked = []

    def step(s):
        t = s * 2.0 + v
        leaked.append(t)
        return t

    r = ir.while_loop(lambda s: s < 100.0, step, v)
    return v, r, leaked[0]


@pytest.mark.parametrize("use", ["arith", "output", "branch_result", "loop_init", "loop_result",
                                 "select", "scatter"])
def test_value_from_loop_body_used_after_loop_raises(use):
    def body(x, acc):
        _, r, t = _leaky_loop(x)
        if use == "arith":
            return t + 1.0
        if use == "output":
            return t
        if use == "branch_result":
            return ir.cond(r > 0.0, lambda: t, lambda: r)
        if use == "loop_init":
            return ir.while_loop(lambda s: s < 0.0, lambda s: s + 1.0, t)
        if use == "loop_result":
            return ir.while_loop(lambda s: s < 200.0, lambda s: t, r)
        if use == "select":
            return ir.select(r > 0.0, t, r)
        acc.scatter_add(0, t)
        return r

    with pytest.raises(ir.IRError, match=r"(?s)(loop|body).*(return it|loop state)"):
        ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32"), "acc": ir.Accum("f32")})


def test_value_from_branch_used_after_cond_raises():
    def body(x):
        v = x[ir.item_index()]
        leaked = []

        def then():
            leaked.append(v * 3.0)
            return v

        r = ir.cond(v > 0.0, then, lambda: v)
        return r + leaked[0]
    with pytest.raises(ir.IRError, match="branch"):
        _trace(body)


@functools.cache
def bad_check_kernel() -> ir.Kernel:
    def body(x):
        i = ir.item_index()

        def step(k, s):
            v = x[k]
            ir.check(v > 0.0, "found a non-positive value in the scan")
            return s + v
        return ir.fori_loop(ir.UInt(0), i + 1, step, ir.Float(0.0))
    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="bad_check")


@pytest.mark.parametrize("lanes", LANES)
def test_runtime_check_inside_loop(lanes):
    x = np.array([1.0, 2.0, 4.0, 3.0], np.float32)
    y = run(bad_check_kernel(), (4,), lanes, x=x)["y"]
    np.testing.assert_array_equal(np.asarray(y), np.cumsum(x))
    # Only the last item's scan reaches the bad value.
    x[3] = -1.0
    # A failed check surfaces as an XLA error (INVALID_ARGUMENT maps to ValueError).
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="non-positive value in the scan"):
        jax.block_until_ready(run(bad_check_kernel(), (4,), lanes, x=x)["y"])
    # Three items never reach it: a launch of three succeeds.
    y = run(bad_check_kernel(), (3,), lanes, x=x)["y"]
    np.testing.assert_array_equal(np.asarray(y), np.cumsum(x[:3]))
