"""Kernel-IR autodiff: symbolic-zero pruning, buffer tangents and gradients
(scatter-add under contention), dispatch under both transforms, custom
derivatives, detach. Random programs against JAX are in
test_autodiff_random.py."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.ir.graph import walk
from jaxrender.primitives import launch


def ops_of(kernel: ir.Kernel) -> list:
    return [n for n in walk(kernel.block)]


# -- symbolic zeros ------------------------------------------------------------

def test_zero_tangent_generates_no_code_for_the_other_input():
    def body(x, y, dx):
        i = ir.item_index()
        out, dout = ir.jvp(lambda a, b: ir.sin(a) * ir.cos(b), (x[i], y[i]), (dx[i], None))
        return {"out": out, "dout": dout}

    k = ir.trace(body, {"x": ir.In("f32"), "y": ir.In("f32"), "dx": ir.In("f32")},
                 {"out": ir.Out("f32"), "dout": ir.Out("f32")})
    nodes = ops_of(k)
    y_read = next(n for n in nodes if n.op == "gather" and n.attrs[0] == 1)
    # Primal sin(x), cos(y); tangent cos(x) only. d/dy would need sin(y).
    assert sum(n.op == "sin" for n in nodes) == 1
    assert sum(n.op == "cos" for n in nodes) == 2
    assert not any(n.op == "sin" and n.args[0] is y_read for n in nodes)
    x = np.linspace(-1, 1, 7).astype(np.float32)
    y = np.linspace(0, 2, 7).astype(np.float32)
    out = launch(k, (7,), x=x, y=y, dx=np.full(7, 2, np.float32))
    np.testing.assert_allclose(np.asarray(out["dout"]), 2 * np.cos(x) * np.cos(y), rtol=1e-6, atol=1e-7)


def test_inactive_loop_state_gets_no_tangent():
    def body(x, dx):
        i = ir.item_index()

        def f(a):
            def step(s):
                k, acc, unrelated = s
                return k + 1, acc * a, unrelated * 1.5 + 1.0
            _, acc, unrelated = ir.while_loop(lambda s: s[0] < 3, step, (0, 1.0, 0.5))
            return acc + unrelated

        out, dout = ir.jvp(f, (x[i],), (dx[i],))
        return {"out": out, "dout": dout}

    k = ir.trace(body, {"x": ir.In("f32"), "dx": ir.In("f32")}, {"out": ir.Out("f32"), "dout": ir.Out("f32")})
    (loop,) = [n for n in ops_of(k) if n.op == "loop"]
    assert len(loop.args) == 4  # counter, acc, unrelated + the tangent of acc only
    x = np.array([0.5, 2.0], np.float32)
    out = launch(k, (2,), x=x, dx=np.ones(2, np.float32))
    np.testing.assert_allclose(np.asarray(out["dout"]), 3 * x ** 2, rtol=1e-6)


# -- buffers: tangents in, gradients out ---------------------------------------

def _shade(params, row, w):
    """A small 'material': the parameter row is (albedo, roughness)."""
    albedo, rough = params[row]
    return albedo * ir.exp(-rough * w) + rough * rough


@functools.cache
def buffer_kernels():
    def forward(params, dparams, rows, ws):
        i = ir.item_index()
        row, w = rows[i], ws[i]
        out, dout = ir.jvp(lambda ww: _shade(params, row, ww), (w,), (None,), buffer_tangents={params: dparams})
        return {"out": out, "dout": dout}

    def reverse(params, rows, ws, cts, grad):
        i = ir.item_index()
        row, w = rows[i], ws[i]
        _, pullback = ir.vjp(lambda ww: _shade(params, row, ww), w, buffer_grads={params: grad})
        (dw,) = pullback(cts[i])
        return {"dw": dw}

    fk = ir.trace(forward, {"params": ir.In("f32", (2,)), "dparams": ir.In("f32", (2,)),
                            "rows": ir.In("i32"), "ws": ir.In("f32")},
                  {"out": ir.Out("f32"), "dout": ir.Out("f32")}, name="shade_fwd")
    rk = ir.trace(reverse, {"params": ir.In("f32", (2,)), "rows": ir.In("i32"), "ws": ir.In("f32"),
                            "cts": ir.In("f32")}, {"dw": ir.Out("f32"), "grad": ir.Accum("f32", (2,))},
                  name="shade_rev")
    return fk, rk


def shade_data(n=50_000, rows=5, seed=0):
    r = np.random.default_rng(seed)
    params = r.uniform(0.1, 1.0, (rows, 2)).astype(np.float32)
    return params, r.integers(0, rows, n).astype(np.int32), r.uniform(0, 2, n).astype(np.float32)


def test_buffer_tangent_is_a_read_of_the_tangent_buffer():
    fk, _ = buffer_kernels()
    params, rows, ws = shade_data(1000)
    dparams = np.random.default_rng(1).standard_normal(params.shape).astype(np.float32)
    out = launch(fk, (len(ws),), params=params, dparams=dparams, rows=rows, ws=ws)
    a, r = params[rows, 0], params[rows, 1]
    da, dr = dparams[rows, 0], dparams[rows, 1]
    expect = da * np.exp(-r * ws) + a * np.exp(-r * ws) * (-ws) * dr + 2 * r * dr
    np.testing.assert_allclose(np.asarray(out["dout"]), expect, rtol=2e-5, atol=2e-6)
    # And against central differences in float64.
    eps = 1e-3

    def f(p):
        return p[rows, 0].astype(np.float64) * np.exp(-p[rows, 1] * ws.astype(np.float64)) + p[rows, 1] ** 2

    fd = (f(params.astype(np.float64) + eps * dparams) - f(params.astype(np.float64) - eps * dparams)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(out["dout"]), fd, rtol=1e-3, atol=1e-4)


def test_buffer_gradient_scatter_add_under_contention():
    _, rk = buffer_kernels()
    params, rows, ws = shade_data(200_000, rows=5)
    cts = np.random.default_rng(2).uniform(-1, 1, len(ws)).astype(np.float32)
    out = launch(rk, (len(ws),), accum_rows={"grad": len(params)}, params=params, rows=rows, ws=ws, cts=cts)
    a, r = params[rows, 0].astype(np.float64), params[rows, 1].astype(np.float64)
    w, c = ws.astype(np.float64), cts.astype(np.float64)
    per_lane = np.stack([c * np.exp(-r * w), c * (a * np.exp(-r * w) * -w + 2 * r)], axis=1)
    ref = np.zeros((len(params), 2))
    np.add.at(ref, rows, per_lane)
    got = np.asarray(out["grad"], np.float64)
    # 40k float32 atomic adds per row in arbitrary order: error bound ~ n * eps * sum|terms|.
    bound = 40_000 * 2 ** -24 * np.abs(per_lane).sum() / len(params) + 1e-3
    assert np.all(np.abs(got - ref) < bound), (got, ref)
    np.testing.assert_allclose(got, ref, rtol=2e-3)
    np.testing.assert_allclose(np.asarray(out["dw"]), c * (a * np.exp(-r * w) * -r), rtol=2e-5, atol=1e-6)


def test_dot_product_buffer_tangent_vs_gradient():
    """<J dp, ct> == <dp, J^T ct> with J the map params -> per-item outputs."""
    fk, rk = buffer_kernels()
    params, rows, ws = shade_data(4096)
    r = np.random.default_rng(5)
    dp = r.standard_normal(params.shape).astype(np.float32)
    ct = r.standard_normal(len(ws)).astype(np.float32)
    jdp = np.asarray(launch(fk, (len(ws),), params=params, dparams=dp, rows=rows, ws=ws)["dout"], np.float64)
    jtct = np.asarray(launch(rk, (len(ws),), accum_rows={"grad": len(params)}, params=params, rows=rows,
                             ws=ws, cts=ct)["grad"], np.float64)
    lhs = np.dot(jdp, ct)
    rhs = np.sum(dp * jtct)
    assert abs(lhs - rhs) <= 1e-4 * (np.abs(jdp * ct).sum() + 1.0)


# -- dispatch ------------------------------------------------------------------

def _diffuse(p, inst, w):
    return p[inst] * (1.0 - w)


def _glossy(p, inst, w):
    return ir.exp(-p[inst] * w)


def _plastic(p, inst, w):
    return p[inst] * p[inst] + w


@functools.cache
def dispatch_kernels():
    types = [0, 1, 2, 0, 1, 2, 0]

    def material(pa, pb, pc, inst, w):
        impls = [lambda: _diffuse(pa, inst, w), lambda: _glossy(pb, inst, w), lambda: _plastic(pc, inst, w)]
        return ir.dispatch(inst, [impls[t] for t in types])

    def fwd(pa, pb, pc, da, db, dc, inst, ws):
        i = ir.item_index()
        out, dout = ir.jvp(lambda w: material(pa, pb, pc, inst[i], w), (ws[i],), (None,),
                           buffer_tangents={pa: da, pb: db, pc: dc})
        return {"out": out, "dout": dout}

    def rev(pa, pb, pc, inst, ws, ga, gb, gc):
        i = ir.item_index()
        _, pullback = ir.vjp(lambda w: material(pa, pb, pc, inst[i], w), ws[i],
                             buffer_grads={pa: ga, pb: gb, pc: gc})
        (dw,) = pullback(1.0)
        return {"dw": dw}

    p = {k: ir.In("f32") for k in ("pa", "pb", "pc")}
    fk = ir.trace(fwd, {**p, **{k: ir.In("f32") for k in ("da", "db", "dc")}, "inst": ir.In("u32"),
                        "ws": ir.In("f32")}, {"out": ir.Out("f32"), "dout": ir.Out("f32")}, name="disp_fwd")
    rk = ir.trace(rev, {**p, "inst": ir.In("u32"), "ws": ir.In("f32")},
                  {"dw": ir.Out("f32"), **{k: ir.Accum("f32") for k in ("ga", "gb", "gc")}}, name="disp_rev")
    return fk, rk, types


def test_dispatch_differentiated_once_per_implementation_and_routed():
    fk, rk, types = dispatch_kernels()
    for k in (fk, rk):
        disp = [n for n in ops_of(k) if n.op == "dispatch"]
        assert disp and all(len(n.regions) == 3 for n in disp)  # 7 instances, 3 implementations
    r = np.random.default_rng(3)
    n = 3000
    pa, pb, pc = (r.uniform(0.2, 1.0, 7).astype(np.float32) for _ in range(3))
    da, db, dc = (r.standard_normal(7).astype(np.float32) for _ in range(3))
    inst = r.integers(0, 7, n).astype(np.uint32)
    ws = r.uniform(0, 1, n).astype(np.float32)
    out = launch(fk, (n,), pa=pa, pb=pb, pc=pc, da=da, db=db, dc=dc, inst=inst, ws=ws)
    t = np.asarray(types)[inst]
    expect = np.select([t == 0, t == 1, t == 2],
                       [da[inst] * (1 - ws), np.exp(-pb[inst] * ws) * -ws * db[inst], 2 * pc[inst] * dc[inst]])
    np.testing.assert_allclose(np.asarray(out["dout"]), expect, rtol=1e-5, atol=1e-6)
    g = launch(rk, (n,), accum_rows={"ga": 7, "gb": 7, "gc": 7}, pa=pa, pb=pb, pc=pc, inst=inst, ws=ws)
    ref = {k: np.zeros(7) for k in ("ga", "gb", "gc")}
    np.add.at(ref["ga"], inst[t == 0], (1 - ws)[t == 0])
    np.add.at(ref["gb"], inst[t == 1], (np.exp(-pb[inst] * ws) * -ws)[t == 1])
    np.add.at(ref["gc"], inst[t == 2], (2 * pc[inst])[t == 2])
    for key in ref:
        np.testing.assert_allclose(np.asarray(g[key]), ref[key], rtol=1e-4, atol=1e-4)
        # A buffer only receives gradient from instances of its own type.
        assert np.all(np.asarray(g[key])[[j for j in range(7) if types[j] != "abc".index(key[1])]] == 0)
    dw = np.select([t == 0, t == 1, t == 2], [-pa[inst], np.exp(-pb[inst] * ws) * -pb[inst], np.ones(n)])
    np.testing.assert_allclose(np.asarray(g["dw"]), dw, rtol=1e-5, atol=1e-6)


# -- custom derivatives and detach -----------------------------------------------

@ir.custom_derivative
def safe_norm(x, y):
    return ir.sqrt(x * x + y * y)


@safe_norm.defjvp
def _safe_norm_jvp(primals, tangents):
    x, y = primals
    n = safe_norm(x, y)
    inv = ir.select(n > 0.0, 1.0 / n, 0.0)
    return n, (x * tangents[0] + y * tangents[1]) * inv


@ir.custom_derivative
def clipped(x):
    return ir.minimum(ir.maximum(x, 0.0), 1.0)


@clipped.defvjp
def _clipped_vjp(primals, outputs, cts):
    return (cts[0],)  # straight-through estimator


@functools.cache
def custom_kernel():
    def body(x, y):
        i = ir.item_index()
        xi, yi = x[i], y[i]
        n, dn = ir.jvp(safe_norm, (xi, yi), (1.0, 0.0))
        _, pb = ir.vjp(safe_norm, xi, yi)
        gx, gy = pb(1.0)
        c, dc = ir.jvp(clipped, (xi,), (1.0,))
        _, pbc = ir.vjp(clipped, xi)
        (gc,) = pbc(1.0)
        d, dd = ir.jvp(lambda a: a * ir.detach(a * a), (xi,), (1.0,))
        return {"dn": dn, "gx": gx, "gy": gy, "dc": dc, "gc": gc, "dd": dd}
    names = ("dn", "gx", "gy", "dc", "gc", "dd")
    return ir.trace(body, {"x": ir.In("f32"), "y": ir.In("f32")}, {k: ir.Out("f32") for k in names})


@pytest.mark.parametrize("lanes", [1, None])
def test_custom_forward_rule_serves_both_modes(lanes):
    x = np.array([0.0, 3.0, -1.0, 0.5], np.float32)
    y = np.array([0.0, 4.0, 0.0, 2.0], np.float32)
    out = {k: np.asarray(v) for k, v in launch(custom_kernel(), (4,), x=x, y=y, simd_lanes=lanes).items()}
    norm = np.hypot(x, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_x = np.where(norm > 0, x / norm, 0.0)
        ref_y = np.where(norm > 0, y / norm, 0.0)
    np.testing.assert_allclose(out["dn"], ref_x, rtol=1e-6)
    np.testing.assert_allclose(out["gx"], ref_x, rtol=1e-6)   # transposed custom jvp rule
    np.testing.assert_allclose(out["gy"], ref_y, rtol=1e-6)
    assert np.all(np.isfinite(out["gx"]))                     # no NaN at the origin
    # Forward mode differentiates the body of `clipped` (it has no jvp rule);
    # on a tie min/max pick their first operand, x, so the slope at 0 is 1.
    np.testing.assert_array_equal(out["dc"], ((x >= 0) & (x <= 1)).astype(np.float32))
    # ...reverse mode uses its custom vjp (straight-through).
    np.testing.assert_array_equal(out["gc"], np.ones(4, np.float32))
    # detach: d/dx [x * stop(x^2)] = x^2
    np.testing.assert_array_equal(out["dd"], x * x)


def test_custom_rule_that_is_not_linear_in_tangents_is_rejected_in_reverse():
    @ir.custom_derivative
    def f(x):
        return x * 2.0

    @f.defjvp
    def _(primals, tangents):
        return f(primals[0]), tangents[0] * tangents[0]

    def body(x):
        _, pb = ir.vjp(f, x[ir.item_index()])
        return pb(1.0)[0]

    with pytest.raises(ir.IRError, match="not linear|multiplies two tangents"):
        ir.trace(body, {"x": ir.In("f32")}, {"g": ir.Out("f32")})


def test_bad_buffer_maps_are_rejected():
    def body(x, y, g):
        ir.jvp(lambda a: x[a], (ir.item_index(),), (None,), buffer_tangents={x: y})
        return 0.0

    with pytest.raises(ir.IRError, match="same item_shape"):
        ir.trace(body, {"x": ir.In("f32", (2,)), "y": ir.In("f32")}, {"o": ir.Out("f32"), "g": ir.Accum("f32")})


def test_function_without_rules_differentiates_its_body_in_both_modes():
    plain = ir.custom_derivative(lambda x, y: ir.cond(x > y, lambda: x * ir.sin(y), lambda: y * y + x))

    def body(x, y):
        i = ir.item_index()
        _, dx = ir.jvp(plain, (x[i], y[i]), (1.0, 0.0))
        _, pb = ir.vjp(plain, x[i], y[i])
        gx, gy = pb(1.0)
        return {"dx": dx, "gx": gx, "gy": gy}

    k = ir.trace(body, {"x": ir.In("f32"), "y": ir.In("f32")}, {n: ir.Out("f32") for n in ("dx", "gx", "gy")})
    assert any(n.op == "call" for n in ops_of(k))
    x = np.array([2.0, -1.0, 0.3], np.float32)
    y = np.array([1.0, 0.5, 0.7], np.float32)
    out = {n: np.asarray(v) for n, v in launch(k, (3,), x=x, y=y).items()}
    big = x > y
    np.testing.assert_allclose(out["dx"], np.where(big, np.sin(y), 1.0), rtol=1e-6)
    np.testing.assert_allclose(out["gx"], np.where(big, np.sin(y), 1.0), rtol=1e-6)
    np.testing.assert_allclose(out["gy"], np.where(big, x * np.cos(y), 2 * y), rtol=1e-6)


def test_tangents_must_mirror_primals():
    def body(x):
        v = x[ir.item_index()]
        ir.jvp(lambda a, b: a * b, (v, v), (1.0,))
        return v

    with pytest.raises(ir.IRError, match="tangents must mirror the primals"):
        ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")})


def test_jvp_of_jvp_gives_second_derivative():
    def body(x):
        v = x[ir.item_index()]

        def df(a):
            return ir.jvp(lambda b: ir.sin(b) * b, (a,), (1.0,))[1]

        return ir.jvp(df, (v,), (1.0,))[1]

    k = ir.trace(body, {"x": ir.In("f32")}, {"d2": ir.Out("f32")})
    x = np.linspace(-1, 1, 9).astype(np.float32)
    np.testing.assert_allclose(np.asarray(launch(k, (9,), x=x)["d2"]), 2 * np.cos(x) - x * np.sin(x),
                               rtol=1e-5, atol=1e-6)
