"""The JAX bridge: jit, vmap, scan, validation before launch, in-kernel errors,
thread-count independence, and no recompilation when only values change."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrender import ir
from jaxrender.lowering import stats
from jaxrender.primitives import launch


@functools.cache
def affine_kernel() -> ir.Kernel:
    """y[i] = a[i % len(a)] * s + b[i] (row i of b is a 3-vector)."""
    def body(a, b, s):
        i = ir.item_index()
        ai = a[i % a.len]
        b0, b1, b2 = b[i]
        sv = s.value
        return {"y": (ai * sv + b0, ai * sv + b1, ai * sv + b2), "n": ir.cast(a.len, "i32")}
    return ir.trace(body, {"a": ir.In("f32"), "b": ir.In("f32", (3,)), "s": ir.Scalar("f32")},
                    {"y": ir.Out("f32", (3,)), "n": ir.Out("i32")}, name="affine")


def affine_ref(a, b, s, n):
    i = np.arange(n)
    ai = a[i % len(a)]
    return (ai * np.float32(s))[:, None] + b[np.minimum(i, len(b) - 1)]


@functools.cache
def histogram_kernel() -> ir.Kernel:
    def body(x, w, hist):
        i = ir.item_index()
        hist.scatter_add(x[i], w[i])
    return ir.trace(body, {"x": ir.In("i32"), "w": ir.In("f32")}, {"hist": ir.Accum("f32")}, name="hist")


@functools.cache
def checked_kernel() -> ir.Kernel:
    def body(x):
        v = x[ir.item_index()]
        ir.check(v >= 0.0, "x must be non-negative")
        return ir.sqrt(v)
    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="checked_sqrt")


def rng_arrays(n=37, m=29, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal(n).astype(np.float32), r.standard_normal((m, 3)).astype(np.float32)


def test_eager_matches_numpy():
    a, b = rng_arrays()
    out = launch(affine_kernel(), (50,), a=a, b=b, s=np.float32(1.5))
    np.testing.assert_array_equal(np.asarray(out["y"]), affine_ref(a, b, 1.5, 50))
    assert out["y"].shape == (50, 3) and out["n"].dtype == jnp.int32
    assert np.all(np.asarray(out["n"]) == len(a))


def test_python_scalar_input_takes_declared_dtype():
    a, b = rng_arrays()
    out = launch(affine_kernel(), (5,), a=a, b=b, s=2)["y"]
    np.testing.assert_array_equal(np.asarray(out), affine_ref(a, b, 2.0, 5))


def test_jit_with_traced_values():
    a, b = rng_arrays()
    f = jax.jit(lambda a, b, s: launch(affine_kernel(), (40,), a=a, b=b, s=s)["y"])
    for s in (0.5, -3.0):
        np.testing.assert_array_equal(np.asarray(f(a, b, np.float32(s))), affine_ref(a, b, s, 40))


def test_vmap_partial_batching_and_nesting():
    a, b = rng_arrays()
    ss = np.array([0.5, 1.0, 2.0], np.float32)
    bs = np.stack([b, b * 2, b * 3])
    # Only s batched: the buffers are shared, not copied per batch element.
    f = jax.vmap(lambda s: launch(affine_kernel(), (20,), a=a, b=b, s=s)["y"])
    got = np.asarray(f(ss))
    for k, s in enumerate(ss):
        np.testing.assert_array_equal(got[k], affine_ref(a, b, s, 20))
    # Nested vmap with different in_axes: outer over b (axis 0), inner over s.
    g = jax.vmap(jax.vmap(lambda bb, s: launch(affine_kernel(), (10,), a=a, b=bb, s=s)["y"],
                          in_axes=(None, 0)), in_axes=(0, None))
    got = np.asarray(g(bs, ss))
    assert got.shape == (3, 3, 10, 3)
    for i in range(3):
        for j in range(3):
            np.testing.assert_array_equal(got[i, j], affine_ref(a, bs[i], ss[j], 10))
    # Batch axis not in front.
    h = jax.vmap(lambda aa: launch(affine_kernel(), (8,), a=aa, b=b, s=np.float32(1))["y"], in_axes=1)
    a2 = np.stack([a, -a], axis=1)
    got = np.asarray(h(a2))
    np.testing.assert_array_equal(got[1], affine_ref(-a, b, 1.0, 8))


def test_vmap_is_one_launch():
    a, b = rng_arrays()
    ss = np.arange(4, dtype=np.float32)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda s: launch(affine_kernel(), (20,), a=a, b=b, s=s)["y"]))(ss)
    calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "jaxrender_kernel"]
    assert len(calls) == 1 and calls[0].params["batch_shape"] == (4,)
    assert not any(e.primitive.name in ("while", "scan") for e in jaxpr.jaxpr.eqns)


def test_vmap_accumulators_are_per_batch():
    x = np.array([0, 1, 1, 3, 9, -1], np.int32)
    ws = np.stack([np.ones(6, np.float32), np.arange(6, dtype=np.float32)])
    f = jax.vmap(lambda w: launch(histogram_kernel(), (6,), accum_rows={"hist": 4}, x=x, w=w)["hist"])
    got = np.asarray(f(ws))
    for k in range(2):
        ref = np.zeros(4, np.float32)
        ok = (x >= 0) & (x < 4)  # out-of-range rows are dropped
        np.add.at(ref, x[ok], ws[k][ok])
        np.testing.assert_array_equal(got[k], ref)


def test_scan():
    a, b = rng_arrays()

    def step(carry, s):
        y = launch(affine_kernel(), (6,), a=a, b=b, s=s)["y"]
        return carry + y.sum(), y[0, 0]

    total, firsts = jax.lax.scan(step, jnp.float32(0), jnp.arange(5, dtype=jnp.float32))
    ref = [affine_ref(a, b, s, 6) for s in range(5)]
    np.testing.assert_allclose(float(total), sum(r.sum() for r in ref), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(firsts), [r[0, 0] for r in ref])


def test_empty_buffer_reads_zero_and_has_length_zero():
    out = launch(affine_kernel(), (3,), a=np.zeros(0, np.float32), b=np.ones((2, 3), np.float32), s=1.0)
    np.testing.assert_array_equal(np.asarray(out["n"]), 0)
    np.testing.assert_array_equal(np.asarray(out["y"]), 1.0)


@pytest.mark.parametrize("lanes", [1, 8])
def test_empty_rows_read_zero_batched_and_compile_to_one_xla_op(lanes):
    # Empty inputs reach the handler unpadded; its zero row serves every
    # batch element and every component of the row.
    a, b = rng_arrays(5, 4)
    f = jax.vmap(lambda a, b: launch(affine_kernel(), (6,), a=a, b=b, s=2.0, simd_lanes=lanes)["y"])
    out = f(np.stack([a, a + 1]), np.zeros((2, 0, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.stack([affine_ref(a, np.zeros((1, 3), np.float32), 2.0, 6),
                                                             affine_ref(a + 1, np.zeros((1, 3), np.float32), 2.0, 6)]))
    hlo = jax.jit(lambda b: launch(affine_kernel(), (3,), a=a, b=b, s=1.0)["y"]).lower(
        np.zeros((0, 3), np.float32)).compile().as_text()
    assert "broadcast" not in hlo and "fusion" not in hlo, hlo  # nothing but the custom call to compile


def test_handler_rejects_a_buffer_of_another_size_naming_it():
    """XLA hands the handler buffers; each must have the element count the
    launch info promises, else an error names it (never a read past it)."""
    from jaxrender.lowering import cpu
    from jaxrender.primitives import kernel_call as kc
    k = affine_kernel()
    a, b = rng_arrays(5, 4)
    target = cpu.compile_kernel(k, 0, cpu.simd_lanes()).target_name
    info = kc._launch_info(k, [a.shape, b.shape, ()], (4,), (), (), ((), (), ()), 1, pad_empty=False)
    info32 = jnp.asarray(info.view(np.int32))

    def call(a, b, y_rows=4):
        out = [jax.ShapeDtypeStruct((y_rows, 3), np.float32), jax.ShapeDtypeStruct((4,), np.int32)]
        return np.asarray(jax.ffi.ffi_call(target, out)(info32, a, b, np.float32(2.0))[0])
    np.testing.assert_array_equal(call(a, b), affine_ref(a, b, 2.0, 4))
    with pytest.raises(Exception, match="input 'a' has a different number of elements"):
        call(a[:4], b)
    with pytest.raises(Exception, match="input 'b' has a different number of elements"):
        call(a, b[:3])
    with pytest.raises(Exception, match="result 'y' has a different number of elements"):
        call(a, b, y_rows=5)


def test_values_and_sizes_never_recompile():
    a, b = rng_arrays()
    launch(affine_kernel(), (10,), a=a, b=b, s=1.0)["y"].block_until_ready()
    before = stats["compiled"] + stats["disk_hits"]
    for n, m, s in ((5, 7, 2.0), (100, 3, -1.0), (1, 1, 0.0)):
        aa, bb = rng_arrays(n, m, seed=n)
        out = launch(affine_kernel(), (n + 3,), a=aa, b=bb, s=s)["y"]
        np.testing.assert_array_equal(np.asarray(out), affine_ref(aa, bb, s, n + 3))
    jax.jit(lambda s: launch(affine_kernel(), (9,), a=a, b=b, s=s)["y"])(np.float32(3)).block_until_ready()
    assert stats["compiled"] + stats["disk_hits"] == before


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_results_identical_for_any_thread_count(threads):
    r = np.random.default_rng(1)
    a = r.standard_normal(5000).astype(np.float32)
    b = r.standard_normal((5000, 3)).astype(np.float32)
    ref = np.asarray(launch(affine_kernel(), (4099,), a=a, b=b, s=0.3, num_threads=1)["y"])
    got = np.asarray(launch(affine_kernel(), (4099,), a=a, b=b, s=0.3, num_threads=threads)["y"])
    assert got.tobytes() == ref.tobytes()


# -- bad input -----------------------------------------------------------------

BAD_CASES = [
    (dict(a=np.zeros(4, np.float64)), "'a' must have dtype float32"),
    (dict(a=np.zeros((4, 1), np.float32)), "'a' must be 1-D"),
    (dict(b=np.zeros((4, 2), np.float32)), "'b' must have shape (rows, 3)"),
    (dict(b=np.zeros(4, np.float32)), "'b' must have shape"),
    (dict(s=np.zeros(2, np.float32)), "'s' must be a scalar"),
    (dict(s=np.int32(1)), "'s' must have dtype float32"),
    (dict(extra=np.zeros(1)), "unknown input(s) ['extra']"),
]


@pytest.mark.parametrize("override, message", BAD_CASES)
def test_bad_inputs_raise_before_launch(override, message):
    a, b = rng_arrays()
    kwargs = dict(a=a, b=b, s=np.float32(1))
    kwargs.update(override)
    before = dict(stats)
    with pytest.raises(ValueError) as err:
        launch(affine_kernel(), (4,), **kwargs)
    assert message in str(err.value)
    assert "affine" in str(err.value)
    assert stats == before  # nothing compiled or launched


def test_bad_inputs_raise_under_jit_and_vmap():
    a, b = rng_arrays()
    with pytest.raises(ValueError, match="'b' must have shape"):
        jax.jit(lambda bb: launch(affine_kernel(), (4,), a=a, b=bb, s=1.0))(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="'a' must be 1-D"):
        jax.vmap(lambda aa: launch(affine_kernel(), (4,), a=aa, b=b, s=1.0))(np.zeros((2, 3, 3), np.float32))


def test_missing_input_and_accum_rows():
    a, b = rng_arrays()
    with pytest.raises(ValueError, match="missing input 's'"):
        launch(affine_kernel(), (4,), a=a, b=b)
    with pytest.raises(ValueError, match="accumulator 'hist' needs its row count"):
        launch(histogram_kernel(), (4,), x=np.zeros(4, np.int32), w=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="launch_shape"):
        launch(affine_kernel(), (-1,), a=a, b=b, s=1.0)
    with pytest.raises(ValueError, match="num_threads"):
        launch(affine_kernel(), (4,), a=a, b=b, s=1.0, num_threads=0)


def test_failed_check_becomes_python_exception():
    x = np.array([1.0, 4.0, -2.0, 9.0], np.float32)
    with pytest.raises(Exception, match="x must be non-negative") as err:
        np.asarray(launch(checked_kernel(), (4,), x=x)["y"])
    assert "checked_sqrt" in str(err.value)
    with pytest.raises(Exception, match="x must be non-negative"):
        jax.jit(lambda x: launch(checked_kernel(), (4,), x=x)["y"])(x).block_until_ready()
    # The process is fine afterwards, and valid input works.
    np.testing.assert_array_equal(np.asarray(launch(checked_kernel(), (4,), x=np.abs(x))["y"]),
                                  np.sqrt(np.abs(x)))


def test_no_derivative_rule_yet_is_a_clear_error():
    a, b = rng_arrays()
    with pytest.raises(NotImplementedError, match="jaxrender_kernel"):
        jax.grad(lambda s: launch(affine_kernel(), (4,), a=a, b=b, s=s)["y"].sum())(1.0)


def test_empty_launches_and_batches():
    a, b = rng_arrays()
    assert launch(affine_kernel(), (0,), a=a, b=b, s=1.0)["y"].shape == (0, 3)
    assert launch(affine_kernel(), (2, 0), a=a, b=b, s=1.0)["y"].shape == (2, 0, 3)
    f = jax.vmap(lambda s: launch(affine_kernel(), (3,), a=a, b=b, s=s)["y"])
    assert f(np.zeros(0, np.float32)).shape == (0, 3, 3)
    assert np.asarray(launch(histogram_kernel(), (3,), accum_rows={"hist": 0}, x=np.zeros(3, np.int32),
                             w=np.ones(3, np.float32))["hist"]).shape == (0,)
