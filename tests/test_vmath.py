"""The CPU's inline double-precision sin, cos, atan, atan2, asin, acos, exp and log
(lowering/vmath.py). Their ulp bounds are checked with every other
transcendental in test_ir_ops.py; here: the one-lane and the SIMD packet code
compute the same bits, including the lanes that fall back to the C library."""
from __future__ import annotations

import numpy as np
import pytest

from jaxrender import ir

from lanes import run


def _inputs(op, rng):
    special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 1.0000001, -0.9999999]
    if op in ("asin", "acos"):
        x = np.concatenate([rng.uniform(-1, 1, 4000), 1 - np.exp(rng.uniform(-16, -1, 500)), special])
    elif op == "exp":
        x = np.concatenate([rng.uniform(-110, 100, 4000), rng.uniform(-1, 1, 500), special])
    else:
        x = np.concatenate([rng.uniform(-10, 10, 4000), rng.uniform(-1e7, 1e7, 500),
                            np.exp(rng.uniform(-80, 80, 500)) * rng.choice([-1, 1], 500), special])
    return x.astype(np.float32)


@pytest.mark.parametrize("op", ["sin", "cos", "atan", "asin", "acos", "atan2", "exp", "log"])
def test_same_bits_in_one_lane_and_packets(op):
    rng = np.random.default_rng(0)
    x = _inputs(op, rng)
    y = rng.permutation(x)
    if op == "atan2":
        fn = lambda a, b: ir.atan2(a, b)
    else:
        f1 = getattr(ir, op)
        fn = lambda a, b: f1(a)

    def body(x, y):
        i = ir.item_index()
        return {"out": fn(x[i], y[i])}
    k = ir.trace(body, {"x": ir.In("f32"), "y": ir.In("f32")}, {"out": ir.Out("f32")})
    one = np.asarray(run(k, (len(x),), lanes=1, x=x, y=y)["out"])
    packed = np.asarray(run(k, (len(x),), x=x, y=y)["out"])
    assert one.tobytes() == packed.tobytes()
    if op == "atan2":
        ref = np.arctan2(x.astype(np.float64), y.astype(np.float64))
    else:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ref = getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}.get(op, op))(x.astype(np.float64))
    # NaN exactly where the exact function is NaN
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.array_equal(np.isnan(one), np.isnan(ref.astype(np.float32)))
