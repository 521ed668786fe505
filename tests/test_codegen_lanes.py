"""Differential tests of the two code generators: the one-lane code (real
branches) and the SIMD packet code (masks) must give bit-identical results
for every packet width, launch size and batch layout, including lanes that
diverge in loops, branches and dispatch, and packets cut by the launch end."""
from __future__ import annotations

import functools
import re

import jax
import numpy as np
import pytest

from jaxrender import ir
from jaxrender.lowering import cpu
from jaxrender.primitives import launch

LANES = [1, 2, 4, 8, 16]


def _material_a(inst, params, x):
    return x * params.read(inst, 0) + params.read(inst, 1)


def _material_b(inst, params, x):
    return ir.sin(x) * params.read(inst, 0)


def _material_c(inst, params, x):
    return ir.select(x > params.read(inst, 1), ir.sqrt(ir.abs(x)), -x)


@functools.cache
def kitchen_sink() -> ir.Kernel:
    def body(x, table, kinds, params, counts, cap):
        i = ir.item_index()
        v = x[i]
        # Data-dependent trip count with early exit: scan `table` for the first
        # entry above v, at most cap steps.
        def cond(s):
            j, found, acc = s
            return (j < ir.minimum(table.len, cap.value)) & ~found

        def step(s):
            j, found, acc = s
            t = table[j]                       # uniform across active lanes
            return j + 1, t > v, acc + t * 0.5

        j, found, acc = ir.while_loop(cond, step, (ir.UInt(0), ir.Bool(False), ir.Float(0.0)))
        # Divergent branch with a nested loop in one side.
        def heavy():
            n = ir.cast(ir.abs(v) * 3.0, "u32") % 7
            return ir.fori_loop(ir.UInt(0), n, lambda k, a: a * 1.5 + ir.cast(k, "f32"), v)

        y = ir.cond(found, heavy, lambda: acc - v)
        # Virtual call over 6 instances of 3 implementations.
        inst = ir.cast(ir.abs(y) * 10.0, "u32") % 7     # 6 is out of range: clamped
        impls = [_material_a, _material_b, _material_c, _material_a, _material_c, _material_b]
        z = ir.dispatch(ir.UInt(0) + inst, [lambda f=f: f(inst, params, y) for f in impls])
        kind = kinds[inst]                                # varying gather
        counts.scatter_add(kind, 1)
        counts.scatter_add(ir.cast(j, "i32") - 1, 2)      # -1 is dropped
        q = ir.cast(z, "i32") // 3 + ir.cast(j, "i32") % 4
        # rows wider than one value: each lane writes a row of its own
        return {"y": y, "z": z, "j": j, "q": q, "row": ir.Vec(y, z, y * z), "qrow": ir.Vec(q, -q)}

    return ir.trace(body, {"x": ir.In("f32"), "table": ir.In("f32"), "kinds": ir.In("i32"),
                           "params": ir.In("f32", (2,)), "cap": ir.Scalar("u32")},
                    {"y": ir.Out("f32"), "z": ir.Out("f32"), "j": ir.Out("u32"), "q": ir.Out("i32"),
                     "row": ir.Out("f32", (3,)), "qrow": ir.Out("i32", (2,)),
                     "counts": ir.Accum("i32")}, name="kitchen_sink")


def sink_inputs(n, seed=0):
    r = np.random.default_rng(seed)
    return dict(x=r.uniform(-2, 2, n).astype(np.float32),
                table=np.sort(r.uniform(-2, 2, 50)).astype(np.float32),
                kinds=r.integers(0, 5, 7).astype(np.int32),
                params=r.uniform(-1, 1, (7, 2)).astype(np.float32),
                cap=np.uint32(40))


def run_sink(lanes, n, seed=0):
    out = launch(kitchen_sink(), (n,), accum_rows={"counts": 64}, simd_lanes=lanes, **sink_inputs(n, seed))
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("n", [1, 15, 16, 17, 333])
def test_all_packet_widths_agree_bitwise(n):
    ref = run_sink(1, n)
    if n > 16:
        assert ref["j"].max() > ref["j"].min()  # lanes really diverge
    np.testing.assert_array_equal(ref["row"], np.stack([ref["y"], ref["z"], ref["y"] * ref["z"]], -1))
    np.testing.assert_array_equal(ref["qrow"], np.stack([ref["q"], -ref["q"]], -1))
    for lanes in LANES[1:]:
        got = run_sink(lanes, n)
        for k in ref:
            assert got[k].tobytes() == ref[k].tobytes(), (lanes, k)


def test_vmap_packets_straddle_batch_elements():
    n = 37  # not a multiple of any packet width: packets cross batch boundaries
    xs = np.stack([sink_inputs(n, s)["x"] for s in range(3)])
    base = sink_inputs(n)
    base.pop("x")

    def f(lanes):
        g = jax.vmap(lambda x: launch(kitchen_sink(), (n,), accum_rows={"counts": 64},
                                      simd_lanes=lanes, x=x, **base))
        return {k: np.asarray(v) for k, v in g(xs).items()}

    ref = f(1)
    for k in range(3):
        one = launch(kitchen_sink(), (n,), accum_rows={"counts": 64}, simd_lanes=1, x=xs[k], **base)
        np.testing.assert_array_equal(ref["y"][k], np.asarray(one["y"]))
        np.testing.assert_array_equal(ref["counts"][k], np.asarray(one["counts"]))
    for lanes in (4, 16):
        got = f(lanes)
        for key in ref:
            assert got[key].tobytes() == ref[key].tobytes(), (lanes, key)


@functools.cache
def lane_check_kernel() -> ir.Kernel:
    def body(x):
        v = x[ir.item_index()]
        ir.check(v != 13.0, "found 13")
        return v * 2.0
    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="lane_check")


@pytest.mark.parametrize("lanes", [1, 16])
def test_check_fires_for_one_lane_only(lanes):
    x = np.arange(20, dtype=np.float32)
    with pytest.raises(Exception, match="found 13"):
        np.asarray(launch(lane_check_kernel(), (20,), simd_lanes=lanes, x=x)["y"])
    # 13 lies beyond the launch end (clamped reads stop at row 12): no error.
    np.testing.assert_array_equal(np.asarray(launch(lane_check_kernel(), (13,), simd_lanes=lanes, x=x)["y"]),
                                  x[:13] * 2)


def test_invalid_lane_count():
    with pytest.raises(ValueError, match="simd_lanes must be 1, 2, 4, 8 or 16"):
        launch(lane_check_kernel(), (4,), simd_lanes=3, x=np.zeros(4, np.float32))



@functools.cache
def subroutine_kernel(shared: bool = True) -> ir.Kernel:
    """A subroutine called from six places: with two different captured
    constants, inside and outside divergent branches, and with a loop bound
    captured from a launch-wide scalar (lanes run it in step) or from the
    item's own data (they do not). ``shared=False``: the same code inline."""
    def body(x, table, cap, counts):
        v = x[ir.item_index()]

        def escape(c, k, bound):
            def step(s):
                j, z = s
                counts.scatter_add(ir.cast(j, "i32") % 5, 1)
                return j + 1, z * z * k + c + table[j % 7]
            return ir.while_loop(lambda s: (s[0] < bound) & (ir.abs(s[1]) < 100.0), step,
                                 (ir.UInt(0), ir.Float(0.0)))

        def call(c, k, bound):
            if not shared:
                return escape(c, k, bound)
            return ir.subroutine(lambda c: escape(c, k, bound), c, name="escape")

        uniform, varying = cap.value, ir.cast(ir.abs(v) * 40.0, "u32")
        none = (ir.UInt(0), ir.Float(1.0))
        a = call(v, 1.0, uniform)
        b = ir.cond(v > 0.0, lambda: call(v * 0.5, 1.0, uniform), lambda: none)
        c = call(v, 0.5, uniform)
        d = call(v * 0.25, 0.5, uniform)
        e = call(v, 1.0, varying)
        f = ir.cond(v < 0.1, lambda: call(v * 0.75, 1.0, varying), lambda: none)
        return {"n": a[0] + b[0] + c[0] + d[0] + e[0] + f[0], "z": ir.Vec(a[1] + b[1], c[1] + d[1], e[1] + f[1])}

    return ir.trace(body, {"x": ir.In("f32"), "table": ir.In("f32"), "cap": ir.Scalar("u32")},
                    {"n": ir.Out("u32"), "z": ir.Out("f32", (3,)), "counts": ir.Accum("i32")},
                    name="subroutines" if shared else "subroutines_inline")


def run_subroutines(lanes, shared=True, n=101):
    r = np.random.default_rng(3)
    out = launch(subroutine_kernel(shared), (n,), accum_rows={"counts": 5}, simd_lanes=lanes,
                 x=r.uniform(-0.6, 0.4, n).astype(np.float32), table=r.uniform(-0.1, 0.1, 7).astype(np.float32),
                 cap=np.uint32(12))
    return {k: np.asarray(v) for k, v in out.items()}


def test_subroutines_are_shared_only_by_calls_of_the_same_code():
    """Calls whose body, captured constants and (SIMD code) captured
    uniformity agree share one function of the module; every packet width
    computes bit for bit what the one-lane code and the same code written
    inline compute."""
    for lanes in (1, 8):
        text = cpu.generate_llvm_ir(subroutine_kernel(), 0, lanes)
        defined = re.findall(r'define internal void @"(jaxrender\.subroutine\.escape\.\d+)"', text)
        calls = re.findall(r'call void @"(jaxrender\.subroutine\.escape\.\d+)"', text)
        # one-lane code: the constants 1.0 and 0.5 make two functions; SIMD
        # code also tells the uniform loop bound from the per-lane one
        assert len(defined) == (2 if lanes == 1 else 3), defined
        assert sorted(set(calls)) == sorted(defined) and len(calls) == 6, calls
    ref = run_subroutines(1, shared=False)
    assert ref["n"].max() > ref["n"].min()                  # lanes diverge
    for lanes in LANES:
        for shared in (True, False):
            got = run_subroutines(lanes, shared)
            for key in ref:
                assert got[key].tobytes() == ref[key].tobytes(), (lanes, shared, key)


def test_a_subroutine_computes_what_it_reads_itself():
    """No value numbering across a subroutine's boundary: its body is the
    same code whatever the calling code computed before it."""
    def body(x):
        v = x[ir.item_index()]
        before = v * 2.0 + 1.0

        def f(c):
            return c * 2.0 + 1.0 + x[ir.item_index()]
        return before + ir.subroutine(f, v, name="f") + ir.subroutine(f, before, name="f")
    k = ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")})
    regions = [n.regions[0] for n in ir.walk(k.block) if n.op == "call"]
    assert len(regions) == 2
    assert ir.format_block(regions[0], outer_ids=True) == ir.format_block(regions[1], outer_ids=True)
    # (it reads x itself, and captures constants only)
    assert all(c.op == "const" for r in regions for c in ir.captured_values(r))


@functools.cache
def row_read_kernel() -> ir.Kernel:
    """Rows read several columns at a time, at rows that differ per lane
    (the packet code loads each lane's row and transposes, or gathers)."""
    def body(idx, wide, ints):
        i = idx[ir.item_index()]
        near = [wide.read(i, k) for k in range(9)]                 # nine adjacent columns
        far = [wide.read(i, k) for k in (0, 3, 7, 12, 16, 19)]     # spans more than 16 columns
        pair = [wide.read(i + 1, k) for k in (4, 5)]               # two columns
        n = [ints.read(i, k) for k in (1, 2, 3, 5, 6, 10)]         # an integer row
        return {"near": ir.Vec(*near), "far": ir.Vec(*far), "pair": ir.Vec(*pair), "n": ir.Vec(*n)}

    return ir.trace(body, {"idx": ir.In("i32"), "wide": ir.In("f32", (20,)), "ints": ir.In("i32", (11,))},
                    {"near": ir.Out("f32", (9,)), "far": ir.Out("f32", (6,)), "pair": ir.Out("f32", (2,)),
                     "n": ir.Out("i32", (6,))}, name="row_reads")


@functools.cache
def footprint_read_kernel() -> ir.Kernel:
    """A filter footprint's reads: 5 adjacent rows of 3 columns from a
    per-lane start (unsigned, as a canvas's pixel rows are), and 3
    adjacent rows of 2 columns from a signed one."""
    def body(start, canvas, table):
        i = ir.item_index()
        u = ir.cast(start[i], "u32")
        pixels = [canvas.read(u + dx, c) for dx in range(5) for c in range(3)]
        j = start[i] - 2
        signed = [table.read(j + k, c) for k in range(3) for c in (0, 1)]
        return {"pixels": ir.Vec(*pixels), "signed": ir.Vec(*signed)}

    return ir.trace(body, {"start": ir.In("i32"), "canvas": ir.In("f32", (3,)), "table": ir.In("f32", (2,))},
                    {"pixels": ir.Out("f32", (15,)), "signed": ir.Out("f32", (6,))}, name="footprint_reads")


def test_adjacent_rows_read_as_one_span():
    """Reads of rows r, r + 1, ... of one buffer (a footprint's pixels) are
    one span per lane where every lane's rows lie in the buffer; where
    some run past its end (or start before it) each row is clamped, as
    numpy's clipped indexing gives them, at every packet width."""
    r = np.random.default_rng(9)
    canvas = r.uniform(-1, 1, (40, 3)).astype(np.float32)
    table = r.uniform(-1, 1, (40, 2)).astype(np.float32)
    start = r.integers(0, 36, 70).astype(np.int32)
    start[40:56] = 17                   # one packet on one start (uniform)
    start[60:64] = [36, 37, 39, 0]      # rows past the end; signed rows before the start
    start[64:70] = [1, 2, 35, 30, 30, 30]
    rows = np.clip(start[:, None] + np.arange(5), 0, 39)
    want_pixels = canvas[rows].reshape(len(start), 15)
    srows = np.clip(start[:, None] - 2 + np.arange(3), 0, 39)
    want_signed = table[srows].reshape(len(start), 6)
    for lanes in LANES:
        got = launch(footprint_read_kernel(), (len(start),), simd_lanes=lanes, start=start, canvas=canvas, table=table)
        np.testing.assert_array_equal(np.asarray(got["pixels"]), want_pixels, err_msg=f"{lanes} lanes")
        np.testing.assert_array_equal(np.asarray(got["signed"]), want_signed, err_msg=f"{lanes} lanes")
    assert "span.inside" in cpu.generate_llvm_ir(footprint_read_kernel(), 0, 16)


def test_rows_read_several_columns_per_lane():
    """Every packet width reads the columns of each lane's own row, at the
    buffer's last row too (and clamped past it), as numpy indexes them."""
    r = np.random.default_rng(5)
    wide = r.uniform(-1, 1, (13, 20)).astype(np.float32)
    ints = r.integers(-1000, 1000, (13, 11)).astype(np.int32)
    idx = r.integers(0, 13, 53).astype(np.int32)
    idx[:3] = 12          # the last row, its next row clamped to it
    idx[5:21] = 7         # a whole packet on one row (the uniform path)
    j = np.minimum(idx + 1, 12)
    want = {"near": wide[idx, :9], "far": wide[idx][:, [0, 3, 7, 12, 16, 19]], "pair": wide[j][:, [4, 5]],
            "n": ints[idx][:, [1, 2, 3, 5, 6, 10]]}
    for lanes in LANES:
        got = launch(row_read_kernel(), (len(idx),), simd_lanes=lanes, idx=idx, wide=wide, ints=ints)
        for k, v in want.items():
            np.testing.assert_array_equal(np.asarray(got[k]), v, err_msg=f"{k}, {lanes} lanes")
    assert "llvm.masked.load" in cpu.generate_llvm_ir(row_read_kernel(), 0, 16)
