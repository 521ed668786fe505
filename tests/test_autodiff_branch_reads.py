"""Reverse mode through a branch (cond / dispatch) whose only active values
are reads of a differentiated buffer made inside the branch: the reverse
branch must still be emitted, so the reads scatter-add their gradient (a
texture lookup inside a branch of the path kernel's shading is this case)."""
from __future__ import annotations

import numpy as np

from jaxrender import ir
from jaxrender.primitives import launch


def _kernel(op: str):
    def rev(tex, idx, ws, grad):
        i = ir.item_index()
        k = idx[i]

        def f(w):
            if op == "cond":
                # The gather happens inside the taken branch; nothing active is captured.
                v = ir.cond(k >= 0, lambda: tex[k] * tex[k + 1], lambda: ir.Float(0.0))
            else:
                v = ir.dispatch(k % 2, [lambda: tex[k] * 2.0, lambda: tex[k] * tex[k]])
            return v * w

        _, pullback = ir.vjp(f, ws[i], buffer_grads={tex: grad})
        (dw,) = pullback(1.0)
        return {"dw": dw}

    return ir.trace(rev, {"tex": ir.In("f32"), "idx": ir.In("i32"), "ws": ir.In("f32")},
                    {"dw": ir.Out("f32"), "grad": ir.Accum("f32")}, name=f"branch_reads_{op}")


def test_cond_with_buffer_reads_only_inside_scatters_gradients():
    r = np.random.default_rng(0)
    tex = r.uniform(0.5, 2.0, 9).astype(np.float32)
    idx = r.integers(-2, 8, 500).astype(np.int32)
    ws = r.uniform(0, 1, 500).astype(np.float32)
    out = launch(_kernel("cond"), (500,), {"grad": 9}, tex=tex, idx=idx, ws=ws)
    expect = np.zeros(9)
    on = idx >= 0
    np.add.at(expect, idx[on], ws[on] * tex[idx[on] + 1])
    np.add.at(expect, idx[on] + 1, ws[on] * tex[idx[on]])
    np.testing.assert_allclose(np.asarray(out["grad"]), expect, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out["dw"]), np.where(on, tex[np.maximum(idx, 0)] * tex[np.clip(idx + 1, 0, 8)], 0),
                               rtol=1e-6)


def test_dispatch_with_buffer_reads_only_inside_scatters_gradients():
    r = np.random.default_rng(1)
    tex = r.uniform(0.5, 2.0, 6).astype(np.float32)
    idx = r.integers(0, 6, 400).astype(np.int32)
    ws = r.uniform(0, 1, 400).astype(np.float32)
    out = launch(_kernel("dispatch"), (400,), {"grad": 6}, tex=tex, idx=idx, ws=ws)
    expect = np.zeros(6)
    np.add.at(expect, idx, ws * np.where(idx % 2 == 0, 2.0, 2.0 * tex[idx]))
    np.testing.assert_allclose(np.asarray(out["grad"]), expect, rtol=1e-5)
