"""Accumulators under contention (scatter_add) and dynamic dispatch.

scatter_add: 200k work items adding into 7 rows, checked against
``np.add.at`` of the same per-item contributions; out-of-range rows are
dropped. dispatch: several "material" implementations shared by several
instances, each instance reading its own parameters from a data buffer;
identical implementations are emitted once.
"""
from __future__ import annotations

import ast
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrender import ir
from jaxrender.primitives import launch

N_ITEMS = 200_003  # not a multiple of any SIMD packet width: tail packets run too
ROWS = 7
U = 2.0 ** -24  # unit roundoff of f32


from lanes import LANES, run  # noqa: E402


# ---------------------------------------------------------------------------
# scatter_add
# ---------------------------------------------------------------------------

@functools.cache
def scatter_kernel() -> ir.Kernel:
    """Each item adds its own contribution, to a row given by Int (signed)
    and by UInt row buffers."""
    def body(row_i, row_u, vf, vi, vu, f_i, i_i, u_u, f_u):
        i = ir.item_index()
        ri, ru = row_i[i], row_u[i]
        f_i.scatter_add(ri, vf[i])
        i_i.scatter_add(ri, vi[i])
        u_u.scatter_add(ru, vu[i])
        ir.scatter_add(f_u, ru, vf[i])  # the free-function form
        return {"done": ir.Int(1)}

    return ir.trace(body,
                    {"row_i": ir.In("i32"), "row_u": ir.In("u32"), "vf": ir.In("f32"),
                     "vi": ir.In("i32"), "vu": ir.In("u32")},
                    {"done": ir.Out("i32"), "f_i": ir.Accum("f32"), "i_i": ir.Accum("i32"),
                     "u_u": ir.Accum("u32"), "f_u": ir.Accum("f32")}, name="scatter")


def launch_scatter(row_i, row_u, vf, vi, vu, rows=ROWS, lanes=None, **kw):
    """The scatter kernel's outputs (traceable: usable under ``jax.vmap``)."""
    return run(scatter_kernel(), (vf.shape[-1],), lanes, accum_rows={k: rows for k in ("f_i", "i_i", "u_u", "f_u")},
               row_i=row_i, row_u=row_u, vf=vf, vi=vi, vu=vu, **kw)


def run_scatter(row_i, row_u, vf, vi, vu, rows=ROWS, lanes=None, **kw):
    out = {k: np.asarray(v) for k, v in launch_scatter(row_i, row_u, vf, vi, vu, rows, lanes, **kw).items()}
    np.testing.assert_array_equal(out["done"], np.ones(len(vf), np.int32))  # every item ran
    return out


def add_at(rows_arr, vals, nrows, dtype):
    """np.add.at over the in-range rows only (others are dropped)."""
    rows64 = np.asarray(rows_arr).astype(np.int64)
    ok = (rows64 >= 0) & (rows64 < nrows)
    out = np.zeros(nrows, dtype)
    np.add.at(out, rows64[ok], np.asarray(vals)[ok].astype(dtype))
    return out


def f32_tolerances(rows_arr, vals, nrows):
    """Per-row bounds on |f32 sum in any order - exact sum|.

    * rigorous: recursive summation of n terms in any order has error at most
      gamma_{n-1} * sum|x| with gamma_k = k u / (1 - k u) (Higham, Accuracy
      and Stability, Thm 4.4) -- worst case, valid for every schedule;
    * typical: each of the n roundings is at most u * max|partial sum| and they
      are independent with mean zero for random data, so by Hoeffding the total
      exceeds 6 u S sqrt(n) with probability below 2 exp(-18) ~ 3e-8, where S
      bounds every partial sum (here the sum of |x|)."""
    rows64 = np.asarray(rows_arr).astype(np.int64)
    ok = (rows64 >= 0) & (rows64 < nrows)
    n = np.bincount(rows64[ok], minlength=nrows).astype(np.float64)
    s_abs = np.bincount(rows64[ok], weights=np.abs(vals[ok].astype(np.float64)), minlength=nrows)
    gamma = (n - 1).clip(0) * U / (1 - (n - 1).clip(0) * U)
    return gamma * s_abs, 6 * U * s_abs * np.sqrt(n) + 1e-30


@pytest.mark.parametrize("lanes", LANES)
def test_scatter_add_contention_exact_integers_and_dyadic_floats(lanes):
    rng = np.random.default_rng(0)
    row = rng.integers(0, ROWS, N_ITEMS)
    # Multiples of 2**-8 in [0, 1): every partial sum of a row (< 2**16) is a
    # multiple of 2**-8 below 2**16, i.e. exact in f32 -- so the f32 sums are
    # exact in every order, and a lost or duplicated update shows up exactly.
    vf = (rng.integers(0, 256, N_ITEMS) / 256.0).astype(np.float32)
    vi = rng.integers(-(2 ** 31), 2 ** 31, N_ITEMS, dtype=np.int64).astype(np.int32)  # sums wrap
    vu = rng.integers(0, 2 ** 32, N_ITEMS, dtype=np.uint64).astype(np.uint32)       # sums wrap
    for _ in range(2):  # the atomic schedule differs between launches
        out = run_scatter(row.astype(np.int32), row.astype(np.uint32), vf, vi, vu, lanes=lanes)
        np.testing.assert_array_equal(out["i_i"], add_at(row, vi, ROWS, np.int32))
        np.testing.assert_array_equal(out["u_u"], add_at(row, vu, ROWS, np.uint32))
        exact = add_at(row, vf.astype(np.float64), ROWS, np.float64)
        assert exact.max() < 2 ** 16
        np.testing.assert_array_equal(out["f_i"], exact.astype(np.float32))
        np.testing.assert_array_equal(out["f_u"], exact.astype(np.float32))
    # Counting with 1s gives the histogram exactly.
    out = run_scatter(row.astype(np.int32), row.astype(np.uint32), np.ones(N_ITEMS, np.float32),
                      np.ones(N_ITEMS, np.int32), np.ones(N_ITEMS, np.uint32), lanes=lanes)
    hist = np.bincount(row, minlength=ROWS)
    for k in ("f_i", "i_i", "u_u", "f_u"):
        np.testing.assert_array_equal(out[k], hist, err_msg=k)


def test_scatter_add_contention_random_floats_within_rounding_bound():
    rng = np.random.default_rng(1)
    row = rng.integers(0, ROWS, N_ITEMS)
    for vf in (rng.standard_normal(N_ITEMS).astype(np.float32),
               rng.uniform(1.0, 2.0, N_ITEMS).astype(np.float32)):
        exact = add_at(row, vf.astype(np.float64), ROWS, np.float64)
        rigorous, typical = f32_tolerances(row, vf, ROWS)
        vi = np.zeros(N_ITEMS, np.int32)
        vu = np.zeros(N_ITEMS, np.uint32)
        out = run_scatter(row.astype(np.int32), row.astype(np.uint32), vf, vi, vu)
        for k in ("f_i", "f_u"):
            err = np.abs(out[k].astype(np.float64) - exact)
            assert np.all(err <= rigorous), (k, err, rigorous)
            assert np.all(err <= typical), (k, err, typical)
        # Sanity of the typical bound: a sequential f32 sum in item order is within it too.
        seq = add_at(row, vf, ROWS, np.float32).astype(np.float64)
        assert np.all(np.abs(seq - exact) <= typical)


@pytest.mark.parametrize("lanes", LANES)
def test_small_float_accumulators_are_summed_in_float64_on_any_thread_count(lanes):
    """Float accumulators with few rows for the work (a gradient's material
    parameters) are summed per thread in float64 and rounded once, so each
    row is the correctly rounded sum of its contributions, bit for bit, on
    1, 3 or 8 threads. (Float32 atomics into one shared row lose the small
    late terms of a long sum and change with the thread count: this test
    fails on them.) Under vmap each batch element's rows are its own sums.
    An accumulator with more rows than the work items cover stays a shared
    float32 one, within the float32 bounds."""
    rng = np.random.default_rng(5)
    row = rng.integers(0, ROWS, N_ITEMS)
    vf = rng.uniform(0.0, 1.0, N_ITEMS).astype(np.float32)
    vi = np.ones(N_ITEMS, np.int32)
    rows = row.astype(np.int32), row.astype(np.uint32)
    exact = np.array([math.fsum(vf[row == r].astype(np.float64)) for r in range(ROWS)])
    for threads in (1, 3, 8):
        out = run_scatter(*rows, vf, vi, vi.view(np.uint32), lanes=lanes, num_threads=threads)
        np.testing.assert_array_equal(out["f_i"], exact.astype(np.float32), err_msg=f"{threads} threads")
        np.testing.assert_array_equal(out["f_u"], exact.astype(np.float32), err_msg=f"{threads} threads")
    # Batched launches (vmap) keep one row set per batch element in each copy.
    scales = np.float32([1.0, 3.0, 0.5])
    batched = jax.vmap(lambda v: launch_scatter(*rows, v, vi, vi.view(np.uint32), lanes=lanes, num_threads=3)["f_i"])
    out = np.asarray(batched(jnp.asarray(vf[None, :] * scales[:, None])))
    for k, sc in enumerate(scales):
        want = [math.fsum((vf[row == r] * sc).astype(np.float64)) for r in range(ROWS)]
        np.testing.assert_array_equal(out[k], np.float32(want), err_msg=f"batch element {k}")
    wide = N_ITEMS  # as many rows as items: 3 threads' copies would hold 3x the work, so none is made
    spread = rng.integers(0, wide, N_ITEMS)
    out = run_scatter(spread.astype(np.int32), spread.astype(np.uint32), vf, vi, vi.view(np.uint32),
                      rows=wide, lanes=lanes, num_threads=3)
    exact = add_at(spread, vf.astype(np.float64), wide, np.float64)
    rigorous, _ = f32_tolerances(spread, vf, wide)
    assert np.all(np.abs(out["f_i"] - exact) <= rigorous)
    np.testing.assert_array_equal(out["i_i"], add_at(spread, vi, wide, np.int32))


@pytest.mark.parametrize("lanes", LANES)
def test_scatter_add_out_of_range_rows_are_dropped(lanes):
    rng = np.random.default_rng(2)
    n = N_ITEMS
    bad_i = np.array([-1, -2, -7, -(2 ** 31), ROWS, ROWS + 1, 1000, 2 ** 31 - 1], np.int64)
    bad_u = np.array([ROWS, ROWS + 1, 1000, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32 - ROWS], np.uint64)
    row_i = rng.integers(0, ROWS, n).astype(np.int64)
    row_u = rng.integers(0, ROWS, n).astype(np.uint64)
    sel_i = rng.random(n) < 0.3
    sel_u = rng.random(n) < 0.3
    row_i[sel_i] = rng.choice(bad_i, sel_i.sum())
    row_u[sel_u] = rng.choice(bad_u, sel_u.sum())
    row_i, row_u = row_i.astype(np.int32), row_u.astype(np.uint32)
    vf = np.ones(n, np.float32)
    vi = rng.integers(1, 1000, n).astype(np.int32)
    vu = rng.integers(1, 1000, n).astype(np.uint32)
    out = run_scatter(row_i, row_u, vf, vi, vu, lanes=lanes)
    np.testing.assert_array_equal(out["i_i"], add_at(row_i, vi, ROWS, np.int32))
    np.testing.assert_array_equal(out["f_i"], add_at(row_i, vf, ROWS, np.float32))
    np.testing.assert_array_equal(out["u_u"], add_at(row_u, vu, ROWS, np.uint32))
    np.testing.assert_array_equal(out["f_u"], add_at(row_u, vf, ROWS, np.float32))
    # Nothing was clamped or wrapped into a valid row: totals are exactly the valid parts.
    assert out["f_i"].sum() == (~sel_i).sum() and out["f_u"].sum() == (~sel_u).sum()
    # With more rows, the formerly out-of-range rows 7 and 8 become valid and
    # rows 0..6 are unchanged.
    out9 = run_scatter(row_i, row_u, vf, vi, vu, rows=9, lanes=lanes)
    np.testing.assert_array_equal(out9["i_i"], add_at(row_i, vi, 9, np.int32))
    np.testing.assert_array_equal(out9["u_u"], add_at(row_u, vu, 9, np.uint32))
    np.testing.assert_array_equal(out9["i_i"][:ROWS], out["i_i"])
    assert out9["i_i"][ROWS] > 0 and out9["u_u"][ROWS + 1] > 0


def test_scatter_add_all_rows_out_of_range_and_zero_rows():
    n = 5000
    row_i = np.full(n, -1, np.int32)
    row_u = np.full(n, 2 ** 32 - 1, np.uint32)
    out = run_scatter(row_i, row_u, np.ones(n, np.float32), np.ones(n, np.int32), np.ones(n, np.uint32))
    for k in ("f_i", "i_i", "u_u", "f_u"):
        np.testing.assert_array_equal(out[k], np.zeros(ROWS), err_msg=k)
    # An accumulator with zero rows: every write is out of range.
    row = np.arange(n, dtype=np.int32) % ROWS
    out = run_scatter(row, row.astype(np.uint32), np.ones(n, np.float32), np.ones(n, np.int32),
                      np.ones(n, np.uint32), rows=0)
    for k in ("f_i", "i_i", "u_u", "f_u"):
        assert out[k].shape == (0,)


@functools.cache
def vector_accum_kernel() -> ir.Kernel:
    def body(row, v, w, acc3, acc23):
        i = ir.item_index()
        r = row[i]
        x, y, z = v[i]
        for c, val in enumerate((x, y, z)):
            acc3.scatter_add(r, val, component=c)
        # (2, 3) rows: the component is the flat (row-major) index.
        for c in range(6):
            ir.scatter_add(acc23, r, w[i] * (c + 1), c)
        acc23.scatter_add(r + 1, 1000, component=5)  # to the next row
    return ir.trace(body, {"row": ir.In("i32"), "v": ir.In("f32", (3,)), "w": ir.In("i32")},
                    {"acc3": ir.Accum("f32", (3,)), "acc23": ir.Accum("i32", (2, 3))}, name="vec_accum")


@pytest.mark.parametrize("lanes", LANES)
def test_accum_with_item_shape_and_component(lanes):
    rng = np.random.default_rng(3)
    n = 50_001
    row = rng.integers(-1, ROWS + 1, n).astype(np.int32)  # includes -1 and 7: dropped
    v = (rng.integers(-512, 512, (n, 3)) / 64.0).astype(np.float32)  # sums exact in f32
    w = rng.integers(-100, 100, n).astype(np.int32)
    out = run(vector_accum_kernel(), (n,), lanes, accum_rows={"acc3": ROWS, "acc23": ROWS}, row=row, v=v, w=w)
    acc3, acc23 = np.asarray(out["acc3"]), np.asarray(out["acc23"])
    assert acc3.shape == (ROWS, 3) and acc23.shape == (ROWS, 2, 3)
    ok = (row >= 0) & (row < ROWS)
    ref3 = np.zeros((ROWS, 3), np.float64)
    np.add.at(ref3, row[ok], v[ok].astype(np.float64))
    np.testing.assert_array_equal(acc3, ref3.astype(np.float32))
    ref23 = np.zeros((ROWS, 6), np.int64)
    np.add.at(ref23, row[ok], w[ok, None].astype(np.int64) * np.arange(1, 7))
    nxt = row.astype(np.int64) + 1
    ok2 = (nxt >= 0) & (nxt < ROWS)
    np.add.at(ref23[:, 5], nxt[ok2], 1000)
    np.testing.assert_array_equal(acc23.reshape(ROWS, 6), ref23)


def test_accum_misuse_is_rejected_at_trace_time():
    spec_in = {"x": ir.In("f32")}
    with pytest.raises(ir.IRError, match="component"):
        ir.trace(lambda x, a: a.scatter_add(0, x[0], component=3), spec_in, {"a": ir.Accum("f32", (3,))})
    with pytest.raises(ir.IRError):
        ir.trace(lambda x, a: a.scatter_add(0, x[0]), spec_in, {"a": ir.Accum("i32")})  # f32 into i32
    with pytest.raises(ir.IRError):
        ir.trace(lambda x, a: a.scatter_add(x[0], 1.0), spec_in, {"a": ir.Accum("f32")})  # float row
    with pytest.raises(ir.IRError):
        ir.Accum("bool")


# ---------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------

# Instance -> material type. Types 1 and 0 are each shared by several instances.
TYPES = (1, 0, 1, 2, 0, 1, 2)
N_INST = len(TYPES)


def diffuse(params, calls):
    def f(inst, x):
        p = params[inst]
        calls.scatter_add(0, 1)
        return {"v": p[0] * x + p[1], "tag": ir.Int(10)}
    return f


def conductor(params, calls):
    def f(inst, x):
        p = params[inst]
        calls.scatter_add(1, 1)
        return {"v": p[0] * (x * x) - p[2], "tag": ir.Int(20)}
    return f


def dielectric(params, calls):
    def f(inst, x):
        p = params[inst]
        calls.scatter_add(2, 1)
        # A loop inside a case: three halvings of p3.
        h = ir.fori_loop(0, 3, lambda k, s: s * 0.5, p[3])
        return {"v": ir.sqrt(abs(x)) * h + p[1], "tag": 30}  # literal promotes to Int
    return f


MATERIALS = (diffuse, conductor, dielectric)


def material_ref(t, p, x):
    p = p.astype(np.float32)
    if t == 0:
        return p[..., 0] * x + p[..., 1], 10
    if t == 1:
        return p[..., 0] * (x * x) - p[..., 2], 20
    h = p[..., 3] * np.float32(0.5) * np.float32(0.5) * np.float32(0.5)
    return np.sqrt(np.abs(x)) * h + p[..., 1], 30


def _material_kernel(mode: str) -> ir.Kernel:
    def body(params, inst, x, calls):
        i = ir.item_index()
        impls = [m(params, calls) for m in MATERIALS]
        if mode == "types":
            branches = [impls[t] for t in TYPES]
        elif mode == "same":
            branches = [impls[0]] * N_INST
        elif mode == "same_lambdas":  # distinct Python functions, identical code
            branches = [diffuse(params, calls) for _ in range(N_INST)]
        elif mode == "per_instance_constants":  # each instance becomes its own code
            branches = [(lambda inst, x, c=c: {"v": x * float(c + 2), "tag": ir.Int(c)}) for c in range(N_INST)]
        elif mode.startswith("const"):
            branches = [impls[t] for t in TYPES]
            return ir.dispatch(int(mode[5:]), branches, inst[i], x[i])
        else:
            raise AssertionError(mode)
        return ir.dispatch(inst[i], branches, inst[i], x[i])

    return ir.trace(body, {"params": ir.In("f32", (4,)), "inst": ir.In("u32"), "x": ir.In("f32")},
                    {"v": ir.Out("f32"), "tag": ir.Out("i32"), "calls": ir.Accum("i32")},
                    name=f"materials_{mode}")


material_kernel = functools.cache(_material_kernel)


def dispatch_nodes(text: str) -> list[dict]:
    """Every dispatch node of a printed graph: its instance -> region table,
    and per region its kind and the number of values it yields."""
    lines = text.splitlines()
    out = []
    for k, line in enumerate(lines):
        m = re.match(r"^(\s*)%\d+:None = dispatch\[(.*)\]\((.*)\)$", line)
        if not m:
            continue
        pad = m.group(1)
        (table,) = ast.literal_eval("(" + m.group(2) + ",)")
        kinds, yields = [], []
        for line2 in lines[k + 1:]:
            if not line2.startswith(pad + "  "):
                break
            r = re.match(re.escape(pad) + r"  region (\d+) \((\w+)\):$", line2)
            if r:
                assert int(r.group(1)) == len(kinds)
                kinds.append(r.group(2))
                yields.append(None)
            elif line2.startswith(pad + "    yield"):
                rest = line2[len(pad) + len("    yield"):].strip()
                yields[-1] = len(rest.split(",")) if rest else 0
        out.append({"table": tuple(table), "kinds": kinds, "yields": yields})
    return out


def material_data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    params = rng.uniform(-2, 2, (N_INST, 4)).astype(np.float32)
    inst = rng.integers(0, N_INST, n).astype(np.uint32)
    x = rng.uniform(-3, 3, n).astype(np.float32)
    return params, inst, x


def expected_materials(types, params, inst, x):
    eff = np.minimum(inst.astype(np.int64), len(types) - 1)  # out of range: the last instance
    v = np.zeros(len(x), np.float32)
    tag = np.zeros(len(x), np.int32)
    calls = np.zeros(3, np.int64)
    for t in set(types):
        sel = np.array([types[e] for e in eff]) == t
        vv, tt = material_ref(t, params[eff[sel]], x[sel])
        v[sel], tag[sel] = vv, tt
        calls[t] = sel.sum()
    return v, tag, calls


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("seed", [0, 1])
def test_dispatch_materials_match_numpy(seed, lanes):
    params, inst, x = material_data(seed, 20_011)
    if seed == 1:  # out-of-range instance indices are clamped to the last instance
        inst[::7] = np.array([7, 8, 1000, 2 ** 31, 2 ** 32 - 1], np.uint32)[np.arange(len(inst[::7])) % 5]
    out = run(material_kernel("types"), (len(x),), lanes, accum_rows={"calls": 3}, params=params, inst=inst, x=x)
    v, tag, calls = expected_materials(TYPES, params, inst, x)
    np.testing.assert_array_equal(np.asarray(out["v"]), v)
    np.testing.assert_array_equal(np.asarray(out["tag"]), tag)
    # Exactly one case ran per item: per-type call counts.
    np.testing.assert_array_equal(np.asarray(out["calls"]), calls)


@pytest.mark.parametrize("lanes", LANES)
def test_dispatch_out_of_range_index_runs_last_instance(lanes):
    params, _, x = material_data(5, 67)
    for bad in (7, 8, 123456, 2 ** 32 - 1):
        inst = np.full(67, bad, np.uint32)
        out = run(material_kernel("types"), (67,), lanes, accum_rows={"calls": 3}, params=params, inst=inst, x=x)
        v, _ = material_ref(TYPES[-1], params[np.full(67, N_INST - 1)], x)
        np.testing.assert_array_equal(np.asarray(out["v"]), v)
        np.testing.assert_array_equal(np.asarray(out["tag"]), np.full(67, 30))
        np.testing.assert_array_equal(np.asarray(out["calls"]), [0, 0, 67])


@functools.cache
def bounce_kernel() -> ir.Kernel:
    """A megakernel pattern: a loop whose body dispatches on a per-iteration
    instance (which may be out of range), with a data-dependent trip count."""
    def body(params, inst, x, nb, calls):
        i = ir.item_index()
        impls = [m(params, calls) for m in MATERIALS]
        branches = [impls[t] for t in TYPES]

        def step(k, s):
            acc, tags = s
            j = (inst[i] + ir.cast(k, "u32") * 3) % 9  # 7 and 8 are out of range
            r = ir.dispatch(j, branches, j, x[i] + acc * 0.25)
            return acc + r["v"], tags + r["tag"]

        acc, tags = ir.fori_loop(0, nb[i], step, (ir.Float(0.0), ir.Int(0)))
        return {"v": acc, "tag": tags}

    return ir.trace(body, {"params": ir.In("f32", (4,)), "inst": ir.In("u32"), "x": ir.In("f32"),
                           "nb": ir.In("i32")},
                    {"v": ir.Out("f32"), "tag": ir.Out("i32"), "calls": ir.Accum("i32")}, name="bounce")


@pytest.mark.parametrize("lanes", LANES)
def test_dispatch_inside_loop_with_divergent_instances(lanes):
    params, inst, x = material_data(17, 3001)
    nb = np.random.default_rng(17).integers(0, 6, len(x)).astype(np.int32)
    out = run(bounce_kernel(), (len(x),), lanes, accum_rows={"calls": 3}, params=params, inst=inst, x=x, nb=nb)
    v_ref = np.zeros(len(x), np.float32)
    tag_ref = np.zeros(len(x), np.int64)
    calls = np.zeros(3, np.int64)
    for i in range(len(x)):
        acc, tags = np.float32(0.0), 0
        for k in range(nb[i]):
            j = (int(inst[i]) + 3 * k) % 9
            e = min(j, N_INST - 1)
            t = TYPES[e]
            v, tag = material_ref(t, params[e], np.float32(x[i] + acc * np.float32(0.25)))
            acc, tags = np.float32(acc + v), tags + tag
            calls[t] += 1
        v_ref[i], tag_ref[i] = acc, tags
    np.testing.assert_array_equal(np.asarray(out["v"]), v_ref)
    np.testing.assert_array_equal(np.asarray(out["tag"]), tag_ref)
    np.testing.assert_array_equal(np.asarray(out["calls"]), calls)


def test_dispatch_emits_each_unique_implementation_once():
    k = material_kernel("types")
    (node,) = dispatch_nodes(k.text)
    table = node["table"]
    assert len(node["kinds"]) == len(set(TYPES)) == 3
    assert node["kinds"] == ["case"] * 3
    assert node["yields"] == [2, 2, 2]  # (tag, v) from each case
    assert len(table) == N_INST
    assert sorted(set(table)) == [0, 1, 2]
    # Instances share a region exactly when they share a material type.
    for a in range(N_INST):
        for b in range(N_INST):
            assert (table[a] == table[b]) == (TYPES[a] == TYPES[b])
    # Each implementation's code appears once: one sqrt and one loop
    # (dielectric), one call counter per material.
    assert k.text.count(" = sqrt(") == 1
    assert k.text.count(" = loop(") == 1
    assert k.text.count("scatter_add") == 3


def test_dispatch_does_not_merge_different_code():
    k = material_kernel("per_instance_constants")
    (node,) = dispatch_nodes(k.text)
    assert len(node["kinds"]) == N_INST and node["table"] == tuple(range(N_INST))
    params, inst, x = material_data(7, 5000)
    inst[:10] = 99
    out = launch(k, (len(x),), accum_rows={"calls": 3}, params=params, inst=inst, x=x)
    eff = np.minimum(inst, N_INST - 1)
    np.testing.assert_array_equal(np.asarray(out["v"]), x * (eff + 2).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(out["tag"]), eff)


@pytest.mark.parametrize("mode", ["same", "same_lambdas"])
def test_dispatch_with_identical_branches_emits_no_dispatch_node(mode):
    k = material_kernel(mode)
    assert dispatch_nodes(k.text) == []
    assert " = dispatch" not in k.text
    params, inst, x = material_data(11, 3000)
    inst[:5] = 1000
    out = launch(k, (len(x),), accum_rows={"calls": 3}, params=params, inst=inst, x=x)
    v, tag, calls = expected_materials((0,) * N_INST, params, inst, x)
    np.testing.assert_array_equal(np.asarray(out["v"]), v)
    np.testing.assert_array_equal(np.asarray(out["tag"]), tag)
    np.testing.assert_array_equal(np.asarray(out["calls"]), calls)


@pytest.mark.parametrize("index", [0, 3, 6, 7, 50])
def test_dispatch_with_constant_index_inlines_the_branch(index):
    k = material_kernel(f"const{index}")
    assert " = dispatch" not in k.text
    t = TYPES[min(index, N_INST - 1)]
    assert (" = sqrt(" in k.text) == (t == 2)
    assert k.text.count("scatter_add") == 1
    params, inst, x = material_data(13, 2000)
    out = launch(k, (len(x),), accum_rows={"calls": 3}, params=params, inst=inst, x=x)
    # The branch of instance `index` runs, reading the parameters of each item's inst.
    v, tag = material_ref(t, params[inst], x)
    np.testing.assert_array_equal(np.asarray(out["v"]), v)
    np.testing.assert_array_equal(np.asarray(out["tag"]), np.full(len(x), tag))
    calls = np.zeros(3, np.int64)
    calls[t] = len(x)
    np.testing.assert_array_equal(np.asarray(out["calls"]), calls)


def test_dispatch_unused_results_are_removed():
    def body(params, inst, x, calls):
        i = ir.item_index()
        impls = [m(params, calls) for m in MATERIALS]
        r = ir.dispatch(inst[i], [impls[t] for t in TYPES], inst[i], x[i])
        return {"v": r["v"], "tag": 0}
    k = ir.trace(body, {"params": ir.In("f32", (4,)), "inst": ir.In("u32"), "x": ir.In("f32")},
                 {"v": ir.Out("f32"), "tag": ir.Out("i32"), "calls": ir.Accum("i32")})
    (node,) = dispatch_nodes(k.text)
    assert node["yields"] == [1, 1, 1]  # only v is left; tag is gone from every case
    assert " = sqrt(" in k.text  # dielectric's v still needs it


def test_dispatch_index_must_be_integer():
    def body(params, inst, x, calls):
        i = ir.item_index()
        impls = [m(params, calls) for m in MATERIALS]
        return ir.dispatch(x[i], impls, inst[i], x[i])
    with pytest.raises(ir.IRError, match="index"):
        ir.trace(body, {"params": ir.In("f32", (4,)), "inst": ir.In("u32"), "x": ir.In("f32")},
                 {"v": ir.Out("f32"), "tag": ir.Out("i32"), "calls": ir.Accum("i32")})
    with pytest.raises(ir.IRError):
        ir.trace(lambda x: ir.dispatch(ir.UInt(0) + ir.cast(x[0], "u32"), [], x[0]),
                 {"x": ir.In("f32")}, {"y": ir.Out("f32")})
